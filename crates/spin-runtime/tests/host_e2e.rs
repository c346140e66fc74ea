//! Host features end to end: the spin-kv, spin-variables and spin-outbound guest apps
//! (spin-sdk 5.2) served by `spin-serve` on 127.0.0.1, with an outbound target served by
//! a small HTTP server in this test on loopback.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::*;

/// Copies the app and its `runtime-config.toml` (if any) into a temp dir.
fn prepare_with_runtime_config(app: &str) -> tempfile::TempDir {
    let dir = prepare_app(app);
    let rc = workspace_root()
        .join("tests/apps")
        .join(app)
        .join("runtime-config.toml");
    if rc.is_file() {
        std::fs::copy(&rc, dir.path().join("runtime-config.toml")).unwrap();
    }
    dir
}

/// An app whose one component `id` (guest `wasm`, plus the `extra` component keys) serves
/// every route.
fn single_component_app(id: &str, wasm: &str, extra: &str) -> tempfile::TempDir {
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"{id}-app\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"{id}\"\n\
         [component.{id}]\nsource = \"{{WASM_DIR}}/{wasm}\"\n{extra}\n"
    ))
}

fn send(server: &Server, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    request(server.addr, method, path, body)
}

#[test]
fn key_value_set_get_delete_exists_and_persistence() {
    let app = prepare_with_runtime_config("spin-kv");
    {
        let server = Server::start(app.path(), &[]);
        let r = send(&server, "PUT", "/kv/greeting", b"hello kv");
        assert_eq!((r.status, r.text().as_str()), (200, "stored"));
        let r = server.get("/kv/greeting");
        assert_eq!((r.status, r.text().as_str()), (200, "hello kv"));
        assert_eq!(server.get("/kv/greeting?op=exists").text(), "true");
        assert_eq!(server.get("/kv/absent?op=exists").text(), "false");
        assert_eq!(server.get("/kv/absent").status, 404);

        send(&server, "POST", "/kv/temp", b"x");
        assert_eq!(server.get("/kv/?op=keys").text(), "greeting\ntemp");
        let r = send(&server, "DELETE", "/kv/temp", b"");
        assert_eq!((r.status, r.text().as_str()), (200, "deleted"));
        assert_eq!(server.get("/kv/temp").status, 404);
        assert_eq!(server.get("/kv/temp?op=exists").text(), "false");

        // The same store through wasi:keyvalue (store + atomics).
        let r = server.get("/kv/greeting?op=wasi-get");
        assert_eq!((r.status, r.text().as_str()), (200, "hello kv"));
        assert_eq!(send(&server, "POST", "/kv/n?op=incr&by=5", b"").text(), "5");
        assert_eq!(
            send(&server, "POST", "/kv/n?op=incr&by=-2", b"").text(),
            "3"
        );
    }
    // Store `default` is SQLite at <app>/.spin/sqlite_key_value.db and survives a restart.
    assert!(app.path().join(".spin/sqlite_key_value.db").is_file());
    let server = Server::start(app.path(), &[]);
    assert_eq!(server.get("/kv/greeting").text(), "hello kv");
}

#[test]
fn key_value_runtime_config_store_and_access_denied() {
    let app = prepare_with_runtime_config("spin-kv");
    let server = Server::start(app.path(), &[]);

    // `other` comes from runtime-config.toml, path relative to that file.
    let r = send(&server, "PUT", "/kv/k?store=other", b"in other");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "stored"),
        "{}",
        r.text()
    );
    assert_eq!(server.get("/kv/k?store=other").text(), "in other");
    assert_eq!(server.get("/kv/k").status, 404, "stores must be separate");
    assert!(app.path().join(".spin/other.db").is_file());

    // A label the component does not list: Spin's access-denied, through both interfaces.
    let r = server.get("/kv/k?store=private");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("AccessDenied"), "{}", r.text());
    let r = server.get("/kv/k?store=private&op=wasi-get");
    assert!(r.text().contains("AccessDenied"), "{}", r.text());
    // A component with no key_value_stores may not open `default`.
    let r = server.get("/nokv/k");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("AccessDenied"), "{}", r.text());
}

#[test]
fn key_value_state_dir_override_and_undefined_store() {
    let app = prepare_with_runtime_config("spin-kv");
    let state = tempfile::tempdir().unwrap();
    {
        let server = Server::start(
            app.path(),
            &[("SPIN_STATE_DIR", state.path().to_str().unwrap())],
        );
        assert_eq!(send(&server, "PUT", "/kv/a", b"1").status, 200);
    }
    assert!(state.path().join("sqlite_key_value.db").is_file());
    assert!(!app.path().join(".spin/sqlite_key_value.db").exists());

    let bad = single_component_app(
        "kv",
        "spin_kv.wasm",
        r#"key_value_stores = ["default", "sessions"]"#,
    );
    let stderr = start_failure(bad.path(), &[]);
    assert!(
        stderr.contains("`sessions`") && stderr.contains("[key_value_store.sessions]"),
        "{stderr}"
    );
}

#[test]
fn variables_precedence_templates_and_errors() {
    let app = prepare_app("spin-variables");
    let server = Server::start(
        app.path(),
        &[
            ("API_TOKEN", "tok-123"),
            ("SPIN_VARIABLE_API_TOKEN", "not-this-one"),
            ("SPIN_VARIABLE_GREETING", "hi-spin"),
        ],
    );
    assert_eq!(server.get("/greeting").text(), "hi-spin");
    assert_eq!(server.get("/token").text(), "tok-123");
    assert_eq!(server.get("/combined").text(), "hi-spin, token=tok-123!");
    assert_eq!(server.get("/fixed").text(), "literal value");
    assert_eq!(server.get("/unused_default").text(), "fallback");

    // Names the component does not declare, and names Spin rejects.
    let r = server.get("/nope");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("Undefined"), "{}", r.text());
    let r = server.get("/Bad-Name");
    assert!(r.text().contains("InvalidName"), "{}", r.text());

    // wasi:config/store sees the same component variables.
    assert_eq!(server.get("/greeting?via=wasi").text(), "hi-spin");
    assert_eq!(server.get("/nope?via=wasi").status, 404);
    let r = server.get("/Bad-Name?via=wasi");
    assert!(
        r.text().contains("Upstream") && r.text().contains("Bad-Name"),
        "{}",
        r.text()
    );
    let all = server.get("/?via=wasi-all").text();
    assert!(
        all.contains("fixed=literal value") && all.contains("greeting=hi-spin"),
        "{all}"
    );

    // The secret's value never reaches the log, although its resolution is logged.
    let log = log_with(&server, "api_token");
    assert!(
        log.contains("api_token"),
        "variable resolution not logged:\n{log}"
    );
    assert!(!log.contains("tok-123"), "secret value logged:\n{log}");
    drop(server);

    // The container's `GREETING` beats `SPIN_VARIABLE_GREETING`.
    let server = Server::start(
        app.path(),
        &[
            ("API_TOKEN", "t"),
            ("SPIN_VARIABLE_GREETING", "hi-spin"),
            ("GREETING", "hi-container"),
        ],
    );
    assert_eq!(server.get("/greeting").text(), "hi-container");
}

#[test]
fn variables_required_missing_fails_at_start() {
    let app = prepare_app("spin-variables");
    let stderr = start_failure(app.path(), &[("SPIN_VARIABLE_GREETING", "x")]);
    assert!(stderr.contains("`api_token`"), "{stderr}");
    assert!(stderr.contains("API_TOKEN"), "{stderr}");
}

/// A loopback HTTP server answering every request with a fixed body; counts requests.
struct Upstream {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        let mut buf = [0u8; 4096];
                        let mut head = Vec::new();
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match conn.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        h.fetch_add(1, Ordering::SeqCst);
                        let body = "upstream says hi";
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Upstream {
            addr,
            hits,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn outbound_allowed_host_reaches_upstream_and_others_are_denied() {
    let upstream = Upstream::start();
    let port = upstream.addr.port().to_string();
    let app = prepare_app("spin-outbound");
    // The allow-list entry is "http://127.0.0.1:{{ upstream_port }}".
    let server = Server::start(app.path(), &[("SPIN_VARIABLE_UPSTREAM_PORT", &port)]);

    let r = server.get(&format!("/?url=http://127.0.0.1:{port}/hello"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "upstream 200\nupstream says hi");
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 1);

    // Same server, but a host name that is not in the list: denied before connecting.
    let r = server.get(&format!("/?url=http://localhost:{port}/hello"));
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().to_lowercase().contains("denied"), "{}", r.text());
    // A port that is not in the list.
    let other = upstream.addr.port().wrapping_add(1).max(1);
    let r = server.get(&format!("/?url=http://127.0.0.1:{other}/"));
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().to_lowercase().contains("denied"), "{}", r.text());
    assert_eq!(
        upstream.hits.load(Ordering::SeqCst),
        1,
        "a denied call got through"
    );

    let log = log_with(&server, &format!("http://127.0.0.1:{other}"));
    assert!(
        log.contains("allowed_outbound_hosts") && log.contains("component `outbound`"),
        "denial not explained in the log:\n{log}"
    );
    assert!(log.contains(&format!("http://localhost:{port}")), "{log}");
}

#[test]
fn outbound_bad_pattern_fails_at_start() {
    let app = single_component_app(
        "fetch",
        "spin_outbound.wasm",
        r#"allowed_outbound_hosts = ["example.com"]"#,
    );
    let stderr = start_failure(app.path(), &[]);
    assert!(
        stderr.contains("component `fetch`")
            && stderr.contains("allowed_outbound_hosts")
            && stderr.contains("example.com"),
        "{stderr}"
    );
}

/// `[[variables_provider]]` of the runtime config, as Spin defines them: `static` values
/// and an `env` provider with its own prefix and dotenv file come before the container
/// env; Vault and Azure Key Vault are refused at start naming the section.
#[test]
fn runtime_config_variables_providers() {
    let app = prepare_app("spin-variables");
    std::fs::write(app.path().join("vars.env"), "MYAPP_GREETING=from-dotenv\n").unwrap();
    std::fs::write(
        app.path().join("runtime-config.toml"),
        "[[variables_provider]]\ntype = \"static\"\nvalues = { api_token = \"static-token\" }\n\n\
         [[variables_provider]]\ntype = \"env\"\nprefix = \"MYAPP\"\ndotenv_path = \"vars.env\"\n",
    )
    .unwrap();
    let server = Server::start(app.path(), &[("API_TOKEN", "env-token")]);
    // static beats the container env; the env provider's dotenv gives the greeting.
    assert_eq!(server.get("/token").text(), "static-token");
    assert_eq!(server.get("/greeting").text(), "from-dotenv");
    drop(server);
    // The env provider reads the container env before its dotenv file.
    let server = Server::start(app.path(), &[("MYAPP_GREETING", "from-env")]);
    assert_eq!(server.get("/greeting").text(), "from-env");
    drop(server);

    // Secret-store providers (tests/secret_stores.rs) check their fields before any request.
    for (kind, want) in [
        (
            "vault",
            "`variables_provider[0].token` is missing (vault provider)",
        ),
        (
            "azure_key_vault",
            "`variables_provider[0].url` is not a field of a `azure_key_vault` provider",
        ),
    ] {
        std::fs::write(
            app.path().join("runtime-config.toml"),
            format!("[[variables_provider]]\ntype = \"{kind}\"\nurl = \"http://127.0.0.1:1\"\n"),
        )
        .unwrap();
        let e = start_failure(app.path(), &[("API_TOKEN", "t")]);
        assert!(e.contains(want), "{kind}: {e}");
    }
    // An unknown runtime-config section stops the start naming it, as Spin's "unused
    // runtime config key(s)"; Spin's own top-level keys load, with a warning.
    std::fs::write(
        app.path().join("runtime-config.toml"),
        "[made_up_section]\nx = 1\n",
    )
    .unwrap();
    let e = start_failure(app.path(), &[("API_TOKEN", "t")]);
    assert!(
        e.contains("runtime-config.toml")
            && e.contains("unused runtime config key(s): made_up_section"),
        "{e}"
    );
    std::fs::write(
        app.path().join("runtime-config.toml"),
        "state_dir = \".spin-elsewhere\"\n",
    )
    .unwrap();
    let server = Server::start(app.path(), &[("API_TOKEN", "t")]);
    assert_eq!(server.get("/token").text(), "t");
    let log = log_with(&server, "state_dir");
    assert!(
        log.contains("`state_dir` is read by Spin's CLI but not applied"),
        "{log}"
    );
}

/// `[[client_tls]]` against a real TLS server (`openssl s_server` requiring a client
/// certificate from the private CA): with the entry the component reaches it; without the
/// custom roots the server's certificate is refused; without the client certificate the
/// server refuses the handshake; another component gets no part of the entry.
#[test]
fn client_tls_custom_ca_and_client_certificate() {
    let pki = tempfile::tempdir().unwrap();
    make_pki(pki.path());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut server_proc = std::process::Command::new("openssl")
        .args([
            "s_server",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            "server.pem",
            "-key",
            "server.key",
            "-CAfile",
            "ca.pem",
            "-Verify",
            "1",
            "-www",
            "-quiet",
        ])
        .current_dir(pki.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "s_server did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let wasm = "spin_outbound.wasm";
    let allowed = format!("allowed_outbound_hosts = [\"https://localhost:{port}\"]");
    let app = app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"tls\"\n\
         [[trigger.http]]\nroute = \"/a/...\"\ncomponent = \"a\"\n\
         [[trigger.http]]\nroute = \"/b/...\"\ncomponent = \"b\"\n\
         [component.a]\nsource = \"{{WASM_DIR}}/{wasm}\"\n{allowed}\n\
         [component.b]\nsource = \"{{WASM_DIR}}/{wasm}\"\n{allowed}\n"
    ));
    let p = |f: &str| pki.path().join(f).display().to_string();
    let url = format!("https://localhost:{port}/");
    let call = |server: &Server, c: &str| {
        let r = server.get(&format!("/{c}/?url={url}"));
        (r.status, r.text())
    };
    let rc = |entry: &str| {
        std::fs::write(
            app.path().join("runtime-config.toml"),
            format!(
                "[[client_tls]]\ncomponent_ids = [\"a\"]\nhosts = [\"localhost:{port}\"]\n{entry}"
            ),
        )
        .unwrap();
    };

    rc(&format!(
        "ca_roots_file = \"{}\"\nclient_cert_file = \"{}\"\nclient_private_key_file = \"{}\"\n",
        p("ca.pem"),
        p("client.pem"),
        p("client.key")
    ));
    let server = Server::start(app.path(), &[]);
    let (status, body) = call(&server, "a");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("upstream 200"), "{body}");
    // `b` is not in component_ids: the default roots do not know the private CA.
    let (status, body) = call(&server, "b");
    assert_eq!(status, 502, "{body}");
    drop(server);

    // The CA without the client certificate: s_server (-Verify) ends the handshake.
    rc(&format!("ca_roots_file = \"{}\"\n", p("ca.pem")));
    let server = Server::start(app.path(), &[]);
    let (status, body) = call(&server, "a");
    assert_eq!(status, 502, "{body}");
    drop(server);

    // A key without its certificate is a start error naming the entry.
    rc(&format!(
        "client_private_key_file = \"{}\"\n",
        p("client.key")
    ));
    let e = start_failure(app.path(), &[]);
    assert!(
        e.contains("client_tls[0]") && e.contains("client_cert_file"),
        "{e}"
    );
    let _ = server_proc.kill();
    let _ = server_proc.wait();
}
