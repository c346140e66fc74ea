//! Soak: `SOAK_CYCLES` (default 500; `make soak` runs 10,000) create/start/kill/delete cycles
//! through one long-lived shim, rotating WASI, native and Spin containers, as the containers
//! of one pod (a pause container holds the pod, all share the `io.kubernetes.cri.sandbox-id`
//! annotation, so one shim serves them all). Afterwards nothing may be left: no container
//! cgroup, mount, state dir, task, extra process or fd of the shim or containerd, and the
//! resident memory of both must not grow with the cycles (least-squares slope over the
//! second half of the samples, the first half being warm-up of containerd's database and the
//! allocators; reported in KiB per cycle; judged only in runs of at least
//! `MIN_CYCLES_FOR_MEMORY_VERDICT` cycles, such as `make soak`).
//! Run as root: `SOAK_CYCLES=500 cargo test --release -p integration --test soak -- --nocapture`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use integration::cgroups::cgroup_exists;
use integration::images::{BUSYBOX, PAUSE, WASI_HELLO};
use integration::{
    children, free_loopback_port, ppid, require_shim, test_runtime, unique, wait_for,
    workspace_root, CgroupGuard, CgroupMode, Containerd, ContainerdConfig, ContainerdVersion,
    TestImages,
};
use oci_image_builder::spin;

const SPIN_IMAGE: &str = "docker.io/library/spin-hello:soak";
/// Largest memory growth tolerated, KiB per cycle (a leak of one small allocation per cycle
/// shows as a few KiB per cycle within a few thousand cycles; allocator noise stays well
/// below this over the run).
const MAX_SLOPE_KIB_PER_CYCLE: f64 = 2.0;
/// Runs shorter than this report the memory slope without a verdict: over a few hundred
/// cycles containerd's and the shim's warm-up (allocator arenas, metadata caches) is still
/// visible in the slope (200 cycles here: containerd 8.0, shim 1.7 KiB/cycle, mostly in the
/// first 30 cycles), so only `make soak`'s long run can tell growth from warm-up.
const MIN_CYCLES_FOR_MEMORY_VERDICT: usize = 2000;
/// Slack for descriptors opened lazily (log files, connections) after the baseline.
const FD_SLACK: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Wasi,
    Native,
    Spin,
}

struct Soak {
    c: Containerd,
    runtime: String,
    /// The pod's cgroup subtree (below every hierarchy root).
    root: String,
    pod: String,
    state_dir: PathBuf,
    _guard: CgroupGuard,
    _images: tempfile::TempDir,
}

impl Soak {
    fn start(state_dir: &Path) -> Result<Self> {
        require_shim()?;
        let images = tempfile::tempdir()?;
        let built = TestImages::build(images.path())?;
        let spin_tar = images.path().join("spin.tar");
        spin::container_image(
            SPIN_IMAGE,
            &workspace_root().join("tests/apps/spin-hello"),
            &[],
        )?
        .write_archive(&spin_tar)?;
        let config = ContainerdConfig {
            env: vec![(
                "SPIN_SHIM_STATE_DIR".into(),
                state_dir.display().to_string(),
            )],
            ..Default::default()
        };
        let c = Containerd::start_with(ContainerdVersion::V1_7, CgroupMode::Host, &config)?;
        for tar in [&built.wasi_hello, &built.busybox, &built.pause, &spin_tar] {
            c.import(tar, false)?;
        }
        let root = unique("soak-");
        Ok(Soak {
            _guard: CgroupGuard::new(&root),
            c,
            runtime: test_runtime(),
            pod: unique("soakpod"),
            root,
            state_dir: state_dir.to_path_buf(),
            _images: images,
        })
    }

    fn cgroup(&self, id: &str) -> String {
        format!("/{}/{id}", self.root)
    }

    /// `ctr run -d` of `image` as `id` in the pod; waits for RUNNING.
    fn run(&self, id: &str, image: &str, extra: &[String], cmd: &[&str]) -> Result<()> {
        let annotation = format!("io.kubernetes.cri.sandbox-id={}", self.pod);
        let cgroup = self.cgroup(id);
        let mut args: Vec<&str> = vec![
            "run",
            "-d",
            "--runtime",
            &self.runtime,
            "--cgroup",
            &cgroup,
            "--annotation",
            &annotation,
        ];
        args.extend(extra.iter().map(String::as_str));
        args.push(image);
        args.push(id);
        args.extend(cmd);
        self.c.ctr_ok(&args)?;
        self.c
            .wait_task_status(id, "RUNNING", Duration::from_secs(30))?;
        Ok(())
    }

    /// One create/start/kill/delete cycle of a container of `kind`.
    fn cycle(&self, id: &str, kind: Kind) -> Result<()> {
        let signal = match kind {
            Kind::Wasi => {
                self.run(id, WASI_HELLO, &[], &["/wasi-hello.wasm", "sleep", "60"])?;
                "SIGKILL"
            }
            Kind::Native => {
                self.run(id, BUSYBOX, &[], &["/bin/sleep", "60"])?;
                "SIGKILL"
            }
            Kind::Spin => {
                let listen = format!("SPIN_HTTP_LISTEN_ADDR=127.0.0.1:{}", free_loopback_port()?);
                self.run(
                    id,
                    SPIN_IMAGE,
                    &["--net-host".into(), "--env".into(), listen],
                    &["/"],
                )?;
                "SIGTERM"
            }
        };
        self.c.ctr_ok(&["task", "kill", "-s", signal, id])?;
        self.c
            .wait_task_status(id, "STOPPED", Duration::from_secs(30))?;
        self.c.ctr_ok(&["task", "delete", id])?;
        self.c.ctr_ok(&["container", "delete", id])?;
        Ok(())
    }

    fn state_entries(&self) -> Vec<String> {
        integration::dir_entries(&self.state_dir)
    }
}

fn status_kib(pid: i32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The one shim server of the pod: of the processes with the shim's command line (its
/// container-creation helper may share it), the one whose parent is not one of them.
fn pod_shim(c: &Containerd) -> Result<i32> {
    let pids = c.shim_pids();
    let servers: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|p| ppid(*p).is_some_and(|pp| !pids.contains(&pp)))
        .collect();
    ensure!(
        servers.len() == 1,
        "want one shim server for the pod, got {servers:?} (shim processes {pids:?})"
    );
    Ok(servers[0])
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

#[test]
fn soak_cycles_leave_nothing_behind() {
    let Some(_serial) = integration::root_test("soak_cycles_leave_nothing_behind") else {
        return;
    };
    let cycles: usize = std::env::var("SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    // Short: the libcontainer state roots below it hold unix sockets (108-byte limit).
    let state_dir = PathBuf::from(format!("/run/spin-soak-{}", std::process::id()));
    std::fs::create_dir_all(&state_dir).expect("creating the soak state dir");
    let r = soak(cycles, &state_dir);
    let _ = std::fs::remove_dir_all(&state_dir);
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

fn soak(cycles: usize, state_dir: &Path) -> Result<()> {
    let s = Soak::start(state_dir)?;
    let pause = unique("pause");
    s.run(&pause, PAUSE, &[], &[])?;
    let shim = pod_shim(&s.c)?;
    // Warm-up: one of each kind, so the compile cache, the zygote and containerd's lazily
    // opened descriptors are part of the baseline.
    for (i, kind) in [Kind::Wasi, Kind::Native, Kind::Spin]
        .into_iter()
        .enumerate()
    {
        let id = format!("warm{i}-{}", unique(""));
        s.cycle(&id, kind)
            .with_context(|| format!("warm-up {kind:?}\n{}", s.c.log_tail(20)))?;
    }
    let base_children = children(shim);
    let base_mounts = s.c.mounts();
    let base_state = s.state_entries();
    let (base_cd_fds, base_shim_fds) = (fd_count(s.c.pid()), fd_count(shim));
    let every = (cycles / 50).max(1);
    let mut samples: Vec<(usize, u64, u64)> = Vec::new();
    let mut cgroups = Vec::new();
    let mut counts = [0usize; 3];
    let t0 = Instant::now();
    for i in 0..cycles {
        let kind = [Kind::Wasi, Kind::Native, Kind::Spin][i % 3];
        counts[i % 3] += 1;
        let id = format!("c{i}-{}", unique(""));
        if let Err(e) = s.cycle(&id, kind) {
            s.c.force_remove(&id);
            return Err(e)
                .with_context(|| format!("cycle {i} ({kind:?}) failed\n{}", s.c.log_tail(30)));
        }
        cgroups.push(s.cgroup(&id));
        if i % every == every - 1 {
            let cd = status_kib(s.c.pid(), "VmRSS:").context("containerd's VmRSS")?;
            let sh = status_kib(shim, "VmRSS:").context("the shim's VmRSS (did it exit?)")?;
            samples.push((i + 1, cd, sh));
        }
    }
    let elapsed = t0.elapsed();
    ensure!(
        pod_shim(&s.c)? == shim,
        "the pod's shim changed: {:?} (was {shim})",
        s.c.shim_pids()
    );
    let left: Vec<_> = cgroups.iter().flat_map(|c| cgroup_exists(c)).collect();
    ensure!(left.is_empty(), "container cgroups left: {left:?}");
    let mounts = s.c.mounts();
    ensure!(
        mounts.len() <= base_mounts.len(),
        "mounts left: before {base_mounts:?}, after {mounts:?}"
    );
    let state = s.state_entries();
    ensure!(
        state == base_state,
        "state dirs left in {}: before {base_state:?}, after {state:?}",
        s.state_dir.display()
    );
    let kids = wait_for(Duration::from_secs(5), || {
        let k = children(shim);
        (k == base_children).then_some(k)
    });
    ensure!(
        kids.is_some(),
        "the shim's child processes went from {base_children:?} to {:?}",
        children(shim)
    );
    let tasks = s.c.task_list()?;
    ensure!(
        tasks.len() == 1 && tasks[0].0 == pause,
        "tasks left besides the pause container: {tasks:?}"
    );
    let fds = wait_for(Duration::from_secs(5), || {
        let (cd, sh) = (fd_count(s.c.pid()), fd_count(shim));
        (cd <= base_cd_fds + FD_SLACK && sh <= base_shim_fds + FD_SLACK).then_some((cd, sh))
    });
    let (cd_fds, shim_fds) = (fd_count(s.c.pid()), fd_count(shim));
    ensure!(
        fds.is_some(),
        "fds grew over {cycles} cycles: containerd {base_cd_fds} -> {cd_fds}, shim {base_shim_fds} -> {shim_fds}"
    );
    let skip = samples.len() / 2;
    let pts = |f: fn(&(usize, u64, u64)) -> u64| -> Vec<(f64, f64)> {
        samples[skip..]
            .iter()
            .map(|p| (p.0 as f64, f(p) as f64))
            .collect()
    };
    let cd_slope = slope(&pts(|p| p.1));
    let shim_slope = slope(&pts(|p| p.2));
    let first = samples.first().copied().unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    println!(
        "soak: {cycles} cycles (wasi {}, native {}, spin {}) in {:.1} s ({:.0} ms/cycle); \
         leaks: cgroups 0, mounts {} -> {}, state dirs {} -> {}, shim children {} -> {}, \
         fds containerd {base_cd_fds} -> {cd_fds}, shim {base_shim_fds} -> {shim_fds}; \
         RSS containerd {} -> {} KiB (slope {cd_slope:.3} KiB/cycle), shim {} -> {} KiB \
         (slope {shim_slope:.3} KiB/cycle), {} samples",
        counts[0],
        counts[1],
        counts[2],
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / cycles.max(1) as f64,
        base_mounts.len(),
        mounts.len(),
        base_state.len(),
        state.len(),
        base_children.len(),
        children(shim).len(),
        first.1,
        last.1,
        first.2,
        last.2,
        samples.len(),
    );
    ensure!(
        cycles < MIN_CYCLES_FOR_MEMORY_VERDICT
            || (cd_slope < MAX_SLOPE_KIB_PER_CYCLE && shim_slope < MAX_SLOPE_KIB_PER_CYCLE),
        "memory grows with the cycles: containerd {cd_slope:.3} KiB/cycle, shim {shim_slope:.3} \
         KiB/cycle (limit {MAX_SLOPE_KIB_PER_CYCLE}); samples (cycle, containerd KiB, shim KiB): {samples:?}"
    );
    s.c.force_remove(&pause);
    Ok(())
}
