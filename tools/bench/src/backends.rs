//! Key-value-bound routes at c=1 and c=16 (`shim-bench backends`, and a section of `all`):
//! the spin-kv guest app under `spin-serve`, each request one `fermyon:spin/key-value` `get`
//! of a 64-byte value, on a store of `type = "redis"` (a private redis-server on loopback) and
//! on one of `type = "spin"` (SQLite), and on Redis one network hop away (the same server
//! behind a loopback proxy that delivers each reply [`FAR_DELAY`] late, as a managed Redis in
//! another zone answers): there the store's wait dominates a request, so c=16 serves about
//! 16 times c=1's requests per second (up to the CPU) when calls are awaited, and c=1's rate
//! when they queue behind one blocking connection. Then the outbound-HTTP-bound route the same
//! way ([`outbound`]).
//!
//! `BENCH_SPIN_SERVE` names another `spin-serve` binary (e.g. one built from an older commit,
//! to compare in the same conditions); `BENCH_DURATION` and `BENCH_REPS` as for the HTTP rows;
//! `BENCH_BACKENDS` (`kv` or `outbound`) runs one of the two tables alone in
//! `shim-bench backends`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};

use super::http::{app_dir, pin_server, spawn_serving, wrk_pinned};
use super::{env_num, parse_wrk, spread};

mod outbound;

/// Connection counts measured.
const CONNS: [usize; 2] = [1, 16];

/// The key every request reads, and its value's size.
const KEY: &str = "bench";
const VALUE_BYTES: usize = 64;

/// How late the proxy of the "Redis one hop away" row delivers each reply.
const FAR_DELAY: Duration = Duration::from_millis(1);

/// A loopback TCP proxy to `upstream` that writes every chunk of the server's replies
/// `delay` after it arrived, without limiting how many are on the way.
struct DelayProxy {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl DelayProxy {
    fn start(upstream: SocketAddr, delay: Duration) -> Result<DelayProxy> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let (Ok(client), Ok(server)) = (client, std::net::TcpStream::connect(upstream))
                else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    std::thread::spawn(move || relay(c, s, Duration::ZERO));
                    std::thread::spawn(move || relay(server, client, delay));
                }
            }
        });
        Ok(DelayProxy { addr, stop })
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Wakes the accept loop so that it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read (a writer thread keeps the
/// reads going meanwhile); ends when either side closes.
fn relay(mut from: std::net::TcpStream, mut to: std::net::TcpStream, delay: Duration) {
    use std::io::{Read, Write};
    let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
    let writer = std::thread::spawn(move || {
        for (due, chunk) in rx {
            std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0
            || tx
                .send((std::time::Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
        {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
}

/// A redis-server on a free loopback port with nothing persisted, stopped by its pid.
struct Redis {
    addr: SocketAddr,
    child: std::process::Child,
}

impl Drop for Redis {
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

fn start_redis(dir: &Path) -> Result<Redis> {
    let port = cri_tests::scenario::free_loopback_port()?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir)
        .stdin(Stdio::null());
    let log = std::fs::File::create(dir.join("redis.log"))?;
    cmd.stdout(log.try_clone()?).stderr(log);
    let redis = Redis {
        addr,
        child: cmd
            .spawn()
            .context("starting redis-server (apt-get install -y redis-server)")?,
    };
    let ready = integration::wait_for(Duration::from_secs(30), || {
        std::net::TcpStream::connect(addr).ok()
    });
    ensure!(
        ready.is_some(),
        "redis-server did not listen on {addr} within 30 s"
    );
    Ok(redis)
}

/// The `spin-serve` measured: `BENCH_SPIN_SERVE`, else the build's.
fn spin_serve() -> PathBuf {
    std::env::var_os("BENCH_SPIN_SERVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| integration::shim_bin_dir().join("spin-serve"))
}

/// `PUT /kv/<KEY>?store=<store>` with a 64-byte body; fails unless the app answers 200.
fn seed(addr: SocketAddr, store: &str) -> Result<()> {
    use std::io::{Read, Write};
    let body = "v".repeat(VALUE_BYTES);
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "PUT /kv/{KEY}?store={store} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    ensure!(
        reply.starts_with("HTTP/1.1 200"),
        "seeding store `{store}` failed: {reply}"
    );
    Ok(())
}

/// One row of a c=1 / c=16 table: `name`, each median (min-max), and their ratio.
fn row(md: &mut String, name: &str, r: &[(f64, f64, f64)]) -> Result<()> {
    let (c1, c16) = (r[0], r[1]);
    writeln!(
        md,
        "| {name} | {:.0} ({:.0}-{:.0}) | {:.0} ({:.0}-{:.0}) | {:.2} |",
        c1.0,
        c1.1,
        c1.2,
        c16.0,
        c16.1,
        c16.2,
        c16.0 / c1.0
    )?;
    Ok(())
}

/// Medians (and min-max) of `reps` wrk runs of `secs` against `url` at each of [`CONNS`].
fn measure(url: &str, secs: usize, reps: usize, raw: &mut String) -> Result<Vec<(f64, f64, f64)>> {
    measure_with(url, secs, reps, raw, &mut |_| Ok(()))
}

/// [`measure`], calling `after_run` with the connection count after each wrk run.
fn measure_with(
    url: &str,
    secs: usize,
    reps: usize,
    raw: &mut String,
    after_run: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<Vec<(f64, f64, f64)>> {
    let mut out = Vec::new();
    for conns in CONNS {
        let mut rps = Vec::new();
        for _ in 0..reps {
            let o = wrk_pinned(url, conns, secs)
                .output()
                .context("running wrk (apt-get install -y wrk)")?;
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            ensure!(o.status.success(), "wrk {url}: {o:?}");
            writeln!(raw, "## {url} c={conns}\n{text}")?;
            let w = parse_wrk(&text).with_context(|| format!("wrk against {url}"))?;
            ensure!(
                !text.contains("Non-2xx"),
                "{url} answered errors under load:\n{text}"
            );
            rps.push(w.rps);
            after_run(conns)?;
        }
        let s = spread(&rps);
        out.push((s.median, s.min, s.max));
    }
    Ok(out)
}

/// Runs the key-value rows and returns their markdown table and the raw wrk output.
fn kv_section() -> Result<(String, String)> {
    let secs = env_num("BENCH_DURATION", 5)?;
    let reps = env_num("BENCH_REPS", 3)?;
    let work = tempfile::tempdir()?;
    let redis = start_redis(work.path())?;
    let far = DelayProxy::start(redis.addr, FAR_DELAY)?;
    let app = app_dir(work.path(), "spin-kv")?;
    // Store `far` (Redis through the delay proxy) beside the app's own two.
    let manifest = std::fs::read_to_string(app.join("spin.toml"))?;
    let stores = "key_value_stores = [\"default\", \"other\"]";
    ensure!(
        manifest.contains(stores),
        "tests/apps/spin-kv/spin.toml no longer has `{stores}`"
    );
    std::fs::write(
        app.join("spin.toml"),
        manifest.replace(
            stores,
            "key_value_stores = [\"default\", \"other\", \"far\"]",
        ),
    )?;
    std::fs::write(
        app.join("runtime-config.toml"),
        format!(
            "[key_value_store.default]\ntype = \"redis\"\nurl = \"redis://{}\"\n\n\
             [key_value_store.other]\ntype = \"spin\"\npath = \"{}\"\n\n\
             [key_value_store.far]\ntype = \"redis\"\nurl = \"redis://{}\"\n",
            redis.addr,
            work.path().join("kv.db").display(),
            far.addr
        ),
    )?;
    let program = spin_serve();
    let addr: SocketAddr = ([127, 0, 0, 1], cri_tests::scenario::free_loopback_port()?).into();
    let mut cmd = Command::new(&program);
    cmd.arg(&app)
        .args(["--listen", &addr.to_string()])
        .env("SPIN_SHIM_COMPILE_CACHE_DIR", work.path().join("cache"))
        .env("RUST_LOG", "warn");
    let server = spawn_serving(
        cmd,
        addr,
        "/kv/?op=keys",
        &work.path().join("spin-serve.log"),
    )?;
    pin_server(server.pid())?;
    let mut raw = String::new();
    let mut md = format!(
        "spin-kv under `{}`: each request one key-value `get` of a {VALUE_BYTES}-byte value; \
         wrk, {secs} s per run, median of {reps} runs (min-max); Redis is a private \
         redis-server on loopback (not pinned); the last row reaches it through a loopback \
         proxy that delivers each reply {FAR_DELAY:?} late.\n\n\
         | store | c=1 req/s | c=16 req/s | c=16 / c=1 |\n|---|---|---|---|\n",
        program.display()
    );
    for (name, store) in [
        ("Redis (`type = \"redis\"`)", "default"),
        ("SQLite (`type = \"spin\"`)", "other"),
        ("Redis, replies 1 ms late (delay proxy)", "far"),
    ] {
        seed(addr, store)?;
        let url = format!("http://{addr}/kv/{KEY}?store={store}");
        let r = measure(&url, secs, reps, &mut raw)?;
        row(&mut md, name, &r)?;
    }
    drop(server);
    Ok((md, raw))
}

/// The heading of the outbound-HTTP table, which follows the key-value one.
const OUTBOUND_HEADING: &str = "Outbound HTTP under concurrency";

/// Runs the key-value rows, then the outbound-HTTP rows, and returns their markdown: the
/// key-value table, then the outbound one under its own `##` heading.
pub(crate) fn section() -> Result<String> {
    let (kv, mut raw) = kv_section()?;
    let (out, out_raw) = outbound::section()?;
    raw.push_str(&out_raw);
    save_raw(&raw)?;
    Ok(format!("{kv}\n## {OUTBOUND_HEADING}\n\n{out}"))
}

/// Writes the wrk output of the backend rows to `target/bench/samples-backends.txt`.
fn save_raw(raw: &str) -> Result<()> {
    let out = integration::workspace_root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("samples-backends.txt"), raw)?;
    Ok(())
}

/// `shim-bench backends`: the key-value and outbound-HTTP rows alone (or one table, by
/// `BENCH_BACKENDS`), into `target/bench/backends.md`.
pub(crate) fn run_local() -> Result<()> {
    let only = std::env::var("BENCH_BACKENDS").unwrap_or_default();
    let kv_title = "# Key-value backends under concurrency";
    let md = match only.as_str() {
        "" => format!("{kv_title}\n\n{}", section()?),
        "kv" => {
            let (md, raw) = kv_section()?;
            save_raw(&raw)?;
            format!("{kv_title}\n\n{md}")
        }
        "outbound" => {
            let (md, raw) = outbound::section()?;
            save_raw(&raw)?;
            format!("# {OUTBOUND_HEADING}\n\n{md}")
        }
        other => anyhow::bail!(
            "BENCH_BACKENDS={other:?} is not a table of shim-bench backends: set `kv`, \
             `outbound`, or unset it for both"
        ),
    };
    let path = integration::workspace_root().join("target/bench/backends.md");
    std::fs::write(&path, &md)?;
    println!("{md}\nreport: {}", path.display());
    Ok(())
}
