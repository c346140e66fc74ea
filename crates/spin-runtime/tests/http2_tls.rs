//! HTTP/2 and inbound TLS through `spin-serve` on 127.0.0.1, with real clients: curl
//! (h2c by prior knowledge and by `Upgrade: h2c`, TLS with ALPN h2 and http/1.1), a tonic
//! gRPC client (unary call, status in the trailers) and hyper's HTTP/2 client (idle timeout,
//! graceful shutdown). Certificates come from a private CA made with the openssl CLI.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::*;

use test_support::curl::{Curl, VERSION};

fn curl(args: &[&str]) -> Curl {
    Curl::run(args)
}

#[test]
fn h2c_by_prior_knowledge_and_by_upgrade_beside_http1() {
    let app = prepare_app("spin-grpc");
    let server = Server::start(app.path(), &[]);
    let base = format!("http://{}", server.addr);

    // Prior knowledge: the response, its trailers (dumped with the headers) and Spin's URL.
    let c = curl(&[
        "--http2-prior-knowledge",
        "-D",
        "-",
        "-w",
        VERSION,
        &format!("{base}/x?q=1"),
    ]);
    assert!(c.ok, "{}", c.err);
    assert!(c.out.starts_with("HTTP/2 200"), "{}", c.out);
    assert!(c.out.contains("x-trailer: done"), "{}", c.out);
    assert!(
        c.out.contains(&format!("full-url={base}/x?q=1\n")),
        "{}",
        c.out
    );
    assert_eq!(c.versions(), ["2"]);

    // The health endpoint answers over HTTP/2 too.
    let c = curl(&[
        "--http2-prior-knowledge",
        "-w",
        "\nv=%{http_version}\n",
        &format!("{base}/.well-known/spin/health"),
    ]);
    assert_eq!(c.out, "OK\nv=2\n", "{}", c.err);

    // Upgrade: 101, the first request answered as stream 1, the next one on the same
    // connection (stream 3).
    let c = curl(&[
        "-v",
        "--http2",
        "-w",
        VERSION,
        &format!("{base}/first"),
        &format!("{base}/second"),
    ]);
    assert!(c.ok, "{}", c.err);
    assert!(
        c.err.contains("HTTP/1.1 101 Switching Protocols"),
        "{}",
        c.err
    );
    assert!(c.err.contains("< x-trailer: done"), "{}", c.err);
    assert!(c.err.contains("Re-using existing connection"), "{}", c.err);
    assert_eq!(c.versions(), ["2", "2"]);
    assert!(c.out.contains("path=/first\n"), "{}", c.out);
    assert!(c.out.contains("path=/second\n"), "{}", c.out);

    // A request with a body is answered in HTTP/1.1 (the upgrade is ignored, as allowed).
    let c = curl(&[
        "--http2",
        "-d",
        "hello",
        "-w",
        VERSION,
        &format!("{base}/post"),
    ]);
    assert!(c.out.contains("body-len=5\n"), "{}", c.out);
    assert_eq!(c.versions(), ["1.1"]);

    // A 3 MB request body streams through HTTP/2 flow control.
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    std::fs::write(&big, vec![7u8; 3_000_000]).unwrap();
    let c = curl(&[
        "--http2-prior-knowledge",
        "--data-binary",
        &format!("@{}", big.display()),
        &format!("{base}/big"),
    ]);
    assert!(c.out.contains("body-len=3000000\n"), "{} {}", c.out, c.err);

    // HTTP/1.1 as before.
    let r = server.get("/plain");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("path=/plain\n"), "{}", r.text());
}

/// A private CA and a certificate for localhost / 127.0.0.1 in a fresh dir.
fn pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    make_pki(dir.path());
    dir
}

fn tls_env(pki: &Path) -> [(String, String); 2] {
    [
        (
            "SPIN_TLS_CERT".into(),
            pki.join("server.pem").display().to_string(),
        ),
        (
            "SPIN_TLS_KEY".into(),
            pki.join("server.key").display().to_string(),
        ),
    ]
}

fn start_tls(app: &Path, pki: &Path) -> Server {
    let env = tls_env(pki);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start(app, &env)
}

#[test]
fn tls_serves_h2_and_http1_by_alpn() {
    let pki = pki();
    let ca = pki.path().join("ca.pem").display().to_string();
    let app = prepare_app("spin-grpc");
    let server = start_tls(app.path(), pki.path());
    let port = server.addr.port();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/x");

    // ALPN h2 (curl's default over TLS): HTTP/2, trailers, an https:// Spin URL.
    let c = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
        "-D",
        "-",
        "-w",
        VERSION,
        &url,
    ]);
    assert!(c.ok, "{}", c.err);
    assert!(c.out.starts_with("HTTP/2 200"), "{}", c.out);
    assert!(c.out.contains("x-trailer: done"), "{}", c.out);
    assert!(c.out.contains(&format!("full-url={url}\n")), "{}", c.out);
    assert_eq!(c.versions(), ["2"]);

    // ALPN http/1.1.
    let c = curl(&[
        "-v",
        "--http1.1",
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
        "-w",
        VERSION,
        &url,
    ]);
    assert!(
        c.err.contains("ALPN: server accepted http/1.1"),
        "{}",
        c.err
    );
    assert_eq!(c.versions(), ["1.1"], "{}", c.err);
    assert!(c.out.contains(&format!("full-url={url}\n")), "{}", c.out);

    // The certificate is checked against the private CA: without it, curl refuses.
    let c = curl(&["--resolve", &resolve, &url]);
    assert!(!c.ok && c.err.contains("certificate"), "{}", c.err);
    // Plain HTTP gets no HTTP answer from a TLS listener, and h2c neither.
    let c = curl(&["-w", VERSION, &format!("http://127.0.0.1:{port}/x")]);
    assert!(!c.ok, "{}", c.out);
    let c = curl(&[
        "--http2-prior-knowledge",
        &format!("http://127.0.0.1:{port}/x"),
    ]);
    assert!(!c.ok, "{}", c.out);
    // The server still serves after those.
    let c = curl(&["--cacert", &ca, "--resolve", &resolve, "-w", VERSION, &url]);
    assert_eq!(c.versions(), ["2"], "{}", c.err);
}

#[test]
fn tls_settings_errors_name_the_variable_and_the_file() {
    let pki = pki();
    let p = |f: &str| pki.path().join(f).display().to_string();
    let app = prepare_app("spin-grpc");
    let (cert, key) = (p("server.pem"), p("server.key"));

    let (missing, other) = (p("missing.pem"), p("client.key"));
    let cases: [(Vec<(&str, &str)>, String); 6] = [
        (
            vec![("SPIN_TLS_CERT", &cert)],
            "SPIN_TLS_CERT is set but SPIN_TLS_KEY is not".into(),
        ),
        (
            vec![("SPIN_TLS_KEY", &key)],
            "SPIN_TLS_KEY is set but SPIN_TLS_CERT is not".into(),
        ),
        (
            vec![("SPIN_TLS_CERT", &missing), ("SPIN_TLS_KEY", &key)],
            format!("SPIN_TLS_CERT=`{missing}`: cannot read"),
        ),
        (
            vec![("SPIN_TLS_CERT", &key), ("SPIN_TLS_KEY", &key)],
            format!("SPIN_TLS_CERT=`{key}` holds no certificate"),
        ),
        (
            vec![("SPIN_TLS_CERT", &cert), ("SPIN_TLS_KEY", &cert)],
            format!("SPIN_TLS_KEY=`{cert}`: it holds no private key"),
        ),
        // The client's key does not belong to the server's certificate.
        (
            vec![("SPIN_TLS_CERT", &cert), ("SPIN_TLS_KEY", &other)],
            format!("SPIN_TLS_KEY=`{other}` cannot serve the certificate"),
        ),
    ];
    for (env, expect) in cases {
        let e = start_failure(app.path(), &env);
        assert!(e.contains(&expect), "{env:?}: {e}");
    }
}

use test_support::grpc::say_hello;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_unary_call_with_trailers_over_h2c_and_tls() {
    let app = prepare_app("spin-grpc");
    let plain = Server::start(app.path(), &[]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", plain.addr))
        .unwrap()
        .connect()
        .await
        .expect("h2c connection");
    assert_eq!(
        say_hello(channel.clone(), "world").await.unwrap(),
        "Hello world"
    );
    // The status and message travel only in the trailers.
    let status = say_hello(channel, "fail").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(status.message(), "the name must not be fail");

    let pki = pki();
    let tls = start_tls(app.path(), pki.path());
    let ca = std::fs::read(pki.path().join("ca.pem")).unwrap();
    let config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("localhost");
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{}", tls.addr))
        .unwrap()
        .tls_config(config)
        .unwrap()
        .connect()
        .await
        .expect("TLS connection");
    assert_eq!(
        say_hello(channel.clone(), "tls").await.unwrap(),
        "Hello tls"
    );
    let status = say_hello(channel, "fail").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
}

/// An HTTP/2 connection (prior knowledge) to `addr`: the request sender and the
/// connection task, which ends when the server closes the connection.
async fn h2_connect(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("HTTP/2 handshake");
    (sender, tokio::spawn(conn))
}

async fn h2_get(
    sender: &mut hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    addr: SocketAddr,
    path: &str,
) -> String {
    use http_body_util::BodyExt;
    let req = http::Request::get(format!("http://{addr}{path}"))
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = sender.send_request(req).await.expect("HTTP/2 response");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connections_close_when_idle_and_on_sigterm() {
    let app = prepare_app("spin-grpc");
    let server = Server::start(app.path(), &[("SPIN_SHIM_IDLE_TIMEOUT", "300ms")]);
    let addr = server.addr;
    let (mut sender, conn) = h2_connect(addr).await;
    assert!(h2_get(&mut sender, addr, "/a").await.contains("path=/a\n"));
    // The idle connection is closed by the server (GOAWAY, then EOF).
    tokio::time::timeout(Duration::from_secs(30), conn)
        .await
        .expect("the idle HTTP/2 connection was not closed")
        .unwrap()
        .expect("closed cleanly");
    let log = log_with(&server, "closing connection idle");
    assert!(log.contains("closing connection idle for 300ms"), "{log}");

    // SIGTERM (default idle timeout, 30 s): an open HTTP/2 connection is shut down
    // gracefully and the server exits 0.
    let mut server = Server::start(app.path(), &[]);
    let addr = server.addr;
    let (mut sender, conn) = h2_connect(addr).await;
    assert!(h2_get(&mut sender, addr, "/b").await.contains("path=/b\n"));
    server.signal("TERM");
    tokio::time::timeout(Duration::from_secs(30), conn)
        .await
        .expect("the HTTP/2 connection outlived SIGTERM")
        .unwrap()
        .expect("closed cleanly");
    let code = tokio::task::spawn_blocking(move || server.wait_exit(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_client_that_keeps_its_window_closed_loses_the_connection() {
    let app = prepare_app("spin-grpc");
    // Idle timeout off: only the write timeout can end the connection.
    let server = Server::start(
        app.path(),
        &[
            ("SPIN_SHIM_WRITE_TIMEOUT", "1s"),
            ("SPIN_SHIM_IDLE_TIMEOUT", "0"),
        ],
    );
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    // The smallest windows HTTP/2 allows; the client reads the socket (hyper's connection
    // task) but never the body, so it never opens the window again.
    let (mut sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .adaptive_window(false)
            .handshake::<_, http_body_util::Empty<bytes::Bytes>>(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("HTTP/2 handshake");
    let conn = tokio::spawn(conn);
    let req = http::Request::get(format!("http://{}/bytes/4000000", server.addr))
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = sender.send_request(req).await.expect("response head");
    assert_eq!(resp.status(), 200);
    let ended = tokio::time::timeout(Duration::from_secs(60), conn).await;
    assert!(
        ended.is_ok(),
        "the stalled HTTP/2 connection was not closed"
    );
    let log = log_with(&server, "stopped reading");
    assert!(
        log.contains("the client stopped reading its response: nothing could be sent for 1s"),
        "{log}"
    );
    drop(resp);
}

/// An HTTP/2 frame: 9-byte header (stream 1 unless `kind` is connection-level) and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A raw HTTP/2 client on `stream`: sends the preface and an empty SETTINGS frame, answers
/// the server's SETTINGS, then sends `opening` (a header block it leaves open) and one
/// CONTINUATION frame of `trickle` every 300 ms. Without an opening it answers the server's
/// PINGs as a live client does (so that only the missing request head can end the
/// connection); with one it cannot (a header block admits no other frame). Whether the
/// server closed the connection within `within`.
async fn closed_within<S>(
    mut stream: S,
    opening: Vec<u8>,
    trickle: Vec<u8>,
    within: Duration,
) -> bool
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PING: u8 = 0x6;
    const SETTINGS: u8 = 0x4;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    if stream.write_all(&hello).await.is_err() {
        return true;
    }
    let deadline = tokio::time::Instant::now() + within;
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    let mut pending = trickle.into_iter();
    let (mut opening, mut block_open) = (Some(opening).filter(|o| !o.is_empty()), false);
    let (mut got, mut buf) = (Vec::new(), [0u8; 4096]);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            n = stream.read(&mut buf) => {
                let n = match n {
                    Ok(0) | Err(_) => return true,
                    Ok(n) => n,
                };
                got.extend_from_slice(&buf[..n]);
                while got.len() >= 9 {
                    let len = (got[0] as usize) << 16 | (got[1] as usize) << 8 | got[2] as usize;
                    if got.len() < 9 + len {
                        break;
                    }
                    let (kind, flags) = (got[3], got[4]);
                    let payload: Vec<u8> = got[9..9 + len].to_vec();
                    got.drain(..9 + len);
                    let mut answer = match (kind, flags & 1) {
                        (SETTINGS, 0) if !block_open => frame(SETTINGS, 1, 0, &[]),
                        (PING, 0) if !block_open => frame(PING, 1, 0, &payload),
                        _ => continue,
                    };
                    if let Some(o) = opening.take() {
                        answer.extend(o);
                        block_open = true;
                    }
                    if stream.write_all(&answer).await.is_err() {
                        return true;
                    }
                }
            }
            _ = tick.tick(), if block_open => {
                if let Some(b) = pending.next() {
                    // One CONTINUATION frame, without END_HEADERS, per tick.
                    if stream.write_all(&frame(0x9, 0, 1, &[b])).await.is_err() {
                        return true;
                    }
                }
            }
        }
    }
}

/// HTTP/2 request heads have the header-read timeout HTTP/1.1 heads have: a client that
/// sends the preface and then no request, or opens a stream and trickles its header block
/// (CONTINUATION frames, each well inside the timeout), loses its connection after the
/// timeout, over h2c and over TLS (ALPN h2), while answering the server's PINGs. A normal
/// HTTP/2 connection, idle longer than that timeout between its requests, stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_request_heads_have_the_header_read_timeout() {
    let app = prepare_app("spin-grpc");
    let pki = pki();
    let mut env: Vec<(String, String)> = tls_env(pki.path()).into();
    env.push(("SPIN_SHIM_HEADER_READ_TIMEOUT".into(), "1s".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plain = Server::start(app.path(), &env[2..]);
    let tls = Server::start(app.path(), &env);
    let addr = plain.addr;
    let (mut sender, conn) = h2_connect(addr).await;
    assert!(h2_get(&mut sender, addr, "/a").await.contains("path=/a\n"));

    // Deadline 1 s; 5 s is the slack. The idle timeout (30 s) cannot be what closes them.
    let within = Duration::from_secs(5);
    let connect = || tokio::net::TcpStream::connect(addr);
    let silent = closed_within(connect().await.unwrap(), Vec::new(), Vec::new(), within);
    assert!(
        silent.await,
        "a client that sent no request head kept its connection"
    );
    // HEADERS of stream 1 (`:method GET`, END_STREAM, no END_HEADERS), then
    // `accept-encoding: gzip, deflate` (HPACK index 16) once every 300 ms.
    let headers = frame(0x1, 0x1, 1, &[0x82]);
    let trickled = closed_within(connect().await.unwrap(), headers, vec![0x90; 40], within);
    assert!(
        trickled.await,
        "a client trickling its header block kept its connection"
    );
    // Both were closed by the head deadline, each with a log line naming the knob.
    let line = "closing connection: no complete HTTP/2 request head within 1s (set \
                SPIN_SHIM_HEADER_READ_TIMEOUT to change it)";
    let log_deadline = std::time::Instant::now() + Duration::from_secs(10);
    while plain.stderr.lock().unwrap().matches(line).count() < 2
        && std::time::Instant::now() < log_deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = plain.stderr.lock().unwrap().clone();
    assert_eq!(log.matches(line).count(), 2, "{log}");

    // TLS, h2 by ALPN: the same bound once the handshake is done.
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    let ca = rustls::pki_types::CertificateDer::from_pem_file(pki.path().join("ca.pem")).unwrap();
    roots.add(ca).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(tls.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert!(
        closed_within(stream, Vec::new(), Vec::new(), within).await,
        "a TLS client that sent no request head kept its connection"
    );

    // The normal connection, idle past the deadline meanwhile, still serves.
    assert!(h2_get(&mut sender, addr, "/b").await.contains("path=/b\n"));
    assert!(!conn.is_finished());
}
