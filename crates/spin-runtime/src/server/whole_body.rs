//! What the executors that pass a request whole share (Spin 1.x's `handle-request`, WAGI):
//! the body read up to [`MAX_BODY_BYTES`], the call bounded by the request deadline, and
//! short host answers.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

pub use crate::limits::MAX_BODY_BYTES;

/// `b` as a response body.
pub(crate) fn full(b: Bytes) -> HyperOutgoingBody {
    Full::new(b).map_err(|never| match never {}).boxed_unsync()
}

/// A response of `status` with `text` as its body.
pub(crate) fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<HyperOutgoingBody> {
    let mut r = Response::new(full(text.into()));
    *r.status_mut() = status;
    r
}

/// The request body whole, or the 413 answer naming `executor` when it is larger than
/// [`MAX_BODY_BYTES`].
pub(crate) async fn read_body<B>(
    body: B,
    executor: &str,
) -> Result<Bytes, Response<HyperOutgoingBody>>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    let body = body.map_err(Into::<wasmtime_wasi_http::Error>::into);
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(_) => Err(plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body too large for a {executor} component\n"),
        )),
    }
}

/// `run` within the request deadline `deadline` (`SPIN_SHIM_REQUEST_TIMEOUT`); past it the
/// instance is dropped, the deadline logged naming component `id`, and the 504 answer
/// returned.
pub(crate) async fn within_deadline<T>(
    deadline: Option<Duration>,
    id: &str,
    run: impl Future<Output = T>,
) -> Result<T, Response<HyperOutgoingBody>> {
    let Some(d) = deadline else {
        return Ok(run.await);
    };
    match tokio::time::timeout(d, run).await {
        Ok(r) => Ok(r),
        Err(_) => {
            tracing::error!(
                component = id,
                "request past its deadline ({} ms, SPIN_SHIM_REQUEST_TIMEOUT); the instance was \
                 stopped",
                d.as_millis()
            );
            Err(plain(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout"))
        }
    }
}
