//! Handles Redis messages: appends each payload to the Redis list named by variable
//! `record_key` on the server at variable `record_address`, so a test can count how often
//! every message was handled. A payload `fail` makes the handler return an error (nothing
//! recorded), to show that the trigger logs it and goes on; `slow:<ms>` sleeps that long
//! before recording (an in-flight handler for shutdown tests).

use spin_sdk::redis::{Connection, RedisParameter};
use spin_sdk::{redis_component, variables};

#[redis_component]
fn on_message(message: Vec<u8>) -> anyhow::Result<()> {
    if message == b"fail" {
        anyhow::bail!("asked to fail");
    }
    if let Some(ms) = std::str::from_utf8(&message)
        .ok()
        .and_then(|m| m.strip_prefix("slow:"))
    {
        std::thread::sleep(std::time::Duration::from_millis(ms.parse()?));
    }
    let address = variables::get("record_address")?;
    let key = variables::get("record_key")?;
    let conn = Connection::open(&address)?;
    conn.execute(
        "RPUSH",
        &[
            RedisParameter::Binary(key.into_bytes()),
            RedisParameter::Binary(message),
        ],
    )?;
    Ok(())
}
