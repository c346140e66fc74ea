//! What kubelet does for one pod, for the CRI tests and `doctor --run`:
//!
//! - [`kubelet`]: pod cgroup names exactly as kubelet computes them (systemd and cgroupfs).
//! - [`cgroups`]: create pod cgroups in every hierarchy, read what cAdvisor reads.
//! - [`cri`]: the CRI calls (RunPodSandbox, CreateContainer, stats, teardown).

#![warn(missing_docs)]

pub mod cgroups;
pub mod cri;
pub mod kubelet;
