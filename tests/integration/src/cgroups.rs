//! Reading a process's cgroups and removing the cgroups a test caused.

use anyhow::{Context, Result};
use std::path::PathBuf;

/// One line of `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLine {
    /// Hierarchy id (0 for the unified hierarchy).
    pub id: u32,
    /// Controllers (`cpu`, `name=systemd`, empty for unified).
    pub controllers: String,
    /// Path relative to the hierarchy root.
    pub path: String,
}

/// Parses `/proc/<pid>/cgroup`.
pub fn proc_cgroups(pid: i32) -> Result<Vec<CgroupLine>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .with_context(|| format!("cannot read /proc/{pid}/cgroup: has the process exited?"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            Some(CgroupLine {
                id: it.next()?.parse().ok()?,
                controllers: it.next()?.to_string(),
                path: it.next()?.to_string(),
            })
        })
        .collect())
}

/// Mount points of every cgroup hierarchy on the host (v1 ones and the unified one).
pub fn host_hierarchies() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split(' ').next()?;
            let mp = pre.split(' ').nth(4)?;
            (fstype == "cgroup" || fstype == "cgroup2").then(|| PathBuf::from(mp))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Hierarchies (mount points) where the relative cgroup `path` exists.
pub fn cgroup_exists(path: &str) -> Vec<PathBuf> {
    let rel = path.trim_start_matches('/');
    host_hierarchies()
        .into_iter()
        .map(|h| h.join(rel))
        .filter(|p| p.is_dir())
        .collect()
}

/// Removes, on drop, a cgroup subtree a test caused in every hierarchy: everything below
/// `path` (depth first, `rmdir` only: cgroups with processes stay), `path` itself, and
/// those of its ancestors that did not exist when the guard was made, when empty.
pub struct CgroupGuard {
    path: String,
    created_ancestors: Vec<(PathBuf, String)>,
}

impl CgroupGuard {
    /// Guards `path` (relative to each hierarchy root, e.g. `/kubepods/burstable/pod<uid>`).
    pub fn new(path: &str) -> Self {
        let path = path.trim_matches('/').to_string();
        let mut created_ancestors = Vec::new();
        for h in host_hierarchies() {
            let mut anc = String::new();
            for part in path.split('/') {
                anc = if anc.is_empty() {
                    part.to_string()
                } else {
                    format!("{anc}/{part}")
                };
                if !h.join(&anc).exists() {
                    created_ancestors.push((h.clone(), anc.clone()));
                }
            }
        }
        Self {
            path,
            created_ancestors,
        }
    }

    /// The guarded path.
    pub fn path(&self) -> &str {
        &self.path
    }
}

fn rmdir_tree(dir: &std::path::Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        for h in host_hierarchies() {
            rmdir_tree(&h.join(&self.path));
        }
        // Deepest first.
        let mut anc = self.created_ancestors.clone();
        anc.sort_by_key(|(_, a)| std::cmp::Reverse(a.len()));
        for (h, a) in anc {
            let _ = std::fs::remove_dir(h.join(a));
        }
    }
}

/// Mount point of the v1 hierarchy carrying `controller` (e.g. `cpuacct`), if any.
pub fn v1_hierarchy(controller: &str) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut f = post.split(' ');
        let (fstype, _src, opts) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup" && opts.split(',').any(|o| o == controller))
            .then(|| PathBuf::from(pre.split(' ').nth(4).unwrap_or_default()))
    })
}

/// Total CPU time (ns) of the cgroup at `path`: from the unified hierarchy's `cpu.stat`
/// (`usage_usec`, present in every v2 cgroup) when `unified`, else v1 `cpuacct.usage`.
pub fn cpu_usage_ns(path: &str, unified: bool) -> Result<u64> {
    let rel = path.trim_start_matches('/');
    if unified {
        let p = PathBuf::from("/sys/fs/cgroup/unified")
            .join(rel)
            .join("cpu.stat");
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        let usec = text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
            .with_context(|| format!("{} has no usage_usec", p.display()))?;
        Ok(usec * 1000)
    } else {
        let h = v1_hierarchy("cpuacct").context("no v1 cpuacct hierarchy on this host")?;
        let p = h.join(rel).join("cpuacct.usage");
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} is not a number", p.display()))
    }
}
