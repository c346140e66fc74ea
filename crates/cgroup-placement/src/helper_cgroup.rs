//! Transient cgroups for helper processes that work for a container on unified (cgroup v2)
//! hosts, next to the container's own cgroup: below the same parent (the pod's cgroup, or
//! the pod's slice under the systemd driver), so the pod's limits hold them.
//!
//! Two reasons a helper does not simply join the container's cgroup there:
//! - under the systemd driver that cgroup is a scope systemd creates only when the container
//!   starts, after Create: a helper in Create would stay in the shim's cgroup;
//! - kubelet sets `memory.oom.group = 1` on a container's cgroup on v2: an OOM kill of a
//!   helper charged to it (a background compile while the container serves) kills the
//!   whole container with it. The helper's own cgroup has `memory.oom.group = 0` and the
//!   container's memory limit as its own `memory.max`, so a helper that outgrows it is OOM
//!   killed alone (its OOM domain is its own cgroup); when the pod's limit is reached
//!   instead, the kernel kills within the pod by badness, the helper first (its
//!   `oom_score_adj` is 1000), and the pod's cgroup has no `oom.group` of its own.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;

use crate::host::CgroupLayout;
use crate::path::MAX_COMPONENT_LEN;
use crate::placement::{remove_cgroup_tree, Placement};

/// Suffix of helper cgroup names: `<container's cgroup name without .scope>.compile-<n>`.
pub const HELPER_CGROUP_SUFFIX: &str = ".compile-";

/// One helper's transient cgroup (see the module docs); removed by [`HelperCgroup::remove`].
#[derive(Debug)]
pub struct HelperCgroup {
    dir: PathBuf,
    /// Parent directories this cgroup's creation made (deepest last).
    made: Vec<PathBuf>,
}

/// The controllers a helper's cgroup is given when its parents offer them.
const CONTROLLERS: &[&str] = &["memory", "cpu", "pids"];

impl Placement {
    /// Creates a transient cgroup for one helper process next to the container's cgroup
    /// on unified hosts, with `memory.oom.group = 0` and the container's limits: its
    /// `memory.max`, `cpu.max` and `pids.max` where its cgroup already exists (cgroupfs
    /// driver, or once the container runs), else `memory_limit` (the spec's) as
    /// `memory.max`. Missing parents are created (the pod's slice before its first scope
    /// under the systemd driver) and removed again with it. `None` on legacy and hybrid
    /// hosts, where helpers join the container's own cgroups (v1 has no `oom.group`, and
    /// the systemd driver is only used on unified hosts).
    pub fn create_helper_cgroup(
        &self,
        memory_limit: Option<u64>,
    ) -> anyhow::Result<Option<HelperCgroup>> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        if self.layout() != CgroupLayout::Unified {
            return Ok(None);
        }
        let Some(own) = self.unified_dir() else {
            return Ok(None);
        };
        let (Some(parent), Some(name)) = (own.parent(), own.file_name()) else {
            anyhow::bail!("cgroup {} has no parent", own.display());
        };
        let name = helper_name(&name.to_string_lossy(), SEQ.fetch_add(1, Ordering::Relaxed));
        let root = self
            .unified_root()
            .context("unified host without cgroup2 root")?;
        let mut made = Vec::new();
        let mut level = root.to_path_buf();
        for component in parent.strip_prefix(root).unwrap_or(parent).components() {
            enable_controllers(&level);
            level.push(component);
            match std::fs::create_dir(&level) {
                Ok(()) => made.push(level.clone()),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => {
                    let cg = HelperCgroup {
                        dir: PathBuf::new(),
                        made,
                    };
                    cg.remove_parents();
                    return Err(e).with_context(|| format!("creating cgroup {}", level.display()));
                }
            }
        }
        enable_controllers(&level);
        let dir = level.join(name);
        let cg = HelperCgroup {
            dir: dir.clone(),
            made,
        };
        if let Err(e) = std::fs::create_dir(&dir) {
            cg.remove_parents();
            return Err(e).with_context(|| format!("creating cgroup {}", dir.display()));
        }
        let copy = |file: &str| std::fs::read_to_string(own.join(file)).ok();
        let memory = copy("memory.max").or(memory_limit.map(|l| l.to_string()));
        let settings = [
            ("memory.oom.group", Some("0".to_string())),
            ("memory.max", memory),
            ("memory.swap.max", copy("memory.swap.max")),
            ("cpu.max", copy("cpu.max")),
            ("pids.max", copy("pids.max")),
        ];
        for (file, value) in settings {
            let Some(value) = value else { continue };
            let path = dir.join(file);
            if !path.exists() {
                // The controller is not enabled above: the parent's limits still apply.
                tracing::debug!("helper cgroup: no {}", path.display());
                continue;
            }
            if let Err(e) = std::fs::write(&path, value.trim()) {
                let _ = cg.remove();
                return Err(e)
                    .with_context(|| format!("writing {} into {}", value.trim(), path.display()));
            }
        }
        Ok(Some(cg))
    }
}

impl Placement {
    /// Removes this container's helper cgroups that are still there (a background compile
    /// still running when the container is deleted), killing what is inside: they sit
    /// beside the container's cgroup, so removing that one leaves them, and the pod's cgroup
    /// could not be removed after the container's. Their owners' later removal finds them
    /// gone, which is fine.
    pub(crate) fn remove_helper_cgroups(&self) -> anyhow::Result<()> {
        if self.layout() != CgroupLayout::Unified {
            return Ok(());
        }
        let Some(own) = self.unified_dir() else {
            return Ok(());
        };
        let (Some(parent), Some(name)) = (own.parent(), own.file_name()) else {
            return Ok(());
        };
        let name = name.to_string_lossy();
        let prefix = format!(
            "{}{HELPER_CGROUP_SUFFIX}",
            name.strip_suffix(".scope").unwrap_or(&name)
        );
        let entries = match std::fs::read_dir(parent) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("listing {}", parent.display())),
        };
        let mut errors = Vec::new();
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let n = file_name.to_string_lossy();
            let ours = n
                .strip_prefix(&prefix)
                .is_some_and(|seq| !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()));
            if ours && entry.file_type().is_ok_and(|t| t.is_dir()) {
                if let Err(e) = remove_cgroup_tree(&entry.path()) {
                    errors.push(format!("{e:#}"));
                }
            }
        }
        if !errors.is_empty() {
            anyhow::bail!("removing helper cgroups: {}", errors.join("; "));
        }
        Ok(())
    }
}

impl HelperCgroup {
    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the cgroup (killing what is left in it) and the parents its creation made
    /// (only while empty: another container may have been placed there meanwhile).
    pub fn remove(self) -> anyhow::Result<()> {
        let r = remove_cgroup_tree(&self.dir);
        self.remove_parents();
        r
    }

    fn remove_parents(&self) {
        for dir in self.made.iter().rev() {
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::debug!("leaving cgroup {}: {e}", dir.display());
                break;
            }
        }
    }
}

/// `<name without .scope>.compile-<seq>`, within the kernel's name length.
fn helper_name(container: &str, seq: u64) -> String {
    let suffix = format!("{HELPER_CGROUP_SUFFIX}{seq}");
    let mut stem = container.strip_suffix(".scope").unwrap_or(container);
    let room = MAX_COMPONENT_LEN - suffix.len();
    if stem.len() > room {
        let mut cut = room;
        while !stem.is_char_boundary(cut) {
            cut -= 1;
        }
        stem = &stem[..cut];
    }
    format!("{stem}{suffix}")
}

/// Enables [`CONTROLLERS`] that `dir` offers in its `cgroup.subtree_control` (best effort:
/// a level holding processes refuses, and the nearest level with the controller then
/// accounts for the helper).
fn enable_controllers(dir: &Path) {
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    for c in CONTROLLERS {
        let has = |text: &str| text.split_whitespace().any(|w| w == *c);
        if has(&offered) && !has(&enabled) {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_names_follow_the_container_and_fit() {
        assert_eq!(
            helper_name("cri-containerd-abc.scope", 3),
            "cri-containerd-abc.compile-3"
        );
        assert_eq!(helper_name("abc", 0), "abc.compile-0");
        let long = helper_name(&"x".repeat(255), 12);
        assert_eq!(long.len(), MAX_COMPONENT_LEN);
        assert!(long.ends_with(".compile-12"));
    }
}
