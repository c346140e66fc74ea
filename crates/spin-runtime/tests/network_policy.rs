//! Operator limits of the runtime config, enforced with Spin's keys: `[outbound_networking]
//! block_networks` (CIDRs and `private`, applied after DNS resolution), the connection caps
//! (`[outbound_http] max_connections`, `[outbound_networking] max_total_connections`) and
//! `[outbound_mqtt] max_payload_size_bytes`. Each limit is shown to deny exactly what it
//! names and nothing else, through spin-serve, against origins and servers on loopback
//! (127.0.0.2 is loopback on Linux too, so one network can be blocked and another not).

mod common;
mod servers;

use std::path::Path;

use common::*;
use test_support::origin::Origin;

const OUTBOUND: &str = "spin_outbound.wasm";
const HOSTIFACES: &str = "spin_hostifaces.wasm";

/// An app with one component `c` running `wasm`, allowed to reach `allowed`.
fn app(wasm: &str, allowed: &str) -> tempfile::TempDir {
    guest_wasm(wasm);
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"limits\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{wasm}\"\n\
         allowed_outbound_hosts = [\"{allowed}\"]\n"
    ))
}

fn runtime_config(app: &Path, text: &str) {
    std::fs::write(app.join("runtime-config.toml"), text).unwrap();
}

fn fetch(server: &Server, url: &str) -> (u16, String) {
    let r = server.get(&format!("/?url={}", servers::url_encode(url)));
    (r.status, r.text())
}

fn assert_prohibited(got: &(u16, String), server: &Server, needle: &str) {
    assert_eq!(got.0, 502, "{}", got.1);
    assert!(got.1.contains("DestinationIpProhibited"), "{}", got.1);
    let log = log_with(server, needle);
    assert!(
        log.contains(needle) && log.contains("[outbound_networking] block_networks"),
        "the log names the address, network and key: {log}"
    );
}

#[test]
fn block_networks_deny_exactly_the_networks_they_name_for_outbound_http() {
    let one = Origin::start("127.0.0.1:0", false);
    let port = one.addr.port();
    // The same port on another loopback address.
    let two = Origin::start(&format!("127.0.0.2:{port}"), false);
    let app = app(OUTBOUND, "http://*:*");

    // No runtime config: every loopback address is reached.
    let server = Server::start(app.path(), &[]);
    for host in ["127.0.0.1", "127.0.0.2", "localhost"] {
        let got = fetch(&server, &format!("http://{host}:{port}/"));
        assert_eq!(got.0, 200, "{host}: {}", got.1);
    }
    drop(server);
    let before = (one.served(), two.served());

    // One address and the metadata service blocked: those are refused before any
    // connection, the other loopback address still answers.
    runtime_config(
        app.path(),
        "[outbound_networking]\nblock_networks = [\"127.0.0.1/32\", \"169.254.169.254/32\"]\n",
    );
    let server = Server::start(app.path(), &[]);
    let got = fetch(&server, &format!("http://127.0.0.1:{port}/"));
    assert_prohibited(&got, &server, "127.0.0.1 (in 127.0.0.1/32)");
    let got = fetch(&server, "http://169.254.169.254/latest/meta-data/");
    assert_prohibited(&got, &server, "169.254.169.254 (in 169.254.169.254/32)");
    let got = fetch(&server, &format!("http://127.0.0.2:{port}/"));
    assert_eq!(got.0, 200, "127.0.0.2 is not blocked: {}", got.1);
    assert_eq!(
        one.served(),
        before.0,
        "a blocked request reached 127.0.0.1"
    );
    assert_eq!(two.served(), before.1 + 1);
    drop(server);

    // A name is checked after resolution: `localhost` resolves only to blocked addresses.
    runtime_config(
        app.path(),
        "[outbound_networking]\nblock_networks = [\"127.0.0.0/8\", \"::1/128\"]\n",
    );
    let server = Server::start(app.path(), &[]);
    let got = fetch(&server, &format!("http://localhost:{port}/"));
    assert_prohibited(&got, &server, "127.0.0.1 (in 127.0.0.0/8)");
    drop(server);

    // `private` is Spin's "not globally routable": both loopback addresses.
    runtime_config(
        app.path(),
        "[outbound_networking]\nblock_networks = [\"private\"]\n",
    );
    let server = Server::start(app.path(), &[]);
    for host in ["127.0.0.1", "127.0.0.2"] {
        let got = fetch(&server, &format!("http://{host}:{port}/"));
        assert_prohibited(&got, &server, &format!("{host} (in private)"));
    }
    drop(server);
    assert_eq!((one.served(), two.served()), (before.0, before.1 + 1));

    // A malformed entry stops the start, naming the file, the entry and the fix.
    runtime_config(
        app.path(),
        "[outbound_networking]\nblock_networks = [\"10.0.0.1\"]\n",
    );
    let e = start_failure(app.path(), &[]);
    assert!(
        e.contains("runtime-config.toml") && e.contains("`10.0.0.1`") && e.contains("CIDR"),
        "{e}"
    );
}

/// Sends `n` requests to `url` through the app at once (threads); their statuses.
fn fetch_all(server: &Server, url: &str, n: usize) -> Vec<std::thread::JoinHandle<u16>> {
    (0..n)
        .map(|_| {
            let addr = server.addr;
            let path = format!("/?url={}", servers::url_encode(url));
            std::thread::spawn(move || request(addr, "GET", &path, b"").status)
        })
        .collect()
}

#[test]
fn connection_caps_bound_the_requests_in_flight_at_the_origin() {
    const CAP: usize = 2;
    const REQUESTS: usize = 6;
    for config in [
        format!("[outbound_http]\nmax_connections = {CAP}\n"),
        // Spin's deprecated key allows N + 1.
        format!("[outbound_http]\nmax_concurrent_requests = {}\n", CAP - 1),
        format!("[outbound_networking]\nmax_total_connections = {CAP}\n"),
    ] {
        let origin = Origin::start("127.0.0.1:0", true);
        let app = app(OUTBOUND, "http://127.0.0.1:*");
        runtime_config(app.path(), &config);
        let server = Server::start(app.path(), &[]);
        let url = format!("http://127.0.0.1:{}/", origin.addr.port());
        let clients = fetch_all(&server, &url, REQUESTS);
        // Let the held requests go one by one; before each, the cap's worth is open.
        for done in 0..REQUESTS {
            let (open, most) = origin.wait_open(CAP.min(REQUESTS - done)).unwrap();
            assert!(
                open <= CAP && most <= CAP,
                "{config}: {open} open, at most {most}"
            );
            origin.release();
        }
        for c in clients {
            assert_eq!(c.join().unwrap(), 200, "{config}");
        }
        let seen = origin.seen();
        assert_eq!((seen.most, seen.served), (CAP, REQUESTS), "{config}");
    }

    // Without a cap the same requests are all open at once at the origin.
    let origin = Origin::start("127.0.0.1:0", true);
    let app = app(OUTBOUND, "http://127.0.0.1:*");
    let server = Server::start(app.path(), &[]);
    let url = format!("http://127.0.0.1:{}/", origin.addr.port());
    let clients = fetch_all(&server, &url, REQUESTS);
    origin.wait_open(REQUESTS).unwrap();
    for _ in 0..REQUESTS {
        origin.release();
    }
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
}

/// `GET /?op=<op>&addr=<addr>&<rest>` on the hostifaces guest: plain text.
fn call(server: &Server, op: &str, addr: &str, rest: &str) -> String {
    let r = server.get(&format!(
        "/?op={op}&addr={}&{rest}",
        servers::url_encode(addr)
    ));
    plain(&r.text())
}

/// The database and messaging interfaces: a blocked network refuses `open` with the
/// interface's error (Redis `other`, as Spin; the others `connection-failed`) and a log line
/// naming address, network and key; a block on another loopback network leaves the
/// connection alone.
#[test]
fn block_networks_apply_to_redis_postgres_mysql_and_mqtt() {
    let redis = servers::redis();
    let pg = servers::postgres();
    let db = servers::mariadb();
    let broker = servers::mosquitto();
    let cases = [
        (
            "redis",
            format!("redis://127.0.0.1:{}", redis.port),
            "",
            "redis://127.0.0.1:*",
            "error: open: Other",
        ),
        (
            "pg4",
            format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port),
            "",
            "postgres://127.0.0.1:*",
            "error: open: ConnectionFailed",
        ),
        (
            "mysql",
            format!("mysql://root@127.0.0.1:{}/spin_test", db.port),
            "",
            "mysql://127.0.0.1:*",
            "error: open: ConnectionFailed",
        ),
        (
            "mqtt",
            format!("mqtt://127.0.0.1:{}?client_id=limits", broker.port),
            "topic=limits/t&qos=1",
            "mqtt://127.0.0.1:*",
            "error: open: ConnectionFailed",
        ),
    ];
    for (op, addr, rest, allowed, refused) in &cases {
        let app = app(HOSTIFACES, allowed);
        runtime_config(
            app.path(),
            "[outbound_networking]\nblock_networks = [\"127.0.0.1/32\"]\n",
        );
        let server = Server::start(app.path(), &[]);
        let got = call(&server, op, addr, rest);
        assert!(
            got.starts_with(refused) && got.contains("127.0.0.1"),
            "{op}: {got}"
        );
        let log = log_with(&server, "127.0.0.1 (in 127.0.0.1/32)");
        assert!(
            log.contains("127.0.0.1 (in 127.0.0.1/32)") && log.contains("block_networks"),
            "{op}: {log}"
        );
        drop(server);

        runtime_config(
            app.path(),
            "[outbound_networking]\nblock_networks = [\"127.0.0.2/32\", \"10.0.0.0/8\"]\n",
        );
        let server = Server::start(app.path(), &[]);
        let got = call(&server, op, addr, rest);
        assert!(!got.starts_with("error"), "{op} is not blocked: {got}");
    }
}

#[test]
fn mqtt_payload_cap_refuses_only_larger_payloads() {
    let broker = servers::mosquitto();
    let app = app(HOSTIFACES, "mqtt://127.0.0.1:*");
    let addr = format!("mqtt://127.0.0.1:{}?client_id=cap", broker.port);
    // The guest publishes `hello 1` (7 bytes).
    runtime_config(app.path(), "[outbound_mqtt]\nmax_payload_size_bytes = 7\n");
    let server = Server::start(app.path(), &[]);
    let got = call(&server, "mqtt", &addr, "topic=cap/t&qos=1");
    assert!(!got.starts_with("error"), "7 bytes fit a 7-byte cap: {got}");
    drop(server);
    runtime_config(app.path(), "[outbound_mqtt]\nmax_payload_size_bytes = 6\n");
    let server = Server::start(app.path(), &[]);
    let got = call(&server, "mqtt", &addr, "topic=cap/t&qos=1");
    assert!(
        got.starts_with("error: publish: Other")
            && got.contains("payload size 7 exceeds the maximum allowed size of 6 bytes"),
        "{got}"
    );
}

/// Established TCP connections whose local port is `port` (the server's side of its
/// clients' connections), from the kernel's socket tables.
fn server_connections(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is `<hex ip>:<hex port>`; state 01 is ESTABLISHED.
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && f.get(3) == Some(&"01") {
                n += 1;
            }
        }
    }
    n
}

/// Polls (30 s) until the server on `port` has exactly `want` client connections.
fn wait_server_connections(port: u16, want: usize, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let n = server_connections(port);
        if n == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {n} connections at the server, not {want}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `[outbound_redis]`, `[outbound_pg]`, `[outbound_mysql]` and `[outbound_mqtt]`
/// `max_connections` end to end: concurrent guest requests each hold one connection open
/// while an origin holds their outbound HTTP request; the real server never has more
/// connections than the cap, the requests beyond it wait for a permit (no connection) and
/// then succeed. Without the section the same requests all connect at once.
#[test]
fn per_interface_max_connections_hold_under_concurrent_guest_calls() {
    const CAP: usize = 2;
    const REQUESTS: usize = 4;
    const APP: &str = "spin_conn_hold.wasm";
    let redis = servers::redis();
    let pg = servers::postgres();
    let db = servers::mariadb();
    let broker = servers::mosquitto();
    let cases = [
        ("redis", &redis, "redis://127.0.0.1:PORT"),
        ("pg", &pg, "postgres://postgres@127.0.0.1:PORT/postgres"),
        ("mysql", &db, "mysql://root@127.0.0.1:PORT/spin_test"),
        ("mqtt", &broker, "mqtt://127.0.0.1:PORT?client_id=hold"),
    ];
    for (kind, backend, template) in cases {
        let port = backend.port;
        let addr = template.replace("PORT", &port.to_string());
        let section = format!("outbound_{kind}");
        for capped in [true, false] {
            let origin = Origin::start("127.0.0.1:0", true);
            let scheme = addr.split_once("://").unwrap().0;
            let app = app(APP, "http://127.0.0.1:*");
            // Both the server and the origin: rewrite the allow-list with both.
            let manifest = std::fs::read_to_string(app.path().join("spin.toml")).unwrap();
            std::fs::write(
                app.path().join("spin.toml"),
                manifest.replace(
                    "[\"http://127.0.0.1:*\"]",
                    &format!("[\"http://127.0.0.1:*\", \"{scheme}://127.0.0.1:*\"]"),
                ),
            )
            .unwrap();
            if capped {
                runtime_config(
                    app.path(),
                    &format!("[{section}]\nmax_connections = {CAP}\n"),
                );
            }
            let server = Server::start(app.path(), &[]);
            let hold = format!("http://127.0.0.1:{}/", origin.addr.port());
            let clients: Vec<_> = (0..REQUESTS)
                .map(|i| {
                    let path = format!(
                        "/?kind={kind}&hold={hold}&addr={}",
                        addr.replace("client_id=hold", &format!("client_id=hold{i}"))
                    );
                    let to = server.addr;
                    std::thread::spawn(move || request(to, "GET", &path, b""))
                })
                .collect();
            let what = format!("{kind}, capped {capped}");
            if capped {
                for done in 0..REQUESTS {
                    let at_once = CAP.min(REQUESTS - done);
                    let (open, most) = origin.wait_open(at_once).unwrap();
                    assert!(
                        open <= CAP && most <= CAP,
                        "{what}: {open} open, {most} most"
                    );
                    wait_server_connections(port, at_once, &what);
                    origin.release();
                }
            } else {
                origin.wait_open(REQUESTS).unwrap();
                wait_server_connections(port, REQUESTS, &what);
                for _ in 0..REQUESTS {
                    origin.release();
                }
            }
            for c in clients {
                let r = c.join().unwrap();
                assert_eq!((r.status, r.text()), (200, "held".to_string()), "{what}");
            }
            let seen = origin.seen();
            let most = if capped { CAP } else { REQUESTS };
            assert_eq!((seen.most, seen.served), (most, REQUESTS), "{what}");
            println!(
                "max_connections({kind}): capped {capped}: at most {} connections at once, \
                 {REQUESTS} of {REQUESTS} requests 200",
                seen.most
            );
        }
    }
}

/// Set in the child that runs [`block_networks_pin_mqtts_to_the_checked_addresses`] inside
/// its private mount namespace.
const IN_HOSTS_NS: &str = "NETWORK_POLICY_TEST_IN_HOSTS_NS";

/// Mosquitto with one TLS listener on the same port of 127.0.0.1 and ::1 (the pki's
/// `localhost` certificate); killed by its pid on drop. Its log (stderr) is in `dir`.
struct DualStackBroker {
    port: u16,
    child: std::process::Child,
    dir: tempfile::TempDir,
    /// Log length once the readiness probes were done (their connections come before).
    skip: usize,
}

impl DualStackBroker {
    fn start(pki: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let tls = format!(
            "cafile {}\ncertfile {}\nkeyfile {}\n",
            pki.join("ca.pem").display(),
            pki.join("server.pem").display(),
            pki.join("server.key").display()
        );
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "per_listener_settings false\nlistener {port} 127.0.0.1\n{tls}\
                 listener {port} ::1\n{tls}allow_anonymous true\npersistence false\nuser root\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("mosquitto.log")).unwrap();
        let child = std::process::Command::new("mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("mosquitto (Debian package mosquitto, scripts/setup.sh)");
        let mut broker = DualStackBroker {
            port,
            child,
            dir,
            skip: 0,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        for ip in ["127.0.0.1", "[::1]"] {
            while std::net::TcpStream::connect(format!("{ip}:{port}")).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "mosquitto did not listen on {ip}:{port}: {}",
                    broker.log()
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        // The probes' own connections are logged: wait for both, then look past them.
        broker.wait_log("New connection from ::1");
        broker.skip = broker.log().len();
        broker
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    /// The log after the readiness probes.
    fn clients_log(&self) -> String {
        self.log()[self.skip..].to_string()
    }

    /// Polls (10 s) until the log has `needle`; the log.
    fn wait_log(&self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let log = self.log();
            if log[self.skip..].contains(needle) || std::time::Instant::now() > deadline {
                return log[self.skip..].to_string();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for DualStackBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mqtts://` to a host name connects only to the addresses `block_networks` let through:
/// `localhost` resolves to ::1 and 127.0.0.1 (a private `/etc/hosts` bind-mounted in a mount
/// namespace of this test's own child process), the broker listens on both, and blocking
/// either one makes every connection go to the other, as mosquitto's log shows; blocking
/// both refuses `open` and the broker sees no connection. (rumqttc resolves the name itself
/// when it connects; the runtime hands it the checked addresses through a loopback relay.)
#[test]
fn block_networks_pin_mqtts_to_the_checked_addresses() {
    if std::env::var_os(IN_HOSTS_NS).is_none() {
        let hosts = tempfile::tempdir().unwrap();
        let file = hosts.path().join("hosts");
        std::fs::write(&file, "::1 localhost\n127.0.0.1 localhost\n").unwrap();
        // unshare(CLONE_NEWNS) needs a single-threaded process: the test binary, again.
        let status = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
            .arg(&file)
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "block_networks_pin_mqtts_to_the_checked_addresses",
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(IN_HOSTS_NS, "1")
            .status()
            .expect("unshare (util-linux)");
        assert!(
            status.success(),
            "the test in its mount namespace: {status}"
        );
        return;
    }
    let resolved: Vec<_> = std::net::ToSocketAddrs::to_socket_addrs("localhost:1")
        .unwrap()
        .map(|a| a.ip().to_string())
        .collect();
    assert!(
        resolved.contains(&"::1".into()) && resolved.contains(&"127.0.0.1".into()),
        "localhost resolves to {resolved:?}"
    );
    let pki = tempfile::tempdir().unwrap();
    make_pki(pki.path());
    let ca = pki.path().join("ca.pem").display().to_string();
    let app = app(HOSTIFACES, "mqtts://localhost:*");
    for (i, (blocked, want, not)) in [
        ("\"127.0.0.1/32\"", "New connection from ::1:", "127.0.0.1"),
        ("\"::1/128\"", "New connection from 127.0.0.1:", "::1"),
    ]
    .into_iter()
    .enumerate()
    {
        let broker = DualStackBroker::start(pki.path());
        runtime_config(
            app.path(),
            &format!("[outbound_networking]\nblock_networks = [{blocked}]\n"),
        );
        let server = Server::start(app.path(), &[("SSL_CERT_FILE", &ca)]);
        let addr = format!("mqtts://localhost:{}?client_id=pin{i}", broker.port);
        let got = call(&server, "mqtt", &addr, "topic=pin/t&qos=1");
        assert!(
            got.lines().any(|l| l == "publish=()"),
            "{blocked} blocked: {got}"
        );
        let log = broker.wait_log(want);
        println!("block_networks = [{blocked}]: mosquitto saw\n{log}");
        assert!(log.contains(want), "{blocked} blocked: {log}");
        assert!(
            !log.contains(&format!("New connection from {not}:")),
            "{blocked} blocked, yet the broker saw a connection from {not}: {log}"
        );
    }

    // TLS is still end to end with the host name: without the private CA the broker's
    // certificate is refused through the relay too.
    let broker = DualStackBroker::start(pki.path());
    let server = Server::start(app.path(), &[]);
    let addr = format!("mqtts://localhost:{}?client_id=untrusted", broker.port);
    let got = call(&server, "mqtt", &addr, "topic=pin/t&qos=1");
    assert!(
        got.starts_with("error: publish:") && got.contains("UnknownIssuer"),
        "{got}"
    );
    drop((server, broker));

    let broker = DualStackBroker::start(pki.path());
    runtime_config(
        app.path(),
        "[outbound_networking]\nblock_networks = [\"127.0.0.1/32\", \"::1/128\"]\n",
    );
    let server = Server::start(app.path(), &[("SSL_CERT_FILE", &ca)]);
    let addr = format!("mqtts://localhost:{}?client_id=none", broker.port);
    let got = call(&server, "mqtt", &addr, "topic=pin/t&qos=1");
    assert!(got.starts_with("error: open: ConnectionFailed"), "{got}");
    assert!(
        !broker.clients_log().contains("New connection"),
        "both blocked, yet: {}",
        broker.clients_log()
    );
}

/// A loopback HTTP/1.1 origin that keeps its connections alive (`200 ok` to every request
/// on a connection) and counts the connections it accepted.
struct KeepAliveOrigin {
    addr: std::net::SocketAddr,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KeepAliveOrigin {
    fn start() -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        use std::time::Duration;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (count, st) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut handlers = Vec::new();
            while !st.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let st = st.clone();
                handlers.push(std::thread::spawn(move || {
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !st.load(Ordering::SeqCst) {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if conn.write_all(reply).is_err() {
                                return;
                            }
                            continue;
                        }
                        match conn.read(&mut chunk) {
                            Ok(0) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => return,
                        }
                    }
                }));
            }
            for h in handlers {
                let _ = h.join();
            }
        });
        KeepAliveOrigin {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for KeepAliveOrigin {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn connection_pooling_reuses_one_connection_for_sequential_requests() {
    const N: usize = 5;
    for (config, want) in [
        // Spin's default: pooled.
        ("", 1),
        (
            "[outbound_http]\nconnection_pooling = true\nmax_connections = 1\n",
            1,
        ),
        ("[outbound_http]\nconnection_pooling = false\n", N),
    ] {
        let origin = KeepAliveOrigin::start();
        let app = app(OUTBOUND, "http://127.0.0.1:*");
        runtime_config(app.path(), config);
        let server = Server::start(app.path(), &[]);
        let url = format!("http://127.0.0.1:{}/", origin.addr.port());
        for i in 0..N {
            let got = fetch(&server, &url);
            assert_eq!(got.0, 200, "{config:?} request {i}: {}", got.1);
            assert!(got.1.contains("ok"), "{config:?} request {i}: {}", got.1);
        }
        assert_eq!(
            origin.accepted(),
            want,
            "{config:?}: connections accepted for {N} sequential requests"
        );
        drop(server);
    }
}
