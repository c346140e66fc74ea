//! The app forms Spin runs besides SDK components, each as a pod through CRI (root only):
//! Spin 1.x-style modules (`tests/apps/spin1-go`, the Spin Go SDK's exact ABI, and
//! `tests/apps/spin1-http`, the same ABI shaped as a WASI command), the WAGI executor
//! (`tests/apps/wasi-wagi-p1`) and a component sourced by URL (downloaded by the shim from a
//! loopback HTTPS origin with a private CA that the node trusts through `SSL_CERT_FILE` in
//! containerd's environment). containerd 1.7 in the private cgroup v2 namespace with kubelet's
//! systemd driver and the `spin` handler; each container sits in its pod's cgroup, answers
//! exactly, and the teardown leaves nothing. Prints one `app-forms(cri):` line per app.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::node::{ContainerdVersion, Images, Node, SpinHandler};
use cri_tests::scenario;
use oci_image_builder::spin;
use test_support::https_origin::Origin;

const LAYOUT: Layout = Layout::Unified;

/// [`scenario::serve_in_pod`] for `image` with command `/` and `envs`, ready when
/// `first_path` answers 200.
async fn in_pod(
    cri: &mut Cri,
    node: &Node,
    name: &str,
    image: &str,
    envs: &[(&str, &str)],
    first_path: &str,
    checks: impl FnOnce(SocketAddr) -> Result<String>,
) -> Result<String> {
    let spec = ContainerSpec {
        name: "app".into(),
        image: image.to_string(),
        command: vec!["/".into()],
        envs: envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let logs = node.dir().join("pod-logs");
    scenario::serve_in_pod(cri, LAYOUT, &logs, name, spec, Some(first_path), checks).await
}

/// `GET path` on the app; the status must be `want`.
fn get(addr: SocketAddr, path: &str, want: u16) -> Result<String> {
    let (status, body) = scenario::http_get(addr, path, Duration::from_secs(30))?;
    ensure!(
        status == want,
        "GET {path}: status {status}, not {want}: {body:?}"
    );
    Ok(body)
}

/// The checks of a Spin 1.x module of ABI `abi` and component `component`: a variable from
/// the pod's environment, an outbound request to itself, a denied destination.
fn spin1_checks(addr: SocketAddr, abi: &str, component: &str) -> Result<String> {
    let hello = format!(
        "abi={abi} route=/hello message=set by the pod \
         undeclared=provider(no variable `not_declared` for component `{component}`: \
         declare it in [component.{component}.variables])\n"
    );
    let body = get(addr, "/hello", 200)?;
    ensure!(body == hello, "/hello: {body:?}");
    let body = get(addr, "/outbound", 200)?;
    ensure!(
        body == format!("abi={abi} route=/outbound upstream=200 upstream_abi={abi} {hello}"),
        "/outbound: {body:?}"
    );
    let body = get(addr, "/deny", 502)?;
    ensure!(
        body == format!("abi={abi} route=/deny error=destination-not-allowed\n"),
        "/deny: {body:?}"
    );
    Ok(format!("{abi}: /hello /outbound /deny"))
}

fn wagi_checks(addr: SocketAddr) -> Result<String> {
    integration::app_forms::check_wagi_routes(|p| {
        scenario::http_get(addr, p, Duration::from_secs(30))
    })?;
    Ok("wagi: /wagi/echo /wagi/created /wagi/fail /custom/echo".into())
}

fn run() -> Result<()> {
    let dir = integration::shim_bin_dir().join("cri-images-app-forms");
    let imgs = Images::build(&dir)?;
    let origin = Origin::start(std::fs::read(
        integration::guest_apps_dir().join("spin_hello.wasm"),
    )?);
    let cache = tempfile::Builder::new()
        .prefix("app-forms-cache-")
        .tempdir_in("/tmp")?;
    let node = Node::start_with_env(
        ContainerdVersion::V1_7,
        LAYOUT,
        SpinHandler::Plain,
        vec![
            (
                "SSL_CERT_FILE".into(),
                origin.ca_file().display().to_string(),
            ),
            (
                "SPIN_SHIM_COMPILE_CACHE_DIR".into(),
                cache.path().join("compile-cache").display().to_string(),
            ),
        ],
    )?;
    node.import(&imgs.pause)?;
    for app in ["spin1-go", "spin1-http", "wasi-wagi-p1"] {
        let app_dir = integration::workspace_root().join("tests/apps").join(app);
        let tar = dir.join(format!("{app}.tar"));
        spin::container_image(&format!("docker.io/library/{app}:cri"), &app_dir, &[])?
            .write_archive(&tar)?;
        node.import(&tar)?;
    }
    let by_url = "docker.io/library/by-url:cri";
    let tar = dir.join("by-url.tar");
    integration::app_forms::url_source_image(
        by_url,
        &origin.url("/app.wasm"),
        &origin.digest(),
        &tar,
    )?;
    node.import(&tar)?;

    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let message = [("MESSAGE", "set by the pod")];
        let mut lines = Vec::new();
        for (app, abi, component) in [
            ("spin1-go", "go-sdk-2.2.1", "go"),
            ("spin1-http", "command", "cmd"),
        ] {
            let image = format!("docker.io/library/{app}:cri");
            let line = in_pod(&mut cri, &node, app, &image, &message, "/hello", |a| {
                spin1_checks(a, abi, component)
            })
            .await
            .with_context(|| format!("{app} through CRI\n{}", node.log_tail()))?;
            lines.push(line);
        }
        let image = "docker.io/library/wasi-wagi-p1:cri";
        let line = in_pod(
            &mut cri,
            &node,
            "wagi",
            image,
            &[],
            "/wagi/echo",
            wagi_checks,
        )
        .await
        .with_context(|| format!("wagi through CRI\n{}", node.log_tail()))?;
        lines.push(line);
        // Two pods of the URL-sourced app: the node downloads the component once.
        for round in 1..=2 {
            let line = in_pod(&mut cri, &node, "by-url", by_url, &[], "/x", |a| {
                let body = get(a, "/x", 200)?;
                ensure!(body.contains("component=fetched"), "/x: {body:?}");
                ensure!(
                    origin.requests("/app.wasm") == 1,
                    "pod {round}: the origin saw {} requests for /app.wasm; the node cache \
                     should make it one",
                    origin.requests("/app.wasm")
                );
                Ok(format!("url source, pod {round}: /x, 1 download"))
            })
            .await
            .with_context(|| format!("URL-sourced app through CRI\n{}", node.log_tail()))?;
            lines.push(line);
        }
        for l in lines {
            println!("app-forms(cri): {l}");
        }
        anyhow::Ok(())
    })
}

#[test]
fn spin1_wagi_and_url_sourced_apps_serve_as_pods_through_cri() {
    let Some(_s) =
        integration::root_test("spin1_wagi_and_url_sourced_apps_serve_as_pods_through_cri")
    else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}
