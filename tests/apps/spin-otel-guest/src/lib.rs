//! Guest telemetry through `wasi:otel@0.2.0-rc.2`, as an OpenTelemetry SDK in a guest drives
//! it: `GET /otel` asks the host for the outer span context, starts a span `guest-work`
//! under it (a span id derived from the clock and the request's trace id), emits one log
//! record ("guest log line", INFO) inside that span, and ends the span with an attribute,
//! an event and status ok. The response body is `trace=<id> parent=<id> span=<id>`.
//!
//! The WIT below is that of spin-sdk 6.0's `wit/deps/otel@0.2.0-rc.2` (types, tracing,
//! logs; the same records field for field, documentation left out) and
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
        }

        world guest {
            import wasi:otel/tracing@0.2.0-rc.2;
            import wasi:otel/logs@0.2.0-rc.2;
        }
    "#,
    world: "guest",
    generate_all,
});

use spin_sdk::http::{IntoResponse, Request, Response};
use spin_sdk::http_component;
use wasi::clocks::wall_clock::Datetime;
use wasi::otel::{logs, tracing, types};

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
    Ok(Response::builder()
        .status(200)
        .header("content-type", "text/plain")
        .body(format!(
            "trace={} parent={} span={span_id}\n",
            outer.trace_id, outer.span_id
        ))
        .build())
}
