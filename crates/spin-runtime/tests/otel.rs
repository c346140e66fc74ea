//! OpenTelemetry from an app served by `spin-serve`, received by a collector in this test
//! that decodes OTLP with the published `opentelemetry-proto` crate (gRPC with tonic,
//! HTTP/protobuf with prost, plain or TLS): the request's server span continues the caller's
//! `traceparent`, outbound HTTP and key-value calls are its children, the upstream sees the
//! outbound span's `traceparent`, stored values never appear in exported spans; the Spin 4
//! (WASIp3) host calls of an instance reused across requests join each request's trace; Spin's
//! `spin.request_count` counter and the app's output as log records arrive; an `https://`
//! collector with a private CA and a required client certificate gets all three; and
//! without `OTEL_*` no exporter runs.

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
         [[trigger.http]]\nroute = \"/log/...\"\ncomponent = \"logger\"\n\
         [component.logger]\nsource = \"{{WASM_DIR}}/spin_hostifaces.wasm\"\n\
         [component.kv]\nsource = \"{{WASM_DIR}}/spin_kv.wasm\"\nkey_value_stores = [\"default\"]\n\
         [component.outbound]\nsource = \"{{WASM_DIR}}/spin_outbound.wasm\"\n\
         allowed_outbound_hosts = [\"http://{upstream}\"]\n"
    ))
}

/// `spin-serve` for the app in `dir`, sending traces to `collector` over gRPC as `service`.
fn traced_server(dir: &std::path::Path, collector: &Collector, service: &str) -> Server {
    let endpoint = format!("http://{}", collector.grpc);
    Server::start(
        dir,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", service),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
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
    let server = traced_server(dir.path(), &collector, "otel-test");
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
fn host_calls_of_a_reused_wasip3_instance_join_each_requests_trace() {
    let collector = Collector::start();
    guest_wasm("sdk6_http.wasm");
    let dir = app_from_manifest(
        "spin_manifest_version = 2\n[application]\nname = \"otel-p3\"\n\
         [[trigger.http]]\nroute = \"/host\"\ncomponent = \"p3\"\n\
         [[trigger.http]]\nroute = \"/count\"\ncomponent = \"p3\"\n\
         [component.p3]\nsource = \"{WASM_DIR}/sdk6_http.wasm\"\n\
         key_value_stores = [\"default\"]\n",
    );
    let server = traced_server(dir.path(), &collector, "otel-p3");
    // Two requests, each in its own trace, then proof they ran in one (reused) instance.
    let traces = [
        ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"),
        ("1bf7651916cd43dd8448eb211c80319d", "c7ad6b7169203332"),
    ];
    let count = |server: &Server| request(server.addr, "GET", "/count", b"").text();
    assert_eq!(count(&server).trim(), "1");
    for (trace, parent) in traces {
        let tp = format!("00-{trace}-{parent}-01");
        assert_eq!(
            send(
                server.addr,
                "GET",
                "/host?op=kv",
                &[("traceparent", &tp)],
                b""
            ),
            200
        );
    }
    assert_eq!(
        count(&server).trim(),
        "2",
        "the requests did not share an instance"
    );
    // A request's server span ends after its host calls and may reach the collector in a
    // later batch: wait for both.
    let spans = collector.wait_for("two requests' server and key-value spans", |s| {
        traces.iter().all(|(trace, _)| {
            let in_trace = || s.iter().filter(|r| hex(&r.span.trace_id) == *trace);
            in_trace().any(|r| r.span.kind == SpanKind::Server as i32)
                && in_trace()
                    .filter(|r| r.span.name.starts_with("key-value/"))
                    .count()
                    >= 5
        })
    });
    for (trace, parent) in traces {
        let server_span = spans
            .iter()
            .find(|r| r.span.kind == SpanKind::Server as i32 && hex(&r.span.trace_id) == trace)
            .unwrap_or_else(|| panic!("no server span in trace {trace}"));
        assert_eq!(hex(&server_span.span.parent_span_id), parent);
        let kv: Vec<_> = spans
            .iter()
            .filter(|r| r.span.name.starts_with("key-value/") && hex(&r.span.trace_id) == trace)
            .collect();
        for s in &kv {
            assert_eq!(
                s.span.parent_span_id, server_span.span.span_id,
                "{} is not a child of its request's server span",
                s.span.name
            );
        }
    }
    // No host-call span started a trace of its own.
    let orphans: Vec<_> = spans
        .iter()
        .filter(|r| {
            r.span.name.starts_with("key-value/")
                && !traces.iter().any(|(t, _)| hex(&r.span.trace_id) == *t)
        })
        .map(|r| r.span.name.clone())
        .collect();
    assert!(
        orphans.is_empty(),
        "host calls outside the requests' traces: {orphans:?}"
    );
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

/// Requests to two components, then checks the counters and log records the collector got.
fn metrics_and_logs_arrive(collector: &Collector, server: &Server, service: &str) {
    for _ in 0..3 {
        assert_eq!(send(server.addr, "GET", "/kv/missing", &[], b""), 404);
    }
    for _ in 0..2 {
        assert_eq!(
            send(
                server.addr,
                "GET",
                "/log/?op=log&msg=hello-otel-log",
                &[],
                b""
            ),
            200
        );
    }
    let counted = |points: &[otlp::Point], component: &str| {
        otlp::latest(
            points,
            "spin.request_count",
            &[
                ("trigger_type", "http"),
                ("app_id", "otel-app"),
                ("component_id", component),
            ],
        )
    };
    let points = collector.wait_for_points("spin.request_count of 3 and 2", |p| {
        counted(p, "kv") == Some(3) && counted(p, "logger") == Some(2)
    });
    let p = points
        .iter()
        .find(|p| p.metric == "spin.request_count")
        .unwrap();
    assert!(p.cumulative_counter, "a monotonic cumulative sum: {p:?}");
    assert_eq!(p.service, service);
    // One record per write (as Spin): println! writes a line at once, eprintln! (unbuffered)
    // in pieces.
    let stdout_lines = |l: &[otlp::Log]| l.iter().filter(|r| r.body == "hello-otel-log\n").count();
    let all_output = |l: &[otlp::Log]| l.iter().map(|r| r.body.as_str()).collect::<String>();
    let logs = collector.wait_for_logs("the app's stdout and stderr lines", |l| {
        stdout_lines(l) >= 2 && all_output(l).matches("hello-otel-log (stderr)\n").count() >= 2
    });
    assert!(
        logs.iter()
            .all(|r| r.attr("component_id") == Some("logger") && r.service == service),
        "{logs:?}"
    );
    assert_eq!(stdout_lines(&logs), 2, "{logs:?}");
    assert_eq!(
        all_output(&logs)
            .matches("hello-otel-log (stderr)\n")
            .count(),
        2,
        "{logs:?}"
    );
}

#[test]
fn grpc_metrics_and_app_logs() {
    let collector = Collector::start();
    let (up, _seen) = upstream();
    let dir = app(up);
    let endpoint = format!("http://{}", collector.grpc);
    let server = Server::start(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "metrics-test"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
            ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    metrics_and_logs_arrive(&collector, &server, "metrics-test");
    // The app's output reaches the log (stderr) as before; it is not repeated as log lines
    // of the runtime.
    let log = log_with(&server, "hello-otel-log (stderr)");
    assert!(log.contains("hello-otel-log (stderr)"), "{log}");
    assert!(!log.contains("app_log"), "{log}");
    // Its stdout lines are span events on their request's server span.
    let spans = collector.wait_for("a server span with the app's output as events", |s| {
        s.iter()
            .any(|r| r.span.name == "GET /log/..." && !r.span.events.is_empty())
    });
    let span = spans
        .iter()
        .find(|r| r.span.name == "GET /log/..." && !r.span.events.is_empty())
        .unwrap();
    assert!(
        format!("{:?}", span.span.events).contains("hello-otel-log"),
        "{:?}",
        span.span.events
    );
}

#[test]
fn https_collector_with_private_ca_and_client_certificate() {
    let pki = tempfile::tempdir().unwrap();
    make_pki(pki.path());
    let f = |n: &str| pki.path().join(n);
    let collector = Collector::start_with(Some(otlp::TlsFiles {
        cert: &f("server.pem"),
        key: &f("server.key"),
        client_ca: Some(&f("ca.pem")),
    }));
    let (up, _seen) = upstream();
    let dir = app(up);
    let (ca, cert, key) = (
        f("ca.pem").display().to_string(),
        f("client.pem").display().to_string(),
        f("client.key").display().to_string(),
    );
    for (protocol, addr) in [("http/protobuf", collector.http), ("grpc", collector.grpc)] {
        let before = *collector.store.exports.lock().unwrap();
        let endpoint = format!("https://127.0.0.1:{}", addr.port());
        let server = Server::start(
            dir.path(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
                ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
                ("OTEL_SERVICE_NAME", protocol),
                ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
                ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ],
        );
        metrics_and_logs_arrive(&collector, &server, protocol);
        collector.wait_for(&format!("a server span over {protocol} with TLS"), |s| {
            s.iter()
                .any(|r| r.service == protocol && r.span.name == "GET /kv/...")
        });
        assert!(
            *collector.store.exports.lock().unwrap() > before,
            "{protocol}: exports carried the client certificate"
        );
        drop(server);
        collector.store.clear();
    }
    // Without the private CA the collector's certificate is refused: nothing arrives, the
    // runtime says why, and the app serves.
    let endpoint = format!("https://127.0.0.1:{}", collector.http.port());
    let server = Server::start(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
            ("OTEL_SERVICE_NAME", "no-ca"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ],
    );
    assert_eq!(send(server.addr, "GET", "/kv/missing", &[], b""), 404);
    // Five export intervals.
    std::thread::sleep(Duration::from_millis(1000));
    let got = collector.store.services();
    assert!(!got.iter().any(|s| s == "no-ca"), "{got:?}");
    drop(server);
    // A missing certificate file is named and leaves telemetry off.
    let server = Server::start(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
        ],
    );
    assert_eq!(send(server.addr, "GET", "/kv/missing", &[], b""), 404);
    let log = log_with(&server, "OpenTelemetry logs are off");
    for signal in ["traces", "metrics", "logs"] {
        assert!(
            log.contains(&format!(
                "OpenTelemetry {signal} are off: OTEL_EXPORTER_OTLP_CERTIFICATE=/nonexistent/ca.pem: no such file"
            )),
            "{signal}: {log}"
        );
    }
    assert_eq!(threads_named(server.child.id(), "otel-export"), 0);
}
