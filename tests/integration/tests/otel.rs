//! OpenTelemetry through the shim (root only): a containerd 1.7 whose environment has
//! `OTEL_EXPORTER_OTLP_*` (and so its shims) and a Spin container whose environment has them
//! too (as spin-operator sets them) export to a collector on loopback: the shim's Task API
//! spans (Create, Start, Kill, Delete, named by container id), the app's request span and
//! Spin's `spin.request_count` counter.
//! On containerd 2.x, which sends its shims the trace context of its own Task API client
//! spans in the ttrpc metadata (`traceparent`), the shim's spans are children of those.
//! Guest telemetry through the shim: the `spin-otel-guest` app's own span (`wasi:otel`) and
//! counter, and Spin 3.6's per-component CPU and memory histograms, exported from inside a
//! `ctr run` container.
//! Run as root: `cargo test --release -p integration --test otel -- --nocapture`.

use test_support::otlp;

use std::time::Duration;

use anyhow::{ensure, Result};
use integration::{
    require_shim, workspace_root, CgroupMode, Containerd, ContainerdConfig, ContainerdVersion,
};
use otlp::{Collector, SpanKind};

fn run(version: ContainerdVersion) -> Result<()> {
    require_shim()?;
    let collector = Collector::start();
    let endpoint = format!("http://{}", collector.grpc);
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let config = ContainerdConfig {
        env: otel
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let c = Containerd::start_with(version, CgroupMode::Host, &config)?;
    let dir = tempfile::tempdir()?;
    let name = "docker.io/library/spin-hello:otel";
    let tar = dir.path().join("c.tar");
    oci_image_builder::spin::container_image(
        name,
        &workspace_root().join("tests/apps/spin-hello"),
        &[],
    )?
    .write_archive(&tar)?;
    c.import(&tar, false)?;
    let mut extra = Vec::new();
    for (k, v) in otel.iter().chain(&[
        ("OTEL_SERVICE_NAME", "hello-app"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
    ]) {
        extra.push("--env".to_string());
        extra.push(format!("{k}={v}"));
    }
    let app = c.run_spin_app(name, &extra)?;
    let (status, _) = app.get("/hello")?;
    ensure!(status == 200, "GET /hello: {status}");
    let (status, _) = app.get("/hello")?;
    ensure!(status == 200, "GET /hello: {status}");
    // Spin's request counter, exported from inside the container.
    let points = collector.wait_for_points("spin.request_count of 2 from the container", |p| {
        otlp::latest(
            p,
            "spin.request_count",
            &[
                ("trigger_type", "http"),
                ("app_id", "spin-hello"),
                ("component_id", "hello"),
            ],
        ) == Some(2)
    });
    ensure!(
        points
            .iter()
            .any(|p| p.metric == "spin.request_count" && p.service == "hello-app"),
        "metrics carry the app's service name: {points:?}"
    );
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(20))?;
    c.ctr_output(&["task", "delete", &app.id], Duration::from_secs(30))?;

    // containerd 1.7 exports its own spans too when it has the variables: the shim's are
    // told apart by their service.
    let task = |s: &otlp::Received, method: &str| {
        s.span.name == format!("containerd.task.v2.Task/{method}")
            && s.attr("container.id").as_deref() == Some(app.id.as_str())
            && s.service == "containerd-shim-spin-v2"
    };
    for line in c
        .log_tail(400)
        .lines()
        .filter(|l| l.contains("OpenTelemetry"))
    {
        println!("containerd log: {line}");
    }
    let spans = collector.wait_for(
        "the shim's Task API spans and the app's request span",
        |s| {
            ["Create", "Start", "Kill", "Delete"]
                .iter()
                .all(|m| s.iter().any(|r| task(r, m)))
                && s.iter().any(|r| r.span.name == "GET /hello")
        },
    );
    for m in ["Create", "Start", "Kill", "Delete"] {
        let s = spans.iter().find(|r| task(r, m)).unwrap();
        ensure!(
            s.span.kind == SpanKind::Server as i32,
            "{m}: kind {}",
            s.span.kind
        );
    }
    if version == ContainerdVersion::V2 {
        // containerd 2.x's ttrpc client span of each call is the parent of the shim's span;
        // containerd exports in batches of its own pace: wait for them.
        let has_parent = |all: &[otlp::Received], s: &otlp::Received| {
            all.iter().any(|r| {
                r.span.span_id == s.span.parent_span_id && r.span.trace_id == s.span.trace_id
            })
        };
        let spans = collector.wait_for("containerd's spans parenting the shim's", |all| {
            ["Create", "Start", "Kill", "Delete"].iter().all(|m| {
                all.iter()
                    .filter(|r| task(r, m))
                    .any(|s| has_parent(all, s))
            })
        });
        for m in ["Create", "Start", "Kill", "Delete"] {
            let s = spans.iter().find(|r| task(r, m)).unwrap();
            let parent = spans.iter().find(|r| {
                r.span.span_id == s.span.parent_span_id && r.span.trace_id == s.span.trace_id
            });
            ensure!(
                parent.is_some_and(|p| p.service != "containerd-shim-spin-v2"),
                "{m}: the shim's span is not a child of a containerd span (parent {:?}; \
                 containerd spans: {:?})",
                parent.map(|p| (&p.span.name, &p.service)),
                spans
                    .iter()
                    .filter(|r| r.service != "containerd-shim-spin-v2")
                    .map(|r| r.span.name.as_str())
                    .collect::<Vec<_>>()
            );
            println!(
                "{m}: parent {} ({})",
                parent.unwrap().span.name,
                parent.unwrap().service
            );
        }
    }
    let mut services: Vec<&str> = spans.iter().map(|r| r.service.as_str()).collect();
    services.sort();
    services.dedup();
    let req = spans.iter().find(|r| r.span.name == "GET /hello").unwrap();
    ensure!(
        req.service == "hello-app"
            && req.attr("http.response.status_code").as_deref() == Some("200"),
        "request span: {req:?}"
    );
    println!(
        "otel through the shim: {} spans from {services:?}; Task API Create/Start/Kill/Delete \
         of {} and GET /hello",
        spans.len(),
        app.id
    );
    Ok(())
}

#[test]
fn shim_and_app_export_traces_through_containerd_1_7() {
    let Some(_s) = integration::root_test("shim_and_app_export_traces_through_containerd_1_7")
    else {
        return;
    };
    run(ContainerdVersion::V1_7).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn shim_spans_continue_containerd_2_trace_context() {
    let Some(_s) = integration::root_test("shim_spans_continue_containerd_2_trace_context") else {
        return;
    };
    run(ContainerdVersion::V2).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn guest_span_and_per_component_metrics_through_the_shim() {
    let Some(_s) = integration::root_test("guest_span_and_per_component_metrics_through_the_shim")
    else {
        return;
    };
    guest_telemetry().unwrap_or_else(|e| panic!("{e:#}"));
}

fn guest_telemetry() -> Result<()> {
    require_shim()?;
    let collector = Collector::start();
    let endpoint = format!("http://{}", collector.grpc);
    let c = Containerd::start_with(
        ContainerdVersion::V1_7,
        CgroupMode::Host,
        &ContainerdConfig::default(),
    )?;
    let dir = tempfile::tempdir()?;
    let name = "docker.io/library/spin-otel-guest:otel";
    let tar = dir.path().join("c.tar");
    oci_image_builder::spin::container_image(
        name,
        &workspace_root().join("tests/apps/spin-otel-guest"),
        &[],
    )?
    .write_archive(&tar)?;
    c.import(&tar, false)?;
    let mut extra = Vec::new();
    for (k, v) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ("OTEL_SERVICE_NAME", "otel-guest-app"),
    ] {
        extra.push("--env".to_string());
        extra.push(format!("{k}={v}"));
    }
    let app = c.run_spin_app(name, &extra)?;
    let (status, body) = app.get("/otel")?;
    ensure!(status == 200, "GET /otel: {status} {body}");
    ensure!(
        body.contains("\nmetrics=ok\n"),
        "the guest's metrics export: {body}"
    );
    let trace = body
        .strip_prefix("trace=")
        .and_then(|b| b.split(' ').next())
        .unwrap_or_default()
        .to_string();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let spans = collector.wait_for("the guest's span and the request's span", |s| {
        s.iter().any(|r| r.span.name == "guest-work")
            && s.iter().any(|r| r.span.name == "GET /otel")
    });
    let guest = spans.iter().find(|r| r.span.name == "guest-work").unwrap();
    let request = spans.iter().find(|r| r.span.name == "GET /otel").unwrap();
    ensure!(
        guest.service == "otel-guest-app"
            && hex(&guest.span.trace_id) == trace
            && guest.span.parent_span_id == request.span.span_id,
        "the guest's span is not in the request's trace under its span: {guest:?}"
    );
    collector.wait_for_points("the guest's counter", |p| {
        otlp::latest(p, "guest.requests", &[("guest.attr", "yes")]) == Some(1)
    });
    let h = collector.wait_for_histograms("the per-component histograms", |h| {
        otlp::has_component_histograms(h, "otel", "otel-guest-app")
    });
    let on_init = h
        .iter()
        .find(|p| p.metric == "spin.component_memory_used_on_init")
        .unwrap();
    ensure!(on_init.sum >= 1048576.0, "memory on init: {on_init:?}");
    c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &app.id])?;
    c.wait_task_status(&app.id, "STOPPED", Duration::from_secs(20))?;
    c.ctr_output(&["task", "delete", &app.id], Duration::from_secs(30))?;
    println!(
        "guest telemetry through the shim: span {} in trace {trace}, guest counter, \
         per-component histograms ({} B on init)",
        hex(&guest.span.span_id),
        on_init.sum
    );
    Ok(())
}
