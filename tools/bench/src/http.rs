//! The request path, side by side (`make bench-http`, and section 2 of `make bench`): one
//! run serves the same guest component through
//!
//! - `native`: the native hyper server (`examples/native-hello`, `/hello` and `?n=25`),
//! - `wasmtime serve`: the `wasmtime-cli` crate at the wasmtime version of our Cargo.lock
//!   (installed by `scripts/bench-lib.sh`, path in `WASMTIME_BIN`), run with its defaults,
//! - `wasmtime serve -W timeout`: the same with a request timeout, i.e. with epoch
//!   interruption compiled into the guest's code as Spin (and `spin-serve`) always has it,
//! - `spin-serve`: our Spin runtime as a plain process (and `spin-serve (musl)`, the release
//!   archives' static musl build, when `BENCH_SPIN_SERVE_MUSL` names it),
//! - `shim`: the app in a CRI pod through `io.containerd.spin.v2` (when the caller has
//!   started one),
//!
//! for `hello` (`/hello` of tests/apps/spin-hello), `cpu` (fib(25) per request,
//! tests/apps/spin-cpu) and `hello-p3` (tests/apps/wasi-http-hello-p3, a WASIp3 component
//! whose instances each server reuses across requests; beside it `spin-serve (no reuse)`, a
//! fresh instance per request), at each concurrency of `BENCH_CONNS` (default `1 16 64`), each
//! point `BENCH_REPS` times (default 3) for `BENCH_DURATION` seconds. On a machine with two
//! or more CPUs every server runs on CPU 0 and wrk (one thread) on CPU 1, so that load
//! generator and server never share a core. The local servers are started on CPU 0
//! (`taskset -c 0` before exec) and the shim's pods get `cpuset_cpus = "0"`, as a pod of
//! kubelet's static CPU manager does: each server sees one CPU from its start and sizes its
//! thread pool to it (tokio: one worker), rather than running two workers time-sliced on one
//! core. The report gives the median
//! requests/s with the spread of the runs, p50/p99 of the median run, and ratios to native
//! and to `wasmtime serve`. It also profiles `spin-serve` under load with `perf record -e
//! cpu-clock` (the VM has no hardware counters) and lists the top frames.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use super::{env_num, parse_wrk, spread, Wrk};

/// How long a server may take to answer its first request (first compile included).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// The workloads: a request path, the spin app serving it, and the component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// `/hello` of spin-hello (echoes the Spin request headers).
    Hello,
    /// fib(25) per request (spin-cpu).
    Cpu,
    /// `/hello` of the WASIp3 hello (tests/apps/wasi-http-hello-p3), whose instances Spin,
    /// `wasmtime serve` and we reuse across requests.
    HelloP3,
}

impl Work {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Work::Hello => "hello",
            Work::Cpu => "cpu",
            Work::HelloP3 => "hello-p3",
        }
    }
    pub(crate) fn path(self) -> &'static str {
        match self {
            Work::Hello | Work::HelloP3 => "/hello",
            Work::Cpu => "/?n=25",
        }
    }
    pub(crate) fn app(self) -> &'static str {
        match self {
            Work::Hello => "spin-hello",
            Work::Cpu => "spin-cpu",
            Work::HelloP3 => "wasi-http-hello-p3",
        }
    }
    fn wasm(self) -> &'static str {
        match self {
            Work::Hello => "spin_hello.wasm",
            Work::Cpu => "spin_cpu.wasm",
            Work::HelloP3 => "wasi_http_hello_p3.wasm",
        }
    }

    /// The component `wasmtime serve` runs: the built one, or for the WASIp3 hello (built
    /// against Spin 4's WASI snapshot) a copy in `work` renamed to WASI 0.3.0, the release
    /// wasmtime implements, as our runtime renames it when loading.
    fn wasmtime_component(self, apps: &Path, work: &Path) -> Result<PathBuf> {
        let built = apps.join(self.wasm());
        if self != Work::HelloP3 {
            return Ok(built);
        }
        let bytes = std::fs::read(&built)
            .with_context(|| format!("{} (fix: make apps)", built.display()))?;
        let renamed = work.join(self.wasm());
        std::fs::write(&renamed, spin_runtime::p3::retarget_snapshot(&bytes)?)?;
        Ok(renamed)
    }
}

/// One server under test.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoint {
    /// `native`, `wasmtime serve`, `spin-serve` or `shim`.
    pub(crate) server: &'static str,
    pub(crate) work: Work,
    pub(crate) addr: SocketAddr,
    /// The serving process (pinned to CPU 0).
    pub(crate) pid: u32,
}

/// Extra environment of a server process.
type Env = &'static [(&'static str, &'static str)];

/// A server process, killed (SIGTERM, then SIGKILL) when dropped.
pub(crate) struct Process {
    child: Child,
}

impl Process {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let stopped = integration::wait_for(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten()
        });
        if stopped.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `GET path` every 5 ms until 200 (bounded by `timeout`); fails early if `child`
/// exits, quoting the server's `log` when given.
pub(crate) fn wait_ok(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
    child: Option<&mut Child>,
    log: Option<&Path>,
) -> Result<()> {
    let log_text = || {
        log.and_then(|l| std::fs::read_to_string(l).ok())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + timeout;
    let mut child = child;
    let mut last = String::new();
    while Instant::now() < deadline {
        match cri_tests::scenario::http_get(addr, path, Duration::from_secs(5)) {
            Ok((200, _)) => return Ok(()),
            Ok((code, body)) => last = format!("status {code}: {body}"),
            Err(e) => last = format!("{e:#}"),
        }
        if let Some(c) = child.as_deref_mut() {
            if let Some(status) = c.try_wait()? {
                bail!(
                    "the server exited ({status}) before answering {addr}{path}; its log:\n{}",
                    log_text()
                );
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!(
        "{addr}{path} did not answer 200 within {timeout:?}; last: {last}; server log:\n{}",
        log_text()
    )
}

/// Starts `cmd` (stdout and stderr to `log`) and waits until `addr` answers `path`.
pub(crate) fn spawn_serving(
    mut cmd: Command,
    addr: SocketAddr,
    path: &str,
    log: &Path,
) -> Result<Process> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    // As on a node: no library backtraces captured for every error (RUST_BACKTRACE in a
    // developer's shell made wasmtime unwind once per request).
    let child = cmd
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let mut p = Process { child };
    wait_ok(addr, path, START_TIMEOUT, Some(&mut p.child), Some(log))?;
    Ok(p)
}

/// A copy of `tests/apps/<app>` whose manifest points at the built guest apps.
pub(crate) fn app_dir(work: &Path, app: &str) -> Result<PathBuf> {
    let src = integration::workspace_root().join("tests/apps").join(app);
    let manifest = std::fs::read_to_string(src.join("spin.toml"))
        .with_context(|| format!("reading {}/spin.toml", src.display()))?;
    let apps = integration::guest_apps_dir();
    let dir = work.join(app);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("spin.toml"),
        manifest.replace(
            "../target/wasm32-wasip2/release/",
            &format!("{}/", apps.display()),
        ),
    )?;
    Ok(dir)
}

/// Whether servers and wrk get a CPU each.
fn pinning() -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2
}

/// The CPU list the servers run on when pinning (`taskset -c`, a pod's `cpuset_cpus`).
pub(crate) fn server_cpus() -> &'static str {
    if pinning() {
        "0"
    } else {
        ""
    }
}

/// `program` started on the servers' CPU: through `taskset -c 0` (which execs it, so the
/// pid is the server's) when pinning.
fn on_server_cpu(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if pinning() {
        let mut c = Command::new("taskset");
        c.args(["-c", server_cpus()]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Pins every thread of `pid` to CPU 0 (threads created later inherit it).
pub(crate) fn pin_server(pid: u32) -> Result<()> {
    if !pinning() {
        return Ok(());
    }
    let out = Command::new("taskset")
        .args(["-a", "-c", "-p", "0", &pid.to_string()])
        .output()
        .context("running taskset (util-linux)")?;
    ensure!(
        out.status.success(),
        "taskset -a -c -p 0 {pid}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// wrk with `conns` connections for `secs` seconds; one thread on CPU 1 when pinning.
pub(crate) fn wrk_pinned(url: &str, conns: usize, secs: usize) -> Command {
    let mut c = if pinning() {
        let mut c = Command::new("taskset");
        c.args(["-c", "1", "wrk", "-t", "1"]);
        c
    } else {
        let mut c = Command::new("wrk");
        c.args(["-t", &conns.clamp(1, 2).to_string()]);
        c
    };
    c.args([
        "-c",
        &conns.to_string(),
        "-d",
        &format!("{secs}s"),
        "--timeout",
        "10s",
        "--latency",
        url,
    ]);
    c
}

/// One wrk run against `url`; raw output kept in `raw`.
fn wrk(url: &str, conns: usize, secs: usize, raw: &Path) -> Result<Wrk> {
    let out = wrk_pinned(url, conns, secs)
        .output()
        .context("running wrk (apt-get install -y wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(raw, &text)?;
    ensure!(out.status.success(), "wrk {url}: {out:?}");
    parse_wrk(&text).with_context(|| format!("wrk against {url}"))
}

/// The `wasmtime` CLI the bench compares with (`WASMTIME_BIN`, set by bench-lib.sh).
fn wasmtime_bin() -> Result<PathBuf> {
    let bin = std::env::var_os("WASMTIME_BIN")
        .map(PathBuf::from)
        .context("WASMTIME_BIN is not set: run the bench through make bench-http / make bench")?;
    ensure!(
        bin.is_file(),
        "{} missing: scripts/bench-lib.sh installs wasmtime-cli there",
        bin.display()
    );
    Ok(bin)
}

/// The row of `wasmtime serve` with [`wasmtime_pooling_as_ours`].
const WASMTIME_OUR_POOLING: &str = "wasmtime serve -O pooling as ours";

/// `wasmtime serve -O` options that make its pooling allocator reset instances as
/// spin-serve's does ([`spin_runtime::runtime::PoolResidency`]); `None` where the kernel has
/// no `PAGEMAP_SCAN` (spin-serve then keeps wasmtime's defaults too).
fn wasmtime_pooling_as_ours() -> Option<String> {
    let r = spin_runtime::runtime::PoolResidency::for_memory_cap(None)?;
    Some(format!(
        "pooling-allocator=y,pooling-pagemap-scan=y,pooling-memory-keep-resident={},\
         pooling-table-keep-resident={},pooling-max-unused-warm-slots={}",
        r.memory_keep_resident, r.table_keep_resident, r.max_unused_warm_slots
    ))
}

/// The processes of one run: native, `wasmtime serve` and `spin-serve` for both workloads.
pub(crate) struct LocalServers {
    pub(crate) endpoints: Vec<Endpoint>,
    _processes: Vec<Process>,
    _work: tempfile::TempDir,
}

/// Starts native, `wasmtime serve` and `spin-serve` for hello and cpu, each on its own
/// loopback port, on the servers' CPU from their start.
pub(crate) fn start_local(logs: &Path) -> Result<LocalServers> {
    let bin = integration::shim_bin_dir();
    let apps = integration::guest_apps_dir();
    let wasmtime = wasmtime_bin()?;
    let work = tempfile::tempdir()?;
    let mut endpoints = Vec::new();
    let mut processes = Vec::new();
    let port = || -> Result<SocketAddr> {
        Ok(([127, 0, 0, 1], cri_tests::scenario::free_loopback_port()?).into())
    };
    // One native server answers both workloads.
    let addr = port()?;
    let mut native = on_server_cpu(bin.join("examples/native-hello"));
    native.args(["--listen", &addr.to_string()]);
    let p = spawn_serving(native, addr, "/hello", &logs.join("native.log"))?;
    // (The WASIp3 hello's ratios to native use the `hello` row: the same native `/hello`.)
    for w in [Work::Hello, Work::Cpu] {
        endpoints.push(Endpoint {
            server: "native",
            work: w,
            addr,
            pid: p.pid(),
        });
    }
    processes.push(p);
    // Starts `cmd` serving `w` on `addr` (log in `logs`, named after the server) and records it.
    let mut serve = |cmd: Command, server: &'static str, w: Work, addr: SocketAddr| -> Result<()> {
        let name: String = server
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let log = logs.join(format!("{name}-{}.log", w.name()));
        let p = spawn_serving(cmd, addr, w.path(), &log)?;
        endpoints.push(Endpoint {
            server,
            work: w,
            addr,
            pid: p.pid(),
        });
        processes.push(p);
        Ok(())
    };
    for w in [Work::Hello, Work::Cpu, Work::HelloP3] {
        // Its defaults, plus what the component needs: wasi:cli (environment, stdio) and
        // the `COMPONENT` variable spin-hello's `hello` component gets from its manifest.
        // Then with a request timeout (`-W timeout`), which wasmtime enforces as we do, by
        // epoch interruption: the same checks compiled into the guest's code.
        // For hello, also with our pooling allocator settings (kept-resident memory reset by
        // PAGEMAP_SCAN), which `wasmtime serve` takes as options: what part of the gap to
        // its defaults is allocation, what part the rest of the request path.
        let component = w.wasmtime_component(&apps, work.path())?;
        let pooling = (w == Work::Hello).then(wasmtime_pooling_as_ours).flatten();
        let mut variants = vec![
            ("wasmtime serve", vec![]),
            ("wasmtime serve -W timeout", vec!["-W", "timeout=60s"]),
        ];
        if let Some(opts) = &pooling {
            variants.push((WASMTIME_OUR_POOLING, vec!["-O", opts]));
        }
        for (server, extra) in variants {
            let addr = port()?;
            let mut ws = on_server_cpu(&wasmtime);
            ws.args(["serve", "-S", "cli", "--addr", &addr.to_string()])
                .args(&extra)
                .args(["--env", "COMPONENT=hello"])
                .arg(&component);
            serve(ws, server, w, addr)?;
        }

        // Ours: the glibc build, and the release archives' static musl build when the bench
        // script built it (BENCH_SPIN_SERVE_MUSL).
        let musl = std::env::var_os("BENCH_SPIN_SERVE_MUSL").map(PathBuf::from);
        // For the WASIp3 hello, spin-serve also with a fresh instance per request, the way
        // it served WASIp3 components before instance reuse.
        let spin_serve = bin.join("spin-serve");
        let builds: Vec<(&'static str, PathBuf, Env)> = match w {
            Work::HelloP3 => vec![
                ("spin-serve", spin_serve.clone(), &[]),
                (
                    "spin-serve (no reuse)",
                    spin_serve,
                    &[("SPIN_SHIM_MAX_INSTANCE_REUSE_COUNT", "1")],
                ),
            ],
            _ => std::iter::once(("spin-serve", spin_serve, &[][..]))
                .chain(musl.map(|m| ("spin-serve (musl)", m, &[][..])))
                .collect(),
        };
        for (server, program, env) in builds {
            let addr = port()?;
            let mut ss = on_server_cpu(program);
            ss.arg(app_dir(work.path(), w.app())?)
                .args(["--listen", &addr.to_string()])
                .env("SPIN_SHIM_COMPILE_CACHE_DIR", work.path().join("cache"))
                .env("RUST_LOG", "warn")
                .envs(env.iter().copied());
            serve(ss, server, w, addr)?;
        }
    }
    Ok(LocalServers {
        endpoints,
        _processes: processes,
        _work: work,
    })
}

/// One row of the comparison: the median run and every run's requests/s.
struct Row {
    server: &'static str,
    work: Work,
    conns: usize,
    median: Wrk,
    all: Vec<f64>,
}

/// Runs wrk against every endpoint and returns the markdown table (with ratios to native
/// and to `wasmtime serve`).
pub(crate) fn compare(endpoints: &[Endpoint], out: &Path) -> Result<String> {
    let secs = env_num("BENCH_DURATION", 5)?;
    let reps = env_num("BENCH_REPS", 3)?.max(1);
    let conns: Vec<usize> = std::env::var("BENCH_CONNS")
        .unwrap_or_else(|_| "1 16 64".into())
        .split_whitespace()
        .map(|c| {
            c.parse()
                .with_context(|| format!("BENCH_CONNS entry {c:?}"))
        })
        .collect::<Result<_>>()?;
    let slug = |s: &str| s.replace(' ', "-");
    let mut rows = Vec::new();
    for e in endpoints {
        let url = format!("http://{}{}", e.addr, e.work.path());
        // Warm-up: first instantiations, connection setup; also the 200 sanity check.
        wrk(
            &url,
            4,
            2,
            &out.join(format!(
                "http-{}-{}-warmup.txt",
                slug(e.server),
                e.work.name()
            )),
        )?;
        for &c in &conns {
            let mut runs = Vec::new();
            for r in 1..=reps {
                let raw = out.join(format!(
                    "http-{}-{}-c{c}-r{r}.txt",
                    slug(e.server),
                    e.work.name()
                ));
                let w = wrk(&url, c, secs, &raw)?;
                eprintln!(
                    "  {} {} c={c} run {r}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms",
                    e.server,
                    e.work.name(),
                    w.rps,
                    w.p50_ms,
                    w.p99_ms
                );
                runs.push(w);
            }
            runs.sort_by(|a, b| a.rps.total_cmp(&b.rps));
            let all = runs.iter().map(|w| w.rps).collect();
            rows.push(Row {
                server: e.server,
                work: e.work,
                conns: c,
                median: runs[(runs.len() - 1) / 2],
                all,
            });
        }
    }
    let find = |server: &str, work: Work, c: usize| {
        rows.iter()
            .find(|r| r.server == server && r.work == work && r.conns == c)
            .map(|r| r.median)
    };
    let native = |work: Work, c: usize| {
        let same = if work == Work::HelloP3 {
            Work::Hello
        } else {
            work
        };
        find("native", same, c)
    };
    let ratio = |a: f64, b: Option<f64>| match b {
        Some(b) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    let mut md = format!(
        "wrk, {secs} s per run, median of {reps} runs (min-max of the runs); {}.\n\n\
         | work | server | conns | req/s | runs min-max | p50 ms | p99 ms | vs native | vs wasmtime serve | p99 vs wasmtime serve |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        if pinning() {
            "every server on CPU 0 from its start (local servers: taskset -c 0 before exec; \
             the shim's pods: cpuset_cpus \"0\"), so each sizes its thread pool to one CPU; \
             wrk (1 thread) on CPU 1"
        } else {
            "one CPU: wrk and the server share it"
        }
    );
    for r in &rows {
        let (lo, hi) = (r.all[0], r.all[r.all.len() - 1]);
        let ws = find("wasmtime serve", r.work, r.conns);
        writeln!(
            md,
            "| {} | {} | {} | {:.0} | {lo:.0}-{hi:.0} | {:.3} | {:.3} | {} | {} | {} |",
            r.work.name(),
            r.server,
            r.conns,
            r.median.rps,
            r.median.p50_ms,
            r.median.p99_ms,
            ratio(r.median.rps, native(r.work, r.conns).map(|w| w.rps)),
            ratio(r.median.rps, ws.map(|w| w.rps)),
            ratio(r.median.p99_ms, ws.map(|w| w.p99_ms)),
        )?;
    }
    // The goals of issue 20, read off this run.
    let get = |s: &str, w: Work, c: usize| find(s, w, c).map(|w| w.rps).unwrap_or(f64::NAN);
    let (ss, ws, sh) = (
        get("spin-serve", Work::Hello, 16),
        get("wasmtime serve", Work::Hello, 16),
        get("shim", Work::Hello, 16),
    );
    if !ss.is_nan() && !ws.is_nan() {
        writeln!(
            md,
            "\nHello at c=16: spin-serve / wasmtime serve = {:.2}; shim / spin-serve = {}; \
             p99 spin-serve {:.3} ms vs wasmtime serve {:.3} ms. fib(25) at c=16: spin-serve / \
             native = {:.2}, shim / native = {}.",
            ss / ws,
            if sh.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}", sh / ss)
            },
            find("spin-serve", Work::Hello, 16).map_or(f64::NAN, |w| w.p99_ms),
            find("wasmtime serve", Work::Hello, 16).map_or(f64::NAN, |w| w.p99_ms),
            get("spin-serve", Work::Cpu, 16) / get("native", Work::Cpu, 16),
            {
                let s = get("shim", Work::Cpu, 16) / get("native", Work::Cpu, 16);
                if s.is_nan() {
                    "-".to_string()
                } else {
                    format!("{s:.2}")
                }
            }
        )?;
        let tuned = get(WASMTIME_OUR_POOLING, Work::Hello, 16);
        if !tuned.is_nan() {
            writeln!(
                md,
                "`wasmtime serve` with our pooling settings (`-O pooling-pagemap-scan=y,...`): \
                 hello at c=16 {:.2}x its defaults; spin-serve / it = {:.2}.",
                tuned / ws,
                ss / tuned
            )?;
        }
        let musl = get("spin-serve (musl)", Work::Hello, 16);
        if !musl.is_nan() {
            writeln!(
                md,
                "The release archives' build (static musl, mimalloc): hello at c=16 {:.2}x the \
                 glibc spin-serve, fib(25) {:.2}x.",
                musl / ss,
                get("spin-serve (musl)", Work::Cpu, 16) / get("spin-serve", Work::Cpu, 16)
            )?;
        }
        let wt = get("wasmtime serve -W timeout", Work::Cpu, 16);
        if !wt.is_nan() {
            writeln!(
                md,
                "With epoch interruption on both sides (`wasmtime serve -W timeout`): fib(25) at \
                 c=16 spin-serve / wasmtime serve = {:.2}, wasmtime serve / native = {:.2}; hello \
                 at c=16 spin-serve / wasmtime serve = {:.2}.",
                get("spin-serve", Work::Cpu, 16) / wt,
                wt / get("native", Work::Cpu, 16),
                ss / get("wasmtime serve -W timeout", Work::Hello, 16),
            )?;
        }
    }
    let (p3, p3_fresh, p3_ws) = (
        get("spin-serve", Work::HelloP3, 16),
        get("spin-serve (no reuse)", Work::HelloP3, 16),
        get("wasmtime serve -W timeout", Work::HelloP3, 16),
    );
    if !p3.is_nan() {
        let p3_shim = get("shim", Work::HelloP3, 16);
        writeln!(
            md,
            "WASIp3 hello at c=16 (instances reused, Spin's and `wasmtime serve`'s defaults): \
             spin-serve / spin-serve with a fresh instance per request = {:.2}; spin-serve / \
             wasmtime serve = {:.2} (with epochs: {:.2}); shim / spin-serve = {}.",
            p3 / p3_fresh,
            p3 / get("wasmtime serve", Work::HelloP3, 16),
            p3 / p3_ws,
            if p3_shim.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}", p3_shim / p3)
            }
        )?;
    }
    Ok(md)
}

/// Samples `pid` with `perf record -e cpu-clock` while wrk loads `url` at `conns`, and
/// returns the top frames (self time) as an indented block.
pub(crate) fn profile(
    pid: u32,
    url: &str,
    conns: usize,
    secs: usize,
    out: &Path,
) -> Result<String> {
    let data = out.join("perf-spin-serve.data");
    let perf = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "2000", "-g", "-o"])
        .arg(&data)
        .args(["-p", &pid.to_string(), "--", "sleep", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running perf (apt-get install -y linux-perf)")?;
    std::thread::sleep(Duration::from_millis(300));
    let load = wrk_pinned(url, conns, secs.saturating_sub(1).max(1)).output()?;
    ensure!(load.status.success(), "wrk under perf: {load:?}");
    let rec = perf.wait_with_output()?;
    ensure!(
        rec.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let report = |extra: &[&str]| -> Result<String> {
        let o = Command::new("perf")
            .args(["report", "--stdio", "-i"])
            .arg(&data)
            .args(["--no-children", "--percent-limit", "1"])
            .args(extra)
            .output()?;
        ensure!(
            o.status.success(),
            "perf report: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let flat = report(&["-g", "none", "--sort", "dso,symbol"])?;
    std::fs::write(out.join("perf-spin-serve.txt"), &flat)?;
    let by_object = report(&["-g", "none", "--sort", "dso"])?;
    let mut md = String::from("By object (`[JIT]` or the `.cwasm` file is the guest's compiled code, `[kernel.kallsyms]` mostly loopback TCP):\n\n");
    for line in by_object
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(8)
    {
        writeln!(
            md,
            "    {}",
            line.split_whitespace().collect::<Vec<_>>().join("  ")
        )?;
    }
    md.push_str("\nTop frames:\n\n");
    // perf pads its columns to the terminal width and appends the empty `-  -` of the
    // sort keys it was not given: keep the figures and names only.
    for line in flat
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(25)
    {
        let words: Vec<&str> = line.split_whitespace().filter(|w| *w != "-").collect();
        writeln!(md, "    {}", words.join("  "))?;
    }
    Ok(md)
}

/// First start of an SDK app through `spin-serve`: process start to its first 200.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartRow {
    pub(crate) cold: super::Spread,
    pub(crate) warm: super::Spread,
    /// Peak RSS (VmHWM) of a cold start, MiB (median), up to its Cranelift code being in
    /// place (with tiered compilation, after the background compilation).
    pub(crate) cold_peak_mib: f64,
    pub(crate) warm_peak_mib: f64,
    /// Cold starts that served first on baseline code: process start -> Cranelift's entry
    /// in the compile cache, ms; `None` when the first start compiled with Cranelift.
    pub(crate) tier_up: Option<super::Spread>,
}

/// Whether `dir` holds a finished compile cache entry.
fn has_cache_entry(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
    })
}

/// VmHWM of `pid` in MiB.
fn peak_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |k| k / 1024.0)
}

/// Cold (empty compile cache each time) and warm starts of `app` through spin-serve.
pub(crate) fn first_start(
    app: &integration::sdk_apps::SdkApp,
    cold_runs: usize,
    warm_runs: usize,
    logs: &Path,
) -> Result<StartRow> {
    app.require_built()?;
    let bin = integration::shim_bin_dir().join("spin-serve");
    let cache = tempfile::tempdir()?;
    let route = app.routes[0].0;
    let once = |cold: bool, i: usize| -> Result<(f64, f64, Option<f64>)> {
        if cold {
            super::empty_dir(cache.path())?;
        }
        let addr: SocketAddr = ([127, 0, 0, 1], cri_tests::scenario::free_loopback_port()?).into();
        let log = logs.join(format!(
            "start-{}-{}-{i}.log",
            app.dir,
            if cold { "cold" } else { "warm" }
        ));
        let mut cmd = Command::new(&bin);
        cmd.arg(app.path())
            .args(["--listen", &addr.to_string()])
            .env("SPIN_SHIM_COMPILE_CACHE_DIR", cache.path())
            .env("RUST_LOG", "warn");
        let t0 = Instant::now();
        let p = spawn_serving(cmd, addr, route, &log)?;
        let took = t0.elapsed().as_secs_f64() * 1000.0;
        // Tiered compilation: the app answered on baseline code; its Cranelift code is
        // compiled in the background and stored. Wait for it (bounded), so the peak covers
        // the whole first start and the warm runs find the entry.
        let mut tier_up = None;
        if cold && !has_cache_entry(cache.path()) {
            let deadline = Instant::now() + std::time::Duration::from_secs(300);
            while !has_cache_entry(cache.path()) {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{}: no compile cache entry 300 s after a cold start (log {})",
                    app.dir,
                    log.display()
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            tier_up = Some(t0.elapsed().as_secs_f64() * 1000.0);
            // The swap follows the store; give it a moment so the peak includes it.
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let peak = peak_mib(p.pid());
        drop(p);
        Ok((took, peak, tier_up))
    };
    let mut cold = Vec::new();
    let mut cold_peak = Vec::new();
    let mut tier_ups = Vec::new();
    for i in 0..cold_runs {
        let (t, p, tier) = once(true, i)?;
        cold.push(t);
        cold_peak.push(p);
        tier_ups.extend(tier);
    }
    // The last cold start filled the cache.
    let mut warm = Vec::new();
    let mut warm_peak = Vec::new();
    for i in 0..warm_runs {
        let (t, p, _) = once(false, i)?;
        warm.push(t);
        warm_peak.push(p);
    }
    Ok(StartRow {
        cold: spread(&cold),
        warm: spread(&warm),
        cold_peak_mib: spread(&cold_peak).median,
        warm_peak_mib: spread(&warm_peak).median,
        tier_up: (!tier_ups.is_empty()).then(|| spread(&tier_ups)),
    })
}

/// The SDK apps whose first start the report lists: one Rust, one JavaScript, one Python.
pub(crate) fn start_apps() -> Vec<integration::sdk_apps::SdkApp> {
    ["sdk5-http-p2", "sdk5-http", "js-sdk-hello", "py-spin-hello"]
        .iter()
        .filter_map(|d| {
            integration::sdk_apps::SDK_APPS
                .iter()
                .find(|a| a.dir == *d)
                .copied()
        })
        .collect()
}

/// The first-start table of [`start_apps`].
pub(crate) fn first_start_table(logs: &Path) -> Result<String> {
    let cold_runs = env_num("BENCH_START_COLD", 3)?.max(1);
    let warm_runs = env_num("BENCH_START_WARM", 5)?.max(1);
    let mut md = format!(
        "spin-serve started with the app directory, time from process start to the first \
         200 of its first route; cold = empty compile cache (compile, and for a wasip1 module \
         componentize, then store), median of {cold_runs}; a component of 2 MiB or more \
         first serves on Winch's code (tiered compilation, `SPIN_SHIM_TIERED_COMPILE`) while \
         Cranelift compiles it in the background: `Cranelift in` = process start -> its entry \
         in the cache (the code swapped in); warm = cache filled by the cold runs, median of \
         {warm_runs}; peak = VmHWM of the serving process, for a cold start after its \
         Cranelift code is in place.\n\n\
         | language | SDK | target | wasm MB | cold ms (min-max) | Cranelift in ms | cold peak MiB | warm ms (min-max) | warm peak MiB |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|\n"
    );
    for app in start_apps() {
        let size = std::fs::metadata(
            integration::workspace_root()
                .join("tests/apps/target")
                .join(app.wasm),
        )
        .map_or(0.0, |m| m.len() as f64 / 1e6);
        let r = first_start(&app, cold_runs, warm_runs, logs)
            .with_context(|| format!("first start of {}", app.dir))?;
        eprintln!(
            "  first start {}: cold {:.0} ms, warm {:.0} ms",
            app.dir, r.cold.median, r.warm.median
        );
        writeln!(
            md,
            "| {} | {size:.1} | {:.0} ({:.0}-{:.0}) | {} | {:.0} | {:.1} ({:.1}-{:.1}) | {:.0} |",
            app.label(),
            r.cold.median,
            r.cold.min,
            r.cold.max,
            r.tier_up
                .as_ref()
                .map_or("-".to_string(), |t| format!("{:.0}", t.median)),
            r.cold_peak_mib,
            r.warm.median,
            r.warm.min,
            r.warm.max,
            r.warm_peak_mib
        )?;
    }
    Ok(md)
}

/// `shim-bench http` without containers: native, `wasmtime serve` and `spin-serve` only
/// (a quick loop while working on the request path); summary in
/// `target/bench/http-summary.md`.
pub(crate) fn run_local() -> Result<()> {
    let out = integration::workspace_root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    let logs = tempfile::tempdir()?;
    let servers = start_local(logs.path())?;
    let mut md = String::from("# HTTP benchmark (processes only)\n\n");
    md.push_str(&compare(&servers.endpoints, &out)?);
    if std::env::var("BENCH_PROFILE").as_deref() != Ok("0") {
        let e = servers
            .endpoints
            .iter()
            .find(|e| e.server == "spin-serve" && e.work == Work::Hello)
            .context("spin-serve hello endpoint")?;
        let url = format!("http://{}{}", e.addr, e.work.path());
        md.push_str("\nProfile of spin-serve, hello at c=16 (perf, cpu-clock, self time):\n\n");
        md.push_str(&profile(e.pid, &url, 16, 6, &out)?);
    }
    let summary = out.join("http-summary.md");
    std::fs::write(&summary, &md)?;
    println!("{md}\nsummary: {}", summary.display());
    Ok(())
}
