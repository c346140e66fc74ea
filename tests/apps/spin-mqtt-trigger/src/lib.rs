//! Handles MQTT messages: appends `<topic> <payload>` to the Redis list named by variable
//! `record_key` on the server at variable `record_address`. A payload `fail` returns an
//! error (nothing recorded).
//!
//! The export is the one the spin-trigger-mqtt plugin (up to 0.7) calls: package
//! `spin:mqtt-trigger`, world `spin-mqtt`; the WIT below states that contract.

wit_bindgen::generate!({
    inline: r#"
        package spin:mqtt-trigger;

        interface spin-mqtt-types {
            variant error {
                other(string),
            }
            enum qos {
                at-most-once,
                at-least-once,
                exactly-once,
            }
            record metadata {
                topic: string,
            }
            type payload = list<u8>;
        }

        world spin-mqtt {
            use spin-mqtt-types.{error, metadata, payload};
            export handle-message: func(message: payload, metadata: metadata) -> result<_, error>;
        }
    "#,
    world: "spin-mqtt",
});

use spin_sdk::redis::{Connection, RedisParameter};
use spin_sdk::variables;

struct Mqtt;

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

impl Guest for Mqtt {
    fn handle_message(message: Vec<u8>, metadata: Metadata) -> Result<(), Error> {
        if message == b"fail" {
            return Err(Error::Other("asked to fail".into()));
        }
        let mut line = format!("{} ", metadata.topic).into_bytes();
        line.extend(message);
        record(line).map_err(|e| Error::Other(e.to_string()))
    }
}

export!(Mqtt);
