//! Library behind `containerd-shim-spin-v2`: the containerd Task service, containers on
//! youki's libcontainer (created by a single-threaded helper forked before tokio), cgroup
//! placement through the `cgroup-placement` crate, and the WASI/Spin/native executors.
//!
//! # Behaviour others rely on
//! - `start` prints only the ttrpc address (`unix:///run/containerd/s/<sha256>`); containers
//!   whose `io.kubernetes.cri.sandbox-id` annotations are equal share one server process.
//!   The runtime options containerd writes to its stdin are decoded by [`start_options`]
//!   (never taken as a cgroup path); placement follows each container's `cgroupsPath`.
//! - Per container the shim keeps `<bundle>/spin-shim-state.json` (placement, libcontainer
//!   state root, rootfs mount, init pid) and a libcontainer state root
//!   `/run/spin-shim/<16 hex of sha256(bundle path)>` (base overridable with
//!   `SPIN_SHIM_STATE_DIR`); both are removed on delete, by the server or by the
//!   `delete` subcommand (which answers exit status 137).
//! - Executors: `*.wasm` entrypoint -> WASI (exit code = program's, trap or load error ->
//!   [`wasi::TRAP_EXIT_CODE`] 134 with the message on stderr, SIGTERM/SIGINT -> 128+signal);
//!   `/` with `/spin.toml` -> Spin engine; ELF or `#!` -> native exec; else create fails
//!   naming the entrypoint. wasip2 components built by current Rust report any non-zero
//!   `exit(n)` as 1 (they import `wasi:cli/exit.exit`, not `exit-with-code`).
//! - Exec, checkpoint and terminals are refused ("... not supported by io.containerd.spin.v2").
//! - Events: TaskCreate, TaskStart, TaskExit, TaskDelete, TaskPaused, TaskResumed, TaskOOM.
//! - Logging: the server logs to the bundle's `log` FIFO (containerd's log); level from
//!   `RUST_LOG`, default [`logging::DEFAULT_FILTER`].

#![warn(missing_docs)]

pub mod cache;
pub mod confined;
pub mod content;
pub mod executor;
pub mod image;
pub mod logging;
pub mod oom;
pub mod service;
pub mod shim;
pub mod start_options;
pub mod state;
pub mod stdio;
pub mod wasi;
pub mod zygote;

use std::sync::Arc;

pub use executor::{ShimExecutor, SpinRunner};

/// Entry point of the shim binary. Parses containerd's arguments; in the server process
/// forks the container-creation helper while still single-threaded, then runs the async
/// shim on tokio. `spin` runs Spin apps (None: Spin entrypoints are refused).
pub fn run_shim(runtime_id: &str, spin: Option<SpinRunner>) {
    let args: Vec<_> = std::env::args_os().collect();
    let flags = containerd_shim::parse(&args[1..]).ok();
    let server = flags
        .as_ref()
        .map(|f| f.action.is_empty() && !f.version && !f.info && !f.socket.is_empty())
        .unwrap_or(false);
    if flags.as_ref().is_some_and(|f| f.version) {
        println!("{runtime_id} {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    logging::init(server);
    if server {
        // Orphaned container processes must come back to us, not to PID 1.
        // SAFETY: plain prctl.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
        match zygote::spawn(ShimExecutor::new(spin)) {
            Ok(z) => {
                let _ = shim::ZYGOTE.set(Arc::new(z));
            }
            Err(e) => {
                tracing::error!("cannot start the container-creation helper: {e:#}");
                std::process::exit(1);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let config = containerd_shim::Config {
        no_setup_logger: true,
        ..Default::default()
    };
    rt.block_on(containerd_shim::asynchronous::run::<shim::SpinShim>(
        runtime_id,
        Some(config),
    ));
}
