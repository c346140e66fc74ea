//! What a non-HTTP trigger's settings must be, checked when the app is loaded (so a bad
//! value is an error naming the trigger before anything runs) and parsed again by the
//! trigger that uses them.

/// `[[trigger.mqtt]]` and `[application.trigger.mqtt]`.
pub(crate) mod mqtt {
    use std::time::Duration;

    use anyhow::{anyhow, bail};
    use rumqttc::QoS;

    /// Keep-alive when `keep_alive_interval` is empty.
    pub(crate) const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(30);

    /// `qos` of a `[[trigger.mqtt]]` entry: `"0"`, `"1"` or `"2"`.
    pub(crate) fn qos(text: &str) -> anyhow::Result<QoS> {
        match text.trim() {
            "0" => Ok(QoS::AtMostOnce),
            "1" => Ok(QoS::AtLeastOnce),
            "2" => Ok(QoS::ExactlyOnce),
            other => {
                bail!("key `qos`: `{other}` is not an MQTT QoS level: use \"0\", \"1\" or \"2\"")
            }
        }
    }

    /// `keep_alive_interval` in seconds (empty: 30 s; `"0"` turns keep-alive off).
    pub(crate) fn keep_alive(text: &str) -> anyhow::Result<Duration> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(DEFAULT_KEEP_ALIVE);
        }
        text.parse::<u64>().map(Duration::from_secs).map_err(|_| {
            anyhow!(
                "key `application.trigger.mqtt.keep_alive_interval`: `{text}` is not a number of \
                 seconds such as \"30\""
            )
        })
    }
}

/// `[[trigger.cron]]`.
pub(crate) mod cron {
    use anyhow::anyhow;
    use croner::Cron;

    /// Parses a `cron_expression` as the plugin does (seconds required, day-of-month AND
    /// day-of-week).
    pub fn parse(expression: &str) -> anyhow::Result<Cron> {
        Cron::new(expression)
            .with_seconds_required()
            .with_dom_and_dow()
            .parse()
            .map_err(|e| {
                anyhow!(
                    "key `cron_expression`: `{expression}` is not a cron expression with six \
                     fields (sec min hour day-of-month month day-of-week, e.g. \"*/5 * * * * *\"): {e}"
                )
            })
    }
}

/// `[[trigger.sqs]]`.
pub(crate) mod sqs {
    use anyhow::{anyhow, bail};
    use spin_app_format::trigger::SqsTriggerConfig;

    /// The plugin's default batch.
    const DEFAULT_MAX_MESSAGES: u16 = 10;
    /// SQS's limit of messages per ReceiveMessage.
    const MAX_BATCH: u16 = 10;

    /// Checks a `[[trigger.sqs]]` entry's settings (no environment needed; a `queue_url` with
    /// `{{ variable }}` templates is checked once expanded).
    pub(crate) fn check(config: &SqsTriggerConfig) -> anyhow::Result<()> {
        if !config.queue_url.contains("{{") {
            queue_url(&config.queue_url)?;
        }
        max_messages(config)?;
        Ok(())
    }

    /// The queue URL, parsed: `http(s)://host/<account>/<queue name>`.
    pub(crate) fn queue_url(text: &str) -> anyhow::Result<url::Url> {
        let bad = |why: String| {
            anyhow!(
                "key `queue_url` = `{text}` is not an Amazon SQS queue URL such as \
                 https://sqs.us-east-1.amazonaws.com/123456789012/orders: {why}"
            )
        };
        let url = url::Url::parse(text).map_err(|e| bad(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad(format!("scheme `{}` is not https", url.scheme())));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("it has no host".into()));
        }
        let segments: Vec<&str> = url
            .path_segments()
            .map(|s| s.filter(|p| !p.is_empty()).collect())
            .unwrap_or_default();
        if segments.len() != 2 {
            return Err(bad("the path must be /<account id>/<queue name>".into()));
        }
        Ok(url)
    }

    pub(crate) fn max_messages(config: &SqsTriggerConfig) -> anyhow::Result<u16> {
        let n = config.max_messages.unwrap_or(DEFAULT_MAX_MESSAGES);
        if !(1..=MAX_BATCH).contains(&n) {
            bail!("key `max_messages` = {n}: SQS returns 1 to {MAX_BATCH} messages per request; use a value in that range");
        }
        Ok(n)
    }
}

/// `[[trigger.nats]]`.
pub(crate) mod nats {
    use anyhow::bail;
    use spin_app_format::trigger::NatsTriggerConfig;

    /// Checks a subject as NATS parses it: dot-separated non-empty tokens without spaces, `>`
    /// only as the last token.
    pub(crate) fn check_subject(subject: &str) -> anyhow::Result<()> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let bad = tokens.iter().enumerate().find_map(|(i, t)| {
            if t.is_empty() {
                Some("it has an empty token (`..`, or a leading or trailing `.`)")
            } else if t.chars().any(char::is_whitespace) {
                Some("it contains whitespace")
            } else if t.contains('>') && (*t != ">" || i + 1 != tokens.len()) {
                Some("`>` may only be the whole last token")
            } else if t.contains('*') && *t != "*" {
                Some("`*` must be a whole token")
            } else {
                None
            }
        });
        match bad {
            Some(why) => bail!(
                "key `subject` = `{subject}` is not a NATS subject such as `orders.*` or \
                 `orders.>`: {why}"
            ),
            None => Ok(()),
        }
    }

    /// Checks a `[[trigger.nats]]` entry's settings that need no variables.
    pub(crate) fn check(config: &NatsTriggerConfig) -> anyhow::Result<()> {
        if !config.subject.contains("{{") {
            check_subject(&config.subject)?;
        }
        if let Some(q) = &config.queue_group {
            if q.is_empty() || q.chars().any(char::is_whitespace) {
                bail!("key `queue_group` = `{q}`: a queue group is one word without spaces");
            }
        }
        if let Some(js) = &config.jetstream {
            if js.stream.trim().is_empty() {
                bail!("key `jetstream.stream` is empty: name the stream that holds the subject");
            }
            if js.consumer.is_some() && js.durable.is_some() {
                bail!(
                    "keys `jetstream.consumer` and `jetstream.durable` exclude each other: \
                     `consumer` names an existing consumer, `durable` one to create"
                );
            }
            if config.queue_group.is_some() {
                bail!(
                    "key `queue_group` applies to core NATS subscriptions only: JetStream \
                     consumers share their messages already; remove one of the keys"
                );
            }
        }
        Ok(())
    }
}
