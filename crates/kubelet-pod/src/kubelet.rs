//! Kubelet's naming of pod cgroups, for both of its cgroup drivers.
//!
//! Kubelet computes a pod's `cgroup_parent` from the pod's QoS class and uid and hands it to
//! the runtime in `LinuxPodSandboxConfig.cgroup_parent`. With the systemd driver it is the
//! fully expanded slice path (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`),
//! with the cgroupfs driver a plain path (`/kubepods/burstable/pod<uid>`).

use std::fmt;

use anyhow::{Context, Result};

/// A pod's quality-of-service class, which decides where kubelet puts its cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    /// Requests equal limits for every resource: directly under `kubepods`.
    Guaranteed,
    /// Some requests or limits: under `kubepods/burstable`.
    Burstable,
    /// No requests or limits: under `kubepods/besteffort`.
    BestEffort,
}

impl QosClass {
    /// The QoS level's cgroup name component, `None` for Guaranteed (no level of its own).
    fn component(self) -> Option<&'static str> {
        match self {
            QosClass::Guaranteed => None,
            QosClass::Burstable => Some("burstable"),
            QosClass::BestEffort => Some("besteffort"),
        }
    }
}

/// Kubelet's `--cgroup-driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    /// Slices named and expanded the systemd way (`kubepods.slice/kubepods-burstable.slice/...`).
    Systemd,
    /// Plain directories (`kubepods/burstable/pod<uid>`).
    Cgroupfs,
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupDriver::Systemd => "systemd",
            CgroupDriver::Cgroupfs => "cgroupfs",
        })
    }
}

/// The cgroup names kubelet uses for one pod, from the root down to the pod's own cgroup,
/// e.g. `["kubepods", "burstable", "pod<uid>"]` (kubelet's `CgroupName`).
fn cgroup_name(qos: QosClass, pod_uid: &str) -> Vec<String> {
    let mut name = vec!["kubepods".to_string()];
    if let Some(level) = qos.component() {
        name.push(level.to_string());
    }
    name.push(format!("pod{pod_uid}"));
    name
}

/// A fresh pod uid (the kernel's random UUID).
pub fn new_uid() -> Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .context("reading /proc/sys/kernel/random/uuid")?
        .trim()
        .to_string())
}

/// The absolute cgroup paths kubelet creates for a pod, outermost first; the last one is
/// the pod cgroup itself and is what kubelet passes as `cgroup_parent`.
///
/// systemd: each component has `-` replaced by `_`, the components are joined with `-`
/// and given the `.slice` suffix, and every prefix becomes one level of the path.
pub fn pod_cgroup_levels(driver: CgroupDriver, qos: QosClass, pod_uid: &str) -> Vec<String> {
    let name = cgroup_name(qos, pod_uid);
    let mut levels = Vec::with_capacity(name.len());
    let mut path = String::new();
    match driver {
        CgroupDriver::Cgroupfs => {
            for component in &name {
                path.push('/');
                path.push_str(component);
                levels.push(path.clone());
            }
        }
        CgroupDriver::Systemd => {
            let escaped: Vec<String> = name.iter().map(|c| c.replace('-', "_")).collect();
            for depth in 1..=escaped.len() {
                path.push('/');
                path.push_str(&escaped[..depth].join("-"));
                path.push_str(".slice");
                levels.push(path.clone());
            }
        }
    }
    levels
}

/// The pod's `cgroup_parent` as kubelet computes it (the pod cgroup's absolute path).
pub fn pod_cgroup_parent(driver: CgroupDriver, qos: QosClass, pod_uid: &str) -> String {
    pod_cgroup_levels(driver, qos, pod_uid)
        .pop()
        .expect("a pod cgroup name always has at least two components")
}

/// The `linux.cgroupsPath` containerd's CRI plugin derives from a pod's `cgroup_parent`
/// for a container (or the sandbox) with id `id`: `base:cri-containerd:id` when the
/// parent's last element is a systemd slice, `parent/id` otherwise.
pub fn cri_cgroups_path(cgroup_parent: &str, id: &str) -> String {
    let base = cgroup_parent.rsplit('/').next().unwrap_or_default();
    if base.ends_with(".slice") {
        format!("{base}:cri-containerd:{id}")
    } else {
        format!("{}/{id}", cgroup_parent.trim_end_matches('/'))
    }
}

/// kubelet's CPU request -> `cpu_shares` conversion (`milliCPU * 1024 / 1000`, minimum 2).
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    (milli * 1024 / 1000).max(2)
}

/// kubelet's CPU limit -> CFS quota for `period_us` (`milliCPU * period / 1000`, minimum
/// 1000 us); 0 (no quota) without a limit.
pub fn milli_cpu_to_quota(milli: i64, period_us: i64) -> i64 {
    if milli == 0 {
        0
    } else {
        (milli * period_us / 1000).max(1000)
    }
}

/// The seed sample's CPU resources for a pod of class `qos`, as kubelet sends them in
/// `LinuxContainerResources`: (cpu_shares, cpu_quota) with period 100 ms. Burstable:
/// requests 100m / limits 500m; Guaranteed: 500m / 500m; BestEffort: none (shares 2).
pub fn sample_cpu_resources(qos: QosClass) -> (i64, i64) {
    let (request, limit) = match qos {
        QosClass::Burstable => (100, 500),
        QosClass::Guaranteed => (500, 500),
        QosClass::BestEffort => (0, 0),
    };
    (
        milli_cpu_to_shares(request),
        milli_cpu_to_quota(limit, 100_000),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "1234abcd-5678-90ef-aaaa-bbbbccccdddd";

    #[test]
    fn systemd_burstable_matches_kubelet() {
        assert_eq!(
            pod_cgroup_parent(CgroupDriver::Systemd, QosClass::Burstable, UID),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_90ef_aaaa_bbbbccccdddd.slice"
        );
    }

    #[test]
    fn systemd_guaranteed_and_besteffort() {
        assert_eq!(
            pod_cgroup_parent(CgroupDriver::Systemd, QosClass::Guaranteed, UID),
            "/kubepods.slice/kubepods-pod1234abcd_5678_90ef_aaaa_bbbbccccdddd.slice"
        );
        assert_eq!(
            pod_cgroup_levels(CgroupDriver::Systemd, QosClass::BestEffort, UID),
            vec![
                "/kubepods.slice".to_string(),
                "/kubepods.slice/kubepods-besteffort.slice".to_string(),
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234abcd_5678_90ef_aaaa_bbbbccccdddd.slice".to_string(),
            ]
        );
    }

    #[test]
    fn cgroupfs_keeps_dashes() {
        assert_eq!(
            pod_cgroup_parent(CgroupDriver::Cgroupfs, QosClass::Burstable, UID),
            format!("/kubepods/burstable/pod{UID}")
        );
        assert_eq!(
            pod_cgroup_parent(CgroupDriver::Cgroupfs, QosClass::Guaranteed, UID),
            format!("/kubepods/pod{UID}")
        );
        assert_eq!(
            pod_cgroup_levels(CgroupDriver::Cgroupfs, QosClass::BestEffort, UID),
            vec![
                "/kubepods".to_string(),
                "/kubepods/besteffort".to_string(),
                format!("/kubepods/besteffort/pod{UID}"),
            ]
        );
    }

    #[test]
    fn cpu_conversions() {
        assert_eq!(sample_cpu_resources(QosClass::Burstable), (102, 50_000));
        assert_eq!(sample_cpu_resources(QosClass::Guaranteed), (512, 50_000));
        assert_eq!(sample_cpu_resources(QosClass::BestEffort), (2, 0));
        assert_eq!(milli_cpu_to_quota(1, 100_000), 1000);
    }

    #[test]
    fn cri_path_forms() {
        let parent = pod_cgroup_parent(CgroupDriver::Systemd, QosClass::Burstable, UID);
        assert_eq!(
            cri_cgroups_path(&parent, "abc"),
            "kubepods-burstable-pod1234abcd_5678_90ef_aaaa_bbbbccccdddd.slice:cri-containerd:abc"
        );
        assert_eq!(
            cri_cgroups_path("/kubepods/burstable/podx", "abc"),
            "/kubepods/burstable/podx/abc"
        );
    }
}
