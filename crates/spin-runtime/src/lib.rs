//! Spin application runtime on wasmtime.
//!
//! - [`app`]: the app model, from `spin.toml` v2 or a locked-app JSON.
//! - [`routing`]: Spin's HTTP route matching.
//! - [`runtime`]: engine, compile cache use, pre-instantiated components.
//! - [`server`]: the HTTP trigger (Spin headers, built-in endpoints, graceful shutdown).
//! - [`trigger`]: the Redis, MQTT, cron and command triggers, and all triggers running
//!   together.
//! - [`compile_cache`]: on-disk cache of compiled components (shared with the image loader).
//! - [`componentize`]: wasip1 core modules made into components with the preview1 adapter.
//! - [`p3`]: Spin 4 (WASIp3) components: the snapshot's names retargeted, WASIp3 linked.
//! - [`host`]: host features (variables, key-value, outbound HTTP allow-list).
//! - [`limits`]: request deadline, HTTP timeouts, connection cap, instance memory cap.
//!
//! Entry points: [`run_app_in_container`] (the shim's Spin executor: confines the process
//! before the app runs, see [`Confinement`]) and the `spin-serve` binary (development,
//! tests, benchmarks).

#![warn(missing_docs)]

pub mod app;
mod app_log;
pub mod engine;
pub mod host;
pub mod limits;
pub mod metrics;
pub mod p3;
pub mod runtime;
pub mod server;
pub mod spin1;
mod state;
pub mod trigger;
pub mod wasi_rc;

// Engine and compilation under their paths from before they moved into `engine/`.
pub use engine::{compile_cache, componentize, tier};

// The HTTP server's modules under their paths from before they moved into `server/`.
pub use server::{chain, inbound_tls, middleware, routing, wagi};
#[allow(unused_imports)]
pub(crate) use server::{h2c, reuse, whole_body};

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

pub use app::App;
pub use runtime::{LoadedApp, RuntimeConfig};
pub use state::{HostContext, InstanceState};

/// How the process running an app confines itself before any guest code runs: the shim's
/// container runtime gives one ([`run_app_in_container`]); spin-serve runs without.
pub trait Confinement: Send + Sync + std::fmt::Debug {
    /// Confines the process. Called once, on the process's only thread, after the engine
    /// exists and the HTTP listener is bound, before any other thread starts or the app is
    /// loaded; an error stops the app before it serves.
    fn confine(&self) -> anyhow::Result<()>;

    /// The host directories to preopen for a `files` directory `source`, each with its path
    /// relative to the mount's destination (`[(source, "")]` when the source is shown whole).
    /// An error refuses a source the guest may not see (it resolves into procfs, sysfs, the
    /// device nodes, ...).
    fn files_view(
        &self,
        source: &Path,
    ) -> anyhow::Result<Vec<(std::path::PathBuf, std::path::PathBuf)>>;

    /// Refuses a single `files` entry whose host file the guest may not see.
    fn check_file(&self, path: &Path) -> anyhow::Result<()>;

    /// Called once the app's triggers run: the process may give back memory that only
    /// its start needed (loading, compiling). Does nothing by default.
    fn serving(&self) {}
}

/// The process's confinement, set by [`run_app_in_container`]: one process, one confinement.
static CONFINEMENT: std::sync::OnceLock<Arc<dyn Confinement>> = std::sync::OnceLock::new();

/// The confinement [`run_app_in_container`] applied, if any.
pub(crate) fn confinement() -> Option<&'static Arc<dyn Confinement>> {
    CONFINEMENT.get()
}

/// What the shim's container runtime adds to [`run_app_with_args`].
#[derive(Debug, Clone)]
pub struct InContainer {
    /// The container's memory limit from its OCI spec, if it sets one: the per-instance cap
    /// and the pooling allocator's bound derive from the smaller of it and the cgroup's
    /// (which a container on a cgroup v1 host may not be able to read).
    pub spec_memory_limit: Option<u64>,
    /// How the process confines itself.
    pub confinement: Arc<dyn Confinement>,
}

/// As [`run_app_with_args`] in a container's runtime process, which must be single-threaded
/// when it calls this: the engine is created, the HTTP listener bound, then the process
/// confines itself ([`Confinement::confine`]) before any thread starts; tracing, loading and
/// serving run confined.
pub fn run_app_in_container(
    mut app: App,
    app_dir: &Path,
    env: &[(String, String)],
    args: &[String],
    container: InContainer,
) -> anyhow::Result<i32> {
    apply_deployment_env(&mut app, env)?;
    let memory_limit = limits::effective_memory_limit(
        limits::container_memory_limit(),
        container.spec_memory_limit,
    );
    let config = RuntimeConfig::from_env_with_memory_limit(app_dir, env, memory_limit)?;
    runtime::create_engine(memory_limit.map(|l| l.min(usize::MAX as u64) as usize))?;
    let listener = if wants_http(&app) {
        Some(bind_listener(config.listen)?)
    } else {
        None
    };
    create_writable_dirs(&app, app_dir, env);
    // Read while the cgroup's CPU quota is still visible: std looks it up in cgroupfs.
    let workers = std::thread::available_parallelism().ok().map(usize::from);
    let _ = CONFINEMENT.set(container.confinement.clone());
    container
        .confinement
        .confine()
        .context("confining the runtime process before the app runs")?;
    init_tracing(env);
    serve_in_runtime(app, &config, args, listener, workers)
}

/// Creates, before the process confines itself, the directories the runtime writes into
/// that may not exist in the image yet: the state directory of key-value and SQLite stores
/// (`SPIN_STATE_DIR`, else `<app dir>/.spin`) when a component uses one, and the staging
/// directory of single-file mounts (the temp dir). Confined, the runtime may not create
/// entries directly in `/` (the app directory of a spin-in-container image). Failures are
/// left to the code that uses the directory, which names it.
fn create_writable_dirs(app: &App, app_dir: &Path, env: &[(String, String)]) {
    let stores = app
        .components
        .values()
        .any(|c| !c.key_value_stores.is_empty() || !c.sqlite_databases.is_empty());
    if stores {
        let state = env
            .iter()
            .rev()
            .find(|(k, _)| k == host::STATE_DIR_ENV)
            .map(|(_, v)| std::path::PathBuf::from(v))
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| app_dir.join(".spin"));
        let _ = std::fs::create_dir_all(state);
    }
    let staged = app.components.values().any(|c| {
        c.files
            .iter()
            .any(|f| matches!(f, app::FileMount::File { .. }))
    });
    if staged {
        let _ = std::fs::create_dir_all(std::env::temp_dir());
    }
}

/// Whether `app` serves HTTP: it has HTTP triggers, or no trigger of another kind.
fn wants_http(app: &App) -> bool {
    !app.http_triggers.is_empty() || app.event_triggers.is_empty()
}

/// `addr` bound for the HTTP trigger (backlog 1024 as tokio's own bind).
fn bind_listener(addr: std::net::SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let bind = || -> std::io::Result<std::net::TcpListener> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    };
    bind().with_context(|| {
        format!(
            "cannot listen on {addr} (set {} to a free address)",
            runtime::LISTEN_ENV
        )
    })
}

/// Name of the manifest the runtime looks for in the app directory.
pub const MANIFEST_FILE: &str = "spin.toml";

/// Runs the Spin app in `app_dir` (which holds `spin.toml`) until SIGTERM or SIGINT,
/// then drains in-flight requests (up to 10 s) and returns exit code 0.
///
/// `env` is the app's environment (`SPIN_HTTP_LISTEN_ADDR`, `SPIN_MAX_INSTANCE_MEMORY`,
/// `SPIN_SHIM_COMPILE_CACHE_DIR`, variable values). Builds its own tokio runtime and runs
/// unconfined: the shim's container runtime uses [`run_app_in_container`]. Errors (bad
/// manifest, missing variable, bind failure) are returned with context; the caller logs
/// them and exits non-zero.
pub fn run_in_container(app_dir: &Path, env: &[(String, String)]) -> anyhow::Result<i32> {
    init_tracing(env);
    let manifest = app_dir.join(MANIFEST_FILE);
    let app = App::load_manifest(&manifest)?;
    run_app(app, app_dir, env)
}

/// What spin-operator's environment asks of an app before it is served:
/// `SPIN_COMPONENTS_TO_RETAIN` selects the components ([`App::retain_components`]), and
/// `OTEL_EXPORTER_OTLP_*` configures trace export ([`init_tracing`]).
pub fn apply_deployment_env(app: &mut App, env: &[(String, String)]) -> anyhow::Result<()> {
    if let Some((_, v)) = env
        .iter()
        .rev()
        .find(|(k, _)| k == app::COMPONENTS_TO_RETAIN_ENV)
    {
        let retain = app::parse_retain_list(v);
        if !retain.is_empty() {
            app.retain_components(&retain)?;
            tracing::info!("selective deployment: serving components {retain:?}");
        }
    }
    Ok(())
}

/// Like [`run_in_container`] for an app already loaded (e.g. from a locked-app JSON).
/// `SPIN_COMPONENTS_TO_RETAIN` in `env` selects the components to serve
/// ([`App::retain_components`]).
pub fn run_app(app: App, app_dir: &Path, env: &[(String, String)]) -> anyhow::Result<i32> {
    run_app_with_args(app, app_dir, env, &[])
}

/// As [`run_app`]; `args` (the container's arguments after `/`) go to a command trigger's
/// guest, whose exit code is returned.
pub fn run_app_with_args(
    mut app: App,
    app_dir: &Path,
    env: &[(String, String)],
    args: &[String],
) -> anyhow::Result<i32> {
    init_tracing(env);
    apply_deployment_env(&mut app, env)?;
    let config = RuntimeConfig::from_env(app_dir, env)?;
    serve_in_runtime(app, &config, args, None, None)
}

/// Runs the app's triggers on a new tokio runtime until SIGTERM or SIGINT (or the command
/// trigger's end); `listener`: the HTTP listener, when already bound; `workers`: the worker
/// thread count, when known (else tokio's default).
fn serve_in_runtime(
    app: App,
    config: &RuntimeConfig,
    args: &[String],
    listener: Option<std::net::TcpListener>,
    workers: Option<usize>,
) -> anyhow::Result<i32> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    let runtime = builder
        .enable_all()
        .thread_name("spin-worker")
        .on_thread_start(enter_tracing)
        .build()
        .context("cannot start the tokio runtime")?;
    let code = runtime.block_on(async move {
        let shutdown = shutdown_signal()?;
        run_triggers_on(
            app,
            config,
            args,
            listener,
            |addr| {
                let scheme = if config.tls.is_some() {
                    "https"
                } else {
                    "http"
                };
                if let Some(addr) = addr {
                    tracing::info!("Serving {scheme}://{addr}");
                }
                if let Some(c) = confinement() {
                    c.serving();
                }
            },
            shutdown,
        )
        .await
    });
    otel_export::shutdown();
    code
}

/// Loads `app`, binds `config.listen`, calls `on_listening` with the bound address, and
/// serves until `shutdown` completes (then drains). Must run inside a tokio runtime.
pub async fn serve_app(
    app: App,
    config: &RuntimeConfig,
    on_listening: impl FnOnce(std::net::SocketAddr),
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut on_listening = Some(on_listening);
    run_triggers(
        app,
        config,
        &[],
        |addr| {
            if let (Some(addr), Some(f)) = (addr, on_listening.take()) {
                f(addr)
            }
        },
        shutdown,
    )
    .await
    .map(|_| ())
}

/// Loads `app` and runs all its triggers ([`trigger::run`]) until `shutdown` completes or
/// its command trigger exits; returns the command's exit code, else 0. The HTTP listener
/// (`config.listen`) is bound when the app has HTTP triggers or no other trigger; then
/// `on_ready` gets its address, otherwise `None`. Must run inside a tokio runtime.
pub async fn run_triggers(
    app: App,
    config: &RuntimeConfig,
    args: &[String],
    on_ready: impl FnOnce(Option<std::net::SocketAddr>),
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<i32> {
    run_triggers_on(app, config, args, None, on_ready, shutdown).await
}

/// As [`run_triggers`]; `bound`: the HTTP listener when the caller bound it already.
async fn run_triggers_on(
    app: App,
    config: &RuntimeConfig,
    args: &[String],
    bound: Option<std::net::TcpListener>,
    on_ready: impl FnOnce(Option<std::net::SocketAddr>),
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<i32> {
    let http = wants_http(&app);
    let cfg = config.clone();
    let mut loaded = tokio::task::spawn_blocking(move || LoadedApp::load(app, &cfg))
        .await
        .context("app loading task failed")??;
    if let Some(addr) = config.metrics_addr {
        let m = metrics::Metrics::new(&loaded.app.name);
        m.loaded(loaded.stats.cache_hits as u64, loaded.stats.compiled as u64);
        metrics::serve(m.clone(), addr).await?;
        loaded.metrics = Some(m);
    }
    let listener = if let (true, Some(l)) = (http, bound) {
        Some(tokio::net::TcpListener::from_std(l).context("the bound HTTP listener")?)
    } else if http {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} (set {} to a free address)",
                    config.listen,
                    runtime::LISTEN_ENV
                )
            })?;
        Some(listener)
    } else {
        None
    };
    let loaded = Arc::new(loaded);
    runtime::start_tier_up(&loaded);
    trigger::run(loaded, config, listener, args, on_ready, shutdown).await
}

/// Turns off the capture of library backtraces (`std::backtrace::Backtrace::capture`, used
/// by wasmtime's and anyhow's errors) unless `RUST_LIB_BACKTRACE` already says otherwise;
/// panics still print a backtrace under `RUST_BACKTRACE`. With `RUST_BACKTRACE=1` in the
/// environment every request paid for an unwind: wasmtime builds an error while dropping each
/// request's store (its "future dropped" fiber disposal), about 6% of the CPU at c=16.
/// Call it first in `main`, before any thread exists (it sets an environment variable).
pub fn quiet_library_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// A future completing on the first SIGTERM or SIGINT. Installing the handlers matters
/// in a container: PID 1 ignores SIGTERM without one.
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot install SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}

/// Logs to stderr, filtered by `RUST_LOG` from `env` (default `info`), and exports traces,
/// metrics and the app's output as logs when `OTEL_EXPORTER_OTLP_*` in `env` (or the process
/// environment) asks for it ([`otel_export`]; service name `spin` unless `OTEL_SERVICE_NAME`
/// says otherwise).
/// Idempotent.
pub fn init_tracing(env: &[(String, String)]) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    static ONCE: std::sync::Once = std::sync::Once::new();
    let lookup = |key: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(key).ok())
    };
    ONCE.call_once(|| {
        let filter = lookup("RUST_LOG").unwrap_or_else(|| "info".to_string());
        // Host-call trace events carry arguments and results (secrets): never logged.
        // The app's output already went to stdout/stderr; as events it is for spans only.
        let filter = format!(
            "{filter},{}=off,{}=off",
            otel_export::HOST_CALL_TARGETS,
            otel_export::APP_LOG_TARGET
        );
        // Container output is a file or pipe (docker logs, kubectl logs): colour escapes
        // only on a terminal.
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::new(filter));
        let otel = otel_export::layer_from_env(&lookup, "spin", &[]);
        otel_export::start_metrics_and_logs(&lookup, "spin");
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(fmt).with(otel));
        if dispatch.clone().try_init().is_err() {
            // In a container the shim's container-creation helper installed its subscriber
            // before it forked this process: ours serves this thread and every thread of
            // the runtime ([`enter_tracing`]).
            let _ = THREAD_DISPATCH.set(dispatch.clone());
            enter_tracing();
        }
        for (on, line) in otel_export::decisions() {
            if on {
                tracing::info!("{line}");
            } else {
                tracing::warn!("{line}");
            }
        }
    });
}

/// The subscriber of [`init_tracing`] when another one was already global.
static THREAD_DISPATCH: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();

/// Makes [`init_tracing`]'s subscriber the calling thread's for good (runtime threads call
/// it at start), where it could not be made the global one.
pub(crate) fn enter_tracing() {
    if let Some(d) = THREAD_DISPATCH.get() {
        std::mem::forget(tracing::dispatcher::set_default(d));
    }
}
