//! A loopback stand-in for Azure Cosmos DB's REST API (no Cosmos DB server or emulator is
//! installable here), written from its public documentation: the document calls of the
//! `azure_cosmos` key-value store on one container, checked against the account key.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use crate::secret_store::{read_request, Seen};

/// A loopback stand-in (plain HTTP) for Azure Cosmos DB's REST API, written from its public documentation
/// (no Cosmos DB server or emulator is installable here), serving only the document calls
/// the `azure_cosmos` store makes on one container (`dbs/db/colls/kv`, partition key `/id`):
/// read, create, upsert, replace with `if-match`, delete, and the id query (two documents per
/// page, with `x-ms-continuation`). Every request must carry a master-key token that verifies
/// with the account key, else 401 as Cosmos DB answers.
pub struct StandIn {
    /// The loopback address it listens on (plain HTTP).
    pub addr: SocketAddr,
    /// The stored documents by id, with their etag counters.
    pub docs: Arc<Mutex<std::collections::BTreeMap<String, (serde_json::Value, u64)>>>,
}

/// The stand-in's account key (base64, as the portal shows keys).
pub const KEY: &str = "c3RhbmQtaW4gYWNjb3VudCBrZXk=";

/// `s` with its `%XX` escapes decoded (`+` kept).
fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

impl StandIn {
    /// Starts the stand-in on a free loopback port, with no documents.
    pub fn start() -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let docs: Arc<Mutex<std::collections::BTreeMap<String, (serde_json::Value, u64)>>> =
            Arc::default();
        let state = docs.clone();
        // Ends with the test process; one request per connection.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let state = state.clone();
                std::thread::spawn(move || {
                    if let Some(req) = read_request(&mut stream) {
                        let (status, headers, body) = Self::answer(&req, &state);
                        let mut head = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n",
                            body.len()
                        );
                        for (k, v) in headers {
                            head.push_str(&format!("{k}: {v}\r\n"));
                        }
                        head.push_str("\r\n");
                        let _ = stream.write_all(head.as_bytes());
                        let _ = stream.write_all(body.as_bytes());
                    }
                });
            }
        });
        StandIn { addr, docs }
    }

    /// Whether `req` carries a valid master-key token for `verb`, `docs`, `link`.
    fn authorized(req: &Seen, link: &str) -> bool {
        use base64::Engine as _;
        let (Some(auth), Some(date)) = (
            req.headers.get("authorization"),
            req.headers.get("x-ms-date"),
        ) else {
            return false;
        };
        let key = base64::engine::general_purpose::STANDARD
            .decode(KEY)
            .unwrap();
        let text = format!(
            "{}\ndocs\n{link}\n{}\n\n",
            req.method.to_lowercase(),
            date.to_lowercase()
        );
        let sig = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key),
            text.as_bytes(),
        );
        let expected = format!(
            "type=master&ver=1.0&sig={}",
            base64::engine::general_purpose::STANDARD.encode(sig.as_ref())
        );
        percent_decode(auth) == expected
    }

    fn answer(
        req: &Seen,
        docs: &Mutex<std::collections::BTreeMap<String, (serde_json::Value, u64)>>,
    ) -> (u16, Vec<(&'static str, String)>, String) {
        use serde_json::{json, Value};
        const DOCS: &str = "/dbs/db/colls/kv/docs";
        let error = |status: u16, code: &str| {
            (
                status,
                vec![],
                json!({"code": code, "message": code}).to_string(),
            )
        };
        let id = req
            .target
            .strip_prefix(DOCS)
            .and_then(|rest| rest.strip_prefix('/'))
            .map(percent_decode);
        if !req.target.starts_with(DOCS) {
            return error(404, "NotFound");
        }
        let link = match &id {
            Some(id) => format!("dbs/db/colls/kv/docs/{id}"),
            None => "dbs/db/colls/kv".to_string(),
        };
        if !Self::authorized(req, &link) {
            return error(401, "Unauthorized");
        }
        let partition_ok = |id: &str| {
            req.headers.get("x-ms-documentdb-partitionkey") == Some(&json!([id]).to_string())
        };
        let mut docs = docs.lock().unwrap();
        let etag = |n: u64| format!("\"{n}\"");
        let with_etag = |doc: &Value, n: u64| {
            let mut d = doc.clone();
            d["_etag"] = json!(etag(n));
            (200, vec![("etag", etag(n))], d.to_string())
        };
        match (req.method.as_str(), id) {
            ("GET", Some(id)) if partition_ok(&id) => match docs.get(&id) {
                Some((doc, n)) => with_etag(doc, *n),
                None => error(404, "NotFound"),
            },
            ("DELETE", Some(id)) if partition_ok(&id) => match docs.remove(&id) {
                Some(_) => (204, vec![], String::new()),
                None => error(404, "NotFound"),
            },
            ("PUT", Some(id)) if partition_ok(&id) => {
                let doc: Value = serde_json::from_str(&req.body).unwrap();
                match docs.get(&id) {
                    None => error(404, "NotFound"),
                    Some((_, n)) if req.headers.get("if-match") != Some(&etag(*n)) => {
                        error(412, "PreconditionFailed")
                    }
                    Some((_, n)) => {
                        let n = n + 1;
                        docs.insert(id, (doc.clone(), n));
                        with_etag(&doc, n)
                    }
                }
            }
            ("POST", None) if req.headers.contains_key("x-ms-documentdb-isquery") => {
                let start: usize = req
                    .headers
                    .get("x-ms-continuation")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let ids: Vec<&String> = docs.keys().collect();
                let page: Vec<Value> = ids
                    .iter()
                    .skip(start)
                    .take(2)
                    .map(|id| json!({"id": id}))
                    .collect();
                let mut headers = vec![];
                if start + 2 < ids.len() {
                    headers.push(("x-ms-continuation", (start + 2).to_string()));
                }
                let body = json!({"Documents": page, "_count": page.len()}).to_string();
                (200, headers, body)
            }
            ("POST", None) => {
                let doc: Value = serde_json::from_str(&req.body).unwrap();
                let id = doc["id"].as_str().unwrap_or_default().to_string();
                if !partition_ok(&id) {
                    return error(400, "BadRequest");
                }
                let upsert = req
                    .headers
                    .get("x-ms-documentdb-is-upsert")
                    .map(String::as_str)
                    == Some("True");
                let n = match docs.get(&id) {
                    Some(_) if !upsert => return error(409, "Conflict"),
                    Some((_, n)) => n + 1,
                    None => 1,
                };
                docs.insert(id, (doc.clone(), n));
                let (_, h, b) = with_etag(&doc, n);
                (201, h, b)
            }
            _ => error(400, "BadRequest"),
        }
    }
}
