//! Black-box tests of `containerd-shim-spin-v2` through a private containerd and `ctr`
//! (issue 3): one test per containerd version and cgroup mode, each running every scenario
//! against one containerd and reporting all failures; plus a 50-cycle leak test on one leg.
//! Run as root: `cargo test --release -p integration --test shim -- --nocapture`.

use anyhow::{bail, ensure, Context, Result};
use integration::cgroups::{cgroup_exists, cpu_usage_ns, proc_cgroups};
use integration::images::{BUSYBOX, PAUSE, WASI_HELLO, WASI_HELLO_P1};
use integration::{
    require_shim, test_runtime, unique, wait_child, wait_for, CgroupGuard, CgroupMode, Containerd,
    ContainerdVersion, TestImages,
};
use std::process::{Output, Stdio};
use std::time::Duration;

/// argv[0] of the WASI hello image: `ctr run` replaces the whole argv (entrypoint
/// included) with the arguments after the container id.
const HELLO: &str = "/wasi-hello.wasm";

struct Leg {
    c: Containerd,
    runtime: String,
    /// Cgroup subtree (relative to each hierarchy root) all containers of the leg live in.
    root: String,
    images: TestImages,
    _root_guard: CgroupGuard,
    _dir: tempfile::TempDir,
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Leg {
    fn start(version: ContainerdVersion, mode: CgroupMode) -> Result<Self> {
        require_shim()?;
        let dir = tempfile::tempdir()?;
        let images = TestImages::build(dir.path())?;
        let c = Containerd::start(version, mode)?;
        c.import(&images.wasi_hello, false)?;
        c.import(&images.busybox, false)?;
        c.import(&images.pause, false)?;
        if let Some(p1) = &images.wasi_hello_p1 {
            c.import(p1, false)?;
        }
        let root = unique("shimtest-");
        Ok(Self {
            _root_guard: CgroupGuard::new(&root),
            c,
            runtime: test_runtime(),
            root,
            images,
            _dir: dir,
        })
    }

    fn cgroup(&self, id: &str) -> String {
        format!("/{}/{}", self.root, id)
    }

    /// `ctr run` arguments for `image` as container `id` with `cmd` (after the id).
    fn run_args(
        &self,
        detach: bool,
        cgroup: &str,
        extra: &[&str],
        image: &str,
        id: &str,
        cmd: &[&str],
    ) -> Vec<String> {
        let mut a: Vec<String> = vec!["run".into()];
        a.push(if detach { "-d" } else { "--rm" }.into());
        a.extend([
            "--runtime".into(),
            self.runtime.clone(),
            "--cgroup".into(),
            cgroup.into(),
        ]);
        a.extend(extra.iter().map(|s| s.to_string()));
        a.push(image.into());
        a.push(id.into());
        a.extend(cmd.iter().map(|s| s.to_string()));
        a
    }

    /// `ctr run --rm` to completion.
    fn run(&self, image: &str, cmd: &[&str], extra: &[&str]) -> Result<Output> {
        let id = unique("t");
        let args = self.run_args(false, &self.cgroup(&id), extra, image, &id, cmd);
        let out =
            integration::output_with_timeout(self.c.ctr().args(&args), Duration::from_secs(60));
        if out.is_err() {
            self.c.force_remove(&id);
        }
        out
    }

    /// `ctr run -d` and wait for RUNNING; returns the task pid.
    fn run_detached(&self, id: &str, cgroup: &str, image: &str, cmd: &[&str]) -> Result<i32> {
        let args = self.run_args(true, cgroup, &[], image, id, cmd);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.c.ctr_ok(&args)?;
        self.c
            .wait_task_status(id, "RUNNING", Duration::from_secs(30))
    }
}

fn check_status(o: &Output, want: i32) -> Result<()> {
    ensure!(
        o.status.code() == Some(want),
        "expected exit status {want}, got {:?}; output:\n{}",
        o.status.code(),
        text(o)
    );
    Ok(())
}

fn wasi_hello(l: &Leg) -> Result<()> {
    let o = l.run(
        WASI_HELLO,
        &[HELLO, "a1", "b 2"],
        &["--env", "HELLO_ENV=world"],
    )?;
    check_status(&o, 0)?;
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "Hello from wasi-hello",
        "arg[1]=a1",
        "arg[2]=b 2",
        "env HELLO_ENV=world",
    ] {
        ensure!(
            out.lines().any(|l| l == want),
            "stdout lacks line {want:?}:\n{}",
            text(&o)
        );
    }
    Ok(())
}

/// The container rootfs is preopened at `/`: the guest lists an image directory there. `/`
/// itself is not listable: the runtime confines itself with Landlock, where a right to list
/// `/` would cover `/proc`, `/sys` and `/dev` too (tests/guest_escape.rs has the rest).
fn wasi_rootfs_preopened(l: &Leg) -> Result<()> {
    let o = l.run(WASI_HELLO, &[HELLO, "ls", "/tmp"], &[])?;
    check_status(&o, 0)?;
    let o = l.run(WASI_HELLO, &[HELLO, "ls", "/"], &[])?;
    ensure!(
        o.status.code() == Some(1) && text(&o).contains("cannot list /: Permission denied"),
        "`ls /` in the guest was not refused:\n{}",
        text(&o)
    );
    Ok(())
}

fn wasi_hello_core_module(l: &Leg) -> Result<()> {
    if l.images.wasi_hello_p1.is_none() {
        bail!("wasi-hello-p1.wasm (wasm32-wasip1) was not built: run `make apps`");
    }
    let o = l.run(WASI_HELLO_P1, &["/wasi-hello-p1.wasm", "exit", "4"], &[])?;
    check_status(&o, 4)?;
    ensure!(
        text(&o).contains("Hello from wasi-hello"),
        "no greeting:\n{}",
        text(&o)
    );
    Ok(())
}

/// WASI 0.2 components can only exit ok/err; exit codes need a core module (wasip1).
fn wasi_exit_3(l: &Leg) -> Result<()> {
    ensure!(
        l.images.wasi_hello_p1.is_some(),
        "wasi-hello-p1.wasm (wasm32-wasip1) was not built: run `make apps`"
    );
    check_status(
        &l.run(WASI_HELLO_P1, &["/wasi-hello-p1.wasm", "exit", "3"], &[])?,
        3,
    )
}

/// A component's `exit(3)` maps to `wasi:cli/exit` err: a non-zero status.
fn wasi_component_exit_nonzero(l: &Leg) -> Result<()> {
    let o = l.run(WASI_HELLO, &[HELLO, "exit", "3"], &[])?;
    ensure!(
        o.status.code().is_some_and(|c| c != 0),
        "expected a non-zero status, got {:?}:\n{}",
        o.status.code(),
        text(&o)
    );
    Ok(())
}

fn wasi_trap(l: &Leg) -> Result<()> {
    let o = l.run(WASI_HELLO, &[HELLO, "trap"], &[])?;
    let code = o.status.code();
    ensure!(
        code.is_some_and(|c| c != 0),
        "a trap must give a non-zero status, got {code:?}"
    );
    ensure!(
        text(&o).contains("unreachable"),
        "output lacks the trap message (`unreachable`):\n{}",
        text(&o)
    );
    Ok(())
}

fn native_exit_code(l: &Leg) -> Result<()> {
    let o = l.run(BUSYBOX, &["/bin/sh", "-c", "echo native-ok; exit 5"], &[])?;
    check_status(&o, 5)?;
    ensure!(
        text(&o).contains("native-ok"),
        "no native stdout:\n{}",
        text(&o)
    );
    Ok(())
}

fn native_pause_ends_on_sigterm(l: &Leg) -> Result<()> {
    kill_scenario(l, PAUSE, &[], "SIGTERM", 0)
}

fn kill_scenario(l: &Leg, image: &str, cmd: &[&str], signal: &str, want: i32) -> Result<()> {
    let id = unique("k");
    let args = l.run_args(false, &l.cgroup(&id), &[], image, &id, cmd);
    let child =
        l.c.ctr()
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
    let res = (|| {
        l.c.wait_task_status(&id, "RUNNING", Duration::from_secs(30))?;
        l.c.ctr_ok(&["task", "kill", "-s", signal, &id])?;
        Ok::<_, anyhow::Error>(())
    })();
    if let Err(e) = res {
        l.c.force_remove(&id);
        let _ = wait_child(child, Duration::from_secs(20));
        return Err(e);
    }
    let o = wait_child(child, Duration::from_secs(20))
        .with_context(|| format!("task did not end within 20 s of {signal}"));
    if o.is_err() {
        l.c.force_remove(&id);
    }
    check_status(&o?, want)
}

fn wasi_sigterm(l: &Leg) -> Result<()> {
    kill_scenario(l, WASI_HELLO, &[HELLO, "sleep", "300"], "SIGTERM", 143)
}

fn wasi_sigkill(l: &Leg) -> Result<()> {
    kill_scenario(l, WASI_HELLO, &[HELLO, "sleep", "300"], "SIGKILL", 137)
}

fn ls_ps_metrics(l: &Leg) -> Result<()> {
    let id = unique("m");
    let r = (|| {
        let pid = l.run_detached(&id, &l.cgroup(&id), WASI_HELLO, &[HELLO, "burn", "20"])?;
        let ps = l.c.ctr_ok(&["task", "ps", &id])?;
        ensure!(
            ps.lines()
                .skip(1)
                .any(|x| x.split_whitespace().next() == Some(&pid.to_string())),
            "ctr task ps does not list the task pid {pid}:\n{ps}"
        );
        std::thread::sleep(Duration::from_millis(1500));
        let m = l.c.ctr_ok(&["task", "metrics", "--format", "json", &id])?;
        let v: serde_json::Value =
            serde_json::from_str(&m).with_context(|| format!("metrics are not JSON: {m}"))?;
        match l.c.mode() {
            CgroupMode::Host => {
                let total = v["cpu"]["usage"]["total"].as_u64().unwrap_or(0);
                ensure!(
                    total > 0,
                    "expected v1 metrics with cpu.usage.total > 0 after burn: {v}"
                );
                ensure!(
                    v["memory"].is_object() && v["pids"]["current"].as_u64().unwrap_or(0) > 0,
                    "v1 metrics lack memory or pids: {v}"
                );
            }
            CgroupMode::UnifiedNamespace => {
                let usec = v["cpu"]["usage_usec"].as_u64().unwrap_or(0);
                ensure!(
                    usec > 0,
                    "expected v2 metrics with cpu.usage_usec > 0 after burn: {v}"
                );
            }
        }
        Ok(())
    })();
    l.c.force_remove(&id);
    r
}

/// `ctr task pause` freezes a burning Wasm task (PAUSED, CPU time stands still) and
/// `ctr task resume` thaws it (RUNNING, CPU time grows again).
fn pause_resume(l: &Leg) -> Result<()> {
    let id = unique("z");
    let cg = l.cgroup(&id);
    let unified = l.c.mode() == CgroupMode::UnifiedNamespace;
    let r = (|| {
        l.run_detached(&id, &cg, WASI_HELLO, &[HELLO, "burn", "60"])?;
        l.c.ctr_ok(&["task", "pause", &id])?;
        l.c.wait_task_status(&id, "PAUSED", Duration::from_secs(10))?;
        let a = cpu_usage_ns(&cg, unified)?;
        std::thread::sleep(Duration::from_millis(500));
        let b = cpu_usage_ns(&cg, unified)?;
        ensure!(
            b - a < 20_000_000,
            "paused task still used {} ns of CPU in 0.5 s",
            b - a
        );
        l.c.ctr_ok(&["task", "resume", &id])?;
        l.c.wait_task_status(&id, "RUNNING", Duration::from_secs(10))?;
        let grew = wait_for(Duration::from_secs(5), || {
            cpu_usage_ns(&cg, unified)
                .ok()
                .filter(|c| *c > b + 50_000_000)
        });
        ensure!(grew.is_some(), "resumed task does not use CPU again");
        Ok(())
    })();
    l.c.force_remove(&id);
    r
}

/// Exec is not supported: a clear error naming the runtime.
fn exec_unsupported(l: &Leg) -> Result<()> {
    let id = unique("x");
    let r = (|| {
        l.run_detached(&id, &l.cgroup(&id), WASI_HELLO, &[HELLO, "sleep", "60"])?;
        let o = l.c.ctr_output(
            &["task", "exec", "--exec-id", "e1", &id, "/wasi-hello.wasm"],
            Duration::from_secs(30),
        )?;
        ensure!(
            !o.status.success(),
            "exec unexpectedly succeeded: {}",
            text(&o)
        );
        ensure!(
            text(&o).contains("not supported by io.containerd.spin.v2"),
            "exec error should say it is not supported by io.containerd.spin.v2: {}",
            text(&o)
        );
        Ok(())
    })();
    l.c.force_remove(&id);
    r
}

/// Runs a CPU-burning Wasm task at `cgroups_path` and checks /proc/<pid>/cgroup shows
/// `expected` and the pod cgroup accounts its CPU time (the seed bug: pod read 0); then
/// deletes it and checks the container cgroup is gone.
fn placement(l: &Leg, id: &str, cgroups_path: &str, pod: &str, expected: &str) -> Result<()> {
    let _pod_guard = CgroupGuard::new(pod);
    let r = (|| {
        let pid = l.run_detached(id, cgroups_path, WASI_HELLO, &[HELLO, "burn", "60"])?;
        let lines = proc_cgroups(pid)?;
        let relevant: Vec<_> = lines
            .iter()
            .filter(|x| l.c.mode() == CgroupMode::Host || x.id == 0)
            .collect();
        ensure!(!relevant.is_empty(), "no cgroup lines for pid {pid}");
        let wrong: Vec<_> = relevant.iter().filter(|x| x.path != expected).collect();
        ensure!(
            wrong.is_empty(),
            "task pid {pid} should be in {expected} in every hierarchy; wrong: {wrong:?}"
        );
        let unified = l.c.mode() == CgroupMode::UnifiedNamespace;
        let pod_ns = wait_for(Duration::from_secs(10), || {
            cpu_usage_ns(pod, unified)
                .ok()
                .filter(|ns| *ns >= 300_000_000)
        });
        ensure!(
            pod_ns.is_some(),
            "pod cgroup {pod} should account the burning task's CPU (>= 0.3 s within 10 s), reads {:?} ns",
            cpu_usage_ns(pod, unified)
        );
        Ok(())
    })();
    l.c.force_remove(id);
    r?;
    let left = wait_for(Duration::from_secs(5), || {
        let v = cgroup_exists(expected);
        v.is_empty().then_some(())
    });
    ensure!(
        left.is_some(),
        "container cgroup {expected} still exists after delete: {:?}",
        cgroup_exists(expected)
    );
    Ok(())
}

fn placement_systemd_form(l: &Leg) -> Result<()> {
    let uid = integration::pod_uid().replace('-', "_");
    let id = unique("p");
    let pod = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice");
    placement(
        l,
        &id,
        &format!("kubepods-burstable-pod{uid}.slice:cri-containerd:{id}"),
        &pod,
        &format!("{pod}/cri-containerd-{id}.scope"),
    )
}

fn placement_cgroupfs_form(l: &Leg) -> Result<()> {
    let uid = integration::pod_uid();
    let id = unique("p");
    let pod = format!("/kubepods/burstable/pod{uid}");
    let path = format!("{pod}/{id}");
    placement(l, &id, &path, &pod, &path)
}

type Scenario = (&'static str, fn(&Leg) -> Result<()>);

const SCENARIOS: &[Scenario] = &[
    ("wasi_hello_stdout_args_env", wasi_hello),
    ("wasi_rootfs_preopened", wasi_rootfs_preopened),
    ("wasi_hello_core_module_exit_4", wasi_hello_core_module),
    ("wasi_exit_3", wasi_exit_3),
    ("wasi_component_exit_nonzero", wasi_component_exit_nonzero),
    ("wasi_trap", wasi_trap),
    ("native_exit_code", native_exit_code),
    ("native_pause_ends_on_sigterm", native_pause_ends_on_sigterm),
    ("wasi_sigterm_143", wasi_sigterm),
    ("wasi_sigkill_137", wasi_sigkill),
    ("ls_ps_metrics", ls_ps_metrics),
    ("pause_resume", pause_resume),
    ("exec_unsupported", exec_unsupported),
    ("placement_systemd_form", placement_systemd_form),
    ("placement_cgroupfs_form", placement_cgroupfs_form),
];

fn run_leg(name: &str, version: ContainerdVersion, mode: CgroupMode) {
    let Some(_serial) = integration::root_test(name) else {
        return;
    };
    let only = std::env::var("SHIM_SCENARIO").ok();
    let leg = Leg::start(version, mode).unwrap_or_else(|e| panic!("{name}: setup failed: {e:#}"));
    let mut failures = Vec::new();
    for (sname, f) in SCENARIOS {
        if only.as_deref().is_some_and(|o| !sname.contains(o)) {
            continue;
        }
        let t = std::time::Instant::now();
        match f(&leg) {
            Ok(()) => eprintln!("[{name}] PASS {sname} ({:.1}s)", t.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("[{name}] FAIL {sname}: {e:#}");
                failures.push(format!("{sname}: {e:#}"));
            }
        }
    }
    if !failures.is_empty() {
        eprintln!("[{name}] containerd log tail:\n{}", leg.c.log_tail(30));
        drop(leg);
        panic!(
            "{name}: {} scenario(s) failed:\n{}",
            failures.len(),
            failures.join("\n\n")
        );
    }
}

#[test]
fn containerd_1_6_host_cgroups() {
    run_leg("1.6/host", ContainerdVersion::V1_6, CgroupMode::Host);
}

#[test]
fn containerd_1_7_host_cgroups() {
    run_leg("1.7/host", ContainerdVersion::V1_7, CgroupMode::Host);
}

#[test]
fn containerd_1_6_unified_namespace() {
    run_leg(
        "1.6/unified",
        ContainerdVersion::V1_6,
        CgroupMode::UnifiedNamespace,
    );
}

#[test]
fn containerd_1_7_unified_namespace() {
    run_leg(
        "1.7/unified",
        ContainerdVersion::V1_7,
        CgroupMode::UnifiedNamespace,
    );
}

/// 50 create/start/kill/delete cycles leave no container cgroup, mount, shim process or
/// containerd fd behind (containerd 1.7, host cgroups).
#[test]
fn fifty_cycles_leave_nothing_behind() {
    let Some(_serial) = integration::root_test("fifty_cycles_leave_nothing_behind") else {
        return;
    };
    let l = Leg::start(ContainerdVersion::V1_7, CgroupMode::Host).expect("setup");
    let cycles: usize = std::env::var("LEAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    // Warm up once so lazily opened fds (content store, snapshotter) count in the baseline.
    let warm = l
        .run(WASI_HELLO, &[HELLO, "exit", "0"], &[])
        .expect("warm-up run");
    assert_eq!(
        warm.status.code(),
        Some(0),
        "warm-up failed: {}",
        text(&warm)
    );
    let base_mounts = l.c.mounts();
    let base_fds = l.c.open_fds();
    let mut ids = Vec::new();
    for i in 0..cycles {
        let id = format!("leak{i}-{}", unique(""));
        let cg = l.cgroup(&id);
        let r = (|| {
            l.run_detached(&id, &cg, WASI_HELLO, &[HELLO, "sleep", "60"])?;
            l.c.ctr_ok(&["task", "kill", "-s", "SIGKILL", &id])?;
            l.c.wait_task_status(&id, "STOPPED", Duration::from_secs(20))?;
            l.c.ctr_ok(&["task", "delete", &id])?;
            l.c.ctr_ok(&["container", "delete", &id])?;
            Ok::<_, anyhow::Error>(())
        })();
        if let Err(e) = r {
            l.c.force_remove(&id);
            panic!("cycle {i} failed: {e:#}\nlog tail:\n{}", l.c.log_tail(20));
        }
        ids.push(cg);
    }
    let shims = wait_for(Duration::from_secs(10), || {
        let s = l.c.shim_pids();
        s.is_empty().then_some(())
    });
    assert!(
        shims.is_some(),
        "shim processes left: {:?}",
        l.c.shim_pids()
    );
    let left_cgroups: Vec<_> = ids.iter().flat_map(|p| cgroup_exists(p)).collect();
    assert!(
        left_cgroups.is_empty(),
        "container cgroups left: {left_cgroups:?}"
    );
    let mounts = l.c.mounts();
    assert!(
        mounts.len() <= base_mounts.len(),
        "mounts left: before {base_mounts:?}, after {mounts:?}"
    );
    let fds = wait_for(Duration::from_secs(5), || {
        let n = l.c.open_fds();
        (n <= base_fds + 3).then_some(n)
    });
    assert!(
        fds.is_some(),
        "containerd fds grew from {base_fds} to {} over {cycles} cycles",
        l.c.open_fds()
    );
    let tasks = l.c.task_list().expect("task ls");
    assert!(tasks.is_empty(), "tasks left: {tasks:?}");
    eprintln!(
        "leak test: {cycles} cycles, fds {base_fds} -> {}, mounts {}",
        l.c.open_fds(),
        mounts.len()
    );
}
