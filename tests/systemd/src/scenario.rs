//! The node scenarios: one pod per cgroup driver, driven through CRI as kubelet would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use cri_tests::cgroups::{flat_key, process_cgroup, Layout, PodCgroups};
use cri_tests::cri::{cpu_ns, ContainerSpec, Cri, PodSpec};
use cri_tests::kubelet::{pod_cgroup_levels, pod_cgroup_parent, CgroupDriver, QosClass};
use cri_tests::scenario::{free_loopback_port, load, new_uid, wait_http_ok};

use crate::metrics::{parse_ctr_metrics, V2Metrics};
use crate::systemd::{self, PodSlice};

/// Where the node's cgroup v2 hierarchy is mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Spin's built-in health route: the app is up when it answers 200.
const HEALTH_PATH: &str = "/.well-known/spin/health";

/// What the scenarios run and where.
#[derive(Debug, Clone)]
pub struct Config {
    /// containerd's socket (CRI and the containerd API are served on the same one).
    pub socket: PathBuf,
    /// The `ctr` used for `ctr task metrics` (1.7+ to see PSI).
    pub ctr: PathBuf,
    /// RuntimeClass handler under test.
    pub handler: String,
    /// Image of the app container (imported into namespace `k8s.io`).
    pub image: String,
    /// Container command (`["/"]` for a spin-in-container image).
    pub command: Vec<String>,
    /// HTTP path that loads the CPU (e.g. `/load?n=32` for the fib app).
    pub load_path: String,
    /// How long to load the pod.
    pub load: Duration,
    /// Fail when the metrics carry no PSI.
    pub require_psi: bool,
}

/// Figures a systemd-driver run measured.
#[derive(Debug, Clone, Default)]
pub struct SystemdFigures {
    /// Requests answered under load.
    pub requests: usize,
    /// `usage_usec` of the container's scope.
    pub scope_usec: u64,
    /// `usage_usec` of the pod slice (read after the scope's).
    pub pod_usec: u64,
    /// CRI ContainerStats CPU (ns).
    pub cri_cpu_ns: u64,
    /// What `ctr task metrics` reported.
    pub metrics: Option<V2Metrics>,
}

/// Figures a cgroupfs-driver run measured.
#[derive(Debug, Clone, Default)]
pub struct CgroupfsFigures {
    /// `usage_usec` of the container's cgroup.
    pub container_usec: u64,
    /// `usage_usec` of the pod cgroup.
    pub pod_usec: u64,
}

#[derive(Default)]
struct Ids {
    sandbox: Option<String>,
    container: Option<String>,
}

fn usage_usec(cgroup: &str) -> Result<u64> {
    let file = format!("{CGROUP_ROOT}{cgroup}/cpu.stat");
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
    flat_key(&text, "usage_usec").with_context(|| format!("no usage_usec in {file}"))
}

fn pod_spec(cfg: &Config, uid: &str, parent: &str, tag: &str) -> PodSpec {
    let name = format!("systemd-node-{tag}-{}", &uid[..8]);
    PodSpec {
        log_directory: PathBuf::from(format!("/var/log/pods/default_{name}_{uid}")),
        name,
        uid: uid.to_string(),
        namespace: "default".into(),
        cgroup_parent: parent.to_string(),
        handler: cfg.handler.clone(),
    }
}

fn app_container(cfg: &Config, port: u16) -> ContainerSpec {
    ContainerSpec {
        name: "app".into(),
        image: cfg.image.clone(),
        command: cfg.command.clone(),
        envs: vec![("SPIN_HTTP_LISTEN_ADDR".into(), format!("127.0.0.1:{port}"))],
        ..Default::default()
    }
}

async fn start_pod(
    cri: &mut Cri,
    cfg: &Config,
    pod: &PodSpec,
    port: u16,
    ids: &mut Ids,
) -> Result<(String, String)> {
    let sandbox = cri.run_pod(pod).await?;
    ids.sandbox = Some(sandbox.clone());
    let container = cri
        .start_container(&sandbox, pod, &app_container(cfg, port))
        .await?;
    ids.container = Some(container.clone());
    Ok((sandbox, container))
}

/// Stops and removes what a run started (container first, as kubelet), even after a failure.
async fn remove_pod(cri: &mut Cri, ids: &mut Ids) -> Result<()> {
    let mut first_err = None;
    if let Some(c) = ids.container.take() {
        if let Err(e) = cri.remove_container(&c, 10).await {
            first_err.get_or_insert(e);
        }
    }
    if let Some(s) = ids.sandbox.take() {
        if let Err(e) = cri.remove_pod(&s).await {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

fn check_process_cgroup(what: &str, pid: u32, expected: &str) -> Result<()> {
    let actual = process_cgroup(pid, Layout::Unified)?;
    ensure!(
        actual == expected,
        "{what} (pid {pid}) is in cgroup {actual}, expected {expected}"
    );
    println!("  {what} pid {pid} in {actual}");
    Ok(())
}

fn check_scope_unit(scope: &str, slice: &str, cgroup: &str) -> Result<()> {
    let props = systemd::show(
        scope,
        &[
            "LoadState",
            "ActiveState",
            "SubState",
            "Transient",
            "Delegate",
            "Slice",
            "ControlGroup",
        ],
    )?;
    let want = [
        ("LoadState", "loaded"),
        ("ActiveState", "active"),
        ("SubState", "running"),
        ("Transient", "yes"),
        ("Delegate", "yes"),
        ("Slice", slice),
        ("ControlGroup", cgroup),
    ];
    for (k, v) in want {
        let got = props.get(k).map(String::as_str).unwrap_or("<absent>");
        if got != v {
            bail!(
                "systemctl show {scope}: {k}={got}, expected {v}\n{}",
                systemd::status_text(scope)
            );
        }
    }
    println!("  {scope}: running transient unit, Delegate=yes, Slice={slice}");
    Ok(())
}

fn ctr_metrics(cfg: &Config, container: &str) -> Result<V2Metrics> {
    let out = Command::new(&cfg.ctr)
        .arg("--address")
        .arg(&cfg.socket)
        .args([
            "--namespace",
            "k8s.io",
            "task",
            "metrics",
            "--format",
            "json",
            container,
        ])
        .output()
        .with_context(|| format!("running {}", cfg.ctr.display()))?;
    if !out.status.success() {
        bail!(
            "ctr task metrics {container} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_ctr_metrics(&String::from_utf8_lossy(&out.stdout))
}

/// Fails when `cgroup` (absolute, in the node's v2 hierarchy) still exists.
fn check_cgroup_gone(cgroup: &str) -> Result<()> {
    let dir = Path::new(CGROUP_ROOT).join(cgroup.trim_start_matches('/'));
    ensure!(
        !dir.exists(),
        "cgroup {} still exists after removal",
        dir.display()
    );
    Ok(())
}

/// systemd driver: pod slice as a transient slice unit, containers in delegated scopes.
pub async fn systemd_case(cfg: &Config) -> Result<SystemdFigures> {
    let uid = new_uid()?;
    let parent = pod_cgroup_parent(CgroupDriver::Systemd, QosClass::Burstable, &uid);
    let slice_unit = parent
        .rsplit('/')
        .next()
        .context("empty cgroup parent")?
        .to_string();
    println!(
        "systemd driver: pod slice {slice_unit} ({parent}), handler {}",
        cfg.handler
    );
    let slice = PodSlice::start(&slice_unit, &parent)?;
    let mut cri = Cri::connect(&cfg.socket, Duration::from_secs(30)).await?;
    let pod = pod_spec(cfg, &uid, &parent, "sd");
    let port = free_loopback_port()?;
    let mut ids = Ids::default();

    let run = async {
        let (sandbox, container) = start_pod(&mut cri, cfg, &pod, port, &mut ids).await?;
        let scope = format!("cri-containerd-{container}.scope");
        let scope_cg = format!("{parent}/{scope}");
        let sandbox_scope = format!("cri-containerd-{sandbox}.scope");
        let sandbox_cg = format!("{parent}/{sandbox_scope}");
        check_process_cgroup("app container", cri.container_pid(&container).await?, &scope_cg)?;
        check_process_cgroup("pause (sandbox)", cri.sandbox_pid(&sandbox).await?, &sandbox_cg)?;
        check_scope_unit(&scope, &slice_unit, &scope_cg)?;
        check_scope_unit(&sandbox_scope, &slice_unit, &sandbox_cg)?;
        println!("{}", systemd::status_text(&scope));

        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_app(&mut cri, addr, &container).await?;
        let requests = load(addr, &cfg.load_path, 2, cfg.load).await?;
        let scope_usec = usage_usec(&scope_cg)?;
        let pod_usec = usage_usec(&parent)?;
        println!("  load: {requests} requests in {:?}; cpu.stat usage_usec scope {scope_usec}, pod slice {pod_usec}", cfg.load);
        ensure!(scope_usec > 0, "the scope {scope_cg} accounted no CPU under load");
        ensure!(
            pod_usec > 0 && pod_usec as f64 >= 0.9 * scope_usec as f64,
            "pod slice usage_usec {pod_usec} is below 90% of the container scope's {scope_usec}: \
             the container's CPU is not accounted to the pod"
        );
        let cri_cpu_ns = cpu_ns(&cri.container_stats(&container).await?);
        ensure!(cri_cpu_ns > 0, "CRI ContainerStats reports no CPU for {container}");
        let metrics = ctr_metrics(cfg, &container)?;
        println!("  ctr task metrics: v2 message, cpu.usage_usec {}, psi for {:?}", metrics.cpu_usage_usec, metrics.psi_of);
        ensure!(metrics.cpu_usage_usec > 0, "ctr task metrics reports 0 CPU under load");
        if cfg.require_psi {
            ensure!(!metrics.psi_of.is_empty(), "ctr task metrics carries no PSI: {metrics:?}");
        }
        Ok::<_, anyhow::Error>((
            SystemdFigures {
                requests,
                scope_usec,
                pod_usec,
                cri_cpu_ns,
                metrics: Some(metrics),
            },
            [(scope, scope_cg), (sandbox_scope, sandbox_cg)],
        ))
    }
    .await;
    let removed = remove_pod(&mut cri, &mut ids).await;
    let (figures, scopes) = run?;
    removed?;
    for (unit, cg) in &scopes {
        systemd::wait_unloaded(unit, Duration::from_secs(10))?;
        check_cgroup_gone(cg)?;
    }
    println!("  after removal: no scope unit, no scope cgroup");
    drop(slice);
    systemd::wait_inactive(&slice_unit, Duration::from_secs(10))?;
    check_cgroup_gone(&parent)?;
    Ok(figures)
}

/// Waits for the app to answer HTTP; the error carries the container's CRI state.
async fn wait_app(cri: &mut Cri, addr: SocketAddr, container: &str) -> Result<()> {
    if let Err(e) = wait_http_ok(addr, HEALTH_PATH, Duration::from_secs(60)).await {
        let state = cri
            .container_state(container)
            .await
            .unwrap_or_else(|e| format!("(status unavailable: {e:#})"));
        return Err(e.context(format!("app container {container}: {state}")));
    }
    Ok(())
}

/// cgroupfs driver on the same node: placement follows the plain path, no systemd unit.
pub async fn cgroupfs_case(cfg: &Config) -> Result<CgroupfsFigures> {
    let uid = new_uid()?;
    let levels = pod_cgroup_levels(CgroupDriver::Cgroupfs, QosClass::Burstable, &uid);
    let pod_cgroups = PodCgroups::create(Layout::Unified, &levels)?;
    let parent = pod_cgroups.pod_path.clone();
    println!(
        "cgroupfs driver: pod cgroup {parent}, handler {}",
        cfg.handler
    );
    let mut cri = Cri::connect(&cfg.socket, Duration::from_secs(30)).await?;
    let pod = pod_spec(cfg, &uid, &parent, "fs");
    let port = free_loopback_port()?;
    let mut ids = Ids::default();

    let run = async {
        let (sandbox, container) = start_pod(&mut cri, cfg, &pod, port, &mut ids).await?;
        let container_cg = format!("{parent}/{container}");
        let sandbox_cg = format!("{parent}/{sandbox}");
        check_process_cgroup(
            "app container",
            cri.container_pid(&container).await?,
            &container_cg,
        )?;
        check_process_cgroup(
            "pause (sandbox)",
            cri.sandbox_pid(&sandbox).await?,
            &sandbox_cg,
        )?;
        for id in [&container, &sandbox] {
            let unit = format!("cri-containerd-{id}.scope");
            ensure!(
                !systemd::is_loaded(&unit)?,
                "cgroupfs parent, yet systemd has a unit {unit}"
            );
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_app(&mut cri, addr, &container).await?;
        load(addr, &cfg.load_path, 1, Duration::from_secs(2)).await?;
        let container_usec = usage_usec(&container_cg)?;
        let pod_usec = usage_usec(&parent)?;
        println!("  cpu.stat usage_usec container {container_usec}, pod {pod_usec}");
        ensure!(
            container_usec > 0,
            "container cgroup {container_cg} accounted no CPU under load"
        );
        ensure!(
            pod_usec as f64 >= 0.9 * container_usec as f64,
            "pod cgroup usage_usec {pod_usec} is below 90% of the container's {container_usec}"
        );
        Ok::<_, anyhow::Error>((
            CgroupfsFigures {
                container_usec,
                pod_usec,
            },
            [container_cg, sandbox_cg],
        ))
    }
    .await;
    let removed = remove_pod(&mut cri, &mut ids).await;
    let (figures, cgroups) = run?;
    removed?;
    for cg in &cgroups {
        check_cgroup_gone(cg)?;
    }
    let left = pod_cgroups.children();
    ensure!(
        left.is_empty(),
        "cgroups left under the pod cgroup: {left:?}"
    );
    println!("  after removal: no container cgroup");
    Ok(figures)
}
