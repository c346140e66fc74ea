//! A libSQL server STAND-IN on loopback (no libSQL server, `sqld` or Turso, is installable
//! here), written from the libSQL project's Hrana 3 specification (`HRANA_3_SPEC.md`, "Hrana
//! over HTTP", JSON encoding: `POST /v3/pipeline` with batons, `execute` and `close` stream
//! requests, the `Value` and `StmtResult` structures). Each stream it hands out is a REAL
//! SQLite connection (rusqlite) to a database file the test reads back, so rows, types,
//! errors, `affected_row_count` and `last_insert_rowid` are SQLite's own. Plain HTTP, or
//! HTTPS with a private CA of its own ([`crate::pki::make_pki`]).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

use crate::pki::make_pki;

/// The statement the stand-in holds (does not answer) until the test releases it.
pub const HOLD: &str = "SELECT 'held'";

/// One pipeline request the stand-in received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request path.
    pub path: String,
    /// Its `Authorization` header.
    pub authorization: Option<String>,
    /// Its JSON body.
    pub body: Value,
}

/// What the stand-in's connection threads share.
struct Shared {
    db: PathBuf,
    token: String,
    /// Open streams by their current baton.
    streams: Mutex<HashMap<String, rusqlite::Connection>>,
    next_baton: AtomicU64,
    seen: Mutex<Vec<Seen>>,
    /// `HOLD` statements waiting, and whether they are released.
    held: Mutex<(usize, bool)>,
    release: Condvar,
    /// The base URL handed out with each stream (requests on it must use it).
    base_url: String,
}

/// The Hrana-over-HTTP stand-in on loopback (plain HTTP, or HTTPS from a private CA).
pub struct StandIn {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    pki: Option<tempfile::TempDir>,
    _dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StandIn {
    /// Starts it on a free loopback port; requests must carry `Bearer <token>`.
    pub fn start(token: &str, tls: bool) -> StandIn {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = if tls { "https" } else { "http" };
        let shared = Arc::new(Shared {
            db: dir.path().join("remote.db"),
            token: token.to_string(),
            streams: Mutex::default(),
            next_baton: AtomicU64::new(1),
            seen: Mutex::default(),
            held: Mutex::default(),
            release: Condvar::new(),
            base_url: format!("{scheme}://127.0.0.1:{}/sticky", addr.port()),
        });
        let pki = tls.then(|| tempfile::tempdir().unwrap());
        let config = pki.as_ref().map(|pki| server_tls(pki.path()));
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, shared2) = (stop.clone(), shared.clone());
        // Blocking accepts; Drop wakes the loop with a connection of its own after `stop`.
        let thread = std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
                let (shared, config) = (shared2.clone(), config.clone());
                // Each connection on its own thread: a held statement holds only its own.
                std::thread::spawn(move || match config {
                    Some(config) => {
                        let conn = rustls::ServerConnection::new(config).unwrap();
                        serve(&shared, rustls::StreamOwned::new(conn, tcp));
                    }
                    None => serve(&shared, tcp),
                });
            }
        });
        StandIn {
            addr,
            shared,
            pki,
            _dir: dir,
            stop,
            thread: Some(thread),
        }
    }

    /// `http(s)://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.addr.port())
    }

    /// The path of the CA certificate that signed the server's (TLS only).
    pub fn ca(&self) -> String {
        let pki = self.pki.as_ref().expect("a TLS stand-in");
        pki.path().join("ca.pem").display().to_string()
    }

    /// The pipeline requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Waits (at most 60 s) until `n` `HOLD` statements are waiting.
    pub fn wait_held(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.shared.held.lock().unwrap().0 < n {
            assert!(
                Instant::now() < deadline,
                "the held statements never arrived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets every held statement (and those to come) be answered.
    pub fn release(&self) {
        self.shared.held.lock().unwrap().1 = true;
        self.shared.release.notify_all();
    }

    /// The stand-in's database, read directly.
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.shared.db).unwrap()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.release();
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TLS server config with [`make_pki`]'s server certificate (made in `dir`).
fn server_tls(dir: &std::path::Path) -> Arc<rustls::ServerConfig> {
    make_pki(dir);
    let chain = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .expect("the server certificate");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("the server key");
    let ring = Arc::new(rustls::crypto::ring::default_provider());
    let versions = rustls::ServerConfig::builder_with_provider(ring)
        .with_safe_default_protocol_versions()
        .expect("ring's TLS versions");
    Arc::new(
        versions
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("the server's key pair"),
    )
}

/// Serves one HTTP/1.1 request on `stream` and closes it.
fn serve(shared: &Shared, mut stream: impl Read + Write) {
    // None: e.g. a client that refused the certificate.
    let Some(req) = crate::secret_store::read_request(&mut stream) else {
        return;
    };
    let body = req.body.as_bytes();
    let (status, answer) = answer(shared, &req.method, &req.target, &req.headers, body);
    let answer = answer.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{answer}",
        answer.len()
    );
    let _ = stream.flush();
}

fn hrana_error(message: &str, code: &str) -> Value {
    json!({ "message": message, "code": code })
}

/// The stand-in's answer to one request (HRANA_3_SPEC.md, "Hrana over HTTP").
fn answer(
    shared: &Shared,
    method: &str,
    path: &str,
    headers: &HashMap<String, String>,
    body: &[u8],
) -> (u16, Value) {
    if method != "POST" || !["/v3/pipeline", "/sticky/v3/pipeline"].contains(&path) {
        return (404, hrana_error("not found", "NOT_FOUND"));
    }
    let authorization = headers.get("authorization").cloned();
    if authorization != Some(format!("Bearer {}", shared.token)) {
        return (
            401,
            hrana_error("Authorization failed: invalid token", "AUTH_FAILED"),
        );
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return (400, hrana_error("the body is not JSON", "PROTOCOL"));
    };
    shared.seen.lock().unwrap().push(Seen {
        path: path.to_string(),
        authorization,
        body: body.clone(),
    });
    let conn = match body["baton"].as_str() {
        None => rusqlite::Connection::open(&shared.db).unwrap(),
        Some(baton) => {
            // A baton is good for one request, and a stream's later requests use base_url.
            match shared.streams.lock().unwrap().remove(baton) {
                Some(conn) if path == "/sticky/v3/pipeline" => conn,
                _ => {
                    return (
                        400,
                        hrana_error("the baton is not valid here", "STREAM_EXPIRED"),
                    )
                }
            }
        }
    };
    let mut closed = false;
    let mut results = Vec::new();
    for req in body["requests"].as_array().cloned().unwrap_or_default() {
        results.push(match req["type"].as_str() {
            Some("execute") => match execute(shared, &conn, &req["stmt"]) {
                Ok(result) => json!({"type": "ok", "response": {"type": "execute", "result": result}}),
                Err(e) => json!({"type": "error", "error": hrana_error(&e, "SQLITE_ERROR")}),
            },
            Some("close") => {
                closed = true;
                json!({"type": "ok", "response": {"type": "close"}})
            }
            other => {
                json!({"type": "error", "error": hrana_error(&format!("{other:?} is not served by the stand-in"), "UNSUPPORTED")})
            }
        });
    }
    let baton = if closed {
        Value::Null
    } else {
        let baton = format!(
            "baton-{}",
            shared.next_baton.fetch_add(1, Ordering::Relaxed)
        );
        shared.streams.lock().unwrap().insert(baton.clone(), conn);
        Value::String(baton)
    };
    let base_url = if closed {
        Value::Null
    } else {
        Value::String(shared.base_url.clone())
    };
    (
        200,
        json!({ "baton": baton, "base_url": base_url, "results": results }),
    )
}

/// Runs a `Stmt` on `conn`: its `StmtResult`, or SQLite's error text.
fn execute(shared: &Shared, conn: &rusqlite::Connection, stmt: &Value) -> Result<Value, String> {
    use rusqlite::types::{Value as Sql, ValueRef};
    let sql = stmt["sql"].as_str().ok_or("`sql` is missing")?;
    if sql == HOLD {
        let mut held = shared.held.lock().unwrap();
        held.0 += 1;
        let (held, _) = shared
            .release
            .wait_timeout_while(held, Duration::from_secs(120), |h| !h.1)
            .unwrap();
        drop(held);
    }
    let args = stmt["args"].as_array().cloned().unwrap_or_default();
    let params: Vec<Sql> = args
        .iter()
        .map(|a| match a["type"].as_str() {
            Some("integer") => Ok(Sql::Integer(
                a["value"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .ok_or("bad integer")?,
            )),
            Some("float") => Ok(Sql::Real(a["value"].as_f64().ok_or("bad float")?)),
            Some("text") => Ok(Sql::Text(a["value"].as_str().ok_or("bad text")?.into())),
            Some("blob") => Ok(Sql::Blob(
                base64::engine::general_purpose::STANDARD
                    .decode(a["base64"].as_str().ok_or("bad blob")?)
                    .map_err(|_| "bad base64")?,
            )),
            Some("null") => Ok(Sql::Null),
            _ => Err("bad value"),
        })
        .collect::<Result<_, _>>()?;
    let mut prepared = conn.prepare(sql).map_err(|e| e.to_string())?;
    let cols: Vec<Value> = prepared
        .column_names()
        .into_iter()
        .map(|n| json!({ "name": n, "decltype": null }))
        .collect();
    let mut rows_out = Vec::new();
    let mut rows = prepared
        .query(rusqlite::params_from_iter(params))
        .map_err(|e| e.to_string())?;
    while let Some(row) = rows.next().map_err(|e| e.to_string())? {
        let values: Vec<Value> = (0..cols.len())
            .map(|i| match row.get_ref(i).unwrap() {
                ValueRef::Null => json!({"type": "null"}),
                ValueRef::Integer(v) => json!({"type": "integer", "value": v.to_string()}),
                ValueRef::Real(v) => json!({"type": "float", "value": v}),
                ValueRef::Text(t) => {
                    json!({"type": "text", "value": String::from_utf8_lossy(t)})
                }
                ValueRef::Blob(b) => json!({
                    "type": "blob",
                    "base64": base64::engine::general_purpose::STANDARD.encode(b),
                }),
            })
            .collect();
        rows_out.push(Value::Array(values));
    }
    if stmt["want_rows"] == json!(false) {
        rows_out.clear();
    }
    Ok(json!({
        "cols": cols,
        "rows": rows_out,
        "affected_row_count": conn.changes(),
        "last_insert_rowid": conn.last_insert_rowid().to_string(),
    }))
}
