//! Watches a container's memory cgroup for OOM kills, as containerd's runc shim does:
//! cgroup v1 through `cgroup.event_control` + an eventfd on `memory.oom_control`, cgroup v2
//! by polling the `oom_kill` counter in `memory.events`. Each watcher is one thread that
//! ends when the cgroup is removed.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cgroup_placement::Placement;

/// How often the cgroup v2 watcher reads `memory.events` (v2 has no OOM eventfd).
const V2_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Reads the `oom_kill` counter from a `memory.oom_control` (v1) or `memory.events` (v2)
/// body.
pub fn oom_kill_count(body: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn read_count(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()
        .map(|b| oom_kill_count(&b))
}

/// Starts a watcher calling `on_oom` once per OOM kill in the container's memory cgroup.
/// Does nothing when the host has no memory controller for the container.
pub fn watch(placement: &Placement, on_oom: impl Fn() + Send + 'static) {
    let v1_memory = placement
        .v1_dirs()
        .into_iter()
        .find(|(c, _)| c.split(',').any(|c| c == "memory"))
        .map(|(_, d)| d);
    if let Some(dir) = v1_memory {
        if dir.join("memory.oom_control").exists() {
            std::thread::spawn(move || {
                if let Err(e) = watch_v1(&dir, &on_oom) {
                    tracing::debug!("OOM watch of {} ended: {e}", dir.display());
                }
            });
        }
        return;
    }
    if let Some(dir) = placement.unified_dir() {
        if dir.join("memory.events").exists() {
            std::thread::spawn(move || watch_v2(dir, &on_oom));
        }
    }
}

fn watch_v1(dir: &Path, on_oom: &dyn Fn()) -> std::io::Result<()> {
    let control_path = dir.join("memory.oom_control");
    let control = File::open(&control_path)?;
    // SAFETY: eventfd returns a new descriptor we own.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: efd is a fresh descriptor owned here.
    let mut event = unsafe { File::from_raw_fd(efd) };
    std::fs::write(
        dir.join("cgroup.event_control"),
        format!("{} {}", event.as_raw_fd(), control.as_raw_fd()),
    )?;
    let mut seen = read_count(&control_path).unwrap_or(0);
    let mut buf = [0u8; 8];
    loop {
        event.read_exact(&mut buf)?;
        // The kernel also signals when the cgroup is removed.
        let Some(now) = read_count(&control_path) else {
            return Ok(());
        };
        if now > seen || now == 0 {
            on_oom();
        }
        seen = now;
    }
}

fn watch_v2(dir: PathBuf, on_oom: &dyn Fn()) {
    let events = dir.join("memory.events");
    let mut seen = read_count(&events).unwrap_or(0);
    while let Some(now) = read_count(&events) {
        if now > seen {
            on_oom();
            seen = now;
        }
        std::thread::sleep(V2_POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_oom_kill_counter() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(oom_kill_count(v1), 2);
        let v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(oom_kill_count(v2), 1);
        assert_eq!(oom_kill_count("oom_kill_disable 0\nunder_oom 0\n"), 0);
    }
}
