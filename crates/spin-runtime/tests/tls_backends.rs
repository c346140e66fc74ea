//! TLS to every outbound service, against real servers on loopback whose certificates a
//! private CA made by the test signed (`common::make_pki`, openssl CLI): an HTTPS origin
//! (`openssl s_server`), redis-server `--tls-port` (outbound Redis, a key-value store, the
//! Redis trigger), PostgreSQL with `ssl=on` and `hostssl` only, MariaDB with TLS,
//! mosquitto with a TLS listener. Each is reached by a guest app
//! through spin-serve. Verification is on by default: the private CA is refused until the
//! pod trusts it, through `SSL_CERT_FILE` (what SpinKube's caCertSecret sets),
//! `SSL_CERT_DIR`, or a `[[client_tls]]` entry of the runtime config; a CA that did not sign
//! the server's certificate is refused as well.

mod common;
mod servers;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const HOSTIFACES: &str = "spin_hostifaces.wasm";

/// A private CA and its certificates in a temp dir, plus a second, unrelated CA
/// (`other-ca.pem`) that signed none of them.
fn pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    make_pki(dir.path());
    openssl(
        dir.path(),
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "other-ca.key",
            "-out",
            "other-ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=other ca",
        ],
    );
    dir
}

fn path_of(pki: &Path, f: &str) -> String {
    pki.join(f).display().to_string()
}

/// An app with one component `c` (the spin-hostifaces guest) allowed to reach `allowed`.
fn hostifaces_app(allowed: &str) -> tempfile::TempDir {
    guest_wasm(HOSTIFACES);
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"tls\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{HOSTIFACES}\"\n\
         allowed_outbound_hosts = [\"{allowed}\"]\n"
    ))
}

/// Writes a runtime config trusting `pki`'s CA for component `c` towards `host`.
fn client_tls_config(app: &Path, pki: &Path, host: &str) {
    std::fs::write(
        app.join("runtime-config.toml"),
        format!(
            "[[client_tls]]\ncomponent_ids = [\"c\"]\nhosts = [\"{host}\"]\n\
             ca_roots_file = \"{}\"\n",
            path_of(pki, "ca.pem")
        ),
    )
    .unwrap();
}

/// `GET /?op=<op>&addr=<addr>&<rest>` on the hostifaces guest: status and plain text.
fn call(server: &Server, op: &str, addr: &str, rest: &str) -> (u16, String) {
    let r = server.get(&format!(
        "/?op={op}&addr={}&{rest}",
        servers::url_encode(addr)
    ));
    (r.status, plain(&r.text()))
}

/// Asserts the guest's script failed at `step` because the server's certificate was not
/// trusted (rustls: `UnknownIssuer`).
fn assert_untrusted(got: &(u16, String), step: &str) {
    assert!(
        got.1.starts_with(&format!("error: {step}:")) && got.1.contains("UnknownIssuer"),
        "expected the certificate to be refused at `{step}`: {got:?}"
    );
}

fn assert_ok(got: &(u16, String), want_line: &str) {
    assert_eq!(got.0, 200, "{}", got.1);
    assert!(got.1.lines().any(|l| l == want_line), "{}", got.1);
}

/// The three ways a pod trusts the private CA, and the two that must fail: nothing (the
/// platform's and Mozilla's roots only) and an unrelated CA.
struct Trust<'a> {
    pki: &'a Path,
    hashed: tempfile::TempDir,
}

impl<'a> Trust<'a> {
    fn new(pki: &'a Path) -> Self {
        // SSL_CERT_DIR in OpenSSL's layout: `<hash>.0` names (openssl rehash).
        let hashed = tempfile::tempdir().unwrap();
        std::fs::copy(pki.join("ca.pem"), hashed.path().join("ca.pem")).unwrap();
        openssl(hashed.path(), &["rehash", "."]);
        Trust { pki, hashed }
    }
    fn file(&self) -> Vec<(&'static str, String)> {
        vec![("SSL_CERT_FILE", path_of(self.pki, "ca.pem"))]
    }
    fn dir(&self) -> Vec<(&'static str, String)> {
        vec![("SSL_CERT_DIR", self.hashed.path().display().to_string())]
    }
    fn wrong(&self) -> Vec<(&'static str, String)> {
        vec![("SSL_CERT_FILE", path_of(self.pki, "other-ca.pem"))]
    }

    /// Runs `script` on the hostifaces `app` (allowed to reach `authority`) under each
    /// trust: it fails at `step` with the certificate refused when the private CA is not
    /// trusted or another CA is, and its output has `want` with SSL_CERT_FILE,
    /// SSL_CERT_DIR, or a `[[client_tls]]` entry for `authority`.
    fn check(
        &self,
        app: &Path,
        authority: &str,
        step: &str,
        want: &str,
        script: impl Fn(&Server) -> (u16, String),
    ) {
        for env in [vec![], self.wrong()] {
            assert_untrusted(&script(&start(app, &env)), step);
        }
        for env in [self.file(), self.dir()] {
            assert_ok(&script(&start(app, &env)), want);
        }
        client_tls_config(app, self.pki, authority);
        assert_ok(&script(&start(app, &[])), want);
        std::fs::remove_file(app.join("runtime-config.toml")).unwrap();
    }
}

fn start(app: &Path, env: &[(&'static str, String)]) -> Server {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start(app, &env)
}

/// An `openssl s_server -www` HTTPS origin on `localhost:<port>`; killed on drop.
struct HttpsOrigin {
    child: std::process::Child,
    port: u16,
}

impl HttpsOrigin {
    fn start(pki: &Path) -> Self {
        let port = free_port();
        let child = Command::new("openssl")
            .args(["s_server", "-accept", &format!("127.0.0.1:{port}")])
            .args([
                "-cert",
                "server.pem",
                "-key",
                "server.key",
                "-www",
                "-quiet",
            ])
            .current_dir(pki)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "s_server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpsOrigin { child, port }
    }
}

impl Drop for HttpsOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn https_origin_signed_by_a_private_ca() {
    let pki = pki();
    let trust = Trust::new(pki.path());
    let origin = HttpsOrigin::start(pki.path());
    let wasm = "spin_outbound.wasm";
    guest_wasm(wasm);
    let app = app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"https\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{wasm}\"\n\
         allowed_outbound_hosts = [\"https://localhost:{}\"]\n",
        origin.port
    ));
    let url = format!("/?url=https://localhost:{}/", origin.port);

    // Not trusted by default (the platform's roots and Mozilla's), nor by another CA.
    for env in [vec![], trust.wrong()] {
        let server = start(app.path(), &env);
        let r = server.get(&url);
        assert_eq!(r.status, 502, "{env:?}: {}", r.text());
        let log = log_with(&server, "TLS handshake failed");
        assert!(
            log.contains("TLS handshake failed") && log.contains("UnknownIssuer"),
            "{log}"
        );
    }
    // Trusted through SSL_CERT_FILE, SSL_CERT_DIR, or [[client_tls]].
    for env in [trust.file(), trust.dir()] {
        let server = start(app.path(), &env);
        let r = server.get(&url);
        assert_eq!(r.status, 200, "{env:?}: {}", r.text());
        assert!(r.text().starts_with("upstream 200"), "{}", r.text());
    }
    client_tls_config(
        app.path(),
        pki.path(),
        &format!("localhost:{}", origin.port),
    );
    let server = start(app.path(), &[]);
    let r = server.get(&url);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// `redis-cli` against `redis`, over TLS trusting `pki`'s CA when given.
fn redis_cli(redis: &servers::ServerProcess, pki: Option<&Path>, args: &[&str]) -> String {
    let mut cmd = Command::new("redis-cli");
    if let Some(pki) = pki {
        cmd.args(["--tls", "--cacert", &path_of(pki, "ca.pem")]);
    }
    let out = cmd
        .args(["-h", "127.0.0.1", "-p", &redis.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Waits (30 s) until the Redis list `key` holds exactly `want` (a trigger handler's record).
fn wait_recorded(
    redis: &servers::ServerProcess,
    pki: Option<&Path>,
    key: &str,
    want: &str,
    server: &Server,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while redis_cli(redis, pki, &["LRANGE", key, "0", "-1"]) != want {
        assert!(
            Instant::now() < deadline,
            "`{want}` not recorded in {key}: {}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rediss_outbound_key_value_and_trigger() {
    let pki = pki();
    let trust = Trust::new(pki.path());
    let redis = servers::redis_tls(pki.path());
    let addr = format!("rediss://127.0.0.1:{}", redis.port);

    // Outbound Redis (fermyon:spin/redis@2.0.0).
    let app = hostifaces_app(&addr);
    trust.check(
        app.path(),
        &format!("127.0.0.1:{}", redis.port),
        "open",
        r#"get=Some("hello")"#,
        |server| call(server, "redis", &addr, ""),
    );
    // The allow-list names the scheme: redis:// does not allow rediss://.
    let plain_only = hostifaces_app(&format!("redis://127.0.0.1:{}", redis.port));
    let server = start(plain_only.path(), &trust.file());
    assert_eq!(
        call(&server, "redis", &addr, "").1,
        "error: open: InvalidAddress"
    );
    drop(server);

    // A key-value store on the TLS server.
    let kv = prepare_app("spin-kv");
    let rc = |url: &str| {
        std::fs::write(
            kv.path().join("runtime-config.toml"),
            format!(
                "[key_value_store.default]\ntype = \"redis\"\nurl = \"{url}\"\n\
                 [key_value_store.other]\ntype = \"spin\"\n"
            ),
        )
        .unwrap()
    };
    rc(&format!("{addr}/3"));
    let server = start(kv.path(), &[]);
    let r = request(server.addr, "PUT", "/kv/greeting", b"over tls");
    assert_eq!(r.status, 500, "untrusted: {}", r.text());
    drop(server);
    let server = start(kv.path(), &trust.file());
    let r = request(server.addr, "PUT", "/kv/greeting", b"over tls");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/kv/greeting").text(), "over tls");
    assert_eq!(
        redis_cli(&redis, Some(pki.path()), &["-n", "3", "GET", "greeting"]),
        "over tls"
    );
    drop(server);
    rc(&format!("{addr}/3#insecure"));
    let e = start_failure(kv.path(), &[]);
    assert!(
        e.contains("key-value store `default`") && e.contains("#insecure"),
        "{e}"
    );

    // The Redis trigger subscribes over TLS; its handler records over TLS too.
    let trig = app_from_manifest(&format!(
        r#"
spin_manifest_version = 2
[application]
name = "redis-tls"
[application.trigger.redis]
address = "{addr}"
[[trigger.http]]
route = "/..."
component = "hello"
[[trigger.redis]]
channel = "orders"
component = "recorder"
[component.hello]
source = "{{WASM_DIR}}/spin_hello.wasm"
[component.recorder]
source = "{{WASM_DIR}}/spin_redis_trigger.wasm"
allowed_outbound_hosts = ["rediss://127.0.0.1:*"]
[component.recorder.variables]
record_address = "{addr}"
record_key = "tls-seen"
"#
    ));
    let server = start(trig.path(), &trust.file());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = redis_cli(&redis, Some(pki.path()), &["PUBSUB", "NUMSUB", "orders"]);
        if n.lines().nth(1) == Some("1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not subscribed: {}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    redis_cli(&redis, Some(pki.path()), &["PUBLISH", "orders", "m1"]);
    wait_recorded(&redis, Some(pki.path()), "tls-seen", "m1", &server);
    drop(server);
    // Without the CA the trigger cannot subscribe, and says why.
    let server = start(trig.path(), &[]);
    let log = log_with(&server, "UnknownIssuer");
    assert!(log.contains("UnknownIssuer"), "{log}");
}

#[test]
fn postgres_sslmode_verifies_the_server() {
    let pki = pki();
    let trust = Trust::new(pki.path());
    let pg = servers::postgres_tls(pki.path());
    let authority = format!("127.0.0.1:{}", pg.port);
    let app = hostifaces_app(&format!("postgres://{authority}"));
    let addr = |mode: &str| {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres{mode}",
            pg.port
        )
    };
    // The server takes TLS connections only: without TLS it refuses.
    let server = start(app.path(), &trust.file());
    let got = call(&server, "pg4", &addr(" sslmode=disable"), "");
    assert!(
        got.1.starts_with("error: open:") && got.1.contains("no encryption"),
        "{got:?}"
    );
    drop(server);
    // TLS by default (sslmode=prefer), verified: refused until the CA is trusted.
    // libpq's verify-full is accepted (and means what every TLS mode here does).
    for mode in ["", " sslmode=require", " sslmode=verify-full"] {
        trust.check(app.path(), &authority, "open", "insert=2", |server| {
            call(server, "pg4", &addr(mode), "")
        });
    }
}

#[test]
fn mysql_ssl_mode_verifies_the_server() {
    let pki = pki();
    let trust = Trust::new(pki.path());
    let db = servers::mariadb_tls(pki.path());
    let authority = format!("127.0.0.1:{}", db.port);
    let app = hostifaces_app(&format!("mysql://{authority}"));
    let plain_addr = format!("mysql://root@{authority}/spin_test");
    let tls_addr = format!("{plain_addr}?ssl-mode=REQUIRED");
    let row0 = r#"row0=[Int32(1), Str("rex"), Uint8(3), Floating64(9.5), Binary([7, 8]), Int64(-1099511627776), Str("good dog")]"#;
    // Without ssl-mode the session is plain TCP, as in Spin.
    let server = start(app.path(), &[]);
    assert_ok(&call(&server, "mysql", &plain_addr, ""), row0);
    drop(server);
    // With it, TLS whose certificate is verified: refused until the CA is trusted.
    trust.check(app.path(), &authority, "open", row0, |server| {
        call(server, "mysql", &tls_addr, "")
    });
}

#[test]
fn mqtts_outbound_verifies_the_broker() {
    let pki = pki();
    let trust = Trust::new(pki.path());
    let broker = servers::mosquitto_tls(pki.path());
    let authority = format!("127.0.0.1:{}", broker.port);
    let app = hostifaces_app(&format!("mqtts://{authority}"));
    let addr = format!("mqtts://{authority}?client_id=spin-tls");
    // QoS 1: `publish` returns once the broker acknowledged the message (PUBACK).
    trust.check(app.path(), &authority, "publish", "publish=()", |server| {
        call(server, "mqtt", &addr, "topic=spin/tls&qos=1")
    });
}

#[test]
fn mqtt_trigger_subscribes_over_tls() {
    let pki = pki();
    let trust = Trust::new(pki.path());
    let broker = servers::mosquitto_tls(pki.path());
    let redis = servers::redis();
    let broker_addr = format!("mqtts://127.0.0.1:{}", broker.port);
    guest_wasm(HOSTIFACES);
    // `c` publishes over TLS; the trigger's `recorder` appends what it gets to a Redis list.
    let app = app_from_manifest(&format!(
        r#"
spin_manifest_version = 2
[application]
name = "mqtt-tls"
[application.trigger.mqtt]
address = "{broker_addr}"
username = ""
password = ""
keep_alive_interval = "5"
[[trigger.http]]
route = "/..."
component = "c"
[[trigger.mqtt]]
component = "recorder"
topic = "sensors/#"
qos = "1"
[component.c]
source = "{{WASM_DIR}}/{HOSTIFACES}"
allowed_outbound_hosts = ["{broker_addr}"]
[component.recorder]
source = "{{WASM_DIR}}/spin_mqtt_trigger.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.recorder.variables]
record_address = "redis://{}"
record_key = "tls-seen"
"#,
        redis.addr()
    ));
    let server = start(app.path(), &trust.file());
    let log = log_with(&server, "mqtt trigger subscribed");
    assert!(log.contains("mqtt trigger subscribed"), "{log}");
    let got = call(
        &server,
        "mqtt",
        &format!("{broker_addr}?client_id=spin-tls-pub"),
        "topic=sensors/tls&qos=1",
    );
    assert_ok(&got, "publish=()");
    wait_recorded(&redis, None, "tls-seen", "sensors/tls hello 1", &server);
    drop(server);
    // Without the CA the trigger cannot connect, and says why.
    let server = start(app.path(), &[]);
    let log = log_with(&server, "UnknownIssuer");
    assert!(
        log.contains("mqtt trigger connection failed") && log.contains("UnknownIssuer"),
        "{log}"
    );
}
