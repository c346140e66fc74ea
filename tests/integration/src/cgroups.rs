//! Reading a process's cgroups and removing the cgroups a test caused.

use anyhow::{Context, Result};
use std::path::PathBuf;

pub use kubelet_pod::cgroups::{parse_hierarchies, parse_proc_cgroups, CgroupLine, Hierarchy};

/// Parses `/proc/<pid>/cgroup`.
pub fn proc_cgroups(pid: i32) -> Result<Vec<CgroupLine>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .with_context(|| format!("cannot read /proc/{pid}/cgroup: has the process exited?"))?;
    Ok(parse_proc_cgroups(&text))
}

/// The mount points of a mountinfo text, in order (field 5 of each line).
pub fn mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}

/// Mount points of every cgroup hierarchy this process sees (v1 ones and the unified one).
pub fn host_hierarchies() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = parse_hierarchies(&info)
        .into_iter()
        .map(|h| h.mount)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn hybrid_mountinfo() {
        let hs = parse_hierarchies(MOUNTINFO);
        assert_eq!(hs.len(), 4);
        assert_eq!(
            hs.iter()
                .find(|h| h.controllers.iter().any(|c| c == "cpuacct"))
                .unwrap()
                .mount,
            Path::new("/sys/fs/cgroup/cpuacct")
        );
        assert!(hs
            .iter()
            .any(|h| h.controllers.iter().any(|c| c == "name=systemd")));
        assert_eq!(
            hs.iter().find(|h| h.unified).unwrap().mount,
            Path::new("/sys/fs/cgroup/unified")
        );
    }

    #[test]
    fn bind_over_root_hides_what_was_mounted_there_and_below() {
        // The private v2 namespace: unified bound over /sys/fs/cgroup hides the tmpfs there
        // and the v1 mounts below it.
        let text =
            format!("{MOUNTINFO}50 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n");
        let hs = parse_hierarchies(&text);
        assert!(hs
            .iter()
            .any(|h| h.unified && h.mount == Path::new("/sys/fs/cgroup")));
    }

    #[test]
    fn proc_cgroup_lines() {
        let l = parse_proc_cgroups("9:name=systemd:/a\n0::/u/v\nbad\n");
        assert_eq!(l.len(), 2);
        assert_eq!(
            (l[1].id, l[1].controllers.as_str(), l[1].path.as_str()),
            (0, "", "/u/v")
        );
        assert_eq!(
            mount_points("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"),
            ["/sys/fs/cgroup"]
        );
    }
}
