//! Outbound MQTT: `fermyon:spin/mqtt@2.0.0` on `rumqttc`, as Spin implements it.
//!
//! `open` takes `mqtt://host:port?client_id=...` (rumqttc's URL form, as in Spin), allowed
//! only when the component's `allowed_outbound_hosts` has it (`mqtt://host:port`), else
//! `connection-failed` ("address ... is not permitted"). `publish` returns once the broker
//! has the message at the requested QoS (sent for 0, PUBACK for 1, PUBCOMP for 2).

use std::time::Duration;

use rumqttc::{AsyncClient, Event, EventLoop, Incoming, Outgoing, QoS};
use tokio::sync::Mutex;
use wasmtime::component::Resource;

use super::bindings::fermyon::spin2_0_0::mqtt as v2;
use super::HostState;
use v2::{Error, Qos};

/// Requests buffered between the client handle and its event loop (Spin's capacity).
const CHANNEL_CAPACITY: usize = 1000;

/// A guest's open connection (the resource behind `connection`).
pub struct MqttConnection {
    client: AsyncClient,
    event_loop: std::sync::Arc<Mutex<EventLoop>>,
}

impl MqttConnection {
    fn new(
        address: &str,
        username: String,
        password: String,
        keep_alive: Duration,
    ) -> Result<Self, Error> {
        let mut options = rumqttc::MqttOptions::parse_url(address).map_err(|e| {
            tracing::error!("MQTT URL `{address}` is not valid: {e:?}");
            Error::InvalidAddress
        })?;
        options.set_credentials(username, password);
        options.set_keep_alive(keep_alive);
        let (client, event_loop) = AsyncClient::new(options, CHANNEL_CAPACITY);
        Ok(MqttConnection {
            client,
            event_loop: std::sync::Arc::new(Mutex::new(event_loop)),
        })
    }

    async fn publish(&self, topic: String, qos: Qos, payload: Vec<u8>) -> Result<(), Error> {
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

impl v2::Host for HostState {}

impl v2::HostConnection for HostState {
    async fn open(
        &mut self,
        address: String,
        username: String,
        password: String,
        keep_alive_interval_in_secs: u64,
    ) -> wasmtime::Result<Result<Resource<MqttConnection>, Error>> {
        if !self.outbound_allowed(&address, "mqtt") {
            return Ok(Err(Error::ConnectionFailed(format!(
                "address {address} is not permitted"
            ))));
        }
        let conn = match MqttConnection::new(
            &address,
            username,
            password,
            Duration::from_secs(keep_alive_interval_in_secs),
        ) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self
            .push_connection(conn)
            .map_err(|_| Error::TooManyConnections))
    }

    async fn publish(
        &mut self,
        connection: Resource<MqttConnection>,
        topic: String,
        payload: Vec<u8>,
        qos: Qos,
    ) -> wasmtime::Result<Result<(), Error>> {
        let (client, event_loop) = match self.table().get(&connection) {
            Ok(c) => (c.client.clone(), c.event_loop.clone()),
            Err(_) => {
                return Ok(Err(Error::Other(
                    "could not find connection for resource".into(),
                )))
            }
        };
        let conn = MqttConnection { client, event_loop };
        Ok(conn.publish(topic, qos, payload).await)
    }

    async fn drop(&mut self, connection: Resource<MqttConnection>) -> wasmtime::Result<()> {
        self.drop_connection(connection)
    }
}
