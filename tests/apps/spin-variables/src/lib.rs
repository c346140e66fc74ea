//! Variables test app. Route `/...`:
//! - `GET /<name>`: `variables::get(name)` (fermyon:spin/variables@2.0.0)
//! - `GET /<name>?via=wasi`: `wasi:config/store` `get(name)` (404 when it has no value)
//! - `GET /?via=wasi-all`: `wasi:config/store` `get-all`, `name=value` per line
//!
//! A variables error answers 500 with `error: <Debug of the error>`.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;
use spin_sdk::variables;
use spin_sdk::wit::wasi::config::store as wasi_config;

fn text(status: u16, body: impl Into<String>) -> Response {
    Response::new(status, body.into())
}

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let name = req
        .header("spin-path-info")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .trim_start_matches('/')
        .to_string();
    let resp = match req.query() {
        "via=wasi" => match wasi_config::get(&name) {
            Ok(Some(v)) => text(200, v),
            Ok(None) => text(404, "no value"),
            Err(e) => text(500, format!("error: {e:?}")),
        },
        "via=wasi-all" => match wasi_config::get_all() {
            Ok(mut all) => {
                all.sort();
                let lines: Vec<String> = all.iter().map(|(k, v)| format!("{k}={v}")).collect();
                text(200, lines.join("\n"))
            }
            Err(e) => text(500, format!("error: {e:?}")),
        },
        _ => match variables::get(&name) {
            Ok(v) => text(200, v),
            Err(e) => text(500, format!("error: {e:?}")),
        },
    };
    Ok(resp)
}
