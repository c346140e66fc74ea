//! What `ctr task metrics --format json` must show for a container on a cgroup v2 node:
//! containerd's `io.containerd.cgroups.v2.Metrics` with CPU usage and PSI.

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The figures of a v2 metrics message that the node test asserts on.
#[derive(Debug, Clone, PartialEq)]
pub struct V2Metrics {
    /// `cpu.usage_usec`.
    pub cpu_usage_usec: u64,
    /// Which resources carry a `psi` block (`cpu`, `memory`, `io`).
    pub psi_of: Vec<String>,
}

/// Reads ctr's JSON rendering of a task's metrics. ctr prints the unpacked message as Go
/// JSON: a v2 message has `cpu.usage_usec` (v1 has `cpu.usage.total`) and PSI as
/// `<resource>.psi.{some,full}.{avg10,avg60,avg300,total}`. Only a ctr built with
/// containerd/cgroups v3 (containerd 1.7+) knows the PSI fields; 1.6's ctr drops them.
pub fn parse_ctr_metrics(json: &str) -> Result<V2Metrics> {
    let doc: Value = serde_json::from_str(json)
        .with_context(|| format!("ctr task metrics did not print JSON: {json:?}"))?;
    let cpu = doc
        .get("cpu")
        .with_context(|| format!("no cpu figures in the metrics: {doc}"))?;
    if cpu.get("usage").is_some() && cpu.get("usage_usec").is_none() {
        bail!("the task reports the cgroup v1 metrics message on a cgroup v2 node: {doc}");
    }
    let cpu_usage_usec = cpu
        .get("usage_usec")
        .and_then(Value::as_u64)
        .with_context(|| format!("no cpu.usage_usec in the v2 metrics (or it is 0): {doc}"))?;
    let psi_of: Vec<String> = ["cpu", "memory", "io"]
        .into_iter()
        .filter(|r| {
            doc.get(r)
                .and_then(|v| v.get("psi"))
                .is_some_and(|p| p.get("some").is_some() || p.get("full").is_some())
        })
        .map(String::from)
        .collect();
    Ok(V2Metrics {
        cpu_usage_usec,
        psi_of,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shape of ctr 1.7's output for io.containerd.cgroups.v2.Metrics (Go's encoding/json on
    // the containerd/cgroups v3 stats types; zero fields are omitted).
    const V2: &str = r#"{
      "pids": {"current": 3},
      "cpu": {"usage_usec": 812345, "user_usec": 800000, "system_usec": 12345,
              "psi": {"some": {"avg10": 1.5, "total": 41234}, "full": {"total": 20}}},
      "memory": {"usage": 1048576, "psi": {"some": {}, "full": {}}}
    }"#;

    #[test]
    fn v2_message_with_psi_is_read() {
        let m = parse_ctr_metrics(V2).unwrap();
        assert_eq!(m.cpu_usage_usec, 812345);
        assert_eq!(m.psi_of, vec!["cpu".to_string(), "memory".to_string()]);
    }

    #[test]
    fn v1_message_is_rejected_on_v2() {
        let v1 = r#"{"cpu": {"usage": {"total": 5000000, "kernel": 1, "user": 2}}}"#;
        let err = parse_ctr_metrics(v1).unwrap_err().to_string();
        assert!(err.contains("v1 metrics message"), "{err}");
    }

    #[test]
    fn missing_cpu_usage_is_an_error() {
        assert!(parse_ctr_metrics(r#"{"cpu": {"user_usec": 3}}"#).is_err());
        assert!(parse_ctr_metrics("ctr: not found").is_err());
    }

    #[test]
    fn no_psi_is_reported_as_empty() {
        let m = parse_ctr_metrics(r#"{"cpu": {"usage_usec": 7}}"#).unwrap();
        assert!(m.psi_of.is_empty());
    }
}
