//! The CRI matrix (root only): kubelet's pod-metrics scenario through containerd's CRI on
//! this host's v1 hierarchies and on cgroup v2 (private mount namespace), with containerd
//! 1.6, 1.7 and 2.x. One containerd per version/layout; on v1 the runc control runs first and
//! must show the seed failure, so the test demonstrably tells the two apart.
//!
//! Needs: `cargo build --release -p containerd-shim-spin-v2`, `scripts/build-apps.sh`
//! (spin_cpu.wasm, wasi-hello.wasm), gcc and busybox-static (the pause and busybox images).

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use cri_tests::cgroups::{self, Layout};
use cri_tests::cri::Cri;
use cri_tests::kubelet::{CgroupDriver, QosClass};
use cri_tests::node::{
    ContainerdVersion, Images, Node, BUSYBOX_IMAGE, PAUSE_IMAGE, SPIN_CPU_IMAGE,
};
use cri_tests::scenario;

const LOAD: Duration = Duration::from_secs(3);

/// The scenarios measure CPU: run them one at a time on these 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// Image archives, built once per test run into `<release dir>/cri-images` (rewritten by
/// every run, so nothing accumulates).
fn images() -> Result<&'static Images> {
    static IMAGES: OnceLock<std::result::Result<Images, String>> = OnceLock::new();
    IMAGES
        .get_or_init(|| {
            Images::build(&integration::shim_bin_dir().join("cri-images"))
                .map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("building the test images: {e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    cri_tests::cri::runtime().expect("tokio runtime")
}

/// Starts a node and imports the images; returns it with a connected CRI client.
async fn node_with_images(
    version: ContainerdVersion,
    layout: Layout,
    with_spin: bool,
) -> Result<(Node, Cri)> {
    let imgs = images()?;
    let node = Node::start(version, layout, with_spin)?;
    for archive in imgs.all() {
        node.import(archive)?;
    }
    let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
    let known = cri.list_images().await?;
    for want in [PAUSE_IMAGE, BUSYBOX_IMAGE, SPIN_CPU_IMAGE] {
        ensure!(
            known.iter().any(|k| k == want),
            "CRI does not list {want}: {known:?}"
        );
    }
    Ok((node, cri))
}

/// The runc control: the seed failure must show (container outside the pod cgroup, pod
/// cgroup CPU near 0 while the container burned CPU).
async fn runc_control(node: &Node, cri: &mut Cri) -> Result<()> {
    let logs = node.dir().join("pod-logs");
    let imgs_burner = BUSYBOX_IMAGE;
    let f = scenario::runc_control_scenario(cri, imgs_burner, &logs, LOAD).await?;
    println!(
        "runc control ({:?}, cgroupfs driver, kubelet systemd parent): container cgroup {} cpu {:.3}s, pod cgroup cpu {:.3}s",
        node.containerd.version(),
        f.container_cgroup,
        f.container_cpu_ns as f64 / 1e9,
        f.pod_cpu_ns as f64 / 1e9
    );
    ensure!(
        f.container_cpu_ns >= 1_000_000_000,
        "the burner used only {} ns CPU in {LOAD:?}",
        f.container_cpu_ns
    );
    ensure!(
        f.container_cgroup.contains(":cri-containerd:")
            && !f.container_cgroup.starts_with("/kubepods.slice/"),
        "runc did not reproduce the seed placement (a literal slice:prefix:name directory): {}",
        f.container_cgroup
    );
    ensure!(
        (f.pod_cpu_ns as f64) < 0.1 * f.container_cpu_ns as f64,
        "control: the pod cgroup shows {} ns of the container's {} ns: the test cannot tell the failure",
        f.pod_cpu_ns,
        f.container_cpu_ns
    );
    // runc removes its (misplaced) cgroup on delete.
    let hs = cgroups::hierarchies(Layout::Hybrid)?;
    let h = cgroups::v1_hierarchy(&hs, "cpuacct").context("no cpuacct hierarchy")?;
    let left = cgroups::cgroup_dir(h, &f.container_cgroup);
    ensure!(!left.exists(), "runc left {} behind", left.display());
    Ok(())
}

/// The Spin pod with both kubelet cgroup drivers.
async fn spin_pods(node: &Node, cri: &mut Cri) -> Result<()> {
    let logs = node.dir().join("pod-logs");
    for (driver, qos) in [
        (CgroupDriver::Systemd, QosClass::Burstable),
        (CgroupDriver::Systemd, QosClass::Guaranteed),
        (CgroupDriver::Cgroupfs, QosClass::Burstable),
    ] {
        let f = scenario::spin_pod_scenario(
            cri,
            node.layout,
            driver,
            qos,
            "spin",
            SPIN_CPU_IMAGE,
            &logs,
            LOAD,
        )
        .await
        .with_context(|| {
            format!(
                "spin pod, {driver} driver, {qos:?}, {:?} on {:?}",
                node.containerd.version(),
                node.layout
            )
        })
        .map_err(|e| anyhow::anyhow!("{e:#}\ncontainerd log:\n{}", node.log_tail()))?;
        println!(
            "spin ({:?}, {:?}, {driver} {qos:?}): {} requests; container {} cpu {:.3}s; pod cpu {:.3}s ({:.1}%); \
             pod working set {} B; CRI cpu {:.3}s / list {:.3}s; CRI working set {} B",
            node.containerd.version(),
            node.layout,
            f.requests,
            f.container_cgroup,
            f.container_cpu_ns as f64 / 1e9,
            f.pod_cpu_ns as f64 / 1e9,
            100.0 * f.pod_cpu_ns as f64 / f.container_cpu_ns.max(1) as f64,
            f.pod_working_set,
            f.cri_cpu_ns as f64 / 1e9,
            f.cri_list_cpu_ns as f64 / 1e9,
            f.cri_working_set
        );
        no_leftovers(node, &[&f.sandbox_id, &f.container_id])?;
    }
    Ok(())
}

/// After a pod's removal: no shim serves this containerd any more and no mount (as
/// containerd sees them) names the pod's sandbox or container.
fn no_leftovers(node: &Node, ids: &[&str]) -> Result<()> {
    let clean = integration::wait_for(Duration::from_secs(10), || {
        node.containerd.shim_pids().is_empty().then_some(())
    });
    ensure!(
        clean.is_some(),
        "shims still running after the pods were removed: {:?}",
        node.containerd.shim_pids()
    );
    let mounts: Vec<String> = node
        .containerd
        .mounts()
        .into_iter()
        .filter(|m| ids.iter().any(|id| m.contains(id)))
        .collect();
    ensure!(
        mounts.is_empty(),
        "mounts left after the pod's removal: {mounts:?}"
    );
    Ok(())
}

fn matrix_case(version: ContainerdVersion, layout: Layout) -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    runtime().block_on(async {
        let (node, mut cri) = node_with_images(version, layout, true).await?;
        if layout == Layout::Hybrid {
            runc_control(&node, &mut cri).await?;
        }
        spin_pods(&node, &mut cri).await?;
        drop(node);
        Ok(())
    })
}

#[test]
fn v1_containerd_1_6() -> Result<()> {
    matrix_case(ContainerdVersion::V1_6, Layout::Hybrid)
}

#[test]
fn v1_containerd_1_7() -> Result<()> {
    matrix_case(ContainerdVersion::V1_7, Layout::Hybrid)
}

#[test]
fn v2_containerd_1_6() -> Result<()> {
    matrix_case(ContainerdVersion::V1_6, Layout::Unified)
}

#[test]
fn v2_containerd_1_7() -> Result<()> {
    matrix_case(ContainerdVersion::V1_7, Layout::Unified)
}

#[test]
fn v1_containerd_2() -> Result<()> {
    matrix_case(ContainerdVersion::V2, Layout::Hybrid)
}

#[test]
fn v2_containerd_2() -> Result<()> {
    matrix_case(ContainerdVersion::V2, Layout::Unified)
}

/// The node installer against a live containerd: a node without the spin runtime, the
/// installer edits its config, containerd restarts, and a Spin pod runs.
#[test]
fn installer_then_restart_runs_a_spin_pod() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    runtime().block_on(async {
        let (node, mut cri) =
            node_with_images(ContainerdVersion::V1_6, Layout::Hybrid, false).await?;
        // Before: the handler is unknown to containerd.
        let logs = node.dir().join("pod-logs");
        let before = burstable_spin_pod(&mut cri, &logs).await;
        match before {
            Ok(_) => bail!("a spin pod ran before the installer added the runtime"),
            Err(e) => ensure!(
                format!("{e:#}").contains("no runtime for"),
                "unexpected failure before the install: {e:#}"
            ),
        }
        let bin_dir = node.dir().join("node-bin");
        let shim = integration::require_shim()?;
        run_installer(&node.dir().join("config.toml"), &bin_dir, &shim)?;
        let restarted = node.restart()?;
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let f = burstable_spin_pod(&mut cri, &logs)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}\ncontainerd log:\n{}", node.log_tail()))?;
        drop(restarted);
        println!(
            "after install + restart: spin pod served {} requests, pod cpu {:.3}s",
            f.requests,
            f.pod_cpu_ns as f64 / 1e9
        );
        Ok(())
    })
}

/// The Spin pod (systemd driver, Burstable) on the host layout.
async fn burstable_spin_pod(cri: &mut Cri, logs: &Path) -> Result<scenario::SpinFigures> {
    scenario::spin_pod_scenario(
        cri,
        Layout::Hybrid,
        CgroupDriver::Systemd,
        QosClass::Burstable,
        "spin",
        SPIN_CPU_IMAGE,
        logs,
        LOAD,
    )
    .await
}

fn run_installer(config: &Path, bin_dir: &Path, shim: &Path) -> Result<()> {
    let out = Command::new("sh")
        .arg(integration::workspace_root().join("deployments/node-installer/install-node.sh"))
        .args(["--host-root", "/", "--distro", "containerd", "--no-restart"])
        .arg("--config")
        .arg(config)
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--shim")
        .arg(shim)
        .output()
        .context("running install-node.sh")?;
    let log = String::from_utf8_lossy(&out.stderr);
    println!("{log}");
    ensure!(out.status.success(), "install-node.sh failed: {log}");
    Ok(())
}
