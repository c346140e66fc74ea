//! Spin application runtime on wasmtime.
//!
//! The one entry point is [`Runner`]: `Runner::new(app).dir(..).env(..).args(..)`, then
//! `run()` (its own tokio runtime, until SIGTERM; with [`Runner::in_container`] the shim's
//! Spin executor, which confines the process before the app runs, see [`Confinement`]) or
//! `serve(on_ready, shutdown)` inside a tokio runtime (tests). The `spin-serve` binary
//! (development, tests, benchmarks) runs it too.
//!
//! Modules by floor, each importing only from its own floor or below: the app model and its
//! settings ([`app`], [`routing`], [`limits`], [`metrics`], [`inbound_tls`]); engine and
//! compilation ([`engine`]); host features ([`host`]) and WASI compatibility ([`wasi_rc`]);
//! the loaded app and its instances ([`runtime`], [`InstanceState`]); the HTTP server
//! ([`server`]) and the other triggers ([`trigger`]); the [`Runner`] and the process around
//! it. This crate root only names them.

#![warn(missing_docs)]

pub mod app;
mod app_log;
mod confinement;
pub mod engine;
pub mod host;
pub mod inbound_tls;
pub mod limits;
pub mod metrics;
pub mod p3;
mod process;
pub mod routing;
mod runner;
pub mod runtime;
pub mod server;
pub mod spin1;
mod state;
pub mod trigger;
pub mod wasi_rc;

pub use app::App;
pub use confinement::Confinement;
pub use process::{init_tracing, quiet_library_backtraces, shutdown_signal};
pub use runner::{InContainer, Runner};
pub use runtime::{LoadedApp, RuntimeConfig};
pub use state::{HostContext, InstanceState};

pub use app::MANIFEST_FILE;
