//! tracing setup. The server logs into the `log` FIFO containerd opens in the bundle
//! directory (containerd copies it into its own log); `start`/`delete` log to stderr,
//! which containerd reports when they fail. Level from `RUST_LOG` (default `info`; the
//! request path logs at `debug`).

use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::EnvFilter;

/// Default filter when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info,libcontainer=error,libcgroups=error";

/// The server's log FIFO, kept for the processes it starts (the container-creation helper).
static LOG: OnceLock<File> = OnceLock::new();

/// A descriptor of the server's log (see [`init`]), for a helper process's stderr.
pub fn log_fd() -> Option<OwnedFd> {
    LOG.get()?.try_clone().ok().map(OwnedFd::from)
}

/// Installs the global subscriber. `server`: write to `./log` if it exists.
pub fn init(server: bool) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(true);
    let log_fifo = if server {
        OpenOptions::new().write(true).open("log").ok()
    } else {
        None
    };
    if let Some(f) = log_fifo.as_ref().and_then(|f| f.try_clone().ok()) {
        let _ = LOG.set(f);
    }
    let _ = match log_fifo {
        Some(f) => builder.with_writer(Mutex::new(f)).try_init(),
        None => builder.with_writer(std::io::stderr).try_init(),
    };
}
