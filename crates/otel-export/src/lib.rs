//! OpenTelemetry export for the shim and the Spin runtime, configured as Spin and the
//! OpenTelemetry SDKs are: from `OTEL_EXPORTER_OTLP_*` (what spin-operator injects).
//!
//! - Each signal (traces, metrics, logs) is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or its own
//!   `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` is set and not empty, unless
//!   `OTEL_SDK_DISABLED=true`. Off, nothing is installed: no layer, no thread, and the request
//!   path only checks [`enabled`], [`metrics_enabled`] or [`logs_enabled`].
//! - Protocol from `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`,
//!   else `http/protobuf` (Spin's default): `grpc` or `http/protobuf`; `http/json` is refused.
//! - Endpoint: the signal's variable as given; else the base endpoint, with `/v1/<signal>`
//!   appended for HTTP. `https://` endpoints use rustls with the Mozilla roots plus
//!   `OTEL_EXPORTER_OTLP_[<SIGNAL>_]CERTIFICATE`, and client authentication from
//!   `..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY`. Headers from `OTEL_EXPORTER_OTLP_HEADERS`
//!   and `..._<SIGNAL>_HEADERS` (`k=v,k2=v2`, percent-decoded). `service.name` from
//!   `OTEL_SERVICE_NAME`, else `OTEL_RESOURCE_ATTRIBUTES`, else the caller's default.
//!   `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_METRIC_EXPORT_INTERVAL` and `OTEL_BLRP_SCHEDULE_DELAY`
//!   (ms) pace the exports. `SPIN_OTEL_TRACING_LEVEL` (default `info`) filters spans.
//! - What is exported is what Spin exports: spans ([`layer`]); the counters
//!   `spin.request_count` ([`count_request`]) and `spin.llm_infer` ([`count_llm_infer`]); the
//!   app's standard output and error as log records with its `component_id` ([`app_log`]).
//! - Export runs on a one-thread tokio runtime of its own, so callers need no runtime and
//!   the request path never waits for the collector.
//! - Guests' own spans and log records (`wasi:otel`) join the same exports ([`guest`]); their
//!   metrics go to the same metrics endpoint ([`guest::export_metrics`]). A span the runtime
//!   starts under a request span while a guest span of that request is open (a host call,
//!   outbound HTTP) is exported as a child of the innermost open guest span, as in Spin.
//! - Spin 3.6's per-component histograms `spin.component_cpu_time`,
//!   `spin.component_memory_used_on_init` and `spin.component_memory_used`
//!   ([`record_component_usage`]).
//! - Spans named [`HOST_CALL_SPAN`] (wasmtime's `bindgen!` `tracing` spans of host imports)
//!   are exported as client spans named `<interface>/<function>`; their call and return
//!   events, which carry arguments and results (secrets, for variables), are never exported.
#![warn(missing_docs)]

mod config;
pub mod guest;
mod push;
mod state;
mod transport;

/// The OpenTelemetry API and SDK this crate exports with, for callers that build spans and
/// log records themselves ([`guest`]).
pub use opentelemetry;
pub use opentelemetry_proto;
pub use opentelemetry_sdk;

pub use config::{OtlpConfig, Protocol, Signal, Tls};
pub use state::{enabled, logs_enabled, metrics_enabled, ParentContext};

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context as _};
use opentelemetry::logs::{LogRecord as _, Logger as _, LoggerProvider as _};
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;
use spin_shim_settings::container;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use state::{ENABLED, LOGS, LOGS_ON, METRICS, METRICS_ON, PROVIDER};
use transport::{export_runtime, grpc_metadata, http_client, Entered, EXPORT_TIMEOUT};

/// Name of the spans wasmtime's `bindgen!` opens around a host import when the import has
/// the `tracing` flag (fields `module` and `function`).
pub const HOST_CALL_SPAN: &str = "wit-bindgen import";

/// Target of the tracing events [`app_log`] emits for an app's output (as Spin does, so that
/// the output shows on the request's span); log layers that print should turn it off.
pub const APP_LOG_TARGET: &str = "spin_app_log";

/// Runs an exporter's calls on the export runtime.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: Arc<E>,
    handle: tokio::runtime::Handle,
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let inner = self.inner.clone();
        match self
            .handle
            .spawn(async move { inner.export(batch).await })
            .await
        {
            Ok(r) => r,
            Err(e) => Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                e.to_string(),
            )),
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(e) = Arc::get_mut(&mut self.inner) {
            e.set_resource(resource);
        }
    }
}

/// Gives wasmtime's host-import spans a name and kind an operator can read.
#[derive(Debug)]
struct HostCallNames<P>(P);

/// `[method]store.get` -> `store.get`, `[static]x.new` -> `x.new`.
fn bare_function(f: &str) -> &str {
    match f.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map(|(_, name)| name).unwrap_or(f),
        None => f,
    }
}

/// Attribute that carries, from a span's start to its end, the guest span it belongs under
/// (never exported).
const GUEST_PARENT: &str = "spin.guest_parent";

impl<P: SpanProcessor> SpanProcessor for HostCallNames<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        if let Some(guest) = guest::innermost_open(cx) {
            use opentelemetry::trace::Span as _;
            span.set_attribute(KeyValue::new(GUEST_PARENT, format!("{guest:016x}")));
        }
        self.0.on_start(span, cx)
    }

    fn on_end(&self, mut span: SpanData) {
        if let Some(i) = span
            .attributes
            .iter()
            .position(|a| a.key.as_str() == GUEST_PARENT)
        {
            let guest = span.attributes.remove(i);
            if let Ok(id) = opentelemetry::trace::SpanId::from_hex(&guest.value.as_str()) {
                span.parent_span_id = id;
            }
        }
        guest::host_span_ended(span.span_context.span_id());
        if span.name == HOST_CALL_SPAN {
            let attr = |k: &str| {
                span.attributes
                    .iter()
                    .find(|a| a.key.as_str() == k)
                    .map(|a| a.value.as_str().into_owned())
            };
            if let (Some(module), Some(function)) = (attr("module"), attr("function")) {
                span.name = Cow::Owned(format!("{module}/{}", bare_function(&function)));
            }
            span.span_kind = SpanKind::Client;
        }
        self.0.on_end(span)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource)
    }
}

/// Configures a tonic exporter builder for `config` (endpoint, metadata, TLS, timeout).
macro_rules! tonic_builder {
    ($builder:expr, $config:expr) => {{
        let config: &OtlpConfig = $config;
        let mut b = $builder
            .with_tonic()
            .with_endpoint(&config.endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .with_metadata(grpc_metadata(config)?);
        if let Some(tls) = &config.tls {
            b = b.with_tls_config(transport::tonic_tls(tls)?);
        }
        b.build()?
    }};
}

/// Configures an OTLP/HTTP exporter builder for `config`.
macro_rules! http_builder {
    ($builder:expr, $config:expr, $handle:expr) => {{
        let config: &OtlpConfig = $config;
        $builder
            .with_http()
            .with_endpoint(&config.endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(config.headers.iter().cloned().collect())
            .with_http_client(http_client(config, $handle)?)
            .build()?
    }};
}

fn build_exporter(
    config: &OtlpConfig,
    handle: &tokio::runtime::Handle,
) -> anyhow::Result<OnRuntime<opentelemetry_otlp::SpanExporter>> {
    let _guard = handle.enter();
    let exporter = match config.protocol {
        Protocol::Grpc => tonic_builder!(opentelemetry_otlp::SpanExporter::builder(), config),
        Protocol::HttpProtobuf => {
            http_builder!(opentelemetry_otlp::SpanExporter::builder(), config, handle)
        }
    };
    Ok(OnRuntime {
        inner: Arc::new(exporter),
        handle: handle.clone(),
    })
}

/// The resource every exporter reports: `service.name` and `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(config: &OtlpConfig) -> Resource {
    let mut attributes = vec![KeyValue::new("service.name", config.service_name.clone())];
    attributes.extend(
        config
            .resource
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );
    Resource::builder_empty()
        .with_attributes(attributes)
        .build()
}

/// Builds the exporter for `config` and returns the tracing layer that feeds it (install it
/// beside the log layer). Spans pass `config.level`; spans whose target starts with one of
/// `trace_targets` pass at every level (instrumentation kept at TRACE so that it costs
/// nothing when traces are off). The first call installs the process's tracer provider;
/// later calls fail.
pub fn layer<S>(config: &OtlpConfig, trace_targets: &[&str]) -> anyhow::Result<impl Layer<S>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let rt = export_runtime()?;
    let exporter = build_exporter(config, rt.handle())?;
    let mut batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(config.schedule_delay)
                .build(),
        )
        .build();
    // Shared with guests' spans (`guest::export_span`), so its resource is set here.
    batch.set_resource(&resource(config));
    let batch = Arc::new(batch);
    let provider = SdkTracerProvider::builder()
        .with_span_processor(HostCallNames(guest::Shared(batch.clone())))
        .with_resource(resource(config))
        .build();
    if PROVIDER.set(provider.clone()).is_err() {
        bail!("the OpenTelemetry exporter is already installed in this process");
    }
    guest::set_span_processor(batch);
    let tracer = provider.tracer("containerd-shim-spin-v2");
    let mut directives = format!("{},{HOST_CALL_TARGETS}=trace", config.level);
    for t in trace_targets {
        directives.push_str(&format!(",{t}=trace"));
    }
    let filter = EnvFilter::try_new(directives).with_context(|| {
        format!(
            "{}={:?} is not a tracing filter (e.g. `info`)",
            container::OTEL_TRACING_LEVEL,
            config.level
        )
    })?;
    // Host-call events carry arguments and results: never exported.
    let no_host_events =
        filter_fn(|m| !(m.is_event() && m.target().starts_with(HOST_CALL_TARGETS)));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(filter.and(no_host_events)))
}

/// Target prefix of the host-import spans (the Spin runtime's bindings module).
pub const HOST_CALL_TARGETS: &str = "spin_runtime::host::bindings";

/// The layer ([`layer`]) for the `OTEL_*` variables `get` sees, or `None` when traces are
/// off. A bad configuration is reported by [`decisions`] (naming the variable) and leaves
/// traces off: telemetry never stops an app.
pub fn layer_from_env<S>(
    get: &dyn Fn(&str) -> Option<String>,
    default_service: &str,
    trace_targets: &[&str],
) -> Option<impl Layer<S>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let result = OtlpConfig::from_lookup(get, default_service).and_then(|c| {
        c.map(|c| layer(&c, trace_targets).map(|l| (c, l)))
            .transpose()
    });
    match result {
        Ok(Some((c, l))) => {
            note(true, exported_to(&c));
            Some(l)
        }
        Ok(None) => None,
        Err(e) => {
            note(false, format!("OpenTelemetry traces are off: {e:#}"));
            None
        }
    }
}

fn exported_to(c: &OtlpConfig) -> String {
    format!(
        "OpenTelemetry {} are exported to {} ({:?}) as service {:?}",
        c.signal.name(),
        c.endpoint,
        c.protocol,
        c.service_name
    )
}

/// What the set-up functions decided, for [`decisions`].
static PENDING_LOG: Mutex<Vec<(bool, String)>> = Mutex::new(Vec::new());

fn note(on: bool, line: String) {
    if let Ok(mut l) = PENDING_LOG.lock() {
        l.push((on, line));
    }
}

/// What [`layer_from_env`] and [`start_metrics_and_logs`] decided for each signal that was
/// asked for: `(true, where it goes)` or `(false, why it is off)`, once (the list is
/// drained). Callers log them once their subscriber is installed (info when on, warning when
/// off).
pub fn decisions() -> Vec<(bool, String)> {
    PENDING_LOG
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default()
}

fn build_metrics(config: &OtlpConfig) -> anyhow::Result<SdkMeterProvider> {
    let handle = export_runtime()?.handle();
    let _guard = handle.enter();
    let exporter = match config.protocol {
        Protocol::Grpc => tonic_builder!(opentelemetry_otlp::MetricExporter::builder(), config),
        Protocol::HttpProtobuf => {
            http_builder!(
                opentelemetry_otlp::MetricExporter::builder(),
                config,
                handle
            )
        }
    };
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(OnHandle {
        inner: exporter,
        handle: handle.clone(),
    })
    .with_interval(config.schedule_delay)
    .build();
    Ok(SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource(config))
        .build())
}

fn build_logs(config: &OtlpConfig) -> anyhow::Result<SdkLoggerProvider> {
    let handle = export_runtime()?.handle();
    let _guard = handle.enter();
    let exporter = match config.protocol {
        Protocol::Grpc => tonic_builder!(opentelemetry_otlp::LogExporter::builder(), config),
        Protocol::HttpProtobuf => {
            http_builder!(opentelemetry_otlp::LogExporter::builder(), config, handle)
        }
    };
    let processor = opentelemetry_sdk::logs::BatchLogProcessor::builder(OnHandle {
        inner: exporter,
        handle: handle.clone(),
    })
    .with_batch_config(
        opentelemetry_sdk::logs::BatchConfigBuilder::default()
            .with_scheduled_delay(config.schedule_delay)
            .build(),
    )
    .build();
    Ok(SdkLoggerProvider::builder()
        .with_log_processor(processor)
        .with_resource(resource(config))
        .build())
}

/// Starts the metrics and log exporters the `OTEL_*` variables `get` sees ask for (see the
/// crate documentation); each is independent of the others and of traces. A bad setting
/// leaves that signal off and is reported by [`decisions`]. Later calls do nothing.
pub fn start_metrics_and_logs(get: &dyn Fn(&str) -> Option<String>, default_service: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        match OtlpConfig::for_signal(get, Signal::Metrics, default_service)
            .and_then(|c| c.map(|c| build_metrics(&c).map(|p| (c, p))).transpose())
        {
            Ok(Some((c, provider))) => {
                let _ = METRICS.set(provider);
                METRICS_ON.store(true, Ordering::Relaxed);
                note(true, exported_to(&c));
                if let Err(e) = push::install(&c) {
                    note(false, format!("guests' metrics (wasi:otel) are off: {e:#}"));
                }
            }
            Ok(None) => {}
            Err(e) => note(false, format!("OpenTelemetry metrics are off: {e:#}")),
        }
        match OtlpConfig::for_signal(get, Signal::Logs, default_service)
            .and_then(|c| c.map(|c| build_logs(&c).map(|p| (c, p))).transpose())
        {
            Ok(Some((c, provider))) => {
                let logger = provider.logger("spin");
                let _ = LOGS.set((provider, logger));
                LOGS_ON.store(true, Ordering::Relaxed);
                note(true, exported_to(&c));
            }
            Ok(None) => {}
            Err(e) => note(false, format!("OpenTelemetry logs are off: {e:#}")),
        }
        LOG_TO_TRACING.store(
            get(container::DISABLE_LOG_TO_TRACING).is_none_or(|v| v.is_empty()),
            Ordering::Relaxed,
        );
    });
}

/// Spin's `SPIN_DISABLE_LOG_TO_TRACING`: unless set, app output also becomes span events.
static LOG_TO_TRACING: AtomicBool = AtomicBool::new(true);

/// Exporter calls made from the SDK's own threads run with the export runtime entered.
#[derive(Debug)]
struct OnHandle<E> {
    inner: E,
    handle: tokio::runtime::Handle,
}

impl<E: opentelemetry_sdk::metrics::exporter::PushMetricExporter>
    opentelemetry_sdk::metrics::exporter::PushMetricExporter for OnHandle<E>
{
    async fn export(
        &self,
        metrics: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> OTelSdkResult {
        Entered {
            handle: self.handle.clone(),
            fut: self.inner.export(metrics),
        }
        .await
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        self.inner.temporality()
    }
}

impl<E: opentelemetry_sdk::logs::LogExporter> opentelemetry_sdk::logs::LogExporter for OnHandle<E> {
    async fn export(&self, batch: opentelemetry_sdk::logs::LogBatch<'_>) -> OTelSdkResult {
        Entered {
            handle: self.handle.clone(),
            fut: self.inner.export(batch),
        }
        .await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

/// A counter of the process's meter, made on first use.
fn counter(
    cell: &'static OnceLock<Counter<u64>>,
    name: &'static str,
) -> Option<&'static Counter<u64>> {
    let provider = METRICS.get()?;
    Some(cell.get_or_init(|| provider.meter("spin").u64_counter(name).build()))
}

/// Counts one request or event handled by a trigger, as Spin's `spin.request_count`
/// (attributes `trigger_type`, `app_id`, `component_id`). Does nothing when metrics are off.
pub fn count_request(trigger_type: &'static str, app_id: &str, component_id: &str) {
    static C: OnceLock<Counter<u64>> = OnceLock::new();
    if !metrics_enabled() {
        return;
    }
    if let Some(c) = counter(&C, "spin.request_count") {
        c.add(
            1,
            &[
                KeyValue::new("trigger_type", trigger_type),
                KeyValue::new("app_id", app_id.to_string()),
                KeyValue::new("component_id", component_id.to_string()),
            ],
        );
    }
}

/// Counts one LLM inference, as Spin's `spin.llm_infer` (attribute `model_name`). Does
/// nothing when metrics are off.
pub fn count_llm_infer(model_name: &str) {
    static C: OnceLock<Counter<u64>> = OnceLock::new();
    if !metrics_enabled() {
        return;
    }
    if let Some(c) = counter(&C, "spin.llm_infer") {
        c.add(1, &[KeyValue::new("model_name", model_name.to_string())]);
    }
}

/// Bucket bounds of `spin.component_cpu_time` (seconds: 0.1 ms to 10 s).
pub const CPU_TIME_BOUNDS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Bucket bounds of the memory histograms (bytes: 64 KiB to 4 GiB, by fours).
pub const MEMORY_BOUNDS: [f64; 9] = [
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
];

/// Records what one component instance used, when it ends, as Spin 3.6's executor does on
/// dropping an instance: the histograms `spin.component_cpu_time` (seconds),
/// `spin.component_memory_used_on_init` and `spin.component_memory_used` (bytes), each with
/// the attributes `component_id` and `unit` (`s` or `By`), Spin's names and attributes.
/// `cpu_seconds` is `None` when the instance's CPU time was not measured; `memory` (on init,
/// at the end) is `None` for an observation of CPU time alone (one request of an instance
/// that serves many). Does nothing when metrics are off.
pub fn record_component_usage(
    component_id: &str,
    cpu_seconds: Option<f64>,
    memory: Option<(u64, u64)>,
) {
    struct Usage {
        cpu: Histogram<f64>,
        on_init: Histogram<u64>,
        used: Histogram<u64>,
    }
    static H: OnceLock<Usage> = OnceLock::new();
    if !metrics_enabled() {
        return;
    }
    let Some(provider) = METRICS.get() else {
        return;
    };
    let h = H.get_or_init(|| {
        let meter = provider.meter("spin");
        let bytes = |name: &'static str| {
            meter
                .u64_histogram(name)
                .with_boundaries(MEMORY_BOUNDS.to_vec())
                .build()
        };
        Usage {
            cpu: meter
                .f64_histogram("spin.component_cpu_time")
                .with_boundaries(CPU_TIME_BOUNDS.to_vec())
                .build(),
            on_init: bytes("spin.component_memory_used_on_init"),
            used: bytes("spin.component_memory_used"),
        }
    });
    let id = KeyValue::new("component_id", component_id.to_string());
    let seconds = [id.clone(), KeyValue::new("unit", "s")];
    let bytes = [id, KeyValue::new("unit", "By")];
    if let Some(cpu) = cpu_seconds {
        h.cpu.record(cpu, &seconds);
    }
    if let Some((on_init, used)) = memory {
        h.on_init.record(on_init, &bytes);
        h.used.record(used, &bytes);
    }
}

/// The first 50 bytes of non-UTF-8 output, escaped (as Spin exports it).
fn escape_non_utf8(buf: &[u8]) -> String {
    buf.iter()
        .take(50)
        .map(|&b| std::ascii::escape_default(b).to_string())
        .collect()
}

/// One write of an app's standard output or error, as Spin's `handle_app_log`: a log record
/// with the text and `component_id` when logs are exported, and (unless
/// `SPIN_DISABLE_LOG_TO_TRACING`) an event on the current span when traces are. Cheap when
/// both are off.
pub fn app_log(buf: &[u8], component_id: &str) {
    let text = std::str::from_utf8(buf);
    if logs_enabled() {
        if let Some((_, logger)) = LOGS.get() {
            let mut record = logger.create_log_record();
            match text {
                Ok(s) => record.set_body(s.to_string().into()),
                Err(_) => {
                    record.set_body(escape_non_utf8(buf).into());
                    record.add_attribute("app_log_non_utf8", true);
                }
            }
            record.add_attribute("component_id", component_id.to_string());
            logger.emit(record);
        }
    }
    if enabled() && LOG_TO_TRACING.load(Ordering::Relaxed) {
        match text {
            Ok(s) => tracing::info!(target: APP_LOG_TARGET, app_log = s),
            Err(_) => {
                tracing::info!(target: APP_LOG_TARGET, app_log_non_utf8 = escape_non_utf8(buf))
            }
        }
    }
}

/// Flushes and stops the exporters (at process end; spans still open are lost).
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        if let Err(e) = p.shutdown() {
            eprintln!("OpenTelemetry: flushing spans at exit failed: {e}");
        }
    }
    if let Some(p) = METRICS.get() {
        if let Err(e) = p.shutdown() {
            eprintln!("OpenTelemetry: flushing metrics at exit failed: {e}");
        }
    }
    if let Some((p, _)) = LOGS.get() {
        if let Err(e) = p.shutdown() {
            eprintln!("OpenTelemetry: flushing logs at exit failed: {e}");
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(k, v);
        }
    }
}

/// Makes `span` a child of the W3C `traceparent` (and `tracestate`) in `headers`, if any.
pub fn set_parent_from(span: &tracing::Span, headers: &http::HeaderMap) {
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(cx);
}

/// Request metadata of a ttrpc call (containerd's Task API), read as W3C trace context:
/// keys case-insensitively, the first value of each.
struct MetadataExtractor<'a>(&'a std::collections::HashMap<String, Vec<String>>);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .and_then(|(_, v)| v.first())
            .map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Makes `span` (not yet entered) a child of the `traceparent` (and `tracestate`) in a ttrpc
/// call's metadata, which containerd 2.x sends its shims when its own tracing is on; a call
/// without one leaves `span` a root.
pub fn set_parent_from_metadata(
    span: &tracing::Span,
    metadata: &std::collections::HashMap<String, Vec<String>>,
) {
    let cx = TraceContextPropagator::new().extract(&MetadataExtractor(metadata));
    let _ = span.set_parent(cx);
}

/// `span`'s context, for [`set_parent_context`].
pub fn context_of(span: &tracing::Span) -> ParentContext {
    ParentContext(span.context())
}

/// Makes `span` (not yet entered) a child of the span `parent` was taken from.
pub fn set_parent_context(span: &tracing::Span, parent: &ParentContext) {
    let _ = span.set_parent(parent.0.clone());
}

/// Writes `span`'s context into `headers` as W3C `traceparent`/`tracestate`.
pub fn inject_into(span: &tracing::Span, headers: &mut http::HeaderMap) {
    let cx = span.context();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
}

/// Marks `span` as failed with `message`.
pub fn set_error(span: &tracing::Span, message: impl Into<Cow<'static, str>>) {
    span.set_status(opentelemetry::trace::Status::error(message));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_call_names() {
        assert_eq!(bare_function("[method]store.get"), "store.get");
        assert_eq!(bare_function("get"), "get");
    }

    #[test]
    fn ttrpc_metadata_is_read_as_trace_context() {
        let mut md = std::collections::HashMap::new();
        md.insert(
            "Traceparent".to_string(),
            vec!["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string()],
        );
        let x = MetadataExtractor(&md);
        assert_eq!(
            x.get("traceparent"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(x.get("tracestate"), None);
        let cx = TraceContextPropagator::new().extract(&x);
        use opentelemetry::trace::TraceContextExt as _;
        assert_eq!(
            format!("{:032x}", cx.span().span_context().trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }

    #[test]
    fn non_utf8_output_is_escaped_and_capped() {
        assert_eq!(escape_non_utf8(b"a\xff\n"), "a\\xff\\n");
        assert_eq!(escape_non_utf8(&[0xffu8; 80]).len(), 50 * 4);
    }
}
