//! Outbound MQTT: `fermyon:spin/mqtt@2.0.0` on `rumqttc`, as Spin implements it.
//!
//! `open` takes `mqtt://host:port?client_id=...` (rumqttc's URL form, as in Spin), allowed
//! only when the component's `allowed_outbound_hosts` has it (`mqtt://host:port`), else
//! `connection-failed` ("address ... is not permitted"). `mqtts://host:port` (port 8883 by
//! default) connects over TLS, verified with the component's `[[client_tls]]` entry for the
//! host or the default trust store (see [`super::tls`]). `publish` returns once the broker
//! has the message at the requested QoS (sent for 0, PUBACK for 1, PUBCOMP for 2).
//!
//! `[outbound_networking] block_networks` is checked on the broker's resolved addresses, and
//! the connection goes only to the addresses that passed: `mqtt://` and IP literals connect
//! to them directly, `mqtts://<host name>` through a [`connect_relay`] (rumqttc would
//! otherwise resolve the name again, with TLS for the name kept end to end).

mod connect_relay;

use std::time::Duration;

use rumqttc::{AsyncClient, Event, EventLoop, Incoming, Outgoing, QoS};
use tokio::sync::Mutex;
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::mqtt as v2;
use super::connections::{Connections, OutboundInterface};
use super::HostView;
use v2::{Error, Qos};

/// The outbound MQTT host feature: `fermyon:spin/mqtt@2.0.0` and Spin 4's
/// `spin:mqtt/mqtt@3.0.0`, implemented on [`ComponentMqtt`].
pub struct OutboundMqtt;

/// One instance's outbound MQTT.
pub type ComponentMqtt = Connections<OutboundMqtt>;

impl OutboundInterface for OutboundMqtt {
    fn add_to_linker<T: HostView>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentMqtt,
    ) -> anyhow::Result<()> {
        v2::add_to_linker::<_, wasmtime::component::HasSelf<ComponentMqtt>>(linker, get)?;
        add_spin4_to_linker(linker)
    }
}

/// Requests buffered between the client handle and its event loop (Spin's capacity).
const CHANNEL_CAPACITY: usize = 1000;

/// A guest's open connection (the resource behind `connection`).
pub struct MqttConnection {
    client: AsyncClient,
    event_loop: std::sync::Arc<Mutex<EventLoop>>,
    /// The app's connection-cap permits, held while the connection is open.
    permit: std::sync::Arc<super::network_policy::Permit>,
    /// `[outbound_mqtt] max_payload_size_bytes`.
    max_payload: Option<usize>,
    /// The relay pinning an `mqtts://<host name>` connection to its checked addresses,
    /// kept while the connection is open.
    relay: Option<std::sync::Arc<connect_relay::ConnectRelay>>,
}

/// A connection that passed the allow-list, before the network policy's checks.
struct Prepared {
    url: url::Url,
    username: String,
    password: String,
    keep_alive: Duration,
    policy: std::sync::Arc<super::network_policy::NetworkPolicy>,
    component: String,
}

impl Prepared {
    /// Resolves the broker once through the app's network policy (blocked addresses
    /// dropped; all blocked: `connection-failed` naming the address and network), takes a
    /// connection-cap permit and makes the client. Plain `mqtt://` and IP literals connect
    /// to the checked address itself; over TLS to a host name rumqttc keeps the name (it
    /// verifies the certificate against it and sends it as SNI) and reaches the checked
    /// addresses through a loopback CONNECT relay, never resolving the name itself.
    async fn connect(self, tls: Option<rumqttc::Transport>) -> Result<MqttConnection, Error> {
        use super::network_policy::Kind;
        let mut url = self.url;
        let host = url.host_str().unwrap_or_default().to_string();
        let port = url.port_or_known_default().unwrap_or(1883);
        let addrs = self
            .policy
            .resolve(&self.component, Kind::Mqtt, &host, port)
            .await
            .map_err(|e| Error::ConnectionFailed(e.to_string()))?;
        let is_name = matches!(url.host(), Some(url::Host::Domain(_)));
        if tls.is_none() {
            if let Some(addr) = addrs.first() {
                url.set_ip_host(addr.ip())
                    .map_err(|()| Error::ConnectionFailed(format!("{} has no host", host)))?;
            }
        }
        let mut options = rumqttc::MqttOptions::try_from(url)
            .map_err(|e| Error::ConnectionFailed(e.to_string()))?;
        let relay = match tls {
            Some(tls) => {
                options.set_transport(tls);
                if is_name {
                    let relay = connect_relay::ConnectRelay::start(&host, port, addrs)
                        .await
                        .map_err(|e| {
                            Error::ConnectionFailed(format!(
                                "mqtts://{host}:{port}: cannot listen on loopback for the \
                                 connection to the checked broker addresses: {e}"
                            ))
                        })?;
                    options.set_proxy(rumqttc::Proxy {
                        ty: rumqttc::ProxyType::Http,
                        auth: rumqttc::ProxyAuth::None,
                        addr: relay.addr().ip().to_string(),
                        port: relay.addr().port(),
                    });
                    Some(std::sync::Arc::new(relay))
                } else {
                    None
                }
            }
            None => None,
        };
        let permit = self.policy.acquire(Kind::Mqtt).await;
        options.set_credentials(self.username, self.password);
        options.set_keep_alive(self.keep_alive);
        let (client, event_loop) = AsyncClient::new(options, CHANNEL_CAPACITY);
        Ok(MqttConnection {
            client,
            event_loop: std::sync::Arc::new(Mutex::new(event_loop)),
            permit: std::sync::Arc::new(permit),
            max_payload: self.policy.mqtt_max_payload_size_bytes(),
            relay,
        })
    }
}

impl MqttConnection {
    async fn publish(&self, topic: String, qos: Qos, payload: Vec<u8>) -> Result<(), Error> {
        if let Some(limit) = self.max_payload.filter(|l| payload.len() > *l) {
            // Spin's error and text ([outbound_mqtt] max_payload_size_bytes).
            return Err(Error::Other(format!(
                "payload size {} exceeds the maximum allowed size of {limit} bytes",
                payload.len()
            )));
        }
        let qos = match qos {
            Qos::AtMostOnce => QoS::AtMostOnce,
            Qos::AtLeastOnce => QoS::AtLeastOnce,
            Qos::ExactlyOnce => QoS::ExactlyOnce,
        };
        self.client
            .publish_bytes(topic, qos, false, payload.into())
            .await
            .map_err(|e| Error::Other(e.to_string()))?;
        let mut event_loop = self.event_loop.lock().await;
        loop {
            let event = event_loop
                .poll()
                .await
                .map_err(|e| Error::ConnectionFailed(e.to_string()))?;
            match (qos, event) {
                (QoS::AtMostOnce, Event::Outgoing(Outgoing::Publish(_)))
                | (QoS::AtLeastOnce, Event::Incoming(Incoming::PubAck(_)))
                | (QoS::ExactlyOnce, Event::Incoming(Incoming::PubComp(_))) => return Ok(()),
                _ => continue,
            }
        }
    }
}

impl v2::Host for ComponentMqtt {}

/// Opens a connection to `address` for the component, if its `allowed_outbound_hosts` has it
/// (else `connection-failed`, Spin's text): the address is checked as Spin checks it, then
/// the broker host and port rumqttc will connect to (its own parse of the URL) again.
fn open(
    h: &ComponentMqtt,
    address: &str,
    username: String,
    password: String,
    keep_alive_interval_in_secs: u64,
) -> Result<(Prepared, Option<rumqttc::Transport>), Error> {
    let refused = || Error::ConnectionFailed(format!("address {address} is not permitted"));
    if !h.outbound().outbound_allowed(address, "mqtt") {
        return Err(refused());
    }
    let invalid = |e: &dyn std::fmt::Debug| {
        tracing::error!(
            "MQTT URL `{}` is not valid: {e:?}",
            super::outbound::origin_only(address)
        );
        Error::InvalidAddress
    };
    let url = url::Url::parse(address).map_err(|e| invalid(&e))?;
    let scheme = url.scheme().to_string();
    let options = rumqttc::MqttOptions::try_from(url.clone()).map_err(|e| invalid(&e))?;
    let (host, port) = options.broker_address();
    let shown = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    if !h
        .outbound()
        .outbound_allowed(&format!("{scheme}://{shown}:{port}"), "mqtt")
    {
        return Err(refused());
    }
    let tls = matches!(options.transport(), rumqttc::Transport::Tls(_)).then(|| {
        let tls = super::tls::data_tls_for(h.outbound().client_tls().entries(), &host, port);
        rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Rustls(tls.config))
    });
    let prepared = Prepared {
        url,
        username,
        password,
        keep_alive: Duration::from_secs(keep_alive_interval_in_secs),
        policy: h.outbound().network_policy().clone(),
        component: h.outbound().id().to_string(),
    };
    Ok((prepared, tls))
}

impl ComponentMqtt {
    /// A handle on the guest's connection (client and event loop are shared).
    fn mqtt(&mut self, connection: &Resource<MqttConnection>) -> Result<MqttConnection, Error> {
        match self.table().get(connection) {
            Ok(c) => Ok(MqttConnection {
                client: c.client.clone(),
                event_loop: c.event_loop.clone(),
                permit: c.permit.clone(),
                max_payload: c.max_payload,
                relay: c.relay.clone(),
            }),
            Err(_) => Err(Error::Other(
                "could not find connection for resource".into(),
            )),
        }
    }

    /// Adds a connection to the guest's handles, unless too many are open.
    fn push(&mut self, conn: MqttConnection) -> Result<Resource<MqttConnection>, Error> {
        self.push_connection(conn)
            .map_err(|_| Error::TooManyConnections)
    }
}

impl v2::HostConnection for ComponentMqtt {
    async fn open(
        &mut self,
        address: String,
        username: String,
        password: String,
        keep_alive_interval_in_secs: u64,
    ) -> wasmtime::Result<Result<Resource<MqttConnection>, Error>> {
        let opened = match open(
            self,
            &address,
            username,
            password,
            keep_alive_interval_in_secs,
        ) {
            Ok((prepared, tls)) => prepared.connect(tls).await,
            Err(e) => Err(e),
        };
        let conn = match opened {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self.push(conn))
    }

    async fn publish(
        &mut self,
        connection: Resource<MqttConnection>,
        topic: String,
        payload: Vec<u8>,
        qos: Qos,
    ) -> wasmtime::Result<Result<(), Error>> {
        match self.mqtt(&connection) {
            Ok(conn) => Ok(conn.publish(topic, qos, payload).await),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn drop(&mut self, connection: Resource<MqttConnection>) -> wasmtime::Result<()> {
        self.close_connection(connection)
    }
}

// ---- spin:mqtt/mqtt@3.0.0 (Spin 4) ----
//
// The `async func` form of `fermyon:spin/mqtt@2.0.0`: the same allow-list check, delivery
// guarantee and errors (its types are 2.0.0's).

mod v3 {
    use wasmtime::component::Resource;

    use super::{ComponentMqtt, Error, MqttConnection, Qos};
    use crate::host::{with_host, Accessor, HostState, HostView};

    pub(super) type Conn = Resource<MqttConnection>;

    /// Runs `f` on the instance's outbound MQTT state (between awaits).
    fn with_mqtt<T: HostView, R>(acc: &Accessor<T>, f: impl FnOnce(&mut ComponentMqtt) -> R) -> R {
        with_host(acc, |h| f(&mut h.features.mqtt))
    }

    pub(super) fn close(h: &mut HostState, this: Conn) -> wasmtime::Result<()> {
        h.features.mqtt.close_connection(this)
    }

    pub(super) async fn open<T: HostView>(
        acc: &Accessor<T>,
        address: String,
        username: String,
        password: String,
        keep_alive_interval_in_secs: u64,
    ) -> wasmtime::Result<Result<Conn, Error>> {
        let opened = with_mqtt(acc, |h| {
            super::open(h, &address, username, password, keep_alive_interval_in_secs)
        });
        let conn = match opened {
            Ok((prepared, tls)) => prepared.connect(tls).await,
            Err(e) => Err(e),
        };
        Ok(conn.and_then(|conn| with_mqtt(acc, |h| h.push(conn))))
    }

    pub(super) async fn publish<T: HostView>(
        acc: &Accessor<T>,
        this: Conn,
        topic: String,
        payload: Vec<u8>,
        qos: Qos,
    ) -> wasmtime::Result<Result<(), Error>> {
        match with_mqtt(acc, |h| h.mqtt(&this)) {
            Ok(conn) => Ok(conn.publish(topic, qos, payload).await),
            Err(e) => Ok(Err(e)),
        }
    }
}

/// Adds `spin:mqtt/mqtt@3.0.0`.
fn add_spin4_to_linker<T: HostView>(
    linker: &mut wasmtime::component::Linker<T>,
) -> anyhow::Result<()> {
    use v3::Conn;
    const INTERFACE: &str = "mqtt";
    let mut inst = linker.instance("spin:mqtt/mqtt@3.0.0")?;
    host_resource!(inst, "connection", MqttConnection, v3::close);
    async_func!(inst, INTERFACE, "[static]connection.open", v3::open, (address: String, username: String, password: String, keep_alive_interval_in_secs: u64));
    async_func!(inst, INTERFACE, "[method]connection.publish", v3::publish, (this: Conn, topic: String, payload: Vec<u8>, qos: Qos));
    Ok(())
}
