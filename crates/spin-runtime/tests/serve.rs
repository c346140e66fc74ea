//! The guest apps served by `spin-serve` on 127.0.0.1: routing, Spin headers, built-in
//! endpoints, files, CPU app, memory cap, graceful SIGTERM.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn hello_routes_and_spin_headers() {
    let app = prepare_app("spin-hello");
    let server = Server::start(app.path(), &[]);
    let port = server.addr.port();

    // Exact route.
    let r = server.get("/hello?x=1");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.field("component").as_deref(), Some("hello"));
    assert_eq!(r.field("query").as_deref(), Some("x=1"));
    assert_eq!(r.field("spin-matched-route").as_deref(), Some("/hello"));
    assert_eq!(
        r.field("spin-raw-component-route").as_deref(),
        Some("/hello")
    );
    assert_eq!(r.field("spin-component-route").as_deref(), Some("/hello"));
    assert_eq!(r.field("spin-path-info").as_deref(), Some(""));
    assert_eq!(r.field("spin-base-path").as_deref(), Some("/"));
    assert_eq!(
        r.field("spin-full-url"),
        Some(format!("http://127.0.0.1:{port}/hello?x=1"))
    );
    let client = r.field("spin-client-addr").expect("spin-client-addr");
    assert!(client.starts_with("127.0.0.1:"), "{client}");
    assert_ne!(client, format!("127.0.0.1:{port}"));

    // Wildcard below the exact route: the longer wildcard beats the catch-all.
    let r = server.get("/hello/a/b");
    assert_eq!(r.field("component").as_deref(), Some("hello-wild"));
    assert_eq!(r.field("spin-matched-route").as_deref(), Some("/hello/..."));
    assert_eq!(r.field("spin-component-route").as_deref(), Some("/hello"));
    assert_eq!(r.field("spin-path-info").as_deref(), Some("/a/b"));

    // Captures.
    let r = server.get("/users/42/posts/first");
    assert_eq!(r.field("component").as_deref(), Some("users"));
    assert_eq!(r.field("spin-path-match-id").as_deref(), Some("42"));
    assert_eq!(r.field("spin-path-match-post").as_deref(), Some("first"));
    assert_eq!(r.field("spin-path-info").as_deref(), Some(""));

    // Catch-all.
    let r = server.get("/elsewhere/x");
    assert_eq!(r.field("component").as_deref(), Some("catchall"));
    assert_eq!(r.field("spin-matched-route").as_deref(), Some("/..."));
    assert_eq!(r.field("spin-component-route").as_deref(), Some(""));
    assert_eq!(r.field("spin-path-info").as_deref(), Some("/elsewhere/x"));
    assert_eq!(r.field("method").as_deref(), Some("Method::Get"));

    // Built-ins take precedence over the catch-all.
    let r = server.get("/.well-known/spin/health");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    let r = server.get("/.well-known/spin/info");
    assert_eq!(r.status, 200);
    let info: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(info["name"], "spin-hello");
    assert_eq!(info["version"], "1.2.3");
    // As Spin's AppInfo: no digest outside an OCI image (the key is left out), pretty JSON.
    assert!(info.get("oci_image_digest").is_none(), "{info}");
    assert!(r.text().contains("\n  \"name\""), "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{:?}",
        r.text()
    );
    let r = server.get("/.well-known/spin/other");
    assert_eq!((r.status, r.body.len()), (404, 0));
}

#[test]
fn routing_rules_through_the_server() {
    let app = app_from_manifest(
        r#"
spin_manifest_version = 2
[application]
name = "routes"
[[trigger.http]]
route = "/dup"
component = "first"
[[trigger.http]]
route = "/exact/..."
component = "wild"
[[trigger.http]]
route = "/exact"
component = "exact"
[[trigger.http]]
route = "/dup"
component = "second"
[[trigger.http]]
route = { private = true }
component = "hidden"
[component.first]
source = "{WASM_DIR}/spin_hello.wasm"
environment = { COMPONENT = "first" }
[component.second]
source = "{WASM_DIR}/spin_hello.wasm"
environment = { COMPONENT = "second" }
[component.wild]
source = "{WASM_DIR}/spin_hello.wasm"
environment = { COMPONENT = "wild" }
[component.exact]
source = "{WASM_DIR}/spin_hello.wasm"
environment = { COMPONENT = "exact" }
[component.hidden]
source = "{WASM_DIR}/spin_hello.wasm"
environment = { COMPONENT = "hidden" }
"#,
    );
    let server = Server::start(app.path(), &[]);
    // Duplicate route: the last one wins, with a warning in the log.
    assert_eq!(server.get("/dup").header("x-component"), Some("second"));
    assert!(server.stderr.lock().unwrap().contains("duplicate route"));
    // Exact beats wildcard although the wildcard comes first.
    assert_eq!(server.get("/exact").header("x-component"), Some("exact"));
    assert_eq!(server.get("/exact/").header("x-component"), Some("exact"));
    assert_eq!(
        server.get("/exact/more").header("x-component"),
        Some("wild")
    );
    // No match: 404 (the private component is not reachable anywhere).
    for path in ["/", "/nope", "/dupe", "/hidden"] {
        let r = server.get(path);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }
}

#[test]
fn cpu_app_computes_fib() {
    let app = prepare_app("spin-cpu");
    let server = Server::start(app.path(), &[]);
    let r = server.get("/?n=25");
    assert_eq!((r.status, r.text().as_str()), (200, "fib(25) = 75025\n"));
    let r = server.get("/any/path?n=10");
    assert_eq!(r.text(), "fib(10) = 55\n");
    assert_eq!(server.get("/?n=abc").status, 400);
}

#[test]
fn files_are_mounted_read_only_with_excludes() {
    let app = prepare_app("spin-files");
    let mut server = Server::start(app.path(), &[]);
    let r = server.get("/static/hello.txt");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "hello from a static file\n")
    );
    assert_eq!(server.get("/static/sub/nested.txt").text(), "nested file\n");
    // Excluded by exclude_files.
    assert_eq!(server.get("/static/secret.txt").status, 404);
    // Directory mapping { source = "assets", destination = "/data" }.
    assert_eq!(server.get("/data/logo.txt").text(), "asset content\n");
    assert_eq!(server.get("/__list?dir=/static").text(), "hello.txt\nsub\n");
    // Not visible: the manifest and sources next to it.
    assert_eq!(server.get("/spin.toml").status, 404);
    // Read-only: writes fail in the guest and leave the host untouched.
    for path in ["/static/hello.txt", "/data/new.txt", "/data/logo.txt"] {
        let r = request(server.addr, "PUT", path, b"overwritten");
        assert_eq!(r.status, 403, "{path}: {}", r.text());
    }
    assert_eq!(
        std::fs::read_to_string(app.path().join("assets/logo.txt")).unwrap(),
        "asset content\n"
    );
    assert!(!app.path().join("assets/new.txt").exists());
    // Glob-mounted files were staged under TMPDIR; a graceful exit removes them.
    let tmp = server.tmp_dir.path().to_path_buf();
    let staged = || std::fs::read_dir(&tmp).unwrap().count();
    assert_eq!(staged(), 1);
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(staged(), 0);
}

#[test]
fn max_instance_memory_is_enforced() {
    let app = prepare_app("spin-hello");
    // 64 KiB is less than the guest's initial memory: instantiation fails -> 500.
    let small = Server::start(app.path(), &[("SPIN_MAX_INSTANCE_MEMORY", "65536")]);
    assert_eq!(small.get("/hello").status, 500);
    let big = Server::start(app.path(), &[("SPIN_MAX_INSTANCE_MEMORY", "268435456")]);
    assert_eq!(big.get("/hello").status, 200);
}

#[test]
fn bad_env_values_fail_naming_the_variable() {
    let app = prepare_app("spin-hello");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spin-serve"))
        .arg(app.path())
        .env("SPIN_HTTP_LISTEN_ADDR", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SPIN_HTTP_LISTEN_ADDR"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spin-serve"))
        .arg(app.path())
        .args(["--listen", "127.0.0.1:0"])
        .env("SPIN_MAX_INSTANCE_MEMORY", "lots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SPIN_MAX_INSTANCE_MEMORY"));
}

#[test]
fn sigterm_drains_in_flight_request_and_exits_zero() {
    let app = prepare_app("spin-cpu");
    let mut server = Server::start(app.path(), &[]);
    // Calibrate a request that takes a while (fib(36) is ~0.1-0.5 s of wasm).
    let t = Instant::now();
    assert_eq!(server.get("/?n=32").status, 200);
    let base = t.elapsed();
    let n = if base > Duration::from_millis(300) {
        34
    } else {
        37
    };
    let addr = server.addr;
    let in_flight = std::thread::spawn(move || request(addr, "GET", &format!("/?n={n}"), b""));
    std::thread::sleep(Duration::from_millis(150));
    server.signal("TERM");
    let r = in_flight.join().unwrap();
    assert_eq!(r.status, 200, "in-flight request must finish: {}", r.text());
    assert!(r.text().starts_with(&format!("fib({n}) = ")));
    assert_eq!(server.wait_exit(Duration::from_secs(15)), Some(0));
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
    let log = server.stderr.lock().unwrap().clone();
    assert!(log.contains("SIGTERM received"), "{log}");
    // stderr is a pipe here, as a container's is: no terminal colour escapes.
    assert!(
        !log.contains('\x1b'),
        "ANSI escapes in piped log output: {log:?}"
    );
}

#[test]
fn idle_server_exits_promptly_on_sigterm() {
    let app = prepare_app("spin-hello");
    let mut server = Server::start(app.path(), &[]);
    // An idle keep-alive connection must not hold the shutdown.
    let _idle = std::net::TcpStream::connect(server.addr).unwrap();
    let t = Instant::now();
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(5)), Some(0));
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn second_start_uses_compile_cache() {
    let app = prepare_app("spin-hello");
    let cache = tempfile::tempdir().unwrap();
    let cache_path = cache.path().to_path_buf();
    let first = Server::start_with_cache(app.path(), &[], &cache_path);
    assert_eq!(first.get("/hello").status, 200);
    let log = first.stderr.lock().unwrap().clone();
    assert!(log.contains("compile cache miss"), "{log}");
    assert!(!log.contains("compile cache hit"), "{log}");
    let entries: Vec<_> = std::fs::read_dir(&cache_path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // Five components share one wasm: compiled once, one cache entry, no temp files.
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].ends_with(".cwasm"));
    drop(first);
    let second = Server::start_with_cache(app.path(), &[], &cache_path);
    assert_eq!(second.get("/hello").status, 200);
    let log = second.stderr.lock().unwrap().clone();
    assert!(log.contains("compile cache hit"), "{log}");
    assert!(!log.contains("compile cache miss"), "{log}");
}

#[test]
fn locked_app_json_is_served_like_the_manifest() {
    let wasm = guest_wasm("spin_hello.wasm");
    let dir = tempfile::tempdir().unwrap();
    let locked = serde_json::json!({
        "spin_lock_version": 0,
        "metadata": {"name": "locked-hello", "version": "9.9.9"},
        "triggers": [{"id": "t", "trigger_type": "http",
                      "trigger_config": {"route": "/greet/...", "component": "hello"}}],
        "components": [{
            "id": "hello",
            "source": {"content_type": "application/wasm",
                       "source": format!("file://{}", wasm.display())},
            "env": {"COMPONENT": "from-lock"}
        }]
    });
    let path = dir.path().join("locked.json");
    std::fs::write(&path, locked.to_string()).unwrap();
    let server = Server::start(&path, &[]);
    let r = server.get("/greet/x");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.field("component").as_deref(), Some("from-lock"));
    assert_eq!(r.field("spin-path-info").as_deref(), Some("/x"));
    assert_eq!(server.get("/other").status, 404);
    let info: serde_json::Value =
        serde_json::from_slice(&server.get("/.well-known/spin/info").body).unwrap();
    assert_eq!(info["name"], "locked-hello");
}
