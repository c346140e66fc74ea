//! The placement decision and the cgroup operations that follow from it.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::host::{CgroupLayout, Host, V1Hierarchy};
use crate::metrics::{read_v1_metrics, read_v2_metrics, Metrics};
use crate::path::{parse_cgroups_path, validate_container_id, CgroupsPath, DEFAULT_SLICE};
use crate::PlacementError;

/// Unit prefix of the default systemd placement when no cgroupsPath was given.
pub const DEFAULT_SYSTEMD_PREFIX: &str = "spin";

/// Who creates and owns the container's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Driver {
    /// systemd: a transient scope unit (with `Delegate`) in the parent slice, created over
    /// D-Bus by youki's systemd manager. Only on unified hosts where systemd runs.
    Systemd,
    /// Plain directories in every hierarchy, created by us and by youki's fs managers.
    Cgroupfs,
}

/// Where a container's cgroup lives, decided once by [`decide`]. Serializable so that the
/// shim can persist it next to the bundle and find the cgroup again in `delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    driver: Driver,
    layout: CgroupLayout,
    relative_path: PathBuf,
    unit_name: Option<String>,
    /// `slice:prefix:name` with the slice filled in, for the systemd forms.
    systemd_path: Option<String>,
    v1: Vec<V1Hierarchy>,
    unified: Option<PathBuf>,
    /// Whether the shim may kill processes in and remove this cgroup: set by
    /// [`Placement::claim`] when the cgroup did not exist or held no process. State saved
    /// without it (or a refused claim) leaves foreign cgroups alone.
    #[serde(default)]
    owned: bool,
}

/// Decides where the container's cgroup lives.
///
/// - systemd form (`slice:prefix:name`) with systemd running on a unified host: the systemd
///   driver, a transient `<prefix>-<name>.scope` in the slice;
/// - systemd form otherwise (no systemd, or v1/hybrid): cgroupfs at the path systemd would
///   have used, `<root>/<expanded slice>/<prefix>-<name>.scope`, in every hierarchy;
/// - cgroupfs path: that path below every hierarchy's root;
/// - no path: `/<container id>`, or `system.slice:spin:<container id>` when the runtime
///   option `SystemdCgroup = true` and systemd runs.
///
/// When `systemd_option` contradicts the path's form, the path wins and a warning is logged.
pub fn decide(
    cgroups_path: Option<&str>,
    container_id: &str,
    systemd_option: Option<bool>,
    host: &Host,
) -> Result<Placement, PlacementError> {
    let parsed = match cgroups_path.filter(|p| !p.is_empty()) {
        Some(value) => {
            let parsed = parse_cgroups_path(value)?;
            match (&parsed, systemd_option) {
                (CgroupsPath::Systemd { .. }, Some(false)) => tracing::warn!(
                    "runtime option SystemdCgroup = false, but cgroupsPath {value:?} has the \
                     systemd form slice:prefix:name: the path wins"
                ),
                (CgroupsPath::Absolute(_) | CgroupsPath::Relative(_), Some(true)) => {
                    tracing::warn!(
                        "runtime option SystemdCgroup = true, but cgroupsPath {value:?} is a \
                         cgroupfs path: the path wins, the cgroupfs driver is used"
                    )
                }
                _ => {}
            }
            parsed
        }
        None => {
            validate_container_id(container_id)?;
            if systemd_option == Some(true) && host.systemd_running() {
                parse_cgroups_path(&format!(
                    "{DEFAULT_SLICE}:{DEFAULT_SYSTEMD_PREFIX}:{container_id}"
                ))?
            } else {
                if systemd_option == Some(true) {
                    tracing::warn!(
                        "runtime option SystemdCgroup = true, but systemd is not running \
                         (/run/systemd/system is missing): using cgroupfs /{container_id}"
                    );
                }
                CgroupsPath::Absolute(Path::new("/").join(container_id))
            }
        }
    };
    let systemd_form = matches!(parsed, CgroupsPath::Systemd { .. });
    let driver = if systemd_form && host.systemd_running() && host.layout() == CgroupLayout::Unified
    {
        Driver::Systemd
    } else {
        Driver::Cgroupfs
    };
    let systemd_path = match &parsed {
        CgroupsPath::Systemd {
            slice,
            prefix,
            name,
        } => Some(format!("{slice}:{prefix}:{name}")),
        _ => None,
    };
    let (v1, unified) = match host.layout() {
        CgroupLayout::Unified => (Vec::new(), host.unified_root().map(Path::to_path_buf)),
        CgroupLayout::Legacy => (host.v1_hierarchy_details().to_vec(), None),
        CgroupLayout::Hybrid => (
            host.v1_hierarchy_details().to_vec(),
            host.unified_root().map(Path::to_path_buf),
        ),
    };
    Ok(Placement {
        driver,
        layout: host.layout(),
        relative_path: parsed.relative_path(),
        unit_name: parsed.unit_name(),
        systemd_path,
        v1,
        unified,
        owned: false,
    })
}

impl Placement {
    /// The driver that owns the cgroup.
    pub fn driver(&self) -> Driver {
        self.driver
    }

    /// The host layout the decision was made for.
    pub fn layout(&self) -> CgroupLayout {
        self.layout
    }

    /// The cgroup path below each hierarchy root, starting with `/`, e.g.
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope`.
    pub fn relative_path(&self) -> &Path {
        &self.relative_path
    }

    /// `<prefix>-<name>.scope` for the systemd forms (whichever driver), else `None`.
    pub fn unit_name(&self) -> Option<&str> {
        self.unit_name.as_deref()
    }

    /// What the shim puts in `spec.linux.cgroupsPath` for libcontainer: `slice:prefix:name`
    /// for the systemd driver, else the absolute cgroupfs path (so youki's fs managers
    /// create exactly [`Placement::relative_path`]).
    pub fn youki_cgroups_path(&self) -> String {
        match (self.driver, &self.systemd_path) {
            (Driver::Systemd, Some(p)) => p.clone(),
            _ => self.relative_path.to_string_lossy().into_owned(),
        }
    }

    /// The flag for libcontainer's builder `.with_systemd(..)`.
    pub fn youki_systemd(&self) -> bool {
        self.driver == Driver::Systemd
    }

    /// The absolute container directory in every hierarchy used: each v1 hierarchy, then
    /// the unified one (hybrid and unified hosts).
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let rel = self.rel();
        self.v1
            .iter()
            .map(|h| h.mount_point.join(rel))
            .chain(self.unified.iter().map(|u| u.join(rel)))
            .collect()
    }

    /// The container's directory in the unified hierarchy (unified and hybrid hosts); on
    /// hybrid hosts its PSI files are the only pressure figures.
    pub fn unified_dir(&self) -> Option<PathBuf> {
        self.unified.as_ref().map(|u| u.join(self.rel()))
    }

    /// (controllers, container directory) for every v1 hierarchy; empty on unified hosts.
    pub fn v1_dirs(&self) -> Vec<(String, PathBuf)> {
        let rel = self.rel();
        self.v1
            .iter()
            .map(|h| (h.controllers_string(), h.mount_point.join(rel)))
            .collect()
    }

    /// The unified hierarchy's mount point (unified and hybrid hosts).
    pub(crate) fn unified_root(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    fn rel(&self) -> &Path {
        self.relative_path
            .strip_prefix("/")
            .unwrap_or(&self.relative_path)
    }

    /// Takes the container's cgroup for this container, before anything is created or
    /// joined. A cgroup that already exists and holds processes (in it or below it, in any
    /// hierarchy) is refused, as runc 1.2 refuses a non-empty cgroup at create: it belongs
    /// to something else (a cgroupsPath of `/system.slice`, or an id matching a live
    /// cgroup), and the shim would otherwise place the container there and kill those
    /// processes at delete. An absent or empty cgroup is claimed: from now on the shim may
    /// kill what is inside it and remove it ([`Placement::pids`], [`Placement::remove`]).
    pub fn claim(&mut self) -> Result<(), PlacementError> {
        for dir in self.cgroup_dirs() {
            let mut pids = Vec::new();
            collect_pids(&dir, &mut pids)
                .map_err(|e| PlacementError::ForeignCgroup(format!("{e:#}")))?;
            pids.sort_unstable();
            pids.dedup();
            if !pids.is_empty() {
                let shown: Vec<String> = pids.iter().take(10).map(|p| p.to_string()).collect();
                return Err(PlacementError::ForeignCgroup(format!(
                    "cgroup {} already exists and holds {} process(es) (pids {}{}): the shim \
                     does not adopt a cgroup it did not create; give the container its own \
                     cgroupsPath (or another container id)",
                    dir.display(),
                    pids.len(),
                    shown.join(", "),
                    if pids.len() > 10 { ", ..." } else { "" }
                )));
            }
        }
        self.owned = true;
        Ok(())
    }

    /// Whether [`Placement::claim`] succeeded for this placement.
    pub fn owned(&self) -> bool {
        self.owned
    }

    /// Creates the container's directory in every hierarchy, parents as needed (cgroupfs
    /// driver). New v1 cpuset levels inherit `cpuset.cpus`/`cpuset.mems` from their parent
    /// so that processes can join them. Controllers on unified hosts are enabled down the
    /// path by youki's v2 manager. A no-op for the systemd driver (systemd creates the
    /// scope when youki starts the unit).
    pub fn create(&self) -> anyhow::Result<()> {
        if self.driver == Driver::Systemd {
            return Ok(());
        }
        for h in &self.v1 {
            if h.has("cpuset") {
                create_cpuset_path(&h.mount_point, self.rel())?;
            } else {
                let dir = h.mount_point.join(self.rel());
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating cgroup {}", dir.display()))?;
            }
        }
        if let Some(dir) = self.unified_dir() {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating cgroup {}", dir.display()))?;
        }
        Ok(())
    }

    /// Creates the container's cgroup ([`Placement::create`]) and applies the memory, CPU
    /// and pids settings of `resources` to it now, so that processes the shim places there
    /// before the container exists (helpers working on the image's content) are held by the
    /// container's limits; youki applies every setting again when it creates the container.
    /// On unified hosts the controllers are enabled down the path as youki enables them.
    /// Returns false, doing nothing, for the systemd driver: its scope exists only once
    /// youki starts the unit with the container's process.
    pub fn create_with_limits(
        &self,
        host: &Host,
        resources: Option<&oci_spec::runtime::LinuxResources>,
    ) -> anyhow::Result<bool> {
        if self.driver == Driver::Systemd {
            return Ok(false);
        }
        self.create()?;
        if self.layout == CgroupLayout::Unified {
            self.enable_unified_controllers(host);
        }
        let Some(resources) = resources else {
            return Ok(true);
        };
        let mut limits = oci_spec::runtime::LinuxResources::default();
        limits.set_memory(*resources.memory());
        limits.set_cpu(resources.cpu().clone());
        limits.set_pids(*resources.pids());
        self.update_resources(host, &limits)
            .with_context(|| format!("applying the limits of cgroup {}", self.rel().display()))?;
        Ok(true)
    }

    /// Enables the host's controllers in `cgroup.subtree_control` of every level above the
    /// container's unified cgroup (best effort, as youki does for a cgroup it creates).
    fn enable_unified_controllers(&self, host: &Host) {
        let Some(root) = self.unified.as_ref() else {
            return;
        };
        let controllers = host.available_v2_controllers();
        let mut dir = root.clone();
        for component in self.rel().components() {
            for c in &controllers {
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
            }
            dir.push(component);
        }
    }

    /// Joins `pid` to every hierarchy youki's cgroup manager does not manage: the named v1
    /// hierarchies (`name=systemd`), v1 controllers youki does not know or cannot find, and
    /// the unified hierarchy on hybrid hosts. Idempotent. Nothing to do for the systemd
    /// driver or on unified hosts, where youki's manager covers the only hierarchy.
    pub fn add_process(&self, pid: i32) -> anyhow::Result<()> {
        if self.driver == Driver::Systemd {
            return Ok(());
        }
        for h in self.v1.iter().filter(|h| !h.managed_by_youki()) {
            self.join_v1(h, pid)?;
        }
        if self.layout == CgroupLayout::Hybrid {
            if let Some(dir) = self.unified_dir() {
                join(&dir, pid)?;
            }
        }
        Ok(())
    }

    /// Joins `pid` to the container's cgroup in every hierarchy (for callers that do not
    /// use youki's manager, e.g. tests and helper processes). Idempotent.
    pub fn join_all(&self, pid: i32) -> anyhow::Result<()> {
        for h in &self.v1 {
            self.join_v1(h, pid)?;
        }
        if let Some(dir) = self.unified_dir() {
            join(&dir, pid)?;
        }
        Ok(())
    }

    fn join_v1(&self, h: &V1Hierarchy, pid: i32) -> anyhow::Result<()> {
        if h.has("cpuset") {
            create_cpuset_path(&h.mount_point, self.rel())?;
        }
        join(&h.mount_point.join(self.rel()), pid)
    }

    /// The pids in the container's cgroup and its descendants (from the unified hierarchy
    /// on unified hosts, else from the `pids` hierarchy or the first v1 one). Empty when
    /// the cgroup no longer exists.
    ///
    /// Always empty for a cgroup the shim did not claim, so that nothing kills its
    /// processes.
    pub fn pids(&self) -> anyhow::Result<Vec<i32>> {
        if !self.owned {
            return Ok(Vec::new());
        }
        let dir = self.primary_dir();
        let mut pids = Vec::new();
        collect_pids(&dir, &mut pids)?;
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    fn primary_dir(&self) -> PathBuf {
        let rel = self.rel();
        match self.layout {
            CgroupLayout::Unified => self.unified.clone().unwrap_or_default().join(rel),
            CgroupLayout::Legacy | CgroupLayout::Hybrid => self
                .v1
                .iter()
                .find(|h| h.has("pids"))
                .or_else(|| self.v1.first())
                .map(|h| h.mount_point.join(rel))
                .unwrap_or_default(),
        }
    }

    /// What the container used: the v1 message on legacy and hybrid hosts (as containerd's
    /// runc shim reports), the v2 message on unified hosts. Missing optional files leave
    /// their fields empty.
    pub fn metrics(&self) -> anyhow::Result<Metrics> {
        match self.layout {
            CgroupLayout::Unified => {
                let dir = self
                    .unified_dir()
                    .context("unified host without cgroup2 root")?;
                Ok(Metrics::V2(read_v2_metrics(&dir)?))
            }
            CgroupLayout::Legacy | CgroupLayout::Hybrid => {
                Ok(Metrics::V1(read_v1_metrics(&self.v1_dirs())?))
            }
        }
    }

    /// Removes the container-level cgroup (never its parents) and, on unified hosts, the
    /// helper cgroups beside it ([`Placement::create_helper_cgroup`]). Processes still
    /// inside are killed with SIGKILL first; directories already gone are fine. For the systemd driver
    /// the scope unit is stopped through youki's systemd manager (D-Bus) and any directory
    /// left behind is removed.
    ///
    /// A cgroup the shim did not claim is left alone (with a log line).
    pub fn remove(&self) -> anyhow::Result<()> {
        if !self.owned {
            tracing::info!(
                cgroup = %self.relative_path.display(),
                "not removing a cgroup this shim did not create"
            );
            return Ok(());
        }
        let mut errors = Vec::new();
        if self.driver == Driver::Systemd {
            // Still remove what directories we can if systemd cannot be reached.
            if let Err(e) = self.stop_scope() {
                errors.push(format!("{e:#}"));
            }
        }
        for dir in self.cgroup_dirs() {
            if let Err(e) = remove_cgroup_tree(&dir) {
                errors.push(format!("{e:#}"));
            }
        }
        if let Err(e) = self.remove_helper_cgroups() {
            errors.push(format!("{e:#}"));
        }
        if !errors.is_empty() {
            bail!(
                "removing cgroup {}: {}",
                self.relative_path.display(),
                errors.join("; ")
            );
        }
        Ok(())
    }

    /// youki's cgroup manager for this placement: the systemd manager (D-Bus) for the
    /// systemd driver, else the fs manager of the layout. The one place this crate builds
    /// one; youki builds its own for the container from the same
    /// [`Placement::youki_cgroups_path`] and [`Placement::youki_systemd`].
    fn manager(&self) -> anyhow::Result<libcgroups::common::AnyCgroupManager> {
        use libcgroups::common::{create_cgroup_manager, CgroupConfig};
        let config = CgroupConfig {
            cgroup_path: PathBuf::from(self.youki_cgroups_path()),
            systemd_cgroup: self.youki_systemd(),
            // Only used when a manager starts a unit for a new process; never here.
            container_name: self.unit_name.clone().unwrap_or_default(),
        };
        create_cgroup_manager(config).with_context(|| {
            format!(
                "cgroup manager for {} ({:?} driver)",
                self.youki_cgroups_path(),
                self.driver
            )
        })
    }

    fn stop_scope(&self) -> anyhow::Result<()> {
        use libcgroups::common::CgroupManager;
        if self.systemd_path.is_none() {
            return Ok(());
        }
        let unit = self.unit_name.clone().unwrap_or_default();
        let manager = self
            .manager()
            .with_context(|| format!("connecting to systemd to stop unit {unit}"))?;
        manager
            .remove()
            .with_context(|| format!("stopping systemd unit {unit}"))?;
        Ok(())
    }

    /// Puts the placement's path into the spec youki reads ([`Placement::youki_cgroups_path`]),
    /// drops resource settings whose controller `host` lacks ([`filter_resources`],
    /// logged), and on cgroup v1 hosts replaces the spec's `cgroup` mount by what it means
    /// ([`Placement::v1_cgroup_mounts`]).
    pub fn rewrite_spec(&self, spec: &mut oci_spec::runtime::Spec, host: &Host) {
        let mut linux = spec.linux().clone().unwrap_or_default();
        linux.set_cgroups_path(Some(PathBuf::from(self.youki_cgroups_path())));
        if let Some(mut res) = linux.resources().clone() {
            filter_resources(host, &mut res);
            linux.set_resources(Some(res));
        }
        spec.set_linux(Some(linux));
        if let Some(mut mounts) = spec.mounts().clone() {
            if let Some(i) = mounts
                .iter()
                .position(|m| m.typ().as_deref() == Some("cgroup"))
            {
                if let Some(replacement) = self.v1_cgroup_mounts(&mounts[i]) {
                    mounts.splice(i..=i, replacement);
                    spec.set_mounts(Some(mounts));
                }
            }
        }
    }

    /// On cgroup v1 hosts (legacy and hybrid, cgroupfs driver), the mounts that give the
    /// container the view a `cgroup` mount at `mount`'s destination means: a tmpfs, and in
    /// it each v1 hierarchy of the host under `/sys/fs/cgroup` (named as on the host) as a
    /// bind of the container's own cgroup directory, read-only when the mount is. This is
    /// what youki 0.7 emulates itself, but it finds the container's cgroups through
    /// `/proc/<pid>` of the host with the pid the init has in its PID namespace, which
    /// names another process, or none ("failed to prepare rootfs"), whenever the container
    /// joins an existing PID namespace (a pod with `shareProcessNamespace`). `None` where
    /// nothing needs replacing (unified hosts, the systemd driver).
    pub fn v1_cgroup_mounts(
        &self,
        mount: &oci_spec::runtime::Mount,
    ) -> Option<Vec<oci_spec::runtime::Mount>> {
        use oci_spec::runtime::MountBuilder;
        if self.driver != Driver::Cgroupfs || self.v1.is_empty() {
            return None;
        }
        let dest = mount.destination();
        let ro = mount.options().iter().flatten().any(|o| o == "ro");
        let opts = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut out = vec![MountBuilder::default()
            .destination(dest)
            .typ("tmpfs")
            .source("tmpfs")
            .options(opts(&["noexec", "nosuid", "nodev", "mode=755"]))
            .build()
            .ok()?];
        let mut bind_opts = opts(&["rbind", "nosuid", "noexec", "nodev"]);
        if ro {
            bind_opts.push("ro".into());
        }
        for h in &self.v1 {
            let Ok(name) = h.mount_point.strip_prefix(crate::CGROUP_ROOT) else {
                continue;
            };
            out.push(
                MountBuilder::default()
                    .destination(dest.join(name))
                    .typ("bind")
                    .source(h.mount_point.join(self.rel()))
                    .options(bind_opts.clone())
                    .build()
                    .ok()?,
            );
        }
        Some(out)
    }

    /// Applies new resource settings (containerd's Update) to the container's cgroup
    /// through youki's manager, after dropping the settings whose controller `host` lacks
    /// ([`filter_resources`], logged).
    pub fn update_resources(
        &self,
        host: &Host,
        resources: &oci_spec::runtime::LinuxResources,
    ) -> anyhow::Result<()> {
        use libcgroups::common::{CgroupManager, ControllerOpt};
        let mut res = resources.clone();
        filter_resources(host, &mut res);
        if host.layout() == CgroupLayout::Unified
            && res.devices().as_ref().is_some_and(|d| !d.is_empty())
        {
            tracing::warn!(
                cgroup = %self.relative_path.display(),
                "ignoring the device rules of an update: on cgroup v2 the device filter is \
                 fixed when the container is created"
            );
        }
        self.manager()?.apply(&ControllerOpt {
            resources: &res,
            disable_oom_killer: false,
            oom_score_adj: None,
            freezer_state: None,
        })?;
        Ok(())
    }

    /// Attaches the device filter of `rules` (the spec's `linux.resources.devices`, see
    /// [`crate::DeviceFilter`]) to the container's cgroup on unified hosts, where no devices
    /// controller exists. Call it once the cgroup exists (for the systemd driver: once
    /// youki started the scope) and before the container's process runs. Returns false,
    /// doing nothing, on legacy and hybrid hosts: there youki writes the rules to the v1
    /// devices controller.
    pub fn apply_device_filter(
        &self,
        rules: &[oci_spec::runtime::LinuxDeviceCgroup],
    ) -> anyhow::Result<bool> {
        if self.layout != CgroupLayout::Unified {
            return Ok(false);
        }
        let dir = self
            .unified_dir()
            .context("unified host without cgroup2 root")?;
        crate::DeviceFilter::from_rules(rules)
            .attach(&dir)
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(true)
    }

    /// Kills every process in the container's cgroup (SIGKILL, repeated while new ones
    /// appear) and waits, bounded by [`KILL_ALL_ROUNDS`] x [`KILL_INTERVAL`], until it is
    /// empty. Returns the pids that were signalled.
    pub fn kill_all(&self) -> Vec<i32> {
        let mut killed = Vec::new();
        for _ in 0..KILL_ALL_ROUNDS {
            let pids = self.pids().unwrap_or_default();
            if pids.is_empty() {
                break;
            }
            sigkill(&pids);
            for pid in pids {
                if !killed.contains(&pid) {
                    killed.push(pid);
                }
            }
            std::thread::sleep(KILL_INTERVAL);
        }
        killed
    }
}

/// [`Placement::kill_all`] signals the cgroup's processes up to this many times ...
pub const KILL_ALL_ROUNDS: usize = 50;
/// ... this far apart; cgroup removal retries EBUSY at the same pace.
pub const KILL_INTERVAL: Duration = Duration::from_millis(20);

/// SIGKILL to each of `pids` (a process that is gone already is fine).
fn sigkill(pids: &[i32]) {
    for &pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Writes `pid` to `<dir>/cgroup.procs`, creating `dir` if needed.
fn join(dir: &Path, pid: i32) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
    let procs = dir.join("cgroup.procs");
    std::fs::write(&procs, pid.to_string())
        .with_context(|| format!("adding pid {pid} to {}", procs.display()))
}

/// Creates `rel` below a v1 cpuset mount level by level, copying `cpuset.cpus` and
/// `cpuset.mems` from the parent into levels where they are empty.
fn create_cpuset_path(mount_point: &Path, rel: &Path) -> anyhow::Result<()> {
    let mut parent = mount_point.to_path_buf();
    for component in rel.components() {
        let dir = parent.join(component);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating cgroup {}", dir.display())),
        }
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let own = dir.join(file);
            let current = std::fs::read_to_string(&own)
                .with_context(|| format!("reading {}", own.display()))?;
            if current.trim().is_empty() {
                let from = parent.join(file);
                let value = std::fs::read_to_string(&from)
                    .with_context(|| format!("reading {}", from.display()))?;
                std::fs::write(&own, value.trim())
                    .with_context(|| format!("writing {} into {}", value.trim(), own.display()))?;
            }
        }
        parent = dir;
    }
    Ok(())
}

fn collect_pids(dir: &Path, out: &mut Vec<i32>) -> anyhow::Result<()> {
    let procs = dir.join("cgroup.procs");
    let text = match std::fs::read_to_string(&procs) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", procs.display())),
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        out.push(
            line.trim()
                .parse()
                .with_context(|| format!("bad pid {line:?} in {}", procs.display()))?,
        );
    }
    for entry in read_dir_tolerant(dir)? {
        collect_pids(&entry, out)?;
    }
    Ok(())
}

/// Sub-directories of `dir` (child cgroups); empty if `dir` vanished.
fn read_dir_tolerant(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for entry in crate::fsutil::dir_entries(dir)? {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            dirs.push(entry.path());
        }
    }
    Ok(dirs)
}

/// Removes a cgroup directory and its child cgroups, killing processes still inside.
/// Bounded: gives up after about two seconds of EBUSY.
pub(crate) fn remove_cgroup_tree(dir: &Path) -> anyhow::Result<()> {
    for child in read_dir_tolerant(dir)? {
        remove_cgroup_tree(&child)?;
    }
    const ATTEMPTS: u32 = 100;
    for attempt in 0..ATTEMPTS {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt + 1 < ATTEMPTS => {
                let mut pids = Vec::new();
                collect_pids(dir, &mut pids)?;
                sigkill(&pids);
                std::thread::sleep(KILL_INTERVAL);
            }
            Err(e) => {
                let mut left = Vec::new();
                collect_pids(dir, &mut left)?;
                return Err(e).with_context(|| {
                    format!(
                        "removing cgroup {} (processes still inside: {left:?})",
                        dir.display()
                    )
                });
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// Drops resource settings whose controller the host does not offer at all (on unified
/// hosts: absent from the root's `cgroup.controllers`; on v1/hybrid hosts: no hierarchy
/// carries it). Returns one warning per dropped setting (also logged). Settings whose
/// controller exists are left alone, so a failure to apply them stays an error.
pub fn filter_resources(
    host: &Host,
    resources: &mut oci_spec::runtime::LinuxResources,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let offered = |c: &str| host.offers_controller(c);
    let mut drop = |what: &str, controller: &str| {
        let msg = match host.layout() {
            CgroupLayout::Unified => format!(
                "ignoring the {what}: this host offers no \"{controller}\" cgroup controller \
                 (root cgroup.controllers: {:?})",
                host.available_v2_controllers().join(" ")
            ),
            _ => format!(
                "ignoring the {what}: this host mounts no cgroup v1 \"{controller}\" hierarchy"
            ),
        };
        tracing::warn!("{msg}");
        warnings.push(msg);
    };
    let unified = host.layout() == CgroupLayout::Unified;

    if resources.memory().is_some() && !offered("memory") {
        drop("memory settings", "memory");
        resources.set_memory(None);
    }
    if let Some(mut cpu) = resources.cpu().clone() {
        let cpu_fields = cpu.shares().is_some()
            || cpu.quota().is_some()
            || cpu.period().is_some()
            || cpu.burst().is_some()
            || cpu.idle().is_some()
            || cpu.realtime_runtime().is_some()
            || cpu.realtime_period().is_some();
        if cpu_fields && !offered("cpu") {
            drop("CPU shares/quota/period settings", "cpu");
            cpu.set_shares(None);
            cpu.set_quota(None);
            cpu.set_period(None);
            cpu.set_burst(None);
            cpu.set_idle(None);
            cpu.set_realtime_runtime(None);
            cpu.set_realtime_period(None);
        }
        if (cpu.cpus().is_some() || cpu.mems().is_some()) && !offered("cpuset") {
            drop("cpuset cpus/mems settings", "cpuset");
            cpu.set_cpus(None);
            cpu.set_mems(None);
        }
        let empty = oci_spec::runtime::LinuxCpu::default();
        resources.set_cpu(if cpu == empty { None } else { Some(cpu) });
    }
    if resources.pids().is_some() && !offered("pids") {
        drop("pids limit", "pids");
        resources.set_pids(None);
    }
    let io = if unified { "io" } else { "blkio" };
    if resources.block_io().is_some() && !offered(io) {
        drop("block I/O settings", io);
        resources.set_block_io(None);
    }
    if resources
        .hugepage_limits()
        .as_ref()
        .is_some_and(|l| !l.is_empty())
        && !offered("hugetlb")
    {
        drop("hugepage limits", "hugetlb");
        resources.set_hugepage_limits(None);
    }
    if resources.rdma().as_ref().is_some_and(|r| !r.is_empty()) && !offered("rdma") {
        drop("rdma limits", "rdma");
        resources.set_rdma(None);
    }
    if !unified {
        if resources.devices().as_ref().is_some_and(|d| !d.is_empty()) && !offered("devices") {
            drop("device rules", "devices");
            resources.set_devices(None);
        }
        if let Some(mut net) = resources.network().clone() {
            if net.class_id().is_some() && !offered("net_cls") {
                drop("network class id", "net_cls");
                net.set_class_id(None);
            }
            if net.priorities().is_some() && !offered("net_prio") {
                drop("network priorities", "net_prio");
                net.set_priorities(None);
            }
            let empty = net.class_id().is_none() && net.priorities().is_none();
            resources.set_network(if empty { None } else { Some(net) });
        }
    }
    if unified {
        if let Some(map) = resources.unified().clone() {
            let mut kept = map.clone();
            for key in map.keys() {
                let controller = key.split('.').next().unwrap_or_default();
                if controller != "cgroup" && !offered(controller) {
                    drop(&format!("unified setting {key}"), controller);
                    kept.remove(key);
                }
            }
            resources.set_unified(if kept.is_empty() { None } else { Some(kept) });
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes the test's cgroup and the parent it created, also on failure.
    struct CgroupGuard(Placement, String);
    impl Drop for CgroupGuard {
        fn drop(&mut self) {
            let _ = self.0.remove();
            for (_, d) in self.0.v1_dirs() {
                let root = d.ancestors().nth(1).map(Path::to_path_buf);
                if let Some(p) = root.filter(|p| p.ends_with(&self.1)) {
                    let _ = std::fs::remove_dir(p);
                }
            }
            if let Some(p) = self
                .0
                .unified_dir()
                .and_then(|d| d.parent().map(Path::to_path_buf))
            {
                if p.ends_with(&self.1) {
                    let _ = std::fs::remove_dir(p);
                }
            }
        }
    }

    #[test]
    fn update_applies_memory_limit_to_the_container_cgroup() {
        let host = Host::detect().unwrap();
        if host
            .v1_hierarchies()
            .iter()
            .all(|(c, _)| !c.split(',').any(|c| c == "memory"))
        {
            eprintln!("skipped: no cgroup v1 memory hierarchy on this host");
            return;
        }
        let parent = format!("spin-shim-test-{}", std::process::id());
        let path = format!("/{parent}/c1");
        let mut placement = decide(Some(&path), "c1", None, &host).unwrap();
        placement.claim().unwrap();
        let _guard = CgroupGuard(placement.clone(), parent);
        placement.create().unwrap();
        let res: oci_spec::runtime::LinuxResources =
            serde_json::from_str(r#"{"memory":{"limit":33554432}}"#).unwrap();
        placement.update_resources(&host, &res).unwrap();
        let (_, mem) = placement
            .v1_dirs()
            .into_iter()
            .find(|(c, _)| c == "memory")
            .unwrap();
        let limit = std::fs::read_to_string(mem.join("memory.limit_in_bytes")).unwrap();
        assert_eq!(limit.trim(), "33554432");
    }
}
