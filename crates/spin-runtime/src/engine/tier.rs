//! Tiered compilation for a first start. A large component the compile cache has no entry
//! for starts on Winch, wasmtime's baseline compiler (compiles several times faster than
//! Cranelift; its code runs slower), so that the app answers within about a second instead
//! of the many seconds Cranelift takes for a 12 MB JavaScript or 40 MB Python component. A
//! background thread meanwhile compiles the component with Cranelift, stores it in the
//! compile cache and swaps the new code in: requests that start after the swap run it;
//! those in flight finish on the baseline code. A later start of the same app loads
//! Cranelift's code from the cache and never runs the baseline.
//!
//! Components that event triggers (Redis, MQTT, cron, command) run are always compiled
//! with Cranelift before serving: their trigger loops hold on to the code they started
//! with. In a container the cache is read-only and the shim compiles, in unprivileged
//! helper processes placed in the container's cgroup (the pod's limits apply to them): for
//! such a component it compiles the baseline code before the container starts and reserves
//! the Cranelift entry ([`super::compile_cache::Reservation`]), which it fills while the
//! container serves; the container's background thread waits for the entry to become
//! readable and swaps it in (an empty entry, when that compilation failed or hit the pod's
//! limits, leaves it on the baseline code). A read-only cache with no reservation has no
//! tiering: a miss compiles with Cranelift in memory.

use std::sync::OnceLock;

use anyhow::Context as _;
use wasmtime::component::Component as WasmComponent;
use wasmtime::Engine;

use super::compile_cache::{entry_state, CompileCache, EntryState};

/// Env var: `0` turns tiering off (a cache miss compiles with Cranelift before serving).
pub const TIERING_ENV: &str = spin_shim_settings::container::TIERED_COMPILE;
/// Env var: the size in bytes from which a component starts on the baseline compiler when
/// the compile cache misses; default [`DEFAULT_MIN_BYTES`].
pub const MIN_BYTES_ENV: &str = spin_shim_settings::container::TIERED_COMPILE_MIN_BYTES;
/// Below this size Cranelift compiles a component in well under half a second (a Rust
/// Spin app: 0.2 MB, about 130 ms), so it is compiled at once.
pub const DEFAULT_MIN_BYTES: usize = 2 << 20;

/// When a component starts on the baseline compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TieringConfig {
    /// Tiering on at all.
    pub enabled: bool,
    /// Smallest component (bytes) that starts on the baseline.
    pub min_bytes: usize,
}

impl Default for TieringConfig {
    fn default() -> Self {
        TieringConfig {
            enabled: true,
            min_bytes: DEFAULT_MIN_BYTES,
        }
    }
}

impl TieringConfig {
    /// From [`TIERING_ENV`] and [`MIN_BYTES_ENV`] as the settings read them: the
    /// container's ([`spin_shim_settings::container::ContainerSettings`]), or for the shim's
    /// precompile [`spin_shim_settings::container::precompile_tiering`].
    pub fn from_settings(t: spin_shim_settings::container::Tiering) -> Self {
        TieringConfig {
            enabled: t.enabled,
            min_bytes: usize::try_from(t.min_bytes).unwrap_or(usize::MAX),
        }
    }

    /// Whether a component of `len` bytes that the cache misses starts on the baseline.
    pub fn applies(&self, len: usize) -> bool {
        self.enabled && len >= self.min_bytes
    }
}

/// The process-wide baseline (Winch) engine: the runtime's configuration with Winch as the
/// compiler and on-demand instance allocation (its instances are few and short-lived, so
/// it reserves no pool), with its own epoch ticker.
pub(crate) fn baseline_engine() -> anyhow::Result<&'static Engine> {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let engine = Engine::new(&super::config::baseline_config())
        .map_err(anyhow::Error::from)
        .context("cannot create the baseline (Winch) engine")?;
    let mut created = false;
    let engine = ENGINE.get_or_init(|| {
        created = true;
        engine
    });
    if created {
        super::config::start_epoch_ticker(engine, "epoch-baseline")?;
    }
    Ok(engine)
}

/// Puts the calling thread at nice 10, for a background compilation: serving goes first, and
/// the rayon threads the compilation starts inherit the priority.
pub fn lower_thread_priority() {
    // SAFETY: setpriority on this thread's own id; no memory is passed.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
    }
}

/// Gives the memory a compilation freed back to the kernel: glibc keeps freed heap in its
/// arenas, so without it a process that compiled a 12 MB component at start keeps about
/// 250 MiB it no longer uses for its whole life.
pub fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns unused heap pages; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Cranelift's code for component `id` of Wasm `bytes` (as it was planned and composed) on
/// `engine`, for a component serving on baseline code. In a container (read-only cache)
/// it waits for the shim's entry. With a writable cache it is compiled on one thread by
/// [`serial_engine`] (same compatibility hash as `engine`: the code is the same), stored,
/// and loaded back from the entry, whose pages are mapped from the file as on a warm start
/// instead of held in anonymous memory; otherwise compiled on `engine`. Blocking.
pub(crate) fn cranelift_code(
    engine: &Engine,
    cache: Option<&CompileCache>,
    id: &str,
    bytes: &[u8],
) -> anyhow::Result<WasmComponent> {
    if let Some(cache) = cache.filter(|c| c.is_read_only()) {
        return wait_for_shim(engine, cache, bytes);
    }
    if let Some(cache) = cache.filter(|c| !c.is_read_only()) {
        let serial = serial_engine()?;
        let (_, outcome) = cache.load_or_compile(serial, bytes, id)?;
        if cache.entry_path(engine, bytes).is_file() {
            let (wasm, _) = cache.load_or_compile(engine, bytes, id)?;
            tracing::debug!(component = %id, ?outcome, "tier-up: loaded from the cache entry");
            return Ok(wasm);
        }
    }
    Ok(match cache {
        Some(cache) => cache.load_or_compile(engine, bytes, id)?.0,
        None => super::compile_cache::compile_component(engine, bytes, id)?,
    })
}

/// How long a container waits for the shim's Cranelift code before it stays on baseline.
const SHIM_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);
/// How often it looks.
const SHIM_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// In a container: the shim compiles the component with Cranelift after the container
/// started and fills the entry it reserved ([`super::compile_cache::Reservation`]); this
/// waits for the entry to become readable and loads it.
fn wait_for_shim(
    engine: &Engine,
    cache: &CompileCache,
    bytes: &[u8],
) -> anyhow::Result<WasmComponent> {
    let path = cache.entry_path(engine, bytes);
    let deadline = std::time::Instant::now() + SHIM_WAIT;
    while entry_state(&path) == EntryState::Pending {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the shim did not provide {} within {} s",
            path.display(),
            SHIM_WAIT.as_secs()
        );
        std::thread::sleep(SHIM_POLL);
    }
    anyhow::ensure!(
        std::fs::metadata(&path).is_ok_and(|m| m.len() > 0),
        "the shim could not compile it (its entry {} is empty; see the shim's log)",
        path.display()
    );
    // SAFETY: as in `CompileCache::load_or_compile`: the shim wrote the entry with
    // `Component::serialize` for an engine of this compatibility hash (the file name), in a
    // root-only directory; the container sees it read-only.
    unsafe { WasmComponent::deserialize_file(engine, &path) }
        .map_err(anyhow::Error::from)
        .with_context(|| format!("loading the shim's entry {}", path.display()))
}

/// The runtime's Cranelift configuration compiling on the calling thread only: the
/// background compilation leaves the other cores to the requests, and holds fewer
/// functions in flight.
fn serial_engine() -> anyhow::Result<&'static Engine> {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let mut config = super::config::engine_config();
    config.parallel_compilation(false);
    let e = Engine::new(&config)
        .map_err(anyhow::Error::from)
        .context("cannot create the background compilation engine")?;
    Ok(ENGINE.get_or_init(|| e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_from_settings() {
        use spin_shim_settings::container::ContainerSettings;
        let tiering = |k: &str, v: &str| {
            ContainerSettings::from_env(&[(k.to_string(), v.to_string())])
                .map(|s| TieringConfig::from_settings(s.tiering()))
        };
        assert_eq!(
            TieringConfig::from_settings(ContainerSettings::from_env(&[]).unwrap().tiering()),
            TieringConfig::default()
        );
        let off = tiering(TIERING_ENV, "0").unwrap();
        assert!(!off.enabled);
        assert!(!off.applies(usize::MAX));
        let min = tiering(MIN_BYTES_ENV, "10").unwrap();
        assert!(min.applies(10) && !min.applies(9));
        let e = tiering(TIERING_ENV, "yes").unwrap_err();
        assert!(e.to_string().contains(TIERING_ENV), "{e}");
        let e = tiering(MIN_BYTES_ENV, "2M").unwrap_err();
        assert!(e.to_string().contains(MIN_BYTES_ENV), "{e}");
    }

    #[test]
    fn serial_engine_writes_entries_the_main_engine_loads() {
        assert_eq!(
            crate::engine::compile_cache::engine_key(serial_engine().unwrap()),
            crate::engine::compile_cache::engine_key(
                &crate::engine::config::new_engine(true, None).unwrap()
            ),
        );
    }

    #[test]
    fn baseline_engine_is_winch_and_differs_from_the_main_engine() {
        let base = baseline_engine().unwrap();
        let main = crate::engine::config::new_engine(false, None).unwrap();
        assert_ne!(
            crate::engine::compile_cache::engine_key(base),
            crate::engine::compile_cache::engine_key(&main),
            "a baseline artifact must never be mistaken for a Cranelift cache entry"
        );
    }
}
