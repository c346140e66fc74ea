//! Prometheus metrics of an app served by `spin-serve` (`SPIN_SHIM_METRICS_ADDR`), scraped
//! by a real Prometheus (Debian package `prometheus`) started on loopback, and read back
//! through its query API.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;

/// The samples of `query` as (labels, value), from Prometheus' HTTP API.
fn query(prom: SocketAddr, query: &str) -> Vec<(serde_json::Value, f64)> {
    if std::net::TcpStream::connect(prom).is_err() {
        return Vec::new(); // not listening yet
    }
    let r = request(prom, "GET", &format!("/api/v1/query?query={query}"), b"");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["metric"].clone(),
                s["value"][1].as_str().unwrap_or("0").parse().unwrap_or(0.0),
            )
        })
        .collect()
}

/// `spin-limits` served with metrics on and a 32 MiB memory cap, after three good requests
/// and one that runs into the cap (the app's directory, its server, the metrics address).
fn limits_app_after_four_requests() -> (tempfile::TempDir, Server, SocketAddr) {
    let app = prepare_app("spin-limits");
    let metrics: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let server = Server::start(
        app.path(),
        &[
            ("SPIN_SHIM_METRICS_ADDR", &metrics.to_string()),
            ("SPIN_MAX_INSTANCE_MEMORY", "33554432"),
        ],
    );
    for _ in 0..3 {
        assert_eq!(server.get("/").status, 200);
    }
    assert_eq!(server.get("/greedy").status, 500);
    (app, server, metrics)
}

#[test]
fn prometheus_scrapes_request_instantiation_and_trap_counts() {
    let Some(prometheus) = ["/usr/bin/prometheus"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        panic!("prometheus is missing: apt-get install prometheus (scripts/setup.sh)");
    };
    let (_app, server, metrics) = limits_app_after_four_requests();
    // The exposition itself.
    let text = request(metrics, "GET", "/metrics", b"").text();
    assert!(
        text.contains(
            "spin_http_requests_total{app=\"spin-limits\",component=\"limits\",route=\"/...\",status=\"200\"} 3"
        ),
        "{text}"
    );
    assert_eq!(request(metrics, "GET", "/other", b"").status, 404);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: spin\n    static_configs:\n      - targets: [\"{metrics}\"]\n"
        ),
    )
    .unwrap();
    let prom: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut child = std::process::Command::new(prometheus)
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={prom}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start prometheus");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (ok, traps, inst, hits) = loop {
        let ok = query(prom, "spin_http_requests_total");
        let traps = query(prom, "spin_component_traps_total");
        let inst = query(prom, "spin_component_instantiations_total");
        let cache = query(prom, "spin_compile_cache_total");
        if (!ok.is_empty() && !traps.is_empty()) || Instant::now() > deadline {
            break (ok, traps, inst, cache);
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let _ = child.kill();
    let _ = child.wait();
    let find = |v: &[(serde_json::Value, f64)], key: &str, val: &str| {
        v.iter().find(|(m, _)| m[key] == val).map(|(_, x)| *x)
    };
    assert_eq!(find(&ok, "status", "200"), Some(3.0), "{ok:?}");
    assert_eq!(find(&ok, "status", "500"), Some(1.0), "{ok:?}");
    assert!(
        ok.iter()
            .all(|(m, _)| m["app"] == "spin-limits" && m["job"] == "spin"),
        "{ok:?}"
    );
    assert_eq!(find(&traps, "component", "limits"), Some(1.0), "{traps:?}");
    assert_eq!(find(&inst, "component", "limits"), Some(4.0), "{inst:?}");
    let loaded: f64 = hits.iter().map(|(_, v)| v).sum();
    assert_eq!(loaded, 1.0, "one component loaded at start: {hits:?}");
    drop(server);
}

/// The value of the series of `metric` (a full sample name, e.g. `x_count`) whose labels
/// include `label`, from an exposition.
fn sample(text: &str, metric: &str, label: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Spin 3.6's per-component histograms on the Prometheus endpoint: one observation per
/// instance when it ends, CPU time from the guest's polls, memory from the store's limiter
/// (the greedy instance's growth up to its 32 MiB cap shows in the memory at its end).
#[test]
fn per_component_cpu_and_memory_histograms() {
    let (_app, server, metrics) = limits_app_after_four_requests();
    let id = "component_id=\"limits\"";
    // Instances end after their response: wait (bounded) until all four are recorded.
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = request(metrics, "GET", "/metrics", b"").text();
        let counts = [
            "spin_component_cpu_time_count",
            "spin_component_memory_used_on_init_count",
            "spin_component_memory_used_count",
        ]
        .map(|m| sample(&text, m, id));
        if counts.iter().all(|c| *c == Some(4.0)) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "four instances not recorded: {counts:?}\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        text.contains("spin_component_cpu_time_count{app=\"spin-limits\",component_id=\"limits\",unit=\"s\"} 4"),
        "{text}"
    );
    let cpu = sample(&text, "spin_component_cpu_time_sum", id).unwrap();
    assert!(cpu > 0.0 && cpu < 60.0, "CPU seconds {cpu}");
    let on_init = sample(&text, "spin_component_memory_used_on_init_sum", id).unwrap();
    let used = sample(&text, "spin_component_memory_used_sum", id).unwrap();
    assert!(on_init / 4.0 >= 1048576.0, "memory on init {on_init}");
    assert!(
        used >= on_init + 16.0 * 1048576.0,
        "the greedy instance's growth is missing: used {used}, on init {on_init}"
    );
    assert!(text.contains("unit=\"By\""), "{text}");
    drop(server);
}

/// A WASIp3 component's instances serve many requests each (Spin 4's instance reuse), in
/// wasmtime-wasi-http's worker rather than in the request's task: each request's CPU time
/// is observed all the same, one observation per request (once the next request starts on
/// its instance or the instance ends), while the memory histograms keep one observation per
/// instance. A request that busy-loops until the request deadline (1 s) shows its CPU time.
#[test]
fn reused_wasip3_instances_report_cpu_time_per_request() {
    const WASM: &str = "sdk6_http.wasm";
    guest_wasm(WASM);
    let routes: String = ["/count", "/spin"]
        .iter()
        .map(|r| format!("[[trigger.http]]\nroute = \"{r}\"\ncomponent = \"c\"\n"))
        .collect();
    let app = app_from_manifest(&format!(
        "spin_manifest_version = 2\n[application]\nname = \"p3\"\n{routes}\
         [component.c]\nsource = \"{{WASM_DIR}}/{WASM}\"\n"
    ));
    let metrics: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let server = Server::start(
        app.path(),
        &[
            ("SPIN_SHIM_METRICS_ADDR", &metrics.to_string()),
            ("SPIN_SHIM_REQUEST_TIMEOUT", "1s"),
        ],
    );
    let counts: Vec<u64> = (0..5)
        .map(|_| {
            let r = server.get("/count");
            assert_eq!(r.status, 200, "{}", r.text());
            r.text().trim().parse().expect("a count")
        })
        .collect();
    assert!(
        counts.iter().any(|&c| c >= 2),
        "no instance was reused: {counts:?}"
    );
    assert_eq!(server.get("/spin").status, 504);
    let id = "component_id=\"c\"";
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = request(metrics, "GET", "/metrics", b"").text();
        let cpu = sample(&text, "spin_component_cpu_time_count", id);
        let instances = sample(
            &text,
            "spin_component_instantiations_total",
            "component=\"c\"",
        );
        let memory = sample(&text, "spin_component_memory_used_count", id);
        if cpu == Some(6.0) && memory.is_some() && memory == instances {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "CPU time of 6 requests and memory of every instance not recorded: cpu {cpu:?}, \
             memory {memory:?}, instances {instances:?}\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The busy loop ran for the 1 s deadline; a share of it is counted even on a loaded
    // machine (the figure is a lower bound: see WorkerCpu).
    let cpu = sample(&text, "spin_component_cpu_time_sum", id).unwrap();
    assert!(cpu > 0.2 && cpu < 60.0, "CPU seconds {cpu}\n{text}");
    drop(server);
}
