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

#[test]
fn prometheus_scrapes_request_instantiation_and_trap_counts() {
    let Some(prometheus) = ["/usr/bin/prometheus"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        panic!("prometheus is missing: apt-get install prometheus (scripts/setup.sh)");
    };
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
