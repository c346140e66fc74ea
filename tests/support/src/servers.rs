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
        self.wait_ready(tcp_ready);
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
        dir,
    };
    s.wait_ready(tcp_ready);
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
        dir,
    };
    s.wait_ready(tcp_ready);
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
