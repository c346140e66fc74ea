//! Service chaining and self requests through `spin-serve`, with a multi-component app of
//! ours (tests/apps/chain-app): private routes reached by chaining only, the allow-list
//! governing both, and selective deployment.

mod common;

use common::*;

/// `GET /<prefix>/?url=<url>` on the outbound component: (status, body).
fn via(server: &Server, prefix: &str, url: &str) -> (u16, String) {
    let enc: String = url
        .bytes()
        .map(|b| match b {
            b'?' | b'&' | b'=' | b'%' => format!("%{b:02X}"),
            _ => (b as char).to_string(),
        })
        .collect();
    let r = server.get(&format!("/{prefix}/?url={enc}"));
    (r.status, r.text())
}

#[test]
fn chaining_reaches_private_components_in_process() {
    let app = prepare_app("chain-app");
    let server = Server::start(app.path(), &[]);

    // Private: not routable from the network.
    assert_eq!(server.get("/back").status, 404);

    // Chained to `back`: the path as a `/...` match, client 0.0.0.0:0, no chaining Host.
    let (status, body) = via(&server, "front", "http://back.spin.internal/some/path?q=1");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("upstream 200\n"), "{body}");
    for line in [
        "component=back",
        "path=/some/path",
        "query=q=1",
        "spin-matched-route=/...",
        "spin-component-route=",
        "spin-path-info=/some/path",
        "spin-client-addr=0.0.0.0:0",
        "spin-full-url=http://localhost/some/path?q=1",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }

    // Self request: a relative URL goes through the app's own router.
    let (status, body) = via(&server, "front", "/hello");
    assert_eq!(status, 200, "{body}");
    assert!(body.lines().any(|l| l == "component=hello"), "{body}");
    let (_, body) = via(&server, "front", "/back");
    assert!(
        body.starts_with("upstream 404"),
        "private via self request: {body}"
    );

    // The allow-list governs both: `open` may not chain nor call itself.
    for url in ["http://back.spin.internal/", "/hello"] {
        let (status, body) = via(&server, "open", url);
        assert_eq!(status, 502, "{url}: {body}");
        assert!(body.contains("HttpRequestDenied"), "{url}: {body}");
    }
    let log = log_with(&server, "component `open` is not allowed");
    assert!(
        log.contains("spin.internal") || log.contains("self"),
        "{log}"
    );

    // Wildcard chaining to a component the app does not have.
    let (status, body) = via(&server, "wild", "http://nope.spin.internal/");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("DestinationNotFound"), "{body}");
    log_with(&server, "no HTTP component `nope`");
    // ... and to one it has.
    let (_, body) = via(&server, "wild", "http://hello.spin.internal/x");
    assert!(body.lines().any(|l| l == "component=hello"), "{body}");
}

#[test]
fn selective_deployment_keeps_chaining_within_retained_components() {
    let app = prepare_app("chain-app");
    let server = Server::start(app.path(), &[("SPIN_COMPONENTS_TO_RETAIN", "front,back")]);
    assert_eq!(server.get("/hello").status, 404, "hello was not retained");
    let (status, body) = via(&server, "front", "http://back.spin.internal/r");
    assert_eq!(status, 200, "{body}");
    assert!(body.lines().any(|l| l == "component=back"), "{body}");
    drop(server);

    // A retained component that chains to a dropped one is refused at start, as Spin does.
    let e = start_failure(app.path(), &[("SPIN_COMPONENTS_TO_RETAIN", "front")]);
    assert!(
        e.contains("front") && e.contains("back.spin.internal"),
        "{e}"
    );
}
