//! The outbound-HTTP-bound route at c=1 and c=16: tests/apps/spin-outbound under
//! `spin-serve`, each inbound request one outbound `GET` (`spin_sdk::http::send`) to a
//! hyper HTTP/1.1 origin on loopback started here, which answers [`BODY_BYTES`] bytes at
//! once (`/`) or [`LATE`] late (`/late`, as an origin one network hop away). With the late
//! origin the wait dominates a request, so c=16 serves about 16 times c=1's requests per
//! second (up to the CPU) when outbound calls are awaited concurrently, and c=1's rate when
//! they queue.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};

use super::{measure_with, row, spin_serve, CONNS};
use crate::http::{app_dir, pin_server, spawn_serving};
use crate::{env_num, spread};

/// The origin's body size.
const BODY_BYTES: usize = 64;

/// How late `/late` answers.
const LATE: Duration = Duration::from_millis(1);

/// A loopback HTTP/1.1 origin (hyper, its own tokio runtime on one thread); stops on drop.
struct Origin {
    addr: SocketAddr,
    load: Arc<Load>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Requests the origin is answering now, and the most at once since the last
/// [`Load::take_most`]: whether outbound calls reached it concurrently.
#[derive(Default)]
struct Load {
    open: AtomicUsize,
    most: AtomicUsize,
}

impl Load {
    fn take_most(&self) -> usize {
        self.most.swap(0, Ordering::SeqCst)
    }

    /// Waits (10 s at most) until no request is open: wrk's last requests of a run, which
    /// the server still completes after wrk closed its connections, are done.
    fn wait_idle(&self) -> Result<()> {
        let idle = integration::wait_for(Duration::from_secs(10), || {
            (self.open.load(Ordering::SeqCst) == 0).then_some(())
        });
        anyhow::ensure!(
            idle.is_some(),
            "the origin still had {} requests open 10 s after wrk ended",
            self.open.load(Ordering::SeqCst)
        );
        Ok(())
    }
}

/// One request counted open in a [`Load`] until dropped: also when hyper drops the answer
/// unfinished because the client closed the connection (the server cancels an outbound call
/// whose inbound client has gone, as at the end of each wrk run).
struct Open(Arc<Load>);

impl Open {
    fn new(load: Arc<Load>) -> Open {
        let open = load.open.fetch_add(1, Ordering::SeqCst) + 1;
        load.most.fetch_max(open, Ordering::SeqCst);
        Open(load)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(
    load: Arc<Load>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let _open = Open::new(load);
    if req.uri().path() == "/late" {
        // A blocking-pool thread sleeps the exact delay (tokio's timer rounds up to the next
        // millisecond tick), as the Redis delay proxy does; requests wait concurrently.
        let _ = tokio::task::spawn_blocking(|| std::thread::sleep(LATE)).await;
    }
    let body = Bytes::from(vec![b'o'; BODY_BYTES]);
    Ok(Response::new(Full::new(body)))
}

impl Origin {
    fn start() -> Result<Origin> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(64)
            .build()
            .context("building the origin's tokio runtime")?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let load = Arc::new(Load::default());
        let counted = load.clone();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                loop {
                    let conn = tokio::select! {
                        _ = &mut stopped => return,
                        conn = listener.accept() => conn,
                    };
                    let Ok((tcp, _)) = conn else { continue };
                    let _ = tcp.set_nodelay(true);
                    let load = counted.clone();
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(
                                hyper_util::rt::TokioIo::new(tcp),
                                hyper::service::service_fn(|req| answer(load.clone(), req)),
                            )
                            .await;
                    });
                }
            });
        });
        Ok(Origin {
            addr,
            load,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// CPU time `pid` has used so far, user and system, all threads (`/proc/<pid>/stat`).
fn cpu_time(pid: u32) -> Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let fields = crate::proc_stat_fields(pid).with_context(|| format!("reading {path}"))?;
    let ticks = |i: usize| -> Result<u64> {
        let f = fields
            .get(i)
            .with_context(|| format!("{path}: no field {}", i + 3))?;
        f.parse()
            .with_context(|| format!("{path}: field {} is {f:?}", i + 3))
    };
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 1000 / hz))
}

/// Runs the outbound-HTTP rows and returns their markdown (table and the raw wrk output).
pub(crate) fn section() -> Result<(String, String)> {
    let secs = env_num("BENCH_DURATION", 5)?;
    let reps = env_num("BENCH_REPS", 3)?;
    let work = tempfile::tempdir()?;
    let origin = Origin::start()?;
    let app = app_dir(work.path(), "spin-outbound")?;
    let program = spin_serve();
    let addr: SocketAddr = ([127, 0, 0, 1], cri_tests::scenario::free_loopback_port()?).into();
    let url = |path: &str| format!("/?url=http://{}{path}", origin.addr);
    let mut cmd = Command::new(&program);
    cmd.arg(&app)
        .args(["--listen", &addr.to_string()])
        .env(
            "SPIN_VARIABLE_UPSTREAM_PORT",
            origin.addr.port().to_string(),
        )
        .env("SPIN_SHIM_COMPILE_CACHE_DIR", work.path().join("cache"))
        .env("RUST_LOG", "warn");
    let server = spawn_serving(cmd, addr, &url("/"), &work.path().join("spin-serve.log"))?;
    pin_server(server.pid())?;
    let mut raw = String::new();
    let mut md = format!(
        "spin-outbound under `{}`: each request one outbound `GET` (`spin_sdk::http::send`) over \
         the app's keep-alive connection pool (`[outbound_http] connection_pooling`, on by \
         default) to a hyper HTTP/1.1 origin on loopback (not pinned) answering {BODY_BYTES} bytes; wrk, {secs} \
         s per run, median of {reps} runs (min-max); the last row's origin answers each \
         request {LATE:?} late.\n\n\
         | origin | c=1 req/s | c=16 req/s | c=16 / c=1 |\n|---|---|---|---|\n",
        program.display()
    );
    // Per row and connection count: spin-serve's CPU share of each run, and the most
    // requests open at the origin at once in any run.
    let mut notes = Vec::new();
    for (name, path) in [
        ("loopback, answers at once", "/"),
        ("loopback, answers 1 ms late", "/late"),
    ] {
        let target = format!("http://{addr}{}", url(path));
        let mut busy: [Vec<f64>; CONNS.len()] = Default::default();
        let mut most = [0; CONNS.len()];
        origin.load.wait_idle()?;
        origin.load.take_most();
        let mut used = cpu_time(server.pid())?;
        let r = measure_with(&target, secs, reps, &mut raw, &mut |conns| {
            let now = cpu_time(server.pid())?;
            let i = CONNS.iter().position(|&c| c == conns).unwrap_or(0);
            busy[i].push((now - used).as_secs_f64() / secs as f64);
            origin.load.wait_idle()?;
            most[i] = most[i].max(origin.load.take_most());
            used = cpu_time(server.pid())?;
            Ok(())
        })?;
        row(&mut md, name, &r)?;
        let per_conns: Vec<String> = CONNS
            .iter()
            .zip(busy.iter().zip(most))
            .map(|(c, (b, m))| {
                format!(
                    "c={c}: spin-serve busy {:.0}% of a CPU, up to {m} at the origin",
                    spread(b).median * 100.0
                )
            })
            .collect();
        notes.push(format!("{name}: {}", per_conns.join("; ")));
    }
    drop(server);
    writeln!(
        md,
        "\nspin-serve's CPU time (user + system, median of the runs) per second of wrk, and \
         the most requests open at the origin at once:\n"
    )?;
    for note in notes {
        writeln!(md, "- {note}")?;
    }
    Ok((md, raw))
}
