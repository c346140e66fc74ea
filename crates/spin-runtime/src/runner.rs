//! [`Runner`]: the crate's one entry point. It loads an app, binds its HTTP listener, runs
//! every trigger until SIGTERM/SIGINT (or the command trigger's end) and drains.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use spin_shim_settings::container::ContainerSettings;

use crate::app::App;
use crate::confinement::Confinement;
use crate::runtime::{self, LoadedApp, RuntimeConfig};
use crate::{app, limits, metrics, trigger};

/// What the shim's container runtime adds to a [`Runner`] ([`Runner::in_container`]).
#[derive(Debug, Clone)]
pub struct InContainer {
    /// The container's memory limit from its OCI spec, if it sets one: the per-instance cap
    /// and the pooling allocator's bound derive from the smaller of it and the cgroup's
    /// (which a container on a cgroup v1 host may not be able to read).
    pub spec_memory_limit: Option<u64>,
    /// How the process confines itself.
    pub confinement: Arc<dyn Confinement>,
}

/// Called once the triggers run, with the HTTP listener's address when the app serves HTTP.
type OnReady = Box<dyn FnOnce(Option<SocketAddr>) + Send>;

/// Runs a Spin app: `Runner::new(app).dir(..).env(..).args(..)` then [`Runner::run`] (its own
/// tokio runtime, until SIGTERM or SIGINT) or [`Runner::serve`] (inside the caller's tokio
/// runtime, until a future completes).
///
/// - `dir`: the app directory (relative `files` and the default state directory `.spin`);
///   `.` unless set.
/// - `env`: the app's environment (`SPIN_HTTP_LISTEN_ADDR`, `SPIN_MAX_INSTANCE_MEMORY`,
///   `SPIN_SHIM_COMPILE_CACHE_DIR`, `SPIN_COMPONENTS_TO_RETAIN`, variable values, ...),
///   read into a [`RuntimeConfig`] unless [`Runner::config`] gives one.
/// - `args`: a command trigger's guest arguments, whose exit code the run returns.
///
/// Errors (bad manifest value, missing variable, bind failure) are returned with context;
/// the caller logs them and exits non-zero.
pub struct Runner {
    app: App,
    dir: PathBuf,
    env: Vec<(String, String)>,
    args: Vec<String>,
    config: Option<RuntimeConfig>,
    container: Option<InContainer>,
    on_ready: Option<OnReady>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("app", &self.app.name)
            .field("dir", &self.dir)
            .field("args", &self.args)
            .field("in_container", &self.container.is_some())
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// A runner of `app` (from [`App::load_manifest`], [`App::from_locked_json`], ...).
    pub fn new(app: App) -> Runner {
        Runner {
            app,
            dir: PathBuf::from("."),
            env: Vec::new(),
            args: Vec::new(),
            config: None,
            container: None,
            on_ready: None,
        }
    }

    /// The app directory.
    pub fn dir(mut self, dir: &Path) -> Runner {
        self.dir = dir.to_path_buf();
        self
    }

    /// The app's environment, as `NAME=value` pairs (the last of a name wins).
    pub fn env(mut self, env: &[(String, String)]) -> Runner {
        self.env = env.to_vec();
        self
    }

    /// The command trigger's guest arguments (the container's arguments after `/`).
    pub fn args(mut self, args: &[String]) -> Runner {
        self.args = args.to_vec();
        self
    }

    /// The runtime settings, instead of reading them from [`Runner::env`] (tests, tools).
    /// Not with [`Runner::in_container`], whose memory limit shapes them.
    pub fn config(mut self, config: RuntimeConfig) -> Runner {
        self.config = Some(config);
        self
    }

    /// Runs in a container's runtime process: [`Runner::run`] then creates the engine and
    /// binds the HTTP listener, confines the process ([`Confinement::confine`]) before any
    /// thread starts, and sets up tracing, loads and serves confined. The process must be
    /// single-threaded when it calls [`Runner::run`].
    pub fn in_container(mut self, container: InContainer) -> Runner {
        self.container = Some(container);
        self
    }

    /// Called once the triggers run, with the HTTP listener's address when the app serves
    /// HTTP (`None` otherwise). Without one, [`Runner::run`] logs `Serving http://<addr>`.
    pub fn on_ready(mut self, f: impl FnOnce(Option<SocketAddr>) + Send + 'static) -> Runner {
        self.on_ready = Some(Box::new(f));
        self
    }

    /// Runs the app's triggers on a new tokio runtime until SIGTERM or SIGINT (then drains
    /// in-flight requests, up to 10 s) or the command trigger's end; returns the command's
    /// exit code, else 0.
    pub fn run(self) -> anyhow::Result<i32> {
        if self.container.is_some() {
            return self.run_in_container();
        }
        crate::process::init_tracing(&self.env);
        let (app, config, args, on_ready) = self.unconfined()?;
        serve_in_runtime(app, &config, &args, None, None, on_ready)
    }

    /// The app with the deployment environment applied, and its settings (given, or read
    /// from the environment), to run unconfined.
    fn unconfined(mut self) -> anyhow::Result<(App, RuntimeConfig, Vec<String>, Option<OnReady>)> {
        let settings = ContainerSettings::from_env(&self.env)?;
        crate::process::apply_deployment_env(&mut self.app, &settings)?;
        let config = match self.config {
            Some(c) => c,
            None => RuntimeConfig::from_settings(
                &self.dir,
                &self.env,
                &settings,
                limits::container_memory_limit(),
            )?,
        };
        Ok((self.app, config, self.args, self.on_ready))
    }

    /// The container side of [`Runner::run`].
    fn run_in_container(self) -> anyhow::Result<i32> {
        let Runner {
            mut app,
            dir,
            env,
            args,
            config,
            container,
            on_ready,
        } = self;
        let container = container.context("Runner::run_in_container without InContainer")?;
        if config.is_some() {
            anyhow::bail!(
                "Runner: `config` and `in_container` exclude each other (a container's \
                 settings come from its environment and memory limit): drop `config`"
            );
        }
        let settings = ContainerSettings::from_env(&env)?;
        crate::process::apply_deployment_env(&mut app, &settings)?;
        let memory_limit = limits::effective_memory_limit(
            limits::container_memory_limit(),
            container.spec_memory_limit,
        );
        let config = RuntimeConfig::from_settings(&dir, &env, &settings, memory_limit)?;
        runtime::create_engine(memory_limit.map(|l| l.min(usize::MAX as u64) as usize))?;
        let listener = if wants_http(&app) {
            Some(bind_listener(config.listen)?)
        } else {
            None
        };
        create_writable_dirs(&app, &dir, settings.state_dir.as_deref());
        // Read while the cgroup's CPU quota is still visible: std looks it up in cgroupfs.
        let workers = std::thread::available_parallelism().ok().map(usize::from);
        crate::confinement::set(container.confinement.clone());
        container
            .confinement
            .confine()
            .context("confining the runtime process before the app runs")?;
        crate::process::init_tracing(&env);
        serve_in_runtime(app, &config, &args, listener, workers, on_ready)
    }

    /// Loads the app and runs all its triggers ([`trigger::run`]) inside the caller's tokio
    /// runtime until `shutdown` completes or its command trigger exits; returns the
    /// command's exit code, else 0. The HTTP listener (`SPIN_HTTP_LISTEN_ADDR`) is bound when
    /// the app has HTTP triggers or no other trigger; then `on_ready` gets its address,
    /// otherwise `None`. Neither sets up tracing nor confines the process.
    pub async fn serve(
        self,
        on_ready: impl FnOnce(Option<SocketAddr>),
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<i32> {
        if self.container.is_some() {
            anyhow::bail!(
                "Runner::serve runs unconfined in the caller's runtime: use Runner::run for \
                 an app `in_container`"
            );
        }
        let (app, config, args, _) = self.unconfined()?;
        run_triggers(app, &config, &args, None, on_ready, shutdown).await
    }
}

/// Creates, before the process confines itself, the directories the runtime writes into
/// that may not exist in the image yet: the state directory of key-value and SQLite stores
/// (`SPIN_STATE_DIR`, else `<app dir>/.spin`) when a component uses one, and the staging
/// directory of single-file mounts (the temp dir). Confined, the runtime may not create
/// entries directly in `/` (the app directory of a spin-in-container image). Failures are
/// left to the code that uses the directory, which names it.
fn create_writable_dirs(app: &App, app_dir: &Path, state_dir: Option<&Path>) {
    let stores = app
        .components
        .values()
        .any(|c| !c.key_value_stores.is_empty() || !c.sqlite_databases.is_empty());
    if stores {
        let state = state_dir
            .map(Path::to_path_buf)
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
fn bind_listener(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
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

/// Runs the app's triggers on a new tokio runtime until SIGTERM or SIGINT (or the command
/// trigger's end); `listener`: the HTTP listener, when already bound; `workers`: the worker
/// thread count, when known (else tokio's default); `on_ready`: instead of logging the
/// listen address.
fn serve_in_runtime(
    app: App,
    config: &RuntimeConfig,
    args: &[String],
    listener: Option<std::net::TcpListener>,
    workers: Option<usize>,
    on_ready: Option<OnReady>,
) -> anyhow::Result<i32> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    let runtime = builder
        .enable_all()
        .thread_name("spin-worker")
        .on_thread_start(crate::process::enter_tracing)
        .build()
        .context("cannot start the tokio runtime")?;
    let code = runtime.block_on(async move {
        let shutdown = crate::process::shutdown_signal()?;
        run_triggers(
            app,
            config,
            args,
            listener,
            |addr| {
                match on_ready {
                    Some(f) => f(addr),
                    None => {
                        let scheme = if config.tls.is_some() {
                            "https"
                        } else {
                            "http"
                        };
                        if let Some(addr) = addr {
                            tracing::info!("Serving {scheme}://{addr}");
                        }
                    }
                }
                if let Some(c) = crate::confinement::confinement() {
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

/// Loads `app` and runs all its triggers ([`trigger::run`]) until `shutdown` completes or
/// its command trigger exits. `bound`: the HTTP listener when the caller bound it already.
/// Must run inside a tokio runtime.
async fn run_triggers(
    app: App,
    config: &RuntimeConfig,
    args: &[String],
    bound: Option<std::net::TcpListener>,
    on_ready: impl FnOnce(Option<SocketAddr>),
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
