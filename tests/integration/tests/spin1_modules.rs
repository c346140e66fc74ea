//! Spin 1.x-style modules (wasip1 core modules exporting `handle-http-request`, Spin 1.x's
//! ABI) through `ctr run` with the shim on containerd 1.7, as spin-in-container images:
//! `tests/apps/spin1-go` (the exact imports and exports of a Spin Go SDK 2.2.1 app, written
//! in Rust against the Go SDK's WIT because TinyGo is not reachable here) and
//! `tests/apps/spin1-http` (the same ABI shaped as a WASI command). Each answers with its
//! status, headers and body: a variable from the container's environment, the request
//! echoed, an outbound self request, a denied destination and key-value. Root only:
//! `cargo test --release --workspace --test spin1_modules -- --nocapture`.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{require_shim, wait_for, CgroupMode, Containerd, ContainerdVersion};
use oci_image_builder::spin;

/// An HTTP answer: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.0 request to 127.0.0.1:port (20 s read timeout).
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .with_context(|| format!("not an HTTP response: {resp:?}"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no status line: {resp:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_string(),
    })
}

fn check(
    c: &Containerd,
    dir: &std::path::Path,
    app: &str,
    abi: &str,
    component: &str,
) -> Result<()> {
    let app_dir = integration::workspace_root().join("tests/apps").join(app);
    let image = format!("docker.io/library/{app}:spin1");
    let tar = dir.join(format!("{app}.tar"));
    spin::container_image(&image, &app_dir, &[])?.write_archive(&tar)?;
    c.import(&tar, false)?;
    let run = c.run_spin_app(
        &image,
        &[
            "--env".to_string(),
            "MESSAGE=set by the container".to_string(),
        ],
    )?;
    let hello = format!(
        "abi={abi} route=/hello message=set by the container \
         undeclared=provider(no variable `not_declared` for component `{component}`: \
         declare it in [component.{component}.variables])\n"
    );
    let r = wait_for(Duration::from_secs(30), || {
        http(run.port, "GET", "/hello", &[], "").ok()
    })
    .with_context(|| format!("{app}: no answer on port {}\n{}", run.port, c.log_tail(30)))?;
    ensure!(r.status == 200, "{app} /hello: {} {}", r.status, r.body);
    ensure!(
        r.header("x-spin1-abi") == Some(abi),
        "{app}: {:?}",
        r.headers
    );
    ensure!(
        r.header("content-type") == Some("text/plain"),
        "{app}: {:?}",
        r.headers
    );
    ensure!(r.body == hello, "{app} /hello: {:?}", r.body);

    let r = http(
        run.port,
        "POST",
        "/echo/a?q=1",
        &[("x-test", "via ctr")],
        "posted",
    )?;
    ensure!(r.status == 201, "{app} /echo: {} {}", r.status, r.body);
    ensure!(
        r.header("x-echo-method") == Some("POST"),
        "{app}: {:?}",
        r.headers
    );
    ensure!(
        r.body
            == format!(
                "abi={abi} method=POST uri=/echo/a?q=1 x-test=via ctr path-info=/echo/a \
                 body=posted\n"
            ),
        "{app} /echo: {:?}",
        r.body
    );

    let r = http(run.port, "GET", "/outbound", &[], "")?;
    ensure!(r.status == 200, "{app} /outbound: {} {}", r.status, r.body);
    ensure!(
        r.body == format!("abi={abi} route=/outbound upstream=200 upstream_abi={abi} {hello}"),
        "{app} /outbound: {:?}",
        r.body
    );
    let r = http(run.port, "GET", "/deny", &[], "")?;
    ensure!(
        r.status == 502
            && r.body == format!("abi={abi} route=/deny error=destination-not-allowed\n"),
        "{app} /deny: {} {:?}",
        r.status,
        r.body
    );

    let r = http(run.port, "POST", "/kv", &[], "in-a-container")?;
    ensure!(
        r.status == 200
            && r.body
                == format!(
                    "abi={abi} route=/kv value=in-a-container missing=no-such-key \
                     other_store=access-denied\n"
                ),
        "{app} /kv: {} {:?}",
        r.status,
        r.body
    );
    println!("spin1(ctr): {app}: /hello /echo /outbound /deny /kv answered as expected");
    Ok(())
}

#[test]
fn spin1_modules_serve_through_ctr_run_on_containerd_1_7() {
    let Some(_s) = integration::root_test("spin1_modules_serve_through_ctr_run_on_containerd_1_7")
    else {
        return;
    };
    (|| -> Result<()> {
        require_shim()?;
        let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
        let dir = tempfile::tempdir()?;
        check(&c, dir.path(), "spin1-go", "go-sdk-2.2.1", "go")?;
        check(&c, dir.path(), "spin1-http", "command", "cmd")?;
        Ok(())
    })()
    .unwrap_or_else(|e| panic!("{e:#}"));
}
