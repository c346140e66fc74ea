// SDK proof app handler, included by sdk2-http, sdk3-http and sdk5-http with `SDK` set to the
// spin-sdk major version they build against:
// - `/hello` greets with the `greeting` variable;
// - `/echo/...` returns the path it was given;
// - `/outbound/...` sends `GET http://self.alt/...` (a self request, allowed by the manifest)
//   with the SDK's outbound HTTP and returns the upstream status and body;
// - `/deny` sends to http://127.0.0.1:9/, which the manifest does not allow, and returns 502
//   with the SDK's error;
// - routes of the including crate's `extra_route` (sdk2-http: `/wasi`);
// anything else is 404 from the app.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;

#[http_component]
async fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let route = req
        .header("spin-component-route")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let info = req
        .header("spin-path-info")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let (status, body) = match route.as_str() {
        "/hello" => {
            let greeting = spin_sdk::variables::get("greeting")?;
            (200, format!("sdk={SDK} route=/hello greeting={greeting}\n"))
        }
        "/echo" => (200, format!("sdk={SDK} route=/echo path={info}\n")),
        "/outbound" => send(&format!("http://self.alt{info}")).await,
        "/deny" => send("http://127.0.0.1:9/").await,
        other => extra_route(other).unwrap_or((404, format!("sdk={SDK} no route {other}\n"))),
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(body)
        .build())
}

async fn send(url: &str) -> (u16, String) {
    let outbound = Request::get(url).build();
    match spin_sdk::http::send::<_, Response>(outbound).await {
        Ok(up) => (
            200,
            format!(
                "sdk={SDK} route=/outbound upstream={} {}",
                up.status(),
                String::from_utf8_lossy(up.body())
            ),
        ),
        Err(e) => (502, format!("sdk={SDK} send failed: {e}\n")),
    }
}
