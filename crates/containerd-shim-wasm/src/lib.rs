//! Library behind `containerd-shim-spin-v2`: the containerd Task service, containers on
//! youki's libcontainer (created by a single-threaded helper forked before tokio), cgroup
//! placement through the `cgroup-placement` crate, and the WASI/Spin/native executors.

pub mod executor;
pub mod logging;
pub mod oom;
pub mod service;
pub mod shim;
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
