//! The SQS, NATS and MQTT 0.8 triggers in kubelet-style pods, through containerd 1.7's CRI
//! (root only), against real servers on loopback (pods share the host network here):
//! moto's SQS (`scripts/install-moto.sh`, driven by boto3), Debian trixie's nats-server with
//! JetStream (`scripts/install-nats.sh`, driven over NATS's text protocol), mosquitto, and
//! redis-server, where the guests record each message they handle. All started and stopped
//! by pid by the tests.
//!
//! - SQS: each message handled once and deleted on `delete`; an error leaves it to come
//!   back (receive count 2); a container stopped while handlers run lets them finish and
//!   delete their messages, and the next container handles the rest, each once.
//! - NATS: a core subscription (queue group) and a JetStream durable consumer in one app;
//!   the durable consumer gets what was published while the pod was gone; a pod stopped
//!   while a handler runs lets it finish and acknowledge (confirmed by the server before
//!   the container exits), and the next pod gets the rest, each once.
//! - MQTT: spin-trigger-mqtt 0.8's async world beside 0.7's synchronous one, 5/5 each once.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::kubelet::{CgroupDriver, QosClass};
use cri_tests::node::{ContainerdVersion, Node};
use cri_tests::scenario::KubeletPod;
use integration::wait_for;
use test_support::servers::{self, ServerProcess};

/// The tests of this file run one at a time: pods of parallel tests would share kubelet's
/// parent cgroups, which only the test that made them removes.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// As root with the shim built: holds [`SERIAL`] for the test; `None` (skipped) when not
/// root.
fn begin(test: &str) -> Result<Option<std::sync::MutexGuard<'static, ()>>> {
    if !integration::require_root(test) {
        return Ok(None);
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    integration::require_shim()?;
    Ok(Some(serial))
}

/// The grace period kubelet gives a container by default (`terminationGracePeriodSeconds`).
const GRACE_SECS: i64 = 30;

/// A private containerd 1.7 node (hybrid cgroups) with the pause image and one app image.
struct Setup {
    node: Node,
    /// `docker.io/library/<name>:cri`, built from the app.
    image: String,
    _dir: tempfile::TempDir,
}

/// Where the app comes from: `tests/apps/<dir>`, or a manifest written here (`{WASM_DIR}`
/// standing for the built guest apps' dir).
enum App<'a> {
    Dir(&'a str),
    Manifest(&'a str),
}

/// Starts the node and imports the spin-in-container image of `app` as `name`.
fn setup(name: &str, app: App) -> Result<Setup> {
    let dir = tempfile::tempdir()?;
    let app_dir = match app {
        App::Dir(d) => integration::workspace_root().join("tests/apps").join(d),
        App::Manifest(m) => {
            let app = dir.path().join("app");
            std::fs::create_dir(&app)?;
            let wasm = integration::guest_apps_dir().display().to_string();
            std::fs::write(app.join("spin.toml"), m.replace("{WASM_DIR}", &wasm))?;
            app
        }
    };
    let image = format!("docker.io/library/{name}:cri");
    let archive = dir.path().join("images.tar");
    let base = integration::images::TestImages::build(dir.path())?;
    let node = Node::start(ContainerdVersion::V1_7, Layout::Hybrid, true)?;
    node.import(&base.pause)?;
    oci_image_builder::spin::container_image(&image, &app_dir, &[])
        .with_context(|| format!("building {name} (fix: scripts/build-apps.sh)"))?
        .write_archive(&archive)?;
    node.import(&archive)?;
    Ok(Setup {
        node,
        image,
        _dir: dir,
    })
}

/// The Redis list `key`.
fn lrange(redis: &ServerProcess, key: &str) -> Vec<String> {
    redis
        .redis_cli(&["LRANGE", key, "0", "-1"])
        .map(|out| out.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Waits (60 s at most) until `done` holds for the list `key`; returns the list, or an
/// error naming `what` and the list's last reading.
fn wait_list(
    redis: &ServerProcess,
    key: &str,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Result<Vec<String>> {
    wait_for(Duration::from_secs(60), || {
        let l = lrange(redis, key);
        done(&l).then_some(l)
    })
    .with_context(|| format!("{what}: the list `{key}` reads {:?}", lrange(redis, key)))
}

/// Lines of `list` starting with `prefix`, in order.
fn starting<'a>(list: &'a [String], prefix: &str) -> Vec<&'a str> {
    list.iter()
        .filter(|l| l.starts_with(prefix))
        .map(String::as_str)
        .collect()
}

/// A kubelet-style pod (systemd driver, BestEffort, handler `spin`).
async fn pod(cri: &mut Cri, node: &Node, name: &str) -> Result<KubeletPod> {
    KubeletPod::start(
        cri,
        Layout::Hybrid,
        CgroupDriver::Systemd,
        QosClass::BestEffort,
        "spin",
        name,
        &node.dir().join("pod-logs"),
    )
    .await
}

/// Starts container `name` of `image` (command `/`) in `pod` with `envs`.
async fn start(
    cri: &mut Cri,
    node: &Node,
    pod: &KubeletPod,
    name: &str,
    image: &str,
    envs: &[(&str, String)],
) -> Result<String> {
    let spec = ContainerSpec {
        name: name.into(),
        image: image.into(),
        command: vec!["/".into()],
        envs: envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..Default::default()
    };
    cri.start_container(&pod.sandbox_id, &pod.spec, &spec)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "starting {name}: {e:#}\ncontainerd log:\n{}",
                node.log_tail()
            )
        })
}

/// The log kubelet would show for container `name` of `pod`.
fn container_log(pod: &KubeletPod, name: &str) -> String {
    std::fs::read_to_string(pod.spec.log_directory.join(format!("{name}/0.log")))
        .unwrap_or_default()
}

/// StopContainer (kubelet's default grace period) and RemoveContainer; returns how long the
/// stop took and checks the app drained by itself (exit on SIGTERM, no drain timeout).
async fn stop(cri: &mut Cri, pod: &KubeletPod, id: &str, name: &str) -> Result<Duration> {
    let started = Instant::now();
    cri.remove_container(id, GRACE_SECS).await?;
    let took = started.elapsed();
    let log = container_log(pod, name);
    ensure!(
        !log.contains("drain timeout"),
        "{name} did not drain within the bound; its log:\n{log}"
    );
    ensure!(
        took < Duration::from_secs(GRACE_SECS as u64),
        "{name} was killed after the grace period instead of stopping on SIGTERM"
    );
    Ok(took)
}

// ---------------------------------------------------------------------------------------
// SQS

/// Visible plus in-flight messages of `queue`.
fn sqs_remaining(moto: &ServerProcess, queue: &str) -> Result<u64> {
    let out = moto.boto_sqs(&format!(
        "a = sqs.get_queue_attributes(QueueUrl='{queue}', AttributeNames=['All'])['Attributes']\n\
         print(int(a['ApproximateNumberOfMessages']), int(a['ApproximateNumberOfMessagesNotVisible']))"
    ))?;
    let n: Vec<u64> = out
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok(n.iter().sum())
}

/// Messages of `queue` received and not yet deleted or back.
fn sqs_in_flight(moto: &ServerProcess, queue: &str) -> Result<u64> {
    Ok(moto
        .boto_sqs(&format!(
            "print(sqs.get_queue_attributes(QueueUrl='{queue}', \
             AttributeNames=['ApproximateNumberOfMessagesNotVisible'])['Attributes']\
             ['ApproximateNumberOfMessagesNotVisible'])"
        ))?
        .parse()?)
}

fn sqs_send(moto: &ServerProcess, queue: &str, bodies: &[String]) -> Result<()> {
    let bodies = serde_json::to_string(bodies)?;
    moto.boto_sqs(&format!(
        "for b in json.loads('{bodies}'):\n    sqs.send_message(QueueUrl='{queue}', MessageBody=b)"
    ))?;
    Ok(())
}

#[test]
fn sqs_trigger_in_a_pod_deletes_redelivers_and_drains_on_stop() -> Result<()> {
    let Some(_serial) = begin("sqs_trigger_in_a_pod_deletes_redelivers_and_drains_on_stop")? else {
        return Ok(());
    };
    let redis = servers::redis();
    let moto = servers::moto();
    // A short visibility timeout: an error comes back within seconds; slow handlers renew
    // their lease (every 2 s) while they run.
    let create = |name: &str| {
        moto.boto_sqs(&format!(
            "print(sqs.create_queue(QueueName='{name}', \
             Attributes={{'VisibilityTimeout': '4'}})['QueueUrl'])"
        ))
    };
    let (orders, drain) = (create("orders")?, create("drain")?);
    let Setup { node, image, _dir } = setup("spin-sqs-trigger", App::Dir("spin-sqs-trigger"))?;
    let envs = |queue: &str| {
        vec![
            ("QUEUE_URL", queue.to_string()),
            ("RECORD_ADDRESS", format!("redis://{}", redis.addr())),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", format!("http://{}", moto.addr())),
        ]
    };
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let pod = pod(&mut cri, &node, "spin-sqs").await?;
        let sandbox = pod.sandbox_id.clone();
        let checks = async {
            let id = start(&mut cri, &node, &pod, "sqs", &image, &envs(&orders)).await?;
            let mut sent: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
            sent.push("fail".into());
            sqs_send(&moto, &orders, &sent)?;
            sent.pop();
            let seen = wait_list(&redis, "sqs-seen", "8 messages and `fail` twice", |l| {
                sent.iter()
                    .all(|m| !starting(l, &format!("{m} ")).is_empty())
                    && starting(l, "fail ").len() >= 2
            })
            .with_context(|| node.log_tail())?;
            for m in &sent {
                let lines = starting(&seen, &format!("{m} "));
                ensure!(
                    lines.len() == 1 && lines[0].contains("ApproximateReceiveCount=1"),
                    "{m} should be handled once, on its first receive: {lines:?}"
                );
            }
            let fails = starting(&seen, "fail ");
            ensure!(
                fails[1].contains("ApproximateReceiveCount=2"),
                "an error leaves the message to come back: {fails:?}"
            );
            // Deleted on `delete`: only `fail` stays.
            let left = wait_for(Duration::from_secs(30), || {
                sqs_remaining(&moto, &orders).ok().filter(|n| *n == 1)
            });
            ensure!(
                left.is_some(),
                "handled messages were not all deleted: {} left",
                sqs_remaining(&moto, &orders)?
            );
            stop(&mut cri, &pod, &id, "sqs").await?;

            // Stopped while handlers run: each finishes and deletes its message.
            let slow: Vec<String> = (0..10).map(|i| format!("slow{i}")).collect();
            sqs_send(&moto, &drain, &slow)?;
            let id = start(&mut cri, &node, &pod, "sqs-stopped", &image, &envs(&drain)).await?;
            wait_for(Duration::from_secs(60), || {
                sqs_in_flight(&moto, &drain).ok().filter(|n| *n > 0)
            })
            .with_context(|| format!("no message was received\n{}", node.log_tail()))?;
            let took = stop(&mut cri, &pod, &id, "sqs-stopped").await?;
            let handled = starting(&lrange(&redis, "sqs-seen"), "slow").len() as u64;
            let remaining = sqs_remaining(&moto, &drain)?;
            let invisible = sqs_in_flight(&moto, &drain)?;
            ensure!(
                invisible == 0,
                "{invisible} message(s) received by the stopped container and neither handled \
                 nor released: they wait out their visibility timeout\n{}",
                container_log(&pod, "sqs-stopped")
            );
            ensure!(
                handled > 0,
                "the handlers in flight at the stop did not finish\n{}",
                container_log(&pod, "sqs-stopped")
            );
            ensure!(
                handled + remaining == slow.len() as u64,
                "{handled} handled at the stop but {remaining} of {} still on the queue: \
                 a handled message was not deleted (it would be handled again)",
                slow.len()
            );
            // The next container gets the rest; each message once in all.
            let restarted = Instant::now();
            let id = start(&mut cri, &node, &pod, "sqs-after", &image, &envs(&drain)).await?;
            let seen = wait_list(&redis, "sqs-seen", "every slow message", |l| {
                slow.iter()
                    .all(|m| !starting(l, &format!("{m} ")).is_empty())
            })?;
            let rest = restarted.elapsed();
            for m in &slow {
                let n = starting(&seen, &format!("{m} ")).len();
                ensure!(n == 1, "{m} handled {n} times across the stop: {seen:?}");
            }
            let emptied = wait_for(Duration::from_secs(30), || {
                sqs_remaining(&moto, &drain).ok().filter(|n| *n == 0)
            });
            ensure!(emptied.is_some(), "the drain queue did not empty");
            stop(&mut cri, &pod, &id, "sqs-after").await?;
            println!(
                "sqs through CRI: 8/8 once and deleted, `fail` redelivered (receive count 2); \
                 stopped with handlers in flight in {took:?}: {handled} handled and deleted, \
                 {remaining} left; the next container handled the rest in {rest:?}, each once"
            );
            anyhow::Ok(())
        };
        match checks.await {
            Ok(()) => pod.teardown(&mut cri, &[]).await,
            Err(e) => {
                let _ = cri.remove_pod(&sandbox).await;
                Err(e)
            }
        }
    })
}

// ---------------------------------------------------------------------------------------
// NATS

/// The spin-nats-trigger guest on a core subscription (`orders.>`, queue group `workers`)
/// and a JetStream durable consumer (`jobs.>` of stream `JOBS`).
const NATS_APP: &str = r#"
spin_manifest_version = 2
[application]
name = "nats-pod"
[variables]
nats_address = { required = true }
record_address = { required = true }
[application.trigger.nats]
address = "{{ nats_address }}"
[[trigger.nats]]
component = "recorder"
subject = "orders.>"
queue_group = "workers"
[[trigger.nats]]
component = "recorder"
subject = "jobs.>"
jetstream = { stream = "JOBS", durable = "spin-jobs" }
[component.recorder]
source = "{WASM_DIR}/spin_nats_trigger.wasm"
allowed_outbound_hosts = ["redis://*:*"]
[component.recorder.variables]
record_address = "{{ record_address }}"
record_key = "nats-seen"
"#;

/// A field of the durable consumer's info (`$JS.API.CONSUMER.INFO`), e.g.
/// `/ack_floor/stream_seq`.
fn consumer_info(nats: &ServerProcess, pointer: &str) -> Result<u64> {
    let info = nats.nats_request("$JS.API.CONSUMER.INFO.JOBS.spin-jobs", "")?;
    let v: serde_json::Value = serde_json::from_str(&info)?;
    v.pointer(pointer)
        .and_then(serde_json::Value::as_u64)
        .with_context(|| format!("no {pointer} in the consumer info {info}"))
}

#[test]
fn nats_trigger_in_pods_core_and_durable_jetstream_across_pod_restarts() -> Result<()> {
    let Some(_serial) =
        begin("nats_trigger_in_pods_core_and_durable_jetstream_across_pod_restarts")?
    else {
        return Ok(());
    };
    let redis = servers::redis();
    let nats = servers::nats();
    let created = nats.nats_request(
        "$JS.API.STREAM.CREATE.JOBS",
        r#"{"name":"JOBS","subjects":["jobs.>"]}"#,
    )?;
    ensure!(
        created.contains("\"config\""),
        "stream JOBS not created: {created}"
    );
    let Setup { node, image, _dir } = setup("spin-nats-pod", App::Manifest(NATS_APP))?;
    let envs = vec![
        ("NATS_ADDRESS", format!("nats://{}", nats.addr())),
        ("RECORD_ADDRESS", format!("redis://{}", redis.addr())),
    ];
    let jobs = |list: &[String]| -> Vec<String> {
        starting(list, "jobs.")
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        // The running pod, outside the checks: on failure it is removed before its cgroups.
        let mut live: Option<KubeletPod> = None;
        let checks = async {
            let first = &*live.insert(pod(&mut cri, &node, "spin-nats-1").await?);
            let id = start(&mut cri, &node, first, "nats", &image, &envs).await?;
            // Core NATS keeps nothing for a subscriber that is not there yet: probe.
            let mut n = 0;
            wait_for(Duration::from_secs(60), || {
                n += 1;
                nats.nats_publish("orders.probe", &[format!("p{n}")]).ok()?;
                (!starting(&lrange(&redis, "nats-seen"), "orders.probe ").is_empty()).then_some(())
            })
            .with_context(|| format!("the core subscription did not start\n{}", node.log_tail()))?;
            let sent: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
            nats.nats_publish("orders.new", &sent)?;
            let seen = wait_list(&redis, "nats-seen", "10 core messages", |l| {
                starting(l, "orders.new ").len() >= sent.len()
            })?;
            let want: Vec<String> = sent.iter().map(|m| format!("orders.new {m}")).collect();
            ensure!(
                starting(&seen, "orders.new ") == want,
                "core: in order, once each: {seen:?}"
            );
            let before: Vec<String> = (0..3).map(|i| format!("j{i}")).collect();
            nats.jetstream_publish("jobs.build", &before)?;
            wait_list(&redis, "nats-seen", "3 JetStream messages", |l| {
                jobs(l).len() >= 3
            })?;
            stop(&mut cri, first, &id, "nats").await?;
            live.take()
                .context("the pod")?
                .teardown(&mut cri, &[])
                .await?;

            // Published while no pod runs: the durable consumer keeps them.
            let meanwhile: Vec<String> = (3..6).map(|i| format!("j{i}")).collect();
            nats.jetstream_publish("jobs.build", &meanwhile)?;
            let second = &*live.insert(pod(&mut cri, &node, "spin-nats-2").await?);
            let id = start(&mut cri, &node, second, "nats", &image, &envs).await?;
            let seen = wait_list(
                &redis,
                "nats-seen",
                "JetStream messages after the restart",
                |l| jobs(l).len() >= 6,
            )
            .with_context(|| node.log_tail())?;
            let want: Vec<String> = (0..6).map(|i| format!("jobs.build j{i}")).collect();
            ensure!(
                jobs(&seen) == want,
                "durable: in order, once each across the pods: {seen:?}"
            );

            // Stopped while a handler runs (1.5 s each: once one is recorded, the next one
            // runs): it finishes and is acknowledged before the container exits; the rest
            // waits. How many finish depends on how long the stop takes to arrive, so the
            // server's accounting is checked: every handled message acknowledged, none
            // delivered and left unsettled.
            let slow: Vec<String> = (0..6).map(|i| format!("slow{i}")).collect();
            nats.jetstream_publish("jobs.slow", &slow)?;
            wait_list(&redis, "nats-seen", "the first slow message", |l| {
                !starting(l, "jobs.slow ").is_empty()
            })?;
            let took = stop(&mut cri, second, &id, "nats").await?;
            live.take()
                .context("the pod")?
                .teardown(&mut cri, &[])
                .await?;
            let handled = starting(&lrange(&redis, "nats-seen"), "jobs.slow ").len() as u64;
            ensure!(
                handled < slow.len() as u64,
                "all {handled} slow messages were handled: the stop did not stop the pulls"
            );
            let floor = consumer_info(&nats, "/ack_floor/stream_seq")?;
            let unsettled = consumer_info(&nats, "/num_ack_pending")?;
            // Stream sequences: j0..j5 are 1-6, slow0..slow5 7-12.
            ensure!(
                (floor, unsettled) == (6 + handled, 0),
                "{handled} slow messages handled at the stop but the ack floor is {floor} \
                 (want {}) and {unsettled} delivered message(s) are not settled: a message \
                 was taken and not acknowledged before the container exited",
                6 + handled
            );
            let third = &*live.insert(pod(&mut cri, &node, "spin-nats-3").await?);
            let restarted = Instant::now();
            let id = start(&mut cri, &node, third, "nats", &image, &envs).await?;
            let seen = wait_list(&redis, "nats-seen", "every slow message", |l| {
                starting(l, "jobs.slow ").len() >= slow.len()
            })?;
            let rest = restarted.elapsed();
            let want: Vec<String> = slow.iter().map(|m| format!("jobs.slow {m}")).collect();
            ensure!(
                starting(&seen, "jobs.slow ") == want,
                "slow messages: in order, once each across the stop: {seen:?}"
            );
            let floor = wait_for(Duration::from_secs(30), || {
                consumer_info(&nats, "/ack_floor/stream_seq")
                    .ok()
                    .filter(|f| *f == 12)
            });
            ensure!(floor.is_some(), "not every message was acknowledged");
            stop(&mut cri, third, &id, "nats").await?;
            live.take()
                .context("the pod")?
                .teardown(&mut cri, &[])
                .await?;
            println!(
                "nats through CRI: 10/10 core once in order; JetStream durable 3 + 3 published \
                 while no pod ran, once each; stopped with a handler in flight in {took:?}: \
                 {handled} handled and acknowledged, the next pod got the other {} in {rest:?}",
                slow.len() as u64 - handled
            );
            anyhow::Ok(())
        };
        let result = checks.await;
        if result.is_err() {
            if let Some(pod) = live.take() {
                let _ = cri.remove_pod(&pod.sandbox_id).await;
            }
        }
        result
    })
}

// ---------------------------------------------------------------------------------------
// MQTT

#[test]
fn mqtt_plugin_08_async_world_beside_07_in_a_pod() -> Result<()> {
    let Some(_serial) = begin("mqtt_plugin_08_async_world_beside_07_in_a_pod")? else {
        return Ok(());
    };
    let redis = servers::redis();
    let broker = servers::mosquitto();
    // A retained message reaches each trigger as soon as it has subscribed: its readiness.
    broker.mqtt_publish("sensors/ready", &["up".into()], true)?;
    let Setup { node, image, _dir } = setup("spin-mqtt-async", App::Dir("spin-mqtt-async"))?;
    let envs = vec![
        ("MQTT_ADDRESS", format!("mqtt://{}", broker.addr())),
        ("RECORD_ADDRESS", format!("redis://{}", redis.addr())),
    ];
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let pod = pod(&mut cri, &node, "spin-mqtt").await?;
        let sandbox = pod.sandbox_id.clone();
        let checks = async {
            let id = start(&mut cri, &node, &pod, "mqtt", &image, &envs).await?;
            wait_list(&redis, "mqtt-seen", "both triggers subscribed", |l| {
                l.iter().any(|x| x == "async:sensors/ready up")
                    && l.iter().any(|x| x == "sensors/ready up")
            })
            .with_context(|| node.log_tail())?;
            let mut sent: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
            sent.insert(2, "fail".into());
            // The end marker: once both have it, each handled everything before it.
            sent.push("end".into());
            // rumqttc's blocking client runs its own runtime: not on this one's workers.
            tokio::task::block_in_place(|| broker.mqtt_publish("sensors/temp", &sent, false))?;
            let seen = wait_list(&redis, "mqtt-seen", "the end marker by both", |l| {
                l.iter().any(|x| x == "async:sensors/temp end")
                    && l.iter().any(|x| x == "sensors/temp end")
            })?;
            sent.retain(|m| m != "fail");
            for prefix in ["async:sensors/temp ", "sensors/temp "] {
                let want: Vec<String> = sent.iter().map(|m| format!("{prefix}{m}")).collect();
                ensure!(
                    starting(&seen, prefix) == want,
                    "`{prefix}`: 5/5 once each in order (`fail` not recorded): {seen:?}"
                );
            }
            let log = container_log(&pod, "mqtt");
            ensure!(
                log.matches("mqtt handler returned an error: asked to fail").count() == 2,
                "both forms' errors are logged; the log:\n{log}"
            );
            stop(&mut cri, &pod, &id, "mqtt").await?;
            println!("mqtt through CRI: plugin 0.8 async world and 0.7 sync world, 5/5 once each in order, both errors logged");
            anyhow::Ok(())
        };
        match checks.await {
            Ok(()) => pod.teardown(&mut cri, &[]).await,
            Err(e) => {
                let _ = cri.remove_pod(&sandbox).await;
                Err(e)
            }
        }
    })
}
