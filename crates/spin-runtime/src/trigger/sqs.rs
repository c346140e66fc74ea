//! The SQS trigger, as the spin-trigger-sqs plugin defines it (its WIT package
//! `fermyon:spin-sqs@2.0.0`, world `spin-sqs`): `[[trigger.sqs]] component, queue_url,
//! max_messages (10), idle_wait_seconds (2), system_attributes, message_attributes`
//! (`queue_url` may hold `{{ variable }}` templates, beyond the plugin). Each
//! message is passed to the component's root export
//! `handle-queue-message(message) -> result<message-action, error>`; `delete` deletes it
//! from the queue, `leave` and an error leave it to come back after its visibility
//! timeout. While a handler runs, the message's lease is renewed every half visibility
//! timeout, as the plugin does.
//!
//! Requests use SQS's JSON protocol, signed with AWS Signature V4 (the `aws-sigv4` crate,
//! through [`crate::host::aws_json`]) with credentials from the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`; region `AWS_REGION` or `AWS_DEFAULT_REGION` (else the queue URL's);
//! endpoint `AWS_ENDPOINT_URL_SQS` or `AWS_ENDPOINT_URL` (else SQS's regional one).
//!
//! Beyond the plugin: ReceiveMessage long-polls (`WaitTimeSeconds` = `idle_wait_seconds`,
//! at most 5 s), at most `max_messages` handlers run at once per queue, a failing
//! receive is retried with the triggers' backoff.
//!
//! On shutdown no new receive starts; the running handlers finish within the drain bound and
//! delete their messages. A long poll in flight at the stop is not cancelled (the server
//! would still hand its messages to the dropped request, invisible and unhandled until
//! their visibility timeout): it is awaited (at most `WaitTimeSeconds`, 5 s), and what it
//! returns is released at once (`ChangeMessageVisibilityBatch` to 0) for another consumer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use base64::Engine;
use serde_json::{json, Value};
use tokio::task::JoinSet;
use wasmtime::component::{ComponentType, Lift, Lower};

use super::{call, expand, find_handler, Backoff, Handler, Stop};
use crate::app::trigger_config::sqs::{check, max_messages, queue_url};
use crate::host::aws_json::{AwsCredentials, AwsJsonClient};
use crate::host::variables::Resolved;
use crate::runtime::LoadedApp;

/// The root function SQS components export.
pub const HANDLE_QUEUE_MESSAGE: &str = "handle-queue-message";

/// The plugin's default.
const DEFAULT_IDLE_WAIT_SECONDS: u64 = 2;
/// The longest long poll: SQS allows 20 s, the shared AWS client bounds an exchange at 10 s.
const MAX_WAIT_SECONDS: u64 = 5;
/// The lease when the queue's visibility timeout cannot be read (the plugin's default).
const DEFAULT_VISIBILITY_SECONDS: u64 = 30;

/// `sqs-types.message-attribute-value`.
#[derive(ComponentType, Lower, Debug, Clone, PartialEq)]
#[component(variant)]
pub(crate) enum MessageAttributeValue {
    #[component(name = "str")]
    Str(String),
    #[component(name = "binary")]
    Binary(Vec<u8>),
}

/// `sqs-types.message-attribute`.
#[derive(ComponentType, Lower, Debug, Clone, PartialEq)]
#[component(record)]
pub(crate) struct MessageAttribute {
    name: String,
    #[component(name = "data-type")]
    data_type: Option<String>,
    value: MessageAttributeValue,
}

/// `sqs-types.message`.
#[derive(ComponentType, Lower, Debug, Clone, PartialEq)]
#[component(record)]
pub(crate) struct Message {
    id: Option<String>,
    #[component(name = "message-attributes")]
    message_attributes: Vec<MessageAttribute>,
    body: Option<String>,
}

/// `sqs-types.error`.
#[derive(ComponentType, Lift, Debug, Clone)]
#[component(variant)]
pub(crate) enum SqsError {
    #[component(name = "other")]
    Other(String),
}

/// `sqs-types.message-action` (its values come from the guest, through `Lift`).
#[allow(dead_code)]
#[derive(ComponentType, Lift, Debug, Clone, Copy, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub(crate) enum MessageAction {
    #[component(name = "delete")]
    Delete,
    #[component(name = "leave")]
    Leave,
}

/// The first non-empty of `names` in `env`.
fn env_first<'a>(env: &'a HashMap<String, String>, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .filter_map(|n| env.get(*n))
        .map(|v| v.trim())
        .find(|v| !v.is_empty())
}

/// Where and as whom SQS is called, from the container's environment: the shared AWS JSON
/// protocol client ([`crate::host::aws_json`], also the DynamoDB store's).
pub(crate) struct SqsClient {
    client: AwsJsonClient,
    /// For logs.
    region: String,
    endpoint: String,
}

impl SqsClient {
    /// Reads credentials, region and endpoint; `queue` is the first queue (its host gives the
    /// region when none is set). Fails naming the variables to set.
    fn from_env(env: &HashMap<String, String>, queue: &url::Url) -> anyhow::Result<SqsClient> {
        let (Some(key), Some(secret)) = (
            env_first(env, &["AWS_ACCESS_KEY_ID"]),
            env_first(env, &["AWS_SECRET_ACCESS_KEY"]),
        ) else {
            bail!(
                "the SQS trigger needs AWS credentials: set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials) in the \
                 container's environment"
            );
        };
        let from_host = queue
            .host_str()
            .and_then(|h| h.strip_prefix("sqs."))
            .and_then(|h| h.strip_suffix(".amazonaws.com"))
            .map(str::to_string);
        let region = env_first(env, &["AWS_REGION", "AWS_DEFAULT_REGION"])
            .map(str::to_string)
            .or(from_host)
            .ok_or_else(|| {
                anyhow!(
                    "the SQS trigger needs the queue's AWS region: set AWS_REGION (or \
                     AWS_DEFAULT_REGION) in the container's environment"
                )
            })?;
        let endpoint = match env_first(env, &["AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"]) {
            Some(e) => e.to_string(),
            None => format!("https://sqs.{region}.amazonaws.com"),
        };
        let credentials = AwsCredentials {
            access_key: key.to_string(),
            secret_key: secret.to_string(),
            token: env_first(env, &["AWS_SESSION_TOKEN"]).map(str::to_string),
        };
        let client = AwsJsonClient::new(&endpoint, &region, "sqs", "AmazonSQS", credentials)
            .map_err(|e| {
                anyhow!("SQS endpoint (AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL) {e:#}")
            })?;
        Ok(SqsClient {
            client,
            region,
            endpoint,
        })
    }

    /// Calls `action` (`ReceiveMessage`, ...) with `body`. Errors carry SQS's error type and
    /// message.
    async fn call(&self, action: &str, body: Value) -> anyhow::Result<Value> {
        self.client
            .call(action, &body)
            .await
            .map_err(|e| anyhow!("{e}"))
    }
}

/// One `[[trigger.sqs]]` entry, ready to poll.
pub(crate) struct Queue {
    shared: Arc<Shared>,
    max_messages: u16,
    idle_wait: Duration,
    system_attributes: Vec<String>,
    message_attributes: Vec<String>,
}

/// What a queue's handler tasks share.
struct Shared {
    trigger: String,
    queue_url: String,
    client: Arc<SqsClient>,
    handler: Handler,
}

/// Resolves the app's SQS triggers; fails naming the trigger, the key or the variable.
pub(crate) fn prepare(
    app: &LoadedApp,
    vars: &BTreeMap<String, Resolved>,
    env: &HashMap<String, String>,
) -> anyhow::Result<Vec<Queue>> {
    let mut client: Option<Arc<SqsClient>> = None;
    app.app
        .event_triggers
        .sqs
        .iter()
        .map(|t| {
            let what = format!("sqs trigger `{}` ([[trigger.sqs]])", t.id);
            let url = expand(&t.config.queue_url, vars, &format!("{what}: queue_url"))?;
            let parsed = queue_url(&url).map_err(|e| anyhow!("{what}: {e}"))?;
            check(&t.config).map_err(|e| anyhow!("{what}: {e}"))?;
            let client = match &client {
                Some(c) => c.clone(),
                None => client
                    .insert(Arc::new(
                        SqsClient::from_env(env, &parsed).map_err(|e| anyhow!("{what}: {e:#}"))?,
                    ))
                    .clone(),
            };
            let handler = find_handler(
                app,
                &what,
                &t.config.component,
                None,
                HANDLE_QUEUE_MESSAGE,
                "an SQS component exports handle-queue-message of the spin-trigger-sqs plugin's \
                 `fermyon:spin-sqs@2.0.0` world (generate bindings from its sqs.wit)",
            )?;
            Ok(Queue {
                shared: Arc::new(Shared {
                    trigger: t.id.clone(),
                    queue_url: url,
                    client,
                    handler,
                }),
                max_messages: max_messages(&t.config)?,
                idle_wait: Duration::from_secs(
                    t.config
                        .idle_wait_seconds
                        .unwrap_or(DEFAULT_IDLE_WAIT_SECONDS),
                ),
                system_attributes: t.config.system_attributes.clone().unwrap_or_default(),
                message_attributes: t.config.message_attributes.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// A received message: what the guest gets and what deleting it needs.
struct Received {
    message: Message,
    receipt: Option<String>,
}

/// `ReceiveMessage`'s `Messages` as the WIT's records: system attributes first (string
/// values, no data type, as the plugin passes them), then message attributes.
fn parse_messages(reply: &Value) -> anyhow::Result<Vec<Received>> {
    let Some(list) = reply.get("Messages") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| anyhow!("`Messages` is not a list"))?;
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    list.iter()
        .map(|m| -> anyhow::Result<Received> {
            let mut attributes = Vec::new();
            if let Some(sys) = m.get("Attributes").and_then(Value::as_object) {
                for (name, value) in sys {
                    attributes.push(MessageAttribute {
                        name: name.clone(),
                        data_type: None,
                        value: MessageAttributeValue::Str(
                            value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string()),
                        ),
                    });
                }
            }
            if let Some(user) = m.get("MessageAttributes").and_then(Value::as_object) {
                for (name, a) in user {
                    let value = if let Some(s) = text(a, "StringValue") {
                        MessageAttributeValue::Str(s)
                    } else if let Some(b) = text(a, "BinaryValue") {
                        MessageAttributeValue::Binary(
                            base64::engine::general_purpose::STANDARD
                                .decode(b)
                                .with_context(|| format!("attribute `{name}`: BinaryValue is not base64"))?,
                        )
                    } else {
                        tracing::warn!(attribute = %name, "SQS message attribute without a string or binary value skipped");
                        continue;
                    };
                    attributes.push(MessageAttribute {
                        name: name.clone(),
                        data_type: text(a, "DataType"),
                        value,
                    });
                }
            }
            Ok(Received {
                message: Message {
                    id: text(m, "MessageId"),
                    message_attributes: attributes,
                    body: text(m, "Body"),
                },
                receipt: text(m, "ReceiptHandle"),
            })
        })
        .collect()
}

impl Queue {
    /// Polls the queue and runs handlers until the app stops; running handlers then finish
    /// (the caller bounds that by the drain timeout).
    pub(crate) async fn run(self, app: Arc<LoadedApp>, mut stop: Stop) {
        let s = &self.shared;
        let lease = tokio::select! {
            l = self.visibility_timeout() => l,
            _ = stop.wait() => return,
        };
        tracing::info!(
            trigger = %s.trigger,
            queue = %s.queue_url,
            endpoint = %s.client.endpoint,
            region = %s.client.region,
            "sqs trigger polling");
        let mut running: JoinSet<()> = JoinSet::new();
        let mut backoff = Backoff::new();
        let wait = self.idle_wait.min(Duration::from_secs(MAX_WAIT_SECONDS));
        'poll: while !stop.is_set() {
            while running.try_join_next().is_some() {}
            while running.len() >= usize::from(self.max_messages) {
                tokio::select! {
                    _ = running.join_next() => {}
                    _ = stop.wait() => break 'poll,
                }
            }
            let want = usize::from(self.max_messages) - running.len();
            let receiving = self.receive(want, wait);
            tokio::pin!(receiving);
            let received = tokio::select! {
                r = &mut receiving => r,
                _ = stop.wait() => {
                    tracing::info!(
                        trigger = %s.trigger,
                        queue = %s.queue_url,
                        "sqs trigger stopping: awaiting the receive in flight (at most {wait:?}) to \
                         release what it returns"
                    );
                    receiving.await
                }
            };
            match received {
                Ok(messages) if stop.is_set() => {
                    s.release(messages).await;
                    break;
                }
                Ok(messages) => {
                    backoff.reset();
                    if messages.is_empty() {
                        // Waited `wait` already; the rest of a longer idle wait, or a pause
                        // after a short poll (`idle_wait_seconds = 0`).
                        let rest = self.idle_wait.saturating_sub(wait).max(if wait.is_zero() {
                            Duration::from_millis(100)
                        } else {
                            Duration::ZERO
                        });
                        if !rest.is_zero() {
                            tokio::select! {
                                _ = tokio::time::sleep(rest) => {}
                                _ = stop.wait() => break,
                            }
                        }
                        continue;
                    }
                    tracing::debug!(trigger = %s.trigger, count = messages.len(), "sqs messages received");
                    for m in messages {
                        let (shared, app) = (s.clone(), app.clone());
                        running.spawn(async move { shared.process(&app, m, lease).await });
                    }
                }
                Err(e) => {
                    tracing::error!(
                        trigger = %s.trigger,
                        queue = %s.queue_url,
                        "sqs trigger cannot receive messages: {e:#}; retrying in {:?}",
                        backoff.next()
                    );
                    if !backoff.wait(&mut stop).await {
                        break;
                    }
                }
            }
        }
        while running.join_next().await.is_some() {}
    }

    /// The queue's visibility timeout (the lease a received message has).
    async fn visibility_timeout(&self) -> Duration {
        let s = &self.shared;
        let body = json!({"QueueUrl": s.queue_url, "AttributeNames": ["VisibilityTimeout"]});
        let secs = match s.client.call("GetQueueAttributes", body).await {
            Ok(v) => v
                .pointer("/Attributes/VisibilityTimeout")
                .and_then(Value::as_str)
                .and_then(|t| t.parse().ok()),
            Err(e) => {
                tracing::warn!(
                    trigger = %s.trigger,
                    queue = %s.queue_url,
                    "cannot read the queue's visibility timeout ({e:#}); renewing leases as for \
                     {DEFAULT_VISIBILITY_SECONDS} s"
                );
                None
            }
        };
        Duration::from_secs(secs.unwrap_or(DEFAULT_VISIBILITY_SECONDS))
    }

    async fn receive(&self, max: usize, wait: Duration) -> anyhow::Result<Vec<Received>> {
        let s = &self.shared;
        let mut body = json!({
            "QueueUrl": s.queue_url,
            "MaxNumberOfMessages": max,
            "WaitTimeSeconds": wait.as_secs(),
        });
        if !self.system_attributes.is_empty() {
            body["MessageSystemAttributeNames"] = json!(self.system_attributes);
            body["AttributeNames"] = json!(self.system_attributes);
        }
        if !self.message_attributes.is_empty() {
            body["MessageAttributeNames"] = json!(self.message_attributes);
        }
        let reply = s.client.call("ReceiveMessage", body).await?;
        parse_messages(&reply).context("the ReceiveMessage reply")
    }
}

impl Shared {
    /// Makes `messages`, received but not handled, visible again at once
    /// (`ChangeMessageVisibilityBatch` with timeout 0), so that another consumer gets them
    /// now rather than after their visibility timeout.
    async fn release(&self, messages: Vec<Received>) {
        let entries: Vec<Value> = messages
            .iter()
            .filter_map(|m| m.receipt.as_ref())
            .enumerate()
            .map(|(i, receipt)| json!({"Id": i.to_string(), "ReceiptHandle": receipt, "VisibilityTimeout": 0}))
            .collect();
        if entries.is_empty() {
            return;
        }
        let count = entries.len();
        let body = json!({"QueueUrl": self.queue_url, "Entries": entries});
        match self.client.call("ChangeMessageVisibilityBatch", body).await {
            Ok(reply) => {
                let failed = reply
                    .get("Failed")
                    .and_then(Value::as_array)
                    .filter(|f| !f.is_empty());
                match failed {
                    None => tracing::info!(
                        trigger = %self.trigger,
                        queue = %self.queue_url,
                        "sqs trigger stopping: released {count} message(s) received at the stop \
                         (visible again at once)"
                    ),
                    Some(f) => tracing::warn!(
                        trigger = %self.trigger,
                        queue = %self.queue_url,
                        "sqs trigger stopping: {} of {count} message(s) received at the stop \
                         could not be released (they come back after their visibility \
                         timeout): {}",
                        f.len(),
                        serde_json::to_string(f).unwrap_or_default()
                    ),
                }
            }
            Err(e) => tracing::warn!(
                trigger = %self.trigger,
                queue = %self.queue_url,
                "sqs trigger stopping: cannot release {count} message(s) received at the stop \
                 (they come back after their visibility timeout): {e:#}"
            ),
        }
    }

    /// Runs the handler on one message, renewing its lease meanwhile; deletes it when the
    /// handler says `delete`.
    async fn process(&self, app: &LoadedApp, m: Received, lease: Duration) {
        let id = m.message.id.clone().unwrap_or_default();
        let component = &self.handler.component.id;
        let renew = m.receipt.clone().filter(|_| lease >= Duration::from_secs(2)).map(|receipt| {
            let (client, queue, id) = (self.client.clone(), self.queue_url.clone(), id.clone());
            tokio::spawn(async move {
                let every = lease / 2;
                let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    ticks.tick().await;
                    let body = json!({"QueueUrl": queue, "ReceiptHandle": receipt,
                                      "VisibilityTimeout": lease.as_secs()});
                    if let Err(e) = client.call("ChangeMessageVisibility", body).await {
                        tracing::warn!(message = %id, "cannot renew the message's lease: {e:#}");
                    }
                }
            })
        });
        let result =
            call::<_, (Result<MessageAction, SqsError>,)>(app, &self.handler, "sqs", (m.message,))
                .await;
        if let Some(r) = renew {
            r.abort();
        }
        match result {
            Ok((Ok(MessageAction::Delete),)) => {
                let Some(receipt) = m.receipt else { return };
                let body = json!({"QueueUrl": self.queue_url, "ReceiptHandle": receipt});
                match self.client.call("DeleteMessage", body).await {
                    Ok(_) => {
                        tracing::debug!(trigger = %self.trigger, component = %component, message = %id, "message handled and deleted")
                    }
                    Err(e) => tracing::error!(
                        trigger = %self.trigger,
                        message = %id,
                        "sqs message handled but not deleted (it will be delivered again): {e:#}"
                    ),
                }
            }
            Ok((Ok(MessageAction::Leave),)) => tracing::info!(
                trigger = %self.trigger,
                component = %component,
                message = %id,
                "sqs handler left the message on the queue"
            ),
            Ok((Err(SqsError::Other(e)),)) => tracing::error!(
                trigger = %self.trigger,
                component = %component,
                message = %id,
                "sqs handler returned an error: {e}; the message stays on the queue"
            ),
            Err(e) => tracing::error!(
                trigger = %self.trigger,
                component = %component,
                message = %id,
                "sqs handler failed: {e:#}; the message stays on the queue"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spin_app_format::trigger::SqsTriggerConfig;

    /// The settings of a queue (max messages, wait) by name.
    fn settings(config: &SqsTriggerConfig) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("max", u64::from(max_messages(config).unwrap_or(0))),
            (
                "wait",
                config
                    .idle_wait_seconds
                    .unwrap_or(DEFAULT_IDLE_WAIT_SECONDS)
                    .min(MAX_WAIT_SECONDS),
            ),
        ])
    }

    fn config(url: &str, max: Option<u16>) -> SqsTriggerConfig {
        SqsTriggerConfig {
            component: "c".into(),
            queue_url: url.into(),
            max_messages: max,
            idle_wait_seconds: None,
            system_attributes: None,
            message_attributes: None,
        }
    }

    #[test]
    fn settings_are_checked_naming_the_key() {
        let ok = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders";
        assert!(check(&config(ok, None)).is_ok());
        assert_eq!(settings(&config(ok, None))["max"], 10);
        assert_eq!(settings(&config(ok, None))["wait"], 2);
        for bad in [
            "x",
            "ftp://h/1/q",
            "https://sqs.example",
            "https://h/123/q/extra",
        ] {
            let e = check(&config(bad, None)).unwrap_err().to_string();
            assert!(e.contains("queue_url") && e.contains(bad), "{e}");
        }
        let e = check(&config(ok, Some(11))).unwrap_err().to_string();
        assert!(e.contains("max_messages") && e.contains("1 to 10"), "{e}");
    }

    #[test]
    fn environment_gives_credentials_region_and_endpoint() {
        let queue = queue_url("https://sqs.eu-west-1.amazonaws.com/1/q").unwrap();
        let env = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let bad = [
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_ENDPOINT_URL", "ftp://h"),
        ];
        let e = SqsClient::from_env(&env(&bad), &queue)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("AWS_ENDPOINT_URL") && e.contains("ftp://h"),
            "{e}"
        );
        let e = SqsClient::from_env(&env(&[]), &queue)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("AWS_ACCESS_KEY_ID"), "{e}");
        let creds = [("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s")];
        let c = SqsClient::from_env(&env(&creds), &queue).unwrap();
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(c.endpoint, "https://sqs.eu-west-1.amazonaws.com");
        let mut with = creds.to_vec();
        with.extend([
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
        ]);
        let c = SqsClient::from_env(&env(&with), &queue).unwrap();
        assert_eq!(
            (c.region.as_str(), c.endpoint.as_str()),
            ("us-east-1", "http://127.0.0.1:5000")
        );
        let local = queue_url("http://127.0.0.1:5000/123456789012/q").unwrap();
        let e = SqsClient::from_env(&env(&creds), &local)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("AWS_REGION"), "{e}");
    }

    #[test]
    fn receive_message_reply_becomes_the_wit_message() {
        let reply = json!({"Messages": [{
            "MessageId": "m1", "ReceiptHandle": "r1", "Body": "hello",
            "Attributes": {"SentTimestamp": "1700000000000"},
            "MessageAttributes": {
                "colour": {"DataType": "String", "StringValue": "blue"},
                "blob": {"DataType": "Binary", "BinaryValue": "AAEC"}
            }
        }]});
        let got = parse_messages(&reply).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].receipt.as_deref(), Some("r1"));
        let m = &got[0].message;
        assert_eq!(
            (m.id.as_deref(), m.body.as_deref()),
            (Some("m1"), Some("hello"))
        );
        assert_eq!(m.message_attributes[0].name, "SentTimestamp");
        assert!(m.message_attributes.contains(&MessageAttribute {
            name: "blob".into(),
            data_type: Some("Binary".into()),
            value: MessageAttributeValue::Binary(vec![0, 1, 2]),
        }));
        assert!(parse_messages(&json!({})).unwrap().is_empty());
    }
}
