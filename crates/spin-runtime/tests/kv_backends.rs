//! Key-value stores on remote backends, through spin-serve and the spin-kv guest app:
//! concurrent calls to a Redis store are in flight at once (not queued behind one blocking
//! connection).

mod common;
mod servers;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::*;
use test_support::moto::Moto;

/// How long the proxy holds Redis's first reply while waiting for a second command.
const HOLD_BOUND: Duration = Duration::from_secs(30);

/// What [`HoldingProxy`] saw.
#[derive(Debug, Default)]
struct Seen {
    /// `GET` commands received from the client so far.
    gets: usize,
    /// `GET`s received by the time the first reply after a `GET` was let through
    /// (`None`: no reply held yet).
    gets_before_first_reply: Option<usize>,
}

/// A loopback TCP proxy in front of a real redis-server that, once a client has sent a
/// `GET`, holds the server's replies until a second `GET` arrives (bounded by
/// [`HOLD_BOUND`]). If the store's calls serialize, the second `GET` cannot be sent before
/// the first one's reply, so the proxy records only one `GET` in flight.
struct HoldingProxy {
    addr: SocketAddr,
    seen: Arc<(Mutex<Seen>, Condvar)>,
}

/// Occurrences of a RESP `GET` command in `bytes`.
fn gets_in(bytes: &[u8]) -> usize {
    const GET: &[u8] = b"*2\r\n$3\r\nGET\r\n";
    bytes.windows(GET.len()).filter(|w| *w == GET).count()
}

impl HoldingProxy {
    fn start(upstream: SocketAddr) -> HoldingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<(Mutex<Seen>, Condvar)> = Arc::default();
        let shared = seen.clone();
        // Ends when the test process does; each connection's threads end with its sockets.
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(upstream).unwrap();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = shared.clone();
                std::thread::spawn(move || pump_commands(client, server, &up));
                let down = shared.clone();
                std::thread::spawn(move || pump_replies(s2, c2, &down));
            }
        });
        HoldingProxy { addr, seen }
    }

    fn gets_before_first_reply(&self) -> Option<usize> {
        self.seen.0.lock().unwrap().gets_before_first_reply
    }
}

/// Client to server: forwards everything, counting `GET`s.
fn pump_commands(mut from: TcpStream, mut to: TcpStream, seen: &(Mutex<Seen>, Condvar)) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
        let gets = gets_in(&buf[..n]);
        if gets > 0 {
            seen.0.lock().unwrap().gets += gets;
            seen.1.notify_all();
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Server to client: once a `GET` was sent, the first reply waits for a second `GET` (or
/// the bound); everything else passes at once.
fn pump_replies(mut from: TcpStream, mut to: TcpStream, seen: &(Mutex<Seen>, Condvar)) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        {
            let (lock, cv) = seen;
            let mut s = lock.lock().unwrap();
            if s.gets > 0 && s.gets_before_first_reply.is_none() {
                let deadline = Instant::now() + HOLD_BOUND;
                while s.gets < 2 && Instant::now() < deadline {
                    let left = deadline.saturating_duration_since(Instant::now());
                    s = cv.wait_timeout(s, left).unwrap().0;
                }
                s.gets_before_first_reply = Some(s.gets);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Two requests whose handlers each `get` from a Redis store: the second `GET` reaches
/// Redis while the first is still unanswered, so one instance waiting for Redis does not
/// stop another's call (the store's connection is shared and awaited, not locked).
#[test]
fn redis_store_calls_from_concurrent_requests_are_in_flight_together() {
    let redis = servers::redis();
    let proxy = HoldingProxy::start(redis.addr());
    let dir = prepare_app("spin-kv");
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        format!(
            "[key_value_store.default]\ntype = \"redis\"\nurl = \"redis://{}\"\n\
             [key_value_store.other]\ntype = \"spin\"\n",
            proxy.addr
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]);
    let addr = server.addr;
    let calls: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|key| std::thread::spawn(move || request(addr, "GET", &format!("/kv/{key}"), b"")))
        .collect();
    for call in calls {
        let r = call.join().unwrap();
        assert_eq!(r.status, 404, "an absent key: {}", r.text());
    }
    assert_eq!(
        proxy.gets_before_first_reply(),
        Some(2),
        "the second request's GET did not reach Redis while the first GET was unanswered \
         (held for up to {HOLD_BOUND:?}): the store's calls are serialized"
    );
    drop(server);
}

/// `[key_value_store.default] type = "aws_dynamo"` (Spin's keys) against moto's DynamoDB:
/// the spin-kv app's operations land in the table in Spin's item layout (`PK` = key, `VAL` =
/// the bytes), through `fermyon:spin/key-value` and `wasi:keyvalue`; a missing table is the
/// guest's error naming it, and a half credential pair fails the start naming the keys.
#[test]
fn key_value_store_of_type_aws_dynamo_against_moto() {
    let moto = Moto::start(&workspace_root());
    moto.create_kv_table("kv");
    let dir = prepare_app("spin-kv");
    let config = |table: &str| {
        format!(
            "[key_value_store.default]\ntype = \"aws_dynamo\"\ntable = \"{table}\"\n\
             region = \"us-east-1\"\naccess_key = \"test\"\nsecret_key = \"test\"\n\
             consistent_read = true\n\
             [key_value_store.other]\ntype = \"spin\"\n"
        )
    };
    std::fs::write(dir.path().join("runtime-config.toml"), config("kv")).unwrap();
    let endpoint = format!("http://{}", moto.addr);
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())];
    let server = Server::start(dir.path(), &env);
    let r = request(server.addr, "PUT", "/kv/greeting", b"hello dynamo");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/kv/greeting").text(), "hello dynamo");
    assert_eq!(server.get("/kv/greeting?op=exists").text(), "true");
    assert_eq!(server.get("/kv/absent?op=exists").text(), "false");
    assert_eq!(server.get("/kv/absent").status, 404);
    assert_eq!(
        server.get("/kv/greeting?op=wasi-get").text(),
        "hello dynamo"
    );
    let r = request(server.addr, "POST", "/kv/count?op=incr&by=5", b"");
    assert_eq!((r.status, r.text()), (200, "5".to_string()));
    let r = request(server.addr, "POST", "/kv/count?op=incr&by=-7", b"");
    assert_eq!((r.status, r.text()), (200, "-2".to_string()));
    assert_eq!(server.get("/kv/?op=keys").text(), "count\ngreeting");

    // The items as DynamoDB holds them: Spin's layout.
    let (status, item) = moto.call(
        "GetItem",
        r#"{"TableName":"kv","Key":{"PK":{"S":"greeting"}}}"#,
    );
    assert_eq!(status, 200, "{item}");
    assert!(
        item.contains(r#""VAL": {"B": "aGVsbG8gZHluYW1v"}"#)
            || item.contains(r#""VAL":{"B":"aGVsbG8gZHluYW1v"}"#),
        "{item}"
    );
    let r = request(server.addr, "DELETE", "/kv/greeting", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/kv/greeting").status, 404);
    drop(server);

    // A table that does not exist: the guest gets DynamoDB's error naming it.
    std::fs::write(dir.path().join("runtime-config.toml"), config("missing")).unwrap();
    let server = Server::start(dir.path(), &env);
    let r = server.get("/kv/greeting");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("ResourceNotFoundException") && r.text().contains("`missing`"),
        "{}",
        r.text()
    );
    drop(server);

    // Half a credential pair fails the start, naming the keys.
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        "[key_value_store.default]\ntype = \"aws_dynamo\"\ntable = \"kv\"\n\
         region = \"us-east-1\"\naccess_key = \"test\"\n",
    )
    .unwrap();
    let e = start_failure(dir.path(), &env);
    assert!(e.contains("access_key") && e.contains("secret_key"), "{e}");
}

/// A loopback stand-in for Azure Cosmos DB's REST API, written from its public documentation
/// (no Cosmos DB server or emulator is installable here), serving only the document calls
/// the `azure_cosmos` store makes on one container (`dbs/db/colls/kv`, partition key `/id`):
/// read, create, upsert, replace with `if-match`, delete, and the id query (two documents per
/// page, with `x-ms-continuation`). Every request must carry a master-key token that verifies
/// with the account key, else 401 as Cosmos DB answers.
struct CosmosStandIn {
    addr: SocketAddr,
    docs: Arc<Mutex<std::collections::BTreeMap<String, (serde_json::Value, u64)>>>,
}

/// The stand-in's account key (base64, as the portal shows keys).
const COSMOS_KEY: &str = "c3RhbmQtaW4gYWNjb3VudCBrZXk=";

struct CosmosRequest {
    method: String,
    path: String,
    headers: std::collections::HashMap<String, String>,
    body: Vec<u8>,
}

fn read_request(stream: &mut TcpStream) -> Option<CosmosRequest> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).ok()?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: std::collections::HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).ok()?;
    Some(CosmosRequest {
        method,
        path,
        headers,
        body,
    })
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

impl CosmosStandIn {
    fn start() -> CosmosStandIn {
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
        CosmosStandIn { addr, docs }
    }

    /// Whether `req` carries a valid master-key token for `verb`, `docs`, `link`.
    fn authorized(req: &CosmosRequest, link: &str) -> bool {
        use base64::Engine as _;
        let (Some(auth), Some(date)) = (
            req.headers.get("authorization"),
            req.headers.get("x-ms-date"),
        ) else {
            return false;
        };
        let key = base64::engine::general_purpose::STANDARD
            .decode(COSMOS_KEY)
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
        req: &CosmosRequest,
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
            .path
            .strip_prefix(DOCS)
            .and_then(|rest| rest.strip_prefix('/'))
            .map(percent_decode);
        if !req.path.starts_with(DOCS) {
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
                let doc: Value = serde_json::from_slice(&req.body).unwrap();
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
                let doc: Value = serde_json::from_slice(&req.body).unwrap();
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

/// `[key_value_store.default] type = "azure_cosmos"` (Spin's keys, plus this runtime's
/// `endpoint`) against the Cosmos DB stand-in: the spin-kv app's operations land as Spin's
/// documents (`{"id", "value": [bytes]}`, a counter as a number), keys are listed across
/// pages, a wrong account key is the guest's error naming the container, and a definition
/// without `key` fails the start naming it.
#[test]
fn key_value_store_of_type_azure_cosmos_against_a_stand_in() {
    let cosmos = CosmosStandIn::start();
    let dir = prepare_app("spin-kv");
    let config = |key: &str| {
        format!(
            "[key_value_store.default]\ntype = \"azure_cosmos\"\nkey = \"{key}\"\n\
             account = \"standin\"\ndatabase = \"db\"\ncontainer = \"kv\"\n\
             endpoint = \"http://{}\"\n\
             [key_value_store.other]\ntype = \"spin\"\n",
            cosmos.addr
        )
    };
    std::fs::write(dir.path().join("runtime-config.toml"), config(COSMOS_KEY)).unwrap();
    let server = Server::start(dir.path(), &[]);
    let r = request(server.addr, "PUT", "/kv/greeting", b"hi");
    assert_eq!(r.status, 200, "{}", r.text());
    // The app takes the path as the key, `%` included: a key that needs encoding in a URL.
    let r = request(server.addr, "PUT", "/kv/other%20key", b"x");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/kv/greeting").text(), "hi");
    assert_eq!(server.get("/kv/greeting?op=exists").text(), "true");
    assert_eq!(server.get("/kv/absent?op=exists").text(), "false");
    assert_eq!(server.get("/kv/absent").status, 404);
    assert_eq!(server.get("/kv/greeting?op=wasi-get").text(), "hi");
    let r = request(server.addr, "POST", "/kv/count?op=incr&by=5", b"");
    assert_eq!((r.status, r.text()), (200, "5".to_string()));
    let r = request(server.addr, "POST", "/kv/count?op=incr&by=-7", b"");
    assert_eq!((r.status, r.text()), (200, "-2".to_string()));
    assert_eq!(
        server.get("/kv/?op=keys").text(),
        "count\ngreeting\nother%20key"
    );
    {
        let docs = cosmos.docs.lock().unwrap();
        assert_eq!(
            docs["greeting"].0,
            serde_json::json!({"id": "greeting", "value": [104, 105]})
        );
        assert_eq!(
            docs["count"].0,
            serde_json::json!({"id": "count", "value": -2})
        );
    }
    let r = request(server.addr, "DELETE", "/kv/greeting", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/kv/greeting").status, 404);
    drop(server);

    // Another account key: Cosmos DB's 401 reaches the guest, naming the container.
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        config("d3Jvbmcga2V5"),
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]);
    let r = server.get("/kv/count");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("401") && r.text().contains("`kv`"),
        "{}",
        r.text()
    );
    drop(server);

    // No `key`: refused at start, naming it.
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        "[key_value_store.default]\ntype = \"azure_cosmos\"\naccount = \"a\"\n\
         database = \"db\"\ncontainer = \"kv\"\n",
    )
    .unwrap();
    let e = start_failure(dir.path(), &[]);
    assert!(e.contains("key_value_store.default.key"), "{e}");
}
