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
use test_support::cosmos::{StandIn as CosmosStandIn, KEY as COSMOS_KEY};
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
        if n == 0 {
            break;
        }
        // Counted before it leaves: its reply must find it counted.
        let gets = gets_in(&buf[..n]);
        if gets > 0 {
            seen.0.lock().unwrap().gets += gets;
            seen.1.notify_all();
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
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
