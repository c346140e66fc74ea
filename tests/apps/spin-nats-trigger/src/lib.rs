//! Handles NATS messages: appends `<subject> <payload>` (and ` h:<name>=<value>` per header)
//! to the Redis list named by variable `record_key` on the server at variable
//! `record_address`. Payload `fail` returns an error (nothing recorded); a payload starting
//! with `slow` is handled for 1.5 s before it is recorded (a handler in flight).
//!
//! The export is the NATS trigger's guest contract, `crates/spin-runtime/wit/triggers/nats.wit`.

wit_bindgen::generate!({
    path: "../../../crates/spin-runtime/wit/triggers/nats.wit",
    world: "spin-nats",
});

use exports::spin::nats_trigger::inbound_nats::{Error, Guest, Message};
use spin_sdk::redis::{Connection, RedisParameter};
use spin_sdk::variables;

struct Nats;

fn record(line: Vec<u8>) -> anyhow::Result<()> {
    let conn = Connection::open(&variables::get("record_address")?)?;
    conn.execute(
        "RPUSH",
        &[
            RedisParameter::Binary(variables::get("record_key")?.into_bytes()),
            RedisParameter::Binary(line),
        ],
    )?;
    Ok(())
}

impl Guest for Nats {
    fn handle_message(message: Message) -> Result<(), Error> {
        if message.payload == b"fail" {
            return Err(Error::Other("asked to fail".into()));
        }
        if message.payload.starts_with(b"slow") {
            std::thread::sleep(std::time::Duration::from_millis(1500));
        }
        let mut line = format!("{} ", message.subject).into_bytes();
        line.extend(message.payload);
        let mut headers = message.headers;
        headers.sort();
        for (name, value) in headers {
            line.extend(format!(" h:{name}={value}").into_bytes());
        }
        record(line).map_err(|e| Error::Other(e.to_string()))
    }
}

export!(Nats);
