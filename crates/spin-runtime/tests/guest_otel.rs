//! Guest telemetry through `wasi:otel@0.2.0-rc.2` (Spin 3.6+), through `spin-serve` and the
//! OTLP collector of the other telemetry tests: the guest `spin-otel-guest` asks for the
//! outer span context, reports a span and a log record of its own, and both reach the
//! collector in the request's trace, the span a child of the request's server span; the
//! key-value call it makes inside its span is exported as a child of the guest's span; the
//! counter it exports through `wasi:otel/metrics` reaches the collector; and Spin 3.6's
//! per-component histograms (CPU time, memory on init and at the end) arrive for it. A
//! guest importing `wasi:otel` also runs with telemetry off.

mod common;
mod otlp;

use common::*;
use otlp::{Collector, SpanKind};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn otel_app() -> tempfile::TempDir {
    guest_wasm("spin_otel_guest.wasm");
    app_from_manifest(
        "spin_manifest_version = 2\n[application]\nname = \"guest-otel\"\n\
         [[trigger.http]]\nroute = \"/otel\"\ncomponent = \"otel\"\n\
         [component.otel]\nsource = \"{WASM_DIR}/spin_otel_guest.wasm\"\n\
         key_value_stores = [\"default\"]\n",
    )
}

#[test]
fn guest_spans_and_logs_join_the_requests_trace() {
    let collector = Collector::start();
    let dir = otel_app();
    let endpoint = format!("http://{}", collector.grpc);
    let server = Server::start(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "guest-otel"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ],
    );
    let trace_id = "5bf92f3577b34da6a3ce929d0e0e4737";
    let caller = "10f067aa0ba902b8";
    let traceparent = format!("00-{trace_id}-{caller}-01");
    let resp = request_with(
        server.addr,
        "GET",
        "/otel",
        &[("traceparent", &traceparent)],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.text();
    assert!(
        body.starts_with(&format!("trace={trace_id} parent=")),
        "the guest did not get the request's context: {body}"
    );

    let mut lines = body.lines();
    let first = lines.next().unwrap_or_default().to_string();
    assert_eq!(lines.next(), Some("kv=ok"), "{body}");
    assert_eq!(lines.next(), Some("metrics=ok"), "{body}");

    let kv_get = |name: &str| name == "key-value/store.get";
    let spans = collector.wait_for(
        "the guest's span, its key-value call and the request's server span",
        |s| {
            let in_trace = || s.iter().filter(|r| hex(&r.span.trace_id) == trace_id);
            in_trace().any(|r| r.span.name == "guest-work")
                && in_trace().any(|r| kv_get(&r.span.name))
                && in_trace().any(|r| r.span.kind == SpanKind::Server as i32)
        },
    );
    let server_span = spans
        .iter()
        .find(|r| r.span.kind == SpanKind::Server as i32 && hex(&r.span.trace_id) == trace_id)
        .unwrap();
    assert_eq!(hex(&server_span.span.parent_span_id), caller);
    let guest = spans.iter().find(|r| r.span.name == "guest-work").unwrap();
    assert_eq!(guest.service, "guest-otel");
    assert_eq!(
        guest.span.parent_span_id, server_span.span.span_id,
        "the guest's span is not a child of the request's server span"
    );
    assert_eq!(
        first,
        format!(
            "trace={trace_id} parent={} span={}",
            hex(&server_span.span.span_id),
            hex(&guest.span.span_id)
        )
    );
    let get = spans
        .iter()
        .find(|r| hex(&r.span.trace_id) == trace_id && kv_get(&r.span.name))
        .unwrap();
    assert_eq!(
        hex(&get.span.parent_span_id),
        hex(&guest.span.span_id),
        "the key-value call made inside the guest's span is not its child"
    );
    assert_eq!(get.span.kind, SpanKind::Client as i32);
    assert!(
        get.attr("spin.guest_parent").is_none(),
        "the bookkeeping attribute leaked"
    );
    assert_eq!(guest.span.kind, SpanKind::Internal as i32);
    assert_eq!(guest.attr("guest.attr").as_deref(), Some("yes"));
    assert_eq!(guest.attr("guest.count").as_deref(), Some("3"));
    assert_eq!(guest.span.events.len(), 1, "{:?}", guest.span.events);
    assert_eq!(guest.span.events[0].name, "guest-event");
    let status = guest.span.status.as_ref().expect("status");
    assert_eq!(status.code, 1, "status ok: {status:?}");
    assert!(guest.span.end_time_unix_nano >= guest.span.start_time_unix_nano);

    let logs = collector.wait_for_logs("the guest's log record", |l| {
        l.iter().any(|r| r.body == "guest log line")
    });
    let log = logs.iter().find(|r| r.body == "guest log line").unwrap();
    assert_eq!(log.service, "guest-otel");
    assert_eq!(log.attr("component_id"), Some("otel"), "{log:?}");
    assert_eq!(log.attr("guest.log_attr"), Some("42"), "{log:?}");

    let points = collector.wait_for_points("the guest's own counter", |p| {
        otlp::latest(p, "guest.requests", &[("guest.attr", "yes")]) == Some(1)
    });
    let counter = points
        .iter()
        .find(|p| p.metric == "guest.requests")
        .unwrap();
    assert!(counter.cumulative_counter, "{counter:?}");
    assert_eq!(counter.service, "guest-otel", "{counter:?}");

    // Spin 3.6's per-component histograms: one observation per instance (one per request
    // here), recorded when the instance ends.
    let of = |h: &[otlp::HistogramPoint], name: &str| {
        h.iter()
            .rev()
            .find(|p| p.metric == name && p.attr("component_id") == Some("otel"))
            .cloned()
    };
    let h = collector.wait_for_histograms("the per-component histograms", |h| {
        [
            "spin.component_cpu_time",
            "spin.component_memory_used_on_init",
            "spin.component_memory_used",
        ]
        .iter()
        .all(|n| of(h, n).is_some_and(|p| p.count >= 1))
    });
    let cpu = of(&h, "spin.component_cpu_time").unwrap();
    assert_eq!(cpu.attr("unit"), Some("s"), "{cpu:?}");
    assert_eq!(cpu.service, "guest-otel");
    assert!(cpu.sum > 0.0 && cpu.sum < 60.0, "CPU seconds: {cpu:?}");
    let on_init = of(&h, "spin.component_memory_used_on_init").unwrap();
    let used = of(&h, "spin.component_memory_used").unwrap();
    assert_eq!(on_init.attr("unit"), Some("By"), "{on_init:?}");
    // A Rust guest's linear memory is at least the 1 MiB stack and its data, whole pages.
    let per_instance = on_init.sum / on_init.count as f64;
    assert!(per_instance >= 1048576.0, "{on_init:?}");
    assert_eq!(
        per_instance % 65536.0,
        0.0,
        "whole 64 KiB pages: {on_init:?}"
    );
    assert!(
        used.max.unwrap_or(used.sum) >= on_init.max.unwrap_or(0.0),
        "memory at the end below memory on init: {used:?} {on_init:?}"
    );
}

#[test]
fn a_guest_importing_wasi_otel_runs_with_telemetry_off() {
    let dir = otel_app();
    let server = Server::start(dir.path(), &[]);
    let resp = server.get("/otel");
    assert_eq!(resp.status, 200, "{}", resp.text());
    // No exporter: the outer context is the invalid (all-zero) one.
    assert!(
        resp.text()
            .starts_with("trace=00000000000000000000000000000000 parent=0000000000000000"),
        "{}",
        resp.text()
    );
    // Exporting metrics with metrics off succeeds and sends nothing, as in Spin.
    assert!(resp.text().contains("\nmetrics=ok\n"), "{}", resp.text());
}
