//! Spin 4 HTTP middleware (`[[trigger.http]] dependencies.middleware`) through `spin-serve`:
//! tests/apps/mw-app puts two middleware components (tests/apps/mw-upper, mw-header, written
//! with wit-bindgen against `wasi:http/middleware`) in front of the spin-sdk 6 component on
//! some routes and not on another, and gives one route a middleware that inherits the
//! component's `environment`.

mod common;

use common::*;

const HELLO: &str = "sdk=6 route=/hello greeting=hello from spin-sdk 6\n";

#[test]
fn middleware_is_composed_in_front_of_the_component_on_its_routes_only() {
    let dir = prepare_app("mw-app");
    let server = Server::start(dir.path(), &[]);

    // upper -> header -> web: the body comes back upper-cased, with header's response header.
    let r = server.get("/hello");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), HELLO.to_uppercase());
    assert_eq!(r.header("x-middleware-seen"), Some("header"));
    // A streamed body goes through the chain as it streams.
    let r = server.get("/stream");
    assert_eq!(r.status, 200, "{}", r.text());
    let want: String = (0..1000).map(|i| format!("LINE {i}\n")).collect();
    assert_eq!(r.text(), want);
    // The same component without middleware on its other route.
    let r = server.get("/echo/a/b");
    assert_eq!(r.text(), "sdk=6 route=/echo path=/a/b\n");
    assert_eq!(r.header("x-middleware-seen"), None);

    // A middleware inheriting `environment` reads the component's environment...
    let probe = [("x-mw-env", "MW_GREETING")];
    let r = request_with(server.addr, "GET", "/hello/inherit", &probe, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-mw-env"), Some("from web"));
    assert_eq!(r.text(), HELLO);
    // ...and one inheriting nothing is cut off: the call traps, naming the fix.
    let r = request_with(server.addr, "GET", "/hello", &probe, b"");
    assert_eq!(r.status, 500, "{}", r.text());
    let log = log_with(&server, "needs the component's `environment` configuration");
    assert!(
        log.contains("needs the component's `environment` configuration"),
        "{log}"
    );
    assert!(log.contains("dependencies.middleware[1]"), "{log}");
    assert!(
        log.contains(r#"inherit_configuration = ["environment"]"#),
        "{log}"
    );
    // The server goes on serving.
    assert_eq!(server.get("/hello").status, 200);
}

#[test]
fn middleware_errors_name_the_part_and_the_fix() {
    let wasm = guest_apps_dir();
    let app = |web: &str, mw: &str| {
        app_from_manifest(&format!(
            "spin_manifest_version = 2\n[application]\nname = \"m\"\n[[trigger.http]]\nroute = \"/...\"\ncomponent = \"web\"\ndependencies.middleware = [{{ path = \"{}/{mw}\" }}]\n[component.web]\nsource = \"{}/{web}\"\n",
            wasm.display(),
            wasm.display()
        ))
    };
    // Not middleware: the spin-sdk 6 component exports the handler but imports none.
    let dir = app("sdk6_http.wasm", "sdk6_http.wasm");
    let err = start_failure(dir.path(), &[]);
    assert!(err.contains("is not HTTP middleware"), "{err}");
    assert!(err.contains("dependencies.middleware[0]"), "{err}");
    // A WASIp2 component cannot have middleware (it chains on the WASIp3 handler).
    let dir = app("sdk5_http.wasm", "mw_header.wasm");
    let err = start_failure(dir.path(), &[]);
    assert!(
        err.contains("does not export wasi:http/handler@0.3.0"),
        "{err}"
    );
}
