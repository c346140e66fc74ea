//! OpenTelemetry traces of an app served by `spin-serve`, received by a collector in this
//! test that decodes OTLP with the published `opentelemetry-proto` crate (gRPC with tonic,
//! HTTP/protobuf with prost): the request's server span continues the caller's
//! `traceparent`, outbound HTTP and key-value calls are its children, the upstream sees the
//! outbound span's `traceparent`, stored values never appear in exported spans, and without
//! `OTEL_*` no exporter runs.

mod common;
mod otlp;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use otlp::{Collector, SpanKind};

/// An upstream HTTP server that records the `traceparent` of each request.
fn upstream() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().take(16) {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut tp = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("traceparent") {
                        tp = v.trim().to_string();
                    }
                }
                line.clear();
            }
            s.lock().unwrap().push(tp);
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi");
        }
    });
    (addr, seen)
}

/// A request with extra headers; returns the status.
fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn app(upstream: SocketAddr) -> tempfile::TempDir {
    app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"otel-app\"\n\
         [[trigger.http]]\nroute = \"/kv/...\"\ncomponent = \"kv\"\n\
         [[trigger.http]]\nroute = \"/out/...\"\ncomponent = \"outbound\"\n\
         [component.kv]\nsource = \"{{WASM_DIR}}/spin_kv.wasm\"\nkey_value_stores = [\"default\"]\n\
         [component.outbound]\nsource = \"{{WASM_DIR}}/spin_outbound.wasm\"\n\
         allowed_outbound_hosts = [\"http://{upstream}\"]\n"
    ))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn grpc_traces_continue_traceparent_and_cover_host_calls() {
    let collector = Collector::start();
    let (up, seen) = upstream();
    let dir = app(up);
    let endpoint = format!("http://{}", collector.grpc);
    let server = Server::start(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "otel-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    assert_eq!(threads_named(server.child.id(), "otel-export"), 1);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{parent_id}-01");
    let status = send(
        server.addr,
        "GET",
        &format!("/out/?url=http://{up}/hello"),
        &[("traceparent", &traceparent)],
        b"",
    );
    assert_eq!(status, 200);
    let secret = "value-that-must-not-be-exported";
    assert_eq!(
        send(server.addr, "PUT", "/kv/k1", &[], secret.as_bytes()),
        200
    );
    assert_eq!(send(server.addr, "GET", "/kv/k1", &[], b""), 200);

    let spans = collector.wait_for("outbound and key-value spans", |s| {
        s.iter()
            .any(|r| r.span.name == "spin_outbound_http.send_request" || r.span.name == "GET")
            && s.iter()
                .filter(|r| r.span.name.starts_with("key-value/"))
                .count()
                >= 2
            && s.iter()
                .filter(|r| r.span.kind == SpanKind::Server as i32)
                .count()
                >= 3
    });
    for s in &spans {
        assert_eq!(s.service, "otel-test", "{:?}", s.span.name);
    }
    // The server span continues the caller's trace.
    let server_out = spans
        .iter()
        .find(|r| {
            r.span.kind == SpanKind::Server as i32
                && r.attr("spin.component_id").as_deref() == Some("outbound")
        })
        .expect("server span of the outbound component");
    assert_eq!(server_out.span.name, "GET /out/...");
    assert_eq!(hex(&server_out.span.trace_id), trace_id);
    assert_eq!(hex(&server_out.span.parent_span_id), parent_id);
    assert_eq!(server_out.attr("http.route").as_deref(), Some("/out/..."));
    assert_eq!(
        server_out.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    // The outbound call is its child, a client span, and the upstream saw its context.
    let client = spans
        .iter()
        .find(|r| r.span.kind == SpanKind::Client as i32 && r.attr("server.address").is_some())
        .expect("outbound client span");
    assert_eq!(client.span.parent_span_id, server_out.span.span_id);
    assert_eq!(client.span.trace_id, server_out.span.trace_id);
    assert_eq!(
        client.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(
        client.attr("url.full"),
        Some(format!("http://{up}/hello")),
        "the URL is exported without its query"
    );
    let upstream_tp = seen.lock().unwrap().first().cloned().unwrap_or_default();
    assert_eq!(
        upstream_tp,
        format!("00-{trace_id}-{}-01", hex(&client.span.span_id)),
        "traceparent seen by the upstream"
    );
    // Key-value calls are client spans under their request's server span.
    for kv in spans
        .iter()
        .filter(|r| r.span.name.starts_with("key-value/"))
    {
        assert_eq!(kv.span.kind, SpanKind::Client as i32);
        let parent = spans
            .iter()
            .find(|r| r.span.span_id == kv.span.parent_span_id)
            .unwrap_or_else(|| panic!("parent of {} not exported", kv.span.name));
        assert_eq!(parent.attr("spin.component_id").as_deref(), Some("kv"));
    }
    let names: Vec<_> = spans.iter().map(|r| r.span.name.as_str()).collect();
    assert!(names.contains(&"key-value/store.set"), "{names:?}");
    assert!(names.contains(&"key-value/store.get"), "{names:?}");
    // No span, attribute or event carries the stored value.
    let dump = format!("{spans:?}");
    assert!(!dump.contains(secret), "a stored value was exported");
}

#[test]
fn http_protobuf_export_and_off_without_variables() {
    let collector = Collector::start();
    let (up, _seen) = upstream();
    let dir = app(up);
    let endpoint = format!("http://{}", collector.http);
    let server = Server::start(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    assert_eq!(send(server.addr, "GET", "/kv/missing", &[], b""), 404);
    let spans = collector.wait_for("a server span over HTTP/protobuf", |s| {
        s.iter().any(|r| r.span.name == "GET /kv/...")
    });
    assert!(
        spans.iter().all(|r| r.service == "spin"),
        "default service.name is spin"
    );
    drop(server);

    // No variables: no exporter thread, and the app serves as before.
    let server = Server::start(dir.path(), &[]);
    assert_eq!(send(server.addr, "GET", "/kv/missing", &[], b""), 404);
    assert_eq!(threads_named(server.child.id(), "otel-export"), 0);
    // A bad setting is named in the log and leaves the app serving.
    drop(server);
    let server = Server::start(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    assert_eq!(send(server.addr, "GET", "/kv/missing", &[], b""), 404);
    let log = log_with(&server, "OTEL_EXPORTER_OTLP_PROTOCOL");
    assert!(log.contains("OpenTelemetry traces are off"), "{log}");
}
