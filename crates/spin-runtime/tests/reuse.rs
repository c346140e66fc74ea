//! Instance reuse for WASIp3 components, as Spin 4 and `wasmtime serve` reuse them: the
//! sdk6-http guest (spin-sdk 6.0.0, `wasi:http/handler@0.3`) served by `spin-serve`, its
//! `/count` route answering how many requests the instance it runs in has counted (global
//! state, kept while an instance is reused). Also: the reuse knobs, the idle timeout, and
//! what a trap and a guest past the request deadline do to a reused instance.

mod common;

use std::time::Duration;

use common::*;

const WASM: &str = "sdk6_http.wasm";
/// A WASIp2 component (spin-sdk 5); its instances are counted through the metrics endpoint.
const P2_WASM: &str = "spin_hello.wasm";

/// An app routing `/count`, `/spin`, `/trap` and `/hello` to the sdk6-http guest.
fn app() -> tempfile::TempDir {
    guest_wasm(WASM);
    let routes: String = ["/count", "/spin", "/trap", "/hello"]
        .iter()
        .map(|r| format!("[[trigger.http]]\nroute = \"{r}\"\ncomponent = \"c\"\n"))
        .collect();
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"reuse\"\n{routes}\
         [variables]\ngreeting = {{ default = \"hi\" }}\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{WASM}\"\n\
         [component.c.variables]\ngreeting = \"{{{{ greeting }}}}\"\n"
    ))
}

/// `GET /count` `n` times, one after the other: the counts the guest answered.
fn counts(server: &Server, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let r = server.get("/count");
            assert_eq!(r.status, 200, "{}", r.text());
            r.text().trim().parse().expect("a count")
        })
        .collect()
}

#[test]
fn wasip3_instances_serve_many_requests_by_default() {
    let app = app();
    let server = Server::start(app.path(), &[]);
    let c = counts(&server, 20);
    // One instance (or, should a request arrive while the instance was still finishing the
    // last one, a few) serves them all: its counter goes on.
    assert!(
        c.iter().max().copied().unwrap_or(0) >= 10,
        "the instance was not reused: {c:?}"
    );
}

#[test]
fn reuse_count_bounds_the_requests_per_instance() {
    let app = app();
    let server = Server::start(app.path(), &[("SPIN_SHIM_MAX_INSTANCE_REUSE_COUNT", "1")]);
    assert_eq!(
        counts(&server, 5),
        vec![1; 5],
        "reuse count 1: a fresh instance each"
    );
    drop(server);
    let server = Server::start(app.path(), &[("SPIN_SHIM_MAX_INSTANCE_REUSE_COUNT", "3")]);
    let c = counts(&server, 12);
    assert!(
        c.iter().all(|n| (1..=3).contains(n)),
        "over 3 per instance: {c:?}"
    );
    assert!(c.contains(&3), "never reused up to 3: {c:?}");
}

#[test]
fn an_idle_instance_is_dropped_after_the_idle_timeout() {
    let app = app();
    let server = Server::start(app.path(), &[("SPIN_SHIM_IDLE_INSTANCE_TIMEOUT", "100ms")]);
    assert_eq!(counts(&server, 1), vec![1]);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(counts(&server, 1), vec![1], "the idle instance was kept");
}

#[test]
fn a_trap_drops_the_instance_and_the_next_request_gets_a_new_one() {
    let app = app();
    let server = Server::start(app.path(), &[]);
    let before = counts(&server, 3);
    assert_eq!(before.last(), Some(&3), "{before:?}");
    let r = server.get("/trap");
    assert_eq!(r.status, 500, "{}", r.text());
    let log = log_with(&server, "/trap was asked to trap");
    assert!(
        log.contains("a reused instance of the component was stopped"),
        "trap not logged:\n{log}"
    );
    assert_eq!(
        counts(&server, 1),
        vec![1],
        "the trapped instance served again"
    );
}

#[test]
fn a_guest_past_the_deadline_gets_504_and_its_instance_is_replaced() {
    let app = app();
    let server = Server::start(app.path(), &[("SPIN_SHIM_REQUEST_TIMEOUT", "1s")]);
    assert_eq!(counts(&server, 2), vec![1, 2]);
    let t = std::time::Instant::now();
    let r = server.get("/spin");
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let log = log_with(&server, "request deadline of 1s");
    assert!(log.contains("SPIN_SHIM_REQUEST_TIMEOUT"), "{log}");
    // The looping instance is gone; the app still answers, from a new one.
    assert_eq!(counts(&server, 1), vec![1]);
    assert_eq!(server.get("/hello").status, 200);
}

#[test]
fn wasip2_components_keep_a_fresh_instance_per_request() {
    guest_wasm(P2_WASM);
    let app = app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"p2\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\n\
         [component.c]\nsource = \"{{WASM_DIR}}/{P2_WASM}\"\n"
    ));
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let server = Server::start(
        app.path(),
        &[("SPIN_SHIM_METRICS_ADDR", &metrics.to_string())],
    );
    for _ in 0..5 {
        assert_eq!(server.get("/hello").status, 200);
    }
    let text = request(metrics, "GET", "/metrics", b"").text();
    let line = text
        .lines()
        .find(|l| l.starts_with("spin_component_instantiations_total"))
        .unwrap_or_else(|| panic!("no instantiation counter:\n{text}"));
    assert!(line.ends_with(" 5"), "{line}");
}

#[test]
fn bad_reuse_knobs_name_the_variable() {
    let app = app();
    for (var, value) in [
        ("SPIN_SHIM_MAX_INSTANCE_REUSE_COUNT", "0"),
        ("SPIN_SHIM_MAX_INSTANCE_CONCURRENT_REUSE_COUNT", "lots"),
        ("SPIN_SHIM_IDLE_INSTANCE_TIMEOUT", "soon"),
    ] {
        let err = start_failure(app.path(), &[(var, value)]);
        assert!(
            err.contains(var) && err.contains(value),
            "{var}={value}:\n{err}"
        );
    }
}
