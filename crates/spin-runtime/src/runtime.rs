//! Loading an app onto wasmtime: one engine per process, each component compiled once
//! (through the compile cache) and pre-instantiated; a fresh instance per request.

use crate::app_log::AppOutput;
use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use arc_swap::ArcSwap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use wasmtime::component::{Component as WasmComponent, InstancePre, Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::WasiHttpCtx;

use spin_shim_settings::container::ContainerSettings;

use crate::app::http_trigger::WagiConfig;
use crate::app::{App, Component, FileMount};
use crate::engine::compile_cache::{entry_state, CompileCache, EntryState, Outcome};
use crate::engine::plan::{CompilePlan, HttpUse, Unit};
use crate::engine::tier::TieringConfig;
/// The process's engine, at its path from before it moved to [`crate::engine`].
pub use crate::engine::{
    create_engine, engine, engine_with_memory_cap, PoolResidency, POOLING_ENV,
};
use crate::host::{self, HostState};
use crate::inbound_tls::InboundTls;
use crate::limits::{Limits, MemoryLimiter, TimeSlice};
use crate::routing::Router;
use crate::state::{HostContext, InstanceState};

/// Env var: listen address of the HTTP trigger.
pub const LISTEN_ENV: &str = spin_shim_settings::container::HTTP_LISTEN_ADDR;
/// Default listen address (as Spin in a container).
pub const DEFAULT_LISTEN: &str = spin_shim_settings::container::DEFAULT_LISTEN;
/// Env var: cap on one component instance's linear memory, in bytes. Default: half the
/// container's cgroup memory limit ([`crate::limits::default_instance_memory`]); none when
/// the container has no memory limit.
pub const MAX_MEMORY_ENV: &str = spin_shim_settings::container::MAX_INSTANCE_MEMORY;

/// How long a shutting-down app may finish in-flight requests before they are dropped.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How to run an app; built from the environment by [`RuntimeConfig::from_env`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Listen address of the HTTP trigger.
    pub listen: SocketAddr,
    /// Per-instance memory cap.
    pub max_instance_memory: Option<usize>,
    /// Request deadline, HTTP timeouts and connection cap.
    pub limits: Limits,
    /// Compiled-component cache; `None` compiles every start.
    pub compile_cache: Option<CompileCache>,
    /// App directory and environment for host features.
    pub host: HostContext,
    /// How long in-flight requests may take to finish after SIGTERM.
    pub drain_timeout: Duration,
    /// Where the files of glob-mounted components are staged (a temp dir by default).
    pub staging_dir: Option<PathBuf>,
    /// Where to serve Prometheus metrics ([`crate::metrics::METRICS_ADDR_ENV`]); `None`: off.
    pub metrics_addr: Option<SocketAddr>,
    /// When a component the compile cache misses starts on baseline code ([`crate::engine::tier`]).
    pub tiering: TieringConfig,
    /// Inbound TLS ([`crate::inbound_tls::TLS_CERT_ENV`]); `None`: plain HTTP.
    pub tls: Option<InboundTls>,
}

impl RuntimeConfig {
    /// Reads the runtime's settings from `env` (the container's environment,
    /// [`ContainerSettings`]: `SPIN_HTTP_LISTEN_ADDR`, `SPIN_MAX_INSTANCE_MEMORY` with its
    /// default from the container's memory limit, the [`Limits`] knobs, the compile cache,
    /// tiering, metrics and inbound TLS). Bad values are errors naming the variable.
    pub fn from_env(app_dir: &Path, env: &[(String, String)]) -> anyhow::Result<Self> {
        Self::from_env_with_memory_limit(app_dir, env, crate::limits::container_memory_limit())
    }

    /// As [`RuntimeConfig::from_env`], with the container's memory limit given (the default
    /// per-instance cap is derived from it).
    pub fn from_env_with_memory_limit(
        app_dir: &Path,
        env: &[(String, String)],
        memory_limit: Option<u64>,
    ) -> anyhow::Result<Self> {
        let settings = ContainerSettings::from_env(env)?;
        Self::from_settings(app_dir, env, &settings, memory_limit)
    }

    /// The configuration `settings` (read from `env`, which host features read too) give,
    /// with the container's memory limit for the default per-instance cap; loads the
    /// inbound TLS files.
    pub fn from_settings(
        app_dir: &Path,
        env: &[(String, String)],
        settings: &ContainerSettings,
        memory_limit: Option<u64>,
    ) -> anyhow::Result<Self> {
        let max_instance_memory = match settings.max_instance_memory {
            Some(bytes) => Some(usize::try_from(bytes).unwrap_or(usize::MAX)),
            None => {
                let cap = memory_limit.map(crate::limits::default_instance_memory);
                if let (Some(limit), Some(cap)) = (memory_limit, cap) {
                    tracing::info!(
                        "container memory limit {limit} bytes: each component instance may \
                         use up to {cap} bytes of linear memory (set {MAX_MEMORY_ENV} to change)"
                    );
                }
                cap
            }
        };
        Ok(RuntimeConfig {
            tls: InboundTls::from_settings(settings.tls.as_ref())?,
            metrics_addr: settings.metrics_addr,
            tiering: TieringConfig::from_settings(settings.tiering()),
            listen: settings.listen,
            max_instance_memory,
            limits: Limits::from_settings(settings),
            compile_cache: Some(CompileCache::from_settings(settings)),
            host: HostContext {
                app_dir: app_dir.to_path_buf(),
                env: env.iter().cloned().collect(),
            },
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            staging_dir: None,
        })
    }
}

type Preopens = Vec<(PathBuf, String)>;

/// The HTTP handler a component exports.
pub(crate) enum HttpPre {
    /// `wasi:http/incoming-handler@0.2.x` (Spin 2 and 3 SDKs).
    P2(ProxyPre<InstanceState>),
    /// `wasi:http/incoming-handler@0.2.0-rc-2023-10-18` (Spin 2.0's SDKs: spin-sdk 2.x).
    P2Rc(crate::wasi_rc::http::ProxyPre<InstanceState>),
    /// `wasi:http/handler@0.3.0` (Spin 4 SDKs, retargeted from the
    /// `0.3.0-rc-2026-03-15` snapshot by [`crate::p3`]).
    P3(ServicePre<InstanceState>),
    /// `fermyon:spin/inbound-http` (Spin 1.x modules, adapted by [`crate::spin1`]).
    Spin1(crate::spin1::http::InboundHttpPre),
    /// A WASI command a WAGI trigger runs per request.
    Wagi(WagiPre),
}

/// A component a WAGI trigger runs: its `wasi:cli/run` and its trigger's settings.
#[derive(Clone)]
pub(crate) struct WagiPre {
    pub(crate) command: CommandPre<InstanceState>,
    pub(crate) config: Arc<WagiConfig>,
}

impl WagiPre {
    /// A component a WAGI trigger runs must be a WASI command.
    fn new(
        instance_pre: &InstancePre<InstanceState>,
        id: &str,
        config: Arc<WagiConfig>,
    ) -> anyhow::Result<WagiPre> {
        let command = CommandPre::new(instance_pre.clone()).map_err(|e| {
            anyhow!(
                "component `{id}` is run by a WAGI trigger (`executor = {{ type = \"wagi\" }}`) \
                 but is not a WASI command (no wasi:cli/run export: build a `fn main` program \
                 for wasm32-wasip1 or wasm32-wasip2): {e:#}"
            )
        })?;
        Ok(WagiPre { command, config })
    }
}

/// The standard streams of a store.
pub(crate) enum Stdio<'a> {
    /// Output to the process's (or the app log), no input.
    Default,
    /// As `Default`, with the process's standard input (a command trigger).
    InheritStdin,
    /// CGI (WAGI): extra environment, the request body as input, output captured.
    Cgi {
        env: &'a [(String, String)],
        stdin: bytes::Bytes,
        stdout: wasmtime_wasi::p2::pipe::MemoryOutputPipe,
    },
}

/// A component ready to serve: pre-instantiated, with its env, preopens and host state.
pub(crate) struct PreparedComponent {
    pub(crate) id: String,
    /// The HTTP handler, for components an HTTP trigger routes to.
    pre: Option<HttpPre>,
    /// The component pre-instantiated, for the other triggers' exports.
    pub(crate) instance_pre: InstancePre<InstanceState>,
    env: Vec<(String, String)>,
    /// (host dir, guest path), mounted read-only.
    preopens: Preopens,
    host: HostState,
    /// What the HTTP server keeps beside this code of the component (the dispatcher of a
    /// WASIp3 component's reused instances): made at its first request, dropped with this
    /// code, so instances of code that tiered compilation replaced end once idle.
    pub(crate) server_state: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl PreparedComponent {
    /// A fresh store for this component, its linear memories capped at
    /// `max_instance_memory`, with the guest's `args` and standard streams `stdio`.
    pub(crate) fn new_store(
        &self,
        max_instance_memory: Option<usize>,
        args: &[String],
        stdio: Stdio<'_>,
    ) -> anyhow::Result<Store<InstanceState>> {
        let mut wasi = WasiCtxBuilder::new();
        if otel_export::logs_enabled() || otel_export::enabled() {
            wasi.stdout(AppOutput::new(wasmtime_wasi::cli::stdout(), &self.id))
                .stderr(AppOutput::new(wasmtime_wasi::cli::stderr(), &self.id));
        } else {
            wasi.inherit_stdout().inherit_stderr();
        }
        wasi.envs(&self.env);
        wasi.args(args);
        match stdio {
            Stdio::Default => {}
            Stdio::InheritStdin => {
                wasi.inherit_stdin();
            }
            Stdio::Cgi { env, stdin, stdout } => {
                wasi.envs(env);
                wasi.stdin(wasmtime_wasi::p2::pipe::MemoryInputPipe::new(stdin));
                wasi.stdout(stdout);
            }
        }
        for (host_dir, guest) in &self.preopens {
            wasi.preopened_dir(host_dir, guest, FsPerms::ReadOnly)
                .map_err(anyhow::Error::from)
                .with_context(|| {
                    format!(
                        "component `{}`: cannot open {}",
                        self.id,
                        host_dir.display()
                    )
                })?;
        }
        let state = InstanceState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limits: MemoryLimiter::new(max_instance_memory).with_usage(&self.id),
            host: self.host.clone(),
            slice: Arc::new(TimeSlice::start()),
        };
        let mut store = Store::new(self.instance_pre.engine(), state);
        store.limiter(|s| &mut s.limits);
        // A busy guest yields to the executor once its time slice is used up, so it never
        // holds a worker thread for long; the request deadline is enforced around the call
        // (server.rs), at those yields.
        store.set_epoch_deadline(1);
        yield_at_slice_end(&mut store, || {});
        Ok(store)
    }
}

/// Sets `store`'s epoch callback: once the guest has used up its time slice it yields to
/// the executor, and on resuming starts a new slice and calls `resumed`.
pub(crate) fn yield_at_slice_end(
    store: &mut Store<InstanceState>,
    resumed: impl Fn() + Clone + Send + Sync + 'static,
) {
    let slice = Arc::clone(&store.data().slice);
    store.epoch_deadline_callback(move |_| {
        if !slice.used_up() {
            return Ok(UpdateDeadline::Continue(1));
        }
        let (slice, resumed) = (Arc::clone(&slice), resumed.clone());
        Ok(UpdateDeadline::YieldCustom(
            1,
            Box::pin(async move {
                tokio::task::yield_now().await;
                slice.restart();
                resumed();
            }),
        ))
    });
}

/// What loading did, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Distinct Wasm binaries compiled now.
    pub compiled: usize,
    /// Distinct Wasm binaries loaded from the compile cache.
    pub cache_hits: usize,
    /// Of the compiled ones, those compiled with the baseline compiler (Winch), to be
    /// compiled with Cranelift in the background ([`crate::engine::tier`]).
    pub baseline: usize,
}

impl LoadStats {
    fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Hit => self.cache_hits += 1,
            Outcome::Miss => self.compiled += 1,
        }
    }
}

/// An app loaded onto the engine, ready to serve.
pub struct LoadedApp {
    /// The app model.
    pub app: Arc<App>,
    pub(crate) router: Router,
    /// Each component's current code: swapped once when tiered compilation finishes.
    pub(crate) components: HashMap<String, ArcSwap<PreparedComponent>>,
    max_instance_memory: Option<usize>,
    pub(crate) limits: Limits,
    /// What loading did.
    pub stats: LoadStats,
    /// Where components reach their own app (service chaining, self requests).
    pub(crate) chain: Arc<host::outbound::ChainSlot>,
    /// The host features' per-app state (resolved variables, stores, policies).
    pub(crate) host: host::AppHost,
    /// Prometheus metrics, when [`crate::metrics::METRICS_ADDR_ENV`] is set.
    pub(crate) metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Components serving on baseline code, for [`start_tier_up`].
    tier_up: std::sync::Mutex<Option<TierUp>>,
    _staging: Vec<StagingDir>,
}

/// A directory we created for staged files; removed on drop.
struct StagingDir(PathBuf);

impl Drop for StagingDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl LoadedApp {
    /// Compiles (or loads from cache) and pre-instantiates every component, builds the
    /// router and the host state. Fails naming the component on a bad source, a missing
    /// import, or a component an HTTP trigger routes to without a
    /// `wasi:http/incoming-handler@0.2.x` or `wasi:http/handler@0.3.x` export (other
    /// triggers' exports are checked by [`crate::trigger`]).
    pub fn load(app: App, config: &RuntimeConfig) -> anyhow::Result<LoadedApp> {
        let engine = engine_with_memory_cap(
            crate::limits::container_memory_limit().map(|l| l.min(usize::MAX as u64) as usize),
        )?;
        let router = Router::build(&app.http_triggers)?;
        // Every host feature's per-app state, from the runtime config read once per app.
        let host_app = host::AppHost::new(&app, &config.host)?;
        let mut linker = new_linker(engine)?;
        // The baseline engine's linker, made when a first component starts on it.
        let mut baseline_linker: Option<Linker<InstanceState>> = None;
        let mut pending = Vec::new();

        let mut stats = LoadStats::default();
        let chain = Arc::new(host::outbound::ChainSlot::default());
        let mut compiled: HashMap<String, WasmComponent> = HashMap::new();
        let mut components = HashMap::new();
        let mut staging = Vec::new();
        // The same plan the shim compiled before the container started.
        let plan = CompilePlan::of(&app)?;
        for unit in &plan.units {
            let component = unit.component;
            let bytes = unit.wasm()?;
            // A Spin 1.x module that cannot be adapted only takes its own HTTP routes down.
            if !unit.event {
                if let Err(e) = crate::spin1::check(&bytes, &component.id) {
                    tracing::error!(
                        "{e:#}; the app's other components are served, its routes answer 500"
                    );
                    continue;
                }
            }
            let digest = crate::engine::compile_cache::component_digest(&bytes);
            let wasm = match compiled.get(&digest) {
                Some(c) => c.clone(),
                None => {
                    let c = compile_unit(engine, config, unit, &bytes, &mut stats)?;
                    compiled.insert(digest, c.clone());
                    c
                }
            };
            let middleware = !unit.middleware().is_empty();
            let on_baseline = !Engine::same(wasm.engine(), engine);
            if on_baseline {
                pending.push(Pending {
                    id: component.id.clone(),
                    bytes: bytes.to_vec(),
                    middleware,
                });
            }
            let code_linker = if on_baseline {
                match &mut baseline_linker {
                    Some(l) => l,
                    None => baseline_linker.insert(new_linker(wasm.engine())?),
                }
            } else {
                &mut linker
            };
            let (instance_pre, pre) = link(
                code_linker,
                &wasm,
                &component.id,
                unit.http.as_ref(),
                middleware,
            )?;
            let (preopens, dir) = prepare_files(component, config)?;
            staging.extend(dir);
            let mut host = HostState::new(component, &host_app)
                .with_context(|| format!("component `{}`", component.id))?;
            host.chain = chain.clone();
            components.insert(
                component.id.clone(),
                ArcSwap::from_pointee(PreparedComponent {
                    id: component.id.clone(),
                    pre,
                    instance_pre,
                    env: component
                        .environment
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    preopens,
                    host,
                    server_state: Default::default(),
                }),
            );
        }
        drop(plan);
        if stats.compiled > 0 {
            crate::engine::tier::release_freed_memory();
        }
        tracing::info!(
            app = %app.name,
            components = components.len(),
            compiled = stats.compiled,
            cache_hits = stats.cache_hits,
            baseline = stats.baseline,
            "app loaded"
        );
        let tier_up = (!pending.is_empty()).then(|| TierUp {
            linker,
            cache: config.compile_cache.clone(),
            pending,
        });
        Ok(LoadedApp {
            app: Arc::new(app),
            router,
            components,
            max_instance_memory: config.max_instance_memory,
            limits: config.limits.clone(),
            stats,
            chain,
            host: host_app,
            metrics: None,
            tier_up: std::sync::Mutex::new(tier_up),
            _staging: staging,
        })
    }

    /// The components waiting for Cranelift code, once ([`start_tier_up`]).
    fn take_tier_up(&self) -> Option<TierUp> {
        self.tier_up
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Replaces component `id`'s code with `wasm` (linked with `linker`); requests that
    /// start afterwards run it. Its files, environment and host state stay as they are.
    pub(crate) fn swap_code(
        &self,
        id: &str,
        linker: &mut Linker<InstanceState>,
        wasm: &WasmComponent,
        middleware: bool,
    ) -> anyhow::Result<()> {
        let slot = self
            .components
            .get(id)
            .ok_or_else(|| anyhow!("component `{id}` is not loaded"))?;
        let old = slot.load_full();
        let role = old.pre.as_ref().map(|p| match p {
            HttpPre::Wagi(w) => HttpUse::Wagi(w.config.clone()),
            _ => HttpUse::Handler,
        });
        let (instance_pre, pre) = link(linker, wasm, id, role.as_ref(), middleware)?;
        slot.store(Arc::new(PreparedComponent {
            id: old.id.clone(),
            pre,
            instance_pre,
            env: old.env.clone(),
            preopens: old.preopens.clone(),
            host: old.host.clone(),
            // Instances of the old code finish what they took and expire when idle.
            server_state: Default::default(),
        }));
        Ok(())
    }

    /// Component `id`'s current code and state.
    pub(crate) fn component(&self, id: &str) -> Option<Arc<PreparedComponent>> {
        self.components.get(id).map(|c| c.load_full())
    }

    /// A fresh store for one request to `component`.
    pub(crate) fn new_store(
        &self,
        component: &PreparedComponent,
    ) -> anyhow::Result<Store<InstanceState>> {
        self.new_store_with(component, &[], false)
    }

    /// A store for one WAGI request: CGI `env` on top of the component's, `stdin` as its
    /// input, its output into `stdout`.
    pub(crate) fn new_cgi_store(
        &self,
        component: &PreparedComponent,
        args: &[String],
        env: &[(String, String)],
        stdin: bytes::Bytes,
        stdout: wasmtime_wasi::p2::pipe::MemoryOutputPipe,
    ) -> anyhow::Result<Store<InstanceState>> {
        component.new_store(
            self.max_instance_memory,
            args,
            Stdio::Cgi { env, stdin, stdout },
        )
    }

    /// As [`Self::new_store`], with the guest's `args` and, if `stdin`, the process's
    /// standard input (for a command trigger).
    pub(crate) fn new_store_with(
        &self,
        component: &PreparedComponent,
        args: &[String],
        stdin: bool,
    ) -> anyhow::Result<Store<InstanceState>> {
        let stdio = if stdin {
            Stdio::InheritStdin
        } else {
            Stdio::Default
        };
        component.new_store(self.max_instance_memory, args, stdio)
    }

    /// The cap on one instance's linear memories.
    pub(crate) fn max_instance_memory(&self) -> Option<usize> {
        self.max_instance_memory
    }

    /// The pre-instantiated HTTP handler of a component an HTTP trigger routes to.
    pub(crate) fn proxy_pre(component: &PreparedComponent) -> Option<&HttpPre> {
        component.pre.as_ref()
    }
}

/// The HTTP handler of `instance_pre`: the WASIp2 incoming handler, else the WASIp3 one
/// ([`check_exports`] already saw one of them).
fn http_pre(instance_pre: &InstancePre<InstanceState>, id: &str) -> anyhow::Result<HttpPre> {
    let p2 = match ProxyPre::new(instance_pre.clone()) {
        Ok(pre) => return Ok(HttpPre::P2(pre)),
        Err(e) => e,
    };
    let rc = match crate::wasi_rc::http::ProxyPre::new(instance_pre.clone()) {
        Ok(pre) => return Ok(HttpPre::P2Rc(pre)),
        Err(e) => e,
    };
    if let Some(pre) = crate::spin1::http::InboundHttpPre::new(instance_pre) {
        return Ok(HttpPre::Spin1(pre));
    }
    match ServicePre::new(instance_pre.clone()) {
        Ok(pre) => Ok(HttpPre::P3(pre)),
        Err(p3) => {
            bail!(
                "component `{id}`: not a wasi:http handler: as WASIp2: {p2:#}; as WASI \
                 {}: {rc:#}; as WASIp3: {p3:#}",
                crate::wasi_rc::VERSION
            )
        }
    }
}

/// A linker with every host interface the runtime offers, for `engine`.
fn new_linker(engine: &Engine) -> anyhow::Result<Linker<InstanceState>> {
    let mut linker: Linker<InstanceState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    crate::state::add_p3_to_linker(&mut linker)?;
    crate::wasi_rc::add_to_linker(&mut linker)?;
    host::add_to_linker(&mut linker)?;
    crate::spin1::add_to_linker(&mut linker)?;
    Ok(linker)
}

/// Pre-instantiates `wasm` with `linker` (first defining, when `middleware` was composed in,
/// the trapping imports of what it does not inherit) and, for an HTTP component (`http`),
/// checks and finds its handler export.
fn link(
    linker: &mut Linker<InstanceState>,
    wasm: &WasmComponent,
    id: &str,
    http: Option<&HttpUse>,
    middleware: bool,
) -> anyhow::Result<(InstancePre<InstanceState>, Option<HttpPre>)> {
    let engine = wasm.engine();
    if let Some(HttpUse::Handler) = http {
        check_exports(engine, wasm, id)?;
    }
    if middleware {
        crate::engine::middleware::define_denied(linker, engine, wasm)?;
    }
    let instance_pre = linker
        .instantiate_pre(wasm)
        .map_err(|e| match crate::state::link_error(engine, wasm, id) {
            Some(msg) => anyhow!("{msg}"),
            None => anyhow!("component `{id}` cannot be linked: {e:#}"),
        })?;
    let pre = match http {
        Some(HttpUse::Handler) => Some(http_pre(&instance_pre, id)?),
        Some(HttpUse::Wagi(config)) => Some(HttpPre::Wagi(WagiPre::new(
            &instance_pre,
            id,
            config.clone(),
        )?)),
        None => None,
    };
    Ok((instance_pre, pre))
}

/// Rejects components that do not export the wasi:http incoming handler, naming the
/// legacy Spin interface when that is what they export.
fn check_exports(engine: &Engine, wasm: &WasmComponent, id: &str) -> anyhow::Result<()> {
    let names: Vec<String> = wasm
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let p2 = names
        .iter()
        .any(|n| n.starts_with("wasi:http/incoming-handler@0.2"));
    let p3 = names.iter().any(|n| n == "wasi:http/handler@0.3.0");
    if p2 && p3 {
        bail!(
            "component `{id}` exports both wasi:http/incoming-handler@0.2.x and \
             wasi:http/handler@0.3.x; an HTTP component must export only one"
        );
    }
    if p2 || p3 {
        return Ok(());
    }
    if let Some(n) = names
        .iter()
        .find(|n| n.starts_with("wasi:http/handler@0.3"))
    {
        bail!(
            "component `{id}` exports `{n}`, a WASIp3 snapshot this runtime does not serve; \
             it serves wasi:http/handler@0.3.0 and the 0.3.0-rc-2026-03-15 snapshot of \
             Spin 4's SDKs (spin-sdk 6.x for Rust, 4.x for Python)"
        );
    }
    if names.iter().any(|n| n == crate::spin1::HTTP_EXPORT.1) {
        return crate::spin1::http::check_handler(wasm, id);
    }
    bail!(
        "component `{id}` does not export wasi:http/incoming-handler@0.2.x or \
         wasi:http/handler@0.3.x (its exports: {}); HTTP triggers need an HTTP component",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )
}

/// Turns a component's file mounts into read-only preopens: directories directly, single
/// files copied into a staging directory mounted at `/`.
fn prepare_files(
    component: &Component,
    config: &RuntimeConfig,
) -> anyhow::Result<(Preopens, Option<StagingDir>)> {
    let mut preopens = Vec::new();
    let mut staging: Option<StagingDir> = None;
    for mount in &component.files {
        match mount {
            FileMount::Directory {
                source,
                destination,
            } => {
                if destination.split('/').any(|s| s == "..") {
                    bail!(
                        "component `{}`: file destination `{destination}` must not contain `..`",
                        component.id
                    );
                }
                let guest = if destination.is_empty() {
                    "/"
                } else {
                    destination
                };
                let views = match crate::confinement::confinement() {
                    Some(c) => c.files_view(source).with_context(|| {
                        format!(
                            "component `{}`: files source {} (mounted at {guest})",
                            component.id,
                            source.display()
                        )
                    })?,
                    None => vec![(source.clone(), PathBuf::new())],
                };
                for (host, rel) in views {
                    let guest = if rel.as_os_str().is_empty() {
                        guest.to_string()
                    } else {
                        Path::new(guest).join(rel).to_string_lossy().into_owned()
                    };
                    preopens.push((host, guest));
                }
            }
            FileMount::File {
                content,
                destination,
            } => {
                let root = match &staging {
                    Some(s) => s.0.clone(),
                    None => {
                        let base = config
                            .staging_dir
                            .clone()
                            .unwrap_or_else(std::env::temp_dir);
                        static SEQ: std::sync::atomic::AtomicU64 =
                            std::sync::atomic::AtomicU64::new(0);
                        let dir = base.join(format!(
                            "spin-files-{}-{}-{}",
                            std::process::id(),
                            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                            component.id
                        ));
                        std::fs::create_dir_all(&dir).with_context(|| {
                            format!(
                                "component `{}`: cannot create a staging directory for its files at {} \
                                 (set TMPDIR to a writable directory)",
                                component.id,
                                dir.display()
                            )
                        })?;
                        staging = Some(StagingDir(dir.clone()));
                        preopens.push((dir.clone(), "/".to_string()));
                        dir
                    }
                };
                let rel = destination.trim_start_matches('/');
                if rel.is_empty() || rel.split('/').any(|s| s == "..") {
                    bail!("component `{}`: file destination `{destination}` is not a file path inside the guest", component.id);
                }
                let target = root.join(rel);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                if let (Some(c), crate::app::Content::Path(p)) =
                    (crate::confinement::confinement(), content)
                {
                    c.check_file(p).with_context(|| {
                        format!("component `{}`: file `{destination}`", component.id)
                    })?;
                }
                let bytes = content.read().with_context(|| {
                    format!("component `{}`: file `{destination}`", component.id)
                })?;
                std::fs::write(&target, &bytes).with_context(|| {
                    format!("component `{}`: stage {}", component.id, target.display())
                })?;
            }
        }
    }
    Ok((preopens, staging))
}

/// Compiles `unit` (its Wasm `bytes`, as planned and composed), or loads it from the
/// compile cache, counting what it did in `stats`. Where Cranelift's code can be stored for
/// the next start, a large unit the cache misses starts on baseline code; in a container
/// (read-only cache, entries precompiled by the shim) it starts on the shim's baseline
/// code while the shim compiles Cranelift's into the entry it reserved; a miss there
/// compiles once, in memory, inside the pod's memory limit.
fn compile_unit(
    engine: &Engine,
    config: &RuntimeConfig,
    unit: &Unit<'_>,
    bytes: &[u8],
    stats: &mut LoadStats,
) -> anyhow::Result<WasmComponent> {
    let id = unit.id();
    let cache = config.compile_cache.as_ref();
    let main_entry = cache.map(|c| entry_state(&c.entry_path(engine, bytes)));
    let tiers = unit.starts_on_baseline(&config.tiering, bytes.len());
    if let (Some(cache), Some(EntryState::Pending), true) = (cache, main_entry, !unit.event) {
        if cache.is_read_only() {
            let base = crate::engine::tier::baseline_engine()?;
            if entry_state(&cache.entry_path(base, bytes)) == EntryState::Ready {
                let (c, outcome) = cache.load_or_compile(base, bytes, id)?;
                tracing::info!(
                    component = %id,
                    "serving on the shim's baseline (Winch) code while the shim compiles it \
                     with Cranelift"
                );
                stats.count(outcome);
                stats.baseline += 1;
                return Ok(c);
            }
        }
    }
    let writable_miss =
        cache.is_some_and(|c| !c.is_read_only()) && main_entry == Some(EntryState::Missing);
    if tiers && writable_miss {
        if let Some(c) = baseline_compile(bytes, id) {
            stats.compiled += 1;
            stats.baseline += 1;
            return Ok(c);
        }
    }
    let (c, outcome) = match cache {
        Some(cache) => cache.load_or_compile(engine, bytes, id)?,
        None => (
            crate::engine::compile_cache::compile_component(engine, bytes, id)?,
            Outcome::Miss,
        ),
    };
    stats.count(outcome);
    Ok(c)
}

/// `bytes` compiled with the baseline compiler to serve now, or None (logged) where Winch
/// cannot compile it (a proposal it lacks): then Cranelift compiles it before serving.
fn baseline_compile(bytes: &[u8], id: &str) -> Option<WasmComponent> {
    let t0 = std::time::Instant::now();
    let compiled = crate::engine::tier::baseline_engine()
        .and_then(|base| crate::engine::compile_cache::compile_component(base, bytes, id));
    match compiled {
        Ok(c) => {
            tracing::info!(
                component = %id,
                ms = t0.elapsed().as_millis() as u64,
                "not in the compile cache: compiled with the baseline compiler (Winch) to serve \
                 now; Cranelift compiles it in the background"
            );
            Some(c)
        }
        Err(e) => {
            tracing::info!(
                component = %id,
                "the baseline compiler cannot compile it, compiling with Cranelift: {e:#}"
            );
            None
        }
    }
}

/// A component serving on baseline code, to be compiled with Cranelift.
struct Pending {
    /// The app's component id.
    id: String,
    /// The Wasm the baseline code was compiled from (middleware already composed).
    bytes: Vec<u8>,
    /// Whether HTTP middleware was composed in (its cut-off imports need defining).
    middleware: bool,
}

/// What the background compilation needs: the main engine's linker, the cache to store
/// into, and the components to compile.
struct TierUp {
    linker: Linker<InstanceState>,
    cache: Option<CompileCache>,
    pending: Vec<Pending>,
}

/// Starts the background compilation of `app`'s baseline components, if it has any
/// ([`crate::engine::tier`]). The thread holds the app weakly: an app shut down meanwhile
/// still gets its cache entries written, and no swap.
pub(crate) fn start_tier_up(app: &Arc<LoadedApp>) {
    let Some(work) = app.take_tier_up() else {
        return;
    };
    let weak = Arc::downgrade(app);
    let spawned = std::thread::Builder::new()
        .name("tier-up".into())
        .spawn(move || run_tier_up(work, weak));
    if let Err(e) = spawned {
        tracing::warn!("cannot start the tier-up thread ({e}); components stay on baseline code");
    }
}

fn run_tier_up(work: TierUp, app: Weak<LoadedApp>) {
    crate::engine::tier::lower_thread_priority();
    let engine = match crate::engine::engine() {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("tier-up: no engine ({e:#}); components stay on baseline code");
            return;
        }
    };
    for p in work.pending {
        let t0 = std::time::Instant::now();
        let mut linker = work.linker.clone();
        match crate::engine::tier::cranelift_code(engine, work.cache.as_ref(), &p.id, &p.bytes) {
            Ok(wasm) => {
                let Some(app) = app.upgrade() else {
                    tracing::info!(component = %p.id, "tier-up: app already stopped");
                    return;
                };
                let swapped = app.swap_code(&p.id, &mut linker, &wasm, p.middleware);
                crate::engine::tier::release_freed_memory();
                match swapped {
                    Ok(()) => tracing::info!(
                        component = %p.id,
                        ms = t0.elapsed().as_millis() as u64,
                        "compiled with Cranelift in the background; new requests run its code"
                    ),
                    Err(e) => tracing::warn!(
                        component = %p.id,
                        "tier-up: cannot swap in the Cranelift code, staying on baseline: {e:#}"
                    ),
                }
            }
            Err(e) => tracing::warn!(
                component = %p.id,
                "tier-up: Cranelift compilation failed, staying on baseline code: {e:#}"
            ),
        }
    }
}
