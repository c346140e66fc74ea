//! OpenTelemetry trace export for the shim and the Spin runtime, configured as Spin and the
//! OpenTelemetry SDKs are: from `OTEL_EXPORTER_OTLP_*` (what spin-operator injects).
//!
//! - Traces are on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//!   set and not empty, unless `OTEL_SDK_DISABLED=true`. Off, nothing is installed: no layer, no
//!   thread, and the request path only checks [`enabled`].
//! - Protocol from `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else
//!   `http/protobuf` (Spin's default): `grpc` or `http/protobuf`; `http/json` is refused.
//! - Endpoint: the traces variable as given; else the base endpoint, with `/v1/traces` appended
//!   for HTTP. Headers from `OTEL_EXPORTER_OTLP_HEADERS` and `..._TRACES_HEADERS`
//!   (`k=v,k2=v2`, percent-decoded). `service.name` from `OTEL_SERVICE_NAME`, else
//!   `OTEL_RESOURCE_ATTRIBUTES`, else the caller's default; `OTEL_BSP_SCHEDULE_DELAY` (ms) sets
//!   the batch delay (default 5000). `SPIN_OTEL_TRACING_LEVEL` (default `info`) filters spans.
//! - Export runs on a one-thread tokio runtime of its own, so callers need no runtime and
//!   the request path never waits for the collector.
//! - Spans named [`HOST_CALL_SPAN`] (wasmtime's `bindgen!` `tracing` spans of host imports)
//!   are exported as client spans named `<interface>/<function>`; their call and return
//!   events, which carry arguments and results (secrets, for variables), are never exported.
#![warn(missing_docs)]

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context as _};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Name of the spans wasmtime's `bindgen!` opens around a host import when the import has
/// the `tracing` flag (fields `module` and `function`).
pub const HOST_CALL_SPAN: &str = "wit-bindgen import";

static ENABLED: AtomicBool = AtomicBool::new(false);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether a trace exporter is installed in this process (cheap; for the request path).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (`grpc`).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`).
    HttpProtobuf,
}

/// What the `OTEL_*` variables ask of the trace exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// Where spans are sent (for HTTP the full `/v1/traces` URL).
    pub endpoint: String,
    /// The transport.
    pub protocol: Protocol,
    /// Extra request headers (metadata for gRPC).
    pub headers: Vec<(String, String)>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Other resource attributes from `OTEL_RESOURCE_ATTRIBUTES`.
    pub resource: Vec<(String, String)>,
    /// Batch span processor delay.
    pub schedule_delay: Duration,
    /// Span filter (an `EnvFilter` directive string).
    pub level: String,
}

fn non_empty(get: &dyn Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    get(key).filter(|v| !v.trim().is_empty())
}

/// `k=v,k2=v2` with percent-encoded values (the OTel SDK environment format).
fn key_values(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), percent_decode(v.trim())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl OtlpConfig {
    /// Reads the configuration through `get` (a variable lookup). `Ok(None)`: traces are off.
    /// Errors name the variable and the accepted values.
    pub fn from_lookup(
        get: &dyn Fn(&str) -> Option<String>,
        default_service: &str,
    ) -> anyhow::Result<Option<OtlpConfig>> {
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let signal = non_empty(get, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let base = non_empty(get, "OTEL_EXPORTER_OTLP_ENDPOINT");
        if signal.is_none() && base.is_none() {
            return Ok(None);
        }
        let (var, protocol) = match non_empty(get, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
            Some(p) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p),
            None => (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                non_empty(get, "OTEL_EXPORTER_OTLP_PROTOCOL")
                    .unwrap_or_else(|| "http/protobuf".into()),
            ),
        };
        let protocol = match protocol.trim() {
            "grpc" => Protocol::Grpc,
            "http/protobuf" => Protocol::HttpProtobuf,
            other => bail!(
                "{var}={other:?} is not supported: use `grpc` or `http/protobuf` (`http/json` is \
                 not implemented)"
            ),
        };
        let endpoint = match (signal, protocol) {
            (Some(e), _) => e,
            (None, Protocol::Grpc) => base.unwrap_or_default(),
            (None, Protocol::HttpProtobuf) => {
                format!(
                    "{}/v1/traces",
                    base.unwrap_or_default().trim_end_matches('/')
                )
            }
        };
        let endpoint = endpoint.trim().to_string();
        let uri: http::Uri = endpoint.parse().with_context(|| {
            format!("OTLP traces endpoint {endpoint:?} is not a URL (e.g. http://collector:4318)")
        })?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => bail!(
                "OTLP traces endpoint {endpoint:?}: https is not supported by this build; use a \
                 plain-HTTP collector endpoint (e.g. a node-local collector) "
            ),
            _ => bail!("OTLP traces endpoint {endpoint:?} must start with http://"),
        }
        let mut headers = Vec::new();
        for var in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(v) = non_empty(get, var) {
                for (k, v) in key_values(&v) {
                    headers.retain(|(h, _): &(String, String)| !h.eq_ignore_ascii_case(&k));
                    headers.push((k, v));
                }
            }
        }
        let mut resource = non_empty(get, "OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| key_values(&v))
            .unwrap_or_default();
        let from_attrs = resource
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| resource.remove(i).1);
        let service_name = non_empty(get, "OTEL_SERVICE_NAME")
            .or(from_attrs)
            .unwrap_or_else(|| default_service.to_string());
        let schedule_delay = match non_empty(get, "OTEL_BSP_SCHEDULE_DELAY") {
            None => Duration::from_millis(5000),
            Some(v) => Duration::from_millis(v.trim().parse().with_context(|| {
                format!("OTEL_BSP_SCHEDULE_DELAY={v:?} is not a number of milliseconds")
            })?),
        };
        let level = non_empty(get, "SPIN_OTEL_TRACING_LEVEL").unwrap_or_else(|| "info".to_string());
        Ok(Some(OtlpConfig {
            endpoint,
            protocol,
            headers,
            service_name,
            resource,
            schedule_delay,
            level,
        }))
    }
}

/// The exporter's own runtime: tonic and hyper need a reactor, and the SDK's batch thread
/// has none.
fn export_runtime() -> anyhow::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otel-export")
        .enable_all()
        .build()
        .context("cannot start the OpenTelemetry export runtime")?;
    Ok(RT.get_or_init(|| rt))
}

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

impl<P: SpanProcessor> SpanProcessor for HostCallNames<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx)
    }

    fn on_end(&self, mut span: SpanData) {
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

fn build_exporter(
    config: &OtlpConfig,
    handle: &tokio::runtime::Handle,
) -> anyhow::Result<OnRuntime<opentelemetry_otlp::SpanExporter>> {
    let _guard = handle.enter();
    let exporter = match config.protocol {
        Protocol::Grpc => {
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (k, v) in &config.headers {
                let key =
                    tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                        .with_context(|| {
                            format!("OTLP header name {k:?} is not valid gRPC metadata")
                        })?;
                let value = v
                    .parse()
                    .with_context(|| format!("OTLP header {k:?} has a value that is not ASCII"))?;
                metadata.insert(key, value);
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(&config.endpoint)
                .with_metadata(metadata)
                .build()?
        }
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(&config.endpoint)
            .with_headers(config.headers.iter().cloned().collect())
            .build()?,
    };
    Ok(OnRuntime {
        inner: Arc::new(exporter),
        handle: handle.clone(),
    })
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
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(config.schedule_delay)
                .build(),
        )
        .build();
    let mut attributes = vec![KeyValue::new("service.name", config.service_name.clone())];
    attributes.extend(
        config
            .resource
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );
    let provider = SdkTracerProvider::builder()
        .with_span_processor(HostCallNames(batch))
        .with_resource(
            Resource::builder_empty()
                .with_attributes(attributes)
                .build(),
        )
        .build();
    if PROVIDER.set(provider.clone()).is_err() {
        bail!("the OpenTelemetry exporter is already installed in this process");
    }
    let tracer = provider.tracer("containerd-shim-spin-v2");
    let mut directives = format!("{},{HOST_CALL_TARGETS}=trace", config.level);
    for t in trace_targets {
        directives.push_str(&format!(",{t}=trace"));
    }
    let filter = EnvFilter::try_new(directives).with_context(|| {
        format!(
            "SPIN_OTEL_TRACING_LEVEL={:?} is not a tracing filter (e.g. `info`)",
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
/// off. A bad configuration is reported by [`decision`] (naming the variable) and leaves
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
            PENDING_LOG.get_or_init(|| {
                format!(
                    "OpenTelemetry traces are exported to {} ({:?}) as service {:?}",
                    c.endpoint, c.protocol, c.service_name
                )
            });
            Some(l)
        }
        Ok(None) => None,
        Err(e) => {
            PENDING_LOG.get_or_init(|| format!("OpenTelemetry traces are off: {e:#}"));
            None
        }
    }
}

/// What [`layer_from_env`] decided, for [`decision`].
static PENDING_LOG: OnceLock<String> = OnceLock::new();

/// What [`layer_from_env`] decided when traces were asked for: `(true, where they go)` or
/// `(false, why they are off)`; `None` when no `OTEL_*` endpoint was set. Callers log it
/// once their subscriber is installed (info when on, warning when off).
pub fn decision() -> Option<(bool, &'static str)> {
    PENDING_LOG.get().map(|l| (enabled(), l.as_str()))
}

/// Flushes and stops the exporter (at process end; spans still open are lost).
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        if let Err(e) = p.shutdown() {
            eprintln!("OpenTelemetry: flushing spans at exit failed: {e}");
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
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> anyhow::Result<Option<OtlpConfig>> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OtlpConfig::from_lookup(&|k| m.get(k).cloned(), "spin")
    }

    #[test]
    fn off_without_endpoint_or_when_disabled() {
        assert_eq!(cfg(&[]).unwrap(), None);
        assert_eq!(cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap(), None);
        assert_eq!(
            cfg(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SDK_DISABLED", "true")
            ])
            .unwrap(),
            None
        );
    }

    #[test]
    fn endpoints_protocols_headers_and_resource() {
        let c = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://c:4318/v1/traces");
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.service_name, "spin");
        let c = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=x%20y"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "A=2"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=shop,k8s.pod.name=p",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://c:4317");
        assert_eq!(c.protocol, Protocol::Grpc);
        assert_eq!(
            c.headers,
            vec![("b".into(), "x y".into()), ("A".into(), "2".into())]
        );
        assert_eq!(c.service_name, "shop");
        assert_eq!(c.resource, vec![("k8s.pod.name".into(), "p".into())]);
        let c = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/x"),
            ("OTEL_SERVICE_NAME", "svc"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.service_name.as_str()),
            ("http://t:9/x", "svc")
        );
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{e}");
        let e = cfg(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")]).unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
        let e = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("OTEL_BSP_SCHEDULE_DELAY"), "{e}");
    }

    #[test]
    fn host_call_names() {
        assert_eq!(bare_function("[method]store.get"), "store.get");
        assert_eq!(bare_function("get"), "get");
        assert_eq!(percent_decode("a%2Cb%"), "a,b%");
    }
}
