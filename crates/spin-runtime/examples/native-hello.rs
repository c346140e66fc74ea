//! A native hyper "hello" HTTP server: the baseline `scripts/bench-http.sh` measures the
//! Spin runtime against in the same run.
//!
//! `native-hello [--listen 127.0.0.1:0]`: prints `native-hello: listening on http://ADDR`
//! and answers every request with a short text body until SIGTERM/SIGINT.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

async fn hello(_req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::builder()
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(b"Hello, Spin!\n")))
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
