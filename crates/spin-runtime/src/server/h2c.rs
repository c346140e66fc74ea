//! HTTP/2 over cleartext by HTTP/1.1 `Upgrade: h2c` (RFC 7540 section 3.2), which hyper does
//! not do itself: the server answers `101 Switching Protocols`, then serves HTTP/2 on the
//! connection, and the upgrading request becomes stream 1, whose response the client
//! awaits. [`StreamOne`] gives hyper's HTTP/2 server that request as the HEADERS frame of
//! stream 1, placed right after the client's connection preface and first SETTINGS frame.
//!
//! Only requests without a body are upgraded (the others are answered in HTTP/1.1, which
//! RFC 7230 allows: a server may ignore `Upgrade`); over TLS, h2 is chosen by ALPN instead.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderValue, Request};
use tokio::io::{AsyncRead, ReadBuf};

/// The client connection preface's fixed part.
const PREFACE_LEN: usize = 24;
/// An HTTP/2 frame header.
const FRAME_HEADER_LEN: usize = 9;
/// Largest frame payload the server accepts before the client learns its settings
/// (SETTINGS_MAX_FRAME_SIZE's initial value, hyper's default).
const MAX_FRAME_PAYLOAD: usize = 16_384;

const FRAME_HEADERS: u8 = 0x1;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;

/// Whether `req` asks to upgrade to h2c as RFC 7540 section 3.2 says: `Upgrade: h2c`,
/// exactly one `HTTP2-Settings` header, both named in `Connection`. Requests with a body
/// are not upgraded (see the module doc).
pub(crate) fn wants_upgrade<B: hyper::body::Body>(req: &Request<B>) -> bool {
    let h = req.headers();
    let tokens = |name: http::header::HeaderName| -> Vec<String> {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .collect()
    };
    let upgrade = tokens(http::header::UPGRADE);
    let connection = tokens(http::header::CONNECTION);
    req.version() == http::Version::HTTP_11
        && upgrade.iter().any(|t| t == "h2c")
        && connection.iter().any(|t| t == "upgrade")
        && connection.iter().any(|t| t == "http2-settings")
        && h.get_all("http2-settings").iter().count() == 1
        && req.body().is_end_stream()
}

/// `r` (a `101 Switching Protocols` response) with the headers that accept the upgrade.
pub(crate) fn switching_protocols<B>(mut r: http::Response<B>) -> http::Response<B> {
    let h = r.headers_mut();
    h.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("Upgrade"),
    );
    h.insert(http::header::UPGRADE, HeaderValue::from_static("h2c"));
    r
}

/// Headers that only mean something to the HTTP/1.1 connection (RFC 7540 section 8.1.2.2),
/// and `Host`, which becomes `:authority`.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "upgrade"
            | "http2-settings"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "host"
    )
}

/// HPACK integer with an `n`-bit prefix whose high bits are `first` (RFC 7541 5.1).
fn hpack_int(out: &mut BytesMut, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.put_u8(first | value as u8);
        return;
    }
    out.put_u8(first | max as u8);
    value -= max;
    while value >= 128 {
        out.put_u8((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.put_u8(value as u8);
}

/// A "literal header field never indexed, new name" (RFC 7541 6.2.3): it leaves the
/// decoder's dynamic table as the client's encoder expects it.
fn hpack_literal(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.put_u8(0x10);
    hpack_int(out, 0, 7, name.len());
    out.put_slice(name);
    hpack_int(out, 0, 7, value.len());
    out.put_slice(value);
}

fn frame_header(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    out.put_slice(&(len as u32).to_be_bytes()[1..]);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

/// The frames that carry `req` as stream 1: HEADERS (END_STREAM) and, for a header block
/// over one frame, CONTINUATION frames.
pub(crate) fn stream_one<B>(req: &Request<B>) -> Bytes {
    let mut block = BytesMut::new();
    hpack_literal(&mut block, b":method", req.method().as_str().as_bytes());
    hpack_literal(&mut block, b":scheme", b"http");
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    hpack_literal(&mut block, b":path", path.as_bytes());
    if let Some(host) = req.headers().get(http::header::HOST) {
        hpack_literal(&mut block, b":authority", host.as_bytes());
    }
    for (name, value) in req.headers() {
        let n = name.as_str();
        if hop_by_hop(n) || (n == "te" && value.as_bytes() != b"trailers") {
            continue;
        }
        hpack_literal(&mut block, n.as_bytes(), value.as_bytes());
    }
    let mut out = BytesMut::with_capacity(block.len() + 2 * FRAME_HEADER_LEN);
    let mut chunks = block.chunks(MAX_FRAME_PAYLOAD).peekable();
    let mut kind = FRAME_HEADERS;
    let mut flags = FLAG_END_STREAM;
    loop {
        let chunk = chunks.next().unwrap_or_default();
        let last = chunks.peek().is_none();
        let f = if last {
            flags | FLAG_END_HEADERS
        } else {
            flags
        };
        frame_header(&mut out, chunk.len(), kind, f, 1);
        out.put_slice(chunk);
        if last {
            return out.freeze();
        }
        kind = FRAME_CONTINUATION;
        flags = 0;
    }
}

pin_project_lite::pin_project! {
    /// The upgraded connection as hyper's HTTP/2 server reads it: the client's bytes, with
    /// the frames of stream 1 ([`stream_one`]) after its preface and first SETTINGS frame.
    /// Writes pass through.
    pub(crate) struct StreamOne<I> {
        #[pin]
        inner: I,
        // Client bytes passed before the frames go in.
        seen: usize,
        // The first frame header, as it arrives.
        header: [u8; FRAME_HEADER_LEN],
        // The frames not yet read; `None` once they were (or cannot be) placed.
        frames: Option<Bytes>,
    }
}

impl<I> StreamOne<I> {
    /// `inner` with `frames` placed after the preface and the first frame.
    pub(crate) fn new(inner: I, frames: Bytes) -> Self {
        StreamOne {
            inner,
            seen: 0,
            header: [0; FRAME_HEADER_LEN],
            frames: Some(frames),
        }
    }
}

impl<I: AsyncRead> AsyncRead for StreamOne<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        let Some(frames) = this.frames.as_mut() else {
            return this.inner.poll_read(cx, buf);
        };
        let head = PREFACE_LEN + FRAME_HEADER_LEN;
        let boundary = if *this.seen < head {
            head
        } else {
            let h = &this.header;
            head + ((h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize)
        };
        if *this.seen >= boundary {
            let n = frames.len().min(buf.remaining());
            buf.put_slice(&frames.split_to(n));
            if frames.is_empty() {
                *this.frames = None;
            }
            return Poll::Ready(Ok(()));
        }
        let want = (boundary - *this.seen).min(buf.remaining());
        let mut part = ReadBuf::new(buf.initialize_unfilled_to(want));
        std::task::ready!(this.inner.poll_read(cx, &mut part))?;
        let got = part.filled().len();
        for (i, b) in part.filled().iter().enumerate() {
            let at = *this.seen + i;
            if (PREFACE_LEN..head).contains(&at) {
                this.header[at - PREFACE_LEN] = *b;
            }
        }
        *this.seen += got;
        buf.advance(got);
        if *this.seen >= head && this.header[3] != FRAME_SETTINGS {
            // Not the preface hyper expects: it refuses the connection itself.
            *this.frames = None;
        }
        Poll::Ready(Ok(()))
    }
}

super::write_through!(StreamOne);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn hpack_integers_follow_rfc_7541_examples() {
        let mut b = BytesMut::new();
        hpack_int(&mut b, 0, 5, 10);
        assert_eq!(&b[..], &[10]);
        let mut b = BytesMut::new();
        hpack_int(&mut b, 0, 5, 1337);
        assert_eq!(&b[..], &[31, 154, 10]);
    }

    #[tokio::test]
    async fn stream_one_goes_after_the_first_settings_frame() {
        let req = Request::get("/x?y=1")
            .header("host", "example:80")
            .header("connection", "Upgrade, HTTP2-Settings")
            .header("upgrade", "h2c")
            .header("http2-settings", "AAMAAABkAAQAAP__")
            .header("accept", "*/*")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        assert!(wants_upgrade(&req));
        let frames = stream_one(&req);
        let mut client = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // SETTINGS with one setting (6 bytes), then a PING the client sends next.
        client.extend_from_slice(&[0, 0, 6, FRAME_SETTINGS, 0, 0, 0, 0, 0]);
        client.extend_from_slice(&[0, 3, 0, 0, 0, 100]);
        let ping = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        client.extend_from_slice(&ping);
        let mut seen = Vec::new();
        StreamOne::new(&client[..], frames.clone())
            .read_to_end(&mut seen)
            .await
            .unwrap();
        let at = PREFACE_LEN + FRAME_HEADER_LEN + 6;
        assert_eq!(&seen[..at], &client[..at]);
        assert_eq!(&seen[at..at + frames.len()], &frames[..]);
        assert_eq!(&seen[at + frames.len()..], &ping[..]);
        // HEADERS of stream 1, END_STREAM | END_HEADERS; no hop-by-hop header inside.
        assert_eq!(&frames[3..9], &[FRAME_HEADERS, 0x5, 0, 0, 0, 1]);
        let block = &frames[9..];
        assert!(block.windows(5).any(|w| w == b"/x?y=")); // :path
        for gone in [&b"upgrade"[..], b"http2-settings", b"connection"] {
            assert!(!block.windows(gone.len()).any(|w| w == gone));
        }
    }

    #[test]
    fn a_request_with_a_body_or_without_settings_is_not_upgraded() {
        let base = || {
            Request::post("/")
                .header("connection", "Upgrade, HTTP2-Settings")
                .header("upgrade", "h2c")
        };
        let with_body = base()
            .header("http2-settings", "")
            .body(http_body_util::Full::new(Bytes::from_static(b"x")))
            .unwrap();
        assert!(!wants_upgrade(&with_body));
        let no_settings = base().body(http_body_util::Empty::<Bytes>::new()).unwrap();
        assert!(!wants_upgrade(&no_settings));
    }

    #[test]
    fn a_large_header_block_is_split_into_continuations() {
        let req = Request::get("/")
            .header("x-big", "a".repeat(40_000))
            .body(())
            .unwrap();
        let frames = stream_one(&req);
        assert_eq!(&frames[..5], &[0, 64, 0, FRAME_HEADERS, FLAG_END_STREAM]);
        let second = FRAME_HEADER_LEN + MAX_FRAME_PAYLOAD;
        assert_eq!(
            &frames[second..second + 5],
            &[0, 64, 0, FRAME_CONTINUATION, 0]
        );
        let third = 2 * second;
        assert_eq!(
            frames[third + 3..third + 5],
            [FRAME_CONTINUATION, FLAG_END_HEADERS]
        );
    }
}
