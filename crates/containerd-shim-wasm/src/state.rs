//! What the shim keeps on disk per container, so that `delete` works without the server
//! (after a shim crash or a containerd restart), and the cleanup both paths share.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use cgroup_placement::Placement;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::zygote::LIBCONTAINER_ID;

/// File in the bundle holding [`Persisted`].
pub const STATE_FILE: &str = "spin-shim-state.json";

/// Base directory of the per-container libcontainer state roots; override with
/// `SPIN_SHIM_STATE_DIR` (keep it short: unix socket paths must stay under 108 bytes).
pub const DEFAULT_STATE_DIR: &str = "/run/spin-shim";

/// Exit status reported for a task whose exit was never seen (killed by the shim): 128 +
/// SIGKILL, as runc's shim reports.
pub const KILLED_EXIT_STATUS: u32 = 128 + libc::SIGKILL as u32;

/// Upper bound on stacked mounts [`unmount_rootfs`] takes off the rootfs mount point.
const MAX_STACKED_MOUNTS: usize = 16;

/// [`kill_all`] signals the cgroup's processes up to this many times ...
const KILL_ALL_ROUNDS: usize = 50;
/// ... this far apart (about a second in all).
const KILL_ALL_INTERVAL: Duration = Duration::from_millis(20);

/// Per-container state saved in the bundle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Persisted {
    /// containerd's container id.
    pub id: String,
    /// libcontainer state root of this container.
    pub state_root: PathBuf,
    /// Where the container's cgroup lives.
    pub placement: Placement,
    /// The rootfs mount point the shim mounted (None: containerd mounted nothing).
    pub rootfs_mounted: Option<PathBuf>,
    /// Init pid once known.
    pub pid: Option<i32>,
}

impl Persisted {
    /// Writes the state into `bundle`.
    pub fn save(&self, bundle: &Path) -> anyhow::Result<()> {
        let p = bundle.join(STATE_FILE);
        let tmp = bundle.join(format!("{STATE_FILE}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
        Ok(())
    }

    /// Reads the state from `bundle` (None if the shim never saved one there).
    pub fn load(bundle: &Path) -> anyhow::Result<Option<Self>> {
        let p = bundle.join(STATE_FILE);
        match std::fs::read(&p) {
            Ok(b) => Ok(Some(
                serde_json::from_slice(&b).with_context(|| format!("parsing {}", p.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    }
}

/// The libcontainer state root for a container: a short hash of its bundle path (unique
/// per containerd instance, namespace and id) under the state dir.
pub fn state_root(bundle: &Path) -> PathBuf {
    let base = std::env::var_os("SPIN_SHIM_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let digest = Sha256::digest(bundle.as_os_str().as_encoded_bytes());
    base.join(&hex::encode(digest)[..16])
}

/// Mounts containerd's rootfs mounts at `target` (created if missing).
pub fn mount_rootfs(
    mounts: &[containerd_shim::protos::api::Mount],
    target: &Path,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(target).with_context(|| format!("creating {}", target.display()))?;
    for m in mounts {
        let ty = (!m.type_.is_empty()).then_some(m.type_.as_str());
        let src = (!m.source.is_empty()).then_some(m.source.as_str());
        containerd_shim::mount::mount_rootfs(ty, src, &m.options, target).map_err(|e| {
            anyhow::anyhow!(
                "mounting rootfs ({} {} {:?}) at {}: {e}",
                m.type_,
                m.source,
                m.options,
                target.display()
            )
        })?;
    }
    Ok(())
}

/// Unmounts everything mounted at `target` (lazily, stacked mounts included).
pub fn unmount_rootfs(target: &Path) {
    for _ in 0..MAX_STACKED_MOUNTS {
        if nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH).is_err() {
            break;
        }
    }
}

/// Kills every process left in the container's cgroup and waits (bounded) until it is
/// empty. Returns the pids that were signalled.
pub fn kill_all(placement: &Placement) -> Vec<i32> {
    let mut killed = Vec::new();
    for _ in 0..KILL_ALL_ROUNDS {
        let pids = placement.pids().unwrap_or_default();
        if pids.is_empty() {
            break;
        }
        for &pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            if !killed.contains(&pid) {
                killed.push(pid);
            }
        }
        std::thread::sleep(KILL_ALL_INTERVAL);
    }
    killed
}

/// Removes what a container left: libcontainer state (running its poststop hooks), the
/// container's cgroup (never anything above it), the state root and the rootfs mount.
/// Every step runs even when an earlier one fails; the first error is returned.
pub fn cleanup(p: &Persisted, bundle: &Path) -> anyhow::Result<()> {
    let mut first: Option<anyhow::Error> = None;
    let container_dir = p.state_root.join(LIBCONTAINER_ID);
    if container_dir.exists() {
        match libcontainer::container::Container::load(container_dir.clone()) {
            Ok(mut c) => {
                if let Err(e) = c.delete(true) {
                    tracing::warn!(id = %p.id, "libcontainer delete: {e}");
                }
            }
            Err(e) => tracing::warn!(id = %p.id, "loading libcontainer state: {e}"),
        }
    }
    if let Err(e) = p.placement.remove() {
        first.get_or_insert(anyhow::anyhow!("removing the cgroup of {}: {e:#}", p.id));
    }
    if p.state_root.exists() {
        if let Err(e) = std::fs::remove_dir_all(&p.state_root) {
            first.get_or_insert(anyhow::anyhow!("removing {}: {e}", p.state_root.display()));
        }
    }
    if let Some(r) = &p.rootfs_mounted {
        unmount_rootfs(r);
    }
    let _ = std::fs::remove_file(bundle.join(STATE_FILE));
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_root_is_short_and_stable() {
        let b1 = PathBuf::from(format!("/tmp/x/state/k8s.io/{}", "a".repeat(64)));
        let b2 = PathBuf::from(format!("/tmp/y/state/k8s.io/{}", "a".repeat(64)));
        let r1 = state_root(&b1);
        assert_eq!(r1, state_root(&b1));
        assert_ne!(r1, state_root(&b2));
        // notify socket path libcontainer creates must fit sockaddr_un.
        let sock = r1.join(LIBCONTAINER_ID).join("notify.sock");
        assert!(sock.as_os_str().len() < 108, "{}", sock.display());
    }
}
