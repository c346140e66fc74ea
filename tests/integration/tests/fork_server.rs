//! Memory per pod (issue 40): a pod's container-creation helper is forked from the shim
//! server's fork server, so the server and the pod's Wasm container share the binary's
//! relocated data (the same physical pages, private-anonymous, in both), while neither the
//! fork server, the helper nor the container sees the server's environment. With the fork
//! server killed, the next create still works, through an exec'd helper.
//! Private containerd 1.7 on host cgroups.
//! Run as root: `cargo test --release --workspace --test fork_server -- --nocapture`.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{children, cmdline, require_shim, unique, wait_for, Containerd, SleeperPod};

const HELPER_ARG: &str = "--container-creation-helper";
const FORK_SERVER_ARG: &str = "--container-creation-fork-server";
/// A variable of containerd's (so the shim server's) environment.
const MARK: &str = "FORK_SERVER_TEST_MARK";

/// Removes a container (task included) when dropped.
struct Removes<'a>(&'a Containerd, String);

impl Drop for Removes<'_> {
    fn drop(&mut self) {
        self.0.force_remove(&self.1);
    }
}

fn environ(pid: i32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default())
        .into_owned()
}

/// Children of `server` whose command line holds `arg`.
fn children_with(server: i32, arg: &str) -> Vec<i32> {
    children(server)
        .into_iter()
        .filter(|p| cmdline(*p).iter().any(|a| a == arg))
        .collect()
}

/// The (start, end) of the mappings of the server's executable file in `pid`.
fn exe_mappings(pid: i32, exe: &str) -> Result<Vec<(u64, u64)>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(maps
        .lines()
        .filter(|l| l.ends_with(exe))
        .filter_map(|l| {
            let (s, e) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(s, 16).ok()?,
                u64::from_str_radix(e, 16).ok()?,
            ))
        })
        .collect())
}

/// The pagemap entry of each page of [start, end) in `pid`.
fn pagemap(pid: i32, start: u64, end: u64) -> Result<Vec<u64>> {
    let mut f = std::fs::File::open(format!("/proc/{pid}/pagemap"))?;
    f.seek(SeekFrom::Start(start / 4096 * 8))?;
    let mut raw = vec![0u8; ((end - start) / 4096 * 8) as usize];
    f.read_exact(&mut raw)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// Pages of the executable's mappings that are private-anonymous (written: relocated data)
/// in both processes and backed by the same physical page.
fn shared_written_pages(a: i32, b: i32, exe: &str) -> Result<usize> {
    const PRESENT: u64 = 1 << 63;
    const FILE_OR_SHARED: u64 = 1 << 61;
    const PFN: u64 = (1 << 55) - 1;
    let mut shared = 0;
    for (start, end) in exe_mappings(a, exe)? {
        let (pa, pb) = (pagemap(a, start, end)?, pagemap(b, start, end)?);
        shared += pa
            .iter()
            .zip(&pb)
            .filter(|(x, y)| {
                let anon = |e: u64| e & PRESENT != 0 && e & FILE_OR_SHARED == 0 && e & PFN != 0;
                anon(**x) && anon(**y) && (**x & PFN) == (**y & PFN)
            })
            .count();
    }
    Ok(shared)
}

fn forked_helpers() -> Result<()> {
    require_shim()?;
    let mark = unique("mark-");
    let pod = SleeperPod::start("fs-", vec![(MARK.into(), mark.clone())])?;
    let (c, run_ok) = (&pod.c, |id: &str| pod.run(id));
    let (a, b) = (unique("fa"), unique("fb"));
    let _ra = Removes(c, a.clone());
    let a_pid = run_ok(&a)?;
    let server = pod.server_of(a_pid)?;
    ensure!(
        environ(server).contains(&mark),
        "the shim server did not get containerd's {MARK}: the check below would prove nothing"
    );
    let fork_servers = children_with(server, FORK_SERVER_ARG);
    ensure!(
        fork_servers.len() == 1,
        "shim server {server} has {} fork servers (children: {:?})",
        fork_servers.len(),
        children(server)
            .iter()
            .map(|p| (p, cmdline(*p)))
            .collect::<Vec<_>>()
    );
    let fork_server = fork_servers[0];
    let helpers: Vec<i32> = children_with(server, HELPER_ARG)
        .into_iter()
        .filter(|p| *p != a_pid)
        .collect();
    ensure!(
        helpers.len() == 1,
        "shim server {server} has {} container-creation helpers as children: {helpers:?}",
        helpers.len()
    );
    for (what, pid) in [
        ("fork server", fork_server),
        ("helper", helpers[0]),
        ("Wasm container", a_pid),
    ] {
        let env = environ(pid);
        ensure!(
            !env.contains(&mark) && !env.contains(MARK),
            "the {what} (pid {pid}) shows the server's environment: {env:?}"
        );
    }
    let exe = std::fs::read_link(format!("/proc/{server}/exe"))?
        .display()
        .to_string();
    let shared = shared_written_pages(server, a_pid, &exe)?;
    // The binary's relocated data is about 2.3 MiB; an exec'd helper's containers share none
    // of the server's.
    ensure!(
        shared >= 256,
        "the Wasm container {a_pid} shares {shared} written pages of {exe} with its server \
         {server} (expected its relocated data, over 1 MiB)"
    );

    // Without the fork server, the next create goes through an exec'd helper.
    c.ctr_ok(&["task", "kill", "-s", "SIGKILL", &a])?;
    c.wait_task_status(&a, "STOPPED", Duration::from_secs(20))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(fork_server),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let gone = wait_for(Duration::from_secs(10), || {
        (!children(server).contains(&fork_server)).then_some(())
    });
    ensure!(
        gone.is_some(),
        "the killed fork server {fork_server} was not reaped"
    );
    // The running helper was forked: end it too, so the next create needs a new one.
    for h in &helpers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*h),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _rb = Removes(c, b.clone());
    let b_pid = run_ok(&b).context("the create after the fork server was killed")?;
    ensure!(
        integration::ppid(b_pid) == Some(server),
        "{b} is not served by the pod's shim {server}"
    );
    let shared_b = shared_written_pages(server, b_pid, &exe)?;
    ensure!(
        !environ(b_pid).contains(&mark),
        "the container created by an exec'd helper shows the server's environment"
    );
    c.ctr_ok(&["task", "kill", "-s", "SIGKILL", &b])?;
    c.wait_task_status(&b, "STOPPED", Duration::from_secs(20))?;
    println!(
        "server {server}: fork server {fork_server}, helper {:?}; container {a_pid} shares \
         {shared} written pages with the server; after the fork server was killed, {b} ran \
         from an exec'd helper (sharing {shared_b})",
        helpers
    );
    Ok(())
}

#[test]
fn helpers_are_forked_share_the_servers_relocated_data_and_fall_back_to_exec() {
    let Some(_serial) = integration::root_test("fork_server") else {
        return;
    };
    forked_helpers().unwrap_or_else(|e| panic!("{e:#}"));
}
