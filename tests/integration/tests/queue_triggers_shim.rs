//! The SQS and NATS triggers through the shim (`ctr run --runtime io.containerd.spin.v2` on
//! containerd 1.7, host network, spin-in-container images of `tests/apps/spin-sqs-trigger`
//! and `tests/apps/spin-nats-trigger`), against moto's SQS server (`scripts/install-moto.sh`;
//! queues made and messages sent with boto3 from moto's venv), Debian's `nats-server`
//! (`scripts/install-nats.sh`; messages published over NATS's text protocol) and
//! redis-server, where the guests record what they handle. All on loopback ports, started
//! and stopped by pid.
//! Run as root: `cargo test --release --workspace --test queue_triggers_shim -- --nocapture`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{
    require_shim, wait_for, workspace_root, CgroupMode, Containerd, ContainerdVersion,
};
use oci_image_builder::spin;

/// A server on a loopback port, with its temp dir; stopped by pid on drop.
struct Proc {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Proc {
    /// Starts `argv` (`{port}` and `{dir}` filled in); waits (bounded) for the port.
    fn start(argv: &[&str]) -> Result<Proc> {
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let argv: Vec<String> = argv
            .iter()
            .map(|a| {
                a.replace("{port}", &port.to_string())
                    .replace("{dir}", &dir.path().display().to_string())
            })
            .collect();
        let log = std::fs::File::create(dir.path().join("server.log"))?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", argv[0]))?;
        let p = Proc {
            port,
            child,
            _dir: dir,
        };
        wait_for(Duration::from_secs(60), || {
            TcpStream::connect_timeout(&p.addr(), Duration::from_millis(200)).ok()
        })
        .with_context(|| format!("{} did not listen on {}", argv[0], p.addr()))?;
        Ok(p)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        if wait_for(Duration::from_secs(15), || {
            self.child.try_wait().ok().flatten()
        })
        .is_none()
        {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `scripts/<script>` and returns the path it prints.
fn installed(script: &str) -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg(workspace_root().join("scripts").join(script))
        .stderr(Stdio::inherit())
        .output()?;
    ensure!(out.status.success(), "scripts/{script} failed");
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

fn redis() -> Result<Proc> {
    Proc::start(&[
        "redis-server",
        "--port",
        "{port}",
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--dir",
        "{dir}",
    ])
}

/// The Redis list `key` (through redis-cli).
fn lrange(redis: &Proc, key: &str) -> Result<Vec<String>> {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "LRANGE", key, "0", "-1"])
        .output()?;
    ensure!(out.status.success(), "redis-cli failed");
    Ok(String::from_utf8(out.stdout)?
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

/// boto3 (moto's venv) against the moto server at `endpoint`; returns stdout.
fn boto(python: &std::path::Path, endpoint: &str, code: &str) -> Result<String> {
    let script = format!(
        "import boto3\nsqs = boto3.client('sqs', endpoint_url='{endpoint}', \
         region_name='us-east-1', aws_access_key_id='testing', \
         aws_secret_access_key='testing')\n{code}\n"
    );
    let out = Command::new(python).args(["-c", &script]).output()?;
    ensure!(
        out.status.success(),
        "boto3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

fn sqs_app() -> Result<()> {
    require_shim()?;
    let record = redis()?;
    let moto_server = installed("install-moto.sh")?;
    let python = moto_server.with_file_name("python3");
    let moto = Proc::start(&[
        moto_server.to_str().unwrap(),
        "-H",
        "127.0.0.1",
        "-p",
        "{port}",
    ])?;
    let endpoint = format!("http://{}", moto.addr());
    let queue = boto(
        &python,
        &endpoint,
        "print(sqs.create_queue(QueueName='orders')['QueueUrl'])",
    )?;
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
    boto(
        &python,
        &endpoint,
        &format!("for b in [{list}]:\n    sqs.send_message(QueueUrl='{queue}', MessageBody=b)"),
    )?;
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
        let n = boto(
            &python,
            &endpoint,
            &format!(
                "a = sqs.get_queue_attributes(QueueUrl='{queue}', AttributeNames=['All'])['Attributes']\n\
                 print(int(a['ApproximateNumberOfMessages']) + int(a['ApproximateNumberOfMessagesNotVisible']))"
            ),
        )
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

/// Publishes `payloads` on `subject` over NATS's text protocol; returns after the server's
/// PONG (all processed).
fn nats_publish(server: &Proc, subject: &str, payloads: &[String]) -> Result<()> {
    let mut s = TcpStream::connect(server.addr())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut out = String::from("CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
    for p in payloads {
        out.push_str(&format!("PUB {subject} {}\r\n{p}\r\n", p.len()));
    }
    out.push_str("PING\r\n");
    s.write_all(out.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        ensure!(
            r.read_line(&mut line)? > 0,
            "nats-server closed the connection"
        );
        if line.starts_with("PONG") {
            return Ok(());
        }
        ensure!(!line.starts_with("-ERR"), "nats-server: {line}");
    }
}

fn nats_app() -> Result<()> {
    require_shim()?;
    let record = redis()?;
    let nats_bin = installed("install-nats.sh")?;
    let nats = Proc::start(&[
        nats_bin.to_str().unwrap(),
        "-a",
        "127.0.0.1",
        "-p",
        "{port}",
    ])?;
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
        nats_publish(&nats, "orders.probe", &[format!("p{n}")]).ok()?;
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
    nats_publish(&nats, "orders.new", &sent)?;
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
