//! The demo worker: every step from the private containerd to the figures table, and a
//! teardown that runs whatever happened (error, SIGINT/SIGTERM, `kubelet-demo stop`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use cri_tests::cgroups::{self, Layout};
use cri_tests::cri::{self, ContainerSpec, Cri};
use cri_tests::kubelet::{self, CgroupDriver, QosClass};
use cri_tests::node::{ContainerdVersion, Images, Node};
use cri_tests::scenario::{self, KubeletPod};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::READY_MARKER;

/// The cgroup layout the demo uses: this host as it is (v1 controllers + unified).
const LAYOUT: Layout = Layout::Hybrid;
/// The RuntimeClass handler our shim is registered under.
const HANDLER: &str = "spin";
/// The pod's QoS class: Burstable (requests 100m, limit 500m).
const QOS: QosClass = QosClass::Burstable;
/// The request whose response the demo prints.
const HELLO_PATH: &str = "/?n=25";
/// The request the load repeats (fib(30): some ms of CPU each).
const LOAD_PATH: &str = "/load?n=30";
/// Bound for every CRI call of the teardown.
const CRI_TIMEOUT: Duration = Duration::from_secs(60);

/// Prints one progress line and flushes it (the output may be a log file).
fn step(msg: impl std::fmt::Display) {
    println!("==> {msg}");
    let _ = std::io::stdout().flush();
}

/// The directory the demo's image archives live in (`<release dir>/demo-images`).
fn images_dir() -> PathBuf {
    integration::shim_bin_dir().join("demo-images")
}

/// Builds the image archives (pause, busybox, spin-cpu) unless they exist and are newer
/// than the cpu app's Wasm and manifest. Returns their directory.
pub fn build_images() -> Result<PathBuf> {
    let dir = images_dir();
    let app = integration::workspace_root().join("tests/apps/spin-cpu");
    let wasm = integration::guest_apps_dir().join("spin_cpu.wasm");
    ensure!(
        wasm.is_file(),
        "{} is missing: build the guest apps first (make apps, or bash scripts/build-apps.sh)",
        wasm.display()
    );
    let archive = dir.join("spin-cpu.tar");
    let fresh = mtime(&archive).is_some_and(|built| {
        dir.join("pause.tar").is_file()
            && [wasm, app.join("spin.toml")]
                .iter()
                .all(|src| mtime(src).is_some_and(|m| m <= built))
    });
    if fresh {
        println!("    reusing the image archives in {}", dir.display());
    } else {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Images::build(&dir)?;
        println!("    built the image archives in {}", dir.display());
    }
    Ok(dir)
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The demo's error when a stop was requested.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Fails with [`Interrupted`] if a stop was requested.
fn check(stop: &watch::Receiver<bool>) -> Result<()> {
    if *stop.borrow() {
        return Err(Interrupted.into());
    }
    Ok(())
}

/// Runs `fut` unless a stop is requested first.
async fn interruptible<T>(
    stop: &mut watch::Receiver<bool>,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    check(stop)?;
    tokio::select! {
        r = fut => r,
        _ = stop.wait_for(|s| *s) => Err(Interrupted.into()),
    }
}

/// What the demo has created so far, torn down in reverse.
#[derive(Default)]
struct Demo {
    node: Option<Node>,
    cri: Option<Cri>,
    pod: Option<KubeletPod>,
    container: Option<(String, u32)>,
    logs: Option<tempfile::TempDir>,
}

/// One reading of the CPU counters.
struct Snapshot {
    at: Instant,
    container_ns: u64,
    pod_ns: u64,
}

/// `kubelet-demo __worker run|keep [state dir]`.
pub async fn worker(mode: &str, state_dir: Option<&str>) -> Result<u8> {
    let keep = match (mode, state_dir) {
        ("run", _) => false,
        ("keep", Some(_)) => true,
        _ => bail!(
            "internal worker arguments {mode:?} {state_dir:?}: start the demo as `kubelet-demo`"
        ),
    };
    let (tx, rx) = watch::channel(false);
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    // A kept demo outlives the terminal it was started from.
    let mut sighup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                _ = sighup.recv() => continue,
            }
        }
        let _ = tx.send(true);
    });
    let mut demo = Demo::default();
    let outcome = demo.run(keep, rx).await;
    let torn = demo.teardown().await;
    match (outcome, torn) {
        (Ok(()), Ok(())) => Ok(0),
        (Err(e), Ok(())) if e.is::<Interrupted>() => {
            step("stopped on request; nothing is left behind");
            Ok(0)
        }
        (Err(e), Ok(())) => Err(e),
        (Ok(()), Err(t)) => Err(t.context("teardown")),
        (Err(e), Err(t)) => Err(e.context(format!("and then the teardown failed: {t:#}"))),
    }
}

impl Demo {
    async fn run(&mut self, keep: bool, mut stop: watch::Receiver<bool>) -> Result<()> {
        let secs = load_secs()?;
        step("image archives (pause, spin-cpu)");
        let dir = build_images()?;
        check(&stop)?;

        let shim = integration::require_shim()?;
        step(format!(
            "starting a private containerd 1.6 (runtime `{HANDLER}` = {}, shim {})",
            integration::SPIN_RUNTIME,
            shim.display()
        ));
        let node = Node::start(ContainerdVersion::V1_6, LAYOUT, true)?;
        println!(
            "    pid {}, root/state/socket under {}",
            node.containerd.pid(),
            node.dir().display()
        );
        let socket = node.socket();
        let node = self.node.insert(node);
        for archive in ["pause.tar", "spin-cpu.tar"] {
            node.import(&dir.join(archive))
                .with_context(|| format!("containerd log:\n{}", node.log_tail()))?;
        }
        println!("    imported the pause and spin-cpu images into namespace k8s.io");
        check(&stop)?;

        step("kubelet: Burstable pod cgroup (systemd driver names), RunPodSandbox (host network)");
        let cri = self
            .cri
            .insert(Cri::connect(&socket, Duration::from_secs(30)).await?);
        let logs = self.logs.insert(
            tempfile::Builder::new()
                .prefix("kubelet-demo-logs-")
                .tempdir_in("/tmp")?,
        );
        let pod = KubeletPod::start(
            cri,
            LAYOUT,
            CgroupDriver::Systemd,
            QOS,
            HANDLER,
            "spin-cpu-demo",
            logs.path(),
        )
        .await
        .with_context(|| format!("containerd log:\n{}", node.log_tail()))?;
        println!(
            "    sandbox {} (pause pid {})",
            short(&pod.sandbox_id),
            pod.sandbox_pid
        );
        let pod = self.pod.insert(pod);
        check(&stop)?;

        let port = scenario::free_loopback_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        step(format!(
            "CreateContainer + StartContainer: spin-cpu, SPIN_HTTP_LISTEN_ADDR={addr}, requests 100m / limit 500m CPU"
        ));
        let (shares, quota) = kubelet::sample_cpu_resources(QOS);
        let spec = ContainerSpec {
            name: "spin-cpu".into(),
            image: cri_tests::node::SPIN_CPU_IMAGE.into(),
            command: vec!["/".into()],
            envs: vec![("SPIN_HTTP_LISTEN_ADDR".into(), addr.to_string())],
            cpu_shares: shares,
            cpu_quota: quota,
            ..Default::default()
        };
        let id = cri
            .start_container(&pod.sandbox_id, &pod.spec, &spec)
            .await
            .with_context(|| format!("containerd log:\n{}", node.log_tail()))?;
        self.container = Some((id.clone(), 0));
        let pid = cri.container_pid(&id).await?;
        self.container = Some((id.clone(), pid));
        println!("    container {} (pid {pid})", short(&id));

        step(format!("waiting for the app on http://{addr}/"));
        let health =
            scenario::wait_http_ok(addr, "/.well-known/spin/health", Duration::from_secs(60));
        if let Err(e) = interruptible(&mut stop, health).await {
            if e.is::<Interrupted>() {
                return Err(e);
            }
            let state = cri.container_state(&id).await.unwrap_or_default();
            bail!("the Spin app did not come up ({state}): {e:#}");
        }
        let (status, body) = tokio::task::spawn_blocking(move || {
            scenario::http_get(addr, HELLO_PATH, Duration::from_secs(10))
        })
        .await??;
        println!(
            "    GET {HELLO_PATH} -> HTTP {status}: {}",
            dechunk(&body).trim()
        );
        ensure!(status == 200, "GET {HELLO_PATH} answered {status}: {body}");

        step("where the container runs (it must be inside the pod cgroup)");
        let cpuacct = pod.check_inside(pid, "the Spin container")?;
        let proc_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
        let unified = cgroups::parse_proc_cgroup(&proc_cgroup, Layout::Unified)
            .context("the container has no unified (0::) cgroup")?;
        println!("    pod cgroup        {}", pod.cgroups.pod_path);
        println!("    container cgroup  {cpuacct}  (v1 cpuacct)");
        println!("    container cgroup  {unified}  (unified)");

        if keep {
            println!("\nThe app keeps running. Call it:");
            println!("  curl 'http://{addr}/?n=25'");
            println!("  curl 'http://{addr}{LOAD_PATH}'");
            println!("{READY_MARKER}");
            let _ = std::io::stdout().flush();
            let _ = stop.wait_for(|s| *s).await;
            step("stop requested: tearing down");
            return Ok(());
        }

        step(format!("load: 2 clients x GET {LOAD_PATH} for {secs} s"));
        let hs = pod.cgroups.hierarchies.clone();
        let read = |pod: &KubeletPod| -> Result<Snapshot> {
            Ok(Snapshot {
                at: Instant::now(),
                container_ns: cgroups::cpu_usage_ns(&hs, LAYOUT, &cpuacct)?,
                pod_ns: pod.cgroups.cpu_usage_ns(LAYOUT)?,
            })
        };
        let before = read(pod)?;
        let requests = interruptible(
            &mut stop,
            scenario::load(addr, LOAD_PATH, 2, Duration::from_secs(secs)),
        )
        .await?;
        let after = read(pod)?;
        println!("    {requests} requests answered 200");

        let memory = cgroups::v1_hierarchy(&hs, "memory").context("no v1 memory hierarchy")?;
        let container_ws = cgroups::memory_working_set(&cgroups::cgroup_dir(
            memory,
            &cgroups::process_v1_cgroup(pid, "memory")?,
        ))?;
        let pod_ws = pod.cgroups.memory_working_set()?;
        let v2 = cgroups::unified_hierarchy(&hs).context("no unified hierarchy")?;
        let psi = |cgroup: &str| -> Result<Option<f64>> {
            let file = cgroups::cgroup_dir(v2, cgroup).join("cpu.pressure");
            Ok(cgroup_placement::read_psi(&file)?.and_then(|p| p.some.as_ref().map(|d| d.avg10)))
        };
        let stats = cri.container_stats(&id).await?;
        let fig = Figures {
            seconds: after.at.duration_since(before.at).as_secs_f64(),
            container_cpu_ns: after.container_ns.saturating_sub(before.container_ns),
            pod_cpu_ns: after.pod_ns.saturating_sub(before.pod_ns),
            container_total_ns: after.container_ns,
            pod_total_ns: after.pod_ns,
            container_ws,
            pod_ws,
            container_psi: psi(&unified)?,
            pod_psi: psi(&pod.cgroups.pod_path)?,
            cri_cpu_ns: cri::cpu_ns(&stats),
            cri_ws: cri::working_set(&stats),
        };
        step("what kubelet / cAdvisor read (kubectl top, HPA)");
        print!("{}", fig.table());
        ensure!(
            fig.pod_total_ns as f64 >= 0.9 * fig.container_total_ns as f64,
            "the pod cgroup accounts {} ns CPU, less than 90% of the container's {} ns: \
             the container is not placed under its pod",
            fig.pod_total_ns,
            fig.container_total_ns
        );
        Ok(())
    }

    /// Removes what exists, in reverse order; each CRI call is bounded.
    async fn teardown(&mut self) -> Result<()> {
        if self.node.is_none() && self.pod.is_none() {
            return Ok(());
        }
        step("teardown: container, pod sandbox, pod cgroups, containerd, temp dirs");
        let mut errors = Vec::new();
        let mut pids = Vec::new();
        if let (Some(cri), Some((id, pid))) = (self.cri.as_mut(), self.container.take()) {
            pids.push(pid);
            match tokio::time::timeout(CRI_TIMEOUT, cri.remove_container(&id, 5)).await {
                Ok(Ok(())) => println!("    removed container {}", short(&id)),
                Ok(Err(e)) => errors.push(format!("{e:#}")),
                Err(_) => errors.push(format!("RemoveContainer {id} took over {CRI_TIMEOUT:?}")),
            }
        }
        if let Some(pod) = self.pod.take() {
            let pod_path = pod.cgroups.pod_path.clone();
            let sandbox = pod.sandbox_id.clone();
            match self.cri.as_mut() {
                Some(cri) => {
                    match tokio::time::timeout(2 * CRI_TIMEOUT, pod.teardown(cri, &pids)).await {
                        Ok(Ok(())) => {
                            println!(
                                "    removed sandbox {} and pod cgroups {pod_path}",
                                short(&sandbox)
                            )
                        }
                        Ok(Err(e)) => errors.push(format!("{e:#}")),
                        Err(_) => errors.push(format!(
                            "removing pod {sandbox} took over {:?}",
                            2 * CRI_TIMEOUT
                        )),
                    }
                }
                None => drop(pod),
            }
        }
        self.cri = None;
        if let Some(node) = self.node.take() {
            let dir = node.dir().to_path_buf();
            let pid = node.containerd.pid();
            let dir_text = dir.to_string_lossy().into_owned();
            drop(node);
            println!(
                "    stopped containerd (pid {pid}), removed {}",
                dir.display()
            );
            let left = scenario::processes_mentioning(&dir_text);
            if !left.is_empty() {
                errors.push(format!("processes still naming {dir_text}: {left:?}"));
            }
            let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            if mounts.contains(&dir_text) {
                errors.push(format!("mounts below {dir_text} remain"));
            }
            if dir.exists() {
                errors.push(format!("{} remains", dir.display()));
            }
        }
        if let Some(logs) = self.logs.take() {
            let path = logs.path().to_path_buf();
            logs.close()
                .with_context(|| format!("removing {}", path.display()))?;
        }
        if errors.is_empty() {
            println!("    nothing left behind (processes, cgroups, mounts, temp dirs)");
            Ok(())
        } else {
            bail!("teardown left problems: {}", errors.join("; "))
        }
    }
}

/// `DEMO_LOAD_SECS` (1..=60), default 5.
fn load_secs() -> Result<u64> {
    match std::env::var("DEMO_LOAD_SECS") {
        Err(_) => Ok(5),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if (1..=60).contains(&n) => Ok(n),
            _ => bail!("DEMO_LOAD_SECS={v:?}: give a whole number of seconds from 1 to 60"),
        },
    }
}

/// The payload of a `Transfer-Encoding: chunked` body, or `body` itself when it is not
/// one (for display only).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 {
            return out;
        }
        let (Some(chunk), Some(tail)) = (after.get(..n), after.get(n..)) else {
            return body.to_string();
        };
        out.push_str(chunk);
        rest = tail.strip_prefix("\r\n").unwrap_or(tail);
    }
}

/// The first 12 characters of an id, as crictl shows them.
fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// The figures of the load phase.
#[derive(Debug, Default)]
struct Figures {
    seconds: f64,
    container_cpu_ns: u64,
    pod_cpu_ns: u64,
    container_total_ns: u64,
    pod_total_ns: u64,
    container_ws: u64,
    pod_ws: u64,
    container_psi: Option<f64>,
    pod_psi: Option<f64>,
    cri_cpu_ns: u64,
    cri_ws: u64,
}

impl Figures {
    /// The table the demo prints: container, pod and their ratio.
    fn table(&self) -> String {
        let millicores = |ns: u64| ns as f64 / 1e6 / self.seconds.max(1e-9);
        let ratio = |pod: f64, c: f64| {
            if c > 0.0 {
                format!("{:.2}", pod / c)
            } else {
                "-".to_string()
            }
        };
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
        let psi = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
        let rows = [
            (
                format!("CPU during {:.1} s of load", self.seconds),
                format!("{:.3} s", self.container_cpu_ns as f64 / 1e9),
                format!("{:.3} s", self.pod_cpu_ns as f64 / 1e9),
                ratio(self.pod_cpu_ns as f64, self.container_cpu_ns as f64),
            ),
            (
                "CPU rate (kubectl top, HPA)".to_string(),
                format!("{:.0}m", millicores(self.container_cpu_ns)),
                format!("{:.0}m", millicores(self.pod_cpu_ns)),
                ratio(self.pod_cpu_ns as f64, self.container_cpu_ns as f64),
            ),
            (
                "CPU since start".to_string(),
                format!("{:.3} s", self.container_total_ns as f64 / 1e9),
                format!("{:.3} s", self.pod_total_ns as f64 / 1e9),
                ratio(self.pod_total_ns as f64, self.container_total_ns as f64),
            ),
            (
                "working set (memory)".to_string(),
                mib(self.container_ws),
                mib(self.pod_ws),
                ratio(self.pod_ws as f64, self.container_ws as f64),
            ),
            (
                "CPU PSI some avg10 (v2)".to_string(),
                psi(self.container_psi),
                psi(self.pod_psi),
                String::new(),
            ),
            (
                "CRI ContainerStats CPU".to_string(),
                format!("{:.3} s", self.cri_cpu_ns as f64 / 1e9),
                String::new(),
                String::new(),
            ),
            (
                "CRI ContainerStats working set".to_string(),
                mib(self.cri_ws),
                String::new(),
                String::new(),
            ),
        ];
        let mut out = format!(
            "    {:<30} {:>12} {:>12} {:>15}\n",
            "", "container", "pod", "pod/container"
        );
        for (name, c, p, r) in rows {
            out.push_str(&format!("    {name:<30} {c:>12} {p:>12} {r:>15}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_rates_and_ratios() {
        let f = Figures {
            seconds: 2.0,
            container_cpu_ns: 1_000_000_000,
            pod_cpu_ns: 1_010_000_000,
            container_total_ns: 1_200_000_000,
            pod_total_ns: 1_250_000_000,
            container_ws: 3 * 1024 * 1024,
            pod_ws: 4 * 1024 * 1024,
            container_psi: Some(12.5),
            pod_psi: None,
            cri_cpu_ns: 1_300_000_000,
            cri_ws: 3 * 1024 * 1024,
        };
        let t = f.table();
        assert!(t.contains("500m"), "{t}");
        assert!(t.contains("505m"), "{t}");
        assert!(t.contains("1.01"), "{t}");
        assert!(t.contains("3.0 MiB") && t.contains("4.0 MiB"), "{t}");
        assert!(t.contains("12.50") && t.contains("n/a"), "{t}");
        assert!(t.contains("1.300 s"), "{t}");
        assert!(t.lines().all(|l| l.len() <= 80), "{t}");
    }

    #[test]
    fn zero_container_cpu_has_no_ratio() {
        let f = Figures {
            seconds: 1.0,
            ..Default::default()
        };
        assert!(f.table().lines().nth(1).unwrap().trim_end().ends_with('-'));
    }

    #[test]
    fn chunked_bodies() {
        assert_eq!(
            dechunk("10\r\nfib(25) = 75025\n\r\n0\r\n\r\n"),
            "fib(25) = 75025\n"
        );
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
        assert_eq!(dechunk("plain text"), "plain text");
        assert_eq!(dechunk("ff\r\nshort"), "ff\r\nshort");
    }

    #[test]
    fn short_ids() {
        assert_eq!(short("0123456789abcdef"), "0123456789ab");
        assert_eq!(short("abc"), "abc");
    }
}
