//! `shim-bench http` (`make bench-http`): wrk against `spin-serve` running the spin-hello and
//! spin-cpu (fib(25)) guest apps, beside the native hyper hello server measured in the same
//! run, at each concurrency of `BENCH_CONNS` (default `1 16 64`). Each point runs
//! `BENCH_REPS` times (default 3) for `BENCH_DURATION` seconds (default 10); the summary gives
//! the median requests/s with the spread of the runs, the p50/p99 latency of the median run,
//! and the ratio to native. Raw wrk output: `target/bench/http-*.txt`; summary:
//! `target/bench/http-summary.md`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use super::{env_num, parse_wrk, wrk_command, Wrk};

/// How long a server may take to print its listen address (first compile included).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A server process, killed (SIGTERM, then SIGKILL) when dropped.
struct Server {
    name: &'static str,
    child: Child,
    url: String,
}

impl Drop for Server {
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

/// Starts `cmd`, waits for its `listening on http://ADDR` line and returns it serving `path`.
fn start(name: &'static str, mut cmd: Command, path: &str, log: &Path) -> Result<Server> {
    let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {name}: {cmd:?}"))?;
    let stdout = child.stdout.take().context("server stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.split("listening on http://").nth(1) {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    let mut server = Server {
        name,
        child,
        url: String::new(),
    };
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(addr) => server.url = format!("http://{addr}{path}"),
        Err(_) => bail!(
            "{name} printed no listen address within {START_TIMEOUT:?}; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
    Ok(server)
}

/// A copy of `tests/apps/<app>` whose manifest points at the built guest apps.
fn app_dir(work: &Path, app: &str) -> Result<PathBuf> {
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

/// One wrk run (`conns` connections, `secs` seconds) against `url`; raw output kept in `raw`.
fn wrk(url: &str, conns: usize, secs: usize, raw: &Path) -> Result<Wrk> {
    let out = wrk_command(url, conns, secs)
        .output()
        .context("running wrk (apt-get install -y wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(raw, &text)?;
    ensure!(out.status.success(), "wrk {url}: {out:?}");
    parse_wrk(&text).with_context(|| format!("wrk against {url}"))
}

/// Runs the HTTP benchmark and writes its summary.
pub(crate) fn run() -> Result<()> {
    let secs = env_num("BENCH_DURATION", 10)?;
    let reps = env_num("BENCH_REPS", 3)?.max(1);
    let conns: Vec<usize> = std::env::var("BENCH_CONNS")
        .unwrap_or_else(|_| "1 16 64".into())
        .split_whitespace()
        .map(|c| {
            c.parse()
                .with_context(|| format!("BENCH_CONNS entry {c:?}"))
        })
        .collect::<Result<_>>()?;
    let out = integration::workspace_root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    let bin = integration::shim_bin_dir();
    let work = tempfile::tempdir()?;
    let serve = |app: &str| -> Result<Command> {
        let mut c = Command::new(bin.join("spin-serve"));
        c.arg(app_dir(work.path(), app)?)
            .args(["--listen", "127.0.0.1:0"])
            .env("SPIN_SHIM_COMPILE_CACHE_DIR", work.path().join("cache"))
            .env("RUST_LOG", "warn");
        Ok(c)
    };
    let mut native = Command::new(bin.join("examples/native-hello"));
    native.args(["--listen", "127.0.0.1:0"]);
    let log = |n: &str| work.path().join(format!("{n}.log"));
    let servers = [
        start("native", native, "/hello", &log("native"))?,
        start("spin-hello", serve("spin-hello")?, "/hello", &log("hello"))?,
        start("spin-cpu", serve("spin-cpu")?, "/?n=25", &log("cpu"))?,
    ];
    // Rows: (target, conns) -> (median run, rps of every run).
    let mut rows: Vec<(&str, usize, Wrk, Vec<f64>)> = Vec::new();
    for s in &servers {
        // Warm-up: first instantiations, connection setup; also the 200 sanity check.
        wrk(
            &s.url,
            4,
            2,
            &out.join(format!("http-{}-warmup.txt", s.name)),
        )?;
        for &c in &conns {
            let mut runs = Vec::new();
            for r in 1..=reps {
                let raw = out.join(format!("http-{}-c{c}-r{r}.txt", s.name));
                let w = wrk(&s.url, c, secs, &raw)?;
                println!(
                    "  {} c={c} run {r}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms",
                    s.name, w.rps, w.p50_ms, w.p99_ms
                );
                runs.push(w);
            }
            runs.sort_by(|a, b| a.rps.total_cmp(&b.rps));
            let all = runs.iter().map(|w| w.rps).collect();
            rows.push((s.name, c, runs[(runs.len() - 1) / 2], all));
        }
    }
    let native_rps = |c: usize| {
        rows.iter()
            .find(|r| r.0 == "native" && r.1 == c)
            .map_or(f64::NAN, |r| r.2.rps)
    };
    let mut md = format!(
        "# HTTP benchmark\n\nwrk, {secs} s per run, median of {reps} runs (min-max of the runs); \
         {} CPUs shared by wrk and the server.\nnative = hyper hello server; spin-hello = \
         /hello of tests/apps/spin-hello; spin-cpu = fib(25) per request; both through \
         `spin-serve`.\n\n| target | conns | req/s | runs min-max | p50 ms | p99 ms | req/s vs \
         native |\n|---|---:|---:|---:|---:|---:|---:|\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for (t, c, w, all) in &rows {
        let (lo, hi) = (all[0], all[all.len() - 1]);
        writeln!(
            md,
            "| {t} | {c} | {:.0} | {lo:.0}-{hi:.0} | {:.3} | {:.3} | {:.3} |",
            w.rps,
            w.p50_ms,
            w.p99_ms,
            w.rps / native_rps(*c)
        )?;
    }
    let summary = out.join("http-summary.md");
    std::fs::write(&summary, &md)?;
    println!("{md}\nsummary: {}", summary.display());
    Ok(())
}
