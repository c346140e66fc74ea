//! The process's wasmtime engines: one configuration ([`engine_config`]) shared by the
//! runtime's engine, the shim's compile engines and the baseline (Winch) engine, so that an
//! entry compiled by one is loaded by the others (same compatibility hash); the runtime's
//! engine adds the pooling allocator, which does not change compiled code.

use std::sync::OnceLock;

use anyhow::Context;
use wasmtime::Engine;

use crate::limits::EPOCH_TICK;

/// Env var: set to `0` to use on-demand instance allocation instead of the pooling
/// allocator (for hosts that limit virtual address space).
pub const POOLING_ENV: &str = spin_shim_settings::container::POOLING;

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
    // The container's setting (spin-serve's: its environment), not the runtime process's
    // environment, which is empty in a container; an embedder that kept none gets pooling.
    let pooling =
        spin_shim_settings::container::ContainerSettings::current().is_none_or(|s| s.pooling);
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
/// [`super::tier`] switches it to Winch for its baseline engine.
pub(crate) fn engine_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    // Spin 4 (WASIp3) components: async lifts and lowers, streams and futures. Wasmtime 48
    // enables it by default; set here because the runtime depends on it.
    config.wasm_component_model_async(true);
    config.epoch_interruption(true);
    config
}

/// The runtime's configuration with Winch as the compiler (the baseline tier's engines).
/// Winch leaves the trampolines (one per function the host can call, thousands in a
/// JavaScript or Python component) to Cranelift, unoptimized here: the baseline code only
/// serves until Cranelift's replaces it, and optimizing them cost 3% of the whole compile.
pub(crate) fn baseline_config() -> wasmtime::Config {
    let mut config = engine_config();
    config.strategy(wasmtime::Strategy::Winch);
    config.cranelift_opt_level(wasmtime::OptLevel::None);
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
