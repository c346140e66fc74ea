//! Memory per pod (issue 40): the shim server ends its pod's container-creation helper once
//! no create has come for `SPIN_SHIM_IDLE_RELEASE_SECS`, through a private containerd 1.7 on
//! host cgroups with the period set to 1 s: the helper exits while the pod's Wasm task runs
//! on undisturbed, and the next create in the pod starts a new helper and works.
//! Run as root: `cargo test --release --workspace --test helper_idle -- --nocapture`.

use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::images::WASI_HELLO;
use integration::{
    children, cmdline, require_shim, test_runtime, unique, wait_for, CgroupGuard, CgroupMode,
    Containerd, ContainerdConfig, ContainerdVersion, TestImages,
};

const HELLO: &str = "/wasi-hello.wasm";
/// The argument that marks the shim's container-creation helper (and the Wasm containers
/// cloned from it, which run in a PID namespace of their own).
const HELPER_ARG: &str = "--container-creation-helper";

/// Removes a container (task included) when dropped.
struct Removes<'a>(&'a Containerd, String);

impl Drop for Removes<'_> {
    fn drop(&mut self) {
        self.0.force_remove(&self.1);
    }
}

fn pid_ns(pid: i32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// The container-creation helper of shim server `server`: its child running the helper's
/// command line in the server's own PID namespace.
fn helper_of(server: i32) -> Option<i32> {
    let ns = pid_ns(server)?;
    children(server)
        .into_iter()
        .find(|p| cmdline(*p).iter().any(|a| a == HELPER_ARG) && pid_ns(*p) == Some(ns.clone()))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn idle_helper_ends() -> Result<()> {
    require_shim()?;
    let images = tempfile::tempdir()?;
    let built = TestImages::build(images.path())?;
    let state_dir = tempfile::Builder::new().prefix("hi-").tempdir_in("/run")?;
    let config = ContainerdConfig {
        env: vec![
            (
                "SPIN_SHIM_STATE_DIR".into(),
                state_dir.path().display().to_string(),
            ),
            ("SPIN_SHIM_IDLE_RELEASE_SECS".into(), "1".into()),
        ],
        ..Default::default()
    };
    let c = Containerd::start_with(ContainerdVersion::V1_7, CgroupMode::Host, &config)?;
    c.import(&built.wasi_hello, false)?;
    let root = unique("helper-idle-");
    let _guard = CgroupGuard::new(&root);
    let pod = unique("hpod");
    let runtime = test_runtime();
    let run_ok = |id: &str| -> Result<i32> {
        let args: Vec<String> = [
            "run",
            "-d",
            "--runtime",
            &runtime,
            "--cgroup",
            &format!("/{root}/{id}"),
            "--annotation",
            &format!("io.kubernetes.cri.sandbox-id={pod}"),
            WASI_HELLO,
            id,
            HELLO,
            "sleep",
            "60",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = integration::output_with_timeout(c.ctr().args(&args), Duration::from_secs(90))?;
        ensure!(
            o.status.success(),
            "ctr run {id} failed: {}\nlog tail:\n{}",
            text(&o),
            c.log_tail(20)
        );
        c.wait_task_status(id, "RUNNING", Duration::from_secs(30))
    };
    let (a, b) = (unique("ha"), unique("hb"));
    let _ra = Removes(&c, a.clone());
    let a_pid = run_ok(&a)?;
    let server = integration::ppid(a_pid).context("no parent (shim server) for the task")?;
    ensure!(
        cmdline(server).iter().any(|x| x == "-socket"),
        "the parent {server} of task {a} is not a shim server: {:?}",
        cmdline(server)
    );
    // Ended within about two periods of the create; 20 s leaves room for a loaded machine.
    let gone = wait_for(Duration::from_secs(20), || {
        helper_of(server).is_none().then_some(())
    });
    ensure!(
        gone.is_some(),
        "the pod's container-creation helper {:?} still runs 20 s after the last create \
         (SPIN_SHIM_IDLE_RELEASE_SECS=1)",
        helper_of(server)
    );
    ensure!(
        c.task_pid(&a) == Some(a_pid)
            && c.wait_task_status(&a, "RUNNING", Duration::from_secs(1))
                .is_ok(),
        "task {a} was disturbed when the helper ended"
    );
    let _rb = Removes(&c, b.clone());
    let b_pid = run_ok(&b).context("the create after the idle helper ended")?;
    ensure!(
        integration::ppid(b_pid) == Some(server),
        "{b} is not served by the pod's shim {server}"
    );
    for id in [&a, &b] {
        c.ctr_ok(&["task", "kill", "-s", "SIGKILL", id])?;
        c.wait_task_status(id, "STOPPED", Duration::from_secs(20))?;
    }
    println!("helper of shim {server} ended when idle; the next create ran ({b} pid {b_pid})");
    Ok(())
}

#[test]
fn idle_container_creation_helper_ends_and_the_next_create_works() {
    let Some(_serial) = integration::root_test("helper_idle") else {
        return;
    };
    idle_helper_ends().unwrap_or_else(|e| panic!("{e:#}"));
}
