//! Guest telemetry of a Spin app as a pod through CRI (root only): the
//! `tests/apps/spin-otel-guest` app (`wasi:otel@0.2.0-rc.2`, Spin 3.6+) on containerd 1.7 in
//! the private cgroup v2 namespace with kubelet's systemd driver, its container given the
//! `OTEL_EXPORTER_OTLP_*` variables spin-operator sets, exporting to test-support's OTLP
//! collector on loopback. A request carrying a caller's W3C `traceparent` reaches the guest,
//! which reports a span, a log record and a counter of its own: the request's server span is
//! a child of the caller's span, the guest's span a child of the server span (in the
//! caller's trace), and the key-value call the guest makes inside its span a child of the
//! guest's span; the guest's log record carries its component; Spin 3.6's per-component
//! CPU-time and memory histograms arrive for the component. Prints one
//! `guest-telemetry(cri):` line.
//!
//! Needs what `tests/cri/tests/cri.rs` needs (built shim, `scripts/build-apps.sh`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use cri_tests::cgroups::Layout;
use cri_tests::cri::{ContainerSpec, Cri};
use cri_tests::node::{ContainerdVersion, Images, Node};
use cri_tests::scenario;
use oci_image_builder::spin;
use test_support::curl::Curl;
use test_support::otlp::{self, Collector, SpanKind};

const LAYOUT: Layout = Layout::Unified;
const IMAGE: &str = "docker.io/library/spin-otel-guest:cri";
const SERVICE: &str = "otel-guest-pod";
/// The caller's trace and span (the W3C `traceparent` the request carries).
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The request with the caller's context, then what the collector received.
fn checks(addr: SocketAddr, collector: &Collector) -> Result<String> {
    let c = Curl::run(&[
        "-H",
        &format!("traceparent: 00-{TRACE}-{CALLER}-01"),
        "-w",
        "\nstatus=%{http_code}\n",
        &format!("http://{addr}/otel"),
    ]);
    ensure!(
        c.ok && c.out.contains("\nstatus=200\n"),
        "GET /otel: {}{}",
        c.out,
        c.err
    );
    ensure!(
        c.out.starts_with(&format!("trace={TRACE} parent=")),
        "the guest did not get the request's context: {}",
        c.out
    );
    ensure!(
        c.out.contains("\nkv=ok\n"),
        "the guest's key-value call: {}",
        c.out
    );
    ensure!(
        c.out.contains("\nmetrics=ok\n"),
        "the guest's metrics export: {}",
        c.out
    );

    let kv_get = |name: &str| name == "key-value/store.get";
    let spans = collector.wait_for(
        "the guest's span, its key-value call and the server span",
        |s| {
            let in_trace = || s.iter().filter(|r| hex(&r.span.trace_id) == TRACE);
            in_trace().any(|r| r.span.name == "guest-work")
                && in_trace().any(|r| kv_get(&r.span.name))
                && in_trace().any(|r| r.span.kind == SpanKind::Server as i32)
        },
    );
    let in_trace = |pred: &dyn Fn(&otlp::Received) -> bool| {
        spans
            .iter()
            .find(|r| hex(&r.span.trace_id) == TRACE && pred(r))
            .cloned()
            .context("span missing")
    };
    let server = in_trace(&|r| r.span.kind == SpanKind::Server as i32)?;
    let guest = in_trace(&|r| r.span.name == "guest-work")?;
    let get = in_trace(&|r| kv_get(&r.span.name))?;
    ensure!(
        hex(&server.span.parent_span_id) == CALLER,
        "the server span is not a child of the caller's span: {server:?}"
    );
    ensure!(
        guest.service == SERVICE && guest.span.parent_span_id == server.span.span_id,
        "the guest's span is not a child of the request's server span: {guest:?}"
    );
    ensure!(
        get.span.parent_span_id == guest.span.span_id,
        "the key-value call made inside the guest's span is not its child: {get:?}"
    );
    let first = c.out.lines().next().unwrap_or_default();
    ensure!(
        first
            == format!(
                "trace={TRACE} parent={} span={}",
                hex(&server.span.span_id),
                hex(&guest.span.span_id)
            ),
        "the guest saw other span ids than the collector: {first}"
    );

    let logs = collector.wait_for_logs("the guest's log record", |l| {
        l.iter().any(|r| r.body == "guest log line")
    });
    let log = logs.iter().find(|r| r.body == "guest log line").unwrap();
    ensure!(
        log.service == SERVICE && log.attr("component_id") == Some("otel"),
        "{log:?}"
    );
    collector.wait_for_points("the guest's counter", |p| {
        otlp::latest(p, "guest.requests", &[("guest.attr", "yes")]).is_some_and(|n| n >= 1)
    });
    let h = collector.wait_for_histograms("the per-component histograms", |h| {
        otlp::has_component_histograms(h, "otel", SERVICE)
    });
    let cpu = h
        .iter()
        .rev()
        .find(|p| p.metric == "spin.component_cpu_time")
        .unwrap();
    ensure!(cpu.sum > 0.0 && cpu.sum < 60.0, "CPU seconds: {cpu:?}");
    Ok(format!(
        "guest span {} under server span {} in the caller's trace {TRACE}, key-value span \
         under the guest's, guest log record and counter, per-component histograms ({} \
         instance(s), {:.4} s CPU)",
        hex(&guest.span.span_id),
        hex(&server.span.span_id),
        cpu.count,
        cpu.sum
    ))
}

fn run() -> Result<()> {
    let collector = Collector::start();
    let endpoint = format!("http://{}", collector.grpc);
    let dir = integration::shim_bin_dir().join("cri-images-guest-telemetry");
    let imgs = Images::build(&dir)?;
    let node = Node::start(ContainerdVersion::V1_7, LAYOUT, true)?;
    node.import(&imgs.pause)?;
    let tar = dir.join("spin-otel-guest.tar");
    let app_dir = integration::workspace_root().join("tests/apps/spin-otel-guest");
    spin::container_image(IMAGE, &app_dir, &[])?.write_archive(&tar)?;
    node.import(&tar)?;
    let logs = node.dir().join("pod-logs");
    let envs = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_SERVICE_NAME", SERVICE),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let spec = ContainerSpec {
        name: "app".into(),
        image: IMAGE.into(),
        command: vec!["/".into()],
        envs,
        ..Default::default()
    };
    let rt = cri_tests::cri::runtime()?;
    rt.block_on(async {
        let mut cri = Cri::connect(&node.socket(), Duration::from_secs(20)).await?;
        let line = scenario::serve_in_pod(
            &mut cri,
            LAYOUT,
            &logs,
            "otel",
            spec,
            Some("/.well-known/spin/health"),
            |addr| checks(addr, &collector),
        )
        .await
        .with_context(|| format!("guest telemetry pod\n{}", node.log_tail()))?;
        println!("guest-telemetry(cri): {line}");
        anyhow::Ok(())
    })
}

#[test]
fn guest_telemetry_of_a_pod_joins_the_requests_trace() {
    let Some(_s) = integration::root_test("guest_telemetry_of_a_pod_joins_the_requests_trace")
    else {
        return;
    };
    run().unwrap_or_else(|e| panic!("{e:#}"));
}
