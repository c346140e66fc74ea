//! Detection of the host's cgroup layout from `/proc/self/mountinfo`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// The default cgroup root, whose filesystem type tells the layout (as youki/containerd).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Controllers a cgroup v1 mount can carry (the rest of its options are mount flags).
const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "net_prio",
    "blkio",
    "perf_event",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
    "debug",
];

/// How the host mounts cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CgroupLayout {
    /// cgroup v2 only: `/sys/fs/cgroup` is a cgroup2 filesystem.
    Unified,
    /// cgroup v1 only.
    Legacy,
    /// cgroup v1 controllers plus a cgroup2 hierarchy (usually `/sys/fs/cgroup/unified`).
    Hybrid,
}

/// One cgroup v1 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct V1Hierarchy {
    /// Controllers bound to it (e.g. `["cpu", "cpuacct"]`) or `["name=systemd"]`.
    pub controllers: Vec<String>,
    /// Where it is mounted.
    pub mount_point: PathBuf,
}

impl V1Hierarchy {
    /// The controllers joined with `,` as in `/proc/self/cgroup` (e.g. `cpu,cpuacct`).
    pub fn controllers_string(&self) -> String {
        self.controllers.join(",")
    }

    /// Whether the hierarchy carries `controller`.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// Whether youki's v1 cgroup manager (libcgroups 0.7) joins processes to this
    /// hierarchy. It looks a controller's mount point up by the mount point's last path
    /// component (`cpu`, `cpu,cpuacct`, `net_cls,net_prio`, ...) and only knows the twelve
    /// classic controllers; it never touches named hierarchies such as `name=systemd`.
    pub fn managed_by_youki(&self) -> bool {
        const YOUKI: &[&str] = &[
            "cpu",
            "cpuacct",
            "cpuset",
            "devices",
            "hugetlb",
            "memory",
            "pids",
            "perf_event",
            "blkio",
            "net_prio",
            "net_cls",
            "freezer",
        ];
        let Some(last) = self.mount_point.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        YOUKI.iter().any(|c| {
            let names: &[&str] = match *c {
                "cpu" | "cpuacct" => &["cpu,cpuacct", c],
                "net_cls" | "net_prio" => &["net_cls,net_prio", "net_prio,net_cls", c],
                _ => std::slice::from_ref(c),
            };
            self.has(c) && names.contains(&last)
        })
    }
}

/// What the host offers: layout, mount points and whether systemd runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    layout: CgroupLayout,
    systemd_running: bool,
    v1: Vec<V1Hierarchy>,
    unified: Option<PathBuf>,
    v2_controllers: Vec<String>,
}

/// One parsed line of mountinfo that matters to us.
struct CgroupMount {
    mount_point: PathBuf,
    fs_type: String,
    super_options: String,
}

impl Host {
    /// Detects the host: statfs of `/sys/fs/cgroup` (cgroup2 magic means unified),
    /// `/proc/self/mountinfo` for the mount points, `/run/systemd/system` for systemd, and
    /// the unified root's `cgroup.controllers`.
    pub fn detect() -> anyhow::Result<Host> {
        let stat = nix::sys::statfs::statfs(CGROUP_ROOT)
            .with_context(|| format!("statfs {CGROUP_ROOT}: is cgroupfs mounted?"))?;
        let root_is_cgroup2 = stat.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .context("reading /proc/self/mountinfo")?;
        let systemd_running = Path::new("/run/systemd/system").is_dir();
        let mut host = Host::from_mountinfo(&mountinfo, root_is_cgroup2, systemd_running)?;
        if let Some(root) = &host.unified {
            let file = root.join("cgroup.controllers");
            host.v2_controllers = match std::fs::read_to_string(&file) {
                Ok(s) => s.split_whitespace().map(str::to_string).collect(),
                Err(e) => {
                    tracing::warn!("cannot read {}: {e}", file.display());
                    Vec::new()
                }
            };
        }
        Ok(host)
    }

    /// Builds a host description from mountinfo text (for tests and [`Host::detect`]).
    ///
    /// Mounts hidden by a later mount on the same point or on one of its ancestors (e.g.
    /// the v1 mounts after `mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup`) are
    /// dropped. `root_is_cgroup2` is the statfs verdict on `/sys/fs/cgroup`.
    pub fn from_mountinfo(
        mountinfo: &str,
        root_is_cgroup2: bool,
        systemd_running: bool,
    ) -> anyhow::Result<Host> {
        let mut mounts: Vec<CgroupMount> = Vec::new();
        for (n, line) in mountinfo.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mount = parse_mountinfo_line(line)
                .with_context(|| format!("mountinfo line {}: {line:?}", n + 1))?;
            // A later mount at this point or above it hides earlier mounts below it.
            mounts.retain(|m| !m.mount_point.starts_with(&mount.mount_point));
            mounts.push(mount);
        }
        let mut v1 = Vec::new();
        let mut unified = None;
        for m in mounts {
            match m.fs_type.as_str() {
                // Prefer the one at the conventional root if there are several.
                "cgroup2" if unified.is_none() || m.mount_point == Path::new(CGROUP_ROOT) => {
                    unified = Some(m.mount_point);
                }
                "cgroup" => {
                    let controllers: Vec<String> = m
                        .super_options
                        .split(',')
                        .filter(|o| o.starts_with("name=") || V1_CONTROLLERS.contains(o))
                        .map(str::to_string)
                        .collect();
                    if !controllers.is_empty() {
                        v1.push(V1Hierarchy {
                            controllers,
                            mount_point: m.mount_point,
                        });
                    }
                }
                _ => {}
            }
        }
        let layout = if root_is_cgroup2 {
            v1.clear();
            if unified.is_none() {
                bail!("{CGROUP_ROOT} is cgroup2 but mountinfo lists no visible cgroup2 mount");
            }
            CgroupLayout::Unified
        } else if v1.is_empty() {
            bail!(
                "no cgroup v1 hierarchy is mounted and {CGROUP_ROOT} is not cgroup2: \
                 mount cgroups (cgroup2 at {CGROUP_ROOT}, or v1 hierarchies below it)"
            );
        } else if unified.is_some() {
            CgroupLayout::Hybrid
        } else {
            CgroupLayout::Legacy
        };
        Ok(Host {
            layout,
            systemd_running,
            v1,
            unified,
            v2_controllers: Vec::new(),
        })
    }

    /// Replaces the controllers the unified root offers (tests; [`Host::detect`] reads them).
    pub fn with_v2_controllers(mut self, controllers: Vec<String>) -> Host {
        self.v2_controllers = controllers;
        self
    }

    /// The layout.
    pub fn layout(&self) -> CgroupLayout {
        self.layout
    }

    /// Whether systemd runs as the init system (`/run/systemd/system` is a directory).
    pub fn systemd_running(&self) -> bool {
        self.systemd_running
    }

    /// Mount point of the cgroup2 hierarchy (unified and hybrid hosts).
    pub fn unified_root(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    /// The v1 hierarchies as (controllers joined with `,`, mount point); empty on unified.
    pub fn v1_hierarchies(&self) -> Vec<(String, PathBuf)> {
        self.v1
            .iter()
            .map(|h| (h.controllers_string(), h.mount_point.clone()))
            .collect()
    }

    /// The v1 hierarchies with their controller lists.
    pub fn v1_hierarchy_details(&self) -> &[V1Hierarchy] {
        &self.v1
    }

    /// Controllers listed in the unified root's `cgroup.controllers`.
    pub fn available_v2_controllers(&self) -> Vec<String> {
        self.v2_controllers.clone()
    }

    /// Whether the host offers `controller` at all: on unified hosts in the root's
    /// `cgroup.controllers`, on v1/hybrid hosts as a mounted v1 hierarchy.
    pub fn offers_controller(&self, controller: &str) -> bool {
        match self.layout {
            CgroupLayout::Unified => self.v2_controllers.iter().any(|c| c == controller),
            CgroupLayout::Legacy | CgroupLayout::Hybrid => {
                self.v1.iter().any(|h| h.has(controller))
            }
        }
    }
}

/// Parses `id parent maj:min root mount_point options [optional...] - fstype source super`.
fn parse_mountinfo_line(line: &str) -> anyhow::Result<CgroupMount> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields
        .iter()
        .position(|f| *f == "-")
        .context("no ' - ' separator")?;
    if sep < 6 || fields.len() < sep + 4 {
        bail!("too few fields");
    }
    Ok(CgroupMount {
        mount_point: PathBuf::from(unescape_octal(fields[4])),
        fs_type: fields[sep + 1].to_string(),
        super_options: fields[sep + 3].to_string(),
    })
}

/// Undoes mountinfo's `\ooo` escapes (space, tab, newline, backslash).
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            let oct = std::str::from_utf8(digits).unwrap_or("");
            let all_octal = digits.iter().all(|b| (b'0'..=b'7').contains(b));
            if let (true, Ok(v)) = (all_octal, u8::from_str_radix(oct, 8)) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
