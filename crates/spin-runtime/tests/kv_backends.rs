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

/// moto's server (`scripts/install-moto.sh`, a local implementation of DynamoDB's API) on a
/// free loopback port; stopped by its pid on drop.
struct Moto {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Moto {
    fn start() -> Moto {
        let script = workspace_root().join("scripts/install-moto.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .expect("running scripts/install-moto.sh");
        assert!(out.status.success(), "install-moto.sh: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let bin = stdout
            .lines()
            .last()
            .expect("moto_server path")
            .trim()
            .to_string();
        let port = free_port();
        let child = std::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting moto_server");
        let mut moto = Moto {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(moto.addr).is_err() {
            assert!(
                moto.child.try_wait().unwrap().is_none(),
                "moto_server exited during start"
            );
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Calls DynamoDB `action` directly (moto does not check signatures: a well-formed
    /// Authorization header naming the region is enough); the status and JSON reply.
    fn call(&self, action: &str, body: &str) -> (u16, String) {
        let r = request_with(
            self.addr,
            "POST",
            "/",
            &[
                ("content-type", "application/x-amz-json-1.0"),
                ("x-amz-target", &format!("DynamoDB_20120810.{action}")),
                (
                    "authorization",
                    "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, \
                     SignedHeaders=host, Signature=00",
                ),
            ],
            body.as_bytes(),
        );
        (r.status, r.text())
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `[key_value_store.default] type = "aws_dynamo"` (Spin's keys) against moto's DynamoDB:
/// the spin-kv app's operations land in the table in Spin's item layout (`PK` = key, `VAL` =
/// the bytes), through `fermyon:spin/key-value` and `wasi:keyvalue`; a missing table is the
/// guest's error naming it, and a half credential pair fails the start naming the keys.
#[test]
fn key_value_store_of_type_aws_dynamo_against_moto() {
    let moto = Moto::start();
    let (status, text) = moto.call(
        "CreateTable",
        r#"{"TableName":"kv","KeySchema":[{"AttributeName":"PK","KeyType":"HASH"}],
            "AttributeDefinitions":[{"AttributeName":"PK","AttributeType":"S"}],
            "BillingMode":"PAY_PER_REQUEST"}"#,
    );
    assert_eq!(status, 200, "CreateTable: {text}");
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
