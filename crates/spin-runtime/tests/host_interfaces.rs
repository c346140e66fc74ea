//! Spin 3.x host interfaces end to end: the spin-hostifaces guest app (spin-sdk 5.2,
//! wasm32-wasip2, using every interface the SDK offers, in its `spin:*@3.0.0`/`@4.0.0` and
//! `fermyon:spin@2.0.0` forms) served by `spin-serve` against real servers this test starts
//! from Debian packages (redis-server, postgresql, mariadb-server, mosquitto) on loopback.
//! Components that import interfaces no Spin version has fail to start, naming them.

mod common;
mod servers;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const WASM: &str = "spin_hostifaces.wasm";

/// An app with one component `c` (the spin-hostifaces guest) on `/...`, with `extra`
/// component keys.
fn app(extra: &str) -> tempfile::TempDir {
    guest_wasm(WASM);
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"hostifaces\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{WASM}\"\n{extra}\n"
    ))
}

/// `GET /?op=<op>&addr=<addr>&<rest>`; the body lines.
fn call(server: &Server, op: &str, addr: &str, rest: &str) -> HttpResponse {
    server.get(&format!(
        "/?op={op}&addr={}&{rest}",
        servers::url_encode(addr)
    ))
}

/// The response text, [`plain`].
fn text_of(r: &HttpResponse) -> String {
    plain(&r.text())
}

fn ok_lines(r: &HttpResponse) -> Vec<String> {
    assert_eq!(r.status, 200, "the script failed: {}", r.text());
    text_of(r).lines().map(str::to_string).collect()
}

fn line(lines: &[String], key: &str) -> String {
    let prefix = format!("{key}=");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("no `{key}=` line in {lines:#?}"))
}

#[test]
fn sqlite_default_database_is_spins_file_and_outlives_the_process() {
    let dir = app("sqlite_databases = [\"default\"]");
    {
        let server = Server::start(dir.path(), &[]);
        let lines = ok_lines(&server.get("/?op=sqlite3"));
        assert_eq!(line(&lines, "changes"), "1");
        assert_eq!(line(&lines, "rowid"), "1");
        assert_eq!(
            line(&lines, "columns"),
            r#"["name", "age", "weight", "photo", "empty"]"#
        );
        assert_eq!(
            line(&lines, "row"),
            r#"Some([Text("rex"), Integer(3), Real(4.5), Blob([1, 2]), Null])"#
        );
        assert!(
            line(&lines, "bad_sql").contains("no such table: nowhere"),
            "{lines:?}"
        );
        let v2 = ok_lines(&server.get("/?op=sqlite2"));
        assert_eq!(line(&v2, "row"), r#"Some([Text("hello"), Integer(42)])"#);
    }
    // Spin's default database file, in the app's state dir.
    let db = dir.path().join(".spin/sqlite_db.db");
    assert!(db.is_file(), "{} was not created", db.display());
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&server.get("/?op=sqlite3"));
    assert_eq!(
        line(&lines, "count"),
        "[Integer(2)]",
        "rows did not persist"
    );
}

#[test]
fn sqlite_databases_from_runtime_config_and_access_rules() {
    let dir = app("sqlite_databases = [\"other\"]");
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        "[sqlite_database.other]\ntype = \"spin\"\npath = \"data/other.db\"\n",
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&server.get("/?op=sqlite3&db=other"));
    assert_eq!(line(&lines, "changes"), "1");
    assert!(dir.path().join("data/other.db").is_file());
    assert!(!dir.path().join(".spin/sqlite_db.db").exists());
    // Not listed in sqlite_databases: access-denied (v3 and v2), and the log says what to add.
    let denied = server.get("/?op=sqlite3&db=default");
    assert_eq!(denied.status, 500);
    assert_eq!(text_of(&denied), "error: open: AccessDenied");
    let denied2 = server.get("/?op=sqlite2&db=default");
    assert_eq!(text_of(&denied2), "error: open: AccessDenied");
    let log = log_with(&server, "sqlite_databases = [\\\"default\\\"]");
    assert!(
        log.contains("sqlite_databases = [\\\"default\\\"]")
            || log.contains("sqlite_databases = [\"default\"]"),
        "{log}"
    );
    drop(server);

    // A listed label without a definition fails the start, naming it.
    let bad = app("sqlite_databases = [\"missing\"]");
    let err = start_failure(bad.path(), &[]);
    assert!(
        err.contains("`missing`") && err.contains("[sqlite_database.missing]"),
        "{err}"
    );
    // A database type Spin does not have is named (libSQL: tests/sqlite_libsql.rs).
    let other = app("sqlite_databases = [\"default\"]");
    std::fs::write(
        other.path().join("runtime-config.toml"),
        "[sqlite_database.default]\ntype = \"postgres\"\n",
    )
    .unwrap();
    let err = start_failure(other.path(), &[]);
    assert!(
        err.contains("sqlite_database.default.type") && err.contains("\"libsql\""),
        "{err}"
    );
}

#[test]
fn redis_against_redis_server() {
    let redis = servers::redis();
    let addr = format!("redis://127.0.0.1:{}", redis.port);
    let dir = app(&format!("allowed_outbound_hosts = [\"{addr}\"]"));
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&call(&server, "redis", &addr, ""));
    assert_eq!(line(&lines, "get"), r#"Some("hello")"#);
    assert_eq!(line(&lines, "get_missing"), "None");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("incr="))
            .collect::<Vec<_>>(),
        ["incr=1", "incr=2"]
    );
    assert_eq!(line(&lines, "sadd"), "3");
    assert_eq!(line(&lines, "srem"), "1");
    assert_eq!(line(&lines, "smembers"), r#"["a", "c"]"#);
    assert_eq!(line(&lines, "del"), "3");
    assert_eq!(line(&lines, "execute"), "[Int64(3)]");
    assert_eq!(line(&lines, "execute_get"), r#"["binary:abc"]"#);
    assert_eq!(line(&lines, "execute_del"), "[Int64(1)]");
    assert_eq!(line(&lines, "publish"), "()");
    assert_eq!(line(&lines, "sadd_wrong_type"), r#""TypeError""#);

    // The server really holds what the guest wrote.
    let r = call(&server, "redis", &addr, "");
    assert_eq!(r.status, 200);
    let mut s = std::net::TcpStream::connect(redis.addr()).unwrap();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$7\r\ncounter\r\n")
        .unwrap();
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"$-1\r\n", "the script deletes its keys");

    // Another port of the same host is not allowed: invalid-address, as in Spin.
    let other = format!("redis://127.0.0.1:{}", redis.port + 1);
    let denied = call(&server, "redis", &other, "");
    assert_eq!(text_of(&denied), "error: open: InvalidAddress");
    let log = log_with(&server, "disallowed destination");
    assert!(
        log.contains(&format!("allowed_outbound_hosts = [\\\"{other}\\\"]"))
            || log.contains(&format!("allowed_outbound_hosts = [\"{other}\"]")),
        "{log}"
    );
}

#[test]
fn postgres_v4_v3_v2_against_postgresql() {
    let pg = servers::postgres();
    let addr = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port
    );
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port);
    let dir = app(&format!(
        "allowed_outbound_hosts = [\"postgres://127.0.0.1:{}\"]",
        pg.port
    ));
    let server = Server::start(dir.path(), &[]);

    let v4 = ok_lines(&call(&server, "pg4", &addr, ""));
    assert_eq!(line(&v4, "insert"), "2");
    assert_eq!(
        line(&v4, "columns"),
        "[\"name:Str\", \"n:Int32\", \"big:Int64\", \"small:Int16\", \"ok:Boolean\", \
         \"f4:Floating32\", \"f8:Floating64\", \"raw:Binary\", \"d:Date\", \"t:Time\", \
         \"ts:Datetime\", \"u:Uuid\", \"j:Jsonb\", \"dec:Decimal\", \"r:RangeInt32\", \
         \"arr:ArrayInt32\", \"strs:ArrayStr\", \"iv:Interval\", \"other:Other(\\\"inet\\\")\"]"
    );
    assert_eq!(
        line(&v4, "row0"),
        "[Str(\"widget\"), Int32(7), Int64(1099511627776), Int16(-3), Boolean(true), \
         Floating32(1.5), Floating64(2.25), Binary([0, 255]), Date((2024, 2, 29)), \
         Time((13, 14, 15, 0)), Datetime((2024, 2, 29, 13, 14, 15, 0)), \
         Uuid(\"67e55044-10b1-426f-9247-bb680e5fe0c8\"), Jsonb([123, 34, 97, 34, 58, 91, 49, \
         44, 50, 93, 125]), Decimal(\"12.345\"), RangeInt32((Some((1, Inclusive)), \
         Some((5, Exclusive)))), ArrayInt32([Some(1), None, Some(3)]), ArrayStr([Some(\"x\"), \
         None]), Interval(Interval { micros: 1000000, days: 2, months: 3 }), \
         Unsupported([2, 32, 0, 4, 127, 0, 0, 1])]"
    );
    assert_eq!(
        line(&v4, "row1"),
        "[Str(\"widget\"), DbNull, DbNull, DbNull, DbNull, DbNull, DbNull, DbNull, DbNull, \
         DbNull, DbNull, DbNull, DbNull, DbNull, DbNull, DbNull, DbNull, DbNull, DbNull]"
    );
    assert_eq!(line(&v4, "param"), "[[Int64(42)]]");
    assert_eq!(
        line(&v4, "missing_table"),
        "db-error code=42P01 message=relation \"no_such_table\" does not exist"
    );

    let v3 = ok_lines(&call(&server, "pg3", &url, ""));
    assert_eq!(
        line(&v3, "columns"),
        r#"["name:Str", "n:Int32", "d:Date", "ts:Datetime", "u:Other"]"#
    );
    assert_eq!(
        line(&v3, "row"),
        r#"Some([Str("gadget"), Int32(9), Date((2023, 12, 31)), Datetime((2023, 12, 31, 23, 59, 58, 0)), Unsupported])"#
    );

    let v2 = ok_lines(&call(&server, "pg2", &url, ""));
    assert_eq!(line(&v2, "columns"), r#"["name:Str", "n:Int64"]"#);
    assert_eq!(line(&v2, "row"), r#"Some([Str("gizmo"), Int64(-5)])"#);
    assert_eq!(
        line(&v2, "unsigned"),
        r#"Err(ValueConversionFailed("Postgres does not support unsigned integers"))"#
    );

    // A host the component may not reach: Spin's connection-failed text, every version.
    let denied = format!("host=127.0.0.2 port={} user=postgres", pg.port);
    let expected = format!("address postgres://127.0.0.2:{} is not permitted", pg.port);
    for op in ["pg4", "pg3", "pg2"] {
        let r = call(&server, op, &denied, "");
        assert_eq!(
            text_of(&r),
            format!("error: open: ConnectionFailed({expected:?})"),
            "{op}"
        );
    }
}

#[test]
fn mysql_against_mariadb() {
    let db = servers::mariadb();
    let addr = format!("mysql://root@127.0.0.1:{}/spin_test", db.port);
    let dir = app(&format!(
        "allowed_outbound_hosts = [\"mysql://127.0.0.1:{}\"]",
        db.port
    ));
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&call(&server, "mysql", &addr, ""));
    assert_eq!(
        line(&lines, "columns"),
        r#"["id:Int32", "name:Str", "age:Uint8", "score:Floating64", "photo:Binary", "big:Int64", "note:Str"]"#
    );
    assert_eq!(
        line(&lines, "row0"),
        r#"[Int32(1), Str("rex"), Uint8(3), Floating64(9.5), Binary([7, 8]), Int64(-1099511627776), Str("good dog")]"#
    );
    assert_eq!(
        line(&lines, "row1"),
        r#"[Int32(2), Str("tom"), DbNull, DbNull, DbNull, DbNull, DbNull]"#
    );
    assert_eq!(line(&lines, "bad_sql"), "true");

    let denied = format!("mysql://root@localhost:{}/spin_test", db.port);
    let r = call(&server, "mysql", &denied, "");
    assert_eq!(
        text_of(&r),
        format!("error: open: ConnectionFailed(\"address {denied} is not permitted\")")
    );
}

#[test]
fn mqtt_against_mosquitto() {
    let broker = servers::mosquitto();
    let dir = app(&format!(
        "allowed_outbound_hosts = [\"mqtt://127.0.0.1:{}\"]",
        broker.port
    ));
    let server = Server::start(dir.path(), &[]);

    // A subscriber of our own, on the same broker.
    let received = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut opts = rumqttc::MqttOptions::new("test-subscriber", "127.0.0.1", broker.port);
    opts.set_keep_alive(Duration::from_secs(30));
    let (client, mut events) = rumqttc::AsyncClient::new(opts, 100);
    let (subscribed_tx, subscribed_rx) = std::sync::mpsc::channel();
    let got = received.clone();
    rt.spawn(async move {
        client
            .subscribe("spin/#", rumqttc::QoS::ExactlyOnce)
            .await
            .unwrap();
        loop {
            match events.poll().await {
                Ok(rumqttc::Event::Incoming(rumqttc::Incoming::SubAck(_))) => {
                    let _ = subscribed_tx.send(());
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Incoming::Publish(p))) => {
                    got.lock().unwrap().push((
                        p.topic.clone(),
                        String::from_utf8_lossy(&p.payload).into_owned(),
                    ));
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    subscribed_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("subscriber got no SUBACK");

    let addr = format!("mqtt://127.0.0.1:{}?client_id=spin-guest", broker.port);
    for qos in ["0", "1", "2"] {
        let lines = ok_lines(&call(
            &server,
            "mqtt",
            &addr,
            &format!("topic=spin/q{qos}&qos={qos}"),
        ));
        assert_eq!(line(&lines, "publish"), "()");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.lock().unwrap().len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut got = received.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [
            ("spin/q0".to_string(), "hello 0".to_string()),
            ("spin/q1".to_string(), "hello 1".to_string()),
            ("spin/q2".to_string(), "hello 2".to_string()),
        ]
    );

    let denied = format!("mqtt://127.0.0.1:{}?client_id=x", broker.port + 1);
    let r = call(&server, "mqtt", &denied, "topic=spin/no&qos=1");
    assert_eq!(
        text_of(&r),
        format!("error: open: ConnectionFailed(\"address {denied} is not permitted\")")
    );
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// A loopback HTTP server answering as a Spin remote_http LLM service (Spin's API and
/// OpenAI's; model `refused` gets OpenAI's error answer); records requests.
fn llm_service() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut s) = stream else { continue };
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head, then Content-Length bytes of body.
            let (head, mut body) = loop {
                let n = s.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break (String::from_utf8_lossy(&raw).into_owned(), Vec::new());
                }
                raw.extend_from_slice(&buf[..n]);
                if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break (
                        String::from_utf8_lossy(&raw[..p]).into_owned(),
                        raw[p + 4..].to_vec(),
                    );
                }
            };
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            while body.len() < len {
                let n = s.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&buf[..n]);
            }
            let body = String::from_utf8_lossy(&body).into_owned();
            let answer = if body.contains("\"refused\"") {
                r#"{"error":{"message":"The model `refused` does not exist","type":"invalid_request_error"}}"#
            } else if head.starts_with("POST /infer ") {
                r#"{"text":"hi there","usage":{"promptTokenCount":2,"generatedTokenCount":3}}"#
            } else if head.starts_with("POST /v1/chat/completions ") {
                r#"{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello from openai"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#
            } else if head.starts_with("POST /v1/embeddings ") {
                r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25]},{"object":"embedding","index":1,"embedding":[0.75]}],"model":"m","usage":{"prompt_tokens":4,"total_tokens":4}}"#
            } else {
                r#"{"embeddings":[[0.5,1.0],[2.0,4.0]],"usage":{"promptTokenCount":2}}"#
            };
            seen2.lock().unwrap().push(format!("{head}\n\n{body}"));
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (addr, seen)
}

#[test]
fn llm_answers_as_spin_without_a_model_and_through_remote_http() {
    // Not in ai_models: Spin's access-denied text.
    let dir = app("");
    let server = Server::start(dir.path(), &[]);
    let r = server.get("/?op=llm&model=llama2-chat");
    assert_eq!(
        text_of(&r),
        "error: infer: InvalidInput(\"The component does not have access to use 'llama2-chat'. \
         To give the component access, add 'llama2-chat' to the 'ai_models' key for the \
         component in your spin.toml manifest\")"
    );
    drop(server);

    // Listed but no [llm_compute]: Spin's answer without a local engine.
    let dir = app("ai_models = [\"llama2-chat\", \"all-minilm-l6-v2\"]");
    let server = Server::start(dir.path(), &[]);
    let r = server.get("/?op=llm&model=llama2-chat");
    assert_eq!(
        text_of(&r),
        "error: infer: RuntimeError(\"Local LLM operations are not supported in this version \
         of Spin.\")"
    );
    drop(server);

    // [llm_compute] remote_http: the calls go to the service, as Spin sends them.
    let (service, seen) = llm_service();
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        format!(
            "[llm_compute]\ntype = \"remote_http\"\nurl = \"http://{service}\"\nauth_token = \"s3cret\"\n"
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&server.get("/?op=llm&model=llama2-chat"));
    assert_eq!(line(&lines, "text"), "hi there");
    assert!(
        line(&lines, "infer").contains("prompt-token-count: 2, generated-token-count: 3"),
        "{lines:?}"
    );
    let lines = ok_lines(&server.get("/?op=embed&model=all-minilm-l6-v2"));
    assert!(
        line(&lines, "embed").contains("embeddings: [[0.5, 1.0], [2.0, 4.0]]"),
        "{lines:?}"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let infer = &seen[0];
    assert!(infer.starts_with("POST /infer HTTP/1.1"), "{infer}");
    assert!(
        infer
            .to_ascii_lowercase()
            .contains("authorization: bearer s3cret"),
        "{infer}"
    );
    let body: serde_json::Value =
        serde_json::from_str(infer.split("\n\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["model"], "llama2-chat");
    assert_eq!(body["prompt"], "Say hi");
    assert_eq!(body["options"]["maxTokens"], 5);
    assert_eq!(body["options"]["topK"], 1);
    let embed = &seen[1];
    assert!(embed.starts_with("POST /embed HTTP/1.1"), "{embed}");
    let body: serde_json::Value =
        serde_json::from_str(embed.split("\n\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["input"], serde_json::json!(["one", "two"]));
    drop(server);

    // api_type = "open_ai": the same calls in OpenAI's API, as Spin sends them.
    let (service, seen) = llm_service();
    let dir = app("ai_models = [\"gpt-4o-mini\", \"text-embedding-3-small\", \"refused\"]");
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        format!(
            "[llm_compute]\ntype = \"remote_http\"\nurl = \"http://{service}\"\n\
             auth_token = \"sk-test\"\napi_type = \"open_ai\"\n"
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&server.get("/?op=llm&model=gpt-4o-mini"));
    assert_eq!(line(&lines, "text"), "hello from openai");
    assert!(
        line(&lines, "infer").contains("prompt-token-count: 9, generated-token-count: 4"),
        "{lines:?}"
    );
    let lines = ok_lines(&server.get("/?op=embed&model=text-embedding-3-small"));
    assert!(
        line(&lines, "embed").contains("embeddings: [[0.25], [0.75]]")
            && line(&lines, "embed").contains("prompt-token-count: 4"),
        "{lines:?}"
    );
    let r = server.get("/?op=llm&model=refused");
    assert_eq!(
        text_of(&r),
        "error: infer: RuntimeError(\"The model `refused` does not exist\")"
    );
    let seen = seen.lock().unwrap().clone();
    let chat = &seen[0];
    assert!(
        chat.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "{chat}"
    );
    assert!(
        chat.to_ascii_lowercase()
            .contains("authorization: bearer sk-test"),
        "{chat}"
    );
    let body: serde_json::Value = serde_json::from_str(chat.split("\n\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(
        body["messages"],
        serde_json::json!([{ "role": "user", "content": "Say hi" }])
    );
    assert_eq!(body["max_completion_tokens"], 5);
    assert_eq!(body["frequency_penalty"], 1.0);
    let embed = &seen[1];
    assert!(embed.starts_with("POST /v1/embeddings HTTP/1.1"), "{embed}");
    let body: serde_json::Value =
        serde_json::from_str(embed.split("\n\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["input"], serde_json::json!(["one", "two"]));
    assert_eq!(body["model"], "text-embedding-3-small");
}

/// The import names of a component.
fn imports_of(wasm: &Path) -> Vec<String> {
    let engine = wasmtime::Engine::default();
    let component = wasmtime::component::Component::from_file(&engine, wasm).unwrap();
    component
        .component_type()
        .imports(&engine)
        .map(|(n, _)| n.to_string())
        .collect()
}

#[test]
fn the_app_imports_every_spin_interface_and_starts() {
    let imports = imports_of(&guest_wasm(WASM));
    // spin-sdk 5.2 has no API for the unversioned (Spin 1) config interface.
    for expected in spin_runtime::host::HOST_INTERFACES
        .iter()
        .filter(|i| **i != "fermyon:spin/config")
    {
        assert!(
            imports.iter().any(|i| i == expected),
            "the guest does not import {expected}; it imports {imports:#?}"
        );
    }
    let dir = app("key_value_stores = [\"default\"]\n[variables]\ngreeting = { default = \"hi\" }\n[component.c.variables]\ngreeting = \"{{ greeting }}\"");
    let server = Server::start(dir.path(), &[]);
    assert_eq!(
        line(&ok_lines(&server.get("/?op=kv")), "get"),
        "Some([118])"
    );
    assert_eq!(line(&ok_lines(&server.get("/?op=wasikv")), "incr"), "2");
    assert_eq!(
        line(
            &ok_lines(&server.get("/?op=variables&name=greeting")),
            "get"
        ),
        r#""hi""#
    );
    assert_eq!(
        line(&ok_lines(&server.get("/?op=config&name=greeting")), "get"),
        r#"Some("hi")"#
    );
}

/// A component importing `imports` (instances with one function `f`) and exporting an
/// HTTP handler name.
fn component_importing(dir: &Path, imports: &[&str]) -> std::path::PathBuf {
    let mut wat = String::from("(component\n");
    for (i, name) in imports.iter().enumerate() {
        wat.push_str(&format!(
            "  (import \"{name}\" (instance $i{i} (export \"f\" (func))))\n"
        ));
    }
    wat.push_str(
        "  (instance $h)\n  (export \"wasi:http/incoming-handler@0.2.0\" (instance $h))\n)\n",
    );
    let bytes = wat::parse_str(&wat).unwrap();
    let path = dir.join("imports.wasm");
    std::fs::write(&path, bytes).unwrap();
    path
}

fn app_with_source(dir: &Path, wasm: &Path) {
    std::fs::write(
        dir.join("spin.toml"),
        format!(
            "spin_manifest_version = 2\n[application]\nname = \"imports\"\n\
             [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
             [component.c]\nsource = \"{}\"\n",
            wasm.display()
        ),
    )
    .unwrap();
}

#[test]
fn an_interface_no_spin_version_has_fails_the_start_naming_the_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = component_importing(
        dir.path(),
        &[
            "fermyon:spin/variables@2.0.0",
            "spin:postgres/postgres@5.0.0",
            "fermyon:spin/sqlite3@2.0.0",
            "spin:redis/redis@3.0.0",
        ],
    );
    app_with_source(dir.path(), &wasm);
    let err = start_failure(dir.path(), &[]);
    // Spin 4's interfaces are linked: only the unknown ones are named as missing.
    assert!(!err.contains("`spin:redis/redis@3.0.0` (nearest"), "{err}");
    assert!(
        err.contains(
            "`spin:postgres/postgres@5.0.0` (nearest provided: `spin:postgres/postgres@4.0.0`)"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "`fermyon:spin/sqlite3@2.0.0` (nearest provided: `fermyon:spin/sqlite@2.0.0`)"
        ),
        "{err}"
    );
    assert!(err.contains("component `c`"), "{err}");
    assert!(
        !err.contains("`fermyon:spin/variables@2.0.0` (nearest"),
        "{err}"
    );
}

/// Spin's Python SDK 3.x hello world (componentize-py keeps every import of the SDK's
/// world, so it imports all of Spin 3's interfaces) starts and answers.
#[test]
fn python_sdk_3_hello_world_imports_everything_and_serves() {
    let wasm = guest_wasm("py_spin_hello.wasm");
    let imports = imports_of(&wasm);
    for expected in [
        "fermyon:spin/llm@2.0.0",
        "fermyon:spin/redis@2.0.0",
        "fermyon:spin/mqtt@2.0.0",
        "fermyon:spin/postgres@2.0.0",
        "fermyon:spin/mysql@2.0.0",
        "fermyon:spin/sqlite@2.0.0",
        "fermyon:spin/key-value@2.0.0",
        "fermyon:spin/variables@2.0.0",
        "spin:postgres/postgres@3.0.0",
        "wasi:config/store@0.2.0-draft-2024-09-27",
        "wasi:keyvalue/store@0.2.0-draft2",
    ] {
        assert!(
            imports.iter().any(|i| i == expected),
            "the Python component does not import {expected}: {imports:#?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    app_with_source(dir.path(), &wasm);
    let server = Server::start(dir.path(), &[]);
    let r = server.get("/");
    assert_eq!((r.status, r.text().as_str()), (200, "Hello from Python!"));
}

/// `[key_value_store.<label>] type = "redis"` of the runtime config against a real
/// redis-server: the spin-kv app's store operations land in Redis (checked with
/// redis-cli), through both `fermyon:spin/key-value` and `wasi:keyvalue`.
#[test]
fn key_value_store_of_type_redis() {
    let redis = servers::redis();
    let dir = prepare_app("spin-kv");
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        format!(
            "[key_value_store.default]\ntype = \"redis\"\nurl = \"redis://{}/2\"\n\
             [key_value_store.other]\ntype = \"spin\"\n",
            redis.addr()
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]);
    let r = request(server.addr, "PUT", "/kv/greeting", b"hello redis");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/kv/greeting").text(), "hello redis");
    assert_eq!(server.get("/kv/greeting?op=exists").text(), "true");
    assert_eq!(server.get("/kv/greeting?op=wasi-get").text(), "hello redis");
    let r = request(server.addr, "POST", "/kv/count?op=incr&by=5", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request(server.addr, "POST", "/kv/count?op=incr&by=2", b"");
    assert!(r.text().contains('7'), "{}", r.text());
    let keys = server.get("/kv/?op=keys").text();
    assert!(
        keys.lines().any(|l| l == "greeting") && keys.lines().any(|l| l == "count"),
        "{keys}"
    );
    // The values are in Redis database 2, as a Redis client sees them.
    let cli = std::process::Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &redis.addr().port().to_string(),
            "-n",
            "2",
        ])
        .args(["GET", "greeting"])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "hello redis");
    let r = request(server.addr, "DELETE", "/kv/greeting", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/kv/greeting").status, 404);
    drop(server);

    // An unusable URL fails the start naming the store.
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        "[key_value_store.default]\ntype = \"redis\"\nurl = \"not a url\"\n\
         [key_value_store.other]\ntype = \"spin\"\n",
    )
    .unwrap();
    let e = start_failure(dir.path(), &[]);
    assert!(
        e.contains("key-value store `default`") && e.contains("Redis URL"),
        "{e}"
    );
}
