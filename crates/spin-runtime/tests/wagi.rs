//! The WAGI executor through spin-serve, with `tests/apps/wasi-wagi-p1` (a WASI preview 1
//! command, as Spin's `examples/wagi-http-rust` builds one): argv from the query, the CGI
//! environment, the body on stdin, and the response from stdout's CGI headers.

mod common;

use common::*;

fn lines(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn wagi_requests_run_the_command_as_cgi() {
    let app = prepare_app("wasi-wagi-p1");
    let server = Server::start(app.path(), &[]);

    let r = request_with(
        server.addr,
        "POST",
        "/wagi/echo?name=spin&flag&x=a%20b",
        &[("x-test", "yes"), ("content-type", "text/plain")],
        b"the body",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let got = lines(&r.text());
    assert_eq!(got["argv"], "/wagi/echo|name|spin|flag|x|a b");
    assert_eq!(got["REQUEST_METHOD"], "POST");
    assert_eq!(got["QUERY_STRING"], "name=spin&flag&x=a%20b");
    assert_eq!(got["SCRIPT_NAME"], "/wagi");
    assert_eq!(got["PATH_INFO"], "/echo");
    assert_eq!(got["X_MATCHED_ROUTE"], "/wagi/...");
    assert_eq!(got["CONTENT_LENGTH"], "8");
    assert_eq!(got["HTTP_X_TEST"], "yes");
    assert_eq!(got["SERVER_SOFTWARE"], "WAGI/1");
    assert_eq!(got["GREETING"], "hello from the manifest");
    assert_eq!(got["body"], "the body");

    // The trigger's own argv template.
    let got = lines(&server.get("/custom/echo?a=1").text());
    assert_eq!(got["argv"], "prog|--script=/custom/echo|a|1");
    assert_eq!(got["GREETING"], "", "another component's environment");

    // Status, extra headers and redirects from the CGI headers.
    let r = server.get("/wagi/created");
    assert_eq!(r.status, 201);
    assert_eq!(r.header("x-wagi"), Some("yes"));
    assert_eq!(r.text(), "created\n");
    let r = server.get("/wagi/moved");
    assert_eq!((r.status, r.header("location")), (302, Some("/elsewhere")));

    // A program that writes no CGI headers, or fails, answers 500 naming the component.
    let r = server.get("/wagi/noheaders");
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("`cgi`") && r.text().contains("no blank line after the CGI headers"),
        "{}",
        r.text()
    );
    let r = server.get("/wagi/fail");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("`cgi` failed"), "{}", r.text());
    // (A wasip1 program's `exit(3)` reaches the host as WASI 0.2's exit with an error.)
    let log = log_with(&server, "WAGI component failed");
    assert!(
        log.contains("WAGI component failed: it exited with code"),
        "{log}"
    );
    // A new instance per request: the server keeps answering.
    assert_eq!(server.get("/wagi/created").status, 201);
}

#[test]
fn wagi_settings_spin_does_not_run_are_refused_at_load() {
    let app = prepare_app("wasi-wagi-p1");
    let manifest = std::fs::read_to_string(app.path().join("spin.toml")).unwrap();
    std::fs::write(
        app.path().join("spin.toml"),
        manifest.replace(
            "executor = { type = \"wagi\" }",
            "executor = { type = \"wagi\", entrypoint = \"main2\" }",
        ),
    )
    .unwrap();
    let err = start_failure(app.path(), &[]);
    assert!(
        err.contains("wagi `entrypoint` = `main2`") && err.contains("_start"),
        "{err}"
    );

    // A WAGI trigger on a component that is no WASI command (an HTTP handler).
    let app = app_from_manifest(
        "spin_manifest_version = 2\n[application]\nname = \"w\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"c\"\nexecutor = { type = \"wagi\" }\n\
         [component.c]\nsource = \"{WASM_DIR}/spin_hello.wasm\"\n",
    );
    let err = start_failure(app.path(), &[]);
    assert!(
        err.contains("component `c` is run by a WAGI trigger") && err.contains("wasi:cli/run"),
        "{err}"
    );
}
