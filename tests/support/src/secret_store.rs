//! A loopback HTTPS server answering JSON from a route function, behind a private CA of its
//! own (made with [`crate::pki::make_pki`]): the stand-in for secret stores no server of
//! which is installable here (Vault's KV v2, Microsoft Entra ID and Key Vault), written from
//! their published HTTP APIs by the tests that route it. One request per connection.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::pki::make_pki;

/// One request the stand-in saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Request method.
    pub method: String,
    /// Request target (path and query).
    pub target: String,
    /// Headers, names lower-cased.
    pub headers: HashMap<String, String>,
    /// The body, as text.
    pub body: String,
}

/// The stand-in store: `route` answers each request (status, JSON body).
pub struct Store {
    addr: SocketAddr,
    pki: tempfile::TempDir,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How the stand-in answers a request: (status, JSON body).
pub type Route = fn(&Seen) -> (u16, String);

impl Store {
    /// Starts the server on a free loopback port, with a new PKI.
    pub fn start(route: Route) -> Store {
        let pki = tempfile::tempdir().unwrap();
        make_pki(pki.path());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(pki.path().join("server.pem"))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(pki.path().join("server.key")).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen, stop) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(AtomicBool::new(false)),
        );
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let Ok((tcp, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                tcp.set_nonblocking(false).unwrap();
                tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let conn = rustls::ServerConnection::new(config.clone()).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                // A client that refuses the certificate ends the handshake: no request.
                let Some(req) = read_request(&mut tls) else {
                    continue;
                };
                let (status, body) = route(&req);
                seen2.lock().unwrap().push(req);
                let _ = write!(
                    tls,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        Store {
            addr,
            pki,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    /// The path of the CA certificate that signed the server's.
    pub fn ca(&self) -> String {
        self.pki.path().join("ca.pem").display().to_string()
    }

    /// The requests answered so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one HTTP/1.1 request (head and a `content-length` body) from `stream`.
pub fn read_request(stream: &mut impl Read) -> Option<Seen> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
