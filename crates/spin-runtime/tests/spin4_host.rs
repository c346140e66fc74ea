//! Spin 4's `async func` host interfaces end to end: the sdk6-http guest (Rust spin-sdk 6.0.0,
//! which calls the async forms; a few steps call the plain forms through the SDK's bindings)
//! served by `spin-serve`, its `/host?op=...` route exercising `spin:key-value@3.0.0`,
//! `spin:sqlite@3.1.0`, `spin:redis@3.0.0`, `spin:postgres@4.2.0`, `spin:mqtt@3.0.0` and
//! `spin:mysql@3.0.0` against the same stores as the Spin 3 forms and against real servers
//! this test starts from Debian packages (redis-server, postgresql, mariadb-server,
//! mosquitto) on loopback. A destination not
//! in `allowed_outbound_hosts` fails with the same error as the Spin 3 forms.

mod common;
mod servers;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const WASM: &str = "sdk6_http.wasm";

/// An app with one component `c` (the sdk6-http guest) on `/host`, with `extra` component
/// keys.
fn app(extra: &str) -> tempfile::TempDir {
    guest_wasm(WASM);
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"spin4-host\"\n\
         [[trigger.http]]\nroute = \"/host\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{WASM}\"\n{extra}\n"
    ))
}

/// `GET /host?op=<op>&addr=<addr>&<rest>`.
fn call(server: &Server, op: &str, addr: &str, rest: &str) -> HttpResponse {
    server.get(&format!(
        "/host?op={op}&addr={}&{rest}",
        servers::url_encode(addr)
    ))
}

/// The response's lines, [`plain`]; the script must have succeeded.
fn ok_lines(r: &HttpResponse) -> Vec<String> {
    assert_eq!(r.status, 200, "the script failed: {}", r.text());
    plain(&r.text()).lines().map(str::to_string).collect()
}

/// The value of `key=` in `lines`.
fn line(lines: &[String], key: &str) -> String {
    let prefix = format!("{key}=");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("no {key}= in {lines:#?}"))
}

/// The rows of `sql` in the SQLite file at `path`, each as its columns' text.
fn sqlite_rows(path: &std::path::Path, sql: &str) -> Vec<Vec<String>> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |row| {
        (0..n)
            .map(|i| {
                Ok(match row.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => "NULL".to_string(),
                    rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                    rusqlite::types::ValueRef::Real(v) => v.to_string(),
                    rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                        String::from_utf8_lossy(t).into_owned()
                    }
                })
            })
            .collect()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The log names the refused destination and the `allowed_outbound_hosts` entry to add.
fn assert_denial_logged(server: &Server, destination: &str) {
    let log = log_with(server, destination);
    assert!(
        log.contains(&format!("allowed_outbound_hosts = [\"{destination}\"]")),
        "{log}"
    );
}

#[test]
fn key_value_3_on_the_default_store() {
    let dir = app("key_value_stores = [\"default\"]");
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&call(&server, "kv", "", ""));
    // A label the component does not list: access-denied, as the Spin 3 form answers.
    assert_eq!(line(&lines, "open_unlisted"), "Some(AccessDenied)");
    assert_eq!(line(&lines, "get_a"), r#"Some("apple")"#);
    assert_eq!(line(&lines, "get_missing"), "None");
    assert_eq!(line(&lines, "exists_b"), "true");
    assert_eq!(line(&lines, "delete_b"), "()");
    assert_eq!(line(&lines, "exists_b_after"), "false");
    assert_eq!(line(&lines, "delete_missing"), "()");
    // get-keys: the stream of keys, its future resolved ok.
    assert_eq!(line(&lines, "keys_sorted"), r#"["a", "c"]"#);
    drop(server);
    // The same store the Spin 3 forms use: Spin's file and table under the app's .spin/.
    let db = dir.path().join(".spin/sqlite_key_value.db");
    assert_eq!(
        sqlite_rows(
            &db,
            "SELECT key, value FROM spin_key_value WHERE store = 'default' ORDER BY key"
        ),
        [["a", "apple"], ["c", "cherry"]]
    );
}

#[test]
fn sqlite_3_1_async_and_plain_on_the_default_database() {
    let dir = app("sqlite_databases = [\"default\"]");
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&call(&server, "sqlite", "", ""));
    assert_eq!(line(&lines, "open_unlisted"), "Some(AccessDenied)");
    assert_eq!(line(&lines, "changes"), "1");
    assert_eq!(line(&lines, "last_insert_rowid_positive"), "true");
    // execute-async: the columns, then the rows through the stream.
    assert_eq!(
        line(&lines, "columns"),
        r#"["name", "weight", "photo", "empty"]"#
    );
    assert_eq!(line(&lines, "rows"), "2");
    assert_eq!(
        line(&lines, "row0"),
        r#"[Text("rex"), Real(12.5), Blob([1, 2, 3]), Null]"#
    );
    assert_eq!(
        line(&lines, "row1"),
        r#"[Text("tom"), Real(4.25), Blob([1, 2, 3]), Null]"#
    );
    assert_eq!(
        line(&lines, "missing_table"),
        r#"Some(Io("no such table: no_such_table"))"#
    );
    // The plain forms of 3.1.0 on the same database.
    assert_eq!(
        line(&lines, "plain_count"),
        r#"(["count(*)"], [[Integer(2)]])"#
    );
    assert_eq!(line(&lines, "plain_changes"), "1");
    assert_eq!(line(&lines, "plain_rowid_positive"), "true");
    assert_eq!(
        line(&lines, "plain_missing_table"),
        r#"Some(Io("no such table: no_such_table"))"#
    );
    drop(server);
    // Spin's default database file under the app's .spin/, as the Spin 3 forms write it.
    assert_eq!(
        sqlite_rows(
            &dir.path().join(".spin/sqlite_db.db"),
            "SELECT name, weight FROM pets ORDER BY name"
        ),
        [["plain", "NULL"], ["rex", "12.5"], ["tom", "4.25"]]
    );
}

#[test]
fn redis_3_against_redis_server() {
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
    assert_eq!(line(&lines, "smembers_sorted"), r#"["a", "c"]"#);
    assert_eq!(line(&lines, "sadd_wrong_type"), "Some(TypeError)");
    assert_eq!(line(&lines, "del"), "3");
    assert_eq!(line(&lines, "execute_set"), r#"[Status("OK")]"#);
    assert_eq!(line(&lines, "execute_get"), r#"["binary:abc"]"#);
    assert_eq!(line(&lines, "execute_del"), "[Int64(1)]");
    assert_eq!(line(&lines, "publish"), "()");
    // The server holds what the guest left: nothing (the script deletes its keys).
    assert_eq!(
        redis.redis_cli(&["EXISTS", "spin4-key"]).unwrap().trim(),
        "0"
    );

    // Another port of the same host is not allowed: invalid-address, as the Spin 3 form.
    let other = format!("redis://127.0.0.1:{}", redis.port + 1);
    let denied = call(&server, "redis", &other, "");
    assert_eq!(denied.status, 500);
    assert_eq!(plain(&denied.text()), "error: open: InvalidAddress");
    assert_denial_logged(&server, &other);
}

#[test]
fn postgres_4_2_against_postgresql() {
    let pg = servers::postgres();
    let addr = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port
    );
    let dir = app(&format!(
        "allowed_outbound_hosts = [\"postgres://127.0.0.1:{}\"]",
        pg.port
    ));
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&call(&server, "pg", &addr, ""));
    // open-async, execute-async, query-async (columns, then rows through the stream).
    assert_eq!(line(&lines, "insert"), "2");
    assert_eq!(
        line(&lines, "columns"),
        r#"["name:Str", "age:Int32", "weight:Floating64"]"#
    );
    assert_eq!(
        line(&lines, "row0"),
        r#"(Some("rex"), Some(Some(3)), Some(Some(12.5)))"#
    );
    assert_eq!(
        line(&lines, "row1"),
        r#"(Some("tom"), Some(None), Some(None))"#
    );
    assert_eq!(line(&lines, "missing_table_is_42P01"), "true");
    // The plain forms, and the connection builder (build, build-async).
    assert_eq!(line(&lines, "plain_count"), "[[Int32(2)]]");
    assert_eq!(line(&lines, "plain_execute"), "1");
    // No TLS here: a CA root is refused, saying so.
    assert_eq!(line(&lines, "builder_set_ca_root"), "true");
    assert_eq!(line(&lines, "built_drop_table"), "0");
    assert_eq!(line(&lines, "builder_build"), "()");

    // A host the component may not reach: Spin's connection-failed text.
    let denied = format!("host=127.0.0.2 port={} user=postgres", pg.port);
    let r = call(&server, "pg", &denied, "");
    assert_eq!(r.status, 500);
    assert_eq!(
        plain(&r.text()),
        format!(
            "error: open: PgError(ConnectionFailed(\"address postgres://127.0.0.2:{} is not \
             permitted\"))",
            pg.port
        )
    );
    assert_denial_logged(&server, &format!("postgres://127.0.0.2:{}", pg.port));
}

#[test]
fn mqtt_3_against_mosquitto() {
    let broker = servers::mosquitto();
    let dir = app(&format!(
        "allowed_outbound_hosts = [\"mqtt://127.0.0.1:{}\"]",
        broker.port
    ));
    let server = Server::start(dir.path(), &[]);

    // A subscriber of our own, on the same broker.
    let received = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut opts = rumqttc::MqttOptions::new("spin4-subscriber", "127.0.0.1", broker.port);
    opts.set_keep_alive(Duration::from_secs(30));
    let (client, mut events) = rumqttc::AsyncClient::new(opts, 100);
    let (subscribed_tx, subscribed_rx) = std::sync::mpsc::channel();
    let got = received.clone();
    rt.spawn(async move {
        client
            .subscribe("spin4/#", rumqttc::QoS::ExactlyOnce)
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

    let addr = format!("mqtt://127.0.0.1:{}?client_id=spin4-guest", broker.port);
    for qos in ["0", "1", "2"] {
        let lines = ok_lines(&call(
            &server,
            "mqtt",
            &addr,
            &format!("topic=spin4/q{qos}&qos={qos}"),
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
            ("spin4/q0".to_string(), "spin4 q0".to_string()),
            ("spin4/q1".to_string(), "spin4 q1".to_string()),
            ("spin4/q2".to_string(), "spin4 q2".to_string()),
        ]
    );

    let denied = format!("mqtt://127.0.0.1:{}?client_id=x", broker.port + 1);
    let r = call(&server, "mqtt", &denied, "topic=spin4/no&qos=1");
    assert_eq!(r.status, 500);
    assert_eq!(
        plain(&r.text()),
        format!("error: open: ConnectionFailed(\"address {denied} is not permitted\")")
    );
    assert_denial_logged(&server, &format!("mqtt://127.0.0.1:{}", broker.port + 1));
    rt.shutdown_timeout(Duration::from_secs(1));
}

#[test]
fn mysql_3_against_mariadb() {
    let db = servers::mariadb();
    let addr = format!("mysql://root@127.0.0.1:{}/spin_test", db.port);
    let dir = app(&format!(
        "allowed_outbound_hosts = [\"mysql://127.0.0.1:{}\"]",
        db.port
    ));
    let server = Server::start(dir.path(), &[]);
    let lines = ok_lines(&call(&server, "mysql", &addr, ""));
    // query: the columns, then the rows through the stream, then the future's ok.
    assert_eq!(
        line(&lines, "columns"),
        r#"["id:Int32", "name:Str", "age:Uint8", "photo:Binary"]"#
    );
    assert_eq!(line(&lines, "done"), "()");
    assert_eq!(
        line(&lines, "row0"),
        r#"[Int32(1), Str("rex"), Uint8(3), Binary([7, 8])]"#
    );
    assert_eq!(
        line(&lines, "row1"),
        r#"[Int32(2), Str("tom"), DbNull, DbNull]"#
    );
    assert_eq!(line(&lines, "bad_sql_is_query_failed"), "true");
    assert_eq!(line(&lines, "drop_table"), "()");

    let denied = format!("mysql://root@localhost:{}/spin_test", db.port);
    let r = call(&server, "mysql", &denied, "");
    assert_eq!(r.status, 500);
    assert_eq!(
        plain(&r.text()),
        format!("error: open: ConnectionFailed(\"address {denied} is not permitted\")")
    );
    assert_denial_logged(&server, &format!("mysql://localhost:{}", db.port));
}
