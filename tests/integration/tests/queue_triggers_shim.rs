//! The SQS and NATS triggers through the shim (`ctr run --runtime io.containerd.spin.v2` on
//! containerd 1.7, host network, spin-in-container images of `tests/apps/spin-sqs-trigger`
//! and `tests/apps/spin-nats-trigger`), against moto's SQS server (`scripts/install-moto.sh`;
//! queues made and messages sent with boto3 from moto's venv), Debian's `nats-server`
//! (`scripts/install-nats.sh`; messages published over NATS's text protocol) and
//! redis-server, where the guests record what they handle (all started by
//! [`test_support::servers`]). All on loopback ports, started and stopped by pid.
//! Run as root: `cargo test --release --workspace --test queue_triggers_shim -- --nocapture`.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{
    require_shim, wait_for, workspace_root, CgroupMode, Containerd, ContainerdVersion,
};
use oci_image_builder::spin;
use test_support::servers::{self, ServerProcess};

/// The Redis list `key`.
fn lrange(redis: &ServerProcess, key: &str) -> Result<Vec<String>> {
    Ok(redis
        .redis_cli(&["LRANGE", key, "0", "-1"])?
        .lines()
        .map(str::to_string)
        .collect())
}

/// Builds the spin-in-container image of `tests/apps/<app>` and imports it.
fn import_app(c: &Containerd, dir: &std::path::Path, app: &str) -> Result<String> {
    let name = format!("docker.io/library/{app}:test");
    let tar = dir.join(format!("{app}.tar"));
    spin::container_image(&name, &workspace_root().join("tests/apps").join(app), &[])?
        .write_archive(&tar)?;
    c.import(&tar, false)?;
    Ok(name)
}

fn sqs_app() -> Result<()> {
    require_shim()?;
    let record = servers::redis();
    let moto = servers::moto();
    let endpoint = format!("http://{}", moto.addr());
    let queue = moto.boto_sqs("print(sqs.create_queue(QueueName='orders')['QueueUrl'])")?;
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let image = import_app(&c, dir.path(), "spin-sqs-trigger")?;
    let env: Vec<String> = [
        format!("QUEUE_URL={queue}"),
        format!("RECORD_ADDRESS=redis://{}", record.addr()),
        "AWS_ACCESS_KEY_ID=testing".into(),
        "AWS_SECRET_ACCESS_KEY=testing".into(),
        "AWS_REGION=us-east-1".into(),
        format!("AWS_ENDPOINT_URL={endpoint}"),
    ]
    .into_iter()
    .flat_map(|e| ["--env".to_string(), e])
    .collect();

    let app = c.run_spin_app(&image, &env)?;
    let bodies: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    let list = bodies
        .iter()
        .map(|b| format!("'{b}'"))
        .collect::<Vec<_>>()
        .join(",");
    moto.boto_sqs(&format!(
        "for b in [{list}]:\n    sqs.send_message(QueueUrl='{queue}', MessageBody=b)"
    ))?;
    let seen = wait_for(Duration::from_secs(60), || {
        let l = lrange(&record, "sqs-seen").ok()?;
        (l.len() >= bodies.len()).then_some(l)
    })
    .with_context(|| format!("the app did not handle the messages\n{}", c.log_tail(30)))?;
    for b in &bodies {
        ensure!(
            seen.iter().any(|l| l.starts_with(&format!("{b} "))),
            "{b} not handled: {seen:?}"
        );
    }
    let emptied = wait_for(Duration::from_secs(30), || {
        let n = moto
            .boto_sqs(&format!(
                "a = sqs.get_queue_attributes(QueueUrl='{queue}', AttributeNames=['All'])['Attributes']\n\
                 print(int(a['ApproximateNumberOfMessages']) + int(a['ApproximateNumberOfMessagesNotVisible']))"
            ))
            .ok()?;
        (n == "0").then_some(())
    });
    ensure!(emptied.is_some(), "handled messages were not deleted");
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(30))?;
    Ok(())
}

#[test]
fn sqs_triggered_app_through_the_shim() {
    let Some(_s) = integration::root_test("sqs_triggered_app_through_the_shim") else {
        return;
    };
    sqs_app().unwrap_or_else(|e| panic!("{e:#}"));
}

fn nats_app() -> Result<()> {
    require_shim()?;
    let record = servers::redis();
    let nats = servers::nats();
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let image = import_app(&c, dir.path(), "spin-nats-trigger")?;
    let env = [
        format!("NATS_ADDRESS=nats://{}", nats.addr()),
        format!("RECORD_ADDRESS=redis://{}", record.addr()),
    ]
    .into_iter()
    .flat_map(|e| ["--env".to_string(), e])
    .collect::<Vec<_>>();
    let app = c.run_spin_app(&image, &env)?;
    // Core NATS keeps nothing for a subscriber that is not there yet: probe until one lands.
    let mut n = 0;
    let subscribed = wait_for(Duration::from_secs(60), || {
        n += 1;
        nats.nats_publish("orders.probe", &[format!("p{n}")]).ok()?;
        let l = lrange(&record, "nats-seen").ok()?;
        l.iter()
            .any(|x| x.starts_with("orders.probe "))
            .then_some(())
    });
    ensure!(
        subscribed.is_some(),
        "the app did not subscribe\n{}",
        c.log_tail(30)
    );
    let sent: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
    nats.nats_publish("orders.new", &sent)?;
    let got = wait_for(Duration::from_secs(60), || {
        let l = lrange(&record, "nats-seen").ok()?;
        let got: Vec<String> = l
            .into_iter()
            .filter(|x| x.starts_with("orders.new "))
            .collect();
        (got.len() >= sent.len()).then_some(got)
    })
    .with_context(|| format!("not every message was handled\n{}", c.log_tail(30)))?;
    let want: Vec<String> = sent.iter().map(|m| format!("orders.new {m}")).collect();
    ensure!(got == want, "in order, once each: {got:?}");
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(30))?;
    Ok(())
}

#[test]
fn nats_triggered_app_through_the_shim() {
    let Some(_s) = integration::root_test("nats_triggered_app_through_the_shim") else {
        return;
    };
    nats_app().unwrap_or_else(|e| panic!("{e:#}"));
}
