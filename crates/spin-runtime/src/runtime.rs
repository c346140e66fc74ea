//! Loading an app onto wasmtime: one engine per process, each component compiled once
//! (through the compile cache) and pre-instantiated; a fresh instance per request.

use crate::app_log::AppOutput;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use wasmtime::component::{Component as WasmComponent, InstancePre, Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::WasiHttpCtx;

use crate::app::{App, Component, FileMount};
use crate::compile_cache::{entry_state, CompileCache, EntryState, Outcome};
use crate::host::{self, HostState};
use crate::limits::{Limits, MemoryLimiter, TimeSlice, EPOCH_TICK};
use crate::routing::Router;
use crate::{HostContext, InstanceState};

/// Env var: listen address of the HTTP trigger.
pub const LISTEN_ENV: &str = "SPIN_HTTP_LISTEN_ADDR";
/// Default listen address (as Spin in a container).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:80";
/// Env var: cap on one component instance's linear memory, in bytes. Default: half the
/// container's cgroup memory limit ([`crate::limits::default_instance_memory`]); none when
/// the container has no memory limit.
pub const MAX_MEMORY_ENV: &str = "SPIN_MAX_INSTANCE_MEMORY";
/// Env var: set to `0` to use on-demand instance allocation instead of the pooling
/// allocator (for hosts that limit virtual address space).
pub const POOLING_ENV: &str = "SPIN_SHIM_POOLING";

/// How long a shutting-down app may finish in-flight requests before they are dropped.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Pooling allocator capacity of the process: live instances, memories and tables at once
/// (each request instantiates its component); an instantiation beyond it fails.
mod pool_limits {
    pub const COMPONENT_INSTANCES: u32 = 1000;
    pub const CORE_INSTANCES: u32 = 4000;
    pub const MEMORIES: u32 = 2000;
    pub const TABLES: u32 = 4000;
    pub const MEMORIES_PER_COMPONENT: u32 = 4;
    pub const TABLES_PER_COMPONENT: u32 = 8;
    pub const CORE_INSTANCES_PER_COMPONENT: u32 = 50;
    /// At most this many bytes of a pooled linear memory stay mapped between instances
    /// when the kernel has `PAGEMAP_SCAN` (Linux 6.7+): only the pages the last instance
    /// dirtied are restored (copied back from the image or zeroed), and they stay resident,
    /// so a request's instance takes no page faults on the memory its predecessors touched
    /// and no `madvise` runs. Pages never touched cost nothing.
    pub const MEMORY_KEEP_RESIDENT: usize = 16 << 20;
    /// Unused slots that keep their memory (and its resident pages) for the next instance of
    /// the same component; enough for the concurrency a pod usually sees.
    pub const WARM_SLOTS: u32 = 16;
    /// The resident pages all warm slots may hold together, as a fraction of the container's
    /// memory limit ([`resident_budget`]); without a limit, [`RESIDENT_BUDGET_NO_LIMIT`].
    pub const RESIDENT_BUDGET_DIVISOR: usize = 8;
    /// The warm slots' resident budget when the container has no memory limit.
    pub const RESIDENT_BUDGET_NO_LIMIT: usize = 256 << 20;
    pub const TABLE_KEEP_RESIDENT: usize = 1 << 20;
}

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
    /// When a component the compile cache misses starts on baseline code ([`crate::tier`]).
    pub tiering: crate::tier::TieringConfig,
    /// Inbound TLS ([`crate::inbound_tls::TLS_CERT_ENV`]); `None`: plain HTTP.
    pub tls: Option<crate::inbound_tls::InboundTls>,
}

fn lookup<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl RuntimeConfig {
    /// Reads `SPIN_HTTP_LISTEN_ADDR`, `SPIN_MAX_INSTANCE_MEMORY` (default from the
    /// container's memory limit), the [`Limits`] knobs and the compile cache location from
    /// `env`. Bad values are errors naming the variable.
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
        let listen_text = lookup(env, LISTEN_ENV).unwrap_or(DEFAULT_LISTEN);
        let listen = listen_text.parse().map_err(|e| {
            anyhow!("{LISTEN_ENV}=`{listen_text}` is not an address like 0.0.0.0:80: {e}")
        })?;
        let max_instance_memory = match lookup(env, MAX_MEMORY_ENV) {
            None | Some("") => {
                let limit = memory_limit;
                let cap = limit.map(crate::limits::default_instance_memory);
                if let (Some(limit), Some(cap)) = (limit, cap) {
                    tracing::info!(
                        "container memory limit {limit} bytes: each component instance may \
                         use up to {cap} bytes of linear memory (set {MAX_MEMORY_ENV} to change)"
                    );
                }
                cap
            }
            Some(v) => Some(v.trim().parse::<usize>().map_err(|e| {
                anyhow!("{MAX_MEMORY_ENV}=`{v}` must be a number of bytes (e.g. 134217728): {e}")
            })?),
        };
        let limits = Limits::from_env(|k| lookup(env, k).map(str::to_string))?;
        let metrics_addr = match lookup(env, crate::metrics::METRICS_ADDR_ENV) {
            None | Some("") => None,
            Some(v) => Some(v.parse().map_err(|e| {
                anyhow!(
                    "{}=`{v}` is not an address like 0.0.0.0:9464: {e}",
                    crate::metrics::METRICS_ADDR_ENV
                )
            })?),
        };
        let tiering = crate::tier::TieringConfig::from_lookup(|k| lookup(env, k))?;
        let tls = crate::inbound_tls::InboundTls::from_lookup(|k| lookup(env, k))?;
        Ok(RuntimeConfig {
            tls,
            metrics_addr,
            tiering,
            listen,
            max_instance_memory,
            limits,
            compile_cache: Some(CompileCache::from_env(env)),
            host: HostContext {
                app_dir: app_dir.to_path_buf(),
                env: env.iter().cloned().collect(),
            },
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            staging_dir: None,
        })
    }
}

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// The process-wide engine (created on first use): async support, epoch interruption with
/// a ticker thread, pooling allocator unless `SPIN_SHIM_POOLING=0`.
pub fn engine() -> anyhow::Result<&'static Engine> {
    engine_with_memory_cap(None)
}

/// As [`engine`]; the first call creating the engine bounds the pooling allocator's linear
/// memories by `max_memory` (the container's memory limit: no instance can use more). The
/// per-instance cap (`SPIN_MAX_INSTANCE_MEMORY`) is enforced per store, so that a request
/// over it fails alone while components whose initial memory exceeds it still load.
pub fn engine_with_memory_cap(max_memory: Option<usize>) -> anyhow::Result<&'static Engine> {
    let engine = create_engine(max_memory)?;
    static TICKER: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut started = TICKER.lock().unwrap_or_else(|p| p.into_inner());
    if !*started {
        start_epoch_ticker(engine, "epoch-ticker")?;
        *started = true;
    }
    Ok(engine)
}

/// Creates the process-wide engine (as [`engine_with_memory_cap`]) without starting its epoch
/// ticker: a process that confines itself creates it first (the pooling allocator opens
/// `/proc/self/pagemap`) and starts threads only once confined.
pub fn create_engine(max_memory: Option<usize>) -> anyhow::Result<&'static Engine> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let pooling = std::env::var(POOLING_ENV).map(|v| v != "0").unwrap_or(true);
    let engine = new_engine(pooling, max_memory).or_else(|e| {
        if pooling {
            tracing::warn!("pooling allocator unavailable ({e:#}); using on-demand allocation");
            new_engine(false, max_memory)
        } else {
            Err(e)
        }
    })?;
    Ok(ENGINE.get_or_init(|| engine))
}

/// The runtime's engine configuration without an instance allocator: component model
/// (with async), epoch interruption. The compiler is the default (Cranelift);
/// [`crate::tier`] switches it to Winch for its baseline engine.
pub(crate) fn engine_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    // Spin 4 (WASIp3) components: async lifts and lowers, streams and futures. Wasmtime 48
    // enables it by default; set here because the runtime depends on it.
    config.wasm_component_model_async(true);
    config.epoch_interruption(true);
    config
}

/// Starts the thread that advances `engine`'s epoch every [`EPOCH_TICK`] (as Spin's engine);
/// at each tick running guest code checks its time slice ([`TimeSlice`]).
pub(crate) fn start_epoch_ticker(engine: &'static Engine, name: &str) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || loop {
            std::thread::sleep(EPOCH_TICK);
            engine.increment_epoch();
        })
        .context("cannot start the epoch ticker thread")?;
    Ok(())
}

/// An engine with the runtime's configuration; `pooling` only changes how instances are
/// allocated, never the compiled code (so both produce interchangeable artifacts).
pub(crate) fn new_engine(pooling: bool, max_memory: Option<usize>) -> anyhow::Result<Engine> {
    let mut config = engine_config();
    if pooling {
        let mut pool = wasmtime::PoolingAllocationConfig::default();
        if let Some(max) = max_memory {
            pool.max_memory_size(max);
        }
        pool.total_component_instances(pool_limits::COMPONENT_INSTANCES)
            .total_core_instances(pool_limits::CORE_INSTANCES)
            .total_memories(pool_limits::MEMORIES)
            .total_tables(pool_limits::TABLES)
            .max_memories_per_component(pool_limits::MEMORIES_PER_COMPONENT)
            .max_tables_per_component(pool_limits::TABLES_PER_COMPONENT)
            .max_core_instances_per_component(pool_limits::CORE_INSTANCES_PER_COMPONENT);
        if let Some(r) = PoolResidency::for_memory_cap(max_memory) {
            pool.pagemap_scan(wasmtime::Enabled::Yes)
                .max_unused_warm_slots(r.max_unused_warm_slots)
                .linear_memory_keep_resident(r.memory_keep_resident)
                .table_keep_resident(r.table_keep_resident);
        }
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&config)
        .map_err(anyhow::Error::from)
        .context("cannot create the wasmtime engine")
}

/// How the pooling allocator resets a freed instance's memory and tables for the next one:
/// the settings [`new_engine`] applies, public so that a comparison with another wasmtime
/// embedding (the bench's `wasmtime serve -O pooling-...` row) can allocate as we do.
#[derive(Debug, Clone, Copy)]
pub struct PoolResidency {
    /// Bytes of each pooled linear memory kept mapped between instances.
    pub memory_keep_resident: usize,
    /// Bytes of each pooled table kept mapped between instances.
    pub table_keep_resident: usize,
    /// Freed slots that keep their resident pages for the next instance.
    pub max_unused_warm_slots: u32,
}

impl PoolResidency {
    /// The settings for a process whose instances may use at most `max_memory` bytes (the
    /// container's memory limit; `None` for no limit), or `None` without the kernel's
    /// `PAGEMAP_SCAN` (Linux 6.7+): then keeping memory resident would mean a memset of the
    /// whole kept region per instance, slower than madvise for what a request touches, and
    /// the pool keeps wasmtime's defaults.
    pub fn for_memory_cap(max_memory: Option<usize>) -> Option<Self> {
        wasmtime::PoolingAllocationConfig::is_pagemap_scan_available().then(|| Self {
            memory_keep_resident: keep_resident(max_memory),
            table_keep_resident: pool_limits::TABLE_KEEP_RESIDENT,
            max_unused_warm_slots: pool_limits::WARM_SLOTS,
        })
    }
}

/// Bytes of each pooled linear memory kept resident: [`pool_limits::MEMORY_KEEP_RESIDENT`],
/// less when the container's memory limit (`max_memory`) is small, so that the warm slots
/// together never hold more than an eighth of it (a 128 MiB pod: 1 MiB per slot).
fn keep_resident(max_memory: Option<usize>) -> usize {
    let budget = max_memory.map_or(pool_limits::RESIDENT_BUDGET_NO_LIMIT, |m| {
        m / pool_limits::RESIDENT_BUDGET_DIVISOR
    });
    let per_slot = budget / pool_limits::WARM_SLOTS as usize;
    // Whole pages: wasmtime rounds to the host page size anyway.
    (per_slot.min(pool_limits::MEMORY_KEEP_RESIDENT)) & !0xfff
}

/// (host dir, guest path) pairs mounted read-only.
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
    /// A WASI command a WAGI trigger runs per request ([`crate::wagi`]).
    Wagi(crate::wagi::WagiPre),
}

/// What an HTTP trigger needs of a component: an HTTP handler export, or (WAGI) a command.
#[derive(Clone)]
pub(crate) enum HttpRole {
    Handler,
    Wagi(Arc<crate::wagi::WagiConfig>),
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
    /// The reused instances of a WASIp3 HTTP component ([`crate::reuse`]).
    p3_instances: std::sync::OnceLock<crate::reuse::P3Handler>,
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
            limits: MemoryLimiter::new(max_instance_memory),
            host: self.host.clone(),
            slice: Arc::new(TimeSlice::start()),
        };
        let mut store = Store::new(self.instance_pre.engine(), state);
        store.limiter(|s| &mut s.limits);
        // A busy guest yields to the executor once its time slice is used up, so it never
        // holds a worker thread for long; the request deadline is enforced around the call
        // (server.rs), at those yields.
        let slice = Arc::clone(&store.data().slice);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if !slice.used_up() {
                return Ok(UpdateDeadline::Continue(1));
            }
            let slice = Arc::clone(&slice);
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(async move {
                    tokio::task::yield_now().await;
                    slice.restart();
                }),
            ))
        });
        Ok(store)
    }
}

/// What loading did, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Distinct Wasm binaries compiled now.
    pub compiled: usize,
    /// Distinct Wasm binaries loaded from the compile cache.
    pub cache_hits: usize,
    /// Of the compiled ones, those compiled with the baseline compiler (Winch), to be
    /// compiled with Cranelift in the background ([`crate::tier`]).
    pub baseline: usize,
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
    pub(crate) chain: Arc<crate::chain::ChainSlot>,
    /// Prometheus metrics, when [`crate::metrics::METRICS_ADDR_ENV`] is set.
    pub(crate) metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Components serving on baseline code, for [`crate::tier::start`].
    tier_up: std::sync::Mutex<Option<crate::tier::TierUp>>,
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
        let mut linker = new_linker(engine)?;
        // The baseline engine's linker, made when a first component starts on it.
        let mut baseline_linker: Option<Linker<InstanceState>> = None;
        let mut pending = Vec::new();

        let mut stats = LoadStats::default();
        let chain = Arc::new(crate::chain::ChainSlot::default());
        let mut compiled: HashMap<String, WasmComponent> = HashMap::new();
        let mut components = HashMap::new();
        let mut staging = Vec::new();
        let mut http_components: HashMap<&str, HttpRole> = HashMap::new();
        for t in &app.http_triggers {
            if t.component.is_empty() {
                continue;
            }
            let role = match &t.wagi {
                Some(w) => HttpRole::Wagi(w.clone()),
                None => HttpRole::Handler,
            };
            match (http_components.get(t.component.as_str()), &role) {
                (Some(HttpRole::Wagi(_)), HttpRole::Handler)
                | (Some(HttpRole::Handler), HttpRole::Wagi(_)) => bail!(
                    "component `{}` is used by a WAGI trigger and by an HTTP trigger with \
                     another executor; a component is either a WASI command (WAGI) or an HTTP \
                     handler: give each trigger its own component",
                    t.component
                ),
                (Some(_), _) => {}
                (None, _) => {
                    http_components.insert(t.component.as_str(), role);
                }
            }
        }
        let event_components: std::collections::HashSet<&str> =
            app.event_triggers.components().map(|(_, _, c)| c).collect();
        // As Spin's trigger executors: only components a trigger uses are loaded (others,
        // such as middleware listed as app components, may not link on their own).
        let used: std::collections::HashSet<&str> = http_components
            .keys()
            .chain(event_components.iter())
            .copied()
            .collect();
        for component in app.components.values() {
            if !used.contains(component.id.as_str()) {
                tracing::debug!(component = %component.id, "not used by any trigger: not loaded");
                continue;
            }
            let mut bytes = component.source.read().with_context(|| {
                format!("component `{}`: cannot read its Wasm source", component.id)
            })?;
            if !component.middleware.is_empty() {
                bytes = compose_middleware(component, &bytes)?.into();
            }
            // A Spin 1.x module that cannot be adapted only takes its own HTTP routes down.
            if !event_components.contains(component.id.as_str()) {
                if let Err(e) = crate::spin1::check(&bytes, &component.id) {
                    tracing::error!(
                        "{e:#}; the app's other components are served, its routes answer 500"
                    );
                    continue;
                }
            }
            let digest = crate::compile_cache::component_digest(&bytes);
            let wasm = match compiled.get(&digest) {
                Some(c) => c.clone(),
                None => {
                    // Only where Cranelift's code can be stored for the next start: in a
                    // container (read-only cache, entries precompiled by the shim) a miss
                    // compiles once, in memory, inside the pod's memory limit.
                    let event = event_components.contains(component.id.as_str());
                    let baseline = config.tiering.applies(bytes.len())
                        && !event
                        && config.compile_cache.as_ref().is_some_and(|c| {
                            !c.is_read_only()
                                && entry_state(&c.entry_path(engine, &bytes)) == EntryState::Missing
                        });
                    // In a container, the shim compiled the baseline code before it started
                    // and is compiling Cranelift's into the entry it reserved.
                    let shim_baseline = match config.compile_cache.as_ref() {
                        Some(c)
                            if c.is_read_only()
                                && !event
                                && entry_state(&c.entry_path(engine, &bytes))
                                    == EntryState::Pending =>
                        {
                            let base = crate::tier::baseline_engine()?;
                            (entry_state(&c.entry_path(base, &bytes)) == EntryState::Ready)
                                .then_some((c, base))
                        }
                        _ => None,
                    };
                    let c = if let Some((cache, base)) = shim_baseline {
                        let (c, outcome) = cache.load_or_compile(base, &bytes, &component.id)?;
                        tracing::info!(
                            component = %component.id,
                            "serving on the shim's baseline (Winch) code while the shim \
                             compiles it with Cranelift"
                        );
                        match outcome {
                            Outcome::Hit => stats.cache_hits += 1,
                            Outcome::Miss => stats.compiled += 1,
                        }
                        stats.baseline += 1;
                        c
                    } else if let Some(c) = baseline
                        .then(|| baseline_compile(&bytes, &component.id))
                        .flatten()
                    {
                        stats.compiled += 1;
                        stats.baseline += 1;
                        c
                    } else {
                        let (c, outcome) =
                            compile(engine, config.compile_cache.as_ref(), &bytes, &component.id)?;
                        match outcome {
                            Outcome::Hit => stats.cache_hits += 1,
                            Outcome::Miss => stats.compiled += 1,
                        }
                        c
                    };
                    compiled.insert(digest, c.clone());
                    c
                }
            };
            let on_baseline = !Engine::same(wasm.engine(), engine);
            if on_baseline {
                pending.push(crate::tier::Pending {
                    id: component.id.clone(),
                    bytes: bytes.to_vec(),
                    middleware: !component.middleware.is_empty(),
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
            let http = http_components.get(component.id.as_str());
            let middleware = !component.middleware.is_empty();
            let (instance_pre, pre) = link(code_linker, &wasm, &component.id, http, middleware)?;
            let (preopens, dir) = prepare_files(component, config)?;
            staging.extend(dir);
            let mut host = HostState::new(component, &app, &config.host)
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
                    p3_instances: Default::default(),
                }),
            );
        }
        if stats.compiled > 0 {
            crate::tier::release_freed_memory();
        }
        tracing::info!(
            app = %app.name,
            components = components.len(),
            compiled = stats.compiled,
            cache_hits = stats.cache_hits,
            baseline = stats.baseline,
            "app loaded"
        );
        let tier_up = (!pending.is_empty()).then(|| crate::tier::TierUp {
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
            metrics: None,
            tier_up: std::sync::Mutex::new(tier_up),
            _staging: staging,
        })
    }

    /// The components waiting for Cranelift code, once ([`crate::tier::start`]).
    pub(crate) fn take_tier_up(&self) -> Option<crate::tier::TierUp> {
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
            HttpPre::Wagi(w) => HttpRole::Wagi(w.config.clone()),
            _ => HttpRole::Handler,
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
            p3_instances: Default::default(),
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

    /// The instances serving WASIp3 component `component`'s requests, created on its first
    /// request ([`crate::reuse`]).
    pub(crate) fn p3_instances(
        &self,
        component: &Arc<PreparedComponent>,
        pre: &wasmtime_wasi_http::p3::bindings::ServicePre<InstanceState>,
    ) -> crate::reuse::P3Handler {
        let handler = component.p3_instances.get_or_init(|| {
            crate::reuse::handler(
                component,
                pre.clone(),
                self.max_instance_memory,
                &self.limits,
                self.metrics.clone(),
            )
        });
        handler.clone()
    }

    /// The pre-instantiated HTTP handler of a component an HTTP trigger routes to.
    pub(crate) fn proxy_pre(component: &PreparedComponent) -> Option<&HttpPre> {
        component.pre.as_ref()
    }
}

/// `component` with its middleware composed in front of it (see [`crate::middleware`]).
fn compose_middleware(component: &Component, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut parts = Vec::new();
    for m in &component.middleware {
        let b = m.source.read().with_context(|| {
            format!(
                "component `{}`: middleware {}: cannot read it",
                component.id, m.name
            )
        })?;
        parts.push((m.name.clone(), m.inherit.clone(), b.to_vec()));
    }
    tracing::info!(
        component = %component.id,
        middleware = parts.len(),
        "composing HTTP middleware in front of the component"
    );
    crate::middleware::compose(&component.id, bytes, &parts)
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
    crate::p3::add_to_linker(&mut linker)?;
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
    http: Option<&HttpRole>,
    middleware: bool,
) -> anyhow::Result<(InstancePre<InstanceState>, Option<HttpPre>)> {
    let engine = wasm.engine();
    if let Some(HttpRole::Handler) = http {
        check_exports(engine, wasm, id)?;
    }
    if middleware {
        crate::middleware::define_denied(linker, engine, wasm)?;
    }
    let instance_pre =
        linker
            .instantiate_pre(wasm)
            .map_err(|e| match host::link_error(engine, wasm, id) {
                Some(msg) => anyhow!("{msg}"),
                None => anyhow!("component `{id}` cannot be linked: {e:#}"),
            })?;
    let pre = match http {
        Some(HttpRole::Handler) => Some(http_pre(&instance_pre, id)?),
        Some(HttpRole::Wagi(config)) => Some(HttpPre::Wagi(crate::wagi::prepare(
            &instance_pre,
            id,
            config.clone(),
        )?)),
        None => None,
    };
    Ok((instance_pre, pre))
}

/// Compiles (or loads from `cache`) a component, or a wasip1 core module made into one.
fn compile(
    engine: &Engine,
    cache: Option<&CompileCache>,
    bytes: &[u8],
    id: &str,
) -> anyhow::Result<(WasmComponent, Outcome)> {
    match cache {
        Some(cache) => cache.load_or_compile(engine, bytes, id),
        None => Ok((
            crate::compile_cache::compile_component(engine, bytes, id)?,
            Outcome::Miss,
        )),
    }
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
                let views = match crate::confinement() {
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
                if let (Some(c), crate::app::Content::Path(p)) = (crate::confinement(), content) {
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

/// `bytes` compiled with the baseline compiler to serve now, or None (logged) where Winch
/// cannot compile it (a proposal it lacks): then Cranelift compiles it before serving.
fn baseline_compile(bytes: &[u8], id: &str) -> Option<WasmComponent> {
    let t0 = std::time::Instant::now();
    let compiled = crate::tier::baseline_engine()
        .and_then(|base| crate::compile_cache::compile_component(base, bytes, id));
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

#[cfg(test)]
mod tests {
    use super::keep_resident;

    #[test]
    fn warm_slots_hold_at_most_an_eighth_of_the_memory_limit() {
        const MIB: usize = 1 << 20;
        assert_eq!(keep_resident(Some(128 * MIB)), MIB);
        assert_eq!(keep_resident(Some(1024 * MIB)), 8 * MIB);
        // Never more than the fixed cap, with or without a (large) limit.
        assert_eq!(keep_resident(Some(64 * 1024 * MIB)), 16 * MIB);
        assert_eq!(keep_resident(None), 16 * MIB);
        // A limit too small for a page per slot keeps nothing (madvise as before).
        assert_eq!(keep_resident(Some(256 * 1024)), 0);
        assert_eq!(keep_resident(Some(100 * MIB + 3)) % 4096, 0);
    }
}
