//! Echo app: answers every route with one `key=value` line per fact the tests check:
//! the component (from its `environment`), method, path, query, and each `spin-*` header.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let component = std::env::var("COMPONENT").unwrap_or_else(|_| "unset".to_string());
    let mut lines = vec![
        format!("component={component}"),
        format!("method={:?}", req.method()),
        format!("path={}", req.path()),
        format!("query={}", req.query()),
    ];
    let mut spin_headers: Vec<String> = req
        .headers()
        .filter(|(name, _)| name.starts_with("spin-"))
        .map(|(name, value)| format!("{name}={}", value.as_str().unwrap_or("<binary>")))
        .collect();
    spin_headers.sort();
    lines.extend(spin_headers);
    let mut body = lines.join("\n");
    body.push('\n');
    Ok(Response::builder()
        .status(200)
        .header("content-type", "text/plain")
        .header("x-component", component)
        .body(body)
        .build())
}
