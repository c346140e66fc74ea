//! Guest telemetry through `wasi:otel@0.2.0-rc.2`, as an OpenTelemetry SDK in a guest drives
//! it: `GET /otel` asks the host for the outer span context, starts a span `guest-work`
//! under it (a span id derived from the clock and the request's trace id), emits one log
//! record ("guest log line", INFO) inside that span, reads key `guest-otel-key` of the
//! default key-value store inside that span (a host call the host should put under it),
//! and ends the span with an attribute, an event and status ok. Then it exports one
//! cumulative counter `guest.requests` (value 1, attribute `guest.attr`) through
//! `wasi:otel/metrics`. The response body is `trace=<id> parent=<id> span=<id>`, then
//! `kv=<ok|error: ..>` and `metrics=<ok|error: ..>` lines.
//!
//! The WIT below is that of spin-sdk 6.0's `wit/deps/otel@0.2.0-rc.2` (types, tracing,
//! logs, metrics; the same records field for field, documentation and metrics' unused
//! `use` of `duration` left out) and
//! `wasi:clocks/wall-clock@0.2.0`, which spin-sdk's own WIT has too (so it must be whole).

wit_bindgen::generate!({
    inline: r#"
        package test:otel-guest;

        package wasi:clocks@0.2.0 {
            interface wall-clock {
                record datetime { seconds: u64, nanoseconds: u32 }
                now: func() -> datetime;
                resolution: func() -> datetime;
            }
        }

        package wasi:otel@0.2.0-rc.2 {
            interface types {
                record key-value { key: key, value: value }
                type key = string;
                type value = string;
                record %resource { attributes: list<key-value>, schema-url: option<string> }
                record instrumentation-scope {
                    name: string,
                    version: option<string>,
                    schema-url: option<string>,
                    attributes: list<key-value>,
                }
            }

            interface tracing {
                use wasi:clocks/wall-clock@0.2.0.{datetime};
                use types.{key-value, instrumentation-scope};
                on-start: func(context: span-context);
                on-end: func(span: span-data);
                outer-span-context: func() -> span-context;
                record span-data {
                    span-context: span-context,
                    parent-span-id: string,
                    span-kind: span-kind,
                    name: string,
                    start-time: datetime,
                    end-time: datetime,
                    attributes: list<key-value>,
                    events: list<event>,
                    links: list<link>,
                    status: status,
                    instrumentation-scope: instrumentation-scope,
                    dropped-attributes: u32,
                    dropped-events: u32,
                    dropped-links: u32,
                }
                record span-context {
                    trace-id: trace-id,
                    span-id: span-id,
                    trace-flags: trace-flags,
                    is-remote: bool,
                    trace-state: trace-state,
                }
                type trace-id = string;
                type span-id = string;
                flags trace-flags { sampled }
                type trace-state = list<tuple<string, string>>;
                enum span-kind { client, server, producer, consumer, internal }
                record event { name: string, time: datetime, attributes: list<key-value> }
                record link { span-context: span-context, attributes: list<key-value> }
                variant status { unset, ok, error(string) }
            }

            interface logs {
                use types.{instrumentation-scope, %resource, value, key-value};
                use tracing.{span-id, trace-id, trace-flags};
                use wasi:clocks/wall-clock@0.2.0.{datetime};
                on-emit: func(data: log-record);
                record log-record {
                    timestamp: option<datetime>,
                    observed-timestamp: option<datetime>,
                    severity-text: option<string>,
                    severity-number: option<u8>,
                    body: option<value>,
                    attributes: option<list<key-value>>,
                    event-name: option<string>,
                    %resource: option<%resource>,
                    instrumentation-scope: option<instrumentation-scope>,
                    trace-id: option<trace-id>,
                    span-id: option<span-id>,
                    trace-flags: option<trace-flags>,
                }
            }

            interface metrics {
                use wasi:clocks/wall-clock@0.2.0.{datetime};
                use types.{key-value, instrumentation-scope, %resource};
                use tracing.{span-id, trace-id};
                %export: func(metrics: resource-metrics) -> result<_, error>;
                type error = string;
                record resource-metrics { %resource: %resource, scope-metrics: list<scope-metrics> }
                record scope-metrics { scope: instrumentation-scope, metrics: list<metric> }
                record metric { name: string, description: string, unit: string, data: metric-data }
                variant metric-data {
                    f64-gauge(gauge),
                    f64-sum(sum),
                    f64-histogram(histogram),
                    f64-exponential-histogram(exponential-histogram),
                    u64-gauge(gauge),
                    u64-sum(sum),
                    u64-histogram(histogram),
                    u64-exponential-histogram(exponential-histogram),
                    s64-gauge(gauge),
                    s64-sum(sum),
                    s64-histogram(histogram),
                    s64-exponential-histogram(exponential-histogram),
                }
                record gauge {
                    data-points: list<gauge-data-point>,
                    start-time: option<datetime>,
                    time: datetime,
                }
                record gauge-data-point {
                    attributes: list<key-value>,
                    value: metric-number,
                    exemplars: list<exemplar>,
                }
                record sum {
                    data-points: list<sum-data-point>,
                    start-time: datetime,
                    time: datetime,
                    temporality: temporality,
                    is-monotonic: bool,
                }
                record sum-data-point {
                    attributes: list<key-value>,
                    value: metric-number,
                    exemplars: list<exemplar>,
                }
                record histogram {
                    data-points: list<histogram-data-point>,
                    start-time: datetime,
                    time: datetime,
                    temporality: temporality,
                }
                record histogram-data-point {
                    attributes: list<key-value>,
                    count: u64,
                    bounds: list<f64>,
                    bucket-counts: list<u64>,
                    min: option<metric-number>,
                    max: option<metric-number>,
                    sum: metric-number,
                    exemplars: list<exemplar>,
                }
                record exponential-histogram {
                    data-points: list<exponential-histogram-data-point>,
                    start-time: datetime,
                    time: datetime,
                    temporality: temporality,
                }
                record exponential-histogram-data-point {
                    attributes: list<key-value>,
                    count: u64,
                    min: option<metric-number>,
                    max: option<metric-number>,
                    sum: metric-number,
                    scale: s8,
                    zero-count: u64,
                    positive-bucket: exponential-bucket,
                    negative-bucket: exponential-bucket,
                    zero-threshold: f64,
                    exemplars: list<exemplar>,
                }
                record exponential-bucket { offset: s32, counts: list<u64> }
                record exemplar {
                    filtered-attributes: list<key-value>,
                    time: datetime,
                    value: metric-number,
                    span-id: span-id,
                    trace-id: trace-id,
                }
                enum temporality { cumulative, delta, low-memory }
                variant metric-number { %f64(f64), %s64(s64), %u64(u64) }
            }
        }

        world guest {
            import wasi:otel/tracing@0.2.0-rc.2;
            import wasi:otel/logs@0.2.0-rc.2;
            import wasi:otel/metrics@0.2.0-rc.2;
        }
    "#,
    world: "guest",
    generate_all,
});

use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;
use wasi::clocks::wall_clock::Datetime;
use wasi::otel::{logs, metrics, tracing, types};

fn now() -> Datetime {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Datetime {
        seconds: d.as_secs(),
        nanoseconds: d.subsec_nanos(),
    }
}

fn kv(key: &str, json: &str) -> types::KeyValue {
    types::KeyValue {
        key: key.to_string(),
        value: json.to_string(),
    }
}

fn scope() -> types::InstrumentationScope {
    types::InstrumentationScope {
        name: "spin-otel-guest".into(),
        version: Some("0.1.0".into()),
        schema_url: None,
        attributes: Vec::new(),
    }
}

#[http_component]
fn handle(_req: Request) -> anyhow::Result<impl IntoResponse> {
    let outer = tracing::outer_span_context();
    let start = now();
    let seed = u64::from(start.nanoseconds) ^ (start.seconds << 20) ^ 0x9e37_79b9_7f4a_7c15;
    let span_id = format!("{:016x}", seed | 1);
    let context = tracing::SpanContext {
        trace_id: outer.trace_id.clone(),
        span_id: span_id.clone(),
        trace_flags: tracing::TraceFlags::SAMPLED,
        is_remote: false,
        trace_state: outer.trace_state.clone(),
    };
    tracing::on_start(&context);
    logs::on_emit(&logs::LogRecord {
        timestamp: Some(now()),
        observed_timestamp: None,
        severity_text: Some("INFO".into()),
        severity_number: Some(9),
        body: Some("\"guest log line\"".into()),
        attributes: Some(vec![kv("guest.log_attr", "42")]),
        event_name: None,
        resource: None,
        instrumentation_scope: Some(scope()),
        trace_id: Some(outer.trace_id.clone()),
        span_id: Some(span_id.clone()),
        trace_flags: Some(tracing::TraceFlags::SAMPLED),
    });
    let kv_read = spin_sdk::key_value::Store::open_default()
        .and_then(|store| store.get("guest-otel-key"))
        .map_or_else(|e| format!("error: {e}"), |_| "ok".to_string());
    tracing::on_end(&tracing::SpanData {
        span_context: context,
        parent_span_id: outer.span_id.clone(),
        span_kind: tracing::SpanKind::Internal,
        name: "guest-work".into(),
        start_time: start,
        end_time: now(),
        attributes: vec![kv("guest.attr", "\"yes\""), kv("guest.count", "3")],
        events: vec![tracing::Event {
            name: "guest-event".into(),
            time: now(),
            attributes: Vec::new(),
        }],
        links: Vec::new(),
        status: tracing::Status::Ok,
        instrumentation_scope: scope(),
        dropped_attributes: 0,
        dropped_events: 0,
        dropped_links: 0,
    });
    let exported = metrics::export(&metrics::ResourceMetrics {
        resource: types::Resource {
            attributes: Vec::new(),
            schema_url: None,
        },
        scope_metrics: vec![metrics::ScopeMetrics {
            scope: scope(),
            metrics: vec![metrics::Metric {
                name: "guest.requests".into(),
                description: "requests the guest counted".into(),
                unit: "{request}".into(),
                data: metrics::MetricData::U64Sum(metrics::Sum {
                    data_points: vec![metrics::SumDataPoint {
                        attributes: vec![kv("guest.attr", "\"yes\"")],
                        value: metrics::MetricNumber::U64(1),
                        exemplars: Vec::new(),
                    }],
                    start_time: start,
                    time: now(),
                    temporality: metrics::Temporality::Cumulative,
                    is_monotonic: true,
                }),
            }],
        }],
    })
    .map_or_else(|e| format!("error: {e}"), |()| "ok".to_string());
    Ok(Response::builder()
        .status(200)
        .header("content-type", "text/plain")
        .body(format!(
            "trace={} parent={} span={span_id}\nkv={kv_read}\nmetrics={exported}\n",
            outer.trace_id, outer.span_id
        ))
        .build())
}
