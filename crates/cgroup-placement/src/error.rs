//! Errors of parsing and deciding a placement.

/// Why a `linux.cgroupsPath`, a slice name, a container id or the runtime options were
/// rejected. Every message names the offending value and the expected format.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    /// A value containing `:` that is not a valid systemd form `slice:prefix:name`.
    #[error(
        "invalid systemd cgroupsPath {value:?}: {reason}; expected \"slice:prefix:name\" \
         such as \"kubepods-burstable-pod<uid>.slice:cri-containerd:<container id>\""
    )]
    InvalidSystemdPath {
        /// The cgroupsPath as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A slice name that systemd would not accept.
    #[error(
        "invalid systemd slice {slice:?}: {reason}; expected a name ending in \".slice\" \
         whose dash-separated parts are non-empty, such as \"kubepods-burstable.slice\" \
         (\"-.slice\" is the root slice)"
    )]
    InvalidSlice {
        /// The slice name as given.
        slice: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A cgroupfs path that would escape the hierarchy or cannot name a cgroup.
    #[error(
        "invalid cgroupfs cgroupsPath {value:?}: {reason}; expected a path such as \
         \"/kubepods/burstable/pod<uid>/<container id>\" without \"..\" components, NUL \
         bytes or components longer than 255 bytes"
    )]
    InvalidPath {
        /// The cgroupsPath as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A container id that cannot be used as a cgroup name.
    #[error(
        "invalid container id {id:?} for a default cgroup: {reason}; expected a non-empty \
         name of at most 255 bytes without '/', ':' or NUL"
    )]
    InvalidContainerId {
        /// The container id as given.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The runtime options cannot be decoded: a bad message, a body that is not TOML, or a
    /// `SystemdCgroup` that is not a boolean.
    #[error(
        "invalid runtime options (this runtime's `options` table in containerd's config): \
         {reason}; expected TOML such as \"SystemdCgroup = true\" (an empty table is allowed)"
    )]
    InvalidOptions {
        /// What is wrong with it.
        reason: String,
    },
    /// The container's cgroup exists and holds processes of something else.
    #[error("refusing the container's cgroup: {0}")]
    ForeignCgroup(String),
}
