//! The NATS trigger. No published Spin trigger defines one, so its manifest keys follow the
//! Redis and MQTT triggers: `[application.trigger.nats] address = "nats://host:4222"` (or
//! `tls://`, verified with the trust store; `user:password@` in the URL for credentials) and
//! `[[trigger.nats]] component, subject, queue_group?, address?, jetstream? = { stream,
//! consumer?, durable? }`. The guest contract is `wit/triggers/nats.wit`: the component
//! exports `spin:nats-trigger/inbound-nats@0.1.0` and `handle-message` gets each message.
//!
//! - Core NATS: a subscription (in `queue_group` when set, so each message reaches one
//!   member), messages handled in order.
//! - JetStream: a pull consumer of `stream` filtered on `subject`: the existing `consumer`,
//!   a durable one named `durable` (created when missing), or else an ephemeral one. `ok`
//!   acknowledges a message; an error asks for redelivery (NAK) after the triggers' backoff
//!   for its delivery count (200 ms doubling to 5 s). Messages are pulled one at a time,
//!   each once the previous one is settled, and marked in progress every half ack wait
//!   while their handler runs: none is delivered again meanwhile, and none is left waiting
//!   in a stopping client. Each ACK and NAK is confirmed by the server (a JetStream
//!   "double ack"), so a settled message is settled on the server before the next pull and
//!   before the process exits.
//!
//! Each entry has its own connection. A lost or refused connection is logged and retried
//! with the triggers' backoff (200 ms doubling to 5 s) and the subscription is renewed. On
//! shutdown no message is taken: the running handler finishes and its message is
//! acknowledged (confirmed); a pull request that is out is waited for (its answer comes
//! within its 1 s expiry) and a message it brings is NAKed at once for another consumer;
//! then the connection drains and the trigger waits until it is closed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use async_nats::jetstream;
use futures::StreamExt;
use wasmtime::component::{ComponentType, Lift, Lower};

use super::{call, expand, find_handler, Backoff, Handler, Stop};
use crate::app::trigger_config::nats::{check, check_subject};
use crate::host::variables::Resolved;
use crate::runtime::LoadedApp;

/// The exported interface NATS components implement (`wit/triggers/nats.wit`).
pub const INBOUND_NATS: &str = "spin:nats-trigger/inbound-nats@0.1.0";

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server holds a JetStream pull request open while no message is there; a
/// stop waits for the open request's answer (at most this long when idle).
const PULL_WAIT: Duration = Duration::from_secs(1);
/// At a stop with a pull request out: how long after its expiry its answer is still
/// awaited (a message is then NAKed, so that it does not wait out its ack wait).
const ANSWER_MARGIN: Duration = Duration::from_secs(2);
/// How long a stopping trigger waits for its drained connection to close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// `inbound-nats.message`.
#[derive(ComponentType, Lower, Debug, Clone)]
#[component(record)]
pub(crate) struct NatsMessage {
    subject: String,
    reply: Option<String>,
    headers: Vec<(String, String)>,
    payload: Vec<u8>,
}

/// `inbound-nats.error`.
#[derive(ComponentType, Lift, Debug, Clone)]
#[component(variant)]
pub(crate) enum NatsError {
    #[component(name = "other")]
    Other(String),
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

/// Checks a server address: `nats://` or `tls://` with a host.
fn check_address(address: &str) -> anyhow::Result<()> {
    let bad = |why: String| {
        anyhow!(
            "NATS address `{}` is not a URL such as nats://nats:4222 or tls://nats:4222: {why}",
            redact(address)
        )
    };
    let url = url::Url::parse(address).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "nats" | "tls") {
        return Err(bad(format!("scheme `{}`", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host".into()));
    }
    Ok(())
}

/// One `[[trigger.nats]]` entry, ready to connect.
pub(crate) struct Listener {
    trigger: String,
    address: String,
    subject: String,
    queue_group: Option<String>,
    jetstream: Option<spin_app_format::trigger::NatsJetStream>,
    handler: Handler,
}

/// Resolves the app's NATS triggers; fails naming the trigger and the key.
pub(crate) fn prepare(
    app: &LoadedApp,
    vars: &BTreeMap<String, Resolved>,
) -> anyhow::Result<Vec<Listener>> {
    let events = &app.app.event_triggers;
    events
        .nats
        .iter()
        .map(|t| {
            let what = format!("nats trigger `{}` ([[trigger.nats]])", t.id);
            check(&t.config).map_err(|e| anyhow!("{what}: {e}"))?;
            let template = t
                .config
                .address
                .as_deref()
                .unwrap_or(&events.nats_settings.address);
            let address = expand(template, vars, &format!("{what}: address"))?;
            check_address(&address).map_err(|e| anyhow!("{what}: {e}"))?;
            let subject = expand(&t.config.subject, vars, &format!("{what}: subject"))?;
            check_subject(&subject).map_err(|e| anyhow!("{what}: {e}"))?;
            let handler = find_handler(
                app,
                &what,
                &t.config.component,
                Some(INBOUND_NATS),
                "handle-message",
                "a NATS component exports the interface of this runtime's \
                 wit/triggers/nats.wit (world `spin-nats`)",
            )?;
            Ok(Listener {
                trigger: t.id.clone(),
                address,
                subject,
                queue_group: t.config.queue_group.clone(),
                jetstream: t.config.jetstream.clone(),
                handler,
            })
        })
        .collect()
}

/// Verifies the server as the trust store's config does, logging why a certificate is
/// refused: async-nats reports a failed handshake only as "TLS error".
#[derive(Debug)]
struct NamedVerifier {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    trigger: String,
    server: String,
}

impl rustls::client::danger::ServerCertVerifier for NamedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .inspect_err(|e| {
                tracing::error!(
                    trigger = %self.trigger,
                    server = %self.server,
                    "nats trigger: the server's certificate is refused ({e}); trust a private \
                     CA by naming its PEM file with SSL_CERT_FILE (or a directory with \
                     SSL_CERT_DIR) in the container's environment"
                )
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The trust store's data-service config (platform roots plus Mozilla's), its verifier
/// wrapped in a [`NamedVerifier`].
fn verifying_config(trigger: &str, server: &str) -> rustls::ClientConfig {
    let store = crate::host::tls::trust_store();
    let mut config = (*store.data.config).clone();
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(
        store
            .platform
            .iter()
            .chain(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter())
            .cloned(),
    );
    let provider = config.crypto_provider().clone();
    match rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
    {
        Ok(inner) => {
            config
                .dangerous()
                .set_certificate_verifier(Arc::new(NamedVerifier {
                    inner,
                    trigger: trigger.to_string(),
                    server: server.to_string(),
                }));
        }
        // No usable root at all: the trust store's own config refuses every server alike.
        Err(e) => tracing::warn!(trigger = %trigger, "nats trigger: TLS roots: {e}"),
    }
    config
}

/// The triggers' backoff for reconnection attempt `n` (1-based): 200 ms doubling to 5 s.
fn reconnect_delay(attempt: usize) -> Duration {
    let mut backoff = Duration::from_millis(200);
    for _ in 1..attempt.min(16) {
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    backoff
}

impl Listener {
    /// Connects (retrying in the background until the server answers), then handles
    /// messages until the app stops.
    pub(crate) async fn run(self, app: Arc<LoadedApp>, mut stop: Stop) {
        let shown = redact(&self.address);
        let (trigger, server) = (self.trigger.clone(), shown.clone());
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("spin-{}", self.trigger))
            .connection_timeout(CONNECT_TIMEOUT)
            .retry_on_initial_connect()
            .reconnect_delay_callback(move |attempt| {
                let delay = reconnect_delay(attempt);
                if attempt > 0 {
                    tracing::error!(
                        trigger = %trigger,
                        server = %server,
                        "nats trigger cannot connect (attempt {attempt}); retrying in {delay:?}"
                    );
                }
                delay
            });
        let (trigger, server) = (self.trigger.clone(), shown.clone());
        // `Client::drain` only asks the connection's task to drain: its end is this event.
        let closed = Arc::new(tokio::sync::Notify::new());
        let on_close = closed.clone();
        options = options.event_callback(move |event| {
            let (trigger, server, on_close) = (trigger.clone(), server.clone(), on_close.clone());
            async move {
                match event {
                    async_nats::Event::Closed => on_close.notify_one(),
                    async_nats::Event::Draining => {
                        tracing::debug!(trigger = %trigger, server = %server, "nats: draining")
                    }
                    async_nats::Event::Connected => {
                        tracing::info!(trigger = %trigger, server = %server, "nats trigger connected")
                    }
                    async_nats::Event::Disconnected => tracing::warn!(
                        trigger = %trigger,
                        server = %server,
                        "nats trigger lost its connection; reconnecting"
                    ),
                    other => tracing::warn!(trigger = %trigger, server = %server, "nats: {other}"),
                }
            }
        });
        if self.address.starts_with("tls://") {
            options = options
                .require_tls(true)
                .tls_client_config(verifying_config(&self.trigger, &shown));
        }
        let client = match options.connect(self.address.as_str()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(trigger = %self.trigger, server = %shown, "nats trigger cannot start its client: {e}");
                return;
            }
        };
        let mut backoff = Backoff::new();
        while !stop.is_set() {
            let ended = match &self.jetstream {
                None => self.core(&app, &client, &mut stop).await,
                Some(js) => self.pull(&app, &client, js, &mut stop).await,
            };
            match ended {
                Ok(()) => break,
                Err(e) => {
                    tracing::error!(
                        trigger = %self.trigger,
                        server = %shown,
                        subject = %self.subject,
                        "nats trigger cannot consume: {e:#}; retrying in {:?}",
                        backoff.next()
                    );
                    if !backoff.wait(&mut stop).await {
                        break;
                    }
                }
            }
        }
        // Unsubscribes, flushes and closes the connection. The drain runs in the client's
        // connection task: returning before it ends would let the process exit with what
        // is still queued there unsent. A connection that is down drains nothing.
        let connected = client.connection_state() == async_nats::connection::State::Connected;
        match client.drain().await {
            Ok(()) if connected => {
                if tokio::time::timeout(CLOSE_WAIT, closed.notified())
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        trigger = %self.trigger,
                        server = %shown,
                        "nats trigger: the connection did not close within {CLOSE_WAIT:?} of the drain"
                    );
                }
            }
            Ok(()) => {}
            Err(e) => tracing::debug!(trigger = %self.trigger, "nats drain: {e}"),
        }
    }

    /// Core NATS: subscribes (async-nats renews the subscription after a reconnection) and
    /// handles messages until the app stops; an error when the subscription ends.
    async fn core(
        &self,
        app: &LoadedApp,
        client: &async_nats::Client,
        stop: &mut Stop,
    ) -> anyhow::Result<()> {
        let subject = self.subject.clone();
        let mut subscriber = match &self.queue_group {
            Some(group) => client.queue_subscribe(subject, group.clone()).await,
            None => client.subscribe(subject).await,
        }
        .context("subscribe")?;
        tracing::info!(
            trigger = %self.trigger,
            subject = %self.subject,
            queue_group = ?self.queue_group,
            "nats trigger subscribed"
        );
        loop {
            tokio::select! {
                biased;
                _ = stop.wait() => {
                    let _ = subscriber.unsubscribe().await;
                    return Ok(());
                }
                m = subscriber.next() => match m {
                    Some(m) => {
                        let _ = self.handle(app, &m).await;
                    }
                    None => bail!("the subscription ended"),
                },
            }
        }
    }

    /// JetStream: pulls from the consumer and acknowledges (or NAKs) each message; an error
    /// when the consumer cannot be reached or its message stream fails.
    async fn pull(
        &self,
        app: &LoadedApp,
        client: &async_nats::Client,
        js: &spin_app_format::trigger::NatsJetStream,
        stop: &mut Stop,
    ) -> anyhow::Result<()> {
        use jetstream::consumer::{pull, AckPolicy, PullConsumer};
        let context = jetstream::new(client.clone());
        let stream = context
            .get_stream(&js.stream)
            .await
            .with_context(|| format!("JetStream stream `{}`", js.stream))?;
        let config = pull::Config {
            durable_name: js.durable.clone(),
            filter_subject: self.subject.clone(),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        };
        let consumer: PullConsumer = match (&js.consumer, &js.durable) {
            (Some(name), _) => stream
                .get_consumer::<pull::Config>(name)
                .await
                .map_err(|e| {
                    anyhow!("JetStream consumer `{name}` of stream `{}`: {e}", js.stream)
                })?,
            (None, Some(name)) => stream
                .get_or_create_consumer(name, config)
                .await
                .with_context(|| format!("durable consumer `{name}` of stream `{}`", js.stream))?,
            (None, None) => stream
                .create_consumer(config)
                .await
                .with_context(|| format!("a consumer of stream `{}`", js.stream))?,
        };
        tracing::info!(
            trigger = %self.trigger,
            stream = %js.stream,
            subject = %self.subject,
            "nats trigger subscribed (JetStream pull consumer)"
        );
        // A handler that runs longer than the consumer's ack wait would get its message
        // redelivered meanwhile: tell the server it is in progress every half ack wait.
        let ack_wait = Some(consumer.cached_info().config.ack_wait)
            .filter(|w| !w.is_zero())
            .unwrap_or(Duration::from_secs(30));
        while !stop.is_set() {
            // One message per pull request, asked for once the previous one is settled:
            // none waits in this client, where its ack wait would run out unseen (it would
            // be delivered again, or after a stop only once the ack wait has passed). Not
            // raced with the stop: a request sent and then abandoned would still be answered.
            // (It is queued to the connection's task; bounded for a queue that is full while
            // the connection is down.)
            let request = consumer
                .batch()
                .max_messages(1)
                .expires(PULL_WAIT)
                .messages();
            let mut batch = tokio::time::timeout(CONNECT_TIMEOUT, request)
                .await
                .map_err(|_| anyhow!("pull request: not sent within {CONNECT_TIMEOUT:?}"))?
                .context("pull request")?;
            let m = tokio::select! {
                biased;
                _ = stop.wait() => {
                    // The server answers the request with a message, or with none once it
                    // expires. A message is handed back at once, not left to wait out its
                    // ack wait in a client that is gone.
                    let answer = tokio::time::timeout(PULL_WAIT + ANSWER_MARGIN, batch.next());
                    if let Ok(Some(Ok(m))) = answer.await {
                        self.settle(&m, jetstream::AckKind::Nak(None)).await;
                    }
                    return Ok(());
                }
                m = batch.next() => m,
            };
            let m = match m {
                // The request expired without a message.
                None => continue,
                Some(Err(e)) => bail!("the pull request failed: {e}"),
                Some(Ok(m)) => m,
            };
            let kind = if self.handle_in_progress(app, &m, ack_wait).await {
                jetstream::AckKind::Ack
            } else {
                // Redelivered after the triggers' backoff for its delivery count.
                let delivered = m.info().map(|i| i.delivered).unwrap_or(1);
                jetstream::AckKind::Nak(Some(reconnect_delay(
                    usize::try_from(delivered).unwrap_or(1),
                )))
            };
            self.settle(&m, kind).await;
        }
        Ok(())
    }

    /// Sends `kind` (ACK or NAK) for `m` and waits for the server to confirm it: a message
    /// handled at a stop is acknowledged on the server before the process exits. A failure
    /// is logged (the server delivers the message again after its ack wait).
    async fn settle(&self, m: &jetstream::Message, kind: jetstream::AckKind) {
        let what = match kind {
            jetstream::AckKind::Ack => "acknowledge",
            _ => "hand back (NAK)",
        };
        if let Err(e) = m.double_ack_with(kind).await {
            tracing::warn!(
                trigger = %self.trigger,
                subject = %m.subject,
                "nats: cannot {what} the message (the server delivers it again after its ack \
                 wait): {e}"
            );
        }
    }

    /// [`Self::handle`] for a JetStream message, marking it in progress every half
    /// `ack_wait` while the handler runs.
    async fn handle_in_progress(
        &self,
        app: &LoadedApp,
        m: &jetstream::Message,
        ack_wait: Duration,
    ) -> bool {
        let every = (ack_wait / 2).max(Duration::from_millis(100));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let handling = self.handle(app, m);
        tokio::pin!(handling);
        loop {
            tokio::select! {
                handled = &mut handling => return handled,
                _ = ticks.tick() => {
                    if let Err(e) = m.ack_with(jetstream::AckKind::Progress).await {
                        tracing::warn!(trigger = %self.trigger, "nats: cannot mark the message in progress: {e}");
                    }
                }
            }
        }
    }

    /// Passes one message to the component; true when it handled it.
    async fn handle(&self, app: &LoadedApp, m: &async_nats::Message) -> bool {
        let headers = m
            .headers
            .iter()
            .flat_map(|h| h.iter())
            .flat_map(|(name, values)| {
                values
                    .iter()
                    .map(move |v| (name.to_string(), v.as_str().to_string()))
            })
            .collect();
        let message = NatsMessage {
            subject: m.subject.to_string(),
            reply: m.reply.as_ref().map(|r| r.to_string()),
            headers,
            payload: m.payload.to_vec(),
        };
        let component = &self.handler.component.id;
        match call::<_, (Result<(), NatsError>,)>(app, &self.handler, "nats", (message,)).await {
            Ok((Ok(()),)) => {
                tracing::debug!(trigger = %self.trigger, component = %component, "message handled");
                true
            }
            Ok((Err(NatsError::Other(e)),)) => {
                tracing::error!(
                    trigger = %self.trigger,
                    component = %component,
                    subject = %m.subject,
                    "nats handler returned an error: {e}"
                );
                false
            }
            Err(e) => {
                tracing::error!(
                    trigger = %self.trigger,
                    component = %component,
                    subject = %m.subject,
                    "nats handler failed: {e:#}"
                );
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spin_app_format::trigger::{NatsJetStream, NatsTriggerConfig};

    fn config(subject: &str) -> NatsTriggerConfig {
        NatsTriggerConfig {
            component: "c".into(),
            subject: subject.into(),
            queue_group: None,
            address: None,
            jetstream: None,
        }
    }

    #[test]
    fn settings_are_checked_naming_the_key() {
        for ok in ["orders", "orders.*", "orders.>", "a.*.c", "{{ s }}"] {
            check(&config(ok)).unwrap();
        }
        for bad in ["", "a..b", "a.>.c", "a b", "or*ders", ".a"] {
            let e = check(&config(bad)).unwrap_err().to_string();
            assert!(e.contains("key `subject`"), "{bad}: {e}");
        }
        let mut c = config("orders.>");
        c.jetstream = Some(NatsJetStream {
            stream: "ORDERS".into(),
            consumer: Some("a".into()),
            durable: Some("b".into()),
        });
        assert!(check(&c).unwrap_err().to_string().contains("exclude"));
        c.queue_group = Some("has space".into());
        assert!(check(&c).unwrap_err().to_string().contains("queue_group"));
        assert!(check_address("nats://127.0.0.1:4222").is_ok());
        assert!(check_address("tls://u:p@nats:4222").is_ok());
        let e = check_address("redis://u:secret@h:1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nats://") && !e.contains("secret"), "{e}");
    }

    #[test]
    fn reconnect_delay_is_the_triggers_backoff() {
        assert_eq!(reconnect_delay(1), Duration::from_millis(200));
        assert_eq!(reconnect_delay(2), Duration::from_millis(400));
        assert_eq!(reconnect_delay(40), Duration::from_secs(5));
    }
}
