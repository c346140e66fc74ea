//! Typed views of `trigger_config`. HTTP is typed as Spin's `spin-http` crate defines it
//! (`HttpTriggerConfig { component, static_response, route, executor }`); every other
//! trigger type is kept as [`TriggerConfig::Other`] with its JSON, so a runtime that learns
//! a new trigger (Redis, MQTT, cron, command) adds a variant here without touching the
//! lock types.

use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::locked::LockedTrigger;
use crate::ordered::OrderedMap;

/// Trigger type of the HTTP trigger.
pub const HTTP: &str = "http";

/// The configuration of one trigger, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerConfig {
    /// `trigger_type = "http"`.
    Http(HttpTriggerConfig),
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
        match trigger.trigger_type.as_str() {
            HTTP => serde_json::from_value(trigger.trigger_config.clone())
                .map(TriggerConfig::Http)
                .map_err(|e| anyhow!("http trigger `{}`: key `trigger_config`: {e}", trigger.id)),
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
            TriggerConfig::Other { config, .. } => config.get("component").and_then(Value::as_str),
        }
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
            HttpExecutor::Wagi { argv } => {
                m.insert("argv".into(), argv.clone().into());
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
                            "wagi `argv` must be a string, found {other}"
                        )))
                    }
                };
                m.remove("entrypoint");
                if let Some(k) = m.keys().next() {
                    return Err(D::Error::custom(format!("unknown wagi executor key `{k}`")));
                }
                Ok(HttpExecutor::Wagi { argv })
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
            trigger_type: "redis".into(),
            trigger_config: json!({"channel": "x", "component": "c"}),
            trigger_dependencies: Default::default(),
        })
        .unwrap();
        assert_eq!(other.component(), Some("c"));
        assert!(
            matches!(other, TriggerConfig::Other { ref trigger_type, .. } if trigger_type == "redis")
        );
    }
}
