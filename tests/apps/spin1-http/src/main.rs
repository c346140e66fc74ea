//! A Spin 1.x-style HTTP module shaped as a WASI command: it exports `_start` beside
//! `handle-http-request`, `canonical_abi_realloc` and `canonical_abi_free`, as Spin 1.x-era
//! TinyGo `-target=wasi` builds did (Rust spin-sdk 1.x built the same ABI as a reactor; it
//! was never published to crates.io: its crates came from git, which this build cannot
//! reach). Imports `spin-config`, `wasi-outbound-http` and `key-value`; the bindings are the
//! hand-written ones of `spin1-go` (`src/spin1.rs`). `_start` is never called by Spin:
//! `main` does nothing. It also exports `handle-redis-message` (a Redis trigger's entry
//! point), which keeps the last message in the `default` key-value store.

#[path = "../../spin1-go/src/spin1.rs"]
mod spin1;

spin1::export_handle_http_request!("command");
spin1::export_handle_redis_message!();

fn main() {}
