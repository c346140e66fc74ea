//! `doctor --run` through CRI (root only): on a private containerd node, the doctor runs a
//! test pod with the `spin` handler, measures the container's CPU (CRI) against the pod
//! cgroup's (as cAdvisor reads it) and says ok; on this host's hybrid layout with kubelet's
//! cgroupfs driver and in the private v2 namespace with the systemd driver. A node without
//! the `spin` runtime gets a failing `run` line naming the handler. Nothing of the test pod
//! is left: no pod cgroup, no probe image, no process.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{ensure, Result};
use cri_tests::cgroups::Layout;
use cri_tests::node::{ContainerdVersion, Images, Node, SpinHandler};
use serde_json::Value;

/// One containerd at a time: the doctor measures CPU.
static SERIAL: Mutex<()> = Mutex::new(());

fn images() -> Result<&'static Images> {
    static IMAGES: OnceLock<std::result::Result<Images, String>> = OnceLock::new();
    IMAGES
        .get_or_init(|| {
            Images::build(&integration::shim_bin_dir().join("cri-images-doctor"))
                .map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("building the test images: {e}"))
}

/// Runs `doctor --run --json` against `node` with kubelet's config saying `driver`.
fn doctor_run(node: &Node, driver: &str) -> Result<(i32, Value)> {
    let kubelet = node.dir().join("kubelet-config.yaml");
    std::fs::write(
        &kubelet,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: {driver}\n"),
    )?;
    let config = node.dir().join("config.toml");
    integration::doctor_json(&[
        "--run".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--kubelet-config".as_ref(),
        kubelet.as_os_str(),
    ])
}

/// The verdict and detail of the `run` check.
fn run_check(report: &Value) -> Result<(String, String)> {
    integration::doctor_check(report, "run")
}

/// Nothing of the doctor's pod is left on `node`.
fn nothing_left(node: &Node, layout: Layout) -> Result<()> {
    let out = integration::output_with_timeout(
        node.containerd
            .ctr_ns("k8s.io")
            .args(["images", "ls", "-q"]),
        Duration::from_secs(30),
    )?;
    let images = String::from_utf8_lossy(&out.stdout);
    ensure!(
        !images.contains("spin-shim-doctor-probe"),
        "the probe image is left: {images}"
    );
    let procs = cri_tests::scenario::processes_mentioning("spin-doctor");
    ensure!(procs.is_empty(), "processes left: {procs:?}");
    let hs = cri_tests::cgroups::hierarchies(layout)?;
    for h in &hs {
        for top in ["kubepods", "kubepods.slice"] {
            let dir = h.mount.join(top);
            let mut pods = Vec::new();
            collect_pods(&dir, &mut pods);
            ensure!(pods.is_empty(), "pod cgroups left: {pods:?}");
        }
    }
    Ok(())
}

fn collect_pods(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.contains("pod") {
                out.push(e.path().display().to_string());
            }
            collect_pods(&e.path(), out);
        }
    }
}

fn leg(version: ContainerdVersion, layout: Layout, driver: &str) -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let imgs = images()?;
    let node = Node::start_with(version, layout, SpinHandler::Plain)?;
    node.import(&imgs.pause)?;
    let (code, report) = doctor_run(&node, driver)?;
    let (verdict, detail) = run_check(&report)?;
    println!("doctor --run ({version:?}, {layout:?}, {driver}): {verdict} {detail} (exit {code})");
    ensure!(verdict == "ok", "run check: {verdict} {detail}\n{report:#}");
    ensure!(
        detail.contains(&format!("{driver} driver")) && detail.contains("ratio"),
        "{detail}"
    );
    nothing_left(&node, layout)?;
    Ok(())
}

fn root_leg(name: &str, version: ContainerdVersion, layout: Layout, driver: &str) {
    let Some(_s) = integration::root_test(name) else {
        return;
    };
    leg(version, layout, driver).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn doctor_run_hybrid_cgroupfs_containerd_1_7() {
    root_leg(
        "doctor_run_hybrid_cgroupfs_containerd_1_7",
        ContainerdVersion::V1_7,
        Layout::Hybrid,
        "cgroupfs",
    );
}

#[test]
fn doctor_run_unified_systemd_containerd_2() {
    root_leg(
        "doctor_run_unified_systemd_containerd_2",
        ContainerdVersion::V2,
        Layout::Unified,
        "systemd",
    );
}

#[test]
fn doctor_run_fails_where_the_runtime_is_not_registered() {
    let Some(_s) = integration::root_test("doctor_run_fails_where_the_runtime_is_not_registered")
    else {
        return;
    };
    let r = (|| {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let imgs = images()?;
        let node = Node::start_with(ContainerdVersion::V1_7, Layout::Hybrid, SpinHandler::Absent)?;
        node.import(&imgs.pause)?;
        let (code, report) = doctor_run(&node, "cgroupfs")?;
        let (verdict, detail) = run_check(&report)?;
        println!("doctor --run without the runtime: {verdict} {detail}");
        ensure!(
            code == 1 && verdict == "fail",
            "{verdict} {detail} (exit {code})"
        );
        ensure!(
            detail.contains("handler \"spin\"") || detail.contains("spin"),
            "the failure names the handler: {detail}"
        );
        nothing_left(&node, Layout::Hybrid)
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}
