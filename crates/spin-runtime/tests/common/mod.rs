//! Shared helpers for the runtime's integration tests: guest app lookup, a `spin-serve`
//! process guard, and a tiny blocking HTTP/1.1 client (loopback only).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where the built guest `.wasm` files are: `GUEST_APPS_DIR`, else the guest workspace's
/// target dir.
pub fn guest_apps_dir() -> PathBuf {
    match std::env::var("GUEST_APPS_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join("tests/apps/target/wasm32-wasip2/release"),
    }
}

/// Where the wasip1 core modules are: beside [`guest_apps_dir`]'s `wasm32-wasip2`.
pub fn guest_apps_dir_p1() -> PathBuf {
    guest_apps_dir().join("../../wasm32-wasip1/release")
}

/// The repository root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Path of a guest wasm; panics with the fix if it is not built.
pub fn guest_wasm(name: &str) -> PathBuf {
    let p = guest_apps_dir().join(name);
    assert!(
        p.is_file(),
        "guest app {} not found: run `make apps` (scripts/build-apps.sh) or set GUEST_APPS_DIR",
        p.display()
    );
    p
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Copies `tests/apps/<app>` (its `spin.toml` and data directories, not its Rust
/// sources) into a temp dir, pointing the component sources at [`guest_apps_dir`].
pub fn prepare_app(app: &str) -> tempfile::TempDir {
    let src = workspace_root().join("tests/apps").join(app);
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "src" || name == "Cargo.toml" || name == "target" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dir.path().join(&name));
        }
    }
    let manifest = std::fs::read_to_string(src.join("spin.toml")).unwrap();
    let wasm_dir = format!("{}/", guest_apps_dir().display());
    let p1_dir = format!("{}/", guest_apps_dir_p1().display());
    let js_dir = format!(
        "{}/",
        workspace_root().join("tests/apps/target/js").display()
    );
    let manifest = manifest
        .replace("../target/wasm32-wasip2/release/", &wasm_dir)
        .replace("../target/wasm32-wasip1/release/", &p1_dir)
        .replace("../target/js/", &js_dir);
    std::fs::write(dir.path().join("spin.toml"), manifest).unwrap();
    dir
}

/// Writes a manifest into a fresh temp dir (`{WASM_DIR}` is replaced by the guest dir).
pub fn app_from_manifest(manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text = manifest.replace("{WASM_DIR}", &guest_apps_dir().display().to_string());
    std::fs::write(dir.path().join("spin.toml"), text).unwrap();
    dir
}

/// A running `spin-serve`; killed (by pid) and reaped on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// A compile cache dir this server owns (removed after the process is gone).
    own_cache: Option<tempfile::TempDir>,
    /// The server's TMPDIR (staged component files).
    pub tmp_dir: tempfile::TempDir,
}

impl Server {
    /// Starts `spin-serve <app_dir> --listen 127.0.0.1:0` with its own compile cache dir
    /// and waits (bounded) for the listening line.
    pub fn start(app_dir: &Path, extra_env: &[(&str, &str)]) -> Server {
        let cache_dir = tempfile::tempdir().unwrap();
        let mut s = Self::start_with_cache(app_dir, extra_env, cache_dir.path());
        s.own_cache = Some(cache_dir);
        s
    }

    /// As [`Server::start`] with a given compile cache dir.
    pub fn start_with_cache(
        app_dir: &Path,
        extra_env: &[(&str, &str)],
        cache_dir: &Path,
    ) -> Server {
        Self::start_full(app_dir, extra_env, cache_dir, None)
    }

    /// As [`Server::start`], the process joining the cgroup whose `cgroup.procs` file is
    /// given before it execs `spin-serve`.
    pub fn start_in_cgroup(app_dir: &Path, extra_env: &[(&str, &str)], procs: &Path) -> Server {
        let cache_dir = tempfile::tempdir().unwrap();
        let mut s = Self::start_full(app_dir, extra_env, cache_dir.path(), Some(procs));
        s.own_cache = Some(cache_dir);
        s
    }

    fn start_full(
        app_dir: &Path,
        extra_env: &[(&str, &str)],
        cache_dir: &Path,
        cgroup_procs: Option<&Path>,
    ) -> Server {
        // Staged files go to a dir this server owns, so nothing outlives the test.
        let tmp_dir = tempfile::tempdir().unwrap();
        let bin = env!("CARGO_BIN_EXE_spin-serve");
        let mut cmd = match cgroup_procs {
            None => Command::new(bin),
            Some(procs) => {
                let mut c = Command::new("sh");
                c.args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
                    .arg(procs)
                    .arg(bin);
                c
            }
        };
        cmd.env("TMPDIR", tmp_dir.path());
        cmd.arg(app_dir)
            .args(["--listen", "127.0.0.1:0"])
            .env("SPIN_SHIM_COMPILE_CACHE_DIR", cache_dir)
            .env("RUST_LOG", "spin_runtime=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn spin-serve");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[spin-serve] {line}");
                let mut l = log2.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("spin-serve: listening on http://") {
                    let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "spin-serve did not start (status {status:?}); stderr:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        Server {
            child,
            addr,
            stderr: log,
            own_cache: None,
            tmp_dir,
        }
    }

    /// GET `path`.
    pub fn get(&self, path: &str) -> HttpResponse {
        request(self.addr, "GET", path, b"")
    }

    /// Sends a signal (e.g. `"TERM"`) to the server process with kill(1).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Waits (bounded) for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first so the server removes what it staged; SIGKILL if it hangs.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            if self.wait_exit(Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A response header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// For the spin-hello echo app: the value of a `key=value` body line.
    pub fn field(&self, key: &str) -> Option<String> {
        self.text()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request with `Connection: close`, 60 s timeout.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    request_with(addr, method, path, &[], body)
}

/// As [`request`], with extra request headers.
pub fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> HttpResponse {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        data = &data[eol + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
    out
}

/// Runs `spin-serve` expecting it to fail at start; returns its stderr.
pub fn start_failure(app_dir: &Path, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spin-serve"));
    cmd.arg(app_dir)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let cache = tempfile::tempdir().unwrap();
    cmd.env("SPIN_SHIM_COMPILE_CACHE_DIR", cache.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn spin-serve");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("spin-serve did not exit although its start should fail");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "spin-serve started; stderr:\n{stderr}");
    stderr
}

/// The server's stderr once it contains `needle` (its reader thread may lag behind the
/// HTTP response); after 10 s, whatever it holds.
pub fn log_with(server: &Server, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = server.stderr.lock().unwrap().clone();
        if log.contains(needle) || Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[allow(unused_imports)]
pub use test_support::pki::{make_pki, openssl};

/// `text` without the `Type::` prefixes wit-bindgen's Debug puts before variant names
/// (`Error::InvalidAddress` -> `InvalidAddress`), so expectations read like the WIT.
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if c == ':'
            && chars.peek() == Some(&':')
            && word.starts_with(|w: char| w.is_ascii_uppercase())
        {
            chars.next();
            word.clear();
            continue;
        }
        out.push_str(&word);
        word.clear();
        out.push(c);
    }
    out.push_str(&word);
    out
}
