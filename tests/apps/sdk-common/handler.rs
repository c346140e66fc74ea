// SDK proof app handler, included by sdk2-http, sdk3-http and sdk5-http with `SDK` set to the
// spin-sdk major version they build against: `/hello` greets with the `greeting` variable,
// `/echo/...` returns the path it was given; anything else is 404 from the app.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
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
        other => (404, format!("sdk={SDK} no route {other}\n")),
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(body)
        .build())
}
