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

/// `e` as the ttrpc status containerd receives: [`code_of`] with the whole chain as text.
pub fn to_ttrpc(e: &anyhow::Error) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code_of(e), format!("{e:#}")))
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
}
