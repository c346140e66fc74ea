//! Checks that only a real systemd node can answer: run by `scripts/test-systemd.sh` inside
//! a systemd-nspawn node (systemd as PID 1 on cgroup v2), never on the build host.
//!
//! The binary `systemd-node-scenario` plays kubelet with the CRI driver of `cri-tests`
//! (its CRI client, kubelet's cgroup naming, cAdvisor's readers and HTTP load helpers):
//! - systemd driver: kubelet's pod slice is a transient slice unit; a pod run with the
//!   handler under test must put each container in a delegated transient scope
//!   `cri-containerd-<id>.scope` below that slice, account its CPU to the slice, report the
//!   cgroup v2 metrics message with PSI, and leave no unit or cgroup behind;
//! - cgroupfs driver on the same node: placement follows the plain path, no scope unit.
//!
//! - [`systemd`]: transient slices over D-Bus, `systemctl show` parsing.
//! - [`metrics`]: reading `ctr task metrics --format json`.
//! - [`scenario`]: the two cases.

#![warn(missing_docs)]

pub mod metrics;
pub mod scenario;
pub mod systemd;
