//! Spin 4 Redis subscriber (spin-sdk 6's `#[redis_subscriber]`, exporting the `async func`
//! `spin:redis/inbound-redis@3.0.0.handle-message`): appends `sdk6:<payload>` to the Redis
//! list named by variable `record_key` on the server at variable `record_address`, through
//! Spin 4's async `spin:redis/redis@3.0.0` and `spin:variables/variables@3.0.0`
//! (../../sdk-common/record_async.rs). A payload `fail` returns an error (nothing recorded).

include!("../../sdk-common/record_async.rs");

#[spin_sdk::redis_subscriber]
async fn on_message(message: Vec<u8>) -> anyhow::Result<()> {
    if message == b"fail" {
        anyhow::bail!("asked to fail");
    }
    let mut line = b"sdk6:".to_vec();
    line.extend(message);
    record(line).await
}
