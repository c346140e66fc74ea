//! Typed views of `trigger_config` and of the app-wide trigger settings
//! (`[application.trigger.<type>]`, locked as `metadata.triggers.<type>`), each as its owner
//! defines it:
//! - `http`: Spin's `spin-http` crate (`HttpTriggerConfig { component, static_response,
//!   route, executor }`);
//! - `redis`: Spin's `trigger-redis` crate (`[application.trigger.redis] address`,
//!   `[[trigger.redis]] component, channel, address?`);
//! - `mqtt`: the spin-trigger-mqtt plugin (`[application.trigger.mqtt] address, username,
//!   password, keep_alive_interval`, `[[trigger.mqtt]] component, topic, qos`);
//! - `cron`: the spin-trigger-cron plugin (`[[trigger.cron]] component, cron_expression`);
//! - `command`: the spin-trigger-command plugin (`[[trigger.command]] component`);
//! - `sqs`: the spin-trigger-sqs plugin (`[[trigger.sqs]] component, queue_url,
//!   max_messages, idle_wait_seconds, system_attributes, message_attributes`);
//! - `nats`: this runtime's NATS trigger, shaped after the Redis and MQTT ones
//!   (`[application.trigger.nats] address`, `[[trigger.nats]] component, subject,
//!   queue_group, address, jetstream = { stream, consumer, durable }`).
//!
//! Any other trigger type is kept as [`TriggerConfig::Other`] with its JSON.

use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::locked::LockedTrigger;
use crate::ordered::OrderedMap;
use crate::untrusted::{json_error, shown};

/// Trigger type of the HTTP trigger.
pub const HTTP: &str = "http";
/// Trigger type of the Redis trigger.
pub const REDIS: &str = "redis";
/// Trigger type of the MQTT trigger plugin.
pub const MQTT: &str = "mqtt";
/// Trigger type of the cron trigger plugin.
pub const CRON: &str = "cron";
/// Trigger type of the command trigger plugin.
pub const COMMAND: &str = "command";
/// Trigger type of the SQS trigger plugin.
pub const SQS: &str = "sqs";
/// Trigger type of the NATS trigger.
pub const NATS: &str = "nats";

/// The configuration of one trigger, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerConfig {
    /// `trigger_type = "http"`.
    Http(HttpTriggerConfig),
    /// `trigger_type = "redis"`.
    Redis(RedisTriggerConfig),
    /// `trigger_type = "mqtt"`.
    Mqtt(MqttTriggerConfig),
    /// `trigger_type = "cron"`.
    Cron(CronTriggerConfig),
    /// `trigger_type = "command"`.
    Command(CommandTriggerConfig),
    /// `trigger_type = "sqs"`.
    Sqs(SqsTriggerConfig),
    /// `trigger_type = "nats"`.
    Nats(NatsTriggerConfig),
    /// Any other trigger type, untyped.
    Other {
        /// The trigger type.
        trigger_type: String,
        /// Its `trigger_config` as written.
        config: Value,
    },
}

impl TriggerConfig {
    /// The typed configuration of `trigger`; errors name the trigger and the key.
    pub fn of(trigger: &LockedTrigger) -> anyhow::Result<TriggerConfig> {
        fn typed<T: serde::de::DeserializeOwned>(trigger: &LockedTrigger) -> anyhow::Result<T> {
            serde_json::from_value(trigger.trigger_config.clone()).map_err(|e| {
                anyhow!(
                    "{t} trigger `{}` ([[trigger.{t}]]): {}",
                    shown(&trigger.id),
                    json_error(&e),
                    t = shown(&trigger.trigger_type),
                )
            })
        }
        match trigger.trigger_type.as_str() {
            HTTP => serde_json::from_value(trigger.trigger_config.clone())
                .map(TriggerConfig::Http)
                .map_err(|e| {
                    anyhow!(
                        "http trigger `{}`: key `trigger_config`: {}",
                        shown(&trigger.id),
                        json_error(&e)
                    )
                }),
            REDIS => typed(trigger).map(TriggerConfig::Redis),
            MQTT => typed(trigger).map(TriggerConfig::Mqtt),
            CRON => typed(trigger).map(TriggerConfig::Cron),
            COMMAND => typed(trigger).map(TriggerConfig::Command),
            SQS => typed(trigger).map(TriggerConfig::Sqs),
            NATS => typed(trigger).map(TriggerConfig::Nats),
            other => Ok(TriggerConfig::Other {
                trigger_type: other.to_string(),
                config: trigger.trigger_config.clone(),
            }),
        }
    }

    /// The component the trigger runs, if it names one.
    pub fn component(&self) -> Option<&str> {
        match self {
            TriggerConfig::Http(h) => h.component.as_deref(),
            TriggerConfig::Redis(r) => Some(&r.component),
            TriggerConfig::Mqtt(m) => Some(&m.component),
            TriggerConfig::Cron(c) => Some(&c.component),
            TriggerConfig::Command(c) => Some(&c.component),
            TriggerConfig::Sqs(c) => Some(&c.component),
            TriggerConfig::Nats(c) => Some(&c.component),
            TriggerConfig::Other { config, .. } => config.get("component").and_then(Value::as_str),
        }
    }
}

/// `[[trigger.redis]]` as Spin's Redis trigger reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisTriggerConfig {
    /// The component handling messages (it exports `fermyon:spin/inbound-redis`).
    pub component: String,
    /// The channel to subscribe to (may hold `{{ variable }}` templates).
    pub channel: String,
    /// The server, overriding `[application.trigger.redis] address` (may hold templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// `[application.trigger.redis]`: the default server of every Redis trigger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisTriggerMetadata {
    /// A `redis://host:port` URL (may hold `{{ variable }}` templates).
    #[serde(default)]
    pub address: String,
}

/// `[[trigger.mqtt]]` as the spin-trigger-mqtt plugin reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttTriggerConfig {
    /// The component handling messages (it exports `handle-message` of
    /// `spin:mqtt-trigger`'s `spin-mqtt` world).
    pub component: String,
    /// The topic (filter) to subscribe to (may hold `{{ variable }}` templates).
    pub topic: String,
    /// QoS of the subscription: `"0"`, `"1"` or `"2"` (the plugin writes a string; a number
    /// is accepted too).
    #[serde(deserialize_with = "string_or_number")]
    pub qos: String,
}

/// `[application.trigger.mqtt]`: the broker and session settings of every MQTT trigger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttTriggerMetadata {
    /// `mqtt://host:port` (may hold templates).
    #[serde(default)]
    pub address: String,
    /// User name; empty for none (may hold templates).
    #[serde(default)]
    pub username: String,
    /// Password (may hold templates).
    #[serde(default)]
    pub password: String,
    /// Keep-alive interval in seconds, as a string (`"30"`) as the plugin writes it.
    #[serde(default, deserialize_with = "string_or_number")]
    pub keep_alive_interval: String,
}

/// `[[trigger.cron]]` as the spin-trigger-cron plugin reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CronTriggerConfig {
    /// The component run on each tick (it exports `handle-cron-event` of
    /// `fermyon:spin-cron@2.0.0`).
    pub component: String,
    /// Six fields with seconds first (`sec min hour day-of-month month day-of-week`), e.g.
    /// `"*/2 * * * * *"`.
    pub cron_expression: String,
}

/// `[[trigger.command]]` as the spin-trigger-command plugin reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandTriggerConfig {
    /// The component whose `wasi:cli/run` is run.
    pub component: String,
}

/// `[[trigger.sqs]]` as the spin-trigger-sqs plugin reads it (no app-wide settings: the
/// AWS region, endpoint and credentials come from the environment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqsTriggerConfig {
    /// The component handling messages (it exports `handle-queue-message` of
    /// `fermyon:spin-sqs@2.0.0`'s `spin-sqs` world).
    pub component: String,
    /// The queue, e.g. `https://sqs.us-east-1.amazonaws.com/123456789012/orders`.
    pub queue_url: String,
    /// Messages fetched per ReceiveMessage call (the plugin's default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u16>,
    /// How long an empty queue is waited on (the plugin's default 2 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_wait_seconds: Option<u64>,
    /// System attributes to fetch (`All`, `SentTimestamp`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_attributes: Option<Vec<String>>,
    /// Message attributes to fetch (`All` or names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_attributes: Option<Vec<String>>,
}

/// `[[trigger.nats]]`: one subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsTriggerConfig {
    /// The component handling messages (it exports
    /// `spin:nats-trigger/inbound-nats@0.1.0`).
    pub component: String,
    /// The subject (wildcards `*` and `>` allowed; may hold `{{ variable }}` templates).
    pub subject: String,
    /// Core NATS queue group: each message goes to one member of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_group: Option<String>,
    /// The server, overriding `[application.trigger.nats] address` (may hold templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Consume through a JetStream pull consumer instead of a core subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jetstream: Option<NatsJetStream>,
}

/// `jetstream = { stream, consumer?, durable? }` of a `[[trigger.nats]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsJetStream {
    /// The stream holding the subject.
    pub stream: String,
    /// An existing consumer of the stream to pull from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// A durable pull consumer created (or reused) under this name, filtered on `subject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable: Option<String>,
}

/// `[application.trigger.nats]`: the default server of every NATS trigger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsTriggerMetadata {
    /// `nats://host:4222` or `tls://host:4222` (may hold templates and `user:password@`).
    #[serde(default)]
    pub address: String,
}

/// A string, or a number written where the owner expects its string form.
fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(D::Error::custom(format!(
            "expected a string such as \"1\", found {other}"
        ))),
    }
}

/// `[[trigger.http]]` as Spin reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpTriggerConfig {
    /// The component handling requests (absent for a static response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// A response the host sends itself, without a component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_response: Option<StaticResponse>,
    /// The route.
    pub route: HttpRoute,
    /// The executor the component needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<HttpExecutor>,
}

/// `route = "/path"` or `route = { private = true }` (Spin's `HttpTriggerRouteConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpRoute {
    /// A public route such as `/hello`, `/users/:id` or `/static/...`, as written.
    Path(String),
    /// Reachable only by service chaining, never from outside.
    Private,
}

impl Serialize for HttpRoute {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HttpRoute::Path(p) => s.serialize_str(p),
            HttpRoute::Private => serde_json::json!({ "private": true }).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for HttpRoute {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::String(p) => Ok(HttpRoute::Path(p)),
            Value::Object(m) if m.len() == 1 && m.get("private") == Some(&Value::Bool(true)) => {
                Ok(HttpRoute::Private)
            }
            other => Err(D::Error::custom(format!(
                "`route` must be a path such as \"/...\" or {{ private = true }}, found {other}"
            ))),
        }
    }
}

/// Spin's default WAGI entry point (a WASI command's `_start`).
pub const WAGI_DEFAULT_ENTRYPOINT: &str = "_start";

/// `executor = { type = ".." }`. `http` (alias `spin`, the default) and `wagi` are Spin's;
/// any other type is kept with its settings so a runtime can name it in its refusal.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpExecutor {
    /// The component exports `wasi:http/incoming-handler` or `fermyon:spin/inbound-http`.
    Http,
    /// The WAGI CGI executor.
    Wagi {
        /// `argv` template (Spin's default `${SCRIPT_NAME} ${ARGS}`).
        argv: String,
        /// The module's entry point ([`WAGI_DEFAULT_ENTRYPOINT`] unless the manifest says
        /// otherwise; deprecated in Spin, which always runs the command's `run`).
        entrypoint: String,
    },
    /// Another executor type (e.g. a newer Spin's).
    Other {
        /// Its `type`.
        executor_type: String,
        /// Its other keys.
        config: serde_json::Map<String, Value>,
    },
}

impl HttpExecutor {
    /// The `type` as written.
    pub fn type_name(&self) -> &str {
        match self {
            HttpExecutor::Http => "http",
            HttpExecutor::Wagi { .. } => "wagi",
            HttpExecutor::Other { executor_type, .. } => executor_type,
        }
    }
}

impl Serialize for HttpExecutor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = serde_json::Map::new();
        match self {
            HttpExecutor::Http => {}
            HttpExecutor::Wagi { argv, entrypoint } => {
                m.insert("argv".into(), argv.clone().into());
                if entrypoint != WAGI_DEFAULT_ENTRYPOINT {
                    m.insert("entrypoint".into(), entrypoint.clone().into());
                }
            }
            HttpExecutor::Other { config, .. } => m.extend(config.clone()),
        }
        m.insert("type".into(), self.type_name().into());
        m.serialize(s)
    }
}

impl<'de> Deserialize<'de> for HttpExecutor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut m = serde_json::Map::<String, Value>::deserialize(d)?;
        let Some(Value::String(t)) = m.remove("type") else {
            return Err(D::Error::custom("`executor` needs a string `type`"));
        };
        match t.as_str() {
            "http" | "spin" if m.is_empty() => Ok(HttpExecutor::Http),
            "http" | "spin" => Err(D::Error::custom(format!(
                "executor `{t}` takes no settings, found {}",
                m.keys().cloned().collect::<Vec<_>>().join(", ")
            ))),
            "wagi" => {
                let argv = match m.remove("argv") {
                    None => "${SCRIPT_NAME} ${ARGS}".to_string(),
                    Some(Value::String(a)) => a,
                    Some(other) => {
                        return Err(D::Error::custom(format!(
                            "wagi `argv` must be a string, found {}",
                            shown(&other.to_string())
                        )))
                    }
                };
                let entrypoint = match m.remove("entrypoint") {
                    None => WAGI_DEFAULT_ENTRYPOINT.to_string(),
                    Some(Value::String(e)) => e,
                    Some(other) => {
                        return Err(D::Error::custom(format!(
                            "wagi `entrypoint` must be a string, found {}",
                            shown(&other.to_string())
                        )))
                    }
                };
                if let Some(k) = m.keys().next() {
                    return Err(D::Error::custom(format!(
                        "unknown wagi executor key `{}`",
                        shown(k)
                    )));
                }
                Ok(HttpExecutor::Wagi { argv, entrypoint })
            }
            _ => Ok(HttpExecutor::Other {
                executor_type: t,
                config: m,
            }),
        }
    }
}

/// A response the host sends without a component (Spin's `StaticResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaticResponse {
    /// Status code (200 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// Headers in manifest order.
    #[serde(default, skip_serializing_if = "OrderedMap::is_empty")]
    pub headers: OrderedMap<String>,
    /// Body text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl StaticResponse {
    /// The status to send.
    pub fn status(&self) -> u16 {
        self.status_code.unwrap_or(200)
    }
}

impl HttpTriggerConfig {
    /// Spin's rule: exactly one of `component` and `static_response`.
    pub fn check(&self, trigger_id: &str) -> anyhow::Result<()> {
        match (&self.component, &self.static_response) {
            (None, None) => bail!("http trigger `{trigger_id}` must specify either `component` or `static_response`; it has neither"),
            (Some(_), Some(_)) => bail!("http trigger `{trigger_id}` must specify either `component` or `static_response`; it has both"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn http(config: Value) -> anyhow::Result<TriggerConfig> {
        TriggerConfig::of(&LockedTrigger {
            id: "t".into(),
            trigger_type: "http".into(),
            trigger_config: config,
            trigger_dependencies: Default::default(),
        })
    }

    #[test]
    fn wagi_executor_as_spin_reads_and_locks_it() {
        let exec = |e: Value| -> Result<HttpExecutor, String> {
            serde_json::from_value(e).map_err(|e| e.to_string())
        };
        let default = exec(json!({"type": "wagi"})).unwrap();
        assert_eq!(
            default,
            HttpExecutor::Wagi {
                argv: "${SCRIPT_NAME} ${ARGS}".into(),
                entrypoint: "_start".into()
            }
        );
        assert_eq!(
            serde_json::to_value(&default).unwrap(),
            json!({"type": "wagi", "argv": "${SCRIPT_NAME} ${ARGS}"})
        );
        // Spin's loader test `wagi-custom-entrypoint`: the entry point stays in the lock.
        let custom =
            json!({"type": "wagi", "entrypoint": "custom-entrypoint", "argv": "x ${ARGS}"});
        let e = exec(custom.clone()).unwrap();
        assert_eq!(serde_json::to_value(&e).unwrap(), custom);
        assert!(exec(json!({"type": "wagi", "entrypoint": 1}))
            .unwrap_err()
            .contains("`entrypoint` must be a string"));
    }

    #[test]
    fn http_typed_others_kept() {
        let TriggerConfig::Http(h) = http(
            json!({"route": {"private": true}, "component": "c", "executor": {"type": "spin"}}),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (h.route, h.executor),
            (HttpRoute::Private, Some(HttpExecutor::Http))
        );
        let TriggerConfig::Http(h) = http(json!({"route": "/", "static_response": {"status_code": 404, "headers": {"b": "1", "a": "2"}, "body": "x"}})).unwrap() else { panic!() };
        let sr = h.static_response.unwrap();
        // A JSON object (as in a lock) is read in its key order.
        assert_eq!(sr.headers.keys().collect::<Vec<_>>(), ["a", "b"]);
        let TriggerConfig::Http(h) =
            http(json!({"route": "/", "component": "c", "executor": {"type": "wasip3-unstable"}}))
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(h.executor.unwrap().type_name(), "wasip3-unstable");
        assert!(http(json!({"route": 5, "component": "c"}))
            .unwrap_err()
            .to_string()
            .contains("route"));
        assert!(http(json!({"route": "/", "component": "c", "extra": 1})).is_err());
        let other = TriggerConfig::of(&LockedTrigger {
            id: "r".into(),
            trigger_type: "kinesis".into(),
            trigger_config: json!({"stream": "x", "component": "c"}),
            trigger_dependencies: Default::default(),
        })
        .unwrap();
        assert_eq!(other.component(), Some("c"));
        assert!(
            matches!(other, TriggerConfig::Other { ref trigger_type, .. } if trigger_type == "kinesis")
        );
    }

    fn of(trigger_type: &str, config: Value) -> anyhow::Result<TriggerConfig> {
        TriggerConfig::of(&LockedTrigger {
            id: "t".into(),
            trigger_type: trigger_type.into(),
            trigger_config: config,
            trigger_dependencies: Default::default(),
        })
    }

    #[test]
    fn event_triggers_typed_as_their_owners_define_them() {
        let TriggerConfig::Redis(r) =
            of("redis", json!({"channel": "ch", "component": "c"})).unwrap()
        else {
            panic!()
        };
        assert_eq!((r.channel.as_str(), r.address), ("ch", None));
        let TriggerConfig::Mqtt(m) = of(
            "mqtt",
            json!({"component": "c", "topic": "t/#", "qos": "1"}),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(m.qos, "1");
        let TriggerConfig::Mqtt(m) =
            of("mqtt", json!({"component": "c", "topic": "t", "qos": 2})).unwrap()
        else {
            panic!()
        };
        assert_eq!(m.qos, "2");
        let TriggerConfig::Cron(c) = of(
            "cron",
            json!({"component": "c", "cron_expression": "*/2 * * * * *"}),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.cron_expression, "*/2 * * * * *");
        assert!(matches!(
            of("command", json!({"component": "c"})).unwrap(),
            TriggerConfig::Command(_)
        ));
        // Missing and unknown keys are errors naming the trigger and the key.
        let e = of("redis", json!({"component": "c"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[[trigger.redis]]") && e.contains("channel"),
            "{e}"
        );
        let e = of(
            "cron",
            json!({"component": "c", "cron_expression": "* * * * * *", "x": 1}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `x`"), "{e}");
        let TriggerConfig::Sqs(q) = of(
            "sqs",
            json!({"component": "c", "queue_url": "http://127.0.0.1:5000/123456789012/q",
                   "max_messages": 1, "system_attributes": ["All"]}),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (q.max_messages, q.idle_wait_seconds, q.system_attributes),
            (Some(1), None, Some(vec!["All".to_string()]))
        );
        let TriggerConfig::Nats(n) = of(
            "nats",
            json!({"component": "c", "subject": "orders.>", "queue_group": "workers",
                   "jetstream": {"stream": "ORDERS", "durable": "spin"}}),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(n.jetstream.unwrap().durable.as_deref(), Some("spin"));
        let e = of("nats", json!({"component": "c"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[[trigger.nats]]") && e.contains("subject"),
            "{e}"
        );
        let meta: MqttTriggerMetadata = serde_json::from_value(json!({
            "address": "mqtt://127.0.0.1:1883", "username": "u", "password": "p",
            "keep_alive_interval": "30"
        }))
        .unwrap();
        assert_eq!(meta.keep_alive_interval, "30");
    }
}
