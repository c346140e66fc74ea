//! A WASIp3 response's first frames, taken before the response goes to hyper, so that a
//! short body goes out in the same write as the head.
//!
//! A WASIp3 guest returns its response before it writes the body (from a task of its own, in
//! its instance's event loop, another tokio task than the connection's). hyper writes the
//! head and whatever body frames are ready, and flushes as soon as the body has nothing
//! ready: a body whose end comes a moment after its data then costs a second `writev` (the
//! last chunk alone), and so does a head sent before the data. Giving the instance a turn
//! or two of the scheduler before answering lets a short body finish first. No timer is
//! involved: a body that takes longer (a stream, a slow guest) is handed to hyper after those
//! turns with what it produced so far, and streams from there as before.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use futures::FutureExt as _;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, SizeHint};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

/// Scheduler turns a response waits for its body to end (each a `yield_now`).
const TURNS: usize = 2;
/// Most frames taken ahead; a body with more streams as it comes.
const MAX_FRAMES: usize = 4;

/// `body` with the frames it produces within [`TURNS`] scheduler turns taken ahead (up to
/// its end, or [`MAX_FRAMES`]).
pub(crate) async fn prefetch(mut body: HyperOutgoingBody) -> HyperOutgoingBody {
    if body.is_end_stream() {
        return body;
    }
    let mut ahead = VecDeque::new();
    let mut ended = false;
    'turns: for turn in 0..=TURNS {
        // One poll per frame, without waiting: hyper's poll registers the real waker later.
        while let Some(next) = body.frame().now_or_never() {
            match next {
                Some(frame) => {
                    let error = frame.is_err();
                    ahead.push_back(frame);
                    if error || ahead.len() >= MAX_FRAMES {
                        break 'turns;
                    }
                }
                None => {
                    ended = true;
                    break 'turns;
                }
            }
        }
        if turn < TURNS {
            tokio::task::yield_now().await;
        }
    }
    if ahead.is_empty() && !ended {
        return body;
    }
    Prefetched {
        ahead,
        ended,
        inner: body,
    }
    .boxed_unsync()
}

/// A body whose first frames (`ahead`) were already taken from `inner`.
struct Prefetched {
    ahead: VecDeque<Result<Frame<Bytes>, wasmtime_wasi_http::Error>>,
    /// `inner` already ended (it is not polled again).
    ended: bool,
    inner: HyperOutgoingBody,
}

impl Body for Prefetched {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(frame) = self.ahead.pop_front() {
            return Poll::Ready(Some(frame));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_empty() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let ahead: u64 = self
            .ahead
            .iter()
            .filter_map(|f| f.as_ref().ok()?.data_ref())
            .map(|d| d.remaining() as u64)
            .sum();
        // The inner body's hint covers what it has not produced yet (a guest's
        // `content-length` counts down as frames are taken). A body taken whole has its
        // exact length (hyper then sends `content-length`), unless it has trailers, which
        // need chunked encoding.
        let trailers = self
            .ahead
            .iter()
            .any(|f| f.as_ref().is_ok_and(Frame::is_trailers));
        let rest = if self.ended && !trailers {
            SizeHint::with_exact(0)
        } else if self.ended {
            SizeHint::new()
        } else {
            self.inner.size_hint()
        };
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + ahead);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + ahead);
        }
        hint
    }
}
