//! Real database and broker servers for host-interface tests, from the Debian packages
//! `scripts/setup.sh` installs: each one runs in the foreground on a free 127.0.0.1 port
//! with its data in a temp dir, and is stopped by its pid (then the dir is removed) when
//! the fixture drops. Used by spin-runtime's and the integration crate's tests.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A server process and its data dir; stopped (by pid) and removed on drop.
pub struct ServerProcess {
    /// What runs (for messages).
    pub name: &'static str,
    /// Its loopback port.
    pub port: u16,
    child: Child,
    /// The command line it was started with (for [`ServerProcess::restart`]).
    argv: Vec<std::ffi::OsString>,
    stop_signal: &'static str,
    /// Whether it serves: checked after [`ServerProcess::restart`], and at start unless the
    /// server has a start check of its own (postgres, mariadb).
    ready: fn(&ServerProcess) -> bool,
    /// Data dir (removed after the process is gone).
    pub dir: tempfile::TempDir,
}

impl ServerProcess {
    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn wait_ready(&mut self, ready: impl Fn(&ServerProcess) -> bool) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited during start ({status}); its log:\n{}",
                    self.name,
                    read_log(self.dir.path())
                );
            }
            if ready(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not accept connections on {} within {START_TIMEOUT:?}; its log:\n{}",
                self.name,
                self.addr(),
                read_log(self.dir.path())
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl ServerProcess {
    /// Stops the server (as on drop) and starts it again with the same command line, port
    /// and data dir; returns once it accepts connections again.
    pub fn restart(&mut self) {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        self.stop();
        self.child = spawn(self.name, cmd, self.dir.path());
        self.wait_ready(self.ready);
    }

    /// Stops the server by its pid (SIGKILL after 15 s).
    pub fn stop(&mut self) {
        let pid = self.child.id().to_string();
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .arg(format!("-{}", self.stop_signal))
                .arg(&pid)
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if self.child.try_wait().ok().flatten().is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
}

/// A port nothing listens on right now (this module is also used by tests/cri, which has no
/// `common` module).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn tcp_ready(s: &ServerProcess) -> bool {
    TcpStream::connect_timeout(&s.addr(), Duration::from_millis(200)).is_ok()
}

/// nats-server greets each client with its `INFO` line (in plain text, TLS or not) once it
/// serves clients: an open port alone is not that.
fn nats_ready(s: &ServerProcess) -> bool {
    use std::io::BufRead;
    let Ok(conn) = TcpStream::connect_timeout(&s.addr(), Duration::from_millis(200)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    let mut line = String::new();
    std::io::BufReader::new(conn)
        .read_line(&mut line)
        .is_ok_and(|_| line.starts_with("INFO "))
}

fn log_file(dir: &Path) -> (Stdio, Stdio) {
    let f = std::fs::File::create(dir.join("server.log")).unwrap();
    (f.try_clone().unwrap().into(), f.into())
}

fn argv_of(cmd: &Command) -> Vec<std::ffi::OsString> {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_os_string())
        .collect()
}

fn spawn(name: &'static str, mut cmd: Command, dir: &Path) -> Child {
    let (out, err) = log_file(dir);
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {name} ({e}): run scripts/setup.sh to install the packages")
        })
}

/// Whether `prog` is installed (for a clear message).
fn require(prog: &str, package: &str) -> String {
    let candidates = [
        format!("/usr/bin/{prog}"),
        format!("/usr/sbin/{prog}"),
        format!("/bin/{prog}"),
    ];
    candidates
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or_else(|| {
            panic!("{prog} is missing: install the Debian package {package} (scripts/setup.sh)")
        })
}

/// `redis-server` without persistence.
pub fn redis() -> ServerProcess {
    redis_with(false, None)
}

/// `redis-server` without persistence, also listening on the Unix socket `redis.sock` in its
/// dir.
pub fn redis_with_unix_socket() -> ServerProcess {
    redis_with(true, None)
}

/// `redis-server` serving TLS only (`--tls-port`), with `server.pem`/`server.key` of `pki`
/// (see `common::make_pki`); clients need no certificate.
pub fn redis_tls(pki: &Path) -> ServerProcess {
    redis_with(false, Some(pki))
}

fn redis_with(unix_socket: bool, tls: Option<&Path>) -> ServerProcess {
    let bin = require("redis-server", "redis-server");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(bin);
    match tls {
        None => cmd.args(["--port", &port.to_string()]),
        Some(pki) => cmd
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(pki.join("server.pem"))
            .arg("--tls-key-file")
            .arg(pki.join("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(pki.join("ca.pem"))
            .args(["--tls-auth-clients", "no"]),
    };
    cmd.args(["--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir.path());
    if unix_socket {
        cmd.arg("--unixsocket")
            .arg(dir.path().join("redis.sock"))
            .args(["--unixsocketperm", "700"]);
    }
    let argv = argv_of(&cmd);
    let child = spawn("redis-server", cmd, dir.path());
    let mut s = ServerProcess {
        name: "redis-server",
        port,
        child,
        argv,
        stop_signal: "TERM",
        ready: tcp_ready,
        dir,
    };
    s.wait_ready(s.ready);
    s
}

/// Debian's PostgreSQL (`/usr/lib/postgresql/<version>/bin`), run as user `postgres`
/// (PostgreSQL refuses root) with trust authentication for user `postgres` on loopback.
pub fn postgres() -> ServerProcess {
    postgres_on(&["127.0.0.1"])
}

/// As [`postgres`], listening on each of the loopback addresses `listen` (one port), and on
/// its Unix socket `.s.PGSQL.<port>` in its dir.
pub fn postgres_on(listen: &[&str]) -> ServerProcess {
    postgres_with(listen, None)
}

/// As [`postgres`] with `ssl=on` (`server.pem`/`server.key` of `pki`, see
/// `common::make_pki`) and TCP clients accepted over TLS only (`hostssl` in pg_hba.conf).
pub fn postgres_tls(pki: &Path) -> ServerProcess {
    postgres_with(&["127.0.0.1"], Some(pki))
}

fn postgres_with(listen: &[&str], tls: Option<&Path>) -> ServerProcess {
    let bin_dir = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .find(|p| p.join("postgres").exists())
        })
        .expect("PostgreSQL is missing: install the Debian package postgresql (scripts/setup.sh)");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    if let Some(pki) = tls {
        for f in ["server.pem", "server.key"] {
            std::fs::copy(pki.join(f), dir.path().join(f)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt as _;
        let key = dir.path().join("server.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let chown = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(chown.success(), "chown the PostgreSQL dir to postgres");
    let as_postgres = |prog: &Path| {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(prog);
        c
    };
    let init = as_postgres(&bin_dir.join("initdb"))
        .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    let port = free_port();
    let mut cmd = as_postgres(&bin_dir.join("postgres"));
    cmd.arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-c"])
        .arg(format!("listen_addresses={}", listen.join(",")))
        .arg("-k")
        .arg(dir.path())
        .args(["-c", "fsync=off"]);
    if tls.is_some() {
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        cmd.args(["-c", "ssl=on", "-c"])
            .arg(format!(
                "ssl_cert_file={}",
                dir.path().join("server.pem").display()
            ))
            .arg("-c")
            .arg(format!(
                "ssl_key_file={}",
                dir.path().join("server.key").display()
            ));
    }
    let argv = argv_of(&cmd);
    let child = spawn("postgres", cmd, dir.path());
    let mut s = ServerProcess {
        name: "postgres",
        port,
        child,
        argv,
        // Fast shutdown: ends client sessions.
        stop_signal: "INT",
        ready: tcp_ready,
        dir,
    };
    let isready = bin_dir.join("pg_isready");
    s.wait_ready(|s| {
        Command::new(&isready)
            .args(["-q", "-h", "127.0.0.1", "-p", &s.port.to_string()])
            .status()
            .is_ok_and(|st| st.success())
    });
    s
}

/// MariaDB (`mariadbd`) as root with grant tables skipped (any user, no password) and a
/// database `spin_test`.
pub fn mariadb() -> ServerProcess {
    mariadb_with(None)
}

/// As [`mariadb`] with TLS (`server.pem`/`server.key` of `pki`, see `common::make_pki`).
/// Plain TCP clients are still accepted: `require_secure_transport` is not enforced with
/// `--skip-grant-tables`.
pub fn mariadb_tls(pki: &Path) -> ServerProcess {
    mariadb_with(Some(pki))
}

fn mariadb_with(tls: Option<&Path>) -> ServerProcess {
    let install = require("mariadb-install-db", "mariadb-server");
    let server = require("mariadbd", "mariadb-server");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Command::new(install)
        .args(["--no-defaults", "--user=root", "--skip-test-db"])
        .arg(format!("--datadir={}", data.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mariadb-install-db failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let mut cmd = Command::new(server);
    cmd.args(["--no-defaults", "--user=root", "--skip-grant-tables"])
        .arg(format!("--datadir={}", data.display()))
        .arg(format!(
            "--socket={}",
            dir.path().join("mysqld.sock").display()
        ))
        .arg(format!(
            "--pid-file={}",
            dir.path().join("mysqld.pid").display()
        ))
        .args(["--bind-address=127.0.0.1", &format!("--port={port}")])
        .args(["--skip-log-bin", "--innodb-buffer-pool-size=16M"]);
    if let Some(pki) = tls {
        cmd.arg(format!("--ssl-cert={}", pki.join("server.pem").display()))
            .arg(format!("--ssl-key={}", pki.join("server.key").display()))
            .arg(format!("--ssl-ca={}", pki.join("ca.pem").display()));
    }
    let argv = argv_of(&cmd);
    let child = spawn("mariadbd", cmd, dir.path());
    let mut s = ServerProcess {
        name: "mariadbd",
        port,
        child,
        argv,
        stop_signal: "TERM",
        ready: tcp_ready,
        dir,
    };
    let client = require("mariadb", "mariadb-client");
    let client_tls: Vec<String> = tls
        .map(|pki| vec![format!("--ssl-ca={}", pki.join("ca.pem").display())])
        .unwrap_or_default();
    s.wait_ready(|s| {
        Command::new(&client)
            .args(["--no-defaults", "-h", "127.0.0.1", "-u", "root"])
            .args(&client_tls)
            .arg(format!("-P{}", s.port))
            .args(["-e", "CREATE DATABASE IF NOT EXISTS spin_test"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|st| st.success())
    });
    s
}

/// Mosquitto with one anonymous loopback listener and no persistence.
pub fn mosquitto() -> ServerProcess {
    mosquitto_with(None)
}

/// As [`mosquitto`] with a TLS listener (`server.pem`/`server.key` of `pki`, see
/// `common::make_pki`) instead of the plain one.
pub fn mosquitto_tls(pki: &Path) -> ServerProcess {
    mosquitto_with(Some(pki))
}

fn mosquitto_with(tls: Option<&Path>) -> ServerProcess {
    let bin = require("mosquitto", "mosquitto");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("mosquitto.conf");
    let tls = tls
        .map(|pki| {
            format!(
                "cafile {}\ncertfile {}\nkeyfile {}\n",
                pki.join("ca.pem").display(),
                pki.join("server.pem").display(),
                pki.join("server.key").display()
            )
        })
        .unwrap_or_default();
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\n{tls}allow_anonymous true\npersistence false\nuser root\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new(bin);
    cmd.arg("-c").arg(&conf);
    let argv = argv_of(&cmd);
    let child = spawn("mosquitto", cmd, dir.path());
    let mut s = ServerProcess {
        name: "mosquitto",
        port,
        child,
        argv,
        stop_signal: "TERM",
        ready: tcp_ready,
        dir,
    };
    s.wait_ready(s.ready);
    s
}

/// Percent-encodes `s` for a query string value (unreserved characters kept).
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl ServerProcess {
    /// `redis-cli -h 127.0.0.1 -p <port> <args>` against this (Redis) server, its output
    /// trimmed.
    pub fn redis_cli(&self, args: &[&str]) -> std::io::Result<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .map_err(|e| {
                std::io::Error::other(format!(
                    "run redis-cli (Debian package redis-tools, installed with redis-server): {e}"
                ))
            })?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "redis-cli {args:?}: {out:?}"
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Publishes `payloads` on `topic` of this (MQTT) broker at QoS 1 (`retain` as given),
    /// waiting (at most 20 s) for each PUBACK. Uses rumqttc's blocking client, which runs
    /// its own runtime: call it off any tokio worker.
    pub fn mqtt_publish(
        &self,
        topic: &str,
        payloads: &[String],
        retain: bool,
    ) -> std::io::Result<()> {
        let id = format!("test-pub-{}-{}", std::process::id(), self.port);
        let mut options = rumqttc::MqttOptions::new(id, "127.0.0.1", self.port);
        options.set_keep_alive(Duration::from_secs(5));
        let (client, mut connection) = rumqttc::Client::new(options, 100);
        for p in payloads {
            client
                .publish(topic, rumqttc::QoS::AtLeastOnce, retain, p.as_bytes())
                .map_err(std::io::Error::other)?;
        }
        let mut acked = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while acked < payloads.len() && Instant::now() < deadline {
            match connection.recv_timeout(Duration::from_secs(1)) {
                Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_)))) => acked += 1,
                Ok(Ok(_)) | Err(_) => {}
                Ok(Err(e)) => {
                    return Err(std::io::Error::other(format!(
                        "publishing to the test broker: {e}"
                    )))
                }
            }
        }
        let _ = client.disconnect();
        if acked != payloads.len() {
            return Err(std::io::Error::other(format!(
                "{acked} of {} PUBACKs from the broker",
                payloads.len()
            )));
        }
        Ok(())
    }

    /// For the `spin-redis-trigger` test app, which appends every message of channel
    /// `orders` to the list `seen`: publishes `<prefix>0..9` and checks (within 30 s) that
    /// each was recorded exactly once, in order, after the `before` entries already there.
    pub fn publish_orders_and_check(&self, prefix: &str, before: usize) -> std::io::Result<()> {
        let sent: Vec<String> = (0..10).map(|i| format!("{prefix}{i}")).collect();
        for m in &sent {
            self.redis_cli(&["PUBLISH", "orders", m])?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let got = loop {
            let out = self.redis_cli(&["LRANGE", "seen", "0", "-1"])?;
            let l: Vec<String> = out.lines().map(str::to_string).collect();
            if l.len() >= before + sent.len() {
                break l;
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "the messages were not all handled within 30 s: {l:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        std::thread::sleep(Duration::from_millis(500));
        let n = self.redis_cli(&["LLEN", "seen"])?;
        if got[before..] != sent[..] || n != (before + sent.len()).to_string() {
            return Err(std::io::Error::other(format!(
                "each message once, in order: got {got:?}, then {n} entries"
            )));
        }
        Ok(())
    }
}

/// Runs `scripts/<script>` of this workspace (an installer that prints a path) and returns
/// the path it printed.
fn installed(script: &str) -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let out = Command::new("bash")
        .arg(&path)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "{} failed (see its output above)",
        path.display()
    );
    String::from_utf8(out.stdout).unwrap().trim().into()
}

/// Debian trixie's `nats-server` (unpacked by `scripts/install-nats.sh`) with JetStream,
/// its store in the fixture's dir (so [`ServerProcess::restart`] keeps streams and durable
/// consumers).
pub fn nats() -> ServerProcess {
    nats_with(None)
}

/// As [`nats`], serving TLS only with `server.pem`/`server.key` of `pki` (see
/// [`crate::pki::make_pki`]): clients must verify the server against `ca.pem`.
pub fn nats_tls(pki: &Path) -> ServerProcess {
    nats_with(Some(pki))
}

fn nats_with(tls: Option<&Path>) -> ServerProcess {
    let bin = installed("install-nats.sh");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir.path().join("js"));
    if let Some(pki) = tls {
        cmd.arg("--tls")
            .arg("--tlscert")
            .arg(pki.join("server.pem"))
            .arg("--tlskey")
            .arg(pki.join("server.key"));
    }
    running("nats-server", cmd, port, dir, nats_ready)
}

/// moto's server (a local SQS and DynamoDB, `scripts/install-moto.sh`); it keeps its state
/// in memory only.
pub fn moto() -> ServerProcess {
    let bin = installed("install-moto.sh");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
    running("moto_server", cmd, port, dir, tcp_ready)
}

/// Starts `cmd` (listening on `port`, its data in `dir`); returns once `ready` says it
/// serves. SIGTERM stops it.
fn running(
    name: &'static str,
    cmd: Command,
    port: u16,
    dir: tempfile::TempDir,
    ready: fn(&ServerProcess) -> bool,
) -> ServerProcess {
    let argv = argv_of(&cmd);
    let child = spawn(name, cmd, dir.path());
    let mut s = ServerProcess {
        name,
        port,
        child,
        argv,
        stop_signal: "TERM",
        ready,
        dir,
    };
    s.wait_ready(s.ready);
    s
}

/// A connection speaking NATS's text protocol: enough to publish and to make requests
/// (JetStream's API is requests) without an async client.
struct NatsText {
    reader: std::io::BufReader<TcpStream>,
    writer: TcpStream,
}

impl NatsText {
    fn connect(addr: SocketAddr) -> std::io::Result<NatsText> {
        use std::io::Write;
        let mut writer = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        writer.set_read_timeout(Some(Duration::from_secs(10)))?;
        writer.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\n")?;
        let reader = std::io::BufReader::new(writer.try_clone()?);
        Ok(NatsText { reader, writer })
    }

    fn line(&mut self) -> std::io::Result<String> {
        use std::io::BufRead;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("nats-server closed the connection"));
        }
        if line.starts_with("-ERR") {
            return Err(std::io::Error::other(format!(
                "nats-server: {}",
                line.trim()
            )));
        }
        Ok(line)
    }

    /// Sends `text` and a PING; returns once the server's PONG says it processed them.
    /// Whatever the server sends before the PONG is dropped.
    fn send_and_sync(&mut self, text: &str) -> std::io::Result<()> {
        use std::io::Write;
        self.writer
            .write_all(format!("{text}PING\r\n").as_bytes())?;
        while !self.line()?.starts_with("PONG") {}
        Ok(())
    }

    /// The payload of the first message on `inbox` (subscribed as sid 1).
    fn reply(&mut self) -> std::io::Result<String> {
        use std::io::Read;
        loop {
            let line = self.line()?;
            let fields: Vec<&str> = line.split_whitespace().collect();
            if line.starts_with("PING") {
                std::io::Write::write_all(&mut self.writer, b"PONG\r\n")?;
                continue;
            }
            let len = match fields.first() {
                Some(&"MSG") | Some(&"HMSG") => fields.last().and_then(|n| n.parse::<usize>().ok()),
                _ => None,
            };
            if let Some(len) = len {
                let mut body = vec![0; len + 2];
                self.reader.read_exact(&mut body)?;
                body.truncate(len);
                let body = String::from_utf8_lossy(&body).into_owned();
                if fields.first() == Some(&"HMSG") {
                    // A status-only message: `NATS/1.0 503` when no one serves the subject
                    // yet (JetStream's API right after the server started).
                    let header_len = fields[fields.len() - 2].parse::<usize>().unwrap_or(0);
                    let (headers, payload) = body.split_at(header_len.min(body.len()));
                    if headers.starts_with("NATS/1.0 503") {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::NotConnected,
                            "nats-server: no responders",
                        ));
                    }
                    return Ok(payload.to_string());
                }
                return Ok(body);
            }
        }
    }
}

impl ServerProcess {
    /// Publishes `payloads` on `subject` of this (plain NATS) server, in order; returns once
    /// the server has processed them.
    pub fn nats_publish(&self, subject: &str, payloads: &[String]) -> std::io::Result<()> {
        let mut c = NatsText::connect(self.addr())?;
        let mut text = String::new();
        for p in payloads {
            text.push_str(&format!("PUB {subject} {}\r\n{p}\r\n", p.len()));
        }
        c.send_and_sync(&text)
    }

    /// Sends `payload` to `subject` of this (plain NATS) server as a request and returns the
    /// reply's payload (within 10 s): JetStream's API (`$JS.API.STREAM.CREATE.<stream>`,
    /// `$JS.API.CONSUMER.INFO.<stream>.<consumer>`) and JetStream publishing (the reply is
    /// the stored message's ack).
    /// A subject no one serves yet (JetStream's API while the server starts) is asked again
    /// until it is served, and a connection lost before the request went out is made again
    /// (30 s).
    pub fn nats_request(&self, subject: &str, payload: &str) -> std::io::Result<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let inbox = format!("_INBOX.test.{}", std::process::id());
        loop {
            use std::io::Write;
            // The subscription is in place before the request goes out; the request is not
            // followed by a PING, since the reply can come before a PONG and waiting for the
            // PONG would skip it.
            let subscribed = NatsText::connect(self.addr()).and_then(|mut c| {
                c.send_and_sync(&format!("SUB {inbox} 1\r\n"))?;
                Ok(c)
            });
            let mut c = match subscribed {
                Ok(c) => c,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                Err(e) => return Err(e),
            };
            c.writer.write_all(
                format!("PUB {subject} {inbox} {}\r\n{payload}\r\n", payload.len()).as_bytes(),
            )?;
            match c.reply() {
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotConnected
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                r => return r,
            }
        }
    }

    /// Publishes `payloads` to a JetStream stream's `subject` of this server, each stored
    /// before the next is sent (the reply is checked for an error).
    pub fn jetstream_publish(&self, subject: &str, payloads: &[String]) -> std::io::Result<()> {
        for p in payloads {
            let ack = self.nats_request(subject, p)?;
            if !ack.contains("\"seq\"") {
                return Err(std::io::Error::other(format!(
                    "JetStream did not store the message on {subject}: {ack}"
                )));
            }
        }
        Ok(())
    }

    /// Runs the Python `code` with `sqs`, a boto3 SQS client of this moto server (boto3
    /// from moto's venv); returns its stdout, trimmed.
    pub fn boto_sqs(&self, code: &str) -> std::io::Result<String> {
        let python = Path::new(&self.argv[0]).with_file_name("python3");
        let script = format!(
            "import boto3, json\nsqs = boto3.client('sqs', endpoint_url='http://{}', \
             region_name='us-east-1', aws_access_key_id='testing', \
             aws_secret_access_key='testing')\n{code}\n",
            self.addr()
        );
        let out = Command::new(&python).args(["-c", &script]).output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "boto3 against moto: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}
