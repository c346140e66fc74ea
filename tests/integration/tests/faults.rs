//! Faults (issue 17), through a private containerd 1.7 on host cgroups:
//! - the container-creation helper SIGKILLed while a pod runs: the next create in the pod
//!   works (a new helper), the running task is untouched and its exit is reported;
//! - a create that hangs in the helper (a `createRuntime` hook that does not return) fails
//!   after `SPIN_SHIM_CREATE_TIMEOUT_SECS` with an error naming it, leaves nothing behind,
//!   and the next create in the pod works;
//! - the shim server SIGKILLed during Create (in the helper's build) and during Start (in a
//!   `poststart` hook, which libcontainer runs in the server): no container cgroup, mount,
//!   state dir or container process is left, no task is listed, and for Start containerd
//!   publishes the task's exit (137).
//!
//! - containerd restarted (1.6 and 1.7) under a pod's running native and Spin tasks: tasks,
//!   pids and the shim survive, the app serves, later exits and creates work.
//!
//! Hooks come from a spec given to `ctr run --config` (`ctr oci spec` plus the hook); they
//! run outside the container (as with runc), so the test ends its own hook processes.
//! Run as root: `cargo test --release -p integration --test faults -- --nocapture`.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use integration::cgroups::cgroup_exists;
use integration::images::{BUSYBOX, WASI_HELLO};
use integration::{
    children, cmdline, pids_running, require_shim, test_runtime, unique, wait_child, wait_for,
    CgroupGuard, CgroupMode, Containerd, ContainerdConfig, ContainerdVersion, TestImages,
};

const HELLO: &str = "/wasi-hello.wasm";
/// The create timeout the shims of this test get (the default, 60 s, would make the test
/// slow).
const CREATE_TIMEOUT_SECS: u64 = 4;
/// The argument that marks the shim's container-creation helper.
const HELPER_ARG: &str = "--container-creation-helper";

struct Env {
    c: Containerd,
    runtime: String,
    root: String,
    state_dir: tempfile::TempDir,
    specs: tempfile::TempDir,
    _guard: CgroupGuard,
    _images: tempfile::TempDir,
}

/// Removes a container (task included) when dropped.
struct Removes<'a>(&'a Containerd, String);

impl Drop for Removes<'_> {
    fn drop(&mut self) {
        self.0.force_remove(&self.1);
    }
}

/// Ends a process (a hook of the test, a `ctr events`) when dropped.
struct Kills(Vec<i32>);

impl Drop for Kills {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn kill(pid: i32) -> Result<()> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .with_context(|| format!("SIGKILL {pid}"))
}

fn gone(pid: i32) -> bool {
    cmdline(pid).is_empty()
}

impl Env {
    fn start() -> Result<Self> {
        require_shim()?;
        let images = tempfile::tempdir()?;
        let built = TestImages::build(images.path())?;
        let state_dir = tempfile::Builder::new().prefix("ft-").tempdir_in("/run")?;
        let config = ContainerdConfig {
            env: vec![
                (
                    "SPIN_SHIM_STATE_DIR".into(),
                    state_dir.path().display().to_string(),
                ),
                (
                    "SPIN_SHIM_CREATE_TIMEOUT_SECS".into(),
                    CREATE_TIMEOUT_SECS.to_string(),
                ),
            ],
            ..Default::default()
        };
        let c = Containerd::start_with(ContainerdVersion::V1_7, CgroupMode::Host, &config)?;
        c.import(&built.wasi_hello, false)?;
        c.import(&built.busybox, false)?;
        let root = unique("faults-");
        Ok(Env {
            _guard: CgroupGuard::new(&root),
            c,
            runtime: test_runtime(),
            root,
            state_dir,
            specs: tempfile::tempdir()?,
            _images: images,
        })
    }

    fn cgroup(&self, id: &str) -> String {
        format!("/{}/{id}", self.root)
    }

    /// `ctr run -d` arguments for container `id` of pod `pod`.
    fn run_args(&self, pod: &str, id: &str, image: &str, cmd: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--runtime".into(),
            self.runtime.clone(),
            "--cgroup".into(),
            self.cgroup(id),
            "--annotation".into(),
            format!("io.kubernetes.cri.sandbox-id={pod}"),
        ];
        a.push(image.into());
        a.push(id.into());
        a.extend(cmd.iter().map(|s| s.to_string()));
        a
    }

    /// `ctr run -d` to completion (create and start).
    fn run(&self, pod: &str, id: &str, image: &str, cmd: &[&str]) -> Output {
        let args = self.run_args(pod, id, image, cmd);
        integration::output_with_timeout(self.c.ctr().args(&args), Duration::from_secs(90))
            .unwrap_or_else(|e| Output {
                status: std::os::unix::process::ExitStatusExt::from_raw(1 << 8),
                stdout: Vec::new(),
                stderr: format!("{e:#}").into_bytes(),
            })
    }

    /// `ctr run -d` that must succeed, then RUNNING; returns the task pid.
    fn run_ok(&self, pod: &str, id: &str, image: &str, cmd: &[&str]) -> Result<i32> {
        let o = self.run(pod, id, image, cmd);
        ensure!(
            o.status.success(),
            "ctr run {id} failed: {}\nlog tail:\n{}",
            text(&o),
            self.c.log_tail(20)
        );
        self.c
            .wait_task_status(id, "RUNNING", Duration::from_secs(30))
    }

    /// `ctr run -d --config <spec>` of container `id` started in the background.
    fn spawn_run(&self, id: &str, spec: &Path) -> Result<Child> {
        let spec = spec.display().to_string();
        Ok(self
            .c
            .ctr()
            .args([
                "run",
                "-d",
                "--runtime",
                &self.runtime,
                "--config",
                &spec,
                id,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?)
    }

    /// A spec for container `id` of pod `pod` (`ctr run --config` takes everything from it):
    /// containerd's default spec, the WASI hello program sleeping in a rootfs directory of
    /// its own (`args` after the program), the pod annotation, the cgroup, and one `kind`
    /// hook (`createRuntime`, `poststart`) running `/bin/sleep <secs>` (a distinctive
    /// duration names its process).
    fn spec_with_hook(
        &self,
        pod: &str,
        id: &str,
        args: &[&str],
        kind: &str,
        secs: &str,
    ) -> Result<PathBuf> {
        let rootfs = self.specs.path().join(format!("rootfs-{id}"));
        std::fs::create_dir_all(&rootfs)?;
        std::fs::copy(
            integration::guest_apps_dir().join("wasi-hello.wasm"),
            rootfs.join("wasi-hello.wasm"),
        )
        .context("copying wasi-hello.wasm (run `make apps`)")?;
        let o = self.c.ctr_ok(&["oci", "spec"])?;
        let mut spec: serde_json::Value = serde_json::from_str(&o).context("ctr oci spec")?;
        spec["root"] = serde_json::json!({"path": rootfs, "readonly": false});
        let mut argv = vec![HELLO];
        argv.extend(args);
        spec["process"]["args"] = serde_json::json!(argv);
        spec["annotations"] = serde_json::json!({"io.kubernetes.cri.sandbox-id": pod});
        spec["linux"]["cgroupsPath"] = serde_json::json!(self.cgroup(id));
        spec["hooks"] = serde_json::json!({
            kind: [{"path": "/bin/sleep", "args": ["sleep", secs]}]
        });
        let p = self.specs.path().join(format!("{id}.json"));
        std::fs::write(&p, serde_json::to_vec_pretty(&spec)?)?;
        Ok(p)
    }

    /// Entries of the shims' state dir.
    fn state_entries(&self) -> Vec<String> {
        integration::dir_entries(self.state_dir.path())
    }

    /// The shim server started for container `first` (the pod's first; `-id <first>`).
    fn server(&self, first: &str) -> Option<i32> {
        self.c.shim_pids().into_iter().find(|p| {
            let a = cmdline(*p);
            a.windows(2).any(|w| w[0] == "-id" && w[1] == first) && a.iter().any(|x| x == "-socket")
        })
    }

    /// The container-creation helper of shim server `server`.
    fn helper(server: i32) -> Option<i32> {
        children(server)
            .into_iter()
            .find(|p| cmdline(*p).iter().any(|a| a == HELPER_ARG))
    }

    /// Waits until container `id` left nothing behind: no task, no cgroup, the state dir
    /// and containerd's mounts as in `before`.
    fn nothing_left(&self, id: &str, before: &(Vec<String>, Vec<String>)) -> Result<()> {
        let cg = self.cgroup(id);
        let clean = wait_for(Duration::from_secs(20), || {
            let tasks = self.c.task_list().ok()?;
            (!tasks.iter().any(|t| t.0 == id)
                && cgroup_exists(&cg).is_empty()
                && self.state_entries() == before.0
                && self.c.mounts() == before.1)
                .then_some(())
        });
        ensure!(
            clean.is_some(),
            "{id} left things behind: tasks {:?}, cgroups {:?}, state dir {:?} (before {:?}), \
             mounts {:?} (before {:?})\nlog tail:\n{}",
            self.c.task_list().unwrap_or_default(),
            cgroup_exists(&cg),
            self.state_entries(),
            before.0,
            self.c.mounts(),
            before.1,
            self.c.log_tail(25)
        );
        Ok(())
    }

    fn snapshot(&self) -> (Vec<String>, Vec<String>) {
        (self.state_entries(), self.c.mounts())
    }
}

/// Waits for the one live process running `sleep <secs>` (a hook of this test).
fn hook_process(secs: &str, timeout: Duration) -> Option<i32> {
    wait_for(timeout, || pids_running(&["sleep", secs]).first().copied())
}

fn helper_killed_mid_run(e: &Env) -> Result<()> {
    let pod = unique("fpod");
    let (a, b) = (unique("fa"), unique("fb"));
    let _ra = Removes(&e.c, a.clone());
    let a_pid = e.run_ok(&pod, &a, WASI_HELLO, &[HELLO, "sleep", "60"])?;
    let server = e.server(&a).context("no shim server for the pod")?;
    let helper = Env::helper(server).context("the shim server has no helper")?;
    kill(helper)?;
    ensure!(
        wait_for(Duration::from_secs(10), || gone(helper).then_some(())).is_some(),
        "helper {helper} did not die"
    );
    let _rb = Removes(&e.c, b.clone());
    e.run_ok(&pod, &b, BUSYBOX, &["/bin/sleep", "60"])
        .context("the create after the helper died")?;
    ensure!(
        integration::ppid(e.c.task_pid(&b).unwrap_or(0)) == Some(server),
        "{b} is not served by the pod's shim {server}"
    );
    let new_helper = Env::helper(server).context("no helper after the create")?;
    ensure!(new_helper != helper, "the helper was not replaced");
    ensure!(
        e.c.task_pid(&a) == Some(a_pid)
            && e.c
                .wait_task_status(&a, "RUNNING", Duration::from_secs(1))
                .is_ok(),
        "task {a} was disturbed by the helper's death"
    );
    e.c.ctr_ok(&["task", "kill", "-s", "SIGKILL", &a])?;
    e.c.wait_task_status(&a, "STOPPED", Duration::from_secs(20))?;
    println!("helper killed: old {helper}, new {new_helper}, next create ran, {a} exit seen");
    Ok(())
}

fn hung_create_times_out(e: &Env) -> Result<()> {
    let pod = unique("fpod");
    let (z, c, d) = (unique("fz"), unique("fc"), unique("fd"));
    let secs = "47.31";
    // A running container keeps the pod's shim up through the failed create.
    let _rz = Removes(&e.c, z.clone());
    e.run_ok(&pod, &z, WASI_HELLO, &[HELLO, "sleep", "60"])?;
    let server = e.server(&z).context("no shim server for the pod")?;
    let helper = Env::helper(server).context("the shim server has no helper")?;
    let spec = e.spec_with_hook(&pod, &c, &["sleep", "60"], "createRuntime", secs)?;
    let before = e.snapshot();
    let _rc = Removes(&e.c, c.clone());
    let t0 = Instant::now();
    let o = wait_child(e.spawn_run(&c, &spec)?, Duration::from_secs(90))?;
    let took = t0.elapsed();
    let _hooks = Kills(pids_running(&["sleep", secs]));
    ensure!(!o.status.success(), "a create with a hung hook succeeded");
    let out = text(&o);
    ensure!(
        out.contains("did not finish within") && out.contains("SPIN_SHIM_CREATE_TIMEOUT_SECS"),
        "the error does not say what timed out: {out}"
    );
    ensure!(
        took >= Duration::from_secs(CREATE_TIMEOUT_SECS) && took < Duration::from_secs(40),
        "ctr run took {took:?} with a {CREATE_TIMEOUT_SECS} s timeout"
    );
    ensure!(
        pids_running(&["sleep", secs]).is_empty(),
        "the hung hook's process was not ended"
    );
    ensure!(gone(helper), "the hung helper {helper} is still there");
    e.nothing_left(&c, &before)?;
    let _rd = Removes(&e.c, d.clone());
    let d_pid = e
        .run_ok(&pod, &d, WASI_HELLO, &[HELLO, "sleep", "60"])
        .context("the create after the timeout")?;
    ensure!(
        integration::ppid(d_pid) == Some(server),
        "{d} is not served by the pod's shim {server}"
    );
    let new_helper = Env::helper(server).context("no helper after the create")?;
    println!(
        "hung create: failed after {took:.1?} (timeout {CREATE_TIMEOUT_SECS} s), helper {helper} \
         replaced by {new_helper}, next create ran"
    );
    Ok(())
}

/// Starts `ctr events`, its output in `path`.
fn events(e: &Env, path: &Path) -> Result<Child> {
    Ok(e.c
        .ctr()
        .arg("events")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(path)?)
        .stderr(Stdio::null())
        .spawn()?)
}

/// What [`kill_shim_in_hook`] saw.
struct Killed {
    /// `ctr run`'s output.
    run: Output,
    /// The hook's process.
    hook: i32,
    /// The task's pid as `ctr task ls` listed it (0: not listed).
    task_pid: i32,
    /// The server's container-creation helper.
    helper: i32,
}

/// SIGKILLs the pod's shim server once the hook `sleep <secs>` runs.
fn kill_shim_in_hook(e: &Env, pod: &str, id: &str, kind: &str, secs: &str) -> Result<Killed> {
    let spec = e.spec_with_hook(pod, id, &["sleep", "60"], kind, secs)?;
    let run = e.spawn_run(id, &spec)?;
    let Some(hook) = hook_process(secs, Duration::from_secs(30)) else {
        let o = wait_child(run, Duration::from_secs(30))?;
        bail!("the {kind} hook never ran; ctr run: {}", text(&o));
    };
    let server = e.server(id).context("no shim server for the pod")?;
    let helper = Env::helper(server).context("the shim server has no helper")?;
    let task_pid = e.c.task_pid(id).unwrap_or(0);
    kill(server)?;
    let run = wait_child(run, Duration::from_secs(60))?;
    Ok(Killed {
        run,
        hook,
        task_pid,
        helper,
    })
}

/// The shim server of `id` and its helper `k.helper` are gone.
fn shim_gone(e: &Env, id: &str, k: &Killed) -> Result<()> {
    let gone_all = wait_for(Duration::from_secs(10), || {
        (e.server(id).is_none() && gone(k.helper)).then_some(())
    });
    ensure!(
        gone_all.is_some(),
        "left running: shim server {:?}, helper {} ({:?})",
        e.server(id),
        k.helper,
        cmdline(k.helper)
    );
    Ok(())
}

fn shim_killed_during_create(e: &Env) -> Result<()> {
    let pod = unique("fpod");
    let id = unique("fe");
    let before = e.snapshot();
    let _r = Removes(&e.c, id.clone());
    let k = kill_shim_in_hook(e, &pod, &id, "createRuntime", "48.37")?;
    let _hook = Kills(vec![k.hook]);
    ensure!(
        !k.run.status.success(),
        "ctr run succeeded though the shim died in Create: {}",
        text(&k.run)
    );
    e.nothing_left(&id, &before)?;
    shim_gone(e, &id, &k)?;
    println!("shim killed in Create: ctr run failed, nothing left");
    Ok(())
}

fn shim_killed_during_start(e: &Env) -> Result<()> {
    let pod = unique("fpod");
    let id = unique("ff");
    let log = e.specs.path().join(format!("events-{id}"));
    let mut ev = events(e, &log)?;
    let _ev = Kills(vec![ev.id() as i32]);
    std::thread::sleep(Duration::from_millis(300));
    let before = e.snapshot();
    let _r = Removes(&e.c, id.clone());
    let k = kill_shim_in_hook(e, &pod, &id, "poststart", "49.43")?;
    let _hook = Kills(vec![k.hook]);
    let task_pid = k.task_pid;
    ensure!(task_pid > 0, "no task pid was listed during Start");
    ensure!(
        !k.run.status.success(),
        "ctr run succeeded though the shim died in Start: {}",
        text(&k.run)
    );
    e.nothing_left(&id, &before)?;
    shim_gone(e, &id, &k)?;
    ensure!(
        gone(task_pid),
        "the task's init {task_pid} is still running"
    );
    let needle = format!("\"container_id\":\"{id}\"");
    let exit = wait_for(Duration::from_secs(10), || {
        let t = std::fs::read_to_string(&log).ok()?;
        t.lines()
            .find(|l| l.contains("/tasks/exit") && l.contains(&needle))
            .map(str::to_string)
    });
    let _ = ev.kill();
    let _ = ev.wait();
    let exit = exit.with_context(|| {
        format!(
            "containerd published no TaskExit for {id}; events:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    })?;
    ensure!(
        exit.contains("\"exit_status\":137"),
        "TaskExit for {id} is not 137: {exit}"
    );
    println!("shim killed in Start: init {task_pid} gone, nothing left, containerd: {exit}");
    Ok(())
}

/// A Start held in a `poststart` hook while its task already exited must not hold up the
/// exits of the pod's other tasks; its own TaskExit follows its TaskStart.
fn stuck_start_does_not_stall_exits(e: &Env) -> Result<()> {
    let pod = unique("fpod");
    let (a, b) = (unique("fg"), unique("fh"));
    let secs = "6.17";
    let log = e.specs.path().join(format!("events-{b}"));
    let mut ev = events(e, &log)?;
    let _ev = Kills(vec![ev.id() as i32]);
    let _ra = Removes(&e.c, a.clone());
    e.run_ok(&pod, &a, WASI_HELLO, &[HELLO, "sleep", "60"])?;
    let _rb = Removes(&e.c, b.clone());
    // b's program exits at once; its Start then sits in the hook.
    let spec = e.spec_with_hook(&pod, &b, &["exit", "0"], "poststart", secs)?;
    let run = e.spawn_run(&b, &spec)?;
    let hook =
        hook_process(secs, Duration::from_secs(30)).context("the poststart hook never ran")?;
    let _hook = Kills(vec![hook]);
    let b_pid = e.c.task_pid(&b).context("b is not listed")?;
    ensure!(
        wait_for(Duration::from_secs(5), || gone(b_pid).then_some(())).is_some(),
        "b's program did not exit during its Start"
    );
    e.c.ctr_ok(&["task", "kill", "-s", "SIGKILL", &a])?;
    e.c.wait_task_status(&a, "STOPPED", Duration::from_secs(4))
        .context("a's exit was held up by b's Start")?;
    ensure!(
        !gone(hook),
        "b's Start ended before a's exit was seen: the test proves nothing (hook too short)"
    );
    let o = wait_child(run, Duration::from_secs(30))?;
    ensure!(o.status.success(), "ctr run {b}: {}", text(&o));
    e.c.wait_task_status(&b, "STOPPED", Duration::from_secs(10))?;
    let needle = format!("\"container_id\":\"{b}\"");
    let order = wait_for(Duration::from_secs(10), || {
        let t = std::fs::read_to_string(&log).ok()?;
        let topics: Vec<&str> = t
            .lines()
            .filter(|l| l.contains(&needle))
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("/tasks/")))
            .collect();
        topics.contains(&"/tasks/exit").then(|| topics.join(" "))
    });
    let _ = ev.kill();
    let _ = ev.wait();
    let order = order.context("no TaskExit for b")?;
    let (start, exit) = (order.find("/tasks/start"), order.find("/tasks/exit"));
    ensure!(
        start.is_some() && start < exit,
        "b's events out of order: {order}"
    );
    println!("stuck Start: a's exit seen while b's Start waited in its hook; b: {order}");
    Ok(())
}

#[test]
fn faults_leave_nothing_behind_and_the_pod_keeps_working() {
    let Some(_serial) = integration::root_test("faults") else {
        return;
    };
    let e = Env::start().expect("setup");
    type Scenario = (&'static str, fn(&Env) -> Result<()>);
    let scenarios: &[Scenario] = &[
        ("helper_killed_mid_run", helper_killed_mid_run),
        ("hung_create_times_out", hung_create_times_out),
        ("shim_killed_during_create", shim_killed_during_create),
        ("shim_killed_during_start", shim_killed_during_start),
        (
            "stuck_start_does_not_stall_exits",
            stuck_start_does_not_stall_exits,
        ),
    ];
    let mut failed = Vec::new();
    for (name, f) in scenarios {
        let t = Instant::now();
        match f(&e) {
            Ok(()) => println!("ok   {name} ({:.1} s)", t.elapsed().as_secs_f64()),
            Err(err) => {
                println!("FAIL {name}: {err:#}");
                failed.push(*name);
            }
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

const SPIN_IMAGE: &str = "docker.io/library/spin-hello:faults";

/// containerd restarted under one pod's running native and Spin tasks: the tasks, their
/// pids and the pod's shim survive, the Spin app keeps serving, exits after the restart are
/// reported, a new create in the pod works, and deleting leaves no cgroup or shim.
fn restart_leg(version: ContainerdVersion) -> Result<()> {
    let images = tempfile::tempdir()?;
    let built = TestImages::build(images.path())?;
    let spin_tar = images.path().join("spin.tar");
    oci_image_builder::spin::container_image(
        SPIN_IMAGE,
        &integration::workspace_root().join("tests/apps/spin-hello"),
        &[],
    )?
    .write_archive(&spin_tar)?;
    let mut c = Containerd::start(version, CgroupMode::Host)?;
    for tar in [&built.wasi_hello, &built.busybox, &spin_tar] {
        c.import(tar, false)?;
    }
    let root = unique("restart-");
    let _guard = CgroupGuard::new(&root);
    let runtime = test_runtime();
    let pod = unique("rpod");
    let annotation = format!("io.kubernetes.cri.sandbox-id={pod}");
    let port = integration::free_loopback_port()?;
    let listen = format!("SPIN_HTTP_LISTEN_ADDR=127.0.0.1:{port}");
    let (n, s, w) = (unique("rn"), unique("rs"), unique("rw"));
    let cg = |id: &str| format!("/{root}/{id}");
    let run = |c: &Containerd, id: &str, extra: &[&str], image: &str, cmd: &[&str]| {
        let cgroup = cg(id);
        let mut a = vec![
            "run",
            "--runtime",
            &runtime,
            "--cgroup",
            &cgroup,
            "--annotation",
            &annotation,
        ];
        a.extend(extra);
        a.push(image);
        a.push(id);
        a.extend(cmd);
        c.ctr_ok(&a)
    };
    let result = (|| -> Result<()> {
        run(&c, &n, &["-d"], BUSYBOX, &["/bin/sleep", "60"])?;
        run(
            &c,
            &s,
            &["-d", "--net-host", "--env", &listen],
            SPIN_IMAGE,
            &["/"],
        )?;
        let n_pid = c.wait_task_status(&n, "RUNNING", Duration::from_secs(30))?;
        let s_pid = c.wait_task_status(&s, "RUNNING", Duration::from_secs(30))?;
        let get = || {
            wait_for(Duration::from_secs(30), || {
                integration::http_get(port, "/").ok()
            })
        };
        let before = get().context("the Spin app does not answer")?;
        let shims = c.shim_pids();
        c.restart()?;
        ensure!(
            c.wait_task_status(&n, "RUNNING", Duration::from_secs(30))? == n_pid
                && c.wait_task_status(&s, "RUNNING", Duration::from_secs(30))? == s_pid,
            "task pids changed over the restart: {:?}",
            c.task_list()
        );
        ensure!(
            c.shim_pids() == shims,
            "shims {shims:?} became {:?}",
            c.shim_pids()
        );
        // The first line names the component (later ones carry the client's port).
        let first = |r: &(u16, String)| (r.0, r.1.lines().next().unwrap_or("").to_string());
        let after = get();
        ensure!(
            after.as_ref().map(first) == Some(first(&before)),
            "the Spin app answered {before:?} before the restart, {after:?} after"
        );
        c.ctr_ok(&["task", "kill", "-s", "SIGKILL", &n])?;
        c.wait_task_status(&n, "STOPPED", Duration::from_secs(20))?;
        c.ctr_ok(&["task", "kill", "-s", "SIGTERM", &s])?;
        c.wait_task_status(&s, "STOPPED", Duration::from_secs(20))?;
        let out = run(&c, &w, &["--rm"], WASI_HELLO, &[HELLO, "exit", "0"])?;
        ensure!(
            c.shim_pids() == shims,
            "the create after the restart did not go to the pod's shim"
        );
        for id in [&n, &s] {
            c.ctr_ok(&["task", "delete", id])?;
            c.ctr_ok(&["container", "delete", id])?;
        }
        let left = wait_for(Duration::from_secs(15), || {
            let cgs: Vec<_> = [&n, &s, &w]
                .iter()
                .flat_map(|i| cgroup_exists(&cg(i)))
                .collect();
            (cgs.is_empty() && c.shim_pids().is_empty()).then_some(())
        });
        ensure!(
            left.is_some(),
            "left after deleting: shims {:?}, cgroups {:?}",
            c.shim_pids(),
            [&n, &s, &w]
                .iter()
                .flat_map(|i| cgroup_exists(&cg(i)))
                .collect::<Vec<_>>()
        );
        println!(
            "{version:?} restart: native {n_pid} and Spin {s_pid} kept running in shim \
             {shims:?}, Spin answered {} after, exits seen, next create ran ({})",
            before.0,
            out.lines().next().unwrap_or("")
        );
        Ok(())
    })();
    if result.is_err() {
        for id in [&n, &s, &w] {
            c.force_remove(id);
        }
    }
    result.with_context(|| format!("containerd {version:?}; log tail:\n{}", c.log_tail(20)))
}

#[test]
fn containerd_restart_keeps_running_tasks() {
    let Some(_serial) = integration::root_test("containerd_restart_keeps_running_tasks") else {
        return;
    };
    let mut failed = Vec::new();
    for v in [ContainerdVersion::V1_6, ContainerdVersion::V1_7] {
        if let Err(e) = restart_leg(v) {
            println!("FAIL {v:?}: {e:#}");
            failed.push(v);
        }
    }
    assert!(failed.is_empty(), "failed on {failed:?}");
}
