//! `Runner::run` as a container's process runs it: app dir with `spin.toml`, the container env,
//! serve until SIGTERM, exit code 0. The test re-runs its own binary as the "container
//! process" (signals are process-wide, so it cannot run inside the test harness).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const CHILD_ENV: &str = "SPIN_RUNTIME_TEST_RUN_IN_CONTAINER";

#[test]
fn run_in_container_serves_until_sigterm_then_returns_zero() {
    if let Ok(app_dir) = std::env::var(CHILD_ENV) {
        // Child: behave like the container's init process.
        let env: Vec<(String, String)> = std::env::vars().collect();
        let app_dir = std::path::Path::new(&app_dir);
        spin_runtime::init_tracing(&env);
        let run = spin_runtime::App::load_manifest(&app_dir.join(spin_runtime::MANIFEST_FILE))
            .and_then(|app| spin_runtime::Runner::new(app).dir(app_dir).env(&env).run());
        let code = match run {
            Ok(code) => code,
            Err(e) => {
                eprintln!("Error: {e:#}");
                1
            }
        };
        std::process::exit(code);
    }
    let app = prepare_app("spin-hello");
    let cache = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "run_in_container_serves_until_sigterm_then_returns_zero",
            "--nocapture",
        ])
        .env(CHILD_ENV, app.path())
        .env("SPIN_HTTP_LISTEN_ADDR", "127.0.0.1:0")
        .env("SPIN_SHIM_COMPILE_CACHE_DIR", cache.path())
        .env("TMPDIR", tmp.path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[child] {line}");
            if let Some(rest) = line.split("Serving http://").nth(1) {
                let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                let _ = tx.send(strip_ansi(&addr));
            }
        }
    });
    let addr = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(a) => a.parse().expect("listen address in log"),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("run_in_container did not report its listen address");
        }
    };
    let r = request(addr, "GET", "/hello", b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.field("component").as_deref(), Some("hello"));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("run_in_container did not return after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(0));
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
