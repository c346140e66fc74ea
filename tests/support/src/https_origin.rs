//! A loopback HTTPS origin for URL component sources (shared with tests/integration's
//! url_sources.rs): a private CA made for the test with the openssl CLI (`ca.pem`, for
//! `SSL_CERT_FILE`), a server certificate for 127.0.0.1, a rustls server on a thread that
//! serves a few fixed routes and counts the requests per path. Stopped on drop.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The routes: `/app.wasm` (the body, with Content-Length), `/stream.wasm` (the body,
/// ended by closing the connection), `/to-https` (302 to `/app.wasm` over https),
/// `/to-http` (302 to `/app.wasm` over plain http); anything else 404.
pub struct Origin {
    pub addr: SocketAddr,
    /// Holds `ca.pem` (the private CA) among the key material.
    pub pki: tempfile::TempDir,
    counts: Arc<Mutex<HashMap<String, usize>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Origin {
    /// Starts the origin serving `body`.
    pub fn start(body: Vec<u8>) -> Origin {
        let pki = tempfile::tempdir().unwrap();
        let d = pki.path();
        crate::pki::make_pki(d);
        std::fs::write(d.join("body"), &body).unwrap();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(d.join("server.pem"))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(d.join("server.key")).unwrap();
        let provider = rustls::crypto::ring::default_provider().into();
        let builder = rustls::ServerConfig::builder_with_provider(provider);
        let builder = builder.with_protocol_versions(rustls::DEFAULT_VERSIONS);
        let config = builder.unwrap().with_no_client_auth();
        let config = Arc::new(config.with_single_cert(certs, key).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (counts.clone(), stop.clone());
        let body = Arc::new(body);
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (config, counts, body) = (config.clone(), c.clone(), body.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, config, &counts, &body, addr);
                });
            }
        });
        Origin {
            addr,
            pki,
            counts,
            stop,
            thread: Some(thread),
        }
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The private CA's certificate (PEM), for `SSL_CERT_FILE`.
    pub fn ca_file(&self) -> PathBuf {
        self.pki.path().join("ca.pem")
    }

    /// `sha256:<hex>` of the served body (computed with `openssl dgst`).
    pub fn digest(&self) -> String {
        let out = std::process::Command::new("openssl")
            .args(["dgst", "-sha256", "-r", "body"])
            .current_dir(self.pki.path())
            .output()
            .expect("openssl dgst");
        let text = String::from_utf8(out.stdout).unwrap();
        format!("sha256:{}", text.split(' ').next().unwrap())
    }

    /// Requests served for `path` so far.
    pub fn requests(&self, path: &str) -> usize {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    counts: &Mutex<HashMap<String, usize>>,
    body: &[u8],
    addr: SocketAddr,
) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
        if tls.read(&mut byte)? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    *counts.lock().unwrap().entry(path.clone()).or_default() += 1;
    let redirect = |to: String| {
        format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    };
    match path.as_str() {
        "/app.wasm" => {
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/wasm\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            tls.write_all(h.as_bytes())?;
            tls.write_all(body)?;
        }
        "/stream.wasm" => {
            tls.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/wasm\r\nConnection: close\r\n\r\n",
            )?;
            tls.write_all(body)?;
        }
        "/to-https" => tls.write_all(redirect(format!("https://{addr}/app.wasm")).as_bytes())?,
        "/to-http" => tls.write_all(redirect(format!("http://{addr}/app.wasm")).as_bytes())?,
        _ => tls.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?,
    }
    tls.conn.send_close_notify();
    tls.flush()?;
    Ok(())
}

/// A loopback HTTP CONNECT proxy (as `HTTPS_PROXY` names one): tunnels each CONNECT to its
/// target and counts them. Stopped on drop.
pub struct ConnectProxy {
    pub addr: SocketAddr,
    connects: Arc<Mutex<usize>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ConnectProxy {
    pub fn start() -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = Arc::new(Mutex::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (connects.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let c = c.clone();
                std::thread::spawn(move || {
                    let _ = tunnel(conn, &c);
                });
            }
        });
        ConnectProxy {
            addr,
            connects,
            stop,
            thread: Some(thread),
        }
    }

    /// CONNECT requests seen so far.
    pub fn connects(&self) -> usize {
        *self.connects.lock().unwrap()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn tunnel(mut client: TcpStream, connects: &Mutex<usize>) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
        if client.read(&mut byte)? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.split(' ');
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        return client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n");
    };
    *connects.lock().unwrap() += 1;
    let upstream = TcpStream::connect(target)?;
    client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    let (mut c2, mut u2) = (client.try_clone()?, upstream.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(std::net::Shutdown::Write);
    });
    let (mut u, mut c) = (upstream, client);
    let _ = std::io::copy(&mut u, &mut c);
    let _ = c.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
    Ok(())
}
