//! Outbound HTTP test app. `GET /?url=<url>` sends `GET <url>` with `spin_sdk::http::send`
//! and answers `upstream <status>\n<body>`; a failed send answers 502 with
//! `send failed: <error>` (e.g. `HttpRequestDenied` when the allow-list forbids it).
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;

fn text(status: u16, body: impl Into<String>) -> Response {
    Response::new(status, body.into())
}

/// Decodes `%XX` escapes (enough for URLs passed in a query string).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[http_component]
async fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let Some(url) = req
        .query()
        .split('&')
        .find_map(|pair| pair.strip_prefix("url="))
        .map(percent_decode)
    else {
        return Ok(text(400, "missing ?url="));
    };
    let outbound = Request::get(url.clone()).build();
    let resp = match spin_sdk::http::send::<_, Response>(outbound).await {
        Ok(up) => text(
            200,
            format!(
                "upstream {}\n{}",
                up.status(),
                String::from_utf8_lossy(up.body())
            ),
        ),
        Err(e) => text(502, format!("send failed: {e}")),
    };
    Ok(resp)
}
