//! CRI test driver: plays kubelet against containerd's CRI socket to check that pods run by
//! our shim get pod-level CPU and memory figures (the `kubectl top pod` / HPA scenario).
//!
//! - [`kubelet`]: pod cgroup names exactly as kubelet computes them (systemd and cgroupfs).
//! - [`cgroups`]: create pod cgroups in every hierarchy, read what cAdvisor reads.
//! - [`cri`]: the CRI calls (RunPodSandbox, CreateContainer, stats, teardown).
//! - [`node`]: a private containerd configured as a kubelet node (CRI, pause image, runtimes).
//! - [`scenario`]: the Spin pod scenario and the runc control, with all their checks.

#![warn(missing_docs)]

pub mod cgroups;
pub mod cri;
pub mod kubelet;
pub mod node;
pub mod scenario;
