//! Hostile guests against the host interfaces and the HTTP server, through `spin-serve` and
//! the spin-hostile guest app (which takes connection strings and SQL from the request), with
//! real servers on loopback: connection strings that name places the allow-list does not
//! (PostgreSQL `hostaddr`, Unix sockets, MySQL `socket=`, Redis `unix://`), SQLite statements
//! that reach files (`ATTACH`, `VACUUM INTO`) or never end (`WITH RECURSIVE`), and clients
//! that never read their response. Each case also checks that what it does not name still
//! works: an allowed host, a normal query, a fast reader.

mod common;
mod servers;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const WASM: &str = "spin_hostile.wasm";

/// An app whose component `c` (the spin-hostile guest, with the component keys `extra`)
/// serves `/...`; `more` is appended to the manifest (other components and routes).
fn app(extra: &str, more: &str) -> tempfile::TempDir {
    guest_wasm(WASM);
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"hostile\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{WASM}\"\n{extra}\n{more}\n"
    ))
}

/// `GET <route>?<name>=<value>&...` with each value percent-encoded.
fn get(server: &Server, route: &str, params: &[(&str, &str)]) -> HttpResponse {
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", servers::url_encode(v)))
        .collect();
    server.get(&format!("{route}?{}", query.join("&")))
}

/// Asserts a 200 answer; its text.
fn ok(r: &HttpResponse, what: &str) -> String {
    assert_eq!(r.status, 200, "{what}: {}", r.text());
    r.text()
}

/// Asserts a refusal (500) whose text contains `needle`.
fn refused(r: &HttpResponse, what: &str, needle: &str) {
    assert_eq!(r.status, 500, "{what} was not refused: {}", r.text());
    assert!(
        r.text().contains(needle),
        "{what}: expected `{needle}` in {}",
        r.text()
    );
}

// ---- PostgreSQL ----

#[test]
fn postgres_connects_only_where_every_host_and_hostaddr_is_allowed() {
    // One server on two loopback addresses (and its Unix socket): 127.0.0.2 is the place
    // the component may not reach.
    let pg = servers::postgres_on(&["127.0.0.1", "127.0.0.2"]);
    let port = pg.port;
    let socket_dir = pg.dir.path().display().to_string();
    let kv = |rest: &str| format!("{rest} port={port} user=postgres dbname=postgres");

    // With both addresses allowed, `hostaddr` really moves the connection to 127.0.0.2:
    // what the check below refuses would otherwise connect.
    let open = app(
        &format!(
            "allowed_outbound_hosts = [\"postgres://127.0.0.1:{port}\", \
             \"postgres://127.0.0.2:{port}\"]"
        ),
        "",
    );
    let server = Server::start(open.path(), &[]);
    let via_hostaddr = kv("host=127.0.0.1 hostaddr=127.0.0.2");
    let r = get(&server, "/pg", &[("addr", &via_hostaddr)]);
    assert_eq!(ok(&r, "hostaddr, both allowed"), "server_addr=127.0.0.2");
    drop(server);

    // Only 127.0.0.1 allowed.
    let dir = app(
        &format!("allowed_outbound_hosts = [\"postgres://127.0.0.1:{port}\"]"),
        "",
    );
    let server = Server::start(dir.path(), &[]);
    let not_permitted = format!("address postgres://127.0.0.2:{port} is not permitted");
    let unix = "Unix sockets are not supported on WebAssembly";
    for (what, addr, expected) in [
        ("key/value host", kv("host=127.0.0.1"), Ok("127.0.0.1")),
        (
            "key/value hostaddr only",
            kv("hostaddr=127.0.0.1"),
            Ok("127.0.0.1"),
        ),
        (
            "URL",
            format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            Ok("127.0.0.1"),
        ),
        (
            "allowed host, other hostaddr",
            via_hostaddr.clone(),
            Err(&*not_permitted),
        ),
        (
            "hostaddr only",
            kv("hostaddr=127.0.0.2"),
            Err(&*not_permitted),
        ),
        (
            "URL with hostaddr",
            format!("postgres://postgres@127.0.0.1:{port}/postgres?hostaddr=127.0.0.2"),
            Err(&*not_permitted),
        ),
        (
            "URL with a second host",
            format!("postgres://postgres@127.0.0.1:{port}/postgres?host=127.0.0.2"),
            Err(&*not_permitted),
        ),
        (
            // 127.0.0.3 refuses the connection, tokio-postgres then tries 127.0.0.2.
            "host and hostaddr lists",
            kv("host=127.0.0.1,127.0.0.1 hostaddr=127.0.0.3,127.0.0.2"),
            Err("address postgres://127.0.0.3:"),
        ),
        (
            "a host name the list does not have",
            kv("host=localhost hostaddr=127.0.0.1"),
            Err("address postgres://localhost:"),
        ),
        (
            "Unix socket host",
            kv(&format!("host={socket_dir}")),
            Err(unix),
        ),
        (
            "Unix socket host with an allowed hostaddr",
            kv(&format!("host={socket_dir} hostaddr=127.0.0.1")),
            Err(unix),
        ),
        (
            "URL with a Unix socket host",
            format!(
                "postgres://postgres@{}:{port}/postgres",
                servers::url_encode(&socket_dir)
            ),
            Err(unix),
        ),
        (
            "URL with a Unix socket host parameter",
            format!("postgres://postgres@127.0.0.1:{port}/postgres?host={socket_dir}"),
            Err(unix),
        ),
        (
            "more ports than hosts",
            kv("host=127.0.0.1").replace(
                &format!("port={port}"),
                &format!("port={port},{}", port + 1),
            ),
            Err("names 2 ports for 1 hosts"),
        ),
    ] {
        let r = get(&server, "/pg", &[("addr", &addr)]);
        eprintln!("MEASURE pg {what}: {} {}", r.status, r.text());
        match expected {
            Ok(at) => assert_eq!(ok(&r, what), format!("server_addr={at}"), "{what}"),
            Err(needle) => refused(&r, what, needle),
        }
    }
    assert!(
        log_with(&server, "to disallowed destination 'postgres://127.0.0.2").contains(&format!(
            "allowed_outbound_hosts = [\"postgres://127.0.0.2:{port}\"]"
        )),
        "the refusal is logged with the entry that would allow it"
    );
}

// ---- MySQL ----

#[test]
fn mysql_connects_only_over_tcp_to_the_allowed_host() {
    // A is the allowed server. B is another server on the node, reachable through its Unix
    // socket; B's socket also replaces A's, so the socket A names (`@@socket`, which
    // mysql_async reconnects to by default after a TCP connection) leads to B. `@@port` says
    // which server took a connection.
    let a = servers::mariadb();
    let b = servers::mariadb();
    let a_socket = a.dir.path().join("mysqld.sock");
    std::fs::rename(&a_socket, a.dir.path().join("mysqld.sock.orig")).unwrap();
    std::fs::rename(b.dir.path().join("mysqld.sock"), &a_socket).unwrap();
    let dir = app(
        &format!(
            "allowed_outbound_hosts = [\"mysql://127.0.0.1:{}\"]",
            a.port
        ),
        "",
    );
    let server = Server::start(dir.path(), &[]);
    let url = format!("mysql://root@127.0.0.1:{}/spin_test", a.port);
    let at_a = format!("server_port={}", a.port);

    for (what, addr) in [
        ("the allowed host", url.clone()),
        ("prefer_socket=false", format!("{url}?prefer_socket=false")),
    ] {
        let r = get(&server, "/mysql", &[("addr", &addr)]);
        eprintln!("MEASURE mysql {what}: {} {}", r.status, r.text());
        assert_eq!(
            ok(&r, what),
            at_a,
            "{what}: another server took the connection"
        );
    }
    for (what, addr, needle) in [
        (
            "socket=",
            format!("{url}?socket={}", a_socket.display()),
            "the `socket` parameter (a Unix socket) is not supported on WebAssembly",
        ),
        (
            "prefer_socket=true",
            format!("{url}?prefer_socket=true"),
            "prefer_socket=true (reconnecting over the Unix socket the server names)",
        ),
        (
            "another host",
            format!("mysql://root@127.0.0.2:{}/spin_test", a.port),
            "is not permitted",
        ),
    ] {
        let r = get(&server, "/mysql", &[("addr", &addr)]);
        eprintln!("MEASURE mysql {what}: {} {}", r.status, r.text());
        refused(&r, what, needle);
    }
}

// ---- Redis ----

#[test]
fn redis_refuses_unix_sockets_even_when_everything_is_allowed() {
    let redis = servers::redis_with_unix_socket();
    let socket = redis.dir.path().join("redis.sock");
    let dir = app("allowed_outbound_hosts = [\"*://*:*\"]", "");
    let server = Server::start(dir.path(), &[]);
    let r = get(
        &server,
        "/redis",
        &[("addr", &format!("redis://127.0.0.1:{}", redis.port))],
    );
    let text = ok(&r, "TCP");
    assert!(text.starts_with("ping=") && text.contains("PONG"), "{text}");
    for scheme in ["redis+unix", "unix"] {
        let addr = format!("{scheme}://{}", socket.display());
        let r = get(&server, "/redis", &[("addr", &addr)]);
        eprintln!("MEASURE redis {scheme}: {} {}", r.status, r.text());
        refused(&r, scheme, "InvalidAddress");
    }
    assert!(
        log_with(&server, "Unix sockets are not supported on WebAssembly")
            .contains("tried to open Redis over a Unix socket")
    );
}

// ---- SQLite: files ----

/// The spin-hostile component with SQLite databases `default` (in `SPIN_STATE_DIR`),
/// `mem` (in memory) and `open` (a file with Spin's `allow_attach_file = true`), beside a
/// spin-kv component whose key-value store is a SQLite file in the same state dir.
fn sqlite_app(open_db: &Path) -> tempfile::TempDir {
    let dir = app(
        "sqlite_databases = [\"default\", \"mem\", \"open\"]",
        "[[trigger.http]]\nroute = \"/kv/...\"\ncomponent = \"kv\"\n\
         [component.kv]\nsource = \"{WASM_DIR}/spin_kv.wasm\"\n\
         key_value_stores = [\"default\"]\n",
    );
    std::fs::write(
        dir.path().join("runtime-config.toml"),
        format!(
            "[sqlite_database.mem]\ntype = \"spin\"\n\
             [sqlite_database.open]\ntype = \"spin\"\npath = \"{}\"\nallow_attach_file = true\n",
            open_db.display()
        ),
    )
    .unwrap();
    dir
}

/// `GET /sql` running `statements` (one, or two on the same connection) on database `db`.
fn run_sql(server: &Server, db: &str, statements: &[&str]) -> HttpResponse {
    let mut params = vec![("db", db), ("sql", statements[0])];
    if let Some(second) = statements.get(1) {
        params.push(("sql2", second));
    }
    get(server, "/sql", &params)
}

#[test]
fn sqlite_attach_and_vacuum_into_reach_no_file() {
    let state = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let dir = sqlite_app(&state.path().join("open.db"));
    let server = Server::start(
        dir.path(),
        &[("SPIN_STATE_DIR", state.path().to_str().unwrap())],
    );
    // Another component's store holds a secret.
    let r = request(server.addr, "PUT", "/kv/secret", b"s3cret");
    assert_eq!(r.status, 200, "{}", r.text());
    let kv_db = state.path().join("sqlite_key_value.db");
    assert!(kv_db.is_file());

    let sql = |statements: &[&str]| run_sql(&server, "default", statements);
    // Normal statements work.
    ok(&sql(&["CREATE TABLE IF NOT EXISTS t (x)"]), "create");
    ok(&sql(&["INSERT INTO t VALUES (1), (2)"]), "insert");
    assert_eq!(ok(&sql(&["SELECT sum(x) FROM t"]), "select"), "3");
    // Temporary and in-memory attachments and VACUUM (which attaches a temporary database)
    // are allowed, as in Spin.
    let r = sql(&[
        "ATTACH DATABASE '' AS scratch",
        "CREATE TABLE scratch.s (y)",
    ]);
    ok(&r, "attach a temporary database");
    let r = sql(&["ATTACH DATABASE ':memory:' AS m", "SELECT 7"]);
    assert_eq!(ok(&r, "attach :memory:"), "7");
    ok(&sql(&["VACUUM"]), "vacuum");

    let evil = elsewhere.path().join("evil.db");
    let computed = elsewhere.path().join("computed.db");
    let copy = elsewhere.path().join("copy.db");
    let attach_evil = format!("ATTACH DATABASE '{}' AS e", evil.display());
    let attach_computed = format!(
        "ATTACH DATABASE '{}' || '.db' AS e",
        computed.display().to_string().trim_end_matches(".db")
    );
    let attach_kv = format!("ATTACH DATABASE '{}' AS other", kv_db.display());
    let vacuum_into = format!("VACUUM INTO '{}'", copy.display());
    let temp_dir = format!(
        "PRAGMA temp_store_directory = '{}'",
        elsewhere.path().display()
    );
    let attach_refused = "is not allowed: a component may attach only temporary ('') and \
                          in-memory (':memory:') databases";
    for (what, stmts, needle) in [
        (
            "ATTACH of a new file",
            vec![attach_evil.as_str(), "CREATE TABLE e.t (x)"],
            attach_refused,
        ),
        (
            "ATTACH of a computed file name",
            vec![attach_computed.as_str(), "CREATE TABLE e.t (x)"],
            "ATTACH DATABASE with a file name computed by an expression is not allowed",
        ),
        (
            "ATTACH of another component's store",
            vec![
                attach_kv.as_str(),
                "SELECT key, value FROM other.spin_key_value",
            ],
            attach_refused,
        ),
        ("VACUUM INTO", vec![vacuum_into.as_str()], attach_refused),
        (
            "PRAGMA temp_store_directory",
            vec![temp_dir.as_str()],
            "PRAGMA temp_store_directory is not allowed",
        ),
    ] {
        let r = sql(&stmts);
        eprintln!("MEASURE sqlite {what}: {} {}", r.status, r.text());
        refused(&r, what, needle);
        assert!(!r.text().contains("s3cret"), "{what}: {}", r.text());
    }
    for file in [&evil, &computed, &copy] {
        assert!(!file.exists(), "{} was created", file.display());
    }
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "nothing was written outside the app's databases"
    );

    // Spin's `allow_attach_file = true` lets that database's connections attach files.
    let allowed_copy = elsewhere.path().join("allowed.db");
    let vacuum_allowed = format!("VACUUM INTO '{}'", allowed_copy.display());
    let r = run_sql(&server, "open", &[&vacuum_allowed]);
    ok(&r, "VACUUM INTO with allow_attach_file");
    assert!(allowed_copy.is_file());
    // The database is still fine.
    assert_eq!(ok(&sql(&["SELECT count(*) FROM t"]), "select after"), "2");
}

// ---- SQLite: time ----

/// A statement that never ends (SQLite counts rows of an endless recursive CTE).
const RUNAWAY: &str =
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";

/// CPU time (user + system) the process `pid` has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the `(comm)`: state is field 3; utime and stime are fields 14 and 15.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// Waits (at most 60 s) until `pid` has used `more` CPU time beyond `since`: the
/// runaway statements are running.
fn wait_for_cpu(pid: u32, since: Duration, more: Duration) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while cpu_time(pid) < since + more {
        assert!(Instant::now() < deadline, "the runaway queries never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (at most 60 s) until `pid` uses less than a fifth of one core over a second: no
/// statement is running any more.
fn wait_for_idle(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let before = cpu_time(pid);
        std::thread::sleep(Duration::from_secs(1));
        let used = cpu_time(pid) - before;
        if used < Duration::from_millis(200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the process still uses {used:?} of CPU per second: a statement still runs"
        );
    }
}

/// Starts `n` runaway statements on database `db`, each its own request; the handles give
/// each response's status and when it came.
fn start_runaways(
    server: &Server,
    db: &'static str,
    n: usize,
) -> Vec<std::thread::JoinHandle<(u16, Instant)>> {
    (0..n)
        .map(|_| {
            let addr = server.addr;
            let path = format!("/sql?db={db}&sql={}", servers::url_encode(RUNAWAY));
            std::thread::spawn(move || {
                let status = match std::panic::catch_unwind(|| request(addr, "GET", &path, b"")) {
                    Ok(r) => r.status,
                    // No response at all (the connection was dropped).
                    Err(_) => 0,
                };
                (status, Instant::now())
            })
        })
        .collect()
}

#[test]
fn a_runaway_query_ends_at_the_deadline_and_never_holds_the_server() {
    let state = tempfile::tempdir().unwrap();
    let dir = sqlite_app(&state.path().join("open.db"));
    let server = Server::start(
        dir.path(),
        &[
            ("SPIN_STATE_DIR", state.path().to_str().unwrap()),
            ("SPIN_SHIM_REQUEST_TIMEOUT", "4s"),
        ],
    );
    let pid = server.child.id();
    let r = run_sql(&server, "mem", &["CREATE TABLE t AS SELECT 42 AS x"]);
    ok(&r, "create the in-memory table");
    // More runaways than the machine has cores (the async workers, one per core), each on
    // its own connection, and two on the one connection of the in-memory database.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    let mut runaways = start_runaways(&server, "default", cores + 2);
    runaways.extend(start_runaways(&server, "mem", 2));
    wait_for_cpu(pid, cpu_time(pid), Duration::from_millis(500));

    // The server answers while they run: health, another route, a query on another database.
    let health = server.get("/.well-known/spin/health");
    let health_at = Instant::now();
    assert_eq!(health.status, 200);
    assert_eq!(ok(&server.get("/other"), "another route"), "ok");
    let r = run_sql(&server, "default", &["SELECT 1 + 1"]);
    assert_eq!(ok(&r, "a query on another database"), "2");
    eprintln!(
        "MEASURE sqlite runaway: health answered {:?} after the runaways started",
        health_at - started
    );

    // Each runaway ends with its request at the deadline (504), after health answered.
    for h in runaways {
        let (status, at) = h.join().unwrap();
        eprintln!(
            "MEASURE sqlite runaway: status {status} after {:?}",
            at - started
        );
        assert_eq!(status, 504);
        assert!(at > health_at, "a runaway ended before health was answered");
    }
    // Their statements were interrupted: the process goes idle, and the shared in-memory
    // connection is free again.
    wait_for_idle(pid);
    let r = run_sql(&server, "mem", &["SELECT x FROM t"]);
    assert_eq!(ok(&r, "the in-memory database after the runaways"), "42");
    assert!(
        log_with(&server, "ran longer than the request deadline of 4s")
            .contains("SPIN_SHIM_REQUEST_TIMEOUT")
    );
}

#[test]
fn sigterm_ends_the_server_while_a_query_runs_away() {
    let state = tempfile::tempdir().unwrap();
    let dir = sqlite_app(&state.path().join("open.db"));
    let mut server = Server::start(
        dir.path(),
        &[
            ("SPIN_STATE_DIR", state.path().to_str().unwrap()),
            ("SPIN_SHIM_REQUEST_TIMEOUT", "0"),
        ],
    );
    let pid = server.child.id();
    let runaways = start_runaways(&server, "default", 2);
    wait_for_cpu(pid, cpu_time(pid), Duration::from_millis(500));
    let t = Instant::now();
    server.signal("TERM");
    // In-flight requests get the 10 s drain bound; then the process must be gone.
    let code = server.wait_exit(Duration::from_secs(60));
    eprintln!(
        "MEASURE sqlite SIGTERM: exit {code:?} after {:?}",
        t.elapsed()
    );
    assert_eq!(code, Some(0), "spin-serve did not exit after SIGTERM");
    for h in runaways {
        let _ = h.join();
    }
}

// ---- HTTP: clients that never read ----

/// Sends `GET /big?mb=8` on a new connection and never reads.
fn slow_reader(server: &Server) -> TcpStream {
    let mut s = TcpStream::connect(server.addr).unwrap();
    write!(
        s,
        "GET /big?mb=8 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    s
}

/// Reads what `s` still delivers until the server's close (bounded by 60 s); the bytes read.
fn drain(mut s: TcpStream) -> usize {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

const BODY: usize = 8 << 20;

/// What the server logs when it closes a connection at the write timeout of 3 s.
const WRITE_TIMED_OUT: &str = "nothing could be sent for 3s";

/// `spin-serve` with the spin-hostile app, a write timeout of 3 s and no request deadline
/// (only the write timeout can end a connection whose client stopped reading), plus `env`.
fn write_timeout_server(env: &[(&str, &str)]) -> (tempfile::TempDir, Server) {
    let dir = app("", "");
    let mut all = vec![
        ("SPIN_SHIM_WRITE_TIMEOUT", "3s"),
        ("SPIN_SHIM_REQUEST_TIMEOUT", "0"),
    ];
    all.extend_from_slice(env);
    let server = Server::start(dir.path(), &all);
    (dir, server)
}

#[test]
fn clients_that_stop_reading_lose_their_connection_at_the_write_timeout() {
    let (_app, server) = write_timeout_server(&[]);
    let opened = Instant::now();
    let slow: Vec<TcpStream> = (0..4).map(|_| slow_reader(&server)).collect();
    // Served meanwhile: health, and a reader that reads gets the whole body.
    assert_eq!(server.get("/.well-known/spin/health").status, 200);
    let r = server.get("/big?mb=8");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), BODY);
    assert!(r.body.iter().all(|b| *b == b'x'));
    // The server closes each slow reader's connection (its log says why), before the body
    // was sent: they then read only what the kernel had buffered.
    let closed = || {
        server
            .stderr
            .lock()
            .unwrap()
            .matches(WRITE_TIMED_OUT)
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while closed() < slow.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} slow readers' connections were closed within 60 s",
            closed(),
            slow.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "MEASURE write timeout: the slow readers' connections closed {:?} after they opened",
        opened.elapsed()
    );
    for s in slow {
        let got = drain(s);
        eprintln!("MEASURE write timeout: a slow reader got {got} of {BODY} body bytes");
        assert!(got < BODY, "a slow reader got the whole body ({got} bytes)");
    }
    assert!(
        log_with(&server, WRITE_TIMED_OUT).contains("(set SPIN_SHIM_WRITE_TIMEOUT to change it)")
    );
    assert_eq!(server.get("/.well-known/spin/health").status, 200);
}

#[test]
fn slow_readers_at_the_connection_cap_free_their_slots() {
    let (_app, server) = write_timeout_server(&[("SPIN_SHIM_MAX_CONNECTIONS", "4")]);
    let slow: Vec<TcpStream> = (0..4).map(|_| slow_reader(&server)).collect();
    // Every slot is held; health is answered once the write timeout frees one (request's
    // read timeout: 60 s).
    let t = Instant::now();
    let health = server.get("/.well-known/spin/health");
    eprintln!(
        "MEASURE write timeout at the cap: health {} after {:?}",
        health.status,
        t.elapsed()
    );
    assert_eq!(health.status, 200);
    assert!(log_with(&server, "the client stopped reading its response")
        .contains("connection limit of 4 reached (SPIN_SHIM_MAX_CONNECTIONS)"));
    drop(slow);
}
