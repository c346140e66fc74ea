//! A native hyper "hello" HTTP server: the baseline `scripts/bench-http.sh` measures the
//! Spin runtime against in the same run.
//!
//! `native-hello [--listen 127.0.0.1:0]`: prints `native-hello: listening on http://ADDR`
//! and answers every request with a short text body until SIGTERM/SIGINT; a request with
//! `?n=N` gets `fib(N) = V` instead, computed as the spin-cpu guest app computes it
//! (the native baseline of its CPU-bound row).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// The spin-cpu app's deliberately naive recursive Fibonacci.
fn fib(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

async fn hello(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let n = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("n="))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n <= 90);
    let body = match n {
        Some(n) => {
            let value = fib(std::hint::black_box(n));
            Bytes::from(format!("fib({n}) = {value}\n"))
        }
        None => Bytes::from_static(b"Hello, Spin!\n"),
    };
    Ok(Response::builder()
        .header("content-type", "text/plain")
        .body(Full::new(body))
        .expect("static response"))
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut listen = "127.0.0.1:0".to_string();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => {
                listen = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--listen needs an address"))?
            }
            other => {
                anyhow::bail!("unknown argument `{other}`; usage: native-hello [--listen ADDR]")
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen).await?;
        println!("native-hello: listening on http://{}", listener.local_addr()?);
        use std::io::Write;
        std::io::stdout().flush()?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        loop {
            tokio::select! {
                _ = term.recv() => return Ok(()),
                _ = tokio::signal::ctrl_c() => return Ok(()),
                accepted = listener.accept() => {
                    let (stream, _) = accepted?;
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), hyper::service::service_fn(hello))
                            .await;
                    });
                }
            }
        }
    })
}
