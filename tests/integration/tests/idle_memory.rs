//! Memory per pod (issue 40): a Spin container's runtime gives back the shim binary's pages
//! it mapped while serving once it has been idle (`SPIN_SHIM_IDLE_RELEASE_SECS`), inside
//! its confinement (no `/proc`, seccomp), and serves on afterwards.
//!
//! spin-hello through `ctr run` on a private containerd 1.7: 50 requests map the request
//! path's code (with the kernel's read-around, well over 10 MiB of the binary); with the
//! period set to 1 s the container's resident code must fall below half of that while it
//! is quiet, and the next request must still answer 200.
//! Run as root: `cargo test --release --workspace --test idle_memory -- --nocapture`.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use integration::{
    require_shim, wait_for, workspace_root, CgroupMode, Containerd, ContainerdVersion,
};
use oci_image_builder::spin;

/// Resident KiB of `pid`'s executable mappings of its own binary (code and read-only data).
fn binary_rss_kib(pid: i32) -> Result<u64> {
    let inode = std::fs::metadata(format!("/proc/{pid}/exe"))?
        .ino()
        .to_string();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .with_context(|| format!("reading /proc/{pid}/smaps"))?;
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.first()
            .is_some_and(|r| r.contains('-') && !r.ends_with(':'))
            && f.len() >= 5
        {
            ours = f[4] == inode && f[1] == "r-xp";
        } else if let (true, Some(v)) = (ours, line.strip_prefix("Rss:")) {
            kib += v.trim().trim_end_matches("kB").trim().parse::<u64>()?;
        }
    }
    Ok(kib)
}

fn idle_container_releases_code() -> Result<()> {
    require_shim()?;
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
    let name = "docker.io/library/spin-hello:idle-memory";
    let tar = dir.path().join("spin-hello.tar");
    spin::container_image(name, &workspace_root().join("tests/apps/spin-hello"), &[])
        .context("building the spin-hello image (run `make apps`)")?
        .write_archive(&tar)?;
    c.import(&tar, false)?;
    let app = c.run_spin_app(
        name,
        &["--env".into(), "SPIN_SHIM_IDLE_RELEASE_SECS=1".into()],
    )?;
    for i in 0..50 {
        let (status, body) = app.get("/hello")?;
        ensure!(status == 200, "request {i}: {status} {body}");
    }
    let pid = c
        .task_pid(&app.id)
        .with_context(|| format!("no pid for task {}", app.id))?;
    let busy = binary_rss_kib(pid)?;
    println!("after 50 requests: {busy} KiB of the shim binary's code resident");
    ensure!(
        busy > 4 * 1024,
        "serving mapped only {busy} KiB of code: nothing to measure the release against"
    );
    let idle = wait_for(Duration::from_secs(30), || {
        let now = binary_rss_kib(pid).ok()?;
        (now * 2 < busy).then_some(now)
    });
    let idle = idle.with_context(|| {
        format!(
            "the idle container kept {} KiB of code resident after 30 s (busy: {busy} KiB)",
            binary_rss_kib(pid).unwrap_or(0)
        )
    })?;
    println!("idle: {idle} KiB resident");
    let (status, body) = app.get("/hello")?;
    ensure!(status == 200, "after the release: {status} {body}");
    Ok(())
}

#[test]
fn idle_spin_container_releases_the_code_it_mapped() {
    let Some(_s) = integration::root_test("idle_spin_container_releases_the_code_it_mapped") else {
        return;
    };
    idle_container_releases_code().unwrap_or_else(|e| panic!("{e:#}"));
}
