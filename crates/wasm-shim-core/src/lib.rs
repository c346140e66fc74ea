//! A containerd runtime v2 shim for Wasm engines: the containerd Task service, containers
//! on youki's libcontainer (created by a single-threaded helper process, restarted when it
//! dies or hangs),
//! cgroup placement through the `cgroup-placement` crate, a generic client of containerd's
//! content store, and the [`engine::Engine`] seam (plain WASI built in, native programs
//! through libcontainer). A shim binary calls [`run_shim`] with its engine.
//!
//! # Behaviour others rely on
//! With engine name `<e>` (see [`engine::ShimNames`]):
//! - `start` prints only the ttrpc address (`unix:///run/containerd/s/<sha256>`); containers
//!   whose `io.kubernetes.cri.sandbox-id` annotations are equal share one server process.
//!   The runtime options containerd writes to its stdin are decoded by
//!   [`cgroup_placement::decode_start_stdin`]
//!   (never taken as a cgroup path); placement follows each container's `cgroupsPath`.
//! - Per container the shim keeps `<bundle>/<e>-shim-state.json` (placement, libcontainer
//!   state root, rootfs mount, init pid) and a libcontainer state root
//!   `/run/spin-shim/<16 hex of sha256(bundle path)>` (base overridable with
//!   `SPIN_SHIM_STATE_DIR`); both are removed on delete, by the server or by the
//!   `delete` subcommand (which answers exit status 137).
//! - Executors: the engine's entrypoints, then WASI (`*.wasm` or `\0asm` entrypoint: exit
//!   code = program's, trap or load error -> [`wasi::TRAP_EXIT_CODE`] 134 with the message
//!   on stderr, SIGTERM/SIGINT -> 128+signal), then ELF or `#!` -> native exec; else create
//!   fails naming the entrypoint. wasip2 components built by current Rust report any
//!   non-zero `exit(n)` as 1 (they import `wasi:cli/exit.exit`, not `exit-with-code`).
//! - Containers are created by the helper in [`zygote`]; a create it does not answer within
//!   `SPIN_SHIM_CREATE_TIMEOUT_SECS` (default 60) fails naming that variable, and a helper
//!   that died or hung is replaced for the next create.
//! - Exec, checkpoint and terminals are refused ("... not supported by io.containerd.<e>.v2").
//! - Events: TaskCreate, TaskStart, TaskExit, TaskDelete, TaskPaused, TaskResumed, TaskOOM.
//! - Logging: the server logs to the bundle's `log` FIFO (containerd's log); level from
//!   `RUST_LOG`, default [`logging::DEFAULT_FILTER`].

#![warn(missing_docs)]

pub mod confine;
pub mod confined;
pub mod content;
pub mod engine;
pub mod error;
pub mod executor;
pub mod fds;
pub mod fork_server;
pub mod logging;
pub mod memory;
pub mod oom;
pub mod service;
pub mod shim;
pub mod state;
pub mod stdio;
pub mod termination;
pub mod untrusted;
pub mod wasi;
pub mod zygote;

use std::sync::{Arc, OnceLock};

use engine::{Engine, ShimNames};
pub use executor::ShimExecutor;
use wasi::WasiEngine;

/// The names and engines of this shim process, set once by [`run_shim`].
struct ShimSetup {
    names: ShimNames,
    engines: Vec<Arc<dyn Engine>>,
}

static SETUP: OnceLock<ShimSetup> = OnceLock::new();

/// The setup [`run_shim`] made; without it (library tests), the plain WASI shim's.
fn setup() -> &'static ShimSetup {
    SETUP.get_or_init(|| ShimSetup {
        names: ShimNames::new(WasiEngine.name()),
        engines: vec![Arc::new(WasiEngine)],
    })
}

/// The names derived from the engine given to [`run_shim`].
pub fn shim_names() -> &'static ShimNames {
    &setup().names
}

/// The engines containers are tried against, in order: the shim's, then WASI.
pub(crate) fn engines() -> &'static [Arc<dyn Engine>] {
    &setup().engines
}

/// Worker threads of the server's tokio runtime. Its work is a few ttrpc calls per
/// container, and blocking work runs on tokio's blocking pool: one worker per CPU (tokio's
/// default) only adds threads, each with its stack and a malloc arena, in every pod.
const SERVER_WORKERS: usize = 2;

/// Entry point of the shim binary: `engine` runs what it can handle, the built-in WASI
/// engine and native programs the rest; the runtime id and state paths derive from the
/// engine's name. Parses containerd's arguments; in the server process forks the
/// [`fork_server`] and starts the container-creation helper ([`zygote`]) from it, then
/// runs the async shim on tokio. Run as `<binary> --container-creation-helper` it is that
/// helper.
pub fn run_shim(engine: Arc<dyn Engine>) {
    let names = ShimNames::new(engine.name());
    let engines: Vec<Arc<dyn Engine>> = vec![engine, Arc::new(WasiEngine)];
    let setup = SETUP.get_or_init(|| ShimSetup { names, engines });
    let runtime_id = setup.names.runtime_id.as_str();
    let args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == zygote::HELPER_ARG) {
        // It sets up its logging once it has its settings (its environment is empty).
        zygote::helper_main(ShimExecutor::new(setup.engines.clone()));
    }
    let flags = containerd_shim::parse(&args[1..]).ok();
    let server = flags
        .as_ref()
        .map(|f| f.action.is_empty() && !f.version && !f.info && !f.socket.is_empty())
        .unwrap_or(false);
    if flags.as_ref().is_some_and(|f| f.version) {
        println!("{runtime_id} {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    // First, while this process is single-threaded and before the allocator is tuned for
    // the server: helpers and their containers are forked from it.
    let fork_server =
        server.then(|| fork_server::ForkServer::start(ShimExecutor::new(setup.engines.clone())));
    // Every setting of the shim is checked before it serves (after the fork: what the fork
    // server copies never held the environment's values); `delete` cleans up whatever the
    // environment says, so that a bad value never leaves a container behind.
    if !args.iter().any(|a| a == "delete") {
        if let Err(e) = spin_shim_settings::shim::ShimSettings::init() {
            eprintln!("containerd-shim-{}-v2: {e}", setup.names.engine);
            std::process::exit(1);
        }
    }
    logging::init(
        server,
        &format!("containerd-shim-{}-v2", setup.names.engine),
    );
    if server {
        let fork_server = match fork_server {
            Some(Ok(f)) => Some(f),
            Some(Err(e)) => {
                tracing::warn!("no fork server ({e:#}): container-creation helpers are exec'd");
                None
            }
            None => None,
        };
        // Before the helper's spawner thread, the first thread besides this one.
        memory::single_malloc_arena();
        // Orphaned container processes must come back to us, not to PID 1.
        // SAFETY: plain prctl.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
        match zygote::Client::start(logging::log_fd(), fork_server) {
            Ok(z) => {
                let z = Arc::new(z);
                if let Some(period) = memory::idle_release_period() {
                    z.spawn_idle_close(period);
                }
                let _ = shim::ZYGOTE.set(z);
            }
            Err(e) => {
                tracing::error!("cannot start the container-creation helper: {e:#}");
                std::process::exit(1);
            }
        }
        if let Some(period) = memory::idle_release_period() {
            match memory::ExecutableCode::find() {
                Ok(code) => memory::spawn_idle_release(code, period),
                Err(e) => tracing::debug!("finding the executable's mappings: {e}"),
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SERVER_WORKERS)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let config = containerd_shim::Config {
        no_setup_logger: true,
        ..Default::default()
    };
    rt.block_on(containerd_shim::asynchronous::run::<shim::WasmShim>(
        runtime_id,
        Some(config),
    ));
    otel_export::shutdown();
}
