//! Guest isolation through the shim (issue 14): a cgroupsPath naming a busy cgroup that
//! the shim did not create is refused at Create, and the processes in it are untouched.
//! Run as root: `cargo test --release -p integration --test isolation -- --nocapture`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::cgroups::host_hierarchies;
use integration::images::BUSYBOX;
use integration::{
    require_shim, test_runtime, unique, CgroupGuard, CgroupMode, Containerd, ContainerdVersion,
    TestImages,
};

/// A `sleep` joined to a cgroup of our own in every hierarchy: the "foreign" workload.
struct BusyCgroup {
    child: Child,
    path: String,
    _guard: CgroupGuard,
}

impl BusyCgroup {
    fn new(path: &str) -> Result<BusyCgroup> {
        let guard = CgroupGuard::new(path);
        let child = Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .spawn()
            .context("spawning sleep")?;
        let busy = BusyCgroup {
            child,
            path: path.to_string(),
            _guard: guard,
        };
        for h in host_hierarchies() {
            let mut dir = h.clone();
            for part in path.trim_matches('/').split('/') {
                let parent = dir.clone();
                dir.push(part);
                std::fs::create_dir_all(&dir)?;
                // New v1 cpuset levels need cpus/mems before a process can join.
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let own = dir.join(f);
                    if own.exists() && std::fs::read_to_string(&own)?.trim().is_empty() {
                        std::fs::write(&own, std::fs::read_to_string(parent.join(f))?.trim())?;
                    }
                }
            }
            std::fs::write(dir.join("cgroup.procs"), busy.child.id().to_string())
                .with_context(|| format!("joining {}", dir.display()))?;
        }
        Ok(busy)
    }

    fn dirs(&self) -> Vec<PathBuf> {
        host_hierarchies()
            .into_iter()
            .map(|h| h.join(self.path.trim_start_matches('/')))
            .collect()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for BusyCgroup {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The guard (dropped after this) removes the now empty cgroups.
    }
}

fn busy_cgroup_is_refused(version: ContainerdVersion, mode: CgroupMode) -> Result<()> {
    require_shim()?;
    let dir = tempfile::tempdir()?;
    let images = TestImages::build(dir.path())?;
    let c = Containerd::start(version, mode)?;
    c.import(&images.busybox, false)?;
    let root = unique("isolation-");
    let mut busy = BusyCgroup::new(&format!("/{root}/busy"))?;
    let pid = busy.child.id();

    let id = unique("foreign");
    let out = integration::output_with_timeout(
        c.ctr().args([
            "run",
            "--rm",
            "--runtime",
            &test_runtime(),
            "--cgroup",
            &busy.path,
            BUSYBOX,
            &id,
            "true",
        ]),
        Duration::from_secs(60),
    )?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    c.force_remove(&id);
    ensure!(
        !out.status.success(),
        "ctr run into a busy cgroup succeeded: {text}"
    );
    ensure!(
        text.contains("already exists and holds 1 process(es)")
            && text.contains(&format!("pids {pid}"))
            && text.contains("does not adopt a cgroup it did not create"),
        "Create did not name the busy cgroup: {text}"
    );
    ensure!(busy.alive(), "the foreign process {pid} was killed");
    for d in busy.dirs() {
        ensure!(d.is_dir(), "{} was removed", d.display());
        let procs = std::fs::read_to_string(d.join("cgroup.procs"))?;
        ensure!(
            procs.lines().any(|l| l.trim() == pid.to_string()),
            "{pid} left {}: {procs:?}",
            d.display()
        );
    }
    Ok(())
}

#[test]
fn busy_foreign_cgroup_is_refused_host_cgroups() {
    let Some(_serial) = integration::root_test("busy_foreign_cgroup_is_refused_host_cgroups")
    else {
        return;
    };
    busy_cgroup_is_refused(ContainerdVersion::V1_7, CgroupMode::Host).unwrap();
}

#[test]
fn busy_foreign_cgroup_is_refused_unified_namespace() {
    let Some(_serial) = integration::root_test("busy_foreign_cgroup_is_refused_unified_namespace")
    else {
        return;
    };
    busy_cgroup_is_refused(ContainerdVersion::V1_7, CgroupMode::UnifiedNamespace).unwrap();
}
