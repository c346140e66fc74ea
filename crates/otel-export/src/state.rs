//! What this process has installed: the exporters' providers, and the switches the request
//! path checks before it does any work for telemetry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

pub(crate) static ENABLED: AtomicBool = AtomicBool::new(false);
pub(crate) static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
pub(crate) static METRICS: OnceLock<SdkMeterProvider> = OnceLock::new();
pub(crate) static LOGS: OnceLock<(SdkLoggerProvider, SdkLogger)> = OnceLock::new();
pub(crate) static METRICS_ON: AtomicBool = AtomicBool::new(false);
pub(crate) static LOGS_ON: AtomicBool = AtomicBool::new(false);

/// Whether a trace exporter is installed in this process (cheap; for the request path).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether a metrics exporter is installed (`start_metrics_and_logs`).
pub fn metrics_enabled() -> bool {
    METRICS_ON.load(Ordering::Relaxed)
}

/// Whether a log exporter is installed (`start_metrics_and_logs`).
pub fn logs_enabled() -> bool {
    LOGS_ON.load(Ordering::Relaxed)
}

/// A span's OpenTelemetry context, kept to parent spans made outside it (in another task,
/// after it ended) without keeping the span itself open (`context_of`).
#[derive(Clone, Debug, Default)]
pub struct ParentContext(pub(crate) opentelemetry::Context);
