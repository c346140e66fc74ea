//! SDK proof app built against spin-sdk 6.x (Spin 4): an async `#[http_service]`, so the
//! component exports only `wasi:http/handler@0.3.0-rc-2026-03-15` (WASIp3). Same routes as
//! ../../sdk-common/handler.rs: `/hello` greets with the `greeting` variable (the async
//! `spin:variables/variables@3.0.0` of Spin 4), `/echo/...` returns the path it was given,
//! `/stream` streams its body in chunks (the guest keeps writing after it returned the
//! response); `/host?op=...` exercises Spin 4's other host interfaces (see [`host`]); anything
//! else is 404 from the app.
mod host;

use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_service;

const SDK: &str = "6";

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
        other => (404, format!("sdk={SDK} no route {other}\n")),
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(body)?)
}
