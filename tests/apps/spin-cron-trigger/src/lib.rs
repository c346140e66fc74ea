//! Handles cron ticks: appends `<tick timestamp>` to the Redis list named by variable
//! `record_key` on the server at variable `record_address`.
//!
//! The export is the one the spin-trigger-cron plugin calls (package
//! `fermyon:spin-cron@2.0.0`, world `spin-cron`); the WIT below states that contract.

wit_bindgen::generate!({
    inline: r#"
        package fermyon:spin-cron@2.0.0;

        interface cron-types {
            record metadata {
                timestamp: u64,
            }
            variant error {
                other(string),
            }
        }

        world spin-cron {
            use cron-types.{metadata, error};
            export handle-cron-event: func(metadata: metadata) -> result<_, error>;
        }
    "#,
    world: "spin-cron",
});

use spin_sdk::redis::{Connection, RedisParameter};
use spin_sdk::variables;

struct Cron;

fn record(timestamp: u64) -> anyhow::Result<()> {
    let conn = Connection::open(&variables::get("record_address")?)?;
    conn.execute(
        "RPUSH",
        &[
            RedisParameter::Binary(variables::get("record_key")?.into_bytes()),
            RedisParameter::Binary(timestamp.to_string().into_bytes()),
        ],
    )?;
    Ok(())
}

impl Guest for Cron {
    fn handle_cron_event(metadata: Metadata) -> Result<(), Error> {
        record(metadata.timestamp).map_err(|e| Error::Other(e.to_string()))
    }
}

export!(Cron);
