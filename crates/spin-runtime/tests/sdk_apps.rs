//! Apps written against published Spin SDKs, served by `spin-serve`: spin-sdk 2.x, 3.x and
//! 5.x built for wasm32-wasip1 (core modules, componentized at load with the preview1 adapter
//! and cached keyed by the module; 2.x's modules import the WASI 0.2.0-rc-2023-10-18 packages
//! and export the rc-2023-10-18 `wasi:http/incoming-handler`), 5.x for wasm32-wasip2, and 6.x
//! (Spin 4: a WASIp3 component exporting only `wasi:http/handler@0.3.0-rc-2026-03-15`);
//! JavaScript from Spin's http-js template (@spinframework/build-tools) and from bare
//! componentize-js; Python spin-sdk 3.x (componentize-py), and Python spin-sdk 4.x
//! (componentize-py, WASIp3 and all of Spin 4's interfaces). Also: `.env` in the app
//! directory supplies `SPIN_VARIABLE_*` values as `spin up` does, the environment winning.
//!
//! Each start's time to listening and the server's RSS are printed (`sdk-apps:` lines) for
//! the report; they are not asserted.

mod common;

use std::time::Instant;

use common::*;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn cache_entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".cwasm"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Serves a Rust SDK app twice on one compile cache (cold, then warm) and checks both
/// routes, a 404, and what the load logged, each time.
fn serve_sdk_app(app: &str, sdk: &str, target: &str) {
    let hello = format!("sdk={sdk} route=/hello greeting=hello from spin-sdk {sdk}\n");
    let echo = format!("sdk={sdk} route=/echo path=/a/b\n");
    let entries = serve_app(
        app,
        &format!("Rust | spin-sdk {sdk} | {target}"),
        &[("/hello", &hello), ("/echo/a/b", &echo)],
        &|server, round| {
            assert_eq!(server.get("/nothing").status, 404);
            let log = server.stderr.lock().unwrap().clone();
            if target == "wasip1" && round == "cold" {
                assert!(
                    log.contains("componentizing with the preview1 adapter"),
                    "{log}"
                );
            }
            if sdk != "6" {
                // Outbound HTTP through the SDK (a self request), and a destination the
                // manifest does not allow, refused with the SDK's error.
                let r = server.get("/outbound/hello");
                assert_eq!(r.status, 200, "{app} {round} /outbound/hello: {}", r.text());
                assert_eq!(
                    r.text(),
                    format!("sdk={sdk} route=/outbound upstream=200 {hello}")
                );
                let r = server.get("/deny");
                assert_eq!(r.status, 502, "{app} {round} /deny: {}", r.text());
                assert!(r.text().contains("HttpRequestDenied"), "{}", r.text());
            }
            if sdk == "2" {
                // spin-sdk 2 calls the WASI 0.2.0-rc-2023-10-18 interfaces directly.
                let r = server.get("/wasi");
                assert_eq!(r.text(), SDK2_WASI, "{app} {round} /wasi");
            }
            if sdk == "6" {
                // The guest keeps writing its body after `handle` returned the response.
                let r = server.get("/stream");
                assert_eq!(r.status, 200, "{app} {round} /stream: {}", r.text());
                let want: String = (0..1000).map(|i| format!("line {i}\n")).collect();
                assert_eq!(r.text(), want);
                if round == "cold" {
                    assert!(log.contains("retargeting it to WASI 0.3.0"), "{log}");
                }
            }
        },
    );
    if target == "wasip1" {
        assert!(entries[0].contains("-p1-reactor-"), "{entries:?}");
    }
}

/// What sdk2-http's `/wasi` answers when every snapshot interface it calls works: clocks,
/// timezone (UTC), random, environment, a file read through the `files` preopen, and a TCP
/// socket refused as the runtime refuses every socket.
const SDK2_WASI: &str = "sdk=2 route=/wasi wall_clock_after_2020=true monotonic=true \
    utc_offset=0 random_bytes=16 env_vars=0 file_size=56 \
    file=\"a file read through wasi:filesystem@0.2.0-rc-2023-10-18\" tcp=create:access-denied\n";

#[test]
fn spin_sdk_2_wasip1() {
    serve_sdk_app("sdk2-http", "2", "wasip1");
}

#[test]
fn spin_sdk_3_wasip1() {
    serve_sdk_app("sdk3-http", "3", "wasip1");
}

#[test]
fn spin_sdk_5_wasip1() {
    serve_sdk_app("sdk5-http", "5", "wasip1");
}

#[test]
fn spin_sdk_5_wasip2() {
    serve_sdk_app("sdk5-http-p2", "5", "wasip2");
}

#[test]
fn spin_sdk_6_wasip3() {
    serve_sdk_app("sdk6-http", "6", "wasip2 (WASIp3 handler)");
}

/// Many requests to the WASIp3 app at once, each its own instance: every one answered.
#[test]
fn spin_sdk_6_concurrent_requests() {
    let dir = prepare_app("sdk6-http");
    let server = Server::start(dir.path(), &[]);
    let addr = server.addr;
    let t = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|n| {
            std::thread::spawn(move || {
                for i in 0..25 {
                    let path = format!("/echo/{n}/{i}");
                    let r = request(addr, "GET", &path, b"");
                    assert_eq!(r.status, 200, "{path}: {}", r.text());
                    assert_eq!(r.text(), format!("sdk=6 route=/echo path=/{n}/{i}\n"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    eprintln!(
        "sdk-apps: spin-sdk 6 (WASIp3): 200 requests from 8 clients in {} ms",
        t.elapsed().as_millis()
    );
}

/// Serves `app` twice on one compile cache (cold, then warm), checks `routes` (path, exact
/// body) and runs `extra` each time, prints the report line and returns the cache's one
/// entry.
fn serve_app(
    app: &str,
    label: &str,
    routes: &[(&str, &str)],
    extra: &dyn Fn(&Server, &str),
) -> Vec<String> {
    let dir = prepare_app(app);
    let cache = tempfile::tempdir().unwrap();
    let mut times = Vec::new();
    let mut rss = 0;
    for round in ["cold", "warm"] {
        let t = Instant::now();
        let server = Server::start_with_cache(dir.path(), &[], cache.path());
        times.push(t.elapsed());
        for (path, want) in routes {
            let r = server.get(path);
            assert_eq!(r.status, 200, "{app} {round} {path}: {}", r.text());
            assert_eq!(r.text(), *want, "{app} {round} {path}");
        }
        extra(&server, round);
        if round == "cold" {
            // A large component served first on baseline code (tiered compilation): its
            // Cranelift code reaches the cache from the background, for the warm round.
            let deadline = Instant::now() + std::time::Duration::from_secs(300);
            while cache_entries(cache.path()).is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "{app}: no compile cache entry 300 s after the cold start"
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        rss = rss_kib(server.child.id());
    }
    let entries = cache_entries(cache.path());
    assert_eq!(entries.len(), 1, "one cache entry: {entries:?}");
    eprintln!(
        "sdk-apps: {label} | {}/{} routes | cold {} ms | warm {} ms | RSS {} MiB",
        routes.len(),
        routes.len(),
        times[0].as_millis(),
        times[1].as_millis(),
        rss / 1024
    );
    entries
}

#[test]
fn javascript_componentize_js() {
    serve_app(
        "js-hello",
        "JavaScript | componentize-js 0.23.0 | wasip2",
        &[("/", "hello from js\n"), ("/any/path", "hello from js\n")],
        &|_, _| {},
    );
}

#[test]
fn javascript_spin_js_sdk_template() {
    serve_app(
        "js-sdk-hello",
        "JavaScript | @spinframework/build-tools 1.0.7 (http-js template v3.6) | wasip2",
        &[("/", "Hello, Spin!"), ("/echo/a/b", "/echo/a/b")],
        &|server, _| assert_eq!(server.get("/nothing").status, 404),
    );
}

#[test]
fn python_spin_sdk_3() {
    serve_app(
        "py-spin-hello",
        "Python | spin-sdk 3.4.1 (componentize-py 0.17.2) | wasip2",
        &[
            ("/", "Hello from Python!"),
            ("/any/path", "Hello from Python!"),
        ],
        &|_, _| {},
    );
}

/// Spin 4's Python SDK (spin-sdk 4.0.0, world `spin:up/http-trigger@4.0.0`): componentize-py
/// keeps every import of the world, so the component imports all of Spin 4's interfaces
/// (key-value, sqlite, redis, mqtt, postgres, variables: the `async func` forms) besides the
/// WASIp3 snapshot; it links and serves, a POST body echoed through the WASIp3 handler.
#[test]
fn python_spin_sdk_4() {
    let wasm = std::fs::read(guest_wasm("py4_spin_hello.wasm")).unwrap();
    let text = String::from_utf8_lossy(&wasm);
    for iface in [
        "spin:key-value/key-value@3.0.0",
        "spin:mqtt/mqtt@3.0.0",
        "spin:postgres/postgres@4.2.0",
        "spin:redis/redis@3.0.0",
        "spin:sqlite/sqlite@3.1.0",
        "spin:variables/variables@3.0.0",
    ] {
        assert!(text.contains(iface), "py4_spin_hello.wasm names {iface}");
    }
    serve_app(
        "py4-spin-hello",
        "Python | spin-sdk 4.0.0 (componentize-py 0.23.0) | WASIp3",
        &[
            ("/", "Hello from Python!"),
            ("/any/path", "Hello from Python!"),
        ],
        &|server, round| {
            let r = request(server.addr, "POST", "/echo", b"py4 echo body");
            assert_eq!(r.status, 200, "{round} /echo: {}", r.text());
            assert_eq!(r.text(), "py4 echo body", "{round} /echo");
        },
    );
}

#[test]
fn dotenv_supplies_spin_variables_and_the_environment_wins() {
    let dir = prepare_app("sdk5-http-p2");
    std::fs::write(
        dir.path().join(".env"),
        "# as spin up reads it\nSPIN_VARIABLE_GREETING=\"from dotenv\"\nSPIN_HTTP_LISTEN_ADDR=192.0.2.1:1\n",
    )
    .unwrap();
    let server = Server::start(dir.path(), &[]);
    // Only SPIN_VARIABLE_* comes from .env: the listen address stayed on loopback.
    assert!(server.addr.ip().is_loopback());
    assert_eq!(
        server.get("/hello").text(),
        "sdk=5 route=/hello greeting=from dotenv\n"
    );
    drop(server);
    let server = Server::start(dir.path(), &[("SPIN_VARIABLE_GREETING", "from env")]);
    assert_eq!(
        server.get("/hello").text(),
        "sdk=5 route=/hello greeting=from env\n"
    );
    drop(server);
    std::fs::write(dir.path().join(".env"), "NOT VALID = = \"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spin-serve"))
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".env"), "{err}");
}
