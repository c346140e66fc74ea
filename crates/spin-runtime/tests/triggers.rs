//! Triggers other than HTTP through `spin-serve`, against real servers (redis-server and
//! mosquitto on loopback, from `scripts/setup.sh`): our guest apps `spin-redis-trigger`,
//! `spin-mqtt-trigger`, `spin-cron-trigger` (each records what it handles by RPUSH to a
//! Redis list, so the test counts) and `spin-command`.

mod common;
mod servers;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{app_from_manifest, Server};

/// A `spin-serve` run of an app that may have no HTTP trigger: started, and waited for
/// (bounded) until it prints `spin-serve: ready`; stopped by its pid on drop.
struct Triggered {
    child: Child,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<String>>,
    _cache: tempfile::TempDir,
}

fn collect(
    stream: impl std::io::Read + Send + 'static,
    log: Arc<Mutex<String>>,
    echo: &'static str,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            eprintln!("[{echo}] {line}");
            let mut l = log.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
}

impl Triggered {
    fn spawn(app: &Path, env: &[(&str, String)], args: &[&str]) -> Triggered {
        let cache = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spin-serve"));
        cmd.arg(app)
            .args(["--listen", "127.0.0.1:0"])
            .env("SPIN_SHIM_COMPILE_CACHE_DIR", cache.path())
            .env("RUST_LOG", "spin_runtime=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if !args.is_empty() {
            cmd.arg("--").args(args);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn spin-serve");
        let (stdout, stderr) = (Arc::default(), Arc::default());
        collect(child.stdout.take().unwrap(), Arc::clone(&stdout), "stdout");
        collect(
            child.stderr.take().unwrap(),
            Arc::clone(&stderr),
            "spin-serve",
        );
        Triggered {
            child,
            stderr,
            stdout,
            _cache: cache,
        }
    }

    fn start(app: &Path, env: &[(&str, String)]) -> Triggered {
        let mut t = Self::spawn(app, env, &[]);
        let ready = t.wait_for(
            &t.stdout.clone(),
            "spin-serve: ready",
            1,
            Duration::from_secs(120),
        );
        assert!(
            ready,
            "spin-serve did not get ready; stderr:\n{}",
            t.stderr()
        );
        t
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (bounded) until `needle` occurs `count` times in `log`, or the process exits.
    fn wait_for(&mut self, log: &Mutex<String>, needle: &str, count: usize, t: Duration) -> bool {
        let deadline = Instant::now() + t;
        while Instant::now() < deadline {
            if log.lock().unwrap().matches(needle).count() >= count {
                return true;
            }
            if self.child.try_wait().unwrap().is_some() {
                std::thread::sleep(Duration::from_millis(100));
                return log.lock().unwrap().matches(needle).count() >= count;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn wait_stderr(&mut self, needle: &str, count: usize) -> bool {
        let log = self.stderr.clone();
        self.wait_for(&log, needle, count, Duration::from_secs(30))
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Triggered {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(self.child.id().to_string())
                .status();
            self.signal("TERM");
            if self.wait_exit(Duration::from_secs(15)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A blocking connection to a test Redis server.
fn redis_conn(server: &servers::ServerProcess) -> redis::Connection {
    redis::Client::open(format!("redis://{}", server.addr()))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect to the test redis")
}

fn list(conn: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

/// Waits (bounded, 30 s) until `cond` holds for a fresh reading of `key`.
fn wait_list(
    server: &servers::ServerProcess,
    key: &str,
    cond: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = list(&mut redis_conn(server), key);
        if cond(&l) || Instant::now() > deadline {
            return l;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (bounded, 30 s) until `channel` has `n` subscribers.
fn wait_subscribers(server: &servers::ServerProcess, channel: &str, n: i64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut c) = redis::Client::open(format!("redis://{}", server.addr()))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
        {
            let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query(&mut c)
                .unwrap();
            if counts.first().map(|(_, n)| *n) == Some(n) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn publish(server: &servers::ServerProcess, channel: &str, payload: &str) {
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel)
        .arg(payload)
        .query(&mut redis_conn(server))
        .unwrap();
}

/// Each of `want` exactly once in `got` (any order), nothing else.
fn assert_exactly_once(got: &[String], want: &[String]) {
    let mut g = got.to_vec();
    let mut w = want.to_vec();
    g.sort();
    w.sort();
    assert_eq!(g, w, "each message handled exactly once");
}

/// Waits (bounded) until `key` holds as many entries as `want`, checks that no more arrive
/// within 0.5 s and that each of `want` is there exactly once; returns the list.
fn assert_recorded(server: &servers::ServerProcess, key: &str, want: &[String]) -> Vec<String> {
    let got = wait_list(server, key, |l| l.len() >= want.len());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        got,
        list(&mut redis_conn(server), key),
        "handled again later"
    );
    assert_exactly_once(&got, want);
    got
}

impl Triggered {
    /// SIGTERM; the process must exit 0 within the drain bound (10 s) and a margin.
    fn stop_cleanly(&mut self) {
        self.signal("TERM");
        let code = self.wait_exit(Duration::from_secs(12));
        assert_eq!(code, Some(0), "{}", self.stderr());
    }
}

const REDIS_APP: &str = r#"
spin_manifest_version = 2
[application]
name = "redis-recorder"
[variables]
redis_address = { required = true }
record_key = { default = "seen" }
[application.trigger.redis]
address = "{{ redis_address }}"
[[trigger.redis]]
channel = "orders"
component = "recorder"
[component.recorder]
source = "{WASM_DIR}/spin_redis_trigger.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.recorder.variables]
record_address = "{{ redis_address }}"
record_key = "{{ record_key }}"
"#;

#[test]
fn redis_messages_handled_exactly_once_across_a_server_restart() {
    let mut redis = servers::redis();
    let app = app_from_manifest(REDIS_APP);
    let address = format!("redis://{}", redis.addr());
    let mut serve = Triggered::start(app.path(), &[("REDIS_ADDRESS", address)]);
    assert!(
        wait_subscribers(&redis, "orders", 1),
        "not subscribed:\n{}",
        serve.stderr()
    );

    // A failing handler is logged and the next messages are handled.
    let first: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
    for (i, m) in first.iter().enumerate() {
        publish(&redis, "orders", m);
        if i == 4 {
            publish(&redis, "orders", "fail");
        }
    }
    let got = assert_recorded(&redis, "seen", &first);
    // Messages of one server are handled in order.
    assert_eq!(got, first);
    assert!(
        serve.wait_stderr("redis handler returned an error", 1),
        "{}",
        serve.stderr()
    );

    // The server goes away and comes back (empty: no persistence): the trigger
    // reconnects with backoff and subscribes again.
    let restarted = Instant::now();
    redis.restart();
    assert!(
        serve.wait_stderr("lost its connection", 1),
        "{}",
        serve.stderr()
    );
    assert!(
        wait_subscribers(&redis, "orders", 1),
        "not resubscribed:\n{}",
        serve.stderr()
    );
    eprintln!(
        "resubscribed {:?} after the restart began",
        restarted.elapsed()
    );
    let second: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    for m in &second {
        publish(&redis, "orders", m);
    }
    assert_recorded(&redis, "seen", &second);

    // SIGTERM while a handler runs: it finishes (within the drain bound), then exit 0.
    publish(&redis, "orders", "slow:1500");
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    serve.stop_cleanly();
    eprintln!(
        "stopped {:?} after SIGTERM with a handler in flight",
        t.elapsed()
    );
    let last = list(&mut redis_conn(&redis), "seen");
    assert_eq!(
        last.last().map(String::as_str),
        Some("slow:1500"),
        "in-flight message drained"
    );
}

fn cron_app(key: &str) -> String {
    format!(
        r#"
spin_manifest_version = 2
[application]
name = "cron-recorder"
[variables]
record_address = {{ required = true }}
[[trigger.cron]]
component = "ticker"
cron_expression = "* * * * * *"
[component.ticker]
source = "{{WASM_DIR}}/spin_cron_trigger.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.ticker.variables]
record_address = "{{{{ record_address }}}}"
record_key = "{key}"
"#
    )
}

#[test]
fn cron_every_second_fires_once_per_tick_without_catch_up() {
    let redis = servers::redis();
    let app = app_from_manifest(&cron_app("ticks"));
    let address = format!("redis://{}", redis.addr());
    // The container's TZ is the schedule's zone (a 1-second schedule fires alike in all).
    let env = [("RECORD_ADDRESS", address), ("TZ", "Asia/Kolkata".into())];
    let serve = Triggered::start(app.path(), &env);
    let started = wait_list(&redis, "ticks", |l| !l.is_empty());
    assert!(
        !started.is_empty(),
        "no tick within 30 s:\n{}",
        serve.stderr()
    );
    let log = serve.stderr();
    assert!(log.contains("Named(Asia/Kolkata)"), "{log}");
    // Once per tick, in order: the recorded ticks (the schedule's own timestamps, Unix
    // seconds) only increase, so no tick fires twice or out of order, however loaded the
    // machine is.
    let want = started.len() + 5;
    let ticks = wait_list(&redis, "ticks", |l| l.len() >= want);
    assert!(ticks.len() >= want, "{} ticks in 30 s", ticks.len());
    let seconds = |l: &[String]| -> Vec<u64> { l.iter().map(|t| t.parse().unwrap()).collect() };
    let recorded = seconds(&ticks);
    assert!(
        recorded.windows(2).all(|w| w[0] < w[1]),
        "ticks not once each, in order: {recorded:?}"
    );

    // No catch-up: while the process is stopped (SIGSTOP) for 3 s, at least two ticks fall
    // inside the pause; on resume at most the one it was waiting for fires late, then the
    // schedule goes on from now (no burst of the missed ones). The bounds are taken where
    // they can only widen the pause: after SIGSTOP is sent and before SIGCONT is.
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    serve.signal("STOP");
    let stopped = unix_now();
    std::thread::sleep(Duration::from_secs(3));
    let resumed = unix_now();
    serve.signal("CONT");
    // Two ticks after the resume show the schedule went on.
    let ticks = wait_list(&redis, "ticks", |l| {
        seconds(l).iter().filter(|t| **t as f64 > resumed).count() >= 2
    });
    let recorded = seconds(&ticks);
    let after = recorded.iter().filter(|t| **t as f64 > resumed).count();
    assert!(after >= 2, "no ticks after the pause: {recorded:?}");
    let in_pause: Vec<u64> = recorded
        .iter()
        .copied()
        .filter(|t| (*t as f64) > stopped && (*t as f64) < resumed)
        .collect();
    eprintln!("ticks due in the pause that fired: {in_pause:?} of {recorded:?}");
    assert!(
        in_pause.len() <= 1,
        "catch-up after a pause: ticks {in_pause:?} fell in the pause ({stopped:.3}..{resumed:.3})"
    );
    assert!(
        recorded.windows(2).all(|w| w[0] < w[1]),
        "a tick fired twice or out of order: {recorded:?}"
    );
}

const COMMAND_APP: &str = r#"
spin_manifest_version = 2
[application]
name = "command"
[[trigger.command]]
component = "runner"
[component.runner]
source = "{WASM_DIR}/spin-command.wasm"
"#;

#[test]
fn command_gets_the_args_and_its_exit_code_comes_out() {
    let app = app_from_manifest(COMMAND_APP);
    // wasi:cli/exit.exit-with-code carries the code itself.
    let mut run = Triggered::spawn(app.path(), &[], &["exit-code", "3", "hello world"]);
    assert_eq!(
        run.wait_exit(Duration::from_secs(120)),
        Some(3),
        "{}",
        run.stderr()
    );
    std::thread::sleep(Duration::from_millis(200));
    let out = run.stdout.lock().unwrap().clone();
    assert!(out.contains("argv=runner|exit-code|3|hello world"), "{out}");
    // Rust's std::process::exit(3) on wasip2 is wasi:cli/exit.exit(err): failure, code 1.
    let mut run = Triggered::spawn(app.path(), &[], &["exit", "3"]);
    assert_eq!(
        run.wait_exit(Duration::from_secs(120)),
        Some(1),
        "{}",
        run.stderr()
    );
    // Returning from main: 0.
    let mut run = Triggered::spawn(app.path(), &[], &["plain"]);
    assert_eq!(
        run.wait_exit(Duration::from_secs(120)),
        Some(0),
        "{}",
        run.stderr()
    );
}

/// HTTP (spin-hello), Redis (at `redis_address`) and a 1-second cron (recording to
/// variable `record_address`) in one app.
fn mixed_manifest(redis_address: &str) -> String {
    let down = redis_address;
    format!(
        r#"
spin_manifest_version = 2
[application]
name = "mixed"
[variables]
record_address = {{ required = true }}
[application.trigger.redis]
address = "redis://{down}"
[[trigger.http]]
route = "/..."
component = "hello"
[[trigger.redis]]
channel = "orders"
component = "recorder"
[[trigger.cron]]
component = "ticker"
cron_expression = "* * * * * *"
[component.hello]
source = "{{WASM_DIR}}/spin_hello.wasm"
[component.recorder]
source = "{{WASM_DIR}}/spin_redis_trigger.wasm"
[component.ticker]
source = "{{WASM_DIR}}/spin_cron_trigger.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.ticker.variables]
record_address = "{{{{ record_address }}}}"
record_key = "mixed-ticks"
"#
    )
}

#[test]
fn mixed_app_keeps_serving_http_and_cron_while_its_redis_is_down() {
    let recorder = servers::redis();
    // Nothing listens here: the Redis trigger's server is unreachable.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let manifest = mixed_manifest(&down.to_string());
    let app = app_from_manifest(&manifest);
    let address = format!("redis://{}", recorder.addr());
    let mut server = Server::start(app.path(), &[("RECORD_ADDRESS", address.as_str())]);
    assert_eq!(server.get("/hello").status, 200);
    let ticks = wait_list(&recorder, "mixed-ticks", |l| l.len() >= 2);
    assert!(
        ticks.len() >= 2,
        "cron did not run beside a down redis trigger"
    );
    assert_eq!(server.get("/again").status, 200);
    let log = server.stderr.lock().unwrap().clone();
    assert!(log.contains("redis trigger cannot subscribe"), "{log}");
    // SIGTERM stops all three within the drain bound (10 s).
    let t = Instant::now();
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(12)), Some(0));
    eprintln!("stopped in {:?}", t.elapsed());
}

const MQTT_APP: &str = r#"
spin_manifest_version = 2
[application]
name = "mqtt-recorder"
[variables]
mqtt_address = { required = true }
record_address = { required = true }
[application.trigger.mqtt]
address = "{{ mqtt_address }}"
username = ""
password = ""
keep_alive_interval = "5"
[[trigger.mqtt]]
component = "recorder"
topic = "sensors/#"
qos = "1"
[component.recorder]
source = "{WASM_DIR}/spin_mqtt_trigger.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.recorder.variables]
record_address = "{{ record_address }}"
record_key = "mqtt-seen"
"#;

/// redis-server and mosquitto, and `manifest` (which takes `MQTT_ADDRESS` and
/// `RECORD_ADDRESS`) served until its `subscriptions` MQTT triggers have subscribed.
fn start_mqtt_app(
    manifest: &str,
    subscriptions: usize,
) -> (
    servers::ServerProcess,
    servers::ServerProcess,
    tempfile::TempDir,
    Triggered,
) {
    let redis = servers::redis();
    let broker = servers::mosquitto();
    let app = app_from_manifest(manifest);
    let env = [
        ("MQTT_ADDRESS", format!("mqtt://{}", broker.addr())),
        ("RECORD_ADDRESS", format!("redis://{}", redis.addr())),
    ];
    let mut serve = Triggered::start(app.path(), &env);
    assert!(
        serve.wait_stderr("mqtt trigger subscribed", subscriptions),
        "{}",
        serve.stderr()
    );
    (redis, broker, app, serve)
}

#[test]
fn mqtt_messages_handled_exactly_once_across_a_broker_restart() {
    let (redis, mut broker, _app, mut serve) = start_mqtt_app(MQTT_APP, 1);
    let mut first: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
    first.insert(5, "fail".into());
    broker.mqtt_publish("sensors/temp", &first, false).unwrap();
    first.remove(5);
    let want: Vec<String> = first.iter().map(|m| format!("sensors/temp {m}")).collect();
    assert_recorded(&redis, "mqtt-seen", &want);
    assert!(serve.wait_stderr("mqtt handler returned an error", 1));

    broker.restart();
    assert!(
        serve.wait_stderr("mqtt trigger connection failed", 1),
        "{}",
        serve.stderr()
    );
    assert!(
        serve.wait_stderr("mqtt trigger subscribed", 2),
        "not resubscribed:\n{}",
        serve.stderr()
    );
    let second: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    broker.mqtt_publish("sensors/hum", &second, false).unwrap();
    let mut want2 = want.clone();
    want2.extend(second.iter().map(|m| format!("sensors/hum {m}")));
    assert_recorded(&redis, "mqtt-seen", &want2);
    serve.stop_cleanly();
}

#[test]
fn bad_trigger_settings_fail_the_start_naming_them() {
    let cases = [
        (
            "[[trigger.sqs]]\nqueue_url = \"https://sqs.example\"\ncomponent = \"c\"\n",
            "[[trigger.sqs]]",
        ),
        (
            "[[trigger.cron]]\ncron_expression = \"*/5 * * * *\"\ncomponent = \"c\"\n",
            "cron_expression",
        ),
        (
            "[[trigger.redis]]\nchannel = \"x\"\ncomponent = \"c\"\n",
            "[application.trigger.redis]",
        ),
        (
            "[application.trigger.mqtt]\naddress = \"mqtt://127.0.0.1:1\"\n[[trigger.mqtt]]\ntopic = \"t\"\nqos = \"7\"\ncomponent = \"c\"\n",
            "qos",
        ),
        // spin-hello is an HTTP component: the Redis trigger names the export it lacks.
        (
            "[application.trigger.redis]\naddress = \"redis://127.0.0.1:1\"\n[[trigger.redis]]\nchannel = \"x\"\ncomponent = \"c\"\n",
            "fermyon:spin/inbound-redis",
        ),
        ("[[trigger.command]]\ncomponent = \"c\"\n", "wasi:cli/run"),
    ];
    for (triggers, needle) in cases {
        let manifest = format!(
            "spin_manifest_version = 2\n[application]\nname = \"bad\"\n{triggers}[component.c]\nsource = \"{{WASM_DIR}}/spin_hello.wasm\"\n"
        );
        let app = app_from_manifest(&manifest);
        let mut run = Triggered::spawn(app.path(), &[], &[]);
        assert_eq!(
            run.wait_exit(Duration::from_secs(120)),
            Some(1),
            "{triggers}"
        );
        std::thread::sleep(Duration::from_millis(100));
        let err = run.stderr();
        assert!(
            err.contains(needle),
            "{triggers}: expected `{needle}` in:\n{err}"
        );
    }
}

#[test]
fn selective_deployment_keeps_the_event_triggers_of_retained_components() {
    let manifest = mixed_manifest("127.0.0.1:1");
    let dir = app_from_manifest(&manifest);
    let mut app = spin_runtime::App::load_manifest(&dir.path().join("spin.toml")).unwrap();
    assert_eq!(app.event_triggers.redis[0].id, "recorder-redis-trigger");
    app.retain_components(&["recorder".into()]).unwrap();
    let ids: Vec<&String> = app.components.keys().collect();
    assert_eq!(ids, ["recorder"]);
    assert!(app.http_triggers.is_empty() && app.event_triggers.cron.is_empty());
    assert_eq!(app.event_triggers.redis.len(), 1);
    assert_eq!(
        app.event_triggers.redis_settings.address,
        "redis://127.0.0.1:1"
    );
}

#[test]
fn command_trigger_runs_a_wasip1_command_module() {
    // A plain `fn main` built for wasm32-wasip1 (no wit-bindgen world) is made a component
    // with the preview1 command adapter, as Spin does.
    let wasm = common::guest_apps_dir_p1().join("wasi-hello-p1.wasm");
    assert!(
        wasm.is_file(),
        "{} not built: run `make apps`",
        wasm.display()
    );
    let manifest = format!(
        "spin_manifest_version = 2\n[application]\nname = \"p1-command\"\n[[trigger.command]]\ncomponent = \"runner\"\n[component.runner]\nsource = \"{}\"\n",
        wasm.display()
    );
    let app = app_from_manifest(&manifest);
    let mut run = Triggered::spawn(app.path(), &[], &["exit", "5"]);
    let code = run.wait_exit(Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(200));
    let out = run.stdout.lock().unwrap().clone();
    assert!(
        out.contains("arg[0]=runner") && out.contains("arg[2]=5"),
        "{out}\n{}",
        run.stderr()
    );
    // The preview1 adapter turns proc_exit(5) into wasi:cli/exit.exit(err): failure, 1.
    assert_eq!(code, Some(1), "{}", run.stderr());
    let mut run = Triggered::spawn(app.path(), &[], &["exit", "0"]);
    assert_eq!(
        run.wait_exit(Duration::from_secs(120)),
        Some(0),
        "{}",
        run.stderr()
    );
}

/// Spin 4's Redis form beside Spin 3's: a spin-sdk 6 `#[redis_subscriber]` component
/// (`spin:redis/inbound-redis@3.0.0`, an `async func`) and the spin-sdk 5 recorder on one
/// channel of one server.
const REDIS_SPIN4_APP: &str = r#"
spin_manifest_version = 2
[application]
name = "redis-spin4"
[variables]
redis_address = { required = true }
[application.trigger.redis]
address = "{{ redis_address }}"
[[trigger.redis]]
channel = "orders"
component = "sdk6"
[[trigger.redis]]
channel = "orders"
component = "sdk5"
[component.sdk6]
source = "{WASM_DIR}/spin_redis_sdk6.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.sdk6.variables]
record_address = "{{ redis_address }}"
record_key = "spin4-seen"
[component.sdk5]
source = "{WASM_DIR}/spin_redis_trigger.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.sdk5.variables]
record_address = "{{ redis_address }}"
record_key = "spin4-seen"
"#;

#[test]
fn spin4_redis_subscriber_is_served_beside_the_spin3_form() {
    let redis = servers::redis();
    let app = app_from_manifest(REDIS_SPIN4_APP);
    let env = [("REDIS_ADDRESS", format!("redis://{}", redis.addr()))];
    let mut serve = Triggered::start(app.path(), &env);
    assert!(wait_subscribers(&redis, "orders", 1), "{}", serve.stderr());
    let msgs: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    for m in msgs.iter().take(2) {
        publish(&redis, "orders", m);
    }
    publish(&redis, "orders", "fail");
    for m in msgs.iter().skip(2) {
        publish(&redis, "orders", m);
    }
    // Each message once by each form: `sdk6:<m>` from Spin 4's, `<m>` from Spin 3's.
    let mut want: Vec<String> = msgs.iter().map(|m| format!("sdk6:{m}")).collect();
    want.extend(msgs.iter().cloned());
    assert_recorded(&redis, "spin4-seen", &want);
    // Both handlers' errors for `fail` are logged, Spin 4's with the guest's message.
    assert!(
        serve.wait_stderr("redis handler returned an error (asked to fail)", 1),
        "{}",
        serve.stderr()
    );
    assert!(serve.wait_stderr("redis handler returned an error (Error)", 1));
    serve.stop_cleanly();
}

/// spin-trigger-mqtt 0.8's world (`spin:mqtt-trigger@3.0.0`: root `async func
/// handle-message`) beside the synchronous one of 0.7, on one broker.
const MQTT_ASYNC_APP: &str = r#"
spin_manifest_version = 2
[application]
name = "mqtt-async"
[variables]
mqtt_address = { required = true }
record_address = { required = true }
[application.trigger.mqtt]
address = "{{ mqtt_address }}"
username = ""
password = ""
keep_alive_interval = "5"
[[trigger.mqtt]]
component = "async"
topic = "sensors/#"
qos = "1"
[[trigger.mqtt]]
component = "sync"
topic = "sensors/#"
qos = "1"
[component.async]
source = "{WASM_DIR}/spin_mqtt_async.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.async.variables]
record_address = "{{ record_address }}"
record_key = "mqtt-async-seen"
[component.sync]
source = "{WASM_DIR}/spin_mqtt_trigger.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:*"]
[component.sync.variables]
record_address = "{{ record_address }}"
record_key = "mqtt-async-seen"
"#;

#[test]
fn mqtt_plugin_08_async_world_is_served_beside_the_sync_one() {
    let (redis, broker, _app, mut serve) = start_mqtt_app(MQTT_ASYNC_APP, 2);
    let mut msgs: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    msgs.insert(2, "fail".into());
    broker.mqtt_publish("sensors/temp", &msgs, false).unwrap();
    msgs.remove(2);
    let mut want: Vec<String> = msgs
        .iter()
        .map(|m| format!("async:sensors/temp {m}"))
        .collect();
    want.extend(msgs.iter().map(|m| format!("sensors/temp {m}")));
    assert_recorded(&redis, "mqtt-async-seen", &want);
    assert!(
        serve.wait_stderr("mqtt handler returned an error: asked to fail", 2),
        "{}",
        serve.stderr()
    );
    serve.stop_cleanly();
}
