//! SpinKube's node config through CRI (root only): the `spin` runtime registered the way
//! SpinKube's docs and node installers do it, with an `options` table
//! `SystemdCgroup = true` (containerd 1.7+ hands it to the shim's `start` on stdin, where
//! containerd-shim 0.11 alone would take the TOML body for a cgroup path and fail every
//! sandbox). Every containerd leg: 1.6, 1.7 and 2.x (config version 3,
//! `io.containerd.cri.v1.runtime`), on this host's hybrid layout and on the private v2
//! namespace. Each leg runs the full pod-metrics scenario (placement inside the kubelet pod
//! cgroup, load, CRI stats, teardown without leftovers) with kubelet's systemd driver.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{ensure, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::Cri;
use cri_tests::kubelet::{CgroupDriver, QosClass};
use cri_tests::node::{ContainerdVersion, Images, Node, SpinHandler, SPIN_CPU_IMAGE};
use cri_tests::scenario;

/// The options table of SpinKube's documented node config.
const SPINKUBE_OPTIONS: &str = "  SystemdCgroup = true";

const LOAD: Duration = Duration::from_secs(2);

/// One containerd at a time: the scenario measures CPU.
static SERIAL: Mutex<()> = Mutex::new(());

fn images() -> Result<&'static Images> {
    static IMAGES: OnceLock<std::result::Result<Images, String>> = OnceLock::new();
    IMAGES
        .get_or_init(|| {
            Images::build(&integration::shim_bin_dir().join("cri-images-spinkube"))
                .map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("building the test images: {e}"))
}

fn leg(version: ContainerdVersion, layout: Layout) -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let imgs = images()?;
    let node = Node::start_with(version, layout, SpinHandler::WithOptions(SPINKUBE_OPTIONS))?;
    let config = std::fs::read_to_string(node.dir().join("config.toml"))?;
    ensure!(
        config.contains("containerd.runtimes.spin.options]\n  SystemdCgroup = true"),
        "the node config lacks SpinKube's options table:\n{config}"
    );
    for archive in imgs.all() {
        node.import(archive)?;
    }
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let logs = node.dir().join("pod-logs");
        let f = scenario::spin_pod_scenario(
            &mut cri,
            layout,
            CgroupDriver::Systemd,
            QosClass::Burstable,
            "spin",
            SPIN_CPU_IMAGE,
            &logs,
            LOAD,
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "spin pod with SpinKube's node config, {version:?} on {layout:?}: {e:#}\n\
                 containerd log:\n{}",
                node.log_tail()
            )
        })?;
        println!(
            "SpinKube node config ({version:?}, {layout:?}): {} requests; container {}; \
             pod cpu {:.3}s of the container's {:.3}s",
            f.requests,
            f.container_cgroup,
            f.pod_cpu_ns as f64 / 1e9,
            f.container_cpu_ns as f64 / 1e9
        );
        Ok(())
    })
}

#[test]
fn spinkube_options_containerd_1_6_hybrid() -> Result<()> {
    leg(ContainerdVersion::V1_6, Layout::Hybrid)
}

#[test]
fn spinkube_options_containerd_1_6_unified() -> Result<()> {
    leg(ContainerdVersion::V1_6, Layout::Unified)
}

#[test]
fn spinkube_options_containerd_1_7_hybrid() -> Result<()> {
    leg(ContainerdVersion::V1_7, Layout::Hybrid)
}

#[test]
fn spinkube_options_containerd_1_7_unified() -> Result<()> {
    leg(ContainerdVersion::V1_7, Layout::Unified)
}

#[test]
fn spinkube_options_containerd_2_hybrid() -> Result<()> {
    leg(ContainerdVersion::V2, Layout::Hybrid)
}

#[test]
fn spinkube_options_containerd_2_unified() -> Result<()> {
    leg(ContainerdVersion::V2, Layout::Unified)
}

/// A multi-component app of ours (tests/apps/chain-app) through CRI on SpinKube's node
/// config: selective deployment (`SPIN_COMPONENTS_TO_RETAIN`, as spin-operator sets it),
/// a private route reached only by service chaining, and dropped components not served.
#[test]
fn multi_component_app_with_chaining_and_selective_deployment() -> Result<()> {
    use cri_tests::cri::ContainerSpec;
    use cri_tests::scenario::{free_loopback_port, http_get, wait_http_ok, KubeletPod};
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let imgs = images()?;
    let dir = integration::shim_bin_dir().join("cri-images-spinkube");
    let chain = dir.join("chain-app.tar");
    const CHAIN_IMAGE: &str = "docker.io/library/chain-app:test";
    oci_image_builder::spin::container_image(
        CHAIN_IMAGE,
        &integration::workspace_root().join("tests/apps/chain-app"),
        &[],
    )?
    .write_archive(&chain)?;
    let node = Node::start_with(
        ContainerdVersion::V1_7,
        Layout::Hybrid,
        SpinHandler::WithOptions(SPINKUBE_OPTIONS),
    )?;
    node.import(&imgs.pause)?;
    node.import(&chain)?;
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let pod = KubeletPod::start(
            &mut cri,
            Layout::Hybrid,
            CgroupDriver::Systemd,
            QosClass::Burstable,
            "spin",
            "chain-app",
            &node.dir().join("pod-logs"),
        )
        .await?;
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], free_loopback_port()?).into();
        let spec = ContainerSpec {
            name: "chain-app".into(),
            image: CHAIN_IMAGE.into(),
            command: vec!["/".into()],
            envs: vec![
                ("SPIN_HTTP_LISTEN_ADDR".into(), addr.to_string()),
                ("SPIN_COMPONENTS_TO_RETAIN".into(), "front,back".into()),
            ],
            ..Default::default()
        };
        let checks = async {
            let id = cri
                .start_container(&pod.sandbox_id, &pod.spec, &spec)
                .await?;
            let pid = cri.container_pid(&id).await?;
            wait_http_ok(addr, "/.well-known/spin/health", Duration::from_secs(60)).await?;
            pod.check_inside(pid, "the chain-app container")?;
            let t = Duration::from_secs(10);
            let (status, body) =
                http_get(addr, "/front/?url=http://back.spin.internal/deep/path", t)?;
            ensure!(
                status == 200
                    && body.contains("component=back")
                    && body.contains("path=/deep/path"),
                "chained request: {status} {body}"
            );
            let (status, _) = http_get(addr, "/back", t)?;
            ensure!(
                status == 404,
                "the private route answered {status} from the network"
            );
            let (status, _) = http_get(addr, "/hello", t)?;
            ensure!(
                status == 404,
                "`hello` was not retained but answered {status}"
            );
            let (status, _) = http_get(addr, "/open/?url=http://back.spin.internal/", t)?;
            ensure!(
                status == 404,
                "`open` was not retained but answered {status}"
            );
            cri.remove_container(&id, 10).await?;
            anyhow::Ok(pid)
        }
        .await;
        match checks {
            Ok(pid) => pod.teardown(&mut cri, &[pid]).await,
            Err(e) => {
                let _ = cri.remove_pod(&pod.sandbox_id).await;
                Err(anyhow::anyhow!(
                    "{e:#}\ncontainerd log:\n{}",
                    node.log_tail()
                ))
            }
        }
    })
}
