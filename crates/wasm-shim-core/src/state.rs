//! What the shim keeps on disk per container, so that `delete` works without the server
//! (after a shim crash or a containerd restart), and the cleanup both paths share.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use cgroup_placement::Placement;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::zygote::LIBCONTAINER_ID;

/// File in the bundle holding [`Persisted`] (`<engine>-shim-state.json`).
fn state_file() -> &'static str {
    &crate::shim_names().state_file
}

/// Exit status reported for a task whose exit was never seen (killed by the shim): 128 +
/// SIGKILL, as runc's shim reports.
pub const KILLED_EXIT_STATUS: u32 = 128 + libc::SIGKILL as u32;

/// Upper bound on stacked mounts [`unmount_rootfs`] takes off the rootfs mount point.
const MAX_STACKED_MOUNTS: usize = 16;

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
        let p = bundle.join(state_file());
        let tmp = bundle.join(format!("{}.tmp", state_file()));
        std::fs::write(&tmp, serde_json::to_vec(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
        Ok(())
    }

    /// Reads the state from `bundle` (None if the shim never saved one there).
    pub fn load(bundle: &Path) -> anyhow::Result<Option<Self>> {
        let p = bundle.join(state_file());
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
/// per containerd instance, namespace and id) under the state dir
/// ([`crate::engine::ShimNames::state_dir`]).
pub fn state_root(bundle: &Path) -> PathBuf {
    let base = crate::shim_names().state_dir();
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
    // The state root holds what the shim materialised from the image (trees an image
    // shaped): removed without recursion, links or crossing mounts.
    if let Err(e) = crate::confined::remove_tree(&p.state_root) {
        first.get_or_insert(e.context(format!("removing {}", p.state_root.display())));
    }
    if let Some(r) = &p.rootfs_mounted {
        unmount_rootfs(r);
    }
    let _ = std::fs::remove_file(bundle.join(state_file()));
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
