//! `shim-bench [all|start|http|memory|http-local|backends]` (root but for `http-local` and
//! `backends`): benchmarks of
//! `io.containerd.spin.v2` through CRI on a private containerd 1.6 (host cgroup v1 layout,
//! kubelet systemd-style Burstable pods, host network), each row beside a baseline measured
//! in the same run.
//!
//! `start`: cold start only (RunPodSandbox + CreateContainer + StartContainer -> first
//! HTTP 200), beside a native hyper hello server in a native image under `runc`.
//! `http`: the request path side by side ([`http`]): native hyper, `wasmtime serve`,
//! `spin-serve` and the app in a CRI pod through the shim, with a profile of spin-serve.
//! `http-local`: the same without containerd (native, `wasmtime serve`, `spin-serve`).
//! `memory`: a hello pod beside the native one, idle after 200 requests and under load
//! (PSS of the shim, its helper and the container), then density.
//! `backends`: key-value-bound routes on Redis and SQLite at c=1 and c=16 ([`backends`]).
//! `all`: cold start, first start of JS/Python/Rust SDK apps, the HTTP comparison and its
//! profile, memory (PSS/RSS), density, stats latency.
//! Raw samples go to `target/bench/`, the report to `docs/benchmarks.md` (`all`),
//! `target/bench/start.md` (`start`), `target/bench/http.md` (`http`),
//! `target/bench/memory.md` (`memory`) or
//! `target/bench/http-summary.md` (`http-local`).
//!
//! Knobs: `BENCH_RUNS` (cold starts per row, default 5), `BENCH_DURATION` (wrk seconds per
//! point, default 5), `BENCH_REPS` (wrk runs per HTTP point, default 3), `BENCH_CONNS`
//! (default `1 16 64`), `BENCH_START_COLD` / `BENCH_START_WARM` (first starts per SDK app,
//! 3 / 5), `BENCH_DENSITY` (pods, default 100, the density goal's count), `BENCH_STATS`
//! (ContainerStats calls, default 200). Run through `scripts/bench*.sh`, which build what is
//! needed and install `wasmtime-cli` (`WASMTIME_BIN`).

mod backends;
mod http;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::kubelet::{CgroupDriver, QosClass};
use cri_tests::node::{ContainerdVersion, Node};
use cri_tests::scenario::{self, KubeletPod};
use integration::sdk_apps::{maps_entry, reserved_entry};

const HELLO_IMAGE: &str = "docker.io/library/spin-hello:bench";
const CPU_IMAGE: &str = "docker.io/library/spin-cpu:bench";
const NATIVE_IMAGE: &str = "docker.io/library/native-hello:bench";
const JS_IMAGE: &str = "docker.io/library/js-sdk-hello:bench";
const HELLO_P3_IMAGE: &str = "docker.io/library/wasi-http-hello-p3:bench";

/// One benchmarked server: how to run it in a pod and what to ask it.
#[derive(Debug, Clone, Copy)]
struct Target {
    name: &'static str,
    handler: &'static str,
    image: &'static str,
    /// Request path (and query) measured.
    path: &'static str,
}

const HELLO: Target = Target {
    name: "spin-hello",
    handler: "spin",
    image: HELLO_IMAGE,
    path: "/hello",
};
const CPU: Target = Target {
    name: "spin-cpu",
    handler: "spin",
    image: CPU_IMAGE,
    path: "/?n=25",
};
/// The WASIp3 hello, whose instances the shim reuses across requests.
const HELLO_P3: Target = Target {
    name: "wasi-http-hello-p3",
    handler: "spin",
    image: HELLO_P3_IMAGE,
    path: "/hello",
};
/// The JavaScript SDK app (12 MB component): its first start runs on the shim's baseline
/// code while the shim compiles Cranelift's.
const JS: Target = Target {
    name: "js-sdk-hello",
    handler: "spin",
    image: JS_IMAGE,
    path: "/",
};
const NATIVE: Target = Target {
    name: "native-hello",
    handler: "runc",
    image: NATIVE_IMAGE,
    path: "/hello",
};

impl Target {
    fn container(&self, addr: SocketAddr) -> ContainerSpec {
        let (command, envs) = if self.handler == "runc" {
            (
                vec!["/native-hello".into(), "--listen".into(), addr.to_string()],
                vec![],
            )
        } else {
            (
                vec!["/".into()],
                vec![("SPIN_HTTP_LISTEN_ADDR".into(), addr.to_string())],
            )
        };
        ContainerSpec {
            name: self.name.into(),
            image: self.image.into(),
            command,
            envs,
            ..Default::default()
        }
    }
}

/// A running pod with one server container.
struct Running {
    pod: KubeletPod,
    id: String,
    pid: u32,
    addr: SocketAddr,
    /// RunPodSandbox -> first 200.
    startup: Duration,
}

fn env_num(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{name}={v:?} is not a whole number; unset it or fix it")),
        Err(_) => Ok(default),
    }
}

/// Polls `GET path` every 5 ms until 200 (bounded), off the async workers.
async fn first_ok(addr: SocketAddr, path: &str, timeout: Duration) -> Result<()> {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || http::wait_ok(addr, &path, timeout, None, None)).await?
}

/// Starts `t` in a fresh pod and waits for its first 200; `cpuset` = the CPUs its container
/// may use ("" = all).
async fn start(cri: &mut Cri, t: Target, name: &str, cpuset: &str, logs: &Path) -> Result<Running> {
    let addr: SocketAddr = ([127, 0, 0, 1], scenario::free_loopback_port()?).into();
    let t0 = Instant::now();
    let pod = KubeletPod::start(
        cri,
        Layout::Hybrid,
        CgroupDriver::Systemd,
        QosClass::Burstable,
        t.handler,
        name,
        logs,
    )
    .await?;
    let started = async {
        let id = cri
            .start_container(
                &pod.sandbox_id,
                &pod.spec,
                &ContainerSpec {
                    cpuset_cpus: cpuset.into(),
                    ..t.container(addr)
                },
            )
            .await?;
        first_ok(addr, t.path, Duration::from_secs(120))
            .await
            .with_context(|| format!("{} in pod {name}", t.name))?;
        let startup = t0.elapsed();
        let pid = cri.container_pid(&id).await?;
        Ok::<_, anyhow::Error>((id, pid, startup))
    }
    .await;
    match started {
        Ok((id, pid, startup)) => Ok(Running {
            pod,
            id,
            pid,
            addr,
            startup,
        }),
        Err(e) => {
            let _ = cri.remove_pod(&pod.sandbox_id).await;
            Err(e)
        }
    }
}

async fn stop(cri: &mut Cri, r: Running) -> Result<()> {
    cri.remove_container(&r.id, 5).await?;
    r.pod.teardown(cri, &[r.pid]).await
}

/// Median, min, max (ms) of durations or plain values.
#[derive(Debug, Clone, Copy, Default)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
    p99: f64,
}

fn spread(samples: &[f64]) -> Spread {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return Spread::default();
    }
    let q = |f: f64| s[((s.len() as f64 - 1.0) * f).round() as usize];
    Spread {
        median: q(0.5),
        min: s[0],
        max: s[s.len() - 1],
        p99: q(0.99),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// PSS and RSS (KiB) of `pid` from `/proc/PID/smaps_rollup`.
fn pss_rss(pid: u32) -> Result<(u64, u64)> {
    let file = format!("/proc/{pid}/smaps_rollup");
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
    let field = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((field("Pss:"), field("Rss:")))
}

/// The pod's shim process (its command line names the sandbox id).
fn shim_pid(sandbox_id: &str) -> Result<u32> {
    scenario::processes_mentioning(sandbox_id)
        .into_iter()
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains("containerd-shim"))
                .unwrap_or(false)
        })
        .with_context(|| format!("no containerd-shim process names sandbox {sandbox_id}"))
}

/// PSS and RSS (KiB) of one pod's processes.
#[derive(Debug, Clone, Copy, Default)]
struct PodMemory {
    /// The pod's shim server: ours, or containerd-shim-runc-v2.
    shim: (u64, u64),
    /// Our shim's container-creation helper (`--container-creation-helper`, the server's
    /// child that is no container); none under runc.
    helper: (u64, u64),
    /// Our shim's fork server (`--container-creation-fork-server`, the server's child the
    /// helpers are forked from); none under runc.
    fork_server: (u64, u64),
    /// The server container's process.
    container: (u64, u64),
    /// The pod's pause process.
    pause: (u64, u64),
}

impl PodMemory {
    /// What the runtime costs beside the workload: the shim server, its helper and its fork
    /// server.
    fn shim_side_pss(&self) -> u64 {
        self.shim.0 + self.helper_side().0
    }

    /// The helper and the fork server, as one column.
    fn helper_side(&self) -> (u64, u64) {
        (
            self.helper.0 + self.fork_server.0,
            self.helper.1 + self.fork_server.1,
        )
    }

    /// Shim server, helper and container (the pause process is left out: both pods have one).
    fn pss(&self) -> u64 {
        self.shim_side_pss() + self.container.0
    }

    fn rss(&self) -> u64 {
        self.shim.1 + self.helper_side().1 + self.container.1
    }
}

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // The parent pid is the second field after the parenthesised command.
            proc_stat_fields(*pid)
                .ok()
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                == Some(parent)
        })
        .collect()
}

/// The fields of `/proc/<pid>/stat` after the parenthesised command (which may hold spaces):
/// index 0 is the state (field 3 of proc(5)), 1 the parent pid, 11 and 12 utime and stime.
pub(crate) fn proc_stat_fields(pid: u32) -> std::io::Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    Ok(after_comm.split_whitespace().map(str::to_string).collect())
}

/// Memory of one pod (the helper and the fork server are found among the shim's children by
/// their command lines; the container and the pause process are left out).
fn pod_memory(r: &Running) -> Result<PodMemory> {
    let shim = shim_pid(&r.pod.sandbox_id)?;
    let (mut helper, mut fork_server) = ((0, 0), (0, 0));
    for child in children_of(shim) {
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        let slot = if cmdline.contains("--container-creation-fork-server") {
            &mut fork_server
        } else if cmdline.contains("--container-creation-helper") {
            &mut helper
        } else {
            continue;
        };
        if child != r.pid && child != r.pod.sandbox_pid {
            let (p, s) = pss_rss(child)?;
            *slot = (slot.0 + p, slot.1 + s);
        }
    }
    Ok(PodMemory {
        shim: pss_rss(shim)?,
        helper,
        fork_server,
        container: pss_rss(r.pid)?,
        pause: pss_rss(r.pod.sandbox_pid).unwrap_or_default(),
    })
}

/// KiB as MiB with one decimal.
fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// `yes`/`no` for a goal met.
fn met(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "no"
    }
}

/// Goal of issue 40: the shim server and the container each at most this PSS, idle.
const POD_GOAL_KIB: u64 = 8 * 1024;

/// One wrk result.
#[derive(Debug, Clone, Copy, Default)]
struct Wrk {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn to_ms(v: &str) -> Option<f64> {
    let (num, mul) = if let Some(n) = v.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (v, 1.0)
    };
    num.parse::<f64>().ok().map(|x| x * mul)
}

fn parse_wrk(out: &str) -> Result<Wrk> {
    let mut w = Wrk::default();
    for line in out.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["Requests/sec:", v, ..] => w.rps = v.parse().unwrap_or(0.0),
            ["50%", v, ..] => w.p50_ms = to_ms(v).unwrap_or(0.0),
            ["99%", v, ..] => w.p99_ms = to_ms(v).unwrap_or(0.0),
            _ => {}
        }
    }
    ensure!(w.rps > 0.0, "wrk printed no Requests/sec:\n{out}");
    ensure!(
        !out.contains("Non-2xx"),
        "wrk saw non-2xx answers (the server failed requests):\n{out}"
    );
    Ok(w)
}

struct Bench {
    out: PathBuf,
    logs: PathBuf,
    /// The shims' compile cache (host directory).
    cache: PathBuf,
    raw: String,
    report: String,
}

impl Bench {
    fn sample(&mut self, line: String) {
        self.raw.push_str(&line);
        self.raw.push('\n');
    }
}

fn build_images(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let root = integration::workspace_root();
    let mut archives = Vec::new();
    archives.push(integration::images::TestImages::build(dir)?.pause);
    for (name, app) in [
        (HELLO_IMAGE, "spin-hello"),
        (CPU_IMAGE, "spin-cpu"),
        (JS_IMAGE, "js-sdk-hello"),
        (HELLO_P3_IMAGE, "wasi-http-hello-p3"),
    ] {
        let app_dir = root.join("tests/apps").join(app);
        let path = dir.join(format!("{app}.tar"));
        oci_image_builder::spin::container_image(name, &app_dir, &[])
            .with_context(|| {
                format!(
                    "building {name} from {} (fix: make apps)",
                    app_dir.display()
                )
            })?
            .write_archive(&path)?;
        archives.push(path);
    }
    // The native baseline: the native-hello example with the shared libraries it links.
    let bin = integration::shim_bin_dir().join("examples/native-hello");
    ensure!(
        bin.is_file(),
        "{} missing: cargo build --release -p spin-runtime --example native-hello",
        bin.display()
    );
    let mut tree = oci_image_builder::rootfs::TarTree::new();
    tree.add_host_file(&bin, "/native-hello")?;
    let ldd = Command::new("ldd")
        .arg(&bin)
        .output()
        .context("running ldd")?;
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(str::to_string);
        if let Some(p) = path {
            let real = std::fs::canonicalize(&p)?;
            tree.add_host_file(&real, &p)?;
        }
    }
    let path = dir.join("native-hello.tar");
    oci_image_builder::rootfs_image(
        NATIVE_IMAGE,
        tree,
        &oci_image_builder::ProcessConfig {
            entrypoint: vec!["/native-hello".into()],
            ..Default::default()
        },
    )?
    .write_archive(&path)?;
    archives.push(path);
    Ok(archives)
}

/// Creates `dir` empty (removing what was in it).
fn empty_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn ratio(ours: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}", ours / base)
    } else {
        "-".into()
    }
}

/// After a start on the shim's baseline code: how long until container `pid` maps the
/// Cranelift entry the shim reserved in `cache` (None: the shim reserved none).
fn cranelift_mapped(cache: &Path, pid: u32, timeout: Duration) -> Result<Option<Duration>> {
    let t0 = Instant::now();
    let reserved = std::fs::read_dir(cache)?.find_map(|e| {
        let name = e.ok()?.file_name().to_string_lossy().into_owned();
        reserved_entry(&name).map(str::to_string)
    });
    let Some(entry) = reserved else {
        return Ok(None);
    };
    while t0.elapsed() < timeout {
        if maps_entry(pid, &entry) {
            return Ok(Some(t0.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!(
        "container {pid} did not map the shim's Cranelift entry {entry} within {} s",
        timeout.as_secs()
    )
}

async fn cold_start(b: &mut Bench, cri: &mut Cri, runs: usize) -> Result<()> {
    let mut med = Vec::new();
    let rows = [
        (HELLO, "empty"),
        (HELLO, "warm"),
        (JS, "empty"),
        (JS, "warm"),
        (NATIVE, "-"),
    ];
    for (t, cache) in rows {
        let mut samples = Vec::new();
        let mut tier_up = Vec::new();
        if cache == "warm" {
            // Prime the cache with one unmeasured start (and its Cranelift code).
            let r = start(cri, t, "cold-prime", "", &b.logs).await?;
            cranelift_mapped(&b.cache, r.pid, Duration::from_secs(300))?;
            stop(cri, r).await?;
        }
        for i in 0..runs {
            if cache == "empty" {
                empty_dir(&b.cache)?;
            }
            let name = format!("cold-{}-{cache}-{i}", t.name);
            let r = start(cri, t, &name, "", &b.logs).await?;
            samples.push(ms(r.startup));
            b.sample(format!(
                "cold_start {} cache {cache} run {i} ms {:.1}",
                t.name,
                ms(r.startup)
            ));
            if cache == "empty" {
                if let Some(d) = cranelift_mapped(&b.cache, r.pid, Duration::from_secs(300))? {
                    let total = ms(r.startup + d);
                    tier_up.push(total);
                    b.sample(format!(
                        "cold_start {} cache {cache} run {i} cranelift_in_ms {total:.1}",
                        t.name
                    ));
                }
            }
            stop(cri, r).await?;
            if cache == "empty" {
                let filled = std::fs::read_dir(&b.cache)?.count();
                ensure!(
                    filled > 0,
                    "the shim wrote no compiled component into {}: the compile cache is not \
                     where shim-bench set SPIN_SHIM_COMPILE_CACHE_DIR",
                    b.cache.display()
                );
            }
        }
        let tier_up = (!tier_up.is_empty()).then(|| spread(&tier_up));
        med.push((t, cache, spread(&samples), tier_up));
    }
    let base = med[rows.len() - 1].2.median;
    writeln!(
        b.report,
        "\n## 1. Cold start (RunPodSandbox + CreateContainer + StartContainer -> first HTTP 200)\n\n\
         {runs} runs per row, each a fresh pod (pod cgroups, sandbox, container). Compile cache: \
         the shim compiles each app into its host cache (`SPIN_SHIM_COMPILE_CACHE_DIR` in the \
         shim's environment, here `target/bench/compile-cache`) before the container starts \
         and binds the container's own entries read-only: `empty` = \
         that directory emptied before each run (checked to be filled again after it), `warm` = \
         kept, primed by one unmeasured start. js-sdk-hello is the JavaScript SDK app \
         (tests/apps/js-sdk-hello, a 12 MB component): with an empty cache the shim compiles it \
         with Winch before the container starts and with Cranelift while it serves; \
         `Cranelift in` = RunPodSandbox -> the container has mapped Cranelift's code (swapped \
         in).\n\n\
         | server | cache | median ms | min | max | Cranelift in ms (min-max) | ratio ours/native |\n\
         |---|---|---|---|---|---|---|"
    )?;
    for (t, cache, s, tier_up) in &med {
        writeln!(
            b.report,
            "| {} ({}) | {cache} | {:.1} | {:.1} | {:.1} | {} | {} |",
            t.name,
            t.handler,
            s.median,
            s.min,
            s.max,
            tier_up.map_or("-".into(), |c| format!(
                "{:.0} ({:.0}-{:.0})",
                c.median, c.min, c.max
            )),
            ratio(s.median, base)
        )?;
    }
    Ok(())
}

/// Section 3 (the request path side by side, [`http`]) and section 4 (memory): hello, cpu
/// and the WASIp3 hello in Spin pods, the native server in a runc pod (memory baseline), and
/// the local servers of [`http::start_local`].
async fn http_and_memory(b: &mut Bench, cri: &mut Cri, secs: usize, profile: bool) -> Result<()> {
    let running = start_all(cri, &[HELLO, CPU, HELLO_P3, NATIVE], &b.logs).await?;
    let result = async {
        measure_http(b, &running, profile).await?;
        measure_memory(b, &running, secs, "section 3's load").await
    }
    .await;
    stop_all(cri, running).await?;
    result
}

/// `shim-bench http`: the Spin pods of section 3 and the local servers, no memory.
async fn http_only(b: &mut Bench, cri: &mut Cri) -> Result<()> {
    let running = start_all(cri, &[HELLO, CPU, HELLO_P3], &b.logs).await?;
    let result = measure_http(b, &running, true).await;
    stop_all(cri, running).await?;
    result
}

/// Starts each of `targets` in its own pod on the servers' CPUs ([`http::server_cpus`]); on
/// a failure, removes those already started.
async fn start_all(
    cri: &mut Cri,
    targets: &[Target],
    logs: &Path,
) -> Result<Vec<(Target, Running)>> {
    let mut running = Vec::new();
    for t in targets {
        match start(
            cri,
            *t,
            &format!("http-{}", t.name),
            http::server_cpus(),
            logs,
        )
        .await
        {
            Ok(r) => running.push((*t, r)),
            Err(e) => {
                let _ = stop_all(cri, running).await;
                return Err(e);
            }
        }
    }
    Ok(running)
}

/// Removes the pods [`start_all`] started.
async fn stop_all(cri: &mut Cri, running: Vec<(Target, Running)>) -> Result<()> {
    for (_, r) in running {
        stop(cri, r).await?;
    }
    Ok(())
}

async fn measure_http(b: &mut Bench, running: &[(Target, Running)], profile: bool) -> Result<()> {
    let logs = b.logs.clone();
    let local = tokio::task::spawn_blocking(move || http::start_local(&logs)).await??;
    let mut endpoints = Vec::new();
    for (t, r) in running.iter().filter(|(t, _)| t.handler == "spin") {
        http::pin_server(r.pid)?;
        endpoints.push(http::Endpoint {
            server: "shim",
            work: [http::Work::Hello, http::Work::Cpu, http::Work::HelloP3]
                .into_iter()
                .find(|w| w.app() == t.name)
                .with_context(|| format!("no HTTP workload for pod {}", t.name))?,
            addr: r.addr,
            pid: r.pid,
        });
    }
    let order = [
        "native",
        "wasmtime serve",
        "wasmtime serve -W timeout",
        "spin-serve",
        "spin-serve (musl)",
        "spin-serve (no reuse)",
        "shim",
    ];
    let mut owned: Vec<http::Endpoint> =
        local.endpoints.iter().chain(&endpoints).copied().collect();
    owned.sort_by_key(|e| {
        (
            e.work.name(),
            order
                .iter()
                .position(|o| *o == e.server)
                .unwrap_or(order.len()),
        )
    });
    let out = b.out.clone();
    let (table, owned) =
        tokio::task::spawn_blocking(move || http::compare(&owned, &out).map(|t| (t, owned)))
            .await??;
    writeln!(
        b.report,
        "\n## 3. HTTP: the request path side by side\n\n\
         The same component (tests/apps/spin-hello `/hello`, tests/apps/spin-cpu fib(25); \
         `hello-p3`: tests/apps/wasi-http-hello-p3 `/hello`, a WASIp3 component whose instances \
         Spin, `wasmtime serve` and we reuse across requests, 128 per instance, 16 at once; \
         `spin-serve (no reuse)`: a fresh instance per request) served \
         by the native hyper server (`examples/native-hello`, the same fib for `cpu`), \
         `wasmtime serve` ({}, its defaults plus `-S cli`; `-W timeout`: with a 60 s request \
         timeout, which wasmtime enforces by epoch interruption, as Spin does every request; \
         `-O pooling as ours`, hello only: with the pooling allocator settings spin-serve uses, \
         memory kept resident and reset with PAGEMAP_SCAN), \
         `spin-serve` (our runtime as a \
         process; `spin-serve (musl)`: built as the release archives are, static musl with \
         mimalloc) and the shim (a CRI pod as in section 1, Burstable, host network). {table}",
        std::env::var("WASMTIME_VERSION")
            .map(|v| format!("wasmtime-cli {v}, the wasmtime version of our Cargo.lock"))
            .unwrap_or_else(|_| "wasmtime-cli".into())
    )?;
    if profile {
        let (pid, url) = owned
            .iter()
            .find(|e| e.server == "spin-serve" && e.work == http::Work::Hello)
            .map(|e| (e.pid, format!("http://{}{}", e.addr, e.work.path())))
            .context("spin-serve hello endpoint")?;
        let out = b.out.clone();
        let top =
            tokio::task::spawn_blocking(move || http::profile(pid, &url, 16, 6, &out)).await??;
        writeln!(
            b.report,
            "\n### Profile: spin-serve, hello at c=16\n\n`perf record -e cpu-clock -F 2000 -g` of \
             the spin-serve process for 6 s under wrk (the VM has no hardware counters); \
             `perf report --no-children --sort dso,symbol`, frames with at least 1% of the \
             samples (full report: `target/bench/perf-spin-serve.txt`):\n\n{top}"
        )?;
    }
    drop(local);
    Ok(())
}

/// Sends `n` requests to each pod, one after another (the idle state measured after them).
async fn warm(running: &[(Target, Running)], n: usize) -> Result<()> {
    for (t, r) in running {
        let (addr, path, name) = (r.addr, t.path, t.name);
        tokio::task::spawn_blocking(move || {
            for i in 0..n {
                let (status, _) = scenario::http_get(addr, path, Duration::from_secs(10))?;
                ensure!(
                    status == 200,
                    "{name}: request {i} of {n} answered {status}"
                );
            }
            Ok(())
        })
        .await??;
    }
    Ok(())
}

/// `shim-bench memory`: the memory of a hello pod beside the native one, idle after 200
/// requests and under load, then density.
async fn memory_only(b: &mut Bench, cri: &mut Cri, secs: usize, pods: usize) -> Result<()> {
    let running = start_all(cri, &[HELLO, NATIVE], &b.logs).await?;
    let result = async {
        warm(&running, 200).await?;
        measure_memory(b, &running, secs, "200 requests one after another").await
    }
    .await;
    stop_all(cri, running).await?;
    result?;
    density(b, cri, pods).await
}

async fn measure_memory(
    b: &mut Bench,
    running: &[(Target, Running)],
    secs: usize,
    before: &str,
) -> Result<()> {
    let sample =
        || -> Result<Vec<PodMemory>> { running.iter().map(|(_, r)| pod_memory(r)).collect() };
    let after = sample()?;
    // Idle: our processes give back what the requests faulted in once they have been quiet
    // for SPIN_SHIM_IDLE_RELEASE_SECS (default 30 s); poll until every Spin pod's container
    // fell by a tenth (the pod's total is not enough: the server's own release alone, when
    // it comes after the first sample, meets that), for at most three such periods (the
    // native pods are sampled alongside).
    let t0 = Instant::now();
    let idle = loop {
        let now = sample()?;
        let released = running
            .iter()
            .zip(&now)
            .zip(&after)
            .all(|(((t, _), n), a)| t.handler == "runc" || n.container.0 * 10 < a.container.0 * 9);
        if released || t0.elapsed() > Duration::from_secs(3 * 30 + 5) {
            break now;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let idle_secs = t0.elapsed().as_secs_f64();
    let mut mem: Vec<(Target, [PodMemory; 3])> = Vec::new();
    for (i, (t, r)) in running.iter().enumerate() {
        let url = format!("http://{}{}", r.addr, t.path);
        let child = http::wrk_pinned(&url, 16, secs)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("starting wrk (apt-get install -y wrk)")?;
        tokio::time::sleep(Duration::from_secs_f64(secs as f64 / 2.0)).await;
        let loaded = pod_memory(r)?;
        let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
        parse_wrk(&String::from_utf8_lossy(&out.stdout))
            .with_context(|| format!("{} under load for the memory sample", t.name))?;
        b.sample(format!(
            "memory {} after_kib {:?} idle_kib {:?} (after {idle_secs:.0} s) load_kib {loaded:?} \
             ((pss, rss) of shim, helper, container, pause)",
            t.name, after[i], idle[i]
        ));
        mem.push((*t, [after[i], idle[i], loaded]));
    }
    let nat = mem
        .iter()
        .find(|(t, _)| t.handler == "runc")
        .map(|m| m.1)
        .context("native memory missing")?;
    writeln!(
        b.report,
        "\n## 4. Memory per running pod (MiB, PSS from /proc/PID/smaps_rollup)\n\n\
         Shim = the pod's containerd shim server (ours, or containerd-shim-runc-v2); helper = \
         our shim's container-creation helper and the fork server it is forked from (runc has \
         none); container = the server container's process (for Spin: the youki-started process running wasmtime; native: \
         the hyper server). After = right after {before}; idle = {idle_secs:.0} s later, once \
         our processes gave back what those requests faulted in \
         (`SPIN_SHIM_IDLE_RELEASE_SECS`, 30 s); load = wrk -c 16, sampled mid-run. \
         The pause process is not counted (each pod has one). Goal (issue 40): idle, shim \
         <= 8 MiB, container <= 8 MiB, total (helper included) at most the native pod's. PSS splits a \
         page shared by N processes N ways: with one pod of each kind, the shim binary's code \
         is shared by that pod's processes only (section 5 shows many pods). Memory figures do \
         not depend on CPU speed; the machine was shared with other builds.\n\n\
         | server | state | shim PSS | helper PSS | container PSS | total PSS | total RSS | ratio total PSS ours/native | shim <= 8 | container <= 8 |\n|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for (t, m3) in &mem {
        for (state, m, base) in [
            ("after", &m3[0], nat[0]),
            ("idle", &m3[1], nat[1]),
            ("load", &m3[2], nat[2]),
        ] {
            let ours = t.handler != "runc";
            writeln!(
                b.report,
                "| {} ({}) | {state} | {} | {} | {} | {} | {} | {} | {} | {} |",
                t.name,
                t.handler,
                mib(m.shim.0),
                mib(m.helper_side().0),
                mib(m.container.0),
                mib(m.pss()),
                mib(m.rss()),
                ratio(m.pss() as f64, base.pss() as f64),
                if ours {
                    met(m.shim.0 <= POD_GOAL_KIB)
                } else {
                    "-"
                },
                if ours {
                    met(m.container.0 <= POD_GOAL_KIB)
                } else {
                    "-"
                },
            )?;
        }
    }
    Ok(())
}

async fn stats_latency(b: &mut Bench, cri: &mut Cri, calls: usize) -> Result<()> {
    let mut rows = Vec::new();
    for t in [HELLO, NATIVE] {
        let r = start(cri, t, &format!("stats-{}", t.name), "", &b.logs).await?;
        let mut samples = Vec::new();
        let mut err = None;
        for _ in 0..calls {
            let t0 = Instant::now();
            match cri.container_stats(&r.id).await {
                Ok(_) => samples.push(ms(t0.elapsed())),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        stop(cri, r).await?;
        if let Some(e) = err {
            return Err(e.context(format!("ContainerStats of {}", t.name)));
        }
        b.sample(format!(
            "stats {} ms {}",
            t.name,
            samples
                .iter()
                .map(|s| format!("{s:.3}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        rows.push((t, spread(&samples)));
    }
    writeln!(
        b.report,
        "\n## 6. Stats latency (CRI ContainerStats: containerd -> shim Task.Stats -> cgroup read), {calls} calls\n\n\
         | server | median ms | p99 ms | max ms | ratio median ours/native |\n|---|---|---|---|---|"
    )?;
    let base = rows[1].1.median;
    for (t, s) in &rows {
        writeln!(
            b.report,
            "| {} ({}) | {:.3} | {:.3} | {:.3} | {} |",
            t.name,
            t.handler,
            s.median,
            s.p99,
            s.max,
            ratio(s.median, base)
        )?;
    }
    Ok(())
}

/// The summed memory of `pods` (a pod whose processes are gone counts nothing).
fn pods_memory(pods: &[Running]) -> PodMemory {
    let mut total = PodMemory::default();
    for r in pods {
        let m = pod_memory(r).unwrap_or_default();
        for (sum, v) in [
            (&mut total.shim, m.shim),
            (&mut total.helper, m.helper),
            (&mut total.fork_server, m.fork_server),
            (&mut total.container, m.container),
            (&mut total.pause, m.pause),
        ] {
            *sum = (sum.0 + v.0, sum.1 + v.1);
        }
    }
    total
}

/// The shim's idle period (`SPIN_SHIM_IDLE_RELEASE_SECS`, which the shims inherit from the
/// bench through containerd; default 30 s).
fn idle_period() -> Duration {
    let secs = std::env::var("SPIN_SHIM_IDLE_RELEASE_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// Waits until the Spin pods are idle as a node sees them after their start: every pod's
/// container-creation helper ended (one idle period without a create, checked each
/// period) and the containers gave back what starting mapped; at most three periods and
/// 5 s. Native pods do not change when idle: they are sampled at once.
async fn wait_idle(t: Target, pods: &[Running]) -> Duration {
    let t0 = Instant::now();
    if t.handler == "runc" {
        return t0.elapsed();
    }
    let period = idle_period();
    while t0.elapsed() < period * 3 + Duration::from_secs(5) {
        let helpers_gone = pods
            .iter()
            .all(|r| pod_memory(r).map(|m| m.helper.0 == 0).unwrap_or(true));
        if helpers_gone && t0.elapsed() > period + Duration::from_secs(2) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    t0.elapsed()
}

/// One density row: wall time, pods up, answering, their summed memory once every pod
/// answers (`start`) and once idle (`idle`, after `idle_wait`), errors.
struct Density {
    wall: f64,
    up: usize,
    answering: usize,
    start: PodMemory,
    idle: PodMemory,
    idle_wait: Duration,
    errors: Vec<String>,
}

/// Starts `n` pods of `t` at once and samples them started and idle.
async fn density_one(b: &mut Bench, cri: &Cri, t: Target, n: usize) -> Result<Density> {
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let mut c = cri.clone();
        let logs = b.logs.clone();
        tasks.push(tokio::spawn(async move {
            start(&mut c, t, &format!("density-{}-{i}", t.name), "", &logs).await
        }));
    }
    let mut up = Vec::new();
    let mut errors = Vec::new();
    for task in tasks {
        match task.await? {
            Ok(r) => up.push(r),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    let wall = ms(t0.elapsed());
    // All answering, checked again once every pod is up.
    let mut answering = 0;
    for r in &up {
        let (addr, path) = (r.addr, t.path);
        let ok = tokio::task::spawn_blocking(move || {
            scenario::http_get(addr, path, Duration::from_secs(5))
        })
        .await?;
        if matches!(ok, Ok((200, _))) {
            answering += 1;
        }
    }
    // All sampled before any pod goes: PSS shares out pages among the live pods.
    let total = pods_memory(&up);
    let idle_wait = wait_idle(t, &up).await;
    let idle = pods_memory(&up);
    b.sample(format!(
        "density {} pods {n} wall_ms {wall:.0} up {} answering {answering} total_kib {total:?} idle_kib {idle:?} (after {:.0} s) startups_ms {}",
        t.name,
        up.len(),
        idle_wait.as_secs_f64(),
        up.iter()
            .map(|r| format!("{:.0}", ms(r.startup)))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let up_count = up.len();
    let mut stops = Vec::new();
    for r in up {
        let mut c = cri.clone();
        stops.push(tokio::spawn(async move { stop(&mut c, r).await }));
    }
    for s in stops {
        if let Err(e) = s.await? {
            errors.push(format!("teardown: {e:#}"));
        }
    }
    Ok(Density {
        wall,
        up: up_count,
        answering,
        start: total,
        idle,
        idle_wait,
        errors,
    })
}

async fn density(b: &mut Bench, cri: &Cri, n: usize) -> Result<()> {
    let mut rows = Vec::new();
    for t in [HELLO, NATIVE] {
        let d = density_one(b, cri, t, n).await?;
        for e in d.errors.iter().take(3) {
            eprintln!("density {}: {e}", t.name);
        }
        rows.push((t, d));
    }
    let idle_secs = rows[0].1.idle_wait.as_secs_f64();
    writeln!(
        b.report,
        "\n## 5. Density: {n} hello pods started concurrently (each its own loopback port)\n\n\
         Wall = first RunPodSandbox -> every pod answered 200. Memory = PSS per pod (summed \
         over the pods that came up, divided by their number): started = once every pod \
         answers; idle = {idle_secs:.0} s later, once every Spin pod's container-creation \
         helper ended after an idle period without a create and the containers gave back \
         what starting mapped (`SPIN_SHIM_IDLE_RELEASE_SECS`, {} s; the native pods are \
         sampled at once, idle does not change them). Shim = shim server + our \
         container-creation helper and fork server, container = the server container's process, pause = the \
         pause process; total = all three.\n\n\
         | server | state | pods | wall s | answering | errors | shim PSS/pod MiB | container PSS/pod MiB | pause PSS/pod MiB | total PSS/pod MiB | total PSS MiB | ratio wall | ratio PSS/pod |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        idle_period().as_secs()
    )?;
    let per_pod = |m: &PodMemory, up: usize| (m.pss() + m.pause.0) as f64 / up.max(1) as f64;
    let native = &rows[1].1;
    for (t, d) in &rows {
        let per = |kib: u64| format!("{:.1}", kib as f64 / 1024.0 / d.up.max(1) as f64);
        for (state, m, base) in [
            ("started", &d.start, &native.start),
            ("idle", &d.idle, &native.idle),
        ] {
            writeln!(
                b.report,
                "| {} ({}) | {state} | {n} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                t.name,
                t.handler,
                d.wall / 1000.0,
                d.answering,
                d.errors.len(),
                per(m.shim_side_pss()),
                per(m.container.0),
                per(m.pause.0),
                per(m.pss() + m.pause.0),
                mib(m.pss() + m.pause.0),
                ratio(d.wall, native.wall),
                ratio(per_pod(m, d.up), per_pod(base, native.up))
            )?;
        }
    }
    Ok(())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.to_string()))
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "- date: {date}\n- machine: {cores} cores, {cpu}; {mem}; kernel {}\n- containerd 1.6 (Debian 12), host cgroup v1 (hybrid) layout, kubelet systemd-style Burstable pod cgroups, host network; release build; all servers and wrk share the same 2 cores",
        kernel.trim()
    )
}

async fn run(mode: &str) -> Result<()> {
    let root = integration::workspace_root();
    let out = root.join("target/bench");
    std::fs::create_dir_all(&out)?;
    let runs = env_num("BENCH_RUNS", 5)?;
    let secs = env_num("BENCH_DURATION", 5)?;
    let pods = env_num("BENCH_DENSITY", 100)?;
    let calls = env_num("BENCH_STATS", 200)?;
    let cache = compile_cache_dir();
    empty_dir(&cache)?;
    let archives = build_images(&out.join("images"))?;
    let node = Node::start(ContainerdVersion::V1_6, Layout::Hybrid, true)?;
    for a in &archives {
        node.import(a)?;
    }
    let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
    let mut b = Bench {
        out: out.clone(),
        logs: node.dir().join("pod-logs"),
        cache,
        raw: String::new(),
        report: format!(
            "# Benchmarks\n\nGenerated by `{}` (`tools/bench`, `shim-bench {mode}`). Raw samples: \
             `target/bench/`.\n\n## Method and machine\n\n{}\n- ours = `io.containerd.spin.v2` \
             (handler `spin`), baseline = the native Rust hyper hello server \
             (`crates/spin-runtime/examples/native-hello.rs`) in a native image under `runc`, same \
             pods, same run.\n- medians with min/max (or p99); ratio = ours / native.\n",
            match mode {
                "start" => "scripts/bench-start.sh",
                "memory" => "scripts/bench-memory.sh",
                "http" => "scripts/bench-http.sh",
                _ => "scripts/bench.sh",
            },
            machine()
        ),
    };
    let parents_before = kubelet_parents();
    let t0 = Instant::now();
    let result = async {
        if mode == "memory" {
            return memory_only(&mut b, &mut cri, secs, pods).await;
        }
        if mode != "http" {
            cold_start(&mut b, &mut cri, runs).await?;
        }
        if mode == "all" {
            let logs = b.logs.clone();
            let table =
                tokio::task::spawn_blocking(move || http::first_start_table(&logs)).await??;
            writeln!(
                b.report,
                "\n## 2. First start of SDK apps (Rust, JavaScript, Python)\n\n{table}"
            )?;
            http_and_memory(&mut b, &mut cri, secs, true).await?;
            let kv = tokio::task::spawn_blocking(backends::section).await??;
            writeln!(
                b.report,
                "\n## Key-value backends under concurrency\n\n{kv}"
            )?;
            density(&mut b, &cri, pods).await?;
            stats_latency(&mut b, &mut cri, calls).await?;
        }
        if mode == "http" {
            http_only(&mut b, &mut cri).await?;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    remove_created_parents(&parents_before);
    std::fs::write(out.join(format!("samples-{mode}.txt")), &b.raw)?;
    if let Err(e) = result {
        eprintln!("containerd log tail:\n{}", node.log_tail());
        return Err(e);
    }
    writeln!(
        b.report,
        "\n## Notes\n\n- Run time: {:.0} s (excluding the build).",
        t0.elapsed().as_secs_f64()
    )?;
    let report_path = match mode {
        "all" => root.join("docs/benchmarks.md"),
        "http" => out.join("http.md"),
        "memory" => out.join("memory.md"),
        _ => out.join("start.md"),
    };
    std::fs::write(&report_path, &b.report)?;
    println!("{}", b.report);
    println!("report: {}", report_path.display());
    Ok(())
}

fn main() -> Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if mode == "http-local" {
        return http::run_local();
    }
    if mode == "backends" {
        return backends::run_local();
    }
    ensure!(
        matches!(mode.as_str(), "all" | "start" | "http" | "memory"),
        "unknown mode {mode:?}; usage: shim-bench [all|start|http|memory|http-local|backends]"
    );
    ensure!(
        nix_is_root(),
        "shim-bench needs root (it runs containerd and creates pod cgroups)"
    );
    // The shims inherit containerd's environment, containerd inherits ours: a compile
    // cache of the bench's own (set before any thread exists), emptied and primed by the
    // cold-start phase.
    std::env::set_var("SPIN_SHIM_COMPILE_CACHE_DIR", compile_cache_dir());
    // Servers run as on a node, without RUST_BACKTRACE from a developer's shell.
    std::env::remove_var("RUST_BACKTRACE");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(&mode))
}

/// The kubelet parent levels of the bench's pods (`kubepods.slice` and its QoS slices) in
/// every host hierarchy, deepest first, that exist now.
fn kubelet_parents() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in integration::cgroups::host_hierarchies() {
        for rel in [
            "kubepods.slice/kubepods-burstable.slice",
            "kubepods.slice/kubepods-besteffort.slice",
            "kubepods.slice",
        ] {
            let dir = h.join(rel);
            if dir.is_dir() {
                out.push(dir);
            }
        }
    }
    out
}

/// Removes the kubelet parent levels the run created (those absent from `before`): a
/// pod's guard leaves a level another pod was still using when it went, so with several
/// pods at once (sections 3-5) the last one out would otherwise leave them behind.
fn remove_created_parents(before: &[PathBuf]) {
    for dir in kubelet_parents() {
        if !before.contains(&dir) {
            if let Err(e) = std::fs::remove_dir(&dir) {
                eprintln!("shim-bench: leaving cgroup {}: {e}", dir.display());
            }
        }
    }
}

/// The compile cache the bench's shims use.
fn compile_cache_dir() -> PathBuf {
    integration::workspace_root().join("target/bench/compile-cache")
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}
