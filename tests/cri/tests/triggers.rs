//! A command-triggered Spin app as a Kubernetes Job would run it, through containerd 1.7's
//! CRI (root only): a kubelet-style pod with handler `spin`, the container's command `/` and
//! its `args` reaching the guest, and the guest's exit code in the CRI container status
//! (what kubelet reports as the Job's result). The pod is torn down without leftovers.
//!
//! Also: Redis-, cron- and MQTT-triggered apps in one pod (sharing its PID namespace)
//! against a real redis-server and mosquitto on loopback (pods share the host network here): each published message handled
//! once (Redis: across a server restart); a 1-second schedule gives 5 +/- 1 ticks in 5 s.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use test_support::servers;

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::kubelet::{CgroupDriver, QosClass};
use cri_tests::node::{ContainerdVersion, Node};
use cri_tests::scenario::KubeletPod;
use integration::wait_for;

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
    let rt = cri_tests::cri::runtime()?;
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

fn subscribed(redis: &servers::ServerProcess) -> bool {
    wait_for(Duration::from_secs(60), || {
        let out = redis.redis_cli(&["PUBSUB", "NUMSUB", "orders"]).ok()?;
        (out.lines().nth(1) == Some("1")).then_some(())
    })
    .is_some()
}

#[test]
fn redis_cron_and_mqtt_triggered_apps_through_cri() -> Result<()> {
    if !integration::require_root("redis_cron_and_mqtt_triggered_apps_through_cri") {
        return Ok(());
    }
    integration::require_shim()?;
    let mut redis = servers::redis();
    let broker = servers::mosquitto();
    let dir = tempfile::tempdir()?;
    let base = integration::images::TestImages::build(dir.path())?;
    let node = Node::start(ContainerdVersion::V1_7, Layout::Hybrid, true)?;
    node.import(&base.pause)?;
    // A retained message reaches the MQTT app as soon as it has subscribed: its readiness.
    broker.mqtt_publish("sensors/ready", &["up".into()], true)?;
    for app in [
        "spin-redis-trigger",
        "spin-cron-trigger",
        "spin-mqtt-trigger",
        "spin-redis-sdk6",
    ] {
        let archive = dir.path().join(format!("{app}.tar"));
        oci_image_builder::spin::container_image(
            &format!("docker.io/library/{app}:cri"),
            &integration::workspace_root().join("tests/apps").join(app),
            &[],
        )
        .with_context(|| format!("building {app} (fix: scripts/build-apps.sh)"))?
        .write_archive(&archive)?;
        node.import(&archive)?;
    }
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let logs = node.dir().join("pod-logs");
        let pod = KubeletPod::start(
            &mut cri,
            Layout::Hybrid,
            CgroupDriver::Systemd,
            QosClass::BestEffort,
            "spin",
            "spin-events",
            &logs,
        )
        .await?;
        let url = format!("redis://{}", redis.addr());
        let checks = async {
            let mut ids = Vec::new();
            let mqtt = format!("mqtt://{}", broker.addr());
            for (name, envs) in [
                (
                    "spin-mqtt-trigger",
                    vec![("MQTT_ADDRESS", mqtt.clone()), ("RECORD_ADDRESS", url.clone())],
                ),
                ("spin-redis-trigger", vec![("REDIS_ADDRESS", url.clone())]),
                ("spin-cron-trigger", vec![("RECORD_ADDRESS", url.clone())]),
                ("spin-redis-sdk6", vec![("REDIS_ADDRESS", url.clone())]),
            ] {
                let spec = ContainerSpec {
                    name: name.into(),
                    image: format!("docker.io/library/{name}:cri"),
                    command: vec!["/".into()],
                    envs: envs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    // One PID namespace for the pod: on cgroup v1 youki 0.7 alone fails the
                    // third container here ("failed to prepare rootfs"), see
                    // `Placement::v1_cgroup_mounts`.
                    share_process_namespace: true,
                    ..Default::default()
                };
                let id = cri
                    .start_container(&pod.sandbox_id, &pod.spec, &spec)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e:#}\ncontainerd log:\n{}", node.log_tail()))?;
                ids.push(id);
            }
            ensure!(subscribed(&redis), "the Redis app did not subscribe\n{}", node.log_tail());
            redis.publish_orders_and_check("m", 0)?;
            // Spin 4's form (spin-sdk 6, spin:redis/inbound-redis@3.0.0) on its own channel.
            let sdk6_seen = |n: usize| {
                wait_for(Duration::from_secs(60), || {
                    let out = redis.redis_cli(&["LRANGE", "sdk6-seen", "0", "-1"]).ok()?;
                    let l: Vec<String> = out.lines().map(str::to_string).collect();
                    let subscribers = redis.redis_cli(&["PUBSUB", "NUMSUB", "orders4"]).ok()?;
                    (l.len() >= n && subscribers.lines().nth(1) == Some("1")).then_some(l)
                })
            };
            sdk6_seen(0).context("the spin-sdk 6 Redis app did not subscribe")?;
            let sent4: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
            for m in &sent4 {
                redis.redis_cli(&["PUBLISH", "orders4", m])?;
            }
            let got4 = sdk6_seen(sent4.len()).context("Spin 4 Redis messages not all handled")?;
            let want4: Vec<String> = sent4.iter().map(|m| format!("sdk6:{m}")).collect();
            ensure!(got4 == want4, "each Spin 4 Redis message once, in order: {got4:?}");
            // The ticks' own timestamps (Unix seconds), as recorded: once each, in order.
            let ticks = |r: &servers::ServerProcess| -> Option<Vec<u64>> {
                let out = r.redis_cli(&["LRANGE", "ticks", "0", "-1"]).ok()?;
                out.lines().map(|t| t.parse().ok()).collect()
            };
            let first = wait_for(Duration::from_secs(60), || {
                ticks(&redis).filter(|l| !l.is_empty()).map(|l| l.len())
            })
            .context("no cron tick within 60 s")?;
            let recorded = wait_for(Duration::from_secs(60), || {
                ticks(&redis).filter(|l| l.len() >= first + 5)
            })
            .context("fewer than 5 more cron ticks within 60 s")?;
            ensure!(
                recorded.windows(2).all(|w| w[0] < w[1]),
                "cron ticks not once each, in order: {recorded:?}"
            );
            let fired = recorded.len() - first;
            let mqtt_seen = |n: usize| {
                wait_for(Duration::from_secs(60), || {
                    let out = redis.redis_cli(&["LRANGE", "mqtt-seen", "0", "-1"]).ok()?;
                    let l: Vec<String> = out.lines().map(str::to_string).collect();
                    (l.len() >= n).then_some(l)
                })
            };
            mqtt_seen(1).context("the MQTT app did not subscribe")?;
            let sent: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
            // rumqttc's blocking client runs its own runtime: not on this one's workers.
            tokio::task::block_in_place(|| broker.mqtt_publish("sensors/temp", &sent, false))?;
            let got = mqtt_seen(1 + sent.len()).context("MQTT messages not all handled in 60 s")?;
            std::thread::sleep(Duration::from_millis(500));
            let mut want = vec!["sensors/ready up".to_string()];
            want.extend(sent.iter().map(|m| format!("sensors/temp {m}")));
            ensure!(got == want, "each MQTT message once, in order: got {got:?}");
            // The server restarts empty: the app subscribes again, messages still once each.
            redis.restart();
            ensure!(subscribed(&redis), "no new subscription after the restart\n{}", node.log_tail());
            redis.publish_orders_and_check("n", 0)?;
            println!("redis + cron + mqtt through CRI: 10 + 10 Redis messages once each across a restart; 5 to the spin-sdk 6 app once each; {fired} ticks once each, in order; 10 MQTT messages once each");
            for id in &ids {
                cri.remove_container(id, 10).await?;
            }
            anyhow::Ok(())
        }
        .await;
        match checks {
            Ok(()) => pod.teardown(&mut cri, &[]).await,
            Err(e) => {
                let _ = cri.remove_pod(&pod.sandbox_id).await;
                Err(e)
            }
        }
    })
}
