//! CRI test driver: plays kubelet against containerd's CRI socket to check that pods run by
//! our shim get pod-level CPU and memory figures (the `kubectl top pod` / HPA scenario).
//!
//! - [`kubelet`], [`cgroups`], [`cri`]: kubelet's pod cgroup names, the pod cgroups and
//!   the CRI calls, from the `kubelet-pod` crate (which `doctor --run` uses too).
//! - [`node`]: a private containerd configured as a kubelet node (CRI, pause image, runtimes).
//! - [`scenario`]: the Spin pod scenario and the runc control, with all their checks.

#![warn(missing_docs)]

pub use kubelet_pod::{cgroups, cri, kubelet};
pub mod node;
pub mod scenario;
