//! HTTP/2, gRPC and inbound TLS of a Spin app as a pod through CRI (root only): the
//! `tests/apps/spin-grpc` app on containerd 1.7 in the private cgroup v2 namespace with
//! kubelet's systemd driver. Cleartext: h2c by prior knowledge and by `Upgrade: h2c` (curl),
//! HTTP/1.1 beside them, and a unary gRPC call through tonic whose status travels in the
//! trailers. TLS: `SPIN_TLS_CERT`/`SPIN_TLS_KEY` name PEM files of a read-only volume (as a
//! Kubernetes secret volume is mounted), certificates from a private CA made by the test;
//! curl negotiates h2 and http/1.1 by ALPN and tonic calls over TLS. Prints one
//! `protocols(cri):` line per pod.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::node::{ContainerdVersion, Images, Node};
use cri_tests::scenario;
use oci_image_builder::spin;
use test_support::curl::{Curl, VERSION};

const LAYOUT: Layout = Layout::Unified;
const IMAGE: &str = "docker.io/library/spin-grpc:cri";

fn cleartext_checks(addr: SocketAddr) -> Result<String> {
    let base = format!("http://{addr}");
    let c = Curl::run(&[
        "--http2-prior-knowledge",
        "-D",
        "-",
        "-w",
        VERSION,
        &format!("{base}/x"),
    ]);
    ensure!(
        c.ok && c.out.starts_with("HTTP/2 200"),
        "{}{}",
        c.out,
        c.err
    );
    ensure!(c.out.contains("x-trailer: done"), "no trailer: {}", c.out);
    ensure!(c.versions() == ["2"], "{}", c.out);
    let c = Curl::run(&[
        "-v",
        "--http2",
        "-w",
        VERSION,
        &format!("{base}/a"),
        &format!("{base}/b"),
    ]);
    ensure!(
        c.ok && c.err.contains("101 Switching Protocols"),
        "{}",
        c.err
    );
    ensure!(c.versions() == ["2", "2"], "{}{}", c.out, c.err);
    let c = Curl::run(&["--http1.1", "-w", VERSION, &format!("{base}/c")]);
    ensure!(
        c.ok && c.out.contains("path=/c\n") && c.versions() == ["1.1"],
        "{}",
        c.out
    );
    let (reply, failed) =
        test_support::grpc::hello_and_failure(&base, None).map_err(anyhow::Error::msg)?;
    ensure!(reply == "Hello tonic", "{reply:?}");
    ensure!(
        failed.code() == tonic::Code::InvalidArgument,
        "the status from the trailers was lost: {failed:?}"
    );
    Ok("h2c prior knowledge, h2c upgrade, HTTP/1.1, gRPC (tonic) with trailers".into())
}

fn tls_checks(addr: SocketAddr, pki: &Path) -> Result<String> {
    let ca = pki.join("ca.pem").display().to_string();
    let resolve = format!("localhost:{}:127.0.0.1", addr.port());
    let url = format!("https://localhost:{}/tls", addr.port());
    let tls = |version: &str| {
        Curl::run(&[
            "--retry",
            "60",
            "--retry-connrefused",
            "--retry-delay",
            "1",
            version,
            "--cacert",
            &ca,
            "--resolve",
            &resolve,
            "-w",
            VERSION,
            &url,
        ])
    };
    let c = tls("--http2");
    ensure!(c.ok && c.versions() == ["2"], "ALPN h2: {}{}", c.out, c.err);
    ensure!(c.out.contains(&format!("full-url={url}\n")), "{}", c.out);
    let c = tls("--http1.1");
    ensure!(
        c.ok && c.versions() == ["1.1"],
        "ALPN http/1.1: {}{}",
        c.out,
        c.err
    );
    let base = format!("https://localhost:{}", addr.port());
    let (reply, failed) =
        test_support::grpc::hello_and_failure(&base, Some(std::fs::read(pki.join("ca.pem"))?))
            .map_err(anyhow::Error::msg)?;
    ensure!(reply == "Hello tonic", "{reply:?}");
    ensure!(failed.code() == tonic::Code::InvalidArgument, "{failed:?}");
    let c = Curl::run(&["--http2-prior-knowledge", &format!("http://{addr}/")]);
    ensure!(
        !c.ok,
        "the TLS listener answered cleartext HTTP/2: {}",
        c.out
    );
    Ok("TLS from a secret volume: ALPN h2 and http/1.1, gRPC (tonic) over TLS".into())
}

fn run() -> Result<()> {
    let dir = integration::shim_bin_dir().join("cri-images-protocols");
    let imgs = Images::build(&dir)?;
    let node = Node::start(ContainerdVersion::V1_7, LAYOUT, true)?;
    node.import(&imgs.pause)?;
    let tar = dir.join("spin-grpc.tar");
    let app_dir = integration::workspace_root().join("tests/apps/spin-grpc");
    spin::container_image(IMAGE, &app_dir, &[])?.write_archive(&tar)?;
    node.import(&tar)?;
    let pki = tempfile::Builder::new().prefix("cri-tls-").tempdir()?;
    test_support::pki::make_pki(pki.path());
    let logs = node.dir().join("pod-logs");
    let app = |envs: Vec<(String, String)>, mounts| ContainerSpec {
        name: "app".into(),
        image: IMAGE.into(),
        command: vec!["/".into()],
        envs,
        read_only_mounts: mounts,
        ..Default::default()
    };
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let spec = app(Vec::new(), Vec::new());
        let line = scenario::serve_in_pod(
            &mut cri,
            LAYOUT,
            &logs,
            "h2c",
            spec,
            Some("/ready"),
            cleartext_checks,
        )
        .await
        .with_context(|| format!("h2c pod\n{}", node.log_tail()))?;
        println!("protocols(cri): {line}");
        let spec = app(
            vec![
                ("SPIN_TLS_CERT".into(), "/tls/server.pem".into()),
                ("SPIN_TLS_KEY".into(), "/tls/server.key".into()),
            ],
            vec![(pki.path().to_path_buf(), "/tls".into())],
        );
        let line = scenario::serve_in_pod(&mut cri, LAYOUT, &logs, "tls", spec, None, |a| {
            tls_checks(a, pki.path())
        })
        .await
        .with_context(|| format!("TLS pod\n{}", node.log_tail()))?;
        println!("protocols(cri): {line}");
        anyhow::Ok(())
    })
}

#[test]
fn http2_grpc_and_inbound_tls_serve_as_pods_through_cri() {
    let Some(_s) = integration::root_test("http2_grpc_and_inbound_tls_serve_as_pods_through_cri")
    else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}
