//! Key-value test app. Route `/...`; the path after the route is the key, query
//! `store=<label>` picks the store (default `default`):
//! - `GET /<key>`: the value (404 if absent); `GET /<key>?op=exists`: `true` / `false`
//! - `PUT` or `POST /<key>`: store the body; `DELETE /<key>`: remove the key
//! - `GET /?op=keys`: all keys, one per line
//! - `POST /<key>?op=incr&by=N` and `GET /<key>?op=wasi-get`: the same store through
//!   `wasi:keyvalue` (atomics increment, store get)
//!
//! Errors answer 500 with `error: <Debug of the Spin error>` (e.g. `AccessDenied`).
use spin_sdk::http::{IntoResponse, Method, Request, Response};
use spin_sdk::http_component;
use spin_sdk::key_value::Store;
use spin_sdk::wit::wasi::keyvalue::{atomics, store as wasi_store};

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn text(status: u16, body: impl Into<String>) -> Response {
    Response::new(status, body.into())
}

fn error(e: impl std::fmt::Debug) -> Response {
    text(500, format!("error: {e:?}"))
}

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let key = req
        .header("spin-path-info")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .trim_start_matches('/')
        .to_string();
    let query = req.query().to_string();
    let label = query_param(&query, "store")
        .unwrap_or("default")
        .to_string();
    let op = query_param(&query, "op").unwrap_or("");

    if op == "incr" || op == "wasi-get" {
        let bucket = match wasi_store::open(&label) {
            Ok(b) => b,
            Err(e) => return Ok(error(e)),
        };
        return Ok(if op == "incr" {
            let by: i64 = query_param(&query, "by")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            match atomics::increment(&bucket, &key, by) {
                Ok(v) => text(200, v.to_string()),
                Err(e) => error(e),
            }
        } else {
            match bucket.get(&key) {
                Ok(Some(v)) => text(200, String::from_utf8_lossy(&v).into_owned()),
                Ok(None) => text(404, "not found"),
                Err(e) => error(e),
            }
        });
    }

    let store = match Store::open(&label) {
        Ok(s) => s,
        Err(e) => return Ok(error(e)),
    };
    let resp = match (req.method(), op) {
        (Method::Get, "keys") => match store.get_keys() {
            Ok(mut keys) => {
                keys.sort();
                text(200, keys.join("\n"))
            }
            Err(e) => error(e),
        },
        (Method::Get, "exists") => match store.exists(&key) {
            Ok(b) => text(200, b.to_string()),
            Err(e) => error(e),
        },
        (Method::Get, _) => match store.get(&key) {
            Ok(Some(v)) => text(200, String::from_utf8_lossy(&v).into_owned()),
            Ok(None) => text(404, "not found"),
            Err(e) => error(e),
        },
        (Method::Put | Method::Post, _) => match store.set(&key, req.body()) {
            Ok(()) => text(200, "stored"),
            Err(e) => error(e),
        },
        (Method::Delete, _) => match store.delete(&key) {
            Ok(()) => text(200, "deleted"),
            Err(e) => error(e),
        },
        _ => text(405, "method not allowed"),
    };
    Ok(resp)
}
