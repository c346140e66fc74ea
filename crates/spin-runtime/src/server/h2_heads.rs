//! The header-read timeout for HTTP/2. hyper bounds an HTTP/1.1 request head by
//! `header_read_timeout`, but its HTTP/2 server has no such bound: h2 buffers a header block
//! (HEADERS and its CONTINUATION frames) until it is complete, so a client that sends the
//! connection preface and then nothing, or opens a stream and trickles its header block,
//! holds a connection slot until the idle timeout, whose graceful shutdown in turn waits for
//! a PING the client need never answer. [`HeadDeadline`] watches the frames the client sends
//! and fails the read (`TimedOut`) when a request head is awaited for longer than the
//! timeout: from the connection's start until its first complete header block, and from the
//! first byte of any later frame header until that header block is complete. Data frames
//! (request bodies) and idle time between requests are not bounded here (the idle, write
//! and request timeouts cover them, as for HTTP/1.1).
//!
//! A connection whose first bytes are not the HTTP/2 preface (HTTP/1.1, which hyper bounds
//! itself) is passed through untouched.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};

/// The HTTP/2 client connection preface (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_PUSH_PROMISE: u8 = 0x5;
const FRAME_CONTINUATION: u8 = 0x9;
const FLAG_END_HEADERS: u8 = 0x4;

/// What the client's bytes are, as far as they were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Matching the preface: this many bytes matched so far.
    Preface(usize),
    /// HTTP/2 frames.
    Frames,
    /// Not HTTP/2: nothing to watch.
    Off,
}

/// The client's frames as they pass: where the current frame is and whether a request head
/// is being awaited.
#[derive(Debug)]
struct FrameWatch {
    mode: Mode,
    header: [u8; FRAME_HEADER_LEN],
    /// Bytes of the current frame header read so far.
    header_len: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: usize,
    /// The current frame's type and flags (once its header is complete).
    kind: u8,
    flags: u8,
    /// A header block was started (HEADERS without END_HEADERS) and is not complete.
    block_open: bool,
    /// A complete header block was seen.
    first_done: bool,
}

impl FrameWatch {
    fn new() -> Self {
        FrameWatch {
            mode: Mode::Preface(0),
            header: [0; FRAME_HEADER_LEN],
            header_len: 0,
            payload_left: 0,
            kind: 0,
            flags: 0,
            block_open: false,
            first_done: false,
        }
    }

    /// Whether the client owes a request head: the preface, the first header block, or the
    /// rest of a header block or of a frame header it started.
    fn awaiting(&self) -> bool {
        match self.mode {
            Mode::Off => false,
            Mode::Preface(_) => true,
            Mode::Frames => {
                !self.first_done
                    || self.block_open
                    || self.header_len > 0
                    || (self.payload_left > 0 && is_header_frame(self.kind))
            }
        }
    }

    /// Follows `bytes`, the next bytes the client sent.
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.mode {
                Mode::Off => return,
                Mode::Preface(seen) => {
                    let n = (PREFACE.len() - seen).min(bytes.len());
                    if bytes[..n] != PREFACE[seen..seen + n] {
                        self.mode = Mode::Off;
                        return;
                    }
                    self.mode = if seen + n == PREFACE.len() {
                        Mode::Frames
                    } else {
                        Mode::Preface(seen + n)
                    };
                    bytes = &bytes[n..];
                }
                Mode::Frames if self.payload_left > 0 => {
                    let n = self.payload_left.min(bytes.len());
                    self.payload_left -= n;
                    bytes = &bytes[n..];
                    if self.payload_left == 0 {
                        self.frame_done();
                    }
                }
                Mode::Frames => {
                    let n = (FRAME_HEADER_LEN - self.header_len).min(bytes.len());
                    self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
                    self.header_len += n;
                    bytes = &bytes[n..];
                    if self.header_len == FRAME_HEADER_LEN {
                        let h = &self.header;
                        self.payload_left =
                            (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                        (self.kind, self.flags) = (h[3], h[4]);
                        self.header_len = 0;
                        if self.payload_left == 0 {
                            self.frame_done();
                        }
                    }
                }
            }
        }
    }

    /// The current frame was read whole.
    fn frame_done(&mut self) {
        if is_header_frame(self.kind) {
            let end = self.flags & FLAG_END_HEADERS != 0;
            self.block_open = !end;
            self.first_done |= end;
        }
    }
}

/// Frames that carry a header block (or continue one).
fn is_header_frame(kind: u8) -> bool {
    matches!(
        kind,
        FRAME_HEADERS | FRAME_PUSH_PROMISE | FRAME_CONTINUATION
    )
}

pin_project_lite::pin_project! {
    /// A connection's socket whose reads fail with `TimedOut` once an HTTP/2 request head
    /// has been awaited for `timeout` (see the module doc). Writes pass through.
    pub(crate) struct HeadDeadline<I> {
        #[pin]
        inner: I,
        timeout: Option<Duration>,
        watch: FrameWatch,
        // When the head now awaited started to be awaited.
        since: Option<tokio::time::Instant>,
        // Armed while the read waits with a head awaited.
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<I> HeadDeadline<I> {
    /// `inner`, its request heads bounded by `timeout` (`None`: not bounded); the first head
    /// is awaited from now.
    pub(crate) fn new(inner: I, timeout: Option<Duration>) -> Self {
        HeadDeadline {
            inner,
            timeout,
            watch: FrameWatch::new(),
            since: Some(tokio::time::Instant::now()),
            timer: None,
        }
    }
}

impl<I: AsyncRead> AsyncRead for HeadDeadline<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        let Some(timeout) = *this.timeout else {
            return this.inner.poll_read(cx, buf);
        };
        let before = buf.filled().len();
        match this.inner.poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.watch.feed(&buf.filled()[before..]);
                match (this.watch.awaiting(), this.since.is_some()) {
                    (true, false) => *this.since = Some(tokio::time::Instant::now()),
                    (false, true) => (*this.since, *this.timer) = (None, None),
                    _ => {}
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let Some(since) = *this.since else {
                    return Poll::Pending;
                };
                let deadline = since + timeout;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "no complete HTTP/2 request head within {timeout:?} (set {} to \
                             change it)",
                            crate::limits::HEADER_READ_TIMEOUT_ENV
                        ),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
            ready => ready,
        }
    }
}

super::write_through!(HeadDeadline);

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags, 0, 0, 0, 1]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_head_is_awaited_until_its_block_ends() {
        let mut w = FrameWatch::new();
        assert!(w.awaiting());
        w.feed(&PREFACE[..10]);
        assert_eq!(w.mode, Mode::Preface(10));
        w.feed(&PREFACE[10..]);
        w.feed(&frame(0x4, 0, &[]));
        // Preface and SETTINGS, no request yet.
        assert!(w.awaiting());
        // HEADERS without END_HEADERS, then a CONTINUATION that ends the block, a byte at a
        // time.
        let mut bytes = frame(FRAME_HEADERS, 0, &[0x82]);
        bytes.extend(frame(FRAME_CONTINUATION, FLAG_END_HEADERS, &[0x84]));
        for b in &bytes {
            assert!(w.awaiting());
            w.feed(std::slice::from_ref(b));
        }
        assert!(!w.awaiting());
        // A DATA frame (a body) is not a head; a frame header cut short is.
        w.feed(&frame(0x0, 0, b"body"));
        assert!(!w.awaiting());
        w.feed(&[0, 0]);
        assert!(w.awaiting());
        w.feed(&[4, 0x0, 0, 0, 0, 0, 1, 1, 2]);
        assert!(!w.awaiting());
    }

    #[test]
    fn http1_is_not_watched() {
        let mut w = FrameWatch::new();
        w.feed(b"GET / HTTP/1.1\r\n");
        assert_eq!(w.mode, Mode::Off);
        assert!(!w.awaiting());
    }

    #[tokio::test]
    async fn a_silent_client_is_cut_off_at_the_deadline() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(1024);
        let mut server = HeadDeadline::new(server, Some(Duration::from_millis(200)));
        client.write_all(PREFACE).await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(server.read(&mut buf).await.unwrap(), PREFACE.len());
        let e = server.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(
            e.to_string().contains("SPIN_SHIM_HEADER_READ_TIMEOUT"),
            "{e}"
        );
    }
}
