//! The cgroup side of kubelet and cAdvisor: create a pod's cgroups in every hierarchy,
//! read the figures cAdvisor reads, find where a process sits, remove what we created.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

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

/// Parses the text of a `/proc/<pid>/cgroup` file (malformed lines are skipped).
pub fn parse_proc_cgroups(text: &str) -> Vec<CgroupLine> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            Some(CgroupLine {
                id: it.next()?.parse().ok()?,
                controllers: it.next()?.to_string(),
                path: it.next()?.to_string(),
            })
        })
        .collect()
}

/// One mounted cgroup hierarchy, as `/proc/<pid>/mountinfo` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Where it is mounted, e.g. `/sys/fs/cgroup/cpuacct`.
    pub mount: PathBuf,
    /// `true` for the cgroup2 hierarchy.
    pub unified: bool,
    /// v1 controllers (and `name=` options) of the mount; empty for cgroup2.
    pub controllers: Vec<String>,
}

/// Parses mountinfo text into the cgroup hierarchies mounted at their root. A later mount
/// hides earlier ones at its mount point and below it (the private v2 namespace binds the
/// unified hierarchy over `/sys/fs/cgroup`, hiding `/sys/fs/cgroup/unified`).
pub fn parse_hierarchies(mountinfo: &str) -> Vec<Hierarchy> {
    let mut found: Vec<Hierarchy> = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        if left.len() < 5 || right.len() < 3 {
            continue;
        }
        let (root, mount_point) = (left[3], left[4]);
        let fstype = right[0];
        // Any mount on a point hides what was mounted there, and below it, before.
        found.retain(|h| !h.mount.starts_with(mount_point));
        if root != "/" {
            continue;
        }
        match fstype {
            "cgroup2" => found.push(Hierarchy {
                mount: mount_point.into(),
                unified: true,
                controllers: Vec::new(),
            }),
            "cgroup" => found.push(Hierarchy {
                mount: mount_point.into(),
                unified: false,
                controllers: right[2]
                    .split(',')
                    .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains("relatime"))
                    .map(str::to_string)
                    .collect(),
            }),
            _ => {}
        }
    }
    found
}

/// Which cgroup layout a scenario sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// This host as it is: every v1 hierarchy plus the unified one (hybrid).
    Hybrid,
    /// A pure cgroup v2 host: the unified hierarchy only (the private mount namespace
    /// where `/sys/fs/cgroup/unified` is bound over `/sys/fs/cgroup`).
    Unified,
}

/// The hierarchies a pod's cgroups live in for `layout`, from this process's mount view.
pub fn hierarchies(layout: Layout) -> Result<Vec<Hierarchy>> {
    let text =
        fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let all = parse_hierarchies(&text);
    let chosen: Vec<Hierarchy> = match layout {
        Layout::Hybrid => all,
        Layout::Unified => all.into_iter().filter(|h| h.unified).collect(),
    };
    if chosen.is_empty() {
        bail!("no cgroup hierarchy for {layout:?} in /proc/self/mountinfo: mount cgroupfs first");
    }
    Ok(chosen)
}

/// Finds the hierarchy that has v1 controller `name` (e.g. `cpuacct`).
pub fn v1_hierarchy<'a>(hs: &'a [Hierarchy], name: &str) -> Option<&'a Hierarchy> {
    hs.iter().find(|h| h.controllers.iter().any(|c| c == name))
}

/// The unified hierarchy, if mounted.
pub fn unified_hierarchy(hs: &[Hierarchy]) -> Option<&Hierarchy> {
    hs.iter().find(|h| h.unified)
}

/// Joins an absolute cgroup path (`/kubepods/...`) below a hierarchy's mount point.
pub fn cgroup_dir(h: &Hierarchy, cgroup: &str) -> PathBuf {
    h.mount.join(cgroup.trim_start_matches('/'))
}

/// The pod cgroups a test created, as kubelet would: every level of the pod's path in
/// every hierarchy. Dropping it removes the levels this guard created (deepest first);
/// a level still in use by someone else (another pod below `kubepods`) is left alone.
#[derive(Debug)]
pub struct PodCgroups {
    /// The hierarchies the pod's cgroups exist in.
    pub hierarchies: Vec<Hierarchy>,
    /// The pod cgroup's absolute path, the `cgroup_parent` handed to CRI.
    pub pod_path: String,
    created: Vec<PathBuf>,
}

impl PodCgroups {
    /// Creates `levels` (outermost first; the last is the pod cgroup) in every hierarchy of
    /// `layout`. On v1 cpuset, new levels inherit `cpuset.cpus`/`cpuset.mems` from their
    /// parent (an empty cpuset cannot hold tasks), as kubelet's cgroup manager does.
    pub fn create(layout: Layout, levels: &[String]) -> Result<Self> {
        Self::create_in(hierarchies(layout)?, levels)
    }

    /// As [`Self::create`], in the given hierarchies (e.g. another mount namespace's, seen
    /// through `/proc/<pid>/root`).
    pub fn create_in(hierarchies: Vec<Hierarchy>, levels: &[String]) -> Result<Self> {
        let pod_path = levels.last().context("no pod cgroup levels given")?.clone();
        let mut guard = PodCgroups {
            hierarchies,
            pod_path,
            created: Vec::new(),
        };
        for h in guard.hierarchies.clone() {
            let cpuset = h.controllers.iter().any(|c| c == "cpuset");
            for level in levels {
                let dir = cgroup_dir(&h, level);
                match fs::create_dir(&dir) {
                    Ok(()) => guard.created.push(dir.clone()),
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("creating pod cgroup {}", dir.display()))
                    }
                }
                if cpuset {
                    inherit_cpuset(&dir)?;
                }
            }
        }
        Ok(guard)
    }

    /// The pod cgroup's directory in hierarchy `h`.
    pub fn dir(&self, h: &Hierarchy) -> PathBuf {
        cgroup_dir(h, &self.pod_path)
    }

    /// Cumulative CPU time of the pod cgroup in nanoseconds, as cAdvisor reads it.
    pub fn cpu_usage_ns(&self, layout: Layout) -> Result<u64> {
        cpu_usage_ns(&self.hierarchies, layout, &self.pod_path)
    }

    /// Memory working set of the pod cgroup (v1 only), as cAdvisor computes it.
    pub fn memory_working_set(&self) -> Result<u64> {
        let h = v1_hierarchy(&self.hierarchies, "memory").context("no v1 memory hierarchy")?;
        memory_working_set(&self.dir(h))
    }

    /// Leftover child cgroups under the pod cgroup, in any hierarchy.
    pub fn children(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for h in &self.hierarchies {
            if let Ok(entries) = fs::read_dir(self.dir(h)) {
                out.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                        .map(|e| e.path()),
                );
            }
        }
        out
    }
}

impl Drop for PodCgroups {
    fn drop(&mut self) {
        for dir in self.created.iter().rev() {
            if let Err(e) = fs::remove_dir(dir) {
                // EBUSY / ENOTEMPTY: still used (a process or another pod's cgroup below).
                if e.kind() != ErrorKind::NotFound {
                    eprintln!("kubelet-pod: leaving cgroup {}: {e}", dir.display());
                }
            }
        }
    }
}

fn inherit_cpuset(dir: &Path) -> Result<()> {
    let parent = dir.parent().context("cgroup without a parent")?;
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = fs::read_to_string(dir.join(file)).unwrap_or_default();
        if own.trim().is_empty() {
            let value = fs::read_to_string(parent.join(file))
                .with_context(|| format!("reading {}", parent.join(file).display()))?;
            fs::write(dir.join(file), value.trim())
                .with_context(|| format!("writing {}", dir.join(file).display()))?;
        }
    }
    Ok(())
}

/// Cumulative CPU time in ns of the cgroup at absolute path `cgroup`: v1 `cpuacct.usage`
/// on the hybrid layout (what cAdvisor reads there), v2 `cpu.stat` usage_usec x 1000 on
/// the unified layout.
pub fn cpu_usage_ns(hs: &[Hierarchy], layout: Layout, cgroup: &str) -> Result<u64> {
    match layout {
        Layout::Hybrid => {
            let h = v1_hierarchy(hs, "cpuacct").context("no v1 cpuacct hierarchy")?;
            let file = cgroup_dir(h, cgroup).join("cpuacct.usage");
            let text =
                fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            text.trim()
                .parse()
                .with_context(|| format!("parsing {} ({text:?})", file.display()))
        }
        Layout::Unified => {
            let h = unified_hierarchy(hs).context("no unified hierarchy")?;
            let file = cgroup_dir(h, cgroup).join("cpu.stat");
            let text =
                fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            Ok(flat_key(&text, "usage_usec")
                .with_context(|| format!("no usage_usec in {}", file.display()))?
                * 1000)
        }
    }
}

/// cAdvisor's v1 working set: `memory.usage_in_bytes` minus `total_inactive_file`.
pub fn memory_working_set(dir: &Path) -> Result<u64> {
    let usage_file = dir.join("memory.usage_in_bytes");
    let usage: u64 = fs::read_to_string(&usage_file)
        .with_context(|| format!("reading {}", usage_file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("parsing {}", usage_file.display()))?;
    let stat = fs::read_to_string(dir.join("memory.stat"))
        .with_context(|| format!("reading {}", dir.join("memory.stat").display()))?;
    let inactive = flat_key(&stat, "total_inactive_file").unwrap_or(0);
    Ok(usage.saturating_sub(inactive))
}

/// Reads `key value` from a flat-keyed cgroup file.
pub fn flat_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Where process `pid` sits: the v1 `cpuacct` cgroup on the hybrid layout, the unified
/// (`0::`) cgroup on the unified layout.
pub fn process_cgroup(pid: u32, layout: Layout) -> Result<String> {
    let file = format!("/proc/{pid}/cgroup");
    let text = fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
    parse_proc_cgroup(&text, layout)
        .with_context(|| format!("no {layout:?} entry in {file}: {text}"))
}

/// The v1 cgroup of process `pid` in the hierarchy holding `controller` (e.g. `cpu`).
pub fn process_v1_cgroup(pid: u32, controller: &str) -> Result<String> {
    let file = format!("/proc/{pid}/cgroup");
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
    parse_proc_cgroups(&text)
        .into_iter()
        .find(|l| l.controllers.split(',').any(|c| c == controller))
        .map(|l| l.path)
        .with_context(|| format!("no {controller} entry in {file}: {text}"))
}

/// Picks the relevant entry of a `/proc/<pid>/cgroup` text (see [`process_cgroup`]).
pub fn parse_proc_cgroup(text: &str, layout: Layout) -> Option<String> {
    parse_proc_cgroups(text)
        .into_iter()
        .find(|l| match layout {
            Layout::Hybrid => l.controllers.split(',').any(|c| c == "cpuacct"),
            Layout::Unified => l.id == 0 && l.controllers.is_empty(),
        })
        .map(|l| l.path)
}

/// `true` when cgroup `child` is `parent` or lies below it.
pub fn is_within(child: &str, parent: &str) -> bool {
    let parent = parent.trim_end_matches('/');
    child == parent || child.starts_with(&format!("{parent}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_cgroup_entries() {
        let text = "9:name=systemd:/a\n2:cpuacct:/kubepods/x\n1:cpu:/k\n0::/u/v\n";
        assert_eq!(
            parse_proc_cgroup(text, Layout::Hybrid).unwrap(),
            "/kubepods/x"
        );
        assert_eq!(parse_proc_cgroup(text, Layout::Unified).unwrap(), "/u/v");
        assert_eq!(
            parse_proc_cgroup("3:cpu,cpuacct:/joined\n", Layout::Hybrid).unwrap(),
            "/joined"
        );
    }

    #[test]
    fn within() {
        assert!(is_within("/kubepods/pod1/c", "/kubepods/pod1"));
        assert!(is_within("/kubepods/pod1", "/kubepods/pod1/"));
        assert!(!is_within("/kubepods/pod10/c", "/kubepods/pod1"));
        assert!(!is_within(
            "/kubepods-pod1.slice:cri-containerd:x",
            "/kubepods.slice/kubepods-pod1.slice"
        ));
    }

    #[test]
    fn a_later_mount_hides_mounts_below_it() {
        let text = "30 24 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n\
                    31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                    32 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                    99 30 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let hs = parse_hierarchies(text);
        assert_eq!(hs.len(), 1, "{hs:?}");
        assert_eq!(hs[0].mount, PathBuf::from("/sys/fs/cgroup"));
        assert!(hs[0].unified);
    }

    #[test]
    fn flat_keys() {
        let stat = "usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n";
        assert_eq!(flat_key(stat, "usage_usec"), Some(1234));
        assert_eq!(flat_key(stat, "user"), None);
    }
}
