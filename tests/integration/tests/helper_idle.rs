//! Memory per pod (issue 40): the shim server ends its pod's container-creation helper once
//! no create has come for `SPIN_SHIM_IDLE_RELEASE_SECS`, through a private containerd 1.7 on
//! host cgroups with the period set to 1 s: the helper exits while the pod's Wasm task runs
//! on undisturbed, and the next create in the pod starts a new helper and works.
//! Run as root: `cargo test --release --workspace --test helper_idle -- --nocapture`.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{children, cmdline, require_shim, unique, wait_for, Containerd, SleeperPod};

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

fn idle_helper_ends() -> Result<()> {
    require_shim()?;
    let pod = SleeperPod::start(
        "hi-",
        vec![("SPIN_SHIM_IDLE_RELEASE_SECS".into(), "1".into())],
    )?;
    let (c, run_ok) = (&pod.c, |id: &str| pod.run(id));
    let (a, b) = (unique("ha"), unique("hb"));
    let _ra = Removes(c, a.clone());
    let a_pid = run_ok(&a)?;
    let server = pod.server_of(a_pid)?;
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
    let _rb = Removes(c, b.clone());
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
