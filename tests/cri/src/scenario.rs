//! The pod-metrics scenario end to end: a kubelet-style pod through CRI, load, the figures
//! kubelet/cAdvisor read, and a teardown that must leave nothing behind.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::cgroups::{self, Layout, PodCgroups};
use crate::cri::{self, ContainerSpec, Cri, PodSpec};
use crate::kubelet::{self, CgroupDriver, QosClass};

/// A pod as kubelet would set it up: cgroups first, then RunPodSandbox.
pub struct KubeletPod {
    /// The pod's cgroups (removed on drop if still there).
    pub cgroups: PodCgroups,
    /// What was sent to RunPodSandbox.
    pub spec: PodSpec,
    /// The sandbox id, once running.
    pub sandbox_id: String,
    /// The host pid of the sandbox (pause) process.
    pub sandbox_pid: u32,
    /// The layout the pod lives in.
    pub layout: Layout,
}

pub use kubelet_pod::kubelet::new_uid;

impl KubeletPod {
    /// Creates the pod cgroups for (`driver`, `qos`) in every hierarchy of `layout` and runs
    /// the sandbox with `handler`.
    pub async fn start(
        cri: &mut Cri,
        layout: Layout,
        driver: CgroupDriver,
        qos: QosClass,
        handler: &str,
        name: &str,
        log_root: &Path,
    ) -> Result<Self> {
        let uid = new_uid()?;
        let levels = kubelet::pod_cgroup_levels(driver, qos, &uid);
        let cgroups = PodCgroups::create(layout, &levels)?;
        let spec = PodSpec {
            name: name.to_string(),
            uid: uid.clone(),
            namespace: "default".into(),
            cgroup_parent: cgroups.pod_path.clone(),
            handler: handler.to_string(),
            log_directory: log_root.join(format!("default_{name}_{uid}")),
        };
        let sandbox_id = cri.run_pod(&spec).await?;
        let mut pod = KubeletPod {
            cgroups,
            spec,
            sandbox_id,
            sandbox_pid: 0,
            layout,
        };
        pod.sandbox_pid = cri.sandbox_pid(&pod.sandbox_id).await?;
        Ok(pod)
    }

    /// Where process `pid` sits, relative to the pod cgroup: `Ok(path)` when inside in every
    /// hierarchy the pod has (v1 controllers, name=systemd and unified on the hybrid layout;
    /// unified on the v2 layout), otherwise an error naming the hierarchy and path.
    pub fn check_inside(&self, pid: u32, what: &str) -> Result<String> {
        let file = format!("/proc/{pid}/cgroup");
        let text =
            std::fs::read_to_string(&file).with_context(|| format!("reading {file} ({what})"))?;
        for line in integration::cgroups::parse_proc_cgroups(&text) {
            let (controllers, path) = (line.controllers.as_str(), line.path.as_str());
            let relevant = match self.layout {
                Layout::Unified => controllers.is_empty(),
                Layout::Hybrid => true,
            };
            if relevant && !cgroups::is_within(path, &self.cgroups.pod_path) {
                bail!(
                    "{what} (pid {pid}) is outside the pod cgroup {} in hierarchy {:?}: {path}",
                    self.cgroups.pod_path,
                    if controllers.is_empty() {
                        "unified"
                    } else {
                        controllers
                    }
                );
            }
        }
        cgroups::process_cgroup(pid, self.layout)
    }

    /// StopPodSandbox + RemovePodSandbox, then checks that nothing of the pod remains:
    /// no process of it (pause, container, the pod's shim), no child cgroup under the pod
    /// cgroup; finally removes the pod cgroups as kubelet does.
    pub async fn teardown(self, cri: &mut Cri, pids: &[u32]) -> Result<()> {
        cri.remove_pod(&self.sandbox_id).await?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let alive: Vec<u32> = pids
                .iter()
                .chain(std::iter::once(&self.sandbox_pid))
                .copied()
                .filter(|p| process_alive(*p))
                .collect();
            let shims = processes_mentioning(&self.sandbox_id);
            let children = self.cgroups.children();
            if alive.is_empty() && shims.is_empty() && children.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "pod {} left things behind after RemovePodSandbox: live pids {alive:?}, \
                     processes naming the sandbox {shims:?}, cgroups {children:?}",
                    self.spec.name
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let pod_dirs: Vec<PathBuf> = self
            .cgroups
            .hierarchies
            .iter()
            .map(|h| self.cgroups.dir(h))
            .collect();
        drop(self.cgroups);
        let left: Vec<&PathBuf> = pod_dirs.iter().filter(|d| d.exists()).collect();
        ensure!(
            left.is_empty(),
            "pod cgroups could not be removed: {left:?}"
        );
        Ok(())
    }
}

/// `true` when `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Pids of processes whose command line contains `needle` (e.g. a shim's `-id <sandbox>`).
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) && process_alive(pid) {
                out.push(pid);
            }
        }
    }
    out
}

/// A new kubelet-style pod for a Spin app: systemd driver, BestEffort, handler `spin`.
pub async fn spin_pod(
    cri: &mut Cri,
    layout: Layout,
    name: &str,
    log_root: &Path,
) -> Result<KubeletPod> {
    KubeletPod::start(
        cri,
        layout,
        CgroupDriver::Systemd,
        QosClass::BestEffort,
        "spin",
        name,
        log_root,
    )
    .await
}

/// Runs one app container in a new kubelet-style pod (systemd driver, BestEffort, handler
/// `spin`, in `layout`): `spec` gets `SPIN_HTTP_LISTEN_ADDR` on a free loopback port; when
/// `ready_path` is given, waits (up to 120 s) until it answers 200 over plain HTTP; checks
/// the container sits in its pod's cgroup, runs `checks` on the address, then removes the
/// container and the pod and checks nothing is left. Returns what `checks` returned.
pub async fn serve_in_pod(
    cri: &mut Cri,
    layout: Layout,
    log_root: &Path,
    name: &str,
    mut spec: ContainerSpec,
    ready_path: Option<&str>,
    checks: impl FnOnce(SocketAddr) -> Result<String>,
) -> Result<String> {
    let pod = spin_pod(cri, layout, name, log_root).await?;
    let addr: SocketAddr = ([127, 0, 0, 1], free_loopback_port()?).into();
    spec.envs
        .push(("SPIN_HTTP_LISTEN_ADDR".to_string(), addr.to_string()));
    let run = async {
        let id = cri
            .start_container(&pod.sandbox_id, &pod.spec, &spec)
            .await?;
        let pid = cri.container_pid(&id).await?;
        if let Some(path) = ready_path {
            if let Err(e) = wait_http_ok(addr, path, Duration::from_secs(120)).await {
                let state = cri.container_state(&id).await.unwrap_or_default();
                bail!("{name} did not come up ({state}): {e:#}");
            }
        }
        pod.check_inside(pid, name)?;
        let line = checks(addr)?;
        cri.remove_container(&id, 10).await?;
        anyhow::Ok((line, pid))
    }
    .await;
    let (line, pid) = match run {
        Ok(v) => v,
        Err(e) => {
            let _ = cri.remove_pod(&pod.sandbox_id).await;
            return Err(e);
        }
    };
    pod.teardown(cri, &[pid]).await?;
    Ok(line)
}

/// A loopback port that was free a moment ago.
pub fn free_loopback_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// One HTTP/1.1 GET; returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .with_context(|| format!("reading the response of {addr}{path}"))?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status in the response of {addr}{path}: {text:?}"))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked {
        dechunk(body).with_context(|| format!("bad chunked body from {addr}{path}: {body:?}"))?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// Decodes an HTTP/1.1 chunked body (extensions and trailers ignored).
fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// Waits until `GET path` answers 200 (bounded by `timeout`).
pub async fn wait_http_ok(addr: SocketAddr, path: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        let p = path.to_string();
        match tokio::task::spawn_blocking(move || http_get(addr, &p, Duration::from_secs(2)))
            .await?
        {
            Ok((200, _)) => return Ok(()),
            Ok((code, body)) => last = format!("status {code}: {body}"),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("{addr}{path} did not answer 200 within {timeout:?}; last: {last}")
}

/// Sends `GET path` from `clients` parallel clients for `duration`; returns the number of
/// 200 answers. Any other answer is an error.
pub async fn load(
    addr: SocketAddr,
    path: &str,
    clients: usize,
    duration: Duration,
) -> Result<usize> {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let p = path.to_string();
        tasks.push(tokio::task::spawn_blocking(move || -> Result<usize> {
            let mut ok = 0;
            while Instant::now() < deadline {
                let (code, body) = http_get(addr, &p, Duration::from_secs(30))?;
                ensure!(code == 200, "load request {p} answered {code}: {body}");
                ok += 1;
            }
            Ok(ok)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total)
}

/// Figures of one Spin pod run, printed by the tests.
#[derive(Debug, Default)]
pub struct SpinFigures {
    /// Requests served during the load.
    pub requests: usize,
    /// The container's own cgroup CPU (ns).
    pub container_cpu_ns: u64,
    /// The pod cgroup's CPU (ns), read after the container's.
    pub pod_cpu_ns: u64,
    /// The pod cgroup's memory working set (v1 only, else 0).
    pub pod_working_set: u64,
    /// CRI ContainerStats CPU (ns).
    pub cri_cpu_ns: u64,
    /// CRI ListContainerStats CPU of the container (ns).
    pub cri_list_cpu_ns: u64,
    /// CRI working set (bytes).
    pub cri_working_set: u64,
    /// The container's cgroup (cpuacct on v1, unified on v2).
    pub container_cgroup: String,
    /// The sandbox id (for leak checks after the teardown).
    pub sandbox_id: String,
    /// The container id (for leak checks after the teardown).
    pub container_id: String,
}

/// Runs the Spin CPU app in a kubelet-style pod with `handler`, loads it, checks every
/// figure kubelet/cAdvisor use and tears down. `image` is a spin-in-container image
/// (command `/`).
#[allow(clippy::too_many_arguments)]
pub async fn spin_pod_scenario(
    cri: &mut Cri,
    layout: Layout,
    driver: CgroupDriver,
    qos: QosClass,
    handler: &str,
    image: &str,
    log_root: &Path,
    load_for: Duration,
) -> Result<SpinFigures> {
    let name = format!("spin-cpu-{driver}");
    let mut pod = KubeletPod::start(cri, layout, driver, qos, handler, &name, log_root).await?;
    let result = spin_pod_checks(cri, &mut pod, qos, image, load_for).await;
    let (figures, container) = match result {
        Ok(v) => v,
        Err(e) => {
            // Still take the pod down (and its cgroups through the guard).
            let _ = cri.remove_pod(&pod.sandbox_id).await;
            return Err(e);
        }
    };
    let (id, pid) = container;
    cri.remove_container(&id, 10).await?;
    pod.teardown(cri, &[pid]).await?;
    Ok(figures)
}

async fn spin_pod_checks(
    cri: &mut Cri,
    pod: &mut KubeletPod,
    qos: QosClass,
    image: &str,
    load_for: Duration,
) -> Result<(SpinFigures, (String, u32))> {
    pod.check_inside(pod.sandbox_pid, "the pause process")?;
    let port = free_loopback_port()?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let spec = ContainerSpec {
        name: "spin-cpu".into(),
        image: image.to_string(),
        command: vec!["/".into()],
        envs: vec![("SPIN_HTTP_LISTEN_ADDR".into(), addr.to_string())],
        cpu_shares: kubelet::sample_cpu_resources(qos).0,
        cpu_quota: kubelet::sample_cpu_resources(qos).1,
        ..Default::default()
    };
    let id = cri
        .start_container(&pod.sandbox_id, &pod.spec, &spec)
        .await?;
    let pid = cri.container_pid(&id).await?;
    let figures = async {
        if let Err(e) = wait_http_ok(addr, "/.well-known/spin/health", Duration::from_secs(60)).await {
            let state = cri.container_state(&id).await.unwrap_or_default();
            bail!("the Spin app did not come up ({state}): {e:#}");
        }
        let container_cgroup = pod.check_inside(pid, "the Spin container")?;
        let requests = load(addr, "/load?n=32", 2, load_for).await?;
        ensure!(requests > 0, "no request completed during the load");
        let hs = pod.cgroups.hierarchies.clone();
        // Container first, then pod: the pod can only have grown in between.
        let container_cpu_ns = cgroups::cpu_usage_ns(&hs, pod.layout, &container_cgroup)?;
        let pod_cpu_ns = pod.cgroups.cpu_usage_ns(pod.layout)?;
        ensure!(
            container_cpu_ns >= 200_000_000,
            "the container's cgroup {container_cgroup} shows only {container_cpu_ns} ns CPU after {requests} requests"
        );
        ensure!(pod_cpu_ns > 0, "the pod cgroup {} reads 0 CPU", pod.cgroups.pod_path);
        ensure!(
            pod_cpu_ns as f64 >= 0.9 * container_cpu_ns as f64,
            "pod cgroup CPU {pod_cpu_ns} ns < 90% of the container's {container_cpu_ns} ns"
        );
        // The limit kubelet sent (CFS quota) is in force on v1, where the cpu controller
        // exists (the simulated v2 host has none: the shim skips it there).
        let (_, quota) = kubelet::sample_cpu_resources(qos);
        if pod.layout == Layout::Hybrid && quota > 0 {
            let cpu = cgroups::v1_hierarchy(&pod.cgroups.hierarchies, "cpu").context("no v1 cpu hierarchy")?;
            let dir = cgroups::cgroup_dir(cpu, &cgroups::process_v1_cgroup(pid, "cpu")?);
            let set = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
                .with_context(|| format!("reading {}/cpu.cfs_quota_us", dir.display()))?;
            ensure!(
                set.trim() == quota.to_string(),
                "container CPU quota is {} in {}, kubelet asked for {quota}",
                set.trim(),
                dir.display()
            );
        }
        let pod_working_set = if pod.layout == Layout::Hybrid {
            let ws = pod.cgroups.memory_working_set()?;
            ensure!(ws > 0, "pod memory working set is 0");
            ws
        } else {
            0
        };
        let stats = cri.container_stats(&id).await?;
        let cri_cpu_ns = cri::cpu_ns(&stats);
        ensure!(cri_cpu_ns > 0, "CRI ContainerStats reports no CPU: {stats:?}");
        let cri_working_set = cri::working_set(&stats);
        if pod.layout == Layout::Hybrid {
            ensure!(cri_working_set > 0, "CRI ContainerStats reports no working set: {stats:?}");
        }
        let listed = cri.list_container_stats(&pod.sandbox_id).await?;
        let mine = listed
            .iter()
            .find(|s| s.attributes.as_ref().map(|a| a.id == id).unwrap_or(false))
            .with_context(|| format!("ListContainerStats lacks container {id}: {listed:?}"))?;
        let cri_list_cpu_ns = cri::cpu_ns(mine);
        ensure!(cri_list_cpu_ns > 0, "ListContainerStats reports no CPU: {mine:?}");
        Ok(SpinFigures {
            requests,
            container_cpu_ns,
            pod_cpu_ns,
            pod_working_set,
            cri_cpu_ns,
            cri_list_cpu_ns,
            cri_working_set,
            container_cgroup,
            sandbox_id: pod.sandbox_id.clone(),
            container_id: id.clone(),
        })
    }
    .await;
    match figures {
        Ok(f) => Ok((f, (id, pid))),
        Err(e) => {
            let _ = cri.remove_container(&id, 5).await;
            Err(e)
        }
    }
}

/// Figures of the runc control run.
#[derive(Debug, Default)]
pub struct ControlFigures {
    /// Where runc put the container (cpuacct hierarchy).
    pub container_cgroup: String,
    /// The container's own CPU (ns).
    pub container_cpu_ns: u64,
    /// The pod cgroup's CPU (ns).
    pub pod_cpu_ns: u64,
}

/// The seed failure, reproduced: runc with its cgroupfs driver under a kubelet systemd-style
/// parent puts the container outside the pod cgroup, so the pod cgroup reads (almost) 0
/// while the container burns CPU. Hybrid (v1) layout only. `burner` is a native image with
/// `/bin/sh`.
pub async fn runc_control_scenario(
    cri: &mut Cri,
    burner: &str,
    log_root: &Path,
    burn_for: Duration,
) -> Result<ControlFigures> {
    let layout = Layout::Hybrid;
    let pod = KubeletPod::start(
        cri,
        layout,
        CgroupDriver::Systemd,
        QosClass::Burstable,
        "runc",
        "runc-control",
        log_root,
    )
    .await?;
    let spec = ContainerSpec {
        name: "burner".into(),
        image: burner.to_string(),
        command: vec!["/bin/sh".into(), "-c".into(), "while :; do :; done".into()],
        ..Default::default()
    };
    let checks = async {
        let id = cri
            .start_container(&pod.sandbox_id, &pod.spec, &spec)
            .await?;
        let pid = cri.container_pid(&id).await?;
        tokio::time::sleep(burn_for).await;
        let container_cgroup = cgroups::process_cgroup(pid, layout)?;
        let hs = pod.cgroups.hierarchies.clone();
        let container_cpu_ns = cgroups::cpu_usage_ns(&hs, layout, &container_cgroup)?;
        let pod_cpu_ns = pod.cgroups.cpu_usage_ns(layout)?;
        Ok::<_, anyhow::Error>((id, pid, container_cgroup, container_cpu_ns, pod_cpu_ns))
    }
    .await;
    let (id, pid, container_cgroup, container_cpu_ns, pod_cpu_ns) = match checks {
        Ok(v) => v,
        Err(e) => {
            let _ = cri.remove_pod(&pod.sandbox_id).await;
            return Err(e);
        }
    };
    cri.remove_container(&id, 2).await?;
    pod.teardown(cri, &[pid]).await?;
    Ok(ControlFigures {
        container_cgroup,
        container_cpu_ns,
        pod_cpu_ns,
    })
}
