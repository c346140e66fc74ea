//! SQLite databases on libSQL (`[sqlite_database.<label>] type = "libsql"`, `url`, `token`)
//! through spin-serve and the spin-hostifaces and spin-hostile guests.
//!
//! No libSQL server (`sqld`, Turso) is installable here, so the server is a loopback
//! STAND-IN (`test_support::libsql`, shared with the CRI tests) written from the libSQL project's Hrana 3 specification (`HRANA_3_SPEC.md`, "Hrana
//! over HTTP", JSON encoding: `POST /v3/pipeline` with batons, `execute` and `close` stream
//! requests, the `Value` and `StmtResult` structures). Each stream it hands out is a REAL
//! SQLite connection (rusqlite) to a database file the test reads back, so the rows, types,
//! errors, `affected_row_count` and `last_insert_rowid` the guests see are SQLite's own.

mod common;
mod servers;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use test_support::libsql::{StandIn, HOLD};

/// An app of spin-hostifaces on `/ifaces/...` and spin-hostile on `/...`, both with SQLite
/// databases `remote` (libSQL at `url` with `token`) and `local` (an in-memory one).
fn app(url: &str, token: &str) -> tempfile::TempDir {
    guest_wasm("spin_hostifaces.wasm");
    guest_wasm("spin_hostile.wasm");
    let dir = app_from_manifest(
        "spin_manifest_version = 2\n[application]\nname = \"libsql\"\n\
         [[trigger.http]]\nroute = \"/ifaces/...\"\ncomponent = \"ifaces\"\n\
         [component.ifaces]\nsource = \"{WASM_DIR}/spin_hostifaces.wasm\"\n\
         sqlite_databases = [\"remote\"]\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"hostile\"\n\
         [component.hostile]\nsource = \"{WASM_DIR}/spin_hostile.wasm\"\n\
         sqlite_databases = [\"remote\", \"local\"]\n",
    );
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        format!(
            "[sqlite_database.remote]\ntype = \"libsql\"\nurl = \"{url}\"\ntoken = \"{token}\"\n\
             [sqlite_database.local]\ntype = \"spin\"\n"
        ),
    )
    .unwrap();
    dir
}

/// Runs a spin-hostifaces script (`GET /?<query>`); its `step=value` lines by step (the
/// first of each).
fn script(server: &Server, query: &str) -> HashMap<String, String> {
    let r = server.get(&format!("/ifaces/?{query}"));
    assert_eq!(r.status, 200, "{query}: {}", r.text());
    let mut steps = HashMap::new();
    for (step, value) in plain(&r.text()).lines().filter_map(|l| l.split_once('=')) {
        steps
            .entry(step.to_string())
            .or_insert_with(|| value.to_string());
    }
    steps
}

/// Asserts a 200 answer with `text`.
fn answered(r: &HttpResponse, text: &str) {
    assert_eq!(r.status, 200, "expected {text:?}: {}", r.text());
    assert_eq!(r.text(), text);
}

/// `GET /sql` (spin-hostile) running `statements` on database `db`, one connection.
fn sql(server: &Server, db: &str, statements: &[&str]) -> HttpResponse {
    let mut query = format!("db={db}&sql={}", servers::url_encode(statements[0]));
    if let Some(second) = statements.get(1) {
        query += &format!("&sql2={}", servers::url_encode(second));
    }
    server.get(&format!("/sql?{query}"))
}

#[test]
fn a_libsql_database_serves_spins_sqlite_interfaces_with_real_sqlite_results() {
    let remote = StandIn::start("s3cret", false);
    let dir = app(&remote.url(), "s3cret");
    let server = Server::start(dir.path(), &[]);

    // spin:sqlite@3.0.0: every value type both ways, changes, last-insert-rowid, SQL errors.
    let steps = script(&server, "op=sqlite3&db=remote");
    assert_eq!(steps["changes"], "1");
    assert_eq!(steps["rowid"], "1");
    assert_eq!(
        steps["columns"],
        r#"["name", "age", "weight", "photo", "empty"]"#
    );
    assert_eq!(
        steps["row"],
        r#"Some([Text("rex"), Integer(3), Real(4.5), Blob([1, 2]), Null])"#
    );
    let bad = &steps["bad_sql"];
    assert!(
        bad.contains("no such table: nowhere") && bad.contains("libSQL database `remote`"),
        "{bad}"
    );
    // fermyon:spin/sqlite@2.0.0 on the same server.
    let steps = script(&server, "op=sqlite2&db=remote");
    assert_eq!(steps["row"], r#"Some([Text("hello"), Integer(42)])"#);

    // The rows are in the server's SQLite database, with SQLite's types.
    let (name, types): (String, String) = remote
        .db()
        .query_row(
            "SELECT name, typeof(age) || ',' || typeof(weight) || ',' || typeof(photo) FROM pets",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (name.as_str(), types.as_str()),
        ("rex", "integer,real,blob")
    );

    // A guest connection is one stream: a temporary table (per SQLite connection) made by
    // its first statement is there for its second.
    let r = sql(
        &server,
        "remote",
        &["CREATE TEMP TABLE t AS SELECT 7 AS x", "SELECT x FROM t"],
    );
    answered(&r, "7");

    // What went over the wire: the bearer token, the baton and base_url carried from answer
    // to answer, and each dropped connection's stream closed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let seen = remote.seen();
        let closes = seen
            .iter()
            .filter(|s| s.body["requests"][0]["type"] == "close")
            .count();
        if closes >= 3 {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "the guests' streams were not closed: {seen:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(seen
        .iter()
        .all(|s| s.authorization.as_deref() == Some("Bearer s3cret")));
    assert!(seen
        .iter()
        .any(|s| s.body["baton"].is_string() && s.path == "/sticky/v3/pipeline"));
    assert!(seen
        .iter()
        .filter(|s| s.body["baton"].is_null())
        .all(|s| s.path == "/v3/pipeline"));
    let args = seen
        .iter()
        .find(|s| {
            s.body["requests"][0]["stmt"]["sql"]
                .as_str()
                .is_some_and(|q| q.starts_with("INSERT INTO pets"))
        })
        .map(|s| s.body["requests"][0]["stmt"]["args"].clone())
        .expect("the insert");
    assert_eq!(
        args,
        json!([
            {"type": "text", "value": "rex"},
            {"type": "integer", "value": "3"},
            {"type": "float", "value": 4.5},
            {"type": "blob", "base64": "AQI="},
        ])
    );
    let log = server.stderr.lock().unwrap().clone();
    assert!(!log.contains("s3cret"), "the token was logged:\n{log}");
}

#[test]
fn a_refused_token_and_an_untrusted_certificate_are_named() {
    // A wrong token: the guest's error and the log name the database, the status and the fix.
    let remote = StandIn::start("right", false);
    let dir = app(&remote.url(), "wrong");
    let server = Server::start(dir.path(), &[]);
    let r = sql(&server, "remote", &["SELECT 1"]);
    assert_eq!(r.status, 500);
    let text = r.text();
    assert!(
        text.contains("libSQL database `remote`")
            && text.contains("HTTP 401")
            && text.contains("Authorization failed: invalid token")
            && text.contains("check `token` in [sqlite_database.remote]"),
        "{text}"
    );
    assert!(log_with(&server, "HTTP 401").contains("libSQL database `remote`"));
    drop(server);

    // HTTPS from a private CA: trusted through SSL_CERT_FILE, refused without it.
    let remote = StandIn::start("tok", true);
    let dir = app(&remote.url(), "tok");
    let ca = remote.ca();
    let server = Server::start(dir.path(), &[("SSL_CERT_FILE", &ca)]);
    let r = sql(&server, "remote", &["SELECT 40 + 2, 'tls'"]);
    answered(&r, "42|tls");
    drop(server);
    let server = Server::start(dir.path(), &[]);
    let r = sql(&server, "remote", &["SELECT 1"]);
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("libSQL database `remote`")
            && r.text().contains("UnknownIssuer")
            && r.text().contains("SSL_CERT_FILE"),
        "{}",
        r.text()
    );
}

#[test]
fn bad_libsql_definitions_fail_the_start_naming_the_key() {
    let dir = app("libsql://db-org.turso.io", "t");
    let err = start_failure(dir.path(), &[]);
    assert!(
        err.contains("`sqlite_database.remote.url`") && err.contains("https://<host>"),
        "{err}"
    );
    let dir = app("https://db.example.com", "t");
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        "[sqlite_database.remote]\ntype = \"libsql\"\nurl = \"https://db.example.com\"\n\
         [sqlite_database.local]\ntype = \"spin\"\n",
    )
    .unwrap();
    let err = start_failure(dir.path(), &[]);
    assert!(
        err.contains("`sqlite_database.remote.token` is missing"),
        "{err}"
    );
}

#[test]
fn statements_waiting_on_the_server_hold_no_async_worker() {
    let remote = StandIn::start("tok", false);
    let dir = app(&remote.url(), "tok");
    let server = Server::start(dir.path(), &[]);
    // More waiting statements than the server has async workers (one per core).
    let n = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
    let addr = server.addr;
    let held: Vec<_> = (0..n)
        .map(|_| {
            let path = format!("/sql?db=remote&sql={}", servers::url_encode(HOLD));
            std::thread::spawn(move || request(addr, "GET", &path, b""))
        })
        .collect();
    remote.wait_held(n);
    let waiting_since = Instant::now();
    // While every one of them waits for the server: health, another route, a local
    // database and another statement on the libSQL server are answered.
    assert_eq!(server.get("/.well-known/spin/health").status, 200);
    assert_eq!(server.get("/other").text(), "ok");
    let r = sql(&server, "local", &["SELECT 6 * 7"]);
    answered(&r, "42");
    let r = sql(&server, "remote", &["SELECT 'not held'"]);
    answered(&r, "not held");
    eprintln!(
        "MEASURE libsql: {n} statements waiting on the server; health, another route, a local \
         and a libSQL statement answered within {:?}",
        waiting_since.elapsed()
    );
    // Released, each held statement gets its answer.
    remote.release();
    for h in held {
        answered(&h.join().unwrap(), "held");
    }
}
