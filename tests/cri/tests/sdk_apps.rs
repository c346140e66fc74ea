//! Every SDK app of `tests/apps` (Rust spin-sdk 2 and 3 wasip1, 5 wasip1/wasip2, 6 WASIp3;
//! JavaScript via componentize-js; Python spin-sdk 3 via componentize-py) as a pod through
//! CRI (root only): containerd 1.7 in the private cgroup v2 namespace with kubelet's systemd
//! driver, the `spin` handler, a kubelet-style pod cgroup; the container sits inside it, every
//! route answers exactly, and the teardown leaves nothing. Prints one `sdk-apps(cri):` line per
//! app (time from CreateContainer to the first answer, the app process's RSS).
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::kubelet::{CgroupDriver, QosClass};
use cri_tests::node::{ContainerdVersion, Images, Node};
use cri_tests::scenario::{self, KubeletPod};
use integration::sdk_apps::{rss_mib, SdkApp, SDK_APPS};
use oci_image_builder::spin;

const LAYOUT: Layout = Layout::Unified;

async fn one_app(cri: &mut Cri, node: &Node, app: &SdkApp, image: &str) -> Result<String> {
    let logs = node.dir().join("pod-logs");
    let pod = KubeletPod::start(
        cri,
        LAYOUT,
        CgroupDriver::Systemd,
        QosClass::BestEffort,
        "spin",
        app.dir,
        &logs,
    )
    .await?;
    let port = scenario::free_loopback_port()?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let spec = ContainerSpec {
        name: "app".into(),
        image: image.to_string(),
        command: vec!["/".into()],
        envs: vec![("SPIN_HTTP_LISTEN_ADDR".into(), addr.to_string())],
        ..Default::default()
    };
    let checks = async {
        let t = Instant::now();
        let id = cri
            .start_container(&pod.sandbox_id, &pod.spec, &spec)
            .await?;
        let pid = cri.container_pid(&id).await?;
        let first_path = app.routes[0].0;
        if let Err(e) = scenario::wait_http_ok(addr, first_path, Duration::from_secs(120)).await {
            let state = cri.container_state(&id).await.unwrap_or_default();
            bail!("{} did not come up ({state}): {e:#}", app.dir);
        }
        let first = t.elapsed();
        pod.check_inside(pid, app.dir)?;
        let routes = app.check_routes(|p| scenario::http_get(addr, p, Duration::from_secs(30)))?;
        let rss = rss_mib(pid);
        cri.remove_container(&id, 10).await?;
        anyhow::Ok((first, routes, rss, pid))
    }
    .await;
    let (first, routes, rss, pid) = match checks {
        Ok(v) => v,
        Err(e) => {
            let _ = cri.remove_pod(&pod.sandbox_id).await;
            return Err(e);
        }
    };
    pod.teardown(cri, &[pid]).await?;
    Ok(format!(
        "sdk-apps(cri): {} | {routes}/{} routes | first answer {} ms | RSS {rss} MiB",
        app.label(),
        app.routes.len(),
        first.as_millis()
    ))
}

fn run() -> Result<()> {
    let dir = integration::shim_bin_dir().join("cri-images-sdk-apps");
    let imgs = Images::build(&dir)?;
    let node = Node::start(ContainerdVersion::V1_7, LAYOUT, true)?;
    node.import(&imgs.pause)?;
    let mut images = Vec::new();
    for app in SDK_APPS {
        app.require_built()?;
        let image = format!("docker.io/library/{}:cri", app.dir);
        let tar = dir.join(format!("{}.tar", app.dir));
        spin::container_image(&image, &app.path(), &[])?.write_archive(&tar)?;
        node.import(&tar)?;
        images.push(image);
    }
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        for (app, image) in SDK_APPS.iter().zip(&images) {
            let line = one_app(&mut cri, &node, app, image)
                .await
                .with_context(|| format!("{} through CRI\n{}", app.dir, node.log_tail()))?;
            println!("{line}");
        }
        anyhow::Ok(())
    })
}

#[test]
fn every_sdk_app_serves_as_a_pod_through_cri() {
    let Some(_s) = integration::root_test("every_sdk_app_serves_as_a_pod_through_cri") else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}
