//! Guest telemetry through `wasi:otel@0.2.0-rc.2` (Spin 3.6+), through `spin-serve` and the
//! OTLP collector of the other telemetry tests: the guest `spin-otel-guest` asks for the
//! outer span context, reports a span and a log record of its own, and both reach the
//! collector in the request's trace, the span a child of the request's server span. A guest
//! importing `wasi:otel` also runs with telemetry off.

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
         [component.otel]\nsource = \"{WASM_DIR}/spin_otel_guest.wasm\"\n",
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

    let spans = collector.wait_for("the guest's span and the request's server span", |s| {
        let in_trace = || s.iter().filter(|r| hex(&r.span.trace_id) == trace_id);
        in_trace().any(|r| r.span.name == "guest-work")
            && in_trace().any(|r| r.span.kind == SpanKind::Server as i32)
    });
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
        body.trim_end(),
        format!(
            "trace={trace_id} parent={} span={}",
            hex(&server_span.span.span_id),
            hex(&guest.span.span_id)
        )
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
}
