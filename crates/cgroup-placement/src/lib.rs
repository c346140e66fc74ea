//! The one place that decides where a container's cgroup lives and reads what it used.
//!
//! From `linux.cgroupsPath` (the runc systemd form `slice:prefix:name`, a cgroupfs path,
//! or nothing), the containerd runtime option `SystemdCgroup` and the host's cgroup layout
//! ([`Host::detect`]), [`decide`] yields a [`Placement`]: the driver, the path below every
//! hierarchy root (the one systemd would use for the systemd form, so a container lands
//! under its Kubernetes pod cgroup on every layout), and what to hand to youki's
//! libcontainer. The placement then rewrites the spec youki reads, creates, joins, updates,
//! measures, empties (kill-all) and removes the cgroup: every cgroup write the shim makes
//! outside youki goes through it.

#![warn(missing_docs)]

mod devices;
mod error;
mod fsutil;
mod helper_cgroup;
mod host;
mod metrics;
mod options;
mod path;
mod placement;

pub use devices::{device_filter_support, DeviceFilter, DeviceKind};
pub use error::PlacementError;
pub use helper_cgroup::{HelperCgroup, HELPER_CGROUP_SUFFIX};
pub use host::{CgroupLayout, Host, V1Hierarchy, CGROUP_ROOT};
pub use metrics::{
    parse_psi, read_psi, read_v1_metrics, read_v2_metrics, Metrics, V1_METRICS_TYPE_URL,
    V2_METRICS_TYPE_URL,
};
pub use options::{decode_start_stdin, systemd_option, RuntimeOptions};
pub use path::{
    expand_slice, parse_cgroups_path, systemd_cgroup_option, CgroupsPath, DEFAULT_SLICE,
    MAX_COMPONENT_LEN,
};
pub use placement::{
    decide, filter_resources, Driver, Placement, DEFAULT_SYSTEMD_PREFIX, KILL_ALL_ROUNDS,
    KILL_INTERVAL,
};

/// The containerd metrics message types this crate fills.
pub mod proto {
    pub use containerd_shim_protos::cgroups::metrics as v1;
    pub use containerd_shim_protos::cgroups_v2::metrics as v2;
}
