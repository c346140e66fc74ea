//! CPU load app (as the seed's cpu-load-gen): computes a deliberately naive recursive
//! fib(n) per request; `n` comes from the query (`?n=25`), default 43.
use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;

fn fib(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

#[http_component]
fn handle(req: Request) -> anyhow::Result<impl IntoResponse> {
    let n = req
        .query()
        .split('&')
        .find_map(|kv| kv.strip_prefix("n="))
        .map(|v| v.parse::<u64>())
        .transpose();
    let n = match n {
        Ok(n) => n.unwrap_or(43),
        Err(e) => {
            return Ok(Response::builder()
                .status(400)
                .body(format!("bad query parameter n: {e} (use ?n=<0..=90>)\n"))
                .build())
        }
    };
    if n > 90 {
        return Ok(Response::builder()
            .status(400)
            .body(format!("n={n} is too large (use ?n=<0..=90>)\n"))
            .build());
    }
    let value = fib(std::hint::black_box(n));
    Ok(Response::builder()
        .status(200)
        .header("content-type", "text/plain")
        .body(format!("fib({n}) = {value}\n"))
        .build())
}
