//! `doctor --run`: a test pod through containerd's CRI socket, set up as kubelet sets one
//! up (pod cgroup per kubelet's driver, RunPodSandbox with the shim's handler, a Wasm
//! container that burns CPU), then measured as kubelet measures it: the container's CPU
//! from CRI ContainerStats against the pod cgroup's CPU as cAdvisor reads it. With the bug
//! this project exists for, the pod cgroup shows nothing.
//!
//! Everything it makes is removed again: the pod (StopPodSandbox, RemovePodSandbox), the
//! pod cgroups it created, the probe image and its temporary files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use kubelet_pod::cgroups::{self, Hierarchy, Layout, PodCgroups};
use kubelet_pod::cri::{self, ContainerSpec, Cri, PodSpec};
use kubelet_pod::kubelet::{self, CgroupDriver, QosClass};

use node_doctor::{lookup, Check, Facts, Target, Verdict};

/// The probe image's name in containerd's `k8s.io` namespace.
pub const PROBE_IMAGE: &str = "docker.io/library/spin-shim-doctor-probe:1";

/// CPU time the probe burns (wall clock of a busy loop), then it sleeps.
const BURN: Duration = Duration::from_secs(2);

/// A WASI (preview 1) program: a busy loop on the monotonic clock for [`BURN`], then a
/// 300 s sleep (poll_oneoff), so the container is still there to be measured.
const PROBE_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "clock_time_get"
    (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff"
    (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $now (result i64)
    (drop (call $clock (i32.const 1) (i64.const 1000) (i32.const 0)))
    (i64.load (i32.const 0)))
  (func (export "_start")
    (local $end i64)
    (local.set $end (i64.add (call $now) (i64.const BURN_NS)))
    (block $done
      (loop $burn
        (br_if $done (i64.ge_u (call $now) (local.get $end)))
        (br $burn)))
    ;; one clock subscription at 64: clock id (monotonic) at +16, timeout at +24
    (i32.store (i32.const 80) (i32.const 1))
    (i64.store (i32.const 88) (i64.const 300000000000))
    (drop (call $poll (i32.const 64) (i32.const 128) (i32.const 1) (i32.const 200)))))"#;

/// The `run` check: the test pod's outcome, or why it could not run (a failure: pods of the
/// shim would fail the same way).
pub fn test_pod(target: &Target, facts: &Facts) -> Check {
    match probe(target, facts) {
        Ok(check) => check,
        Err(e) => Check {
            check: "run",
            verdict: Verdict::Fail,
            detail: format!("the test pod did not run: {e:#}"),
            fix: Some(format!(
                "fix what the error names (a pod with RuntimeClass handler `{}` fails the same \
                 way); containerd's log has the shim's side",
                target.handler
            )),
        },
    }
}

/// The cgroup driver kubelet uses here: what kubelet says, else what runc is told, else
/// systemd where systemd runs.
fn driver(facts: &Facts) -> Result<CgroupDriver> {
    Ok(match facts.kubelet_driver.as_deref() {
        Some("systemd") => CgroupDriver::Systemd,
        Some("cgroupfs") => CgroupDriver::Cgroupfs,
        Some(other) => bail!("kubelet's cgroup driver {other:?} is neither systemd nor cgroupfs"),
        None => match facts.runc_systemd {
            Some(true) => CgroupDriver::Systemd,
            Some(false) => CgroupDriver::Cgroupfs,
            None if facts.systemd_pid1 => CgroupDriver::Systemd,
            None => CgroupDriver::Cgroupfs,
        },
    })
}

/// A path of containerd's mount namespace, reached from ours.
fn in_ns(facts: &Facts, path: &Path) -> PathBuf {
    facts.ns_root.join(path.strip_prefix("/").unwrap_or(path))
}

/// `ctr` beside the containerd binary, else on PATH.
fn ctr(facts: &Facts) -> Result<PathBuf> {
    facts
        .containerd_bin
        .as_ref()
        .and_then(|b| b.parent())
        .map(|d| d.join("ctr"))
        .filter(|p| p.is_file())
        .or_else(|| lookup("ctr", &std::env::var("PATH").unwrap_or_default()))
        .context("no `ctr` beside containerd or on PATH: it imports the probe image")
}

fn ctr_run(ctr: &Path, socket: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new(ctr)
        .arg("--address")
        .arg(socket)
        .args(["-n", "k8s.io"])
        .args(args)
        .output()
        .with_context(|| format!("running {}", ctr.display()))?;
    if !out.status.success() {
        bail!(
            "ctr {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Removes the probe's temporary directory when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn probe(target: &Target, facts: &Facts) -> Result<Check> {
    let socket = facts
        .cri_socket
        .as_deref()
        .context("containerd's config could not be read, so its CRI socket is unknown")?;
    let socket = in_ns(facts, socket);
    let driver = driver(facts)?;
    let ctr = ctr(facts)?;
    let tmp = TempDir(std::env::temp_dir().join(format!("spin-doctor-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).with_context(|| format!("creating {}", tmp.0.display()))?;
    let wasm = tmp.0.join("doctor-probe.wasm");
    let wat = PROBE_WAT.replace("BURN_NS", &BURN.as_nanos().to_string());
    std::fs::write(&wasm, wat::parse_str(&wat).context("assembling the probe")?)?;
    let archive = tmp.0.join("probe.tar");
    oci_image_builder::wasi_image(PROBE_IMAGE, &wasm, &[], &[])?.write_archive(&archive)?;
    ctr_run(
        &ctr,
        &socket,
        &["images", "import", &archive.display().to_string()],
    )
    .context("importing the probe image")?;
    let measured = with_pod_cgroups(target, facts, driver, &socket);
    let removed = ctr_run(&ctr, &socket, &["images", "rm", PROBE_IMAGE]);
    let (container_ns, pod_ns, pod_path) = measured?;
    removed.context("removing the probe image")?;
    Ok(verdict(container_ns, pod_ns, driver, &pod_path))
}

/// The hierarchies of containerd's mount namespace, reachable from ours, and the layout.
fn hierarchies(facts: &Facts) -> Result<(Vec<Hierarchy>, Layout)> {
    let layout = if facts.unified {
        Layout::Unified
    } else {
        Layout::Hybrid
    };
    let hs: Vec<Hierarchy> = cgroups::parse_hierarchies(&facts.mountinfo)
        .into_iter()
        .filter(|h| layout == Layout::Hybrid || h.unified)
        .map(|h| Hierarchy {
            mount: in_ns(facts, &h.mount),
            ..h
        })
        .collect();
    if hs.is_empty() {
        bail!("no cgroup hierarchy in containerd's mount namespace");
    }
    Ok((hs, layout))
}

fn with_pod_cgroups(
    target: &Target,
    facts: &Facts,
    driver: CgroupDriver,
    socket: &Path,
) -> Result<(u64, u64, String)> {
    let (hs, layout) = hierarchies(facts)?;
    let uid = kubelet::new_uid()?;
    let levels = kubelet::pod_cgroup_levels(driver, QosClass::BestEffort, &uid);
    let pod = PodCgroups::create_in(hs, &levels)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the CRI client's runtime")?;
    let spec = PodSpec {
        name: "spin-doctor-probe".into(),
        uid,
        namespace: "default".into(),
        cgroup_parent: pod.pod_path.clone(),
        handler: target.handler.clone(),
        log_directory: std::env::temp_dir()
            .join(format!("spin-doctor-logs-{}", std::process::id())),
    };
    let logs = TempDir(spec.log_directory.clone());
    let result = rt.block_on(async {
        let mut cri = Cri::connect(socket, Duration::from_secs(10))
            .await
            .with_context(|| format!("connecting to the CRI socket {}", socket.display()))?;
        let sandbox = cri.run_pod(&spec).await?;
        let measured = measure(&mut cri, &sandbox, &spec, &pod, layout).await;
        let removed = cri.remove_pod(&sandbox).await;
        let measured = measured?;
        removed?;
        anyhow::Ok(measured)
    });
    drop(logs);
    let pod_path = pod.pod_path.clone();
    drop(pod);
    if driver == CgroupDriver::Systemd && facts.systemd_pid1 {
        // kubelet stops a deleted pod's slice unit, which systemd made for the scope.
        if let Some(slice) = pod_path.rsplit('/').next() {
            let _ = Command::new("systemctl")
                .args(["stop", slice])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
    let (container_ns, pod_ns) = result?;
    Ok((container_ns, pod_ns, pod_path))
}

async fn measure(
    cri: &mut Cri,
    sandbox: &str,
    spec: &PodSpec,
    pod: &PodCgroups,
    layout: Layout,
) -> Result<(u64, u64)> {
    let container = cri
        .start_container(
            sandbox,
            spec,
            &ContainerSpec {
                name: "probe".into(),
                image: PROBE_IMAGE.into(),
                ..Default::default()
            },
        )
        .await?;
    // The busy loop lasts BURN of wall clock; wait until the container's CPU stops
    // growing past it (bounded).
    let deadline = Instant::now() + BURN + Duration::from_secs(15);
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cri::cpu_ns(&cri.container_stats(&container).await?);
        let settled = now >= BURN.as_nanos() as u64 / 2 && now - last < 20_000_000;
        last = now;
        if settled || Instant::now() > deadline {
            break;
        }
    }
    let state = cri.container_state(&container).await?;
    // CRI ContainerState CONTAINER_RUNNING = 1.
    if !state.starts_with("state=1 ") {
        bail!(
            "the probe container is not running ({state}): the shim could not run a WASI \
             program"
        );
    }
    let container_ns = cri::cpu_ns(&cri.container_stats(&container).await?);
    let pod_ns = pod.cpu_usage_ns(layout)?;
    Ok((container_ns, pod_ns))
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The verdict on one measurement: the pod cgroup must hold the container's CPU.
fn verdict(container_ns: u64, pod_ns: u64, driver: CgroupDriver, pod_path: &str) -> Check {
    let figures = format!(
        "test pod ({driver} driver, {pod_path}): container CPU {:.2} s (CRI ContainerStats), pod \
         cgroup {:.2} s (as cAdvisor reads it)",
        secs(container_ns),
        secs(pod_ns)
    );
    if container_ns < BURN.as_nanos() as u64 / 4 {
        return Check {
            check: "run",
            verdict: Verdict::Fail,
            detail: format!(
                "{figures}: the container's CPU is not reported (it burned {:?})",
                BURN
            ),
            fix: Some(
                "the shim's Stats are not reaching containerd: check containerd's log".into(),
            ),
        };
    }
    let ratio = pod_ns as f64 / container_ns as f64;
    if (0.9..=1.5).contains(&ratio) {
        Check {
            check: "run",
            verdict: Verdict::Ok,
            detail: format!("{figures}, ratio {ratio:.3}"),
            fix: None,
        }
    } else {
        Check {
            check: "run",
            verdict: Verdict::Fail,
            detail: format!(
                "{figures}, ratio {ratio:.3}: kubelet will report the pod's CPU wrong (kubectl \
                 top, HPA)"
            ),
            fix: Some("the container is not under its pod cgroup: check the `runtime` and `kubelet` lines above".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_assembles() {
        let wat = PROBE_WAT.replace("BURN_NS", "1");
        let wasm = wat::parse_str(&wat).unwrap();
        assert!(wasm.starts_with(b"\0asm"));
    }

    #[test]
    fn verdicts() {
        let v = verdict(2_000_000_000, 2_010_000_000, CgroupDriver::Systemd, "/p");
        assert_eq!(v.verdict, Verdict::Ok, "{}", v.detail);
        let v = verdict(2_000_000_000, 3_000_000, CgroupDriver::Systemd, "/p");
        assert_eq!(v.verdict, Verdict::Fail);
        assert!(v.detail.contains("pod's CPU wrong"), "{}", v.detail);
        let v = verdict(1_000, 1_000, CgroupDriver::Cgroupfs, "/p");
        assert_eq!(v.verdict, Verdict::Fail);
    }

    #[test]
    fn driver_follows_kubelet_then_runc_then_systemd() {
        let mut f = Facts {
            kubelet_driver: Some("cgroupfs".into()),
            runc_systemd: Some(true),
            systemd_pid1: true,
            ..Facts::default()
        };
        assert_eq!(driver(&f).unwrap(), CgroupDriver::Cgroupfs);
        f.kubelet_driver = None;
        assert_eq!(driver(&f).unwrap(), CgroupDriver::Systemd);
        f.runc_systemd = None;
        f.systemd_pid1 = false;
        assert_eq!(driver(&f).unwrap(), CgroupDriver::Cgroupfs);
        f.kubelet_driver = Some("other".into());
        assert!(driver(&f).is_err());
    }
}
