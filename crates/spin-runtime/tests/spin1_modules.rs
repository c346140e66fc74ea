//! Spin 1.x-style modules served by `spin-serve`: wasip1 core modules that export Spin's
//! first HTTP interface (`handle-http-request`, wit-bindgen 0.2's ABI) and import
//! `spin-config`, `wasi-outbound-http` and `key-value` as core modules, adapted to the
//! component model at load (`spin_runtime::spin1`).
//!
//! The apps: `tests/apps/spin1-go` has the exact imports and exports of an app built with the
//! Spin Go SDK 2.2.1 (TinyGo `-buildmode=c-shared`: `_initialize`, the SDK's version
//! markers); TinyGo is not reachable here, so it is written in Rust against the Go SDK's WIT
//! with hand-written bindings. `tests/apps/spin1-http` is the same ABI shaped as a WASI
//! command (`_start`, as TinyGo `-target=wasi` built Spin 1.x-era apps). Rust's spin-sdk
//! 1.x was never published to crates.io (its first release there is 2.1.0), so no app is
//! built with it. A 1.x module that cannot be adapted fails naming itself and the reason,
//! and the app's other components are served. The command-shaped module also exports
//! `handle-redis-message`, run by the Redis trigger against a real redis-server, and both
//! call Spin 1.x's `outbound-redis` there.

mod common;
mod servers;

use common::*;

/// Checks every route of a spin1-* app; `abi` is the value the app puts in `x-spin1-abi`.
fn check_app(app: &str, abi: &str, component: &str) {
    let dir = prepare_app(app);
    let cache = tempfile::tempdir().unwrap();
    for round in ["cold", "warm"] {
        let server = Server::start_with_cache(
            dir.path(),
            &[("SPIN_VARIABLE_MESSAGE", "set by the environment")],
            cache.path(),
        );
        let hello = format!(
            "abi={abi} route=/hello message=set by the environment \
             undeclared=provider(no variable `not_declared` for component `{component}`: \
             declare it in [component.{component}.variables])\n"
        );
        let r = server.get("/hello");
        assert_eq!(r.status, 200, "{app} {round}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.header("x-spin1-abi"), Some(abi));
        assert_eq!(r.text(), hello, "{app} {round}");

        // The whole request: method, path and query, a request header, Spin's headers, body.
        let r = request_with(
            server.addr,
            "POST",
            "/echo/a/b?q=1",
            &[("x-test", "a header")],
            b"the request body",
        );
        assert_eq!(r.status, 201, "{app} {round}: {}", r.text());
        assert_eq!(r.header("x-echo-method"), Some("POST"));
        assert_eq!(
            r.text(),
            format!(
                "abi={abi} method=POST uri=/echo/a/b?q=1 x-test=a header path-info=/echo/a/b \
                 body=the request body\n"
            )
        );
        // A method Spin 1.x's interface cannot name.
        assert_eq!(request(server.addr, "TRACE", "/echo", b"").status, 405);

        // Outbound HTTP (a self request through the app's listener) and a denied one.
        let r = server.get("/outbound");
        assert_eq!(r.status, 200, "{app} {round}: {}", r.text());
        assert_eq!(
            r.text(),
            format!("abi={abi} route=/outbound upstream=200 upstream_abi={abi} {hello}")
        );
        let r = server.get("/deny");
        assert_eq!(r.status, 502, "{app} {round}: {}", r.text());
        assert_eq!(
            r.text(),
            format!("abi={abi} route=/deny error=destination-not-allowed\n")
        );

        // Key-value: set and get in `default`, a missing key, a store it may not open.
        let r = request(
            server.addr,
            "POST",
            "/kv",
            format!("{round}-value").as_bytes(),
        );
        assert_eq!(r.status, 200, "{app} {round}: {}", r.text());
        assert_eq!(
            r.text(),
            format!(
                "abi={abi} route=/kv value={round}-value missing=no-such-key \
                 other_store=access-denied\n"
            )
        );
        let log = server.stderr.lock().unwrap().clone();
        assert!(
            log.contains("Spin 1.x module: adapting its imports and exports") == (round == "cold"),
            "{round}: {log}"
        );
    }
}

#[test]
fn go_sdk_2_module_serves_http() {
    check_app("spin1-go", "go-sdk-2.2.1", "go");
}

#[test]
fn command_shaped_spin1_module_serves_http() {
    check_app("spin1-http", "command", "cmd");
}

/// A Spin 1.x module importing an interface Spin 1.x never had, beside a working one: the
/// app starts, the log names the component and the import, its route answers 500 and the
/// other component answers.
#[test]
fn unadaptable_module_fails_alone() {
    let bad = wat::parse_str(
        r#"(module
            (import "outbound-nats" "publish" (func (param i32 i32)))
            (memory (export "memory") 1)
            (func (export "handle-http-request")
                (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
                i32.const 0))"#,
    )
    .unwrap();
    let dir = app_from_manifest(&format!(
        r#"spin_manifest_version = 2
[application]
name = "mixed"
[[trigger.http]]
route = "/good/..."
component = "go"
[[trigger.http]]
route = "/bad/..."
component = "bad"
[component.go]
source = "{}"
[component.bad]
source = "bad.wasm"
"#,
        guest_apps_dir_p1().join("spin1_go.wasm").display()
    ));
    std::fs::write(dir.path().join("bad.wasm"), bad).unwrap();
    let server = Server::start(dir.path(), &[]);
    let r = server.get("/good/x");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text()
            .starts_with("abi=go-sdk-2.2.1 method=GET uri=/good/x "),
        "{}",
        r.text()
    );
    assert_eq!(server.get("/bad/x").status, 500);
    let log = log_with(&server, "cannot be adapted");
    assert!(
        log.contains(
            "component `bad` is a Spin 1.x module (it exports `handle-http-request` or \
             `handle-redis-message`) that cannot be adapted to the component model"
        ) && log.contains(
            "it imports `publish` from `outbound-nats`, which is not a Spin 1.x interface"
        ),
        "{log}"
    );
}

/// Waits (bounded, 30 s) until `f` gives a value.
fn poll<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A Spin 1.x module's `handle-redis-message` under the Redis trigger: each message
/// published reaches it (it keeps the last one in key-value, read back over HTTP), a
/// message it answers `error` for is logged and the next one is handled.
#[test]
fn spin1_redis_trigger_handles_messages() {
    let redis = servers::redis();
    let dir = app_from_manifest(&format!(
        r#"spin_manifest_version = 2
[application]
name = "spin1-redis"
[variables]
redis_address = {{ default = "redis://{0}" }}
[application.trigger.redis]
address = "redis://{0}"
[[trigger.redis]]
channel = "spin1-messages"
component = "cmd"
[[trigger.http]]
route = "/..."
component = "cmd"
[component.cmd]
source = "{1}"
key_value_stores = ["default"]
allowed_outbound_hosts = ["redis://{0}"]
[component.cmd.variables]
redis_address = "{{{{ redis_address }}}}"
"#,
        redis.addr(),
        guest_apps_dir_p1().join("spin1-http.wasm").display()
    ));
    let server = Server::start(dir.path(), &[]);
    poll(|| {
        let n = redis
            .redis_cli(&["PUBSUB", "NUMSUB", "spin1-messages"])
            .ok()?;
        (n.lines().nth(1) == Some("1")).then_some(())
    })
    .expect("the trigger subscribed to spin1-messages within 30 s");
    let last = |want: &str| {
        poll(|| {
            let r = server.get("/last-redis-message");
            (r.text() == format!("abi=command last={want}\n")).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "last message {want:?} not seen within 30 s: {}",
                server.get("/last-redis-message").text()
            )
        })
    };
    redis
        .redis_cli(&["PUBLISH", "spin1-messages", "first message"])
        .unwrap();
    last("first message");
    redis
        .redis_cli(&["PUBLISH", "spin1-messages", "fail"])
        .unwrap();
    let log = log_with(&server, "redis handler returned an error");
    assert!(log.contains("redis handler returned an error"), "{log}");
    redis
        .redis_cli(&["PUBLISH", "spin1-messages", "after the failure"])
        .unwrap();
    last("after the failure");

    // Outbound Redis (`outbound-redis`): set, get, incr, del and publish on the server,
    // and a server the manifest does not allow.
    let r = server.get("/redis");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        "abi=command route=/redis get=spin1-value incr=1 del=1 denied=error\n"
    );
    assert_eq!(redis.redis_cli(&["GET", "spin1-counter"]).unwrap(), "1");
    assert_eq!(redis.redis_cli(&["EXISTS", "spin1-key"]).unwrap(), "0");
}
