//! The Redis trigger, as Spin's `trigger-redis` crate defines it: `[[trigger.redis]]`
//! entries subscribe to `channel` on `address` (default `[application.trigger.redis]
//! address`; both may hold `{{ variable }}` templates), and each message is passed to the
//! component's `handle-message` export, every component of a channel once per message,
//! messages of one server in order. Both of Spin's forms are served: Spin 2/3's
//! `fermyon:spin/inbound-redis` (spin-sdk 2 to 5, `#[redis_component]`) and Spin 4's
//! `spin:redis/inbound-redis@3.0.0` (spin-sdk 6+, `#[redis_subscriber]`), whose
//! `handle-message` is an `async func` returning `spin:redis/redis@3.0.0`'s `error`.
//!
//! Beyond Spin (whose trigger ends the app when the server goes away), a lost or refused
//! connection is logged and retried with backoff, and the channels are subscribed again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use futures::StreamExt;
use wasmtime::component::{ComponentType, Lift};

use super::{call, expand, find_handler, Backoff, Handler, Stop};
use crate::host::variables::Resolved;
use crate::runtime::LoadedApp;

/// The exported interface Redis components implement (spin-sdk's `#[redis_component]`).
pub const INBOUND_REDIS: &str = "fermyon:spin/inbound-redis";
/// Spin 4's exported interface (spin-sdk 6's `#[redis_subscriber]`, an `async func`).
pub const INBOUND_REDIS_V3: &str = "spin:redis/inbound-redis@3.0.0";

/// How long connecting and subscribing may take before it counts as a failure.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `fermyon:spin/redis-types.error` (its values come from the guest, through `Lift`).
#[allow(dead_code)]
#[derive(ComponentType, Lift, Debug, Clone, Copy, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub(crate) enum RedisError {
    #[component(name = "success")]
    Success,
    #[component(name = "error")]
    Error,
}

/// `spin:redis/redis@3.0.0`'s `error`, returned by Spin 4 handlers.
#[derive(ComponentType, Lift, Debug, Clone, PartialEq, Eq)]
#[component(variant)]
pub(crate) enum RedisErrorV3 {
    #[component(name = "invalid-address")]
    InvalidAddress,
    #[component(name = "too-many-connections")]
    TooManyConnections,
    #[component(name = "type-error")]
    TypeError,
    #[component(name = "other")]
    Other(String),
}

/// Which of Spin's Redis handler exports a component has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `fermyon:spin/inbound-redis` (Spin 2/3).
    Spin3,
    /// `spin:redis/inbound-redis@3.0.0` (Spin 4).
    Spin4,
}

/// One component subscribed to a channel.
struct Target {
    trigger: String,
    handler: Handler,
    form: Form,
}

/// The handler of component `component`: its Spin 4 export when it has one, else the
/// Spin 2/3 one; fails naming both when it has neither.
fn redis_handler(app: &LoadedApp, what: &str, component: &str) -> anyhow::Result<(Handler, Form)> {
    let has_v3 = app.component(component).is_some_and(|c| {
        c.instance_pre
            .component()
            .get_export_index(None, INBOUND_REDIS_V3)
            .is_some()
    });
    let (instance, form) = if has_v3 {
        (INBOUND_REDIS_V3, Form::Spin4)
    } else {
        (INBOUND_REDIS, Form::Spin3)
    };
    let handler = find_handler(
        app,
        what,
        component,
        Some(instance),
        "handle-message",
        "a Redis component exports fermyon:spin/inbound-redis (spin-sdk 2 to 5, \
         #[redis_component]) or spin:redis/inbound-redis@3.0.0 (spin-sdk 6+, \
         #[redis_subscriber])",
    )?;
    Ok((handler, form))
}

/// The subscriptions of one Redis server.
pub(crate) struct Subscriber {
    client: redis::Client,
    /// The address for logs (without credentials).
    shown: String,
    /// Channel -> components, in manifest order.
    channels: BTreeMap<String, Vec<Target>>,
}

/// `address` with any password left out, for logs.
fn redact(address: &str) -> String {
    match url::Url::parse(address) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => address.to_string(),
    }
}

/// Resolves the app's Redis triggers into one subscriber per server; fails naming the
/// trigger when a template does not expand, an address is not a Redis URL, or a component
/// lacks the export.
pub(crate) fn prepare(
    app: &LoadedApp,
    vars: &BTreeMap<String, Resolved>,
) -> anyhow::Result<Vec<Subscriber>> {
    let events = &app.app.event_triggers;
    let mut servers: BTreeMap<String, BTreeMap<String, Vec<Target>>> = BTreeMap::new();
    for t in &events.redis {
        let what = format!("redis trigger `{}`", t.id);
        let address_template = t
            .config
            .address
            .as_deref()
            .unwrap_or(&events.redis_settings.address);
        let address = expand(address_template, vars, &format!("{what}: address"))?;
        let channel = expand(&t.config.channel, vars, &format!("{what}: channel"))?;
        let (handler, form) = redis_handler(app, &what, &t.config.component)?;
        servers
            .entry(address)
            .or_default()
            .entry(channel)
            .or_default()
            .push(Target {
                trigger: t.id.clone(),
                handler,
                form,
            });
    }
    servers
        .into_iter()
        .map(|(address, channels)| {
            let client = crate::host::tls::redis_client(
                address.as_str(),
                &crate::host::tls::trust_store().data,
            )
            .map_err(|e| {
                anyhow!(
                    "redis trigger address `{}` is not a usable Redis URL such as \
                     redis://host:6379 or rediss://host:6379 (TLS, verified with the platform's \
                     trust store: SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs): {e:#}",
                    redact(&address)
                )
            })?;
            Ok(Subscriber {
                client,
                shown: redact(&address),
                channels,
            })
        })
        .collect()
}

impl Subscriber {
    /// Subscribes and handles messages until the app stops, reconnecting with backoff.
    pub(crate) async fn run(self, app: Arc<LoadedApp>, mut stop: Stop) {
        let mut backoff = Backoff::new();
        let names: Vec<&str> = self.channels.keys().map(String::as_str).collect();
        while !stop.is_set() {
            let connect = tokio::time::timeout(CONNECT_TIMEOUT, async {
                let mut pubsub = self.client.get_async_pubsub().await?;
                for channel in &names {
                    pubsub.subscribe(*channel).await?;
                }
                anyhow::Ok(pubsub)
            });
            let subscribed = tokio::select! {
                r = connect => r.unwrap_or_else(|_| Err(anyhow!("no answer within {CONNECT_TIMEOUT:?}"))),
                _ = stop.wait() => return,
            };
            match subscribed {
                Ok(pubsub) => {
                    backoff.reset();
                    tracing::info!(
                        server = %self.shown,
                        channels = ?names,
                        "redis trigger subscribed"
                    );
                    let mut messages = pubsub.into_on_message();
                    loop {
                        tokio::select! {
                            msg = messages.next() => match msg {
                                Some(msg) => self.handle(&app, msg).await,
                                None => {
                                    tracing::warn!(
                                        server = %self.shown,
                                        "redis trigger lost its connection; reconnecting"
                                    );
                                    break;
                                }
                            },
                            _ = stop.wait() => return,
                        }
                    }
                }
                Err(e) => tracing::error!(
                    server = %self.shown,
                    "redis trigger cannot subscribe: {e:#}; retrying in {:?}",
                    backoff.next()
                ),
            }
            if !backoff.wait(&mut stop).await {
                return;
            }
        }
    }

    /// Passes one message to every component of its channel (together); failures are
    /// logged.
    async fn handle(&self, app: &LoadedApp, msg: redis::Msg) {
        let channel = msg.get_channel_name();
        let Some(targets) = self.channels.get(channel) else {
            tracing::warn!(server = %self.shown, channel, "message from a channel not subscribed");
            return;
        };
        let payload = msg.get_payload_bytes().to_vec();
        let calls = targets.iter().map(|t| {
            let payload = payload.clone();
            async move {
                let component = &t.handler.component.id;
                let outcome = match t.form {
                    Form::Spin3 => call::<(Vec<u8>,), (Result<(), RedisError>,)>(
                        app, &t.handler, "redis", (payload,),
                    )
                    .await
                    .map(|(r,)| r.map_err(|e| format!("{e:?}"))),
                    Form::Spin4 => call::<(Vec<u8>,), (Result<(), RedisErrorV3>,)>(
                        app, &t.handler, "redis", (payload,),
                    )
                    .await
                    .map(|(r,)| {
                        r.map_err(|e| match e {
                            RedisErrorV3::Other(m) => m,
                            other => format!("{other:?}"),
                        })
                    }),
                };
                match outcome {
                    Ok(Ok(())) => {
                        tracing::debug!(trigger = %t.trigger, component = %component, channel, "message handled")
                    }
                    Ok(Err(e)) => tracing::error!(
                        trigger = %t.trigger,
                        component = %component,
                        channel,
                        "redis handler returned an error ({e})"
                    ),
                    Err(e) => tracing::error!(
                        trigger = %t.trigger,
                        component = %component,
                        channel,
                        "redis handler failed: {e:#}"
                    ),
                }
            }
        });
        futures::future::join_all(calls).await;
    }
}
