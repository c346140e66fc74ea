//! `wasi:otel@0.2.0-rc.2` (Spin 3.6+'s guest telemetry, as `spin-factor-otel` implements
//! it): a guest's finished spans (`tracing.on-end`) and log records (`logs.on-emit`) are
//! exported by the runtime's OTLP exporters ([`otel_export::guest`]), in the same batches
//! as the runtime's spans; `tracing.outer-span-context` gives the guest the request's server
//! span, so that its spans join the request's trace. Each does nothing while its signal is
//! off. Between a guest span's `on-start` and `on-end`, the runtime's spans under the same
//! request span (host calls, outbound HTTP) are exported as its children, as in Spin.
//! `metrics.export` sends the guest's metrics, converted field for field to OTLP, to the
//! metrics endpoint and answers the collector's verdict (`ok` while metrics are off, as
//! Spin).
//!
//! Attribute values and log bodies are JSON, as the WIT defines them (byte strings as
//! `data:application/octet-stream;base64,...`); a value that is not JSON is kept as text.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use otel_export::opentelemetry as otel;
use otel_export::opentelemetry_sdk as sdk;
use wasmtime::component::{HasData, Linker};

use super::feature::HostFeature;
use super::HostView;

mod bindings {
    macro_rules! otel_bindgen {
        ($path:tt) => {
            wasmtime::component::bindgen!({
                path: $path,
                world: "spin-runtime:otel/otel",
                imports: { default: async | trappable },
                with: {
                    "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
                    "wasi:io": wasmtime_wasi::p2::bindings::io,
                },
            });
        };
    }
    include!(concat!(env!("OUT_DIR"), "/otel_bindings.rs"));
}

use bindings::wasi::otel::{logs, metrics, tracing as wtrace, types};
use wasmtime_wasi::p2::bindings::clocks::wall_clock::Datetime;

/// The interfaces this module links, for the check of a component's imports.
pub const INTERFACES: &[&str] = &[
    "wasi:otel/types@0.2.0-rc.2",
    "wasi:otel/tracing@0.2.0-rc.2",
    "wasi:otel/logs@0.2.0-rc.2",
    "wasi:otel/metrics@0.2.0-rc.2",
];

/// The guest-telemetry host feature: `wasi:otel@0.2.0-rc.2`. It has no runtime-config
/// section (the exporters are the runtime's, set up from the `OTEL_*` environment).
pub struct Otel;

/// What one component's instances export under: its id.
#[derive(Clone)]
pub struct ComponentOtel {
    component_id: Arc<str>,
}

impl HostFeature for Otel {
    const SECTIONS: &'static [&'static str] = &[];
    type Config = ();
    type App = ();
    type Instance = ComponentOtel;

    fn parse(_: &super::runtime_config::Source<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    fn build(_: &(), _: &super::feature::AppContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    fn instance(
        _: &(),
        cx: &super::feature::ComponentContext<'_>,
    ) -> anyhow::Result<ComponentOtel> {
        Ok(ComponentOtel {
            component_id: cx.component.id.as_str().into(),
        })
    }

    /// Links the interfaces on a view of the instance: besides the feature's state, the calls read
    /// the trace of the request the instance serves, which is the instance's, not the
    /// feature's (host-call and outbound spans take it as their parent too).
    fn add_to_linker<T: HostView>(
        linker: &mut Linker<T>,
        _: fn(&mut T) -> &mut ComponentOtel,
    ) -> anyhow::Result<()> {
        types::add_to_linker::<_, OtelData>(linker, view::<T>)?;
        wtrace::add_to_linker::<_, OtelData>(linker, view::<T>)?;
        logs::add_to_linker::<_, OtelData>(linker, view::<T>)?;
        metrics::add_to_linker::<_, OtelData>(linker, view::<T>)?;
        Ok(())
    }
}

/// What a `wasi:otel` call of one instance reads: the component's state and the trace
/// context of the request the instance serves.
struct OtelView<'a> {
    otel: &'a ComponentOtel,
    request_trace: Option<&'a otel_export::ParentContext>,
}

/// [`HasData`] of the `wasi:otel` bindings: their host is an `OtelView`.
struct OtelData;

impl HasData for OtelData {
    type Data<'a> = OtelView<'a>;
}

fn view<T: HostView>(data: &mut T) -> OtelView<'_> {
    let host = data.host();
    OtelView {
        otel: &host.features.otel,
        request_trace: host.request_trace.as_ref(),
    }
}

const BYTES_PREFIX: &str = "data:application/octet-stream;base64,";

fn time(d: Datetime) -> SystemTime {
    UNIX_EPOCH + Duration::new(d.seconds, d.nanoseconds.min(999_999_999))
}

/// An attribute value: the JSON scalar or homogeneous array the guest encoded, else its
/// text.
fn value(json: &str) -> otel::Value {
    use serde_json::Value as J;
    let Ok(parsed) = serde_json::from_str::<J>(json) else {
        return otel::Value::String(json.to_string().into());
    };
    let scalar = |v: &J| -> Option<otel::Value> {
        Some(match v {
            J::Bool(b) => otel::Value::Bool(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => otel::Value::I64(i),
                None => otel::Value::F64(n.as_f64()?),
            },
            J::String(s) => otel::Value::String(s.clone().into()),
            _ => return None,
        })
    };
    let array = |items: &[J]| -> Option<otel::Array> {
        Some(match items.first()? {
            J::Bool(_) => otel::Array::Bool(items.iter().map(J::as_bool).collect::<Option<_>>()?),
            J::Number(n) if n.is_i64() => {
                otel::Array::I64(items.iter().map(J::as_i64).collect::<Option<_>>()?)
            }
            J::Number(_) => otel::Array::F64(items.iter().map(J::as_f64).collect::<Option<_>>()?),
            J::String(_) => otel::Array::String(
                items
                    .iter()
                    .map(|i| i.as_str().map(|s| s.to_string().into()))
                    .collect::<Option<_>>()?,
            ),
            _ => return None,
        })
    };
    match &parsed {
        J::Array(items) => array(items).map(otel::Value::Array),
        other => scalar(other),
    }
    .unwrap_or_else(|| otel::Value::String(json.to_string().into()))
}

/// A log body: any JSON value, nested (objects become maps, byte strings bytes), else the
/// text.
fn any_value(json: &str) -> otel::logs::AnyValue {
    fn convert(v: serde_json::Value) -> otel::logs::AnyValue {
        use otel::logs::AnyValue as A;
        use serde_json::Value as J;
        match v {
            J::Null => A::String("null".into()),
            J::Bool(b) => A::Boolean(b),
            J::Number(n) => match n.as_i64() {
                Some(i) => A::Int(i),
                None => A::Double(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => match s
                .strip_prefix(BYTES_PREFIX)
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            {
                Some(bytes) => A::Bytes(Box::new(bytes)),
                None => A::String(s.into()),
            },
            J::Array(items) => A::ListAny(Box::new(items.into_iter().map(convert).collect())),
            J::Object(map) => A::Map(Box::new(
                map.into_iter()
                    .map(|(k, v)| (otel::Key::from(k), convert(v)))
                    .collect(),
            )),
        }
    }
    match serde_json::from_str(json) {
        Ok(v) => convert(v),
        Err(_) => otel::logs::AnyValue::String(json.to_string().into()),
    }
}

fn key_values(kvs: Vec<types::KeyValue>) -> Vec<otel::KeyValue> {
    kvs.into_iter()
        .map(|kv| otel::KeyValue::new(kv.key, value(&kv.value)))
        .collect()
}

fn scope(s: types::InstrumentationScope) -> otel::InstrumentationScope {
    let mut b =
        otel::InstrumentationScope::builder(s.name).with_attributes(key_values(s.attributes));
    if let Some(v) = s.version {
        b = b.with_version(v);
    }
    if let Some(u) = s.schema_url {
        b = b.with_schema_url(u);
    }
    b.build()
}

fn flags(f: wtrace::TraceFlags) -> otel::trace::TraceFlags {
    if f.contains(wtrace::TraceFlags::SAMPLED) {
        otel::trace::TraceFlags::SAMPLED
    } else {
        otel::trace::TraceFlags::default()
    }
}

/// The guest's span context; `None` when its ids are not the hex the WIT asks for.
fn span_context(sc: wtrace::SpanContext) -> Option<otel::trace::SpanContext> {
    let trace_id = otel::trace::TraceId::from_hex(&sc.trace_id).ok()?;
    let span_id = otel::trace::SpanId::from_hex(&sc.span_id).ok()?;
    let state = otel::trace::TraceState::from_key_value(sc.trace_state).unwrap_or_default();
    let sc = otel::trace::SpanContext::new(
        trace_id,
        span_id,
        flags(sc.trace_flags),
        sc.is_remote,
        state,
    );
    sc.is_valid().then_some(sc)
}

fn to_guest(sc: &otel::trace::SpanContext) -> wtrace::SpanContext {
    wtrace::SpanContext {
        trace_id: format!("{:032x}", sc.trace_id()),
        span_id: format!("{:016x}", sc.span_id()),
        trace_flags: if sc.trace_flags().is_sampled() {
            wtrace::TraceFlags::SAMPLED
        } else {
            wtrace::TraceFlags::empty()
        },
        is_remote: sc.is_remote(),
        trace_state: sc
            .trace_state()
            .header()
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn kind(k: wtrace::SpanKind) -> otel::trace::SpanKind {
    use otel::trace::SpanKind as K;
    match k {
        wtrace::SpanKind::Client => K::Client,
        wtrace::SpanKind::Server => K::Server,
        wtrace::SpanKind::Producer => K::Producer,
        wtrace::SpanKind::Consumer => K::Consumer,
        wtrace::SpanKind::Internal => K::Internal,
    }
}

/// The exported form of a span the guest ended; `None` when its context is not valid.
fn span_data(s: wtrace::SpanData) -> Option<sdk::trace::SpanData> {
    let context = span_context(s.span_context)?;
    let mut events = sdk::trace::SpanEvents::default();
    events.events = s
        .events
        .into_iter()
        .map(|e| otel::trace::Event::new(e.name, time(e.time), key_values(e.attributes), 0))
        .collect();
    events.dropped_count = s.dropped_events;
    let mut links = sdk::trace::SpanLinks::default();
    links.links = s
        .links
        .into_iter()
        .filter_map(|l| {
            Some(otel::trace::Link::new(
                span_context(l.span_context)?,
                key_values(l.attributes),
                0,
            ))
        })
        .collect();
    links.dropped_count = s.dropped_links;
    Some(sdk::trace::SpanData {
        span_context: context,
        parent_span_id: otel::trace::SpanId::from_hex(&s.parent_span_id)
            .unwrap_or(otel::trace::SpanId::INVALID),
        parent_span_is_remote: false,
        span_kind: kind(s.span_kind),
        name: Cow::Owned(s.name),
        start_time: time(s.start_time),
        end_time: time(s.end_time),
        attributes: key_values(s.attributes),
        dropped_attributes_count: s.dropped_attributes,
        events,
        links,
        status: match s.status {
            wtrace::Status::Unset => otel::trace::Status::Unset,
            wtrace::Status::Ok => otel::trace::Status::Ok,
            wtrace::Status::Error(d) => otel::trace::Status::error(d),
        },
        instrumentation_scope: scope(s.instrumentation_scope),
    })
}

impl types::Host for OtelView<'_> {}

impl wtrace::Host for OtelView<'_> {
    async fn on_start(&mut self, context: wtrace::SpanContext) -> wasmtime::Result<()> {
        if !otel_export::enabled() {
            return Ok(());
        }
        // The span itself is exported whole when the guest ends it; until then the runtime's
        // spans of this request go under it.
        if let Some(sc) = span_context(context) {
            otel_export::guest::span_started(self.request_trace, sc);
        }
        Ok(())
    }

    async fn on_end(&mut self, span: wtrace::SpanData) -> wasmtime::Result<()> {
        if !otel_export::enabled() {
            return Ok(());
        }
        if let Ok(id) = otel::trace::SpanId::from_hex(&span.span_context.span_id) {
            otel_export::guest::span_ended(id);
        }
        let name = span.name.clone();
        match span_data(span) {
            Some(data) => otel_export::guest::export_span(data),
            None => tracing::debug!(
                component = %self.otel.component_id,
                span = %name,
                "wasi:otel span dropped: its trace or span id is not the hex the WIT asks for"
            ),
        }
        Ok(())
    }

    async fn outer_span_context(&mut self) -> wasmtime::Result<wtrace::SpanContext> {
        Ok(to_guest(&otel_export::guest::outer_span_context(
            self.request_trace,
        )))
    }
}

impl logs::Host for OtelView<'_> {
    async fn on_emit(&mut self, data: logs::LogRecord) -> wasmtime::Result<()> {
        use otel::logs::LogRecord as _;
        if !otel_export::logs_enabled() {
            return Ok(());
        }
        let scope = data.instrumentation_scope.map(scope).unwrap_or_else(|| {
            otel::InstrumentationScope::builder(self.otel.component_id.to_string()).build()
        });
        let component = self.otel.component_id.to_string();
        otel_export::guest::emit_log(scope, move |r| {
            if let Some(t) = data.timestamp {
                r.set_timestamp(time(t));
            }
            r.set_observed_timestamp(data.observed_timestamp.map_or_else(SystemTime::now, time));
            let severity = data.severity_number.and_then(otel_export::guest::severity);
            if let Some(s) = severity {
                r.set_severity_number(s);
            }
            match data.severity_text.as_deref() {
                Some(text) => match otel_export::guest::severity_name(text) {
                    Some(name) => r.set_severity_text(name),
                    None => r.add_attribute("severity_text", text.to_string()),
                },
                None => {
                    if let Some(s) = severity {
                        r.set_severity_text(s.name());
                    }
                }
            }
            if let Some(body) = data.body {
                r.set_body(any_value(&body));
            }
            for kv in data.attributes.unwrap_or_default() {
                r.add_attribute(kv.key, any_value(&kv.value));
            }
            // The SDK keeps event names as `&'static str`: a guest's goes in an attribute.
            if let Some(name) = data.event_name {
                r.add_attribute("event.name", name);
            }
            r.add_attribute("component_id", component);
            if let (Some(t), Some(s)) = (data.trace_id, data.span_id) {
                if let (Ok(t), Ok(s)) = (
                    otel::trace::TraceId::from_hex(&t),
                    otel::trace::SpanId::from_hex(&s),
                ) {
                    r.set_trace_context(t, s, data.trace_flags.map(flags));
                }
            }
        });
        Ok(())
    }
}

impl metrics::Host for OtelView<'_> {
    async fn export(
        &mut self,
        data: metrics::ResourceMetrics,
    ) -> wasmtime::Result<Result<(), metrics::Error>> {
        if !otel_export::guest::metrics_enabled() {
            return Ok(Ok(()));
        }
        let request = proto::ExportMetricsServiceRequest {
            resource_metrics: vec![proto::resource_metrics(data)],
        };
        Ok(otel_export::guest::export_metrics(request)
            .await
            .map_err(|e| {
                tracing::warn!(component = %self.otel.component_id, "wasi:otel metrics: {e}");
                e
            }))
    }
}

/// `wasi:otel/metrics` records as OTLP protobuf messages, field for field.
mod proto {
    use otel_export::opentelemetry_proto::tonic::common::v1 as common;
    use otel_export::opentelemetry_proto::tonic::metrics::v1 as pm;
    use otel_export::opentelemetry_proto::tonic::resource::v1::Resource;

    pub use otel_export::opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

    use super::{metrics as wm, otel, types, Datetime};

    fn nanos(d: Datetime) -> u64 {
        d.seconds
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(d.nanoseconds.min(999_999_999)))
    }

    fn any(v: otel::Value) -> common::AnyValue {
        use common::any_value::Value as P;
        fn list<T>(items: Vec<T>, f: impl Fn(T) -> P) -> P {
            P::ArrayValue(common::ArrayValue {
                values: items
                    .into_iter()
                    .map(|i| common::AnyValue { value: Some(f(i)) })
                    .collect(),
            })
        }
        let value = match v {
            otel::Value::Bool(b) => P::BoolValue(b),
            otel::Value::I64(i) => P::IntValue(i),
            otel::Value::F64(f) => P::DoubleValue(f),
            otel::Value::String(s) => P::StringValue(s.to_string()),
            otel::Value::Array(otel::Array::Bool(v)) => list(v, P::BoolValue),
            otel::Value::Array(otel::Array::I64(v)) => list(v, P::IntValue),
            otel::Value::Array(otel::Array::F64(v)) => list(v, P::DoubleValue),
            otel::Value::Array(otel::Array::String(v)) => {
                list(v, |s| P::StringValue(s.to_string()))
            }
            other => P::StringValue(other.to_string()),
        };
        common::AnyValue { value: Some(value) }
    }

    fn attributes(kvs: Vec<types::KeyValue>) -> Vec<common::KeyValue> {
        kvs.into_iter()
            .map(|kv| common::KeyValue {
                value: Some(any(super::value(&kv.value))),
                key: kv.key,
                ..Default::default()
            })
            .collect()
    }

    fn scope(s: types::InstrumentationScope) -> common::InstrumentationScope {
        common::InstrumentationScope {
            name: s.name,
            version: s.version.unwrap_or_default(),
            attributes: attributes(s.attributes),
            dropped_attributes_count: 0,
        }
    }

    fn number(n: wm::MetricNumber) -> pm::number_data_point::Value {
        use pm::number_data_point::Value as V;
        match n {
            wm::MetricNumber::F64(f) => V::AsDouble(f),
            wm::MetricNumber::S64(i) => V::AsInt(i),
            wm::MetricNumber::U64(u) => i64::try_from(u).map_or(V::AsDouble(u as f64), V::AsInt),
        }
    }

    fn float(n: wm::MetricNumber) -> f64 {
        match n {
            wm::MetricNumber::F64(f) => f,
            wm::MetricNumber::S64(i) => i as f64,
            wm::MetricNumber::U64(u) => u as f64,
        }
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len() / 2)
            .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
            .collect()
    }

    fn exemplars(list: Vec<wm::Exemplar>) -> Vec<pm::Exemplar> {
        use pm::exemplar::Value as V;
        list.into_iter()
            .map(|e| pm::Exemplar {
                filtered_attributes: attributes(e.filtered_attributes),
                time_unix_nano: nanos(e.time),
                span_id: hex_bytes(&e.span_id),
                trace_id: hex_bytes(&e.trace_id),
                value: Some(match number(e.value) {
                    pm::number_data_point::Value::AsDouble(f) => V::AsDouble(f),
                    pm::number_data_point::Value::AsInt(i) => V::AsInt(i),
                }),
            })
            .collect()
    }

    /// OTLP knows cumulative and delta; the SDK's low-memory choice is delta for sums that
    /// only go up and for histograms, cumulative otherwise.
    fn temporality(t: wm::Temporality, monotonic_or_histogram: bool) -> i32 {
        let delta = match t {
            wm::Temporality::Delta => true,
            wm::Temporality::Cumulative => false,
            wm::Temporality::LowMemory => monotonic_or_histogram,
        };
        if delta {
            pm::AggregationTemporality::Delta as i32
        } else {
            pm::AggregationTemporality::Cumulative as i32
        }
    }

    /// Gauge and sum points: (attributes, value, exemplars) each.
    type NumberPoint = (Vec<types::KeyValue>, wm::MetricNumber, Vec<wm::Exemplar>);

    fn number_points(
        points: impl Iterator<Item = NumberPoint>,
        start: u64,
        time: u64,
    ) -> Vec<pm::NumberDataPoint> {
        points
            .map(|(attrs, value, ex)| pm::NumberDataPoint {
                attributes: attributes(attrs),
                start_time_unix_nano: start,
                time_unix_nano: time,
                exemplars: exemplars(ex),
                flags: 0,
                value: Some(number(value)),
            })
            .collect()
    }

    fn gauge(g: wm::Gauge) -> pm::metric::Data {
        let points = g
            .data_points
            .into_iter()
            .map(|p| (p.attributes, p.value, p.exemplars));
        pm::metric::Data::Gauge(pm::Gauge {
            data_points: number_points(points, g.start_time.map(nanos).unwrap_or(0), nanos(g.time)),
        })
    }

    fn sum(s: wm::Sum) -> pm::metric::Data {
        let points = s
            .data_points
            .into_iter()
            .map(|p| (p.attributes, p.value, p.exemplars));
        pm::metric::Data::Sum(pm::Sum {
            aggregation_temporality: temporality(s.temporality, s.is_monotonic),
            is_monotonic: s.is_monotonic,
            data_points: number_points(points, nanos(s.start_time), nanos(s.time)),
        })
    }

    fn histogram(h: wm::Histogram) -> pm::metric::Data {
        let (start, time) = (nanos(h.start_time), nanos(h.time));
        pm::metric::Data::Histogram(pm::Histogram {
            aggregation_temporality: temporality(h.temporality, true),
            data_points: h
                .data_points
                .into_iter()
                .map(|p| pm::HistogramDataPoint {
                    attributes: attributes(p.attributes),
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    count: p.count,
                    sum: Some(float(p.sum)),
                    bucket_counts: p.bucket_counts,
                    explicit_bounds: p.bounds,
                    exemplars: exemplars(p.exemplars),
                    flags: 0,
                    min: p.min.map(float),
                    max: p.max.map(float),
                })
                .collect(),
        })
    }

    fn exponential(h: wm::ExponentialHistogram) -> pm::metric::Data {
        use pm::exponential_histogram_data_point::Buckets;
        let (start, time) = (nanos(h.start_time), nanos(h.time));
        let buckets = |b: wm::ExponentialBucket| Buckets {
            offset: b.offset,
            bucket_counts: b.counts,
        };
        pm::metric::Data::ExponentialHistogram(pm::ExponentialHistogram {
            aggregation_temporality: temporality(h.temporality, true),
            data_points: h
                .data_points
                .into_iter()
                .map(|p| pm::ExponentialHistogramDataPoint {
                    attributes: attributes(p.attributes),
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    count: p.count,
                    sum: Some(float(p.sum)),
                    scale: i32::from(p.scale),
                    zero_count: p.zero_count,
                    positive: Some(buckets(p.positive_bucket)),
                    negative: Some(buckets(p.negative_bucket)),
                    flags: 0,
                    exemplars: exemplars(p.exemplars),
                    min: p.min.map(float),
                    max: p.max.map(float),
                    zero_threshold: p.zero_threshold,
                })
                .collect(),
        })
    }

    fn metric(m: wm::Metric) -> pm::Metric {
        use wm::MetricData as D;
        let data = match m.data {
            D::F64Gauge(g) | D::U64Gauge(g) | D::S64Gauge(g) => gauge(g),
            D::F64Sum(s) | D::U64Sum(s) | D::S64Sum(s) => sum(s),
            D::F64Histogram(h) | D::U64Histogram(h) | D::S64Histogram(h) => histogram(h),
            D::F64ExponentialHistogram(h)
            | D::U64ExponentialHistogram(h)
            | D::S64ExponentialHistogram(h) => exponential(h),
        };
        pm::Metric {
            name: m.name,
            description: m.description,
            unit: m.unit,
            metadata: Vec::new(),
            data: Some(data),
        }
    }

    /// The guest's resource metrics as one OTLP `ResourceMetrics`.
    pub fn resource_metrics(rm: wm::ResourceMetrics) -> pm::ResourceMetrics {
        pm::ResourceMetrics {
            resource: Some(Resource {
                attributes: attributes(rm.resource.attributes),
                ..Default::default()
            }),
            schema_url: rm.resource.schema_url.unwrap_or_default(),
            scope_metrics: rm
                .scope_metrics
                .into_iter()
                .map(|sm| pm::ScopeMetrics {
                    schema_url: sm.scope.schema_url.clone().unwrap_or_default(),
                    scope: Some(scope(sm.scope)),
                    metrics: sm.metrics.into_iter().map(metric).collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_values_are_json() {
        assert_eq!(value("\"bar\""), otel::Value::String("bar".into()));
        assert_eq!(value("7"), otel::Value::I64(7));
        assert_eq!(value("1.5"), otel::Value::F64(1.5));
        assert_eq!(value("true"), otel::Value::Bool(true));
        assert_eq!(
            value("[\"a\",\"b\"]"),
            otel::Value::Array(otel::Array::String(vec!["a".into(), "b".into()]))
        );
        // Not JSON, or a mixed array: kept as text.
        assert_eq!(value("plain"), otel::Value::String("plain".into()));
        assert_eq!(value("[1,\"x\"]"), otel::Value::String("[1,\"x\"]".into()));
    }

    #[test]
    fn log_bodies_nest_and_decode_bytes() {
        use otel::logs::AnyValue as A;
        let body = any_value(&format!(
            "{{\"k\":[1,\"{BYTES_PREFIX}{}\"]}}",
            base64::engine::general_purpose::STANDARD.encode(b"hi")
        ));
        let A::Map(m) = body else { panic!("{body:?}") };
        assert_eq!(
            m.get(&otel::Key::from("k")),
            Some(&A::ListAny(Box::new(vec![
                A::Int(1),
                A::Bytes(Box::new(b"hi".to_vec()))
            ])))
        );
    }

    #[test]
    fn guest_metrics_become_otlp() {
        use proto::resource_metrics;
        let at = Datetime {
            seconds: 2,
            nanoseconds: 5,
        };
        let sum = metrics::Metric {
            name: "n".into(),
            description: String::new(),
            unit: "1".into(),
            data: metrics::MetricData::U64Sum(metrics::Sum {
                data_points: vec![metrics::SumDataPoint {
                    attributes: vec![types::KeyValue {
                        key: "k".into(),
                        value: "\"v\"".into(),
                    }],
                    value: metrics::MetricNumber::U64(u64::MAX),
                    exemplars: Vec::new(),
                }],
                start_time: at,
                time: at,
                temporality: metrics::Temporality::LowMemory,
                is_monotonic: true,
            }),
        };
        let rm = resource_metrics(metrics::ResourceMetrics {
            resource: types::Resource {
                attributes: Vec::new(),
                schema_url: None,
            },
            scope_metrics: vec![metrics::ScopeMetrics {
                scope: types::InstrumentationScope {
                    name: "s".into(),
                    version: None,
                    schema_url: None,
                    attributes: Vec::new(),
                },
                metrics: vec![sum],
            }],
        });
        let m = &rm.scope_metrics[0].metrics[0];
        use otel_export::opentelemetry_proto::tonic::metrics::v1 as pm;
        let Some(pm::metric::Data::Sum(s)) = &m.data else {
            panic!("{m:?}")
        };
        // Low-memory temporality is delta for a monotonic sum; a u64 past i64 is a double.
        assert_eq!(
            s.aggregation_temporality,
            pm::AggregationTemporality::Delta as i32
        );
        let p = &s.data_points[0];
        assert_eq!(p.time_unix_nano, 2_000_000_005);
        assert_eq!(
            p.value,
            Some(pm::number_data_point::Value::AsDouble(u64::MAX as f64))
        );
        assert_eq!(p.attributes[0].key, "k");
        assert_eq!(rm.scope_metrics[0].scope.as_ref().unwrap().name, "s");
    }

    #[test]
    fn span_contexts_round_trip_and_bad_ids_are_refused() {
        let guest = wtrace::SpanContext {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: "00f067aa0ba902b7".into(),
            trace_flags: wtrace::TraceFlags::SAMPLED,
            is_remote: true,
            trace_state: vec![("k".into(), "v".into())],
        };
        let sc = span_context(guest.clone()).unwrap();
        let back = to_guest(&sc);
        assert_eq!(back.trace_id, guest.trace_id);
        assert_eq!(back.span_id, guest.span_id);
        assert_eq!(back.trace_state, guest.trace_state);
        assert!(back.trace_flags.contains(wtrace::TraceFlags::SAMPLED));
        let bad = wtrace::SpanContext {
            trace_id: "not-hex".into(),
            ..guest
        };
        assert!(span_context(bad).is_none());
    }
}
