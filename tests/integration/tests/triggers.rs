//! Triggers other than HTTP through the shim (`ctr run --runtime io.containerd.spin.v2` on
//! containerd 1.7, spin-in-container images): the Redis-triggered `spin-redis-trigger`
//! app against a real redis-server on loopback (host network), restarted mid-stream; the
//! 1-second `spin-cron-trigger` app; the MQTT-triggered `spin-mqtt-trigger` app against a
//! real mosquitto; and the `spin-command` app (spin-in-container and
//! Spin OCI artifact forms), whose arguments come from `ctr run` and whose exit code is
//! `ctr run`'s.
//! Run as root: `cargo test --release -p integration --test triggers -- --nocapture`.

use test_support::servers;

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{
    require_shim, wait_for, workspace_root, CgroupMode, Containerd, ContainerdVersion,
};
use oci_image_builder::spin;

/// Builds the spin-in-container image of `tests/apps/<app>` (as `<app>:test`) and imports
/// it; returns the image name and the app directory.
fn import_app(
    c: &Containerd,
    dir: &std::path::Path,
    app: &str,
) -> Result<(String, std::path::PathBuf)> {
    let name = format!("docker.io/library/{app}:test");
    let tar = dir.join(format!("{app}.tar"));
    let app_dir = workspace_root().join("tests/apps").join(app);
    spin::container_image(&name, &app_dir, &[])?.write_archive(&tar)?;
    c.import(&tar, false)?;
    Ok((name, app_dir))
}

fn redis_app() -> Result<()> {
    require_shim()?;
    let mut redis = servers::redis();
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let (name, _) = import_app(&c, dir.path(), "spin-redis-trigger")?;
    let name = name.as_str();
    let env = format!("REDIS_ADDRESS=redis://{}", redis.addr());
    let app = c.run_spin_app(name, &["--env".into(), env])?;
    let subscribed = wait_for(Duration::from_secs(60), || {
        let out = redis.redis_cli(&["PUBSUB", "NUMSUB", "orders"]).ok()?;
        (out.lines().nth(1) == Some("1")).then_some(())
    });
    ensure!(
        subscribed.is_some(),
        "the app in the container did not subscribe to `orders`\n{}",
        c.log_tail(30)
    );
    redis.publish_orders_and_check("m", 0)?;
    // The server restarts (empty): the app reconnects and subscribes again.
    redis.restart();
    let resubscribed = wait_for(Duration::from_secs(60), || {
        let out = redis.redis_cli(&["PUBSUB", "NUMSUB", "orders"]).ok()?;
        (out.lines().nth(1) == Some("1")).then_some(())
    });
    ensure!(
        resubscribed.is_some(),
        "the app did not subscribe again after the restart\n{}",
        c.log_tail(30)
    );
    redis.publish_orders_and_check("n", 0)?;
    // SIGTERM: the task stops, exit 0.
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(20))?;
    // `ctr task delete` reports a non-zero exit status as its own exit code (older ctr) or
    // as a "non-zero exit code N" warning (newer ctr).
    let del = c.ctr_output(&["task", "delete", &app.id], Duration::from_secs(30))?;
    let stderr = String::from_utf8_lossy(&del.stderr);
    ensure!(
        del.status.code() == Some(0) && !stderr.contains("non-zero exit code"),
        "SIGTERM should end the app with 0: {stderr}"
    );
    Ok(())
}

#[test]
fn redis_triggered_app_through_the_shim() {
    let Some(_s) = integration::root_test("redis_triggered_app_through_the_shim") else {
        return;
    };
    redis_app().unwrap_or_else(|e| panic!("{e:#}"));
}

fn cron_app() -> Result<()> {
    require_shim()?;
    let redis = servers::redis();
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let (name, _) = import_app(&c, dir.path(), "spin-cron-trigger")?;
    let name = name.as_str();
    let env = format!("RECORD_ADDRESS=redis://{}", redis.addr());
    let app = c.run_spin_app(name, &["--env".into(), env])?;
    let llen = || -> Option<usize> { redis.redis_cli(&["LLEN", "ticks"]).ok()?.parse().ok() };
    // Six ticks of the 1-second schedule (however late a noisy machine runs them): each
    // records its own scheduled second, so they are six distinct, increasing whole seconds;
    // a tick fired twice or a burst of missed ones would repeat a second.
    wait_for(Duration::from_secs(120), || llen().filter(|n| *n >= 6))
        .with_context(|| format!("fewer than 6 cron ticks within 120 s\n{}", c.log_tail(30)))?;
    let ticks = redis.redis_cli(&["LRANGE", "ticks", "0", "-1"])?;
    let seen: Vec<u64> = ticks
        .lines()
        .map(|t| t.trim().parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("ticks are not timestamps: {ticks}"))?;
    ensure!(
        seen.windows(2).all(|w| w[1] > w[0]),
        "ticks are not distinct increasing seconds (a tick fired twice or out of order): {seen:?}"
    );
    println!(
        "cron through the shim: {} ticks over {} s of schedule",
        seen.len(),
        seen[seen.len() - 1] - seen[0]
    );
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(20))?;
    Ok(())
}

#[test]
fn cron_app_through_the_shim() {
    let Some(_s) = integration::root_test("cron_app_through_the_shim") else {
        return;
    };
    cron_app().unwrap_or_else(|e| panic!("{e:#}"));
}

fn mqtt_app() -> Result<()> {
    require_shim()?;
    let redis = servers::redis();
    let broker = servers::mosquitto();
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let (name, _) = import_app(&c, dir.path(), "spin-mqtt-trigger")?;
    let name = name.as_str();
    // A retained message reaches the app as soon as it has subscribed: the readiness probe.
    broker.mqtt_publish("sensors/ready", &["up".into()], true)?;
    let extra = [
        "--env".to_string(),
        format!("MQTT_ADDRESS=mqtt://{}", broker.addr()),
        "--env".to_string(),
        format!("RECORD_ADDRESS=redis://{}", redis.addr()),
    ];
    let app = c.run_spin_app(name, &extra)?;
    let seen = |n: usize| {
        wait_for(Duration::from_secs(60), || {
            let out = redis.redis_cli(&["LRANGE", "mqtt-seen", "0", "-1"]).ok()?;
            let l: Vec<String> = out.lines().map(str::to_string).collect();
            (l.len() >= n).then_some(l)
        })
    };
    seen(1).with_context(|| format!("the app did not subscribe\n{}", c.log_tail(30)))?;
    let sent: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    broker.mqtt_publish("sensors/temp", &sent, false)?;
    let got = seen(1 + sent.len()).context("the messages were not all handled within 60 s")?;
    std::thread::sleep(Duration::from_millis(500));
    let mut want = vec!["sensors/ready up".to_string()];
    want.extend(sent.iter().map(|m| format!("sensors/temp {m}")));
    let again = redis.redis_cli(&["LLEN", "mqtt-seen"])?;
    ensure!(
        got == want && again == want.len().to_string(),
        "each message once, in order: got {got:?}, then {again} entries"
    );
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(20))?;
    Ok(())
}

#[test]
fn mqtt_triggered_app_through_the_shim() {
    let Some(_s) = integration::root_test("mqtt_triggered_app_through_the_shim") else {
        return;
    };
    mqtt_app().unwrap_or_else(|e| panic!("{e:#}"));
}

/// `ctr run --rm` (attached) of the command app with `args`; returns ctr's exit code and
/// output.
fn run_command(c: &Containerd, image: &str, args: &[&str]) -> Result<(Option<i32>, String)> {
    let cmd: Vec<&str> = std::iter::once("/").chain(args.iter().copied()).collect();
    c.run_to_exit(image, &[], &cmd, Duration::from_secs(120))
}

fn command_app() -> Result<()> {
    require_shim()?;
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let (name, app_dir) = import_app(&c, dir.path(), "spin-command")?;
    let name = name.as_str();
    let (code, out) = run_command(&c, name, &["exit-code", "3", "job"])?;
    ensure!(
        code == Some(3),
        "exit-with-code 3 should reach ctr, got {code:?}: {out}"
    );
    ensure!(
        out.contains("argv=runner|exit-code|3|job"),
        "the container's args should reach the guest: {out}"
    );
    let (code, out) = run_command(&c, name, &["exit", "2"])?;
    ensure!(
        code == Some(1),
        "std::process::exit(2) is failure (1) on wasip2, got {code:?}: {out}"
    );
    let (code, out) = run_command(&c, name, &[])?;
    ensure!(
        code == Some(0),
        "a command returning from main exits 0, got {code:?}: {out}"
    );
    // The Spin OCI artifact form (locked app in the content store): `/` and the args.
    let artifact = "docker.io/library/spin-command:artifact";
    let tar = dir.path().join("command-artifact.tar");
    spin::artifact_image(artifact, &app_dir, spin::FileLayout::Simple)?.write_archive(&tar)?;
    c.import(&tar, true)?;
    let (code, out) = run_command(&c, artifact, &["exit-code", "4", "artifact"])?;
    ensure!(
        code == Some(4),
        "artifact form: exit code 4 should reach ctr, got {code:?}: {out}"
    );
    ensure!(out.contains("argv=runner|exit-code|4|artifact"), "{out}");
    Ok(())
}

#[test]
fn command_app_exit_code_reaches_ctr() {
    let Some(_s) = integration::root_test("command_app_exit_code_reaches_ctr") else {
        return;
    };
    command_app().unwrap_or_else(|e| panic!("{e:#}"));
}
