//! Guest isolation limits through `spin-serve` and the spin-limits guest app: a runaway
//! guest yields and meets its deadline, SIGTERM drains past running loops, one greedy
//! request fails alone under a cgroup memory limit, idle and slowloris connections are
//! closed while others are served, and the connection cap holds.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;

/// Starts `GET /loop` on its own thread; the handle yields the response status.
fn start_loop(server: &Server) -> std::thread::JoinHandle<u16> {
    let addr = server.addr;
    std::thread::spawn(move || request(addr, "GET", "/loop", b"").status)
}

fn wait_for_log(server: &Server, needle: &str, count: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if server.stderr.lock().unwrap().matches(needle).count() >= count {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn runaway_guests_yield_and_the_deadline_ends_them() {
    let app = prepare_app("spin-limits");
    let server = Server::start(app.path(), &[("SPIN_SHIM_REQUEST_TIMEOUT", "4s")]);
    let started = Instant::now();
    let loops = [start_loop(&server), start_loop(&server)];
    // Both loops are inside the guest once two instances were created.
    std::thread::sleep(Duration::from_millis(500));

    // Two spinning guests on a 2-worker runtime: health still answers promptly.
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = server.get("/.well-known/spin/health");
        times.push(t.elapsed());
        assert_eq!(r.status, 200);
        let r = server.get("/other");
        assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    }
    times.sort();
    assert!(
        times[2] < Duration::from_millis(100),
        "health while two guests loop: {times:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the checks ran past the deadline: the loops must still have been running"
    );

    // The deadline ends both loops with 504 and a log line naming the knob.
    for l in loops {
        assert_eq!(l.join().unwrap(), 504);
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(4), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(
        wait_for_log(
            &server,
            "ran longer than the request deadline of 4s (set SPIN_SHIM_REQUEST_TIMEOUT",
            2,
            Duration::from_secs(5)
        ),
        "{}",
        server.stderr.lock().unwrap()
    );
    // Served normally afterwards.
    assert_eq!(server.get("/").status, 200);
}

#[test]
fn sigterm_exits_within_the_drain_bound_while_guests_loop() {
    let app = prepare_app("spin-limits");
    let mut server = Server::start(app.path(), &[("SPIN_SHIM_REQUEST_TIMEOUT", "0")]);
    let loops = [start_loop(&server), start_loop(&server)];
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.get("/").status, 200);
    let t = Instant::now();
    server.signal("TERM");
    // The drain bound is 10 s; the process must be gone shortly after it.
    let code = server.wait_exit(Duration::from_secs(20));
    let took = t.elapsed();
    assert_eq!(code, Some(0), "exit after SIGTERM (took {took:?})");
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(
        wait_for_log(
            &server,
            "drain timeout of 10s passed",
            1,
            Duration::from_secs(5)
        ),
        "{}",
        server.stderr.lock().unwrap()
    );
    for l in loops {
        // The connection was dropped: the client saw no response (or an error status).
        let _ = l.join();
    }
}

/// A v1 memory cgroup of this test's own (this host mounts the v1 memory controller),
/// removed on drop after its processes are gone.
struct MemoryCgroup(PathBuf);

impl MemoryCgroup {
    fn new(limit: u64) -> Option<MemoryCgroup> {
        let root = PathBuf::from("/sys/fs/cgroup/memory");
        if !root.join("memory.limit_in_bytes").exists() {
            return None;
        }
        let dir = root.join(format!("spin-limits-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        Some(MemoryCgroup(dir))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

#[test]
fn a_greedy_request_fails_alone_under_the_container_memory_limit() {
    let Some(cgroup) = MemoryCgroup::new(256 << 20) else {
        panic!("this test needs the cgroup v1 memory controller at /sys/fs/cgroup/memory");
    };
    let app = prepare_app("spin-limits");
    {
        let server = Server::start_in_cgroup(app.path(), &[], &cgroup.0.join("cgroup.procs"));
        let pid = server.child.id();
        // The default cap is half the cgroup's limit.
        assert!(
            wait_for_log(
                &server,
                "container memory limit 268435456 bytes: each component instance may use up to 134217728 bytes",
                1,
                Duration::from_secs(1)
            ),
            "{}",
            server.stderr.lock().unwrap()
        );
        let r = server.get("/greedy");
        assert_eq!(r.status, 500, "{}", r.text());
        assert!(
            wait_for_log(
                &server,
                "ran out of memory: it tried to grow a linear memory to ",
                1,
                Duration::from_secs(5)
            ) && server.stderr.lock().unwrap().contains(
                "over the per-instance cap of 134217728 bytes (set SPIN_MAX_INSTANCE_MEMORY"
            ),
            "{}",
            server.stderr.lock().unwrap()
        );
        // The process (the pod) lives and serves the next request.
        assert!(PathBuf::from(format!("/proc/{pid}")).exists());
        let r = server.get("/");
        assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
        let r = server.get("/greedy");
        assert_eq!(r.status, 500);
        assert_eq!(server.get("/").status, 200);
        let oom_kills = std::fs::read_to_string(cgroup.0.join("memory.oom_control")).unwrap();
        assert!(oom_kills.contains("oom_kill 0"), "{oom_kills}");
    }
    drop(cgroup);
}

fn connect(server: &Server) -> TcpStream {
    let s = TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Whether the server closed `s` (EOF or reset); `false` if it is still open.
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => closed(s),
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            false
        }
        Err(_) => true,
    }
}

#[test]
fn idle_and_slowloris_connections_are_closed_while_others_are_served() {
    let app = prepare_app("spin-limits");
    let server = Server::start(
        app.path(),
        &[
            ("SPIN_SHIM_IDLE_TIMEOUT", "8s"),
            ("SPIN_SHIM_HEADER_READ_TIMEOUT", "8s"),
        ],
    );
    let opened = Instant::now();
    let mut idle: Vec<TcpStream> = (0..500).map(|_| connect(&server)).collect();
    // A kept-alive connection that served one request and then idles.
    let mut kept = connect(&server);
    write!(kept, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = kept.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    kept.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // A slowloris client: one header byte every 200 ms, never finishing the head.
    let mut slow = connect(&server);
    write!(slow, "GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let slow_addr = server.addr;
    let slowloris = std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if slow.write_all(b"X").is_err() || closed(&mut slow) {
                return Some(start.elapsed());
            }
        }
        let _ = slow_addr;
        None
    });

    // Other clients are served meanwhile.
    for _ in 0..10 {
        let r = server.get("/");
        assert_eq!(r.status, 200);
    }
    assert!(
        opened.elapsed() < Duration::from_secs(8),
        "too slow to check before the timeout"
    );
    // Nothing was closed before the timeout.
    assert!(!closed(&mut idle[0]) && !closed(&mut idle[499]) && !closed(&mut kept));

    // After the timeout every idle connection is closed (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut open: Vec<&mut TcpStream> = idle.iter_mut().chain(std::iter::once(&mut kept)).collect();
    while !open.is_empty() && Instant::now() < deadline {
        open.retain_mut(|s| !closed(s));
    }
    assert!(open.is_empty(), "{} connections still open", open.len());
    assert!(opened.elapsed() >= Duration::from_secs(8));
    let slow_closed = slowloris.join().unwrap();
    assert!(
        slow_closed.is_some_and(|t| t < Duration::from_secs(15)),
        "slowloris connection closed after {slow_closed:?}"
    );
    assert_eq!(server.get("/").status, 200);
}

#[test]
fn the_connection_cap_holds_new_clients_until_a_slot_frees() {
    let app = prepare_app("spin-limits");
    let server = Server::start(
        app.path(),
        &[
            ("SPIN_SHIM_MAX_CONNECTIONS", "2"),
            ("SPIN_SHIM_IDLE_TIMEOUT", "2s"),
        ],
    );
    let t = Instant::now();
    let a = connect(&server);
    let b = connect(&server);
    // Served only once the idle timeout closed one of the two.
    let r = server.get("/");
    assert_eq!(r.status, 200);
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(server
        .stderr
        .lock()
        .unwrap()
        .contains("connection limit of 2 reached (SPIN_SHIM_MAX_CONNECTIONS)"));
    drop((a, b));
}

#[test]
fn logs_name_scheme_host_and_port_only() {
    use spin_runtime::host::outbound::AllowedHosts;
    let msg = spin_runtime::host::denied_message(
        "fetcher",
        &"https://api.example.com:8443/v1/items?token=s3cr3t#frag"
            .parse()
            .unwrap(),
    );
    assert!(
        msg.contains("request to https://api.example.com:8443:"),
        "{msg}"
    );
    assert!(
        !msg.contains("s3cr3t") && !msg.contains("/v1/items"),
        "{msg}"
    );

    // A template expanding to something invalid: the expanded secret is not echoed.
    let render = |_: &str| Ok("https://user:s3cr3t@/path?token=s3cr3t".to_string());
    let err = AllowedHosts::parse("c", &["https://{{ upstream }}".into()], render)
        .unwrap_err()
        .to_string();
    assert!(!err.contains("s3cr3t"), "{err}");
    assert!(
        err.contains("`https://{{ upstream }}` does not expand"),
        "{err}"
    );
    // A literal entry: user info, path and query are dropped from the message.
    let err = AllowedHosts::parse(
        "c",
        &["ftp!://user:s3cr3t@host/p?token=s3cr3t".into()],
        |s: &str| Ok(s.to_string()),
    )
    .unwrap_err()
    .to_string();
    assert!(!err.contains("s3cr3t"), "{err}");
    assert!(err.contains("ftp!://host"), "{err}");
}
