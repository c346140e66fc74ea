//! Misbehaving guest for the runtime's isolation tests.
//!
//! - `/loop`: a handler that never returns and never calls the host (`loop {}`).
//! - `/greedy`: touches 1 MiB after 1 MiB until an allocation fails (the process aborts).
//! - anything else: `ok`.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    match req.path() {
        "/loop" => {
            #[allow(clippy::empty_loop)]
            loop {}
        }
        "/greedy" => {
            let mut held: Vec<Vec<u8>> = Vec::new();
            loop {
                // Written, so the pages are really used.
                held.push(vec![0xa5; 1 << 20]);
                std::hint::black_box(&held);
            }
        }
        _ => Ok(Response::builder().status(200).body("ok\n").build()),
    }
}
