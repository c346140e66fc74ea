//! The app's standard output and error when OpenTelemetry logs are exported: written to the
//! process's as before, and each write also handed to [`otel_export::app_log`] with the
//! component's id (Spin's `handle_app_log`).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// A guest output stream that also exports what the guest writes.
pub(crate) struct AppOutput<S> {
    inner: S,
    component: Arc<str>,
}

impl<S> AppOutput<S> {
    /// Wraps `inner` (the process's stdout or stderr) for `component`.
    pub(crate) fn new(inner: S, component: &str) -> Self {
        AppOutput {
            inner,
            component: component.into(),
        }
    }
}

impl<S: IsTerminal> IsTerminal for AppOutput<S> {
    fn is_terminal(&self) -> bool {
        self.inner.is_terminal()
    }
}

impl<S: StdoutStream> StdoutStream for AppOutput<S> {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(AsyncTee {
            inner: Box::into_pin(self.inner.async_stream()),
            component: self.component.clone(),
        })
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(P2Tee {
            inner: self.inner.p2_stream(),
            component: self.component.clone(),
        })
    }
}

struct AsyncTee {
    inner: Pin<Box<dyn AsyncWrite + Send + Sync>>,
    component: Arc<str>,
}

impl AsyncWrite for AsyncTee {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = self.inner.as_mut().poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            otel_export::app_log(&buf[..*n], &self.component);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inner.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inner.as_mut().poll_shutdown(cx)
    }
}

struct P2Tee {
    inner: Box<dyn OutputStream>,
    component: Arc<str>,
}

impl OutputStream for P2Tee {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        otel_export::app_log(&bytes, &self.component);
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }
}

#[async_trait::async_trait]
impl Pollable for P2Tee {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}
