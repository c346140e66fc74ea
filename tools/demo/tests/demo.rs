//! Runs `kubelet-demo` end to end as `make demo` does (root only): once to completion, once
//! kept running and stopped with `kubelet-demo stop`. Needs the shim and the guest apps
//! built (`make build apps`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const DEMO: &str = env!("CARGO_BIN_EXE_kubelet-demo");

/// Runs `cmd` (bounded), requires success, returns stdout + stderr.
fn run_ok(cmd: &mut Command) -> String {
    let out =
        integration::output_with_timeout(cmd, Duration::from_secs(300)).expect("run kubelet-demo");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// The value after `label` on the first line that contains it.
fn after<'a>(text: &'a str, label: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    line.split_once(label).unwrap().1.trim()
}

/// Checks that the pod cgroup the demo printed is gone in the unified hierarchy.
fn assert_pod_cgroup_gone(text: &str) {
    let pod = after(text, "    pod cgroup ");
    assert!(
        pod.starts_with("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"),
        "{text}"
    );
    let dir = Path::new("/sys/fs/cgroup/unified").join(pod.trim_start_matches('/'));
    assert!(!dir.exists(), "{} is left behind", dir.display());
    let containerd_dir = after(text, "root/state/socket under");
    assert!(
        !Path::new(containerd_dir).exists(),
        "{containerd_dir} is left behind"
    );
}

#[test]
fn demo_runs_to_completion_and_leaves_nothing() {
    let Some(_guard) = integration::root_test("demo_runs_to_completion_and_leaves_nothing") else {
        return;
    };
    let text = run_ok(Command::new(DEMO).env("DEMO_LOAD_SECS", "2"));
    assert!(text.contains("-> HTTP 200: fib(25) = 75025"), "{text}");
    // Container and pod CPU rates, and their ratio, as printed in the table.
    let rate: Vec<&str> = after(&text, "CPU rate (kubectl top, HPA)")
        .split_whitespace()
        .collect();
    let container: f64 = rate[0].trim_end_matches('m').parse().unwrap();
    let pod: f64 = rate[1].trim_end_matches('m').parse().unwrap();
    assert!(
        container >= 100.0,
        "the container used only {container}m CPU under load:\n{text}"
    );
    assert!(
        pod >= 0.9 * container,
        "pod {pod}m < 90% of container {container}m:\n{text}"
    );
    assert!(text.contains("nothing left behind"), "{text}");
    assert_pod_cgroup_gone(&text);
}

#[test]
fn kept_demo_serves_until_stopped() {
    let Some(_guard) = integration::root_test("kept_demo_serves_until_stopped") else {
        return;
    };
    let text = run_ok(Command::new(DEMO).env("DEMO_KEEP", "1"));
    let url = after(&text, "curl '").trim_end_matches('\'');
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("no address in {url:?}: {e}"));
    // The supervisor has exited: the app must still answer.
    let (status, body) =
        cri_tests::scenario::http_get(addr, "/?n=20", Duration::from_secs(10)).unwrap();
    assert_eq!(status, 200, "{body}");
    let state = after(&text, "kubelet-demo stop ");
    let stop_text = run_ok(Command::new(DEMO).args(["stop", state]));
    assert!(stop_text.contains("nothing left behind"), "{stop_text}");
    assert!(
        !stop_text.contains("GET /?n=25"),
        "stop repeats the start-up output:\n{stop_text}"
    );
    assert!(!Path::new(state).exists(), "{state} is left behind");
    assert!(
        cri_tests::scenario::http_get(addr, "/", Duration::from_secs(2)).is_err(),
        "the app still answers after stop"
    );
    assert_pod_cgroup_gone(&text);
}
