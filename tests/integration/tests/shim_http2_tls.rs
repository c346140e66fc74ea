//! HTTP/2 and inbound TLS of a Spin app run by the shim (`ctr run`, containerd 1.7, host
//! network, loopback port): h2c by prior knowledge and by `Upgrade: h2c`, a gRPC unary call
//! whose status comes back in the response trailers, and TLS with ALPN h2 and http/1.1 from
//! `SPIN_TLS_CERT` / `SPIN_TLS_KEY` files bind-mounted into the container (as a Kubernetes
//! secret volume would be), certificates from a private CA made by the test with openssl.
//! Bad TLS settings fail the container, naming the variable and the file.
//! Run as root: `cargo test --release --workspace --test shim_http2_tls -- --nocapture`.

use anyhow::{ensure, Result};
use integration::{require_shim, workspace_root, CgroupMode, Containerd, ContainerdVersion};
use oci_image_builder::spin;

const IMAGE: &str = "docker.io/library/spin-grpc:h2";

/// Runs curl with `args`, retrying refused connections; returns (success, stdout, stderr).
fn curl(args: &[&str]) -> Result<(bool, String, String)> {
    let mut all = vec!["--retry", "10", "--retry-connrefused"];
    all.extend(args);
    let c = test_support::curl::Curl::run(&all);
    Ok((c.ok, c.out, c.err))
}

/// A gRPC request frame: uncompressed, `HelloRequest { name }`.
fn hello_request(name: &str) -> Vec<u8> {
    let mut msg = vec![0x0a, name.len() as u8];
    msg.extend_from_slice(name.as_bytes());
    let mut framed = vec![0];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    framed
}

/// `SayHello` for "tonic" and "fail" through tonic at `base` (TLS against `ca` if given).
fn grpc_with_tonic(base: &str, ca: Option<Vec<u8>>) -> Result<(String, tonic::Status)> {
    test_support::grpc::hello_and_failure(base, ca).map_err(anyhow::Error::msg)
}

fn http2_through_the_shim() -> Result<()> {
    require_shim()?;
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let tar = dir.path().join("grpc.tar");
    let app_dir = workspace_root().join("tests/apps/spin-grpc");
    spin::container_image(IMAGE, &app_dir, &[])?.write_archive(&tar)?;
    c.import(&tar, false)?;

    // Cleartext: h2c by prior knowledge and by upgrade, HTTP/1.1 beside them.
    let app = c.run_spin_app(IMAGE, &[])?;
    let base = format!("http://127.0.0.1:{}", app.port);
    let (ok, out, err) = curl(&[
        "--http2-prior-knowledge",
        "-D",
        "-",
        "-w",
        "v=%{http_version}\n",
        &format!("{base}/x"),
    ])?;
    println!("h2c prior knowledge:\n{out}");
    ensure!(ok && out.starts_with("HTTP/2 200"), "{out}{err}");
    ensure!(
        out.contains("x-trailer: done") && out.ends_with("v=2\n"),
        "{out}"
    );
    let (ok, out, err) = curl(&[
        "-v",
        "--http2",
        "-w",
        "v=%{http_version}\n",
        &format!("{base}/a"),
        &format!("{base}/b"),
    ])?;
    ensure!(ok && err.contains("101 Switching Protocols"), "{err}");
    ensure!(out.matches("v=2\n").count() == 2, "{out}{err}");
    let (ok, out, _) = curl(&[
        "--http1.1",
        "-w",
        "v=%{http_version}\n",
        &format!("{base}/c"),
    ])?;
    ensure!(
        ok && out.contains("path=/c\n") && out.ends_with("v=1.1\n"),
        "{out}"
    );

    // A unary gRPC call: the reply message, and the status in the trailers.
    let body = dir.path().join("req.bin");
    std::fs::write(&body, hello_request("pod"))?;
    let grpc = |name: &str| -> Result<(bool, String, String)> {
        std::fs::write(&body, hello_request(name))?;
        curl(&[
            "--http2-prior-knowledge",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--data-binary",
            &format!("@{}", body.display()),
            "-D",
            "-",
            &format!("{base}/helloworld.Greeter/SayHello"),
        ])
    };
    let (ok, out, err) = grpc("pod")?;
    println!("gRPC through the shim:\n{out:?}");
    ensure!(ok && out.contains("Hello pod"), "{out}{err}");
    ensure!(
        out.contains("grpc-status: 0"),
        "no grpc-status trailer: {out}"
    );
    let (_, out, _) = grpc("fail")?;
    ensure!(
        out.contains("grpc-status: 3") && out.contains("grpc-message: the name must not be fail"),
        "{out}"
    );
    // The same call through a gRPC library (tonic).
    let (reply, failed) = grpc_with_tonic(&base, None)?;
    ensure!(reply == "Hello tonic", "{reply:?}");
    ensure!(
        failed.code() == tonic::Code::InvalidArgument,
        "the status from the trailers was lost: {failed:?}"
    );
    drop(app);

    // TLS from bind-mounted PEM files: ALPN h2 and http/1.1 against the private CA.
    let pki = dir.path().join("pki");
    std::fs::create_dir_all(&pki)?;
    test_support::pki::make_pki(&pki);
    let extra: Vec<String> = [
        "--mount",
        &format!("type=bind,src={},dst=/tls,options=rbind:ro", pki.display()),
        "--env",
        "SPIN_TLS_CERT=/tls/server.pem",
        "--env",
        "SPIN_TLS_KEY=/tls/server.key",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let app = c.run_spin_app(IMAGE, &extra)?;
    let ca = pki.join("ca.pem").display().to_string();
    let resolve = format!("localhost:{}:127.0.0.1", app.port);
    let url = format!("https://localhost:{}/tls", app.port);
    let tls = |version: &str| {
        curl(&[
            version,
            "--cacert",
            &ca,
            "--resolve",
            &resolve,
            "-w",
            "v=%{http_version}\n",
            &url,
        ])
    };
    let (ok, out, err) = tls("--http2")?;
    println!("TLS, ALPN h2:\n{out}");
    ensure!(
        ok && out.ends_with("v=2\n"),
        "{out}{err}\n{}",
        c.log_tail(20)
    );
    ensure!(out.contains(&format!("full-url={url}\n")), "{out}");
    let (ok, out, err) = tls("--http1.1")?;
    ensure!(ok && out.ends_with("v=1.1\n"), "{out}{err}");
    let ca_pem = std::fs::read(pki.join("ca.pem"))?;
    let tls_base = format!("https://localhost:{}", app.port);
    let (reply, failed) = grpc_with_tonic(&tls_base, Some(ca_pem))?;
    ensure!(reply == "Hello tonic", "{reply:?}");
    ensure!(failed.code() == tonic::Code::InvalidArgument, "{failed:?}");
    let (ok, _, _) = curl(&[
        "--http2-prior-knowledge",
        &format!("http://127.0.0.1:{}/", app.port),
    ])?;
    ensure!(!ok, "a TLS listener answered cleartext HTTP/2");
    drop(app);

    // Bad settings: the container fails, naming the variable and the file.
    let mount = format!("type=bind,src={},dst=/tls,options=rbind:ro", pki.display());
    let listen = format!(
        "SPIN_HTTP_LISTEN_ADDR=127.0.0.1:{}",
        integration::free_loopback_port()?
    );
    for (env, expect) in [
        (
            vec!["--env", "SPIN_TLS_CERT=/tls/server.pem"],
            "SPIN_TLS_CERT is set but SPIN_TLS_KEY is not",
        ),
        (
            vec![
                "--env",
                "SPIN_TLS_CERT=/tls/nope.pem",
                "--env",
                "SPIN_TLS_KEY=/tls/server.key",
            ],
            "SPIN_TLS_CERT=`/tls/nope.pem`: cannot read the certificate chain",
        ),
    ] {
        let mut extra = vec!["--mount", &mount, "--env", &listen];
        extra.extend(env);
        let (code, log) =
            c.run_to_exit(IMAGE, &extra, &["/"], std::time::Duration::from_secs(300))?;
        println!("bad TLS settings: exit {code:?}");
        ensure!(code != Some(0), "started with bad TLS settings: {log}");
        ensure!(
            log.contains(expect),
            "the failure does not say {expect:?}: {log}"
        );
    }
    Ok(())
}

#[test]
fn http2_h2c_grpc_and_tls_through_ctr_run() {
    let Some(_guard) = integration::root_test("http2_h2c_grpc_and_tls_through_ctr_run") else {
        return;
    };
    http2_through_the_shim().unwrap();
}
