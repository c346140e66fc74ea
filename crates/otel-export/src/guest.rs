//! Telemetry that guests produce themselves through `wasi:otel` (Spin 3.6+): their finished
//! spans go to the same span processor (and so the same OTLP exporter and batches) as the
//! runtime's own spans, their log records to the same log exporter. Each does nothing while
//! its signal is off, as Spin's `spin-factor-otel` does. Their metrics are sent to the
//! metrics endpoint as they are ([`export_metrics`]).
//!
//! While a guest span is open, spans the runtime starts under the host span the guest
//! started it in (host calls, outbound HTTP) are exported as children of the innermost open
//! guest span of the same trace ([`span_started`], [`span_ended`]), as Spin's
//! `reparent_tracing_span` does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::logs::{Logger as _, LoggerProvider as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::SdkLogRecord;
use opentelemetry_sdk::trace::{SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::state::{self, ParentContext};

pub use crate::push::{enabled as metrics_enabled, export as export_metrics};

/// A guest span that is open: the host span it was started under, and its own context.
struct Open {
    host: opentelemetry::trace::SpanId,
    guest: opentelemetry::trace::SpanContext,
}

/// Open guest spans, oldest first; [`OPEN_COUNT`] mirrors its length so the span path
/// checks one atomic while no guest span is open.
static OPEN: Mutex<Vec<Open>> = Mutex::new(Vec::new());
static OPEN_COUNT: AtomicUsize = AtomicUsize::new(0);

/// At most this many guest spans are remembered as open (a guest that starts spans and
/// never ends them cannot grow the list without bound); the oldest go first.
const MAX_OPEN: usize = 4096;

fn with_open<T>(f: impl FnOnce(&mut Vec<Open>) -> T) -> T {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let r = f(&mut open);
    OPEN_COUNT.store(open.len(), Ordering::Relaxed);
    r
}

/// A guest started span `guest` (`wasi:otel/tracing.on-start`) under the current span (or
/// `fallback`, as [`outer_span_context`]): until it ends, spans started under that host span
/// in the same trace are exported as its children. Nothing when traces are off.
pub fn span_started(fallback: Option<&ParentContext>, guest: opentelemetry::trace::SpanContext) {
    if !state::enabled() {
        return;
    }
    let host = outer_span_context(fallback);
    if !host.is_valid() || host.trace_id() != guest.trace_id() {
        return;
    }
    with_open(|open| {
        if open.len() >= MAX_OPEN {
            open.remove(0);
        }
        open.push(Open {
            host: host.span_id(),
            guest,
        });
    });
}

/// A guest ended span `guest` (`wasi:otel/tracing.on-end`).
pub fn span_ended(guest: opentelemetry::trace::SpanId) {
    if OPEN_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_open(|open| open.retain(|o| o.guest.span_id() != guest));
}

/// A runtime span ended: guest spans still open under it are forgotten (the guest can no
/// longer make host calls under it).
pub(crate) fn host_span_ended(host: opentelemetry::trace::SpanId) {
    if OPEN_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_open(|open| open.retain(|o| o.host != host));
}

/// The innermost open guest span started under the span of `parent` (the parent of a span
/// being started), in the same trace.
pub(crate) fn innermost_open(
    parent: &opentelemetry::Context,
) -> Option<opentelemetry::trace::SpanId> {
    if OPEN_COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let span = parent.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    with_open(|open| {
        open.iter()
            .rev()
            .find(|o| o.host == sc.span_id() && o.guest.trace_id() == sc.trace_id())
            .map(|o| o.guest.span_id())
    })
}

/// The processor of the runtime's spans, shared with guests' spans.
static SPANS: OnceLock<Arc<dyn SpanProcessor>> = OnceLock::new();

/// A span processor the tracer provider and [`export_span`] share. The resource is set on
/// the inner processor before it is shared, so [`SpanProcessor::set_resource`] does
/// nothing here.
#[derive(Debug)]
pub(crate) struct Shared<P>(pub(crate) Arc<P>);

impl<P: SpanProcessor> SpanProcessor for Shared<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx)
    }

    fn on_end(&self, span: SpanData) {
        self.0.on_end(span)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, _resource: &Resource) {}
}

/// Registers the processor guests' spans go to (once, by [`crate::layer`]).
pub(crate) fn set_span_processor(p: Arc<dyn SpanProcessor>) {
    let _ = SPANS.set(p);
}

/// Exports a span a guest finished (`wasi:otel/tracing.on-end`); nothing when traces are off.
pub fn export_span(span: SpanData) {
    if let Some(p) = SPANS.get() {
        p.on_end(span);
    }
}

/// The span context `wasi:otel/tracing.outer-span-context` gives a guest: the current span
/// (the request's server span during a request), else `fallback` (the request a reused
/// instance last took), else an invalid context (the guest then starts a trace of its own).
pub fn outer_span_context(fallback: Option<&ParentContext>) -> opentelemetry::trace::SpanContext {
    let current = tracing::Span::current().context();
    let sc = current.span().span_context().clone();
    if sc.is_valid() {
        return sc;
    }
    fallback
        .map(|p| p.0.span().span_context().clone())
        .unwrap_or_else(opentelemetry::trace::SpanContext::empty_context)
}

/// Emits a log record a guest made (`wasi:otel/logs.on-emit`) under its instrumentation
/// `scope`: `fill` sets its fields. Nothing when logs are off.
pub fn emit_log(scope: InstrumentationScope, fill: impl FnOnce(&mut SdkLogRecord)) {
    if !state::logs_enabled() {
        return;
    }
    if let Some((provider, _)) = state::LOGS.get() {
        let logger = provider.logger_with_scope(scope);
        let mut record = logger.create_log_record();
        fill(&mut record);
        logger.emit(record);
    }
}

/// A static name for severity text `text` when it is one of OpenTelemetry's severity names
/// (`INFO`, `warn2`, ...: the SDK keeps severity text as `&'static str`, and guest strings
/// are not leaked to make one).
pub fn severity_name(text: &str) -> Option<&'static str> {
    (1..=24u8)
        .filter_map(severity)
        .map(|s| s.name())
        .find(|name| name.eq_ignore_ascii_case(text))
}

/// The severity of OpenTelemetry severity number `n` (1 to 24).
pub fn severity(n: u8) -> Option<opentelemetry::logs::Severity> {
    use opentelemetry::logs::Severity::*;
    const ALL: [opentelemetry::logs::Severity; 24] = [
        Trace, Trace2, Trace3, Trace4, Debug, Debug2, Debug3, Debug4, Info, Info2, Info3, Info4,
        Warn, Warn2, Warn3, Warn4, Error, Error2, Error3, Error4, Fatal, Fatal2, Fatal3, Fatal4,
    ];
    ALL.get(usize::from(n).checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities() {
        assert_eq!(severity(9), Some(opentelemetry::logs::Severity::Info));
        assert_eq!(severity(0), None);
        assert_eq!(severity(25), None);
        assert_eq!(severity_name("warn"), Some("WARN"));
        assert_eq!(severity_name("Error3"), Some("ERROR3"));
        assert_eq!(severity_name("loud"), None);
    }

    #[test]
    fn outer_context_without_spans_is_the_fallback_or_invalid() {
        assert!(!outer_span_context(None).is_valid());
    }
}
