//! Errors toward containerd, each with its ttrpc status code (as runwasi's shimkit maps
//! them). Code inside the shim keeps `anyhow` for context; a [`ShimError`] (or a
//! [`cgroup_placement::PlacementError`]) anywhere in an error's chain picks the code that
//! [`to_ttrpc`] sends, the whole chain is the message.

use cgroup_placement::PlacementError;
use containerd_shim::protos::ttrpc;

/// A failure containerd should tell apart by its status code.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The request or the bundle is wrong (cgroupsPath, config.json, runtime options,
    /// signal): INVALID_ARGUMENT.
    #[error("{0}")]
    InvalidArgument(String),
    /// The task, process or content is not there: NOT_FOUND.
    #[error("{0}")]
    NotFound(String),
    /// A task with this id exists: ALREADY_EXISTS.
    #[error("{0}")]
    AlreadyExists(String),
    /// The task is in the wrong state for the request: FAILED_PRECONDITION.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The shim does not do this (exec, checkpoint, terminals): UNIMPLEMENTED.
    #[error("{0}")]
    Unimplemented(String),
    /// Something failed inside the shim: INTERNAL.
    #[error("{0}")]
    Internal(String),
}

impl ShimError {
    /// The ttrpc status code of this error.
    pub fn code(&self) -> ttrpc::Code {
        match self {
            ShimError::InvalidArgument(_) => ttrpc::Code::INVALID_ARGUMENT,
            ShimError::NotFound(_) => ttrpc::Code::NOT_FOUND,
            ShimError::AlreadyExists(_) => ttrpc::Code::ALREADY_EXISTS,
            ShimError::FailedPrecondition(_) => ttrpc::Code::FAILED_PRECONDITION,
            ShimError::Unimplemented(_) => ttrpc::Code::UNIMPLEMENTED,
            ShimError::Internal(_) => ttrpc::Code::INTERNAL,
        }
    }
}

impl From<ShimError> for ttrpc::Error {
    fn from(e: ShimError) -> Self {
        ttrpc::Error::RpcStatus(ttrpc::get_status(e.code(), e.to_string()))
    }
}

/// The status code of the first [`ShimError`] or [`PlacementError`] (INVALID_ARGUMENT) in
/// `e`'s chain; UNKNOWN when there is none.
pub fn code_of(e: &anyhow::Error) -> ttrpc::Code {
    e.chain()
        .find_map(|c| {
            c.downcast_ref::<ShimError>()
                .map(ShimError::code)
                .or_else(|| {
                    c.downcast_ref::<PlacementError>()
                        .map(|_| ttrpc::Code::INVALID_ARGUMENT)
                })
        })
        .unwrap_or(ttrpc::Code::UNKNOWN)
}

/// Longest status message sent to containerd (bytes); containerd logs it and `ctr`,
/// kubelet and the task's status show it.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 16 << 10;

/// `e` as the ttrpc status containerd receives: [`code_of`] with the whole chain as text,
/// cut at [`MAX_STATUS_MESSAGE_BYTES`] (untrusted strings are escaped and cut where they
/// enter a message; this bounds what many of them add up to).
pub fn to_ttrpc(e: &anyhow::Error) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code_of(e), bounded(format!("{e:#}"))))
}

/// `msg` cut at [`MAX_STATUS_MESSAGE_BYTES`] (on a character boundary), its size said.
pub fn bounded(mut msg: String) -> String {
    if msg.len() > MAX_STATUS_MESSAGE_BYTES {
        let total = msg.len();
        let mut cut = MAX_STATUS_MESSAGE_BYTES;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
        msg.push_str(&format!("... ({total} bytes)"));
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn codes_come_from_the_chain() {
        let e = Err::<(), _>(ShimError::NotFound("content sha256:aa is missing".into()))
            .context("layer 1 of image x")
            .unwrap_err();
        assert_eq!(code_of(&e), ttrpc::Code::NOT_FOUND);
        let ttrpc::Error::RpcStatus(s) = to_ttrpc(&e) else {
            panic!("not a status")
        };
        assert!(
            s.message.contains("layer 1") && s.message.contains("sha256:aa"),
            "{s:?}"
        );
        let p = cgroup_placement::parse_cgroups_path("a:b").unwrap_err();
        assert_eq!(
            code_of(&anyhow::Error::new(p).context("create")),
            ttrpc::Code::INVALID_ARGUMENT
        );
        assert_eq!(code_of(&anyhow::anyhow!("disk full")), ttrpc::Code::UNKNOWN);
    }

    #[test]
    fn status_messages_are_bounded() {
        let huge = anyhow::anyhow!("{}", "é".repeat(1 << 20)).context("layer 1");
        let ttrpc::Error::RpcStatus(s) = to_ttrpc(&huge) else {
            panic!("not a status")
        };
        assert!(
            s.message.len() < MAX_STATUS_MESSAGE_BYTES + 32,
            "{}",
            s.message.len()
        );
        assert!(s.message.starts_with("layer 1: ") && s.message.ends_with("(2097161 bytes)"));
        assert_eq!(bounded("short".into()), "short");
    }
}
