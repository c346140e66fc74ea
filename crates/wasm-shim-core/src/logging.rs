//! tracing setup. The server logs into the `log` FIFO containerd opens in the bundle
//! directory (containerd copies it into its own log); `start`/`delete` log to stderr,
//! which containerd reports when they fail. Level from `RUST_LOG` (default `info`; the
//! request path logs at `debug`).
//!
//! Every event is written as exactly one line of at most [`MAX_LINE_BYTES`] ([`OneLine`]):
//! messages carry strings from images (entry names, ids, errors quoting them), and a
//! newline in one must not forge a line in containerd's log, nor a huge one fill it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriter};
use tracing_subscriber::EnvFilter;

/// Longest log line written (bytes, newline excluded); the rest is cut and its size said.
pub const MAX_LINE_BYTES: usize = 16 << 10;

/// A writer of log events that makes each event one line: control characters inside it
/// (newlines included) are escaped (`\n`, `\x1b`), and it is cut at [`MAX_LINE_BYTES`].
/// The fmt layer writes each event through one writer it makes, so the line is complete
/// when that writer is dropped.
pub struct OneLine<W>(Mutex<W>);

impl<W: Write> OneLine<W> {
    /// Lines into `w`.
    pub fn new(w: W) -> Self {
        OneLine(Mutex::new(w))
    }
}

/// One event being written by [`OneLine`].
pub struct EventWriter<'a, W: Write> {
    sink: &'a Mutex<W>,
    buf: Vec<u8>,
    total: usize,
}

impl<'a, W: Write + 'a> MakeWriter<'a> for OneLine<W> {
    type Writer = EventWriter<'a, W>;
    fn make_writer(&'a self) -> Self::Writer {
        EventWriter {
            sink: &self.0,
            buf: Vec::new(),
            total: 0,
        }
    }
}

impl<W: Write> Write for EventWriter<'_, W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.total += data.len();
        let room = (MAX_LINE_BYTES + 1).saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `event` as one line: a trailing newline dropped, control bytes escaped, cut at
/// [`MAX_LINE_BYTES`] (of the event's `total` bytes), newline-terminated.
pub fn one_line(event: &[u8], total: usize) -> Vec<u8> {
    let (event, total) = match event.strip_suffix(b"\n") {
        Some(e) if total == event.len() => (e, total - 1),
        _ => (event, total),
    };
    let mut out = Vec::with_capacity(event.len().min(MAX_LINE_BYTES) + 32);
    for &b in event {
        if out.len() >= MAX_LINE_BYTES {
            break;
        }
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.push(b),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            _ => out.push(b),
        }
    }
    if out.len() >= MAX_LINE_BYTES || total > event.len() {
        out.truncate(MAX_LINE_BYTES);
        out.extend_from_slice(format!("... ({total} bytes)").as_bytes());
    }
    out.push(b'\n');
    out
}

impl<W: Write> Drop for EventWriter<'_, W> {
    fn drop(&mut self) {
        if self.total == 0 {
            return;
        }
        let line = one_line(&self.buf, self.total);
        if let Ok(mut w) = self.sink.lock() {
            let _ = w.write_all(&line);
        }
    }
}

/// Default filter when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info,libcontainer=error,libcgroups=error";

/// The server's log FIFO, kept for the processes it starts (the container-creation helper).
static LOG: OnceLock<File> = OnceLock::new();

/// A descriptor of the server's log (see [`init`]), for a helper process's stderr.
pub fn log_fd() -> Option<OwnedFd> {
    LOG.get()?.try_clone().ok().map(OwnedFd::from)
}

/// Target of the Task API spans (TRACE: exported when traces are on, never logged).
pub const TASK_API_TARGET: &str = "wasm_shim_core::service";

/// Installs the global subscriber. `server`: write to `./log` if it exists, and export the
/// Task API's spans as `service` when the shim's environment has `OTEL_EXPORTER_OTLP_*`
/// ([`otel_export`]; `OTEL_SERVICE_NAME` overrides the name, unless it is the `containerd`
/// that containerd sets for itself).
pub fn init(server: bool, service: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let log_fifo = if server {
        OpenOptions::new().write(true).open("log").ok()
    } else {
        None
    };
    if let Some(f) = log_fifo.as_ref().and_then(|f| f.try_clone().ok()) {
        let _ = LOG.set(f);
    }
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_target(true);
    let fmt = match log_fifo {
        Some(f) => fmt.with_writer(BoxMakeWriter::new(OneLine::new(f))),
        None => fmt.with_writer(BoxMakeWriter::new(OneLine::new(std::io::stderr()))),
    };
    let otel = if server {
        // containerd sets OTEL_SERVICE_NAME=containerd for its own traces, and shims
        // inherit it: that value names containerd, not the shim.
        let lookup = |k: &str| {
            std::env::var(k)
                .ok()
                .filter(|v| !(k == "OTEL_SERVICE_NAME" && v == "containerd"))
        };
        otel_export::layer_from_env(&lookup, service, &[TASK_API_TARGET])
    } else {
        None
    };
    if tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()
        .is_ok()
    {
        for (on, line) in otel_export::decisions() {
            if on {
                tracing::info!("{line}");
            } else {
                tracing::warn!("{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_is_one_bounded_line() {
        assert_eq!(one_line(b"a plain line\n", 13), b"a plain line\n");
        let forged = b"entry a\nINFO forged\x1b[31m\n";
        assert_eq!(
            one_line(forged, forged.len()),
            b"entry a\\nINFO forged\\x1b[31m\n"
        );
        let big = vec![b'x'; 1 << 20];
        let l = one_line(&big[..MAX_LINE_BYTES + 1], big.len());
        assert!(l.len() < MAX_LINE_BYTES + 64, "{}", l.len());
        assert!(l.ends_with(b"... (1048576 bytes)\n"));
        // Through the writer, as the fmt layer uses it.
        let sink = OneLine::new(Vec::new());
        {
            let mut w = sink.make_writer();
            w.write_all(b"first\nsecond").unwrap();
            w.write_all(&big).unwrap();
            w.write_all(b"\n").unwrap();
        }
        let out = sink.0.into_inner().unwrap();
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        assert!(out.starts_with(b"first\\nsecond"));
    }
}
