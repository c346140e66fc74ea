//! tracing setup. The server logs into the `log` FIFO containerd opens in the bundle
//! directory (containerd copies it into its own log); `start`/`delete` log to stderr,
//! which containerd reports when they fail. Level from `RUST_LOG` (default `info`; the
//! request path logs at `debug`).

use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::EnvFilter;

/// Default filter when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info,libcontainer=error,libcgroups=error";

/// The server's log FIFO, kept for the processes it starts (the container-creation helper).
static LOG: OnceLock<File> = OnceLock::new();

/// A descriptor of the server's log (see [`init`]), for a helper process's stderr.
pub fn log_fd() -> Option<OwnedFd> {
    LOG.get()?.try_clone().ok().map(OwnedFd::from)
}

/// Target of the Task API spans (TRACE: exported when traces are on, never logged).
pub const TASK_API_TARGET: &str = "wasm_shim_core::service";

/// Installs the global subscriber. `server`: write to `./log` if it exists, and export the
/// Task API's spans as `service` when the shim's environment has `OTEL_EXPORTER_OTLP_*`
/// ([`otel_export`]; `OTEL_SERVICE_NAME` overrides the name, unless it is the `containerd`
/// that containerd sets for itself).
pub fn init(server: bool, service: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let log_fifo = if server {
        OpenOptions::new().write(true).open("log").ok()
    } else {
        None
    };
    if let Some(f) = log_fifo.as_ref().and_then(|f| f.try_clone().ok()) {
        let _ = LOG.set(f);
    }
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_target(true);
    let fmt = match log_fifo {
        Some(f) => fmt.with_writer(BoxMakeWriter::new(Mutex::new(f))),
        None => fmt.with_writer(BoxMakeWriter::new(std::io::stderr)),
    };
    let otel = if server {
        // containerd sets OTEL_SERVICE_NAME=containerd for its own traces, and shims
        // inherit it: that value names containerd, not the shim.
        let lookup = |k: &str| {
            std::env::var(k)
                .ok()
                .filter(|v| !(k == "OTEL_SERVICE_NAME" && v == "containerd"))
        };
        otel_export::layer_from_env(&lookup, service, &[TASK_API_TARGET])
    } else {
        None
    };
    if tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()
        .is_ok()
    {
        for (on, line) in otel_export::decisions() {
            if on {
                tracing::info!("{line}");
            } else {
                tracing::warn!("{line}");
            }
        }
    }
}
