//! The MQTT trigger, as the spin-trigger-mqtt plugin defines it (its WIT package
//! `spin:mqtt-trigger`: the synchronous form built by spin-mqtt-sdk up to 0.7, and
//! `spin:mqtt-trigger@3.0.0` of plugin 0.8 (Spin 4), whose root `handle-message` is an
//! `async func` with the same parameters and result; both are served, as the call checks
//! only the types):
//! `[application.trigger.mqtt] address, username, password, keep_alive_interval` and
//! `[[trigger.mqtt]] component, topic, qos`; each entry has its own client connection, and
//! each message is passed to the component's root export
//! `handle-message(payload, metadata { topic }) -> result<_, error>`.
//!
//! A lost or refused connection is logged and retried with backoff; the topic is
//! subscribed again on every connection (clean session).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use rumqttc::{AsyncClient, Event, Incoming, MqttOptions, QoS};
use wasmtime::component::{ComponentType, Lift, Lower};

use super::{call, expand, find_handler, Backoff, Handler, Stop};
use crate::app::trigger_config::mqtt::{keep_alive, qos};
use crate::host::variables::Resolved;
use crate::runtime::LoadedApp;

/// The root function MQTT components export.
pub const HANDLE_MESSAGE: &str = "handle-message";

/// Requests buffered between a client handle and its event loop.
const CHANNEL_CAPACITY: usize = 100;

/// `spin-mqtt-types.metadata`.
#[derive(ComponentType, Lower, Debug, Clone)]
#[component(record)]
pub(crate) struct MqttMetadata {
    topic: String,
}

/// `spin-mqtt-types.error`.
#[derive(ComponentType, Lift, Debug, Clone)]
#[component(variant)]
pub(crate) enum MqttError {
    #[component(name = "other")]
    Other(String),
}

/// Host, port and TLS of `mqtt://host:port` (or `tcp://`; port 1883 by default) or
/// `mqtts://host:port` (or `ssl://`; TLS, port 8883 by default).
fn host_port(address: &str) -> anyhow::Result<(String, u16, bool)> {
    let url = url::Url::parse(address).map_err(|e| {
        anyhow!("MQTT address `{address}` is not a URL such as mqtt://broker:1883: {e}")
    })?;
    let (tls, default_port) = match url.scheme() {
        "mqtt" | "tcp" => (false, 1883),
        "mqtts" | "ssl" => (true, 8883),
        other => {
            bail!("MQTT address `{address}`: scheme `{other}` is not mqtt:// (or mqtts:// for TLS)")
        }
    };
    let host = url
        .host_str()
        .ok_or_else(|| anyhow!("MQTT address `{address}` has no host"))?;
    Ok((host.to_string(), url.port().unwrap_or(default_port), tls))
}

/// One `[[trigger.mqtt]]` entry, ready to connect.
pub(crate) struct Listener {
    trigger: String,
    options: MqttOptions,
    topic: String,
    qos: QoS,
    handler: Handler,
}

/// Resolves the app's MQTT triggers; fails naming the trigger and the key.
pub(crate) fn prepare(
    app: &LoadedApp,
    vars: &BTreeMap<String, Resolved>,
) -> anyhow::Result<Vec<Listener>> {
    let events = &app.app.event_triggers;
    if events.mqtt.is_empty() {
        return Ok(Vec::new());
    }
    let s = &events.mqtt_settings;
    let key = "key `application.trigger.mqtt";
    let address = expand(&s.address, vars, &format!("{key}.address`"))?;
    let username = expand(&s.username, vars, &format!("{key}.username`"))?;
    let password = expand(&s.password, vars, &format!("{key}.password`"))?;
    let keep_alive = keep_alive(&s.keep_alive_interval)?;
    let (host, port, tls) = host_port(&address)?;
    let mut out = Vec::new();
    for (n, t) in events.mqtt.iter().enumerate() {
        let what = format!("mqtt trigger `{}`", t.id);
        let topic = expand(&t.config.topic, vars, &format!("{what}: topic"))?;
        let qos = qos(&t.config.qos).map_err(|e| anyhow!("{what}: {e}"))?;
        let handler = find_handler(
            app,
            &what,
            &t.config.component,
            None,
            HANDLE_MESSAGE,
            "an MQTT component is built with spin-mqtt-sdk's #[mqtt_component] (the \
             spin:mqtt-trigger world: synchronous up to 0.7, or @3.0.0's async func from 0.8)",
        )?;
        let client_id = format!("spin-{}-{n}-{}", std::process::id(), t.id);
        let mut options = MqttOptions::new(client_id, host.clone(), port);
        options.set_keep_alive(keep_alive).set_clean_session(true);
        if tls {
            // Verified with the platform's trust store (SSL_CERT_FILE, SSL_CERT_DIR, ...).
            options.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Rustls(
                    crate::host::tls::trust_store().data.config.clone(),
                ),
            ));
        }
        if !username.is_empty() {
            options.set_credentials(username.clone(), password.clone());
        }
        out.push(Listener {
            trigger: t.id.clone(),
            options,
            topic,
            qos,
            handler,
        });
    }
    Ok(out)
}

impl Listener {
    /// Connects, subscribes and handles messages until the app stops; reconnects with
    /// backoff.
    pub(crate) async fn run(self, app: Arc<LoadedApp>, mut stop: Stop) {
        let (client, mut events) = AsyncClient::new(self.options.clone(), CHANNEL_CAPACITY);
        let broker = format!(
            "{}:{}",
            self.options.broker_address().0,
            self.options.broker_address().1
        );
        let mut backoff = Backoff::new();
        loop {
            let event = tokio::select! {
                e = events.poll() => e,
                _ = stop.wait() => {
                    let _ = client.try_disconnect();
                    return;
                }
            };
            match event {
                Ok(Event::Incoming(Incoming::ConnAck(_))) => {
                    backoff.reset();
                    if let Err(e) = client.subscribe(self.topic.clone(), self.qos).await {
                        tracing::error!(trigger = %self.trigger, "mqtt subscribe failed: {e}");
                    }
                }
                Ok(Event::Incoming(Incoming::SubAck(_))) => tracing::info!(
                    trigger = %self.trigger,
                    broker = %broker,
                    topic = %self.topic,
                    "mqtt trigger subscribed"
                ),
                Ok(Event::Incoming(Incoming::Publish(p))) => {
                    let params = (
                        p.payload.to_vec(),
                        MqttMetadata {
                            topic: p.topic.clone(),
                        },
                    );
                    let component = &self.handler.component.id;
                    match call::<_, (Result<(), MqttError>,)>(&app, &self.handler, "mqtt", params)
                        .await
                    {
                        Ok((Ok(()),)) => {
                            tracing::debug!(trigger = %self.trigger, component = %component, "message handled")
                        }
                        Ok((Err(MqttError::Other(e)),)) => tracing::error!(
                            trigger = %self.trigger,
                            component = %component,
                            "mqtt handler returned an error: {e}"
                        ),
                        Err(e) => tracing::error!(
                            trigger = %self.trigger,
                            component = %component,
                            "mqtt handler failed: {e:#}"
                        ),
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(
                        trigger = %self.trigger,
                        broker = %broker,
                        "mqtt trigger connection failed: {e}; retrying in {:?}",
                        backoff.next()
                    );
                    if !backoff.wait(&mut stop).await {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn settings() {
        assert_eq!(qos("1").unwrap(), QoS::AtLeastOnce);
        assert!(qos("3")
            .unwrap_err()
            .to_string()
            .contains("\"0\", \"1\" or \"2\""));
        assert_eq!(
            keep_alive("").unwrap(),
            crate::app::trigger_config::mqtt::DEFAULT_KEEP_ALIVE
        );
        assert_eq!(keep_alive("5").unwrap(), Duration::from_secs(5));
        assert!(keep_alive("x").is_err());
        assert_eq!(
            host_port("mqtt://127.0.0.1:1999").unwrap(),
            ("127.0.0.1".to_string(), 1999, false)
        );
        assert_eq!(host_port("mqtt://broker").unwrap().1, 1883);
        assert_eq!(
            host_port("mqtts://b").unwrap(),
            ("b".to_string(), 8883, true)
        );
        assert!(host_port("ws://b:80")
            .unwrap_err()
            .to_string()
            .contains("mqtts://"));
    }
}
