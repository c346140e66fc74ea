//! A command-triggered Spin app as a Kubernetes Job would run it, through containerd 1.7's
//! CRI (root only): a kubelet-style pod with handler `spin`, the container's command `/` and
//! its `args` reaching the guest, and the guest's exit code in the CRI container status
//! (what kubelet reports as the Job's result). The pod is torn down without leftovers.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::kubelet::{CgroupDriver, QosClass};
use cri_tests::node::{ContainerdVersion, Node};
use cri_tests::scenario::KubeletPod;

const COMMAND_IMAGE: &str = "docker.io/library/spin-command:cri";

/// Waits (bounded) until the container has exited; returns its CRI status text.
async fn wait_exited(cri: &mut Cri, id: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = cri.container_state(id).await?;
        // CONTAINER_EXITED = 2 in the CRI enum.
        if state.starts_with("state=2 ") {
            return Ok(state);
        }
        ensure!(
            Instant::now() < deadline,
            "container {id} did not exit: {state}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn command_app_exit_code_reaches_cri() -> Result<()> {
    if !integration::require_root("command_app_exit_code_reaches_cri") {
        return Ok(());
    }
    integration::require_shim()?;
    let dir = tempfile::tempdir()?;
    let base = integration::images::TestImages::build(dir.path())?;
    let app = integration::workspace_root().join("tests/apps/spin-command");
    let archive = dir.path().join("spin-command.tar");
    oci_image_builder::spin::container_image(COMMAND_IMAGE, &app, &[])
        .context("building the command image (fix: scripts/build-apps.sh)")?
        .write_archive(&archive)?;
    let node = Node::start(ContainerdVersion::V1_7, Layout::Hybrid, true)?;
    node.import(&base.pause)?;
    node.import(&archive)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let logs = node.dir().join("pod-logs");
        let pod = KubeletPod::start(
            &mut cri,
            Layout::Hybrid,
            CgroupDriver::Cgroupfs,
            QosClass::BestEffort,
            "spin",
            "spin-job",
            &logs,
        )
        .await?;
        let mut codes = Vec::new();
        for (name, args, want) in [
            ("job-code", vec!["exit-code", "3", "from-cri"], 3),
            ("job-ok", vec!["done"], 0),
        ] {
            let spec = ContainerSpec {
                name: name.into(),
                image: COMMAND_IMAGE.into(),
                command: vec!["/".into()],
                args: args.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            };
            let id = cri
                .start_container(&pod.sandbox_id, &pod.spec, &spec)
                .await?;
            let state = wait_exited(&mut cri, &id).await?;
            ensure!(
                state.contains(&format!("exit_code={want} ")),
                "{name}: expected exit code {want} in the CRI status, got {state}\n{}",
                node.log_tail()
            );
            let log = std::fs::read_to_string(pod.spec.log_directory.join(format!("{name}/0.log")))
                .unwrap_or_default();
            ensure!(
                log.contains(&format!("argv=runner|{}", args.join("|"))),
                "{name}: the pod's args should reach the guest; its log:\n{log}"
            );
            cri.remove_container(&id, 0).await?;
            codes.push(want);
        }
        println!("command app through CRI: exit codes {codes:?} reported by ContainerStatus");
        pod.teardown(&mut cri, &[]).await
    })
}
