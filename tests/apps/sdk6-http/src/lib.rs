//! SDK proof app built against spin-sdk 6.x (Spin 4): an async `#[http_service]`, so the
//! component exports only `wasi:http/handler@0.3.0-rc-2026-03-15` (WASIp3). Same routes as
//! ../../sdk-common/handler.rs: `/hello` greets with the `greeting` variable (the async
//! `spin:variables/variables@3.0.0` of Spin 4), `/echo/...` returns the path it was given,
//! `/stream` streams its body in chunks (the guest keeps writing after it returned the
//! response); `/host?op=...` exercises Spin 4's other host interfaces (see [`host`]). For the
//! instance-reuse tests: `/count` answers how many requests this instance has counted so far
//! (global state, which persists while an instance is reused), `/spin` never returns (a busy
//! loop) and `/trap` panics. Anything else is 404 from the app.
mod host;

use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_service;

const SDK: &str = "6";

/// Requests this instance has served on `/count`.
static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn header(req: &Request, name: &str) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

#[http_service]
async fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let route = header(&req, "spin-component-route");
    let info = header(&req, "spin-path-info");
    let (status, body) = match route.as_str() {
        "/hello" => {
            let greeting = spin_sdk::variables::get("greeting").await?;
            (200, format!("sdk={SDK} route=/hello greeting={greeting}\n"))
        }
        "/echo" => (200, format!("sdk={SDK} route=/echo path={info}\n")),
        "/stream" => {
            let body: String = (0..1000).map(|i| format!("line {i}\n")).collect();
            (200, body)
        }
        "/host" => host::run(req.uri().query().unwrap_or("")).await,
        "/count" => {
            let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            (200, format!("{n}\n"))
        }
        "/spin" => {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        "/trap" => panic!("sdk6-http: /trap was asked to trap"),
        other => (404, format!("sdk={SDK} no route {other}\n")),
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(body)?)
}
