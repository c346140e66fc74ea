//! SpinKube's contract on the app model: selective deployment
//! (`SPIN_COMPONENTS_TO_RETAIN`, Spin's rules) and `static_response` triggers, from
//! `spin.toml` and from a locked app.

use std::path::Path;

use spin_runtime::app::{App, Route, StaticResponse};

const CHAINED: &str = r#"
spin_manifest_version = 2
[application]
name = "chained"

[[trigger.http]]
route = "/front/..."
component = "front"

[[trigger.http]]
route = { private = true }
component = "back"

[[trigger.http]]
route = "/other"
component = "other"

[[trigger.http]]
route = "/robots.txt"
static_response = { status_code = 201, headers = { content-type = "text/plain", x-a = "1" }, body = "no bots" }

[component.front]
source = "front.wasm"
allowed_outbound_hosts = ["http://back.spin.internal", "https://{{ host }}"]

[component.back]
source = "back.wasm"

[component.other]
source = "other.wasm"
allowed_outbound_hosts = ["http://*.spin.internal"]
"#;

/// A directory holding the (never run) component files the manifest names.
fn base() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        for f in ["front.wasm", "back.wasm", "other.wasm"] {
            std::fs::write(d.path().join(f), b"\0asm").unwrap();
        }
        d
    })
    .path()
}

fn chained() -> App {
    App::from_manifest_str(CHAINED, base(), "spin.toml").unwrap()
}

fn ids(app: &App) -> Vec<&str> {
    app.components.keys().map(String::as_str).collect()
}

#[test]
fn retain_keeps_named_components_and_their_triggers() {
    let mut app = chained();
    app.retain_components(&["front".into(), "back".into()])
        .unwrap();
    assert_eq!(ids(&app), ["back", "front"]);
    let comps: Vec<&str> = app
        .http_triggers
        .iter()
        .map(|t| t.component.as_str())
        .collect();
    // The static-response trigger names no component: Spin drops it too.
    assert_eq!(comps, ["front", "back"]);
    let mut app = chained();
    app.retain_components(&["back".into()]).unwrap();
    assert_eq!(ids(&app), ["back"]);
    assert_eq!(app.http_triggers[0].route, Route::Private);
}

#[test]
fn retain_refuses_unknown_and_broken_chains() {
    let e = chained().retain_components(&["nope".into()]).unwrap_err();
    assert!(e.to_string().contains("\"nope\" not found"), "{e}");
    let e = chained().retain_components(&["front".into()]).unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("'front'") && e.contains("http://back.spin.internal"),
        "{e}"
    );
    let e = chained().retain_components(&["other".into()]).unwrap_err();
    assert!(e.to_string().contains("wildcard"), "{e}");
}

#[test]
fn static_response_from_manifest() {
    let app = chained();
    let t = app
        .http_triggers
        .iter()
        .find(|t| t.route == Route::Path("/robots.txt".into()))
        .unwrap();
    let sr = t.static_response.as_ref().unwrap();
    assert_eq!(sr.status(), 201);
    assert_eq!(sr.body.as_deref(), Some("no bots"));
    assert_eq!(sr.headers.get("x-a").map(String::as_str), Some("1"));
    let plain: StaticResponse = serde_json::from_str("{}").unwrap();
    assert_eq!(plain.status(), 200);
}

#[test]
fn static_response_errors_name_the_key() {
    let both = CHAINED.replace(
        "static_response = {",
        "component = \"back\"\nstatic_response = {",
    );
    let e = App::from_manifest_str(&both, base(), "spin.toml").unwrap_err();
    assert!(format!("{e:#}").contains("both"), "{e:#}");
    let bad = CHAINED.replace("status_code = 201", "status_code = 1000");
    let e = App::from_manifest_str(&bad, base(), "spin.toml").unwrap_err();
    assert!(format!("{e:#}").contains("1000"), "{e:#}");
}

#[test]
fn static_response_from_locked_app() {
    let lock = serde_json::json!({
        "spin_lock_version": 0,
        "metadata": {"name": "s", "trigger": {"type": "http"}},
        "triggers": [{
            "id": "trigger--0",
            "trigger_type": "http",
            "trigger_config": {
                "route": "/hi",
                "static_response": {"status_code": 418, "headers": {"x-t": "y"}, "body": "teapot"}
            }
        }],
        "components": []
    });
    let resolve =
        |_: &spin_runtime::app::ContentRef| -> anyhow::Result<spin_runtime::app::Content> {
            anyhow::bail!("no content")
        };
    let app = App::from_locked_json(lock.to_string().as_bytes(), &resolve).unwrap();
    let sr = app.http_triggers[0].static_response.as_ref().unwrap();
    assert_eq!((sr.status(), sr.body.as_deref()), (418, Some("teapot")));
}

/// A static-response route served over HTTP, next to the built-in health endpoint.
#[test]
fn static_response_is_served() {
    let app_dir = tempfile::tempdir().unwrap();
    let app = App::from_manifest_str(
        r#"
spin_manifest_version = 2
[application]
name = "static"
[[trigger.http]]
route = "/robots.txt"
static_response = { status_code = 201, headers = { x-a = "1" }, body = "no bots" }
"#,
        app_dir.path(),
        "spin.toml",
    )
    .unwrap();
    let env = vec![(
        "SPIN_HTTP_LISTEN_ADDR".to_string(),
        "127.0.0.1:0".to_string(),
    )];
    let dir = tempfile::tempdir().unwrap();
    let config = spin_runtime::RuntimeConfig::from_env(dir.path(), &env).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            spin_runtime::Runner::new(app)
                .config(config)
                .serve(
                    |a| {
                        let _ = addr_tx.send(a.expect("the app serves HTTP"));
                    },
                    async {
                        let _ = stop_rx.await;
                    },
                )
                .await
        });
        let addr = addr_rx.await.unwrap();
        let get = |path: &'static str| {
            tokio::task::spawn_blocking(move || {
                use std::io::{Read, Write};
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                write!(
                    s,
                    "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                out
            })
        };
        let r = get("/robots.txt").await.unwrap();
        assert!(r.starts_with("HTTP/1.1 201"), "{r}");
        assert!(r.to_ascii_lowercase().contains("x-a: 1"), "{r}");
        assert!(r.ends_with("no bots"), "{r}");
        let r = get("/other").await.unwrap();
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    });
}
