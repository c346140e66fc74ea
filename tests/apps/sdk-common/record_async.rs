// Shared by the Spin 4 trigger test apps (spin-redis-sdk6, spin-mqtt-async), `include!`d:
// appends `line` to the Redis list named by variable `record_key` on the server at variable
// `record_address`, through spin-sdk 6's async `spin:redis/redis@3.0.0` and
// `spin:variables/variables@3.0.0`.

async fn record(line: Vec<u8>) -> anyhow::Result<()> {
    let address = spin_sdk::variables::get("record_address").await?;
    let key = spin_sdk::variables::get("record_key").await?;
    let conn = spin_sdk::redis::Connection::open(&address).await?;
    conn.execute(
        "RPUSH",
        [
            spin_sdk::redis::RedisParameter::Binary(key.into_bytes()),
            spin_sdk::redis::RedisParameter::Binary(line),
        ],
    )
    .await?;
    Ok(())
}
