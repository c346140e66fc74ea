//! The HTTP trigger: accepts connections (HTTP/1.1, and HTTP/2 by prior knowledge, by
//! `Upgrade: h2c` or by ALPN over TLS), routes requests to components, adds the Spin
//! request headers, serves the built-in `/.well-known/spin/` endpoints, and shuts down
//! gracefully (stop accepting, drain in-flight requests within a bound).
//!
//! The HTTP server floor of the crate (above the app model, the engine, the host features
//! and the loaded app; below the crate's builder): its submodules are the executors of each
//! HTTP component kind (WASI HTTP in [`reuse`], [`wagi`], Spin 1.x in [`spin1`]), service
//! chaining and h2c; the route table ([`crate::routing`]) and the inbound TLS settings
//! ([`crate::inbound_tls`]) are the app's and the config's, below the loaded app.

/// `AsyncWrite` for a pin-projected reader wrapper `$ty<I>` whose `inner` field does the
/// writing unchanged.
macro_rules! write_through {
    ($ty:ident) => {
        impl<I: tokio::io::AsyncWrite> tokio::io::AsyncWrite for $ty<I> {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.project().inner.poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.project().inner.poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                self.project().inner.poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                self.project().inner.poll_shutdown(cx)
            }
        }
    };
}
pub(crate) use write_through;

pub mod chain;
pub(crate) mod h2_heads;
pub(crate) mod h2c;
mod prefetch;
pub(crate) mod reuse;
pub(crate) mod spin1;
pub mod wagi;
pub(crate) mod whole_body;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tracing::Instrument as _;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::WasiHttpView;

use crate::inbound_tls::InboundTls;
use crate::routing::{RouteMatch, WELL_KNOWN_PREFIX};
use crate::runtime::{HttpPre, LoadedApp};

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<HyperOutgoingBody> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r
}

/// A trigger's `static_response` (status validated when the app was loaded; a header
/// that is not valid HTTP is left out with a warning).
fn static_response(sr: &crate::app::StaticResponse) -> Response<HyperOutgoingBody> {
    let status = StatusCode::from_u16(sr.status()).unwrap_or(StatusCode::OK);
    let mut r = text(status, sr.body.clone().unwrap_or_default());
    for (name, value) in sr.headers.iter() {
        match (
            http::header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(n), Ok(v)) => {
                r.headers_mut().append(n, v);
            }
            _ => tracing::warn!("static_response header {name:?} is not valid HTTP: left out"),
        }
    }
    r
}

/// A response without a body, as Spin answers 404 and 500.
fn empty(status: StatusCode) -> Response<HyperOutgoingBody> {
    text(status, Bytes::new())
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Handles one request: built-ins, routing, the component call.
async fn handle(
    app: Arc<LoadedApp>,
    mut req: Request<Incoming>,
    client_addr: HeaderValue,
    local: SocketAddr,
    scheme: HttpScheme,
) -> Response<HyperOutgoingBody> {
    // The URI's parts are shared bytes: a clone is a count, not a copy of the path.
    let uri = req.uri().clone();
    let path = uri.path();
    if let Some(rest) = path.strip_prefix(WELL_KNOWN_PREFIX) {
        return match rest {
            "/health" => text(StatusCode::OK, "OK"),
            "/info" => {
                // Spin's `AppInfo`: absent version and digest are left out; pretty JSON.
                let mut info = serde_json::json!({ "name": app.app.name });
                if let Some(v) = &app.app.version {
                    info["version"] = v.clone().into();
                }
                if let Some(d) = &app.app.oci_image_digest {
                    info["oci_image_digest"] = d.clone().into();
                }
                let body = serde_json::to_string_pretty(&info).unwrap_or_default();
                let mut r = text(StatusCode::OK, body);
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                r
            }
            _ => empty(StatusCode::NOT_FOUND),
        };
    }
    let Some(route) = app.router.route(path) else {
        return empty(StatusCode::NOT_FOUND);
    };
    if let Some(sr) = &route.static_response {
        return static_response(sr);
    }
    let Some(component) = app.component(&route.component) else {
        tracing::error!(component = %route.component, "routed to a component that is not loaded");
        return empty(StatusCode::INTERNAL_SERVER_ERROR);
    };
    // As Spin's `strip_forbidden_headers`: `Connection` is transport information only the
    // server uses (and breaks guests that forward requests).
    req.headers_mut().remove(http::header::CONNECTION);
    if !req.headers().contains_key(http::header::HOST) {
        // HTTP/2 carries the host as the URI's authority (`:authority`).
        let host = match req.uri().authority() {
            Some(a) => header_value(a.as_str()),
            None => header_value(&local.to_string()),
        };
        req.headers_mut().insert(http::header::HOST, host);
    }
    add_spin_headers(&mut req, &route, client_addr, scheme);
    otel_export::count_request("http", &app.app.name, &component.id);
    let timing = app
        .metrics
        .as_ref()
        .map(|m| (m.start(), std::time::Instant::now()));
    let span = request_span(&req, &route.route, &component.id);
    let resp = match call_component(&app, &component, req, scheme, &span)
        .instrument(span.clone())
        .await
    {
        Ok(r) => r,
        Err(CallError::Deadline) => text(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout"),
        Err(CallError::Failed(e)) => {
            tracing::error!(component = %component.id, "request failed: {e:#}");
            empty(StatusCode::INTERNAL_SERVER_ERROR)
        }
    };
    if otel_export::enabled() {
        span.record("http.response.status_code", resp.status().as_u16());
        if resp.status().is_server_error() {
            otel_export::set_error(&span, resp.status().to_string());
        }
    }
    if let (Some(m), Some((_in_flight, t0))) = (&app.metrics, timing) {
        m.answered(
            &component.id,
            &route.route,
            resp.status().as_u16(),
            t0.elapsed().as_secs_f64(),
        );
    }
    resp
}

/// The server span of a request routed to a component, a child of the request's W3C
/// `traceparent`; `Span::none()` when traces are off.
fn request_span<B>(req: &Request<B>, route: &str, component: &str) -> tracing::Span {
    if !otel_export::enabled() {
        return tracing::Span::none();
    }
    let method = req.method().as_str();
    let span = tracing::info_span!(
        "spin_trigger_http.handle_http_request",
        otel.kind = "server",
        otel.name = format!("{method} {route}"),
        http.request.method = method,
        http.route = route,
        url.path = req.uri().path(),
        spin.component_id = component,
        http.response.status_code = tracing::field::Empty,
    );
    otel_export::set_parent_from(&span, req.headers());
    span
}

/// Adds the headers Spin gives every component request; `client_addr` is the
/// `spin-client-addr` value ([`client_addr_header`]).
fn add_spin_headers<B>(
    req: &mut Request<B>,
    route: &RouteMatch,
    client_addr: HeaderValue,
    scheme: HttpScheme,
) {
    const FULL_URL: HeaderName = HeaderName::from_static("spin-full-url");
    const PATH_INFO: HeaderName = HeaderName::from_static("spin-path-info");
    const MATCHED_ROUTE: HeaderName = HeaderName::from_static("spin-matched-route");
    const BASE_PATH: HeaderName = HeaderName::from_static("spin-base-path");
    const RAW_COMPONENT_ROUTE: HeaderName = HeaderName::from_static("spin-raw-component-route");
    const COMPONENT_ROUTE: HeaderName = HeaderName::from_static("spin-component-route");
    const CLIENT_ADDR: HeaderName = HeaderName::from_static("spin-client-addr");
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let path_and_query = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let scheme = scheme.as_str();
    let mut full_url = String::with_capacity(scheme.len() + 3 + host.len() + path_and_query.len());
    for part in [scheme, "://", host, path_and_query] {
        full_url.push_str(part);
    }
    let full_url = owned_header_value(full_url);
    let matched_route = header_value(&route.route);
    let h = req.headers_mut();
    // Room for all of them at once: the map hyper parsed holds the client's headers only,
    // and growing it one insert at a time rehashes and moves its entries.
    h.reserve(7 + route.captures.len());
    h.insert(FULL_URL, full_url);
    h.insert(PATH_INFO, header_value(&route.path_info));
    h.insert(MATCHED_ROUTE, matched_route.clone());
    h.insert(BASE_PATH, HeaderValue::from_static("/"));
    h.insert(RAW_COMPONENT_ROUTE, matched_route);
    h.insert(COMPONENT_ROUTE, header_value(&route.component_route));
    h.insert(CLIENT_ADDR, client_addr);
    for (name, value) in &route.captures {
        let name = format!("spin-path-match-{}", name.to_ascii_lowercase());
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            h.insert(name, header_value(value));
        }
    }
}

/// The `spin-client-addr` value of a client (`ip:port`), made once per connection: a clone
/// is a reference count, where formatting the address costs every request.
fn client_addr_header(client: SocketAddr) -> HeaderValue {
    owned_header_value(client.to_string())
}

/// As [`header_value`], taking the string without copying it.
fn owned_header_value(s: String) -> HeaderValue {
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// How a request reached the server: plain TCP or TLS (the scheme of `spin-full-url` and of
/// the guest's request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpScheme {
    Http,
    Https,
}

impl HttpScheme {
    fn as_str(self) -> &'static str {
        match self {
            HttpScheme::Http => "http",
            HttpScheme::Https => "https",
        }
    }

    fn wasi(self) -> Scheme {
        match self {
            HttpScheme::Http => Scheme::Http,
            HttpScheme::Https => Scheme::Https,
        }
    }
}

/// Why a component call gave no response.
enum CallError {
    /// The request deadline passed (already logged).
    Deadline,
    /// Anything else: a trap, a bad response, an instantiation failure.
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for CallError {
    fn from(e: anyhow::Error) -> Self {
        CallError::Failed(e)
    }
}

/// What the guest task ended with.
enum TaskEnd {
    Done(wasmtime::Result<()>),
    Deadline,
}

/// Instantiates the component in a fresh store and calls its incoming handler; the
/// response streams from the guest task. The task ends at the request deadline
/// (`SPIN_SHIM_REQUEST_TIMEOUT`) whether or not the response has started; guest code
/// yields once its time slice ([`crate::limits::TimeSlice`], 10-20 ms) is used up, so the
/// deadline also ends a guest that never calls the host. `span` is the request's server
/// span (a WASIp3 instance's host calls of the request get it as their parent).
async fn call_component<B>(
    app: &LoadedApp,
    component: &Arc<crate::runtime::PreparedComponent>,
    req: Request<B>,
    scheme: HttpScheme,
    span: &tracing::Span,
) -> Result<Response<HyperOutgoingBody>, CallError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    let pre = match LoadedApp::proxy_pre(component)
        .ok_or_else(|| anyhow!("component `{}` is not an HTTP component", component.id))?
    {
        HttpPre::P2(pre) => P2Handler::Current(pre.clone()),
        HttpPre::P2Rc(pre) => P2Handler::Rc(pre.clone()),
        HttpPre::P3(pre) => {
            return call_component_p3(app, component, pre, req, scheme, span.clone()).await
        }
        // Boxed: their futures are kilobytes, and every request's future (which hyper moves)
        // would otherwise be as large as the largest.
        HttpPre::Spin1(pre) => return Ok(Box::pin(spin1::call(app, component, pre, req)).await?),
        HttpPre::Wagi(pre) => return Ok(Box::pin(wagi::call(app, component, pre, req)).await?),
    };
    call_component_p2(app, component, pre, req, scheme).await
}

/// The WASIp2 part of [`call_component`]: a fresh instance in a fresh store per request.
async fn call_component_p2<B>(
    app: &LoadedApp,
    component: &Arc<crate::runtime::PreparedComponent>,
    pre: P2Handler,
    req: Request<B>,
    scheme: HttpScheme,
) -> Result<Response<HyperOutgoingBody>, CallError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    let mut store = app.new_store(component)?;
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let incoming = store
        .data_mut()
        .http()
        .new_incoming_request(scheme.wasi(), req)
        .map_err(anyhow::Error::from)?;
    let out = store
        .data_mut()
        .http()
        .new_response_outparam(sender)
        .map_err(anyhow::Error::from)?;
    let deadline = app.limits.request_timeout;
    let id = component.id.clone();
    let metrics = app.metrics.clone();
    let usage = store.data().limits.usage();
    let guest = Box::pin(async move {
        let end = {
            let run = async {
                match pre {
                    P2Handler::Current(pre) => {
                        let proxy = pre.instantiate_async(&mut store).await?;
                        if let Some(m) = &metrics {
                            m.instantiated(&id);
                        }
                        proxy
                            .wasi_http_incoming_handler()
                            .call_handle(&mut store, incoming, out)
                            .await
                    }
                    P2Handler::Rc(pre) => {
                        let metrics = metrics.clone();
                        let id = id.clone();
                        crate::wasi_rc::http::call_handle(&pre, &mut store, incoming, out, || {
                            if let Some(m) = &metrics {
                                m.instantiated(&id);
                            }
                        })
                        .await
                    }
                }
            };
            within(deadline, crate::metrics::cpu_timed(usage, run)).await
        };
        task_end(end, &store.data().limits, &id, deadline, metrics.as_deref())
    });
    match drive_until_response(guest, receiver).await? {
        Ok(resp) => Ok(resp),
        Err(code) => Err(anyhow!("component returned error {code:?}").into()),
    }
}

/// A WASIp2 HTTP handler: 0.2.x's, or the 0.2.0-rc-2023-10-18 snapshot's (same resources).
enum P2Handler {
    Current(wasmtime_wasi_http::p2::bindings::ProxyPre<crate::state::InstanceState>),
    Rc(crate::wasi_rc::http::ProxyPre<crate::state::InstanceState>),
}

/// A request's guest: instantiation, the handler call and whatever the guest does after
/// it set the response (writing the body, trailers, its own tasks), up to the deadline.
type Guest = std::pin::Pin<Box<dyn Future<Output = Result<(), CallError>> + Send + 'static>>;

/// Runs `guest` in the request's own task (no task spawn, no cross-thread wake) until it
/// sets its response; the response's body then keeps driving the guest ([`DrivenBody`]), so
/// a guest streaming its body is polled exactly when hyper wants more of it. A guest that
/// ends without a response gives its error.
async fn drive_until_response<T>(
    mut guest: Guest,
    mut receiver: tokio::sync::oneshot::Receiver<Result<Response<HyperOutgoingBody>, T>>,
) -> Result<Result<Response<HyperOutgoingBody>, T>, CallError> {
    let first = tokio::select! {
        biased;
        r = &mut receiver => Ok(r),
        end = &mut guest => Err(end),
    };
    match first {
        Ok(Ok(Ok(resp))) => {
            let (parts, body) = resp.into_parts();
            let body = DrivenBody {
                inner: body,
                guest: Some(guest.instrument(tracing::Span::current())),
            };
            Ok(Ok(Response::from_parts(parts, body.boxed_unsync())))
        }
        Ok(Ok(Err(code))) => {
            finish_detached(guest);
            Ok(Err(code))
        }
        // The sender is dropped only with the guest's store, i.e. when the guest ended.
        Ok(Err(_)) => no_response(guest.await),
        Err(end) => match receiver.try_recv() {
            Ok(r) => Ok(r),
            Err(_) => no_response(end),
        },
    }
}

/// Lets a guest that already answered run to its end on its own task.
fn finish_detached<F>(guest: F)
where
    F: Future<Output = Result<(), CallError>> + Send + 'static,
{
    tokio::task::spawn(async move {
        if let Err(CallError::Failed(e)) = guest.await {
            tracing::error!("component failed after sending its response: {e:#}");
        }
    });
}

pin_project_lite::pin_project! {
    /// A guest's response body that also polls the guest itself, which writes it. When the
    /// body is dropped (sent, or the client went away) before the guest ended, the guest
    /// goes on alone, as it would have in a task of its own.
    struct DrivenBody {
        #[pin]
        inner: HyperOutgoingBody,
        guest: Option<tracing::instrument::Instrumented<Guest>>,
    }

    impl PinnedDrop for DrivenBody {
        fn drop(this: Pin<&mut Self>) {
            if let Some(guest) = this.project().guest.take() {
                finish_detached(guest);
            }
        }
    }
}

impl hyper::body::Body for DrivenBody {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if let Some(guest) = this.guest.as_mut() {
            if let std::task::Poll::Ready(end) = std::pin::Pin::new(guest).poll(cx) {
                *this.guest = None;
                if let Err(CallError::Failed(e)) = end {
                    tracing::error!("component failed while writing its response: {e:#}");
                }
            }
        }
        this.inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Runs a guest task to its end or to the request deadline, whichever comes first.
async fn within<F>(deadline: Option<Duration>, run: F) -> TaskEnd
where
    F: Future<Output = wasmtime::Result<()>>,
{
    match deadline {
        Some(d) => match tokio::time::timeout(d, run).await {
            Ok(r) => TaskEnd::Done(r),
            Err(_) => TaskEnd::Deadline,
        },
        None => TaskEnd::Done(run.await),
    }
}

/// What a guest task's end means for the request: the deadline, a trap (with the memory
/// cap named when a growth over it caused it), or success.
fn task_end(
    end: TaskEnd,
    limiter: &crate::limits::MemoryLimiter,
    id: &str,
    deadline: Option<std::time::Duration>,
    metrics: Option<&crate::metrics::Metrics>,
) -> Result<(), CallError> {
    match end {
        TaskEnd::Deadline => {
            log_past_deadline(id, deadline, "; the instance was stopped");
            Err(CallError::Deadline)
        }
        TaskEnd::Done(Ok(())) => Ok(()),
        TaskEnd::Done(Err(e)) => {
            if let Some(m) = metrics {
                m.trapped(id);
            }
            Err(CallError::Failed(memory_cause(
                anyhow::Error::from(e),
                limiter,
                id,
            )))
        }
    }
}

/// Logs that a request of component `id` ran past `deadline`, naming the knob; `outcome`
/// says what that did beyond ending the request.
pub(crate) fn log_past_deadline(id: &str, deadline: Option<Duration>, outcome: &str) {
    tracing::error!(
        component = %id,
        "request ended: it ran longer than the request deadline of {:?} (set {} to change it, \
         0 for none){outcome}",
        deadline.unwrap_or_default(),
        crate::limits::REQUEST_TIMEOUT_ENV
    );
}

/// `e`, a guest's failure, with the memory cap named when a growth over it caused it.
pub(crate) fn memory_cause(
    e: anyhow::Error,
    limiter: &crate::limits::MemoryLimiter,
    id: &str,
) -> anyhow::Error {
    match (limiter.refused(), limiter.max()) {
        (Some(wanted), Some(max)) => e.context(format!(
            "component `{id}` ran out of memory: it tried to grow a linear memory to {wanted} \
             bytes, over the per-instance cap of {max} bytes (set {} to change it; by default \
             half the container's memory limit); only this instance's requests failed",
            crate::runtime::MAX_MEMORY_ENV
        )),
        _ => e,
    }
}

/// The error of a request whose guest ended (`end`) without sending a response.
fn no_response<T>(end: Result<(), CallError>) -> Result<T, CallError> {
    match end {
        Ok(()) => Err(anyhow!("component did not set a response").into()),
        Err(CallError::Deadline) => Err(CallError::Deadline),
        Err(CallError::Failed(e)) => Err(CallError::Failed(
            e.context("component trapped before sending a response"),
        )),
    }
}

/// As [`call_component`], for a WASIp3 component (`wasi:http/handler@0.3.0`): the request
/// (with an absolute URI, `http://<host><path>`, as the WASIp2 path's scheme and authority)
/// goes to one of the component's instances, which may serve others before and beside it
/// ([`reuse`]); the instance keeps running after the response is returned, writing
/// its body and trailers from its own tasks.
async fn call_component_p3<B>(
    app: &LoadedApp,
    component: &Arc<crate::runtime::PreparedComponent>,
    pre: &wasmtime_wasi_http::p3::bindings::ServicePre<crate::state::InstanceState>,
    req: Request<B>,
    scheme: HttpScheme,
    span: tracing::Span,
) -> Result<Response<HyperOutgoingBody>, CallError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    use wasmtime_wasi_http::handler::{ExpirationError, InstantiationError, TrapOrPanicError};
    let instances = reuse::instances(app, component, pre);
    let req = absolute_uri(req, scheme).map(|body| body.map_err(Into::into).boxed_unsync());
    let started = std::time::Instant::now();
    let e = match instances.handle(span, req).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            return Ok(Response::from_parts(parts, prefetch::prefetch(body).await));
        }
        Err(e) => e,
    };
    let state = instances.state();
    let deadline = state.request_timeout();
    let past_deadline = deadline.is_some_and(|d| started.elapsed() >= d);
    if e.is::<ExpirationError>() || (e.is::<TrapOrPanicError>() && past_deadline) {
        log_past_deadline(state.id(), deadline, "");
        return Err(CallError::Deadline);
    }
    if e.is::<TrapOrPanicError>() {
        return Err(anyhow!(
            "the instance of component `{}` serving it was stopped (its error is logged \
             above)",
            state.id()
        )
        .into());
    }
    Err(match e.downcast::<InstantiationError<tracing::Span>>() {
        Ok(i) => anyhow!(
            "cannot instantiate component `{}`: {:#}",
            state.id(),
            i.error
        ),
        Err(e) => anyhow::Error::from(e),
    }
    .into())
}

/// `req` with an absolute `http://` (or, over TLS, `https://`) URI, its authority from the
/// `Host` header (which [`handle`] always sets).
fn absolute_uri<B>(mut req: Request<B>, scheme: HttpScheme) -> Request<B> {
    if req.uri().authority().is_some() {
        return req;
    }
    let Some(host) = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<http::uri::Authority>().ok())
    else {
        return req;
    };
    let mut parts = req.uri().clone().into_parts();
    parts.scheme = Some(match scheme {
        HttpScheme::Http => http::uri::Scheme::HTTP,
        HttpScheme::Https => http::uri::Scheme::HTTPS,
    });
    parts.authority = Some(host);
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
    req
}

/// Client address Spin gives chained requests.
const CHAINED_CLIENT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// A service-chaining request to `component` ([`chain`]): headers as for a match of
/// the path against a `/...` route (Spin's `RouteMatch::synthetic`), then the same call,
/// deadline and error handling as a request from the network.
pub(crate) async fn call_chained(
    app: &LoadedApp,
    component: &Arc<crate::runtime::PreparedComponent>,
    mut req: Request<HyperOutgoingBody>,
) -> Result<Response<HyperOutgoingBody>, wasmtime_wasi_http::Error> {
    let route = RouteMatch {
        component: component.id.as_str().into(),
        static_response: None,
        route: "/...".into(),
        component_route: "".into(),
        path_info: req.uri().path().to_string(),
        captures: Vec::new(),
    };
    let client_addr = client_addr_header(CHAINED_CLIENT_ADDR);
    add_spin_headers(&mut req, &route, client_addr, HttpScheme::Http);
    match call_component(
        app,
        component,
        req,
        HttpScheme::Http,
        &tracing::Span::current(),
    )
    .await
    {
        Ok(r) => Ok(r),
        Err(CallError::Deadline) => Ok(text(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout")),
        Err(CallError::Failed(e)) => {
            tracing::error!(component = %component.id, "chained request failed: {e:#}");
            Ok(empty(StatusCode::INTERNAL_SERVER_ERROR))
        }
    }
}

pub use crate::limits::{DEFAULT_WRITE_TIMEOUT, WRITE_TIMEOUT_ENV};

pin_project_lite::pin_project! {
    /// A connection's socket whose writes fail with `TimedOut` once they have made no
    /// progress for `timeout`: a client that stops reading its response would otherwise hold
    /// the connection (and its slot under the connection cap) forever, since hyper's
    /// header-read timeout and our idle timeout only cover reading and idle time.
    struct WriteProgress<S> {
        #[pin]
        inner: S,
        timeout: Option<Duration>,
        // Started by the first write that could not proceed; cleared by any progress.
        stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<S> WriteProgress<S> {
    fn new(inner: S, timeout: Option<Duration>) -> Self {
        WriteProgress {
            inner,
            timeout,
            stalled: None,
        }
    }
}

/// What a write of [`WriteProgress`] returns: `written` as it is, the stall timer cleared
/// on progress, started (and checked) when the write is pending.
fn write_progress(
    written: std::task::Poll<std::io::Result<usize>>,
    timeout: Option<Duration>,
    stalled: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<std::io::Result<usize>> {
    use std::task::Poll;
    match (written, timeout) {
        (Poll::Pending, Some(timeout)) => {
            let timer = stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the client stopped reading its response: nothing could be sent \
                         for {timeout:?} (set {WRITE_TIMEOUT_ENV} to change it)"
                    ),
                ))),
                Poll::Pending => Poll::Pending,
            }
        }
        (written, _) => {
            if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
                *stalled = None;
            }
            written
        }
    }
}

impl<S: tokio::io::AsyncWrite> tokio::io::AsyncWrite for WriteProgress<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.project();
        let written = this.inner.poll_write(cx, buf);
        write_progress(written, *this.timeout, this.stalled, cx)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.project();
        let written = this.inner.poll_write_vectored(cx, bufs);
        write_progress(written, *this.timeout, this.stalled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

impl<S: tokio::io::AsyncRead> tokio::io::AsyncRead for WriteProgress<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

/// Per-connection activity, for the idle and write timeouts.
struct Activity {
    busy: std::sync::atomic::AtomicUsize,
    last: std::sync::Mutex<tokio::time::Instant>,
    /// Response bodies that handed hyper a frame and wait for it to ask for the next one.
    waiting: std::sync::atomic::AtomicUsize,
    /// When hyper last asked a response body for a frame.
    progress: std::sync::Mutex<tokio::time::Instant>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            busy: Default::default(),
            last: std::sync::Mutex::new(tokio::time::Instant::now()),
            waiting: Default::default(),
            progress: std::sync::Mutex::new(tokio::time::Instant::now()),
        }
    }

    fn last(&self) -> tokio::time::Instant {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = tokio::time::Instant::now();
    }

    fn progress(&self) -> tokio::time::Instant {
        *self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn progressed(&self) {
        *self.progress.lock().unwrap_or_else(|p| p.into_inner()) = tokio::time::Instant::now();
    }
}

pin_project_lite::pin_project! {
    /// A response body that records when hyper asks it for frames ([`Activity::waiting`]).
    /// An HTTP/2 client that keeps its flow-control window closed stalls the response
    /// without stalling the socket, which [`WriteProgress`] cannot see; hyper then stops
    /// asking the body for frames, and [`drive`] closes the connection after the write
    /// timeout.
    struct Progress {
        #[pin]
        inner: HyperOutgoingBody,
        activity: Arc<Activity>,
        // A frame was handed and hyper has not asked for the next one yet.
        handed: bool,
    }

    impl PinnedDrop for Progress {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.handed {
                this.activity
                    .waiting
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

impl Progress {
    fn new(inner: HyperOutgoingBody, activity: Arc<Activity>) -> Progress {
        Progress {
            inner,
            activity,
            handed: false,
        }
    }
}

impl hyper::body::Body for Progress {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        use std::sync::atomic::Ordering::SeqCst;
        let this = self.project();
        if std::mem::take(this.handed) {
            this.activity.waiting.fetch_sub(1, SeqCst);
        }
        this.activity.progressed();
        let frame = this.inner.poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(_))) = &frame {
            *this.handed = true;
            this.activity.waiting.fetch_add(1, SeqCst);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Decrements the busy count (and records the time) when a request's handler returns or is
/// dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: &Arc<Activity>) -> Busy {
        a.busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Busy(a.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Most requests one HTTP/2 connection serves at once (`SETTINGS_MAX_CONCURRENT_STREAMS`,
/// the least RFC 7540 advises); an HTTP/1.1 connection serves one at a time.
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 100;
/// Largest HTTP/2 header list accepted (`SETTINGS_MAX_HEADER_LIST_SIZE`): what hyper's
/// HTTP/1.1 server buffers for a request head (8 KiB + 100 x 4 KiB), so that a request too
/// large for one protocol is too large for the other.
pub const H2_MAX_HEADER_LIST_SIZE: u32 = 8192 + 4096 * 100;

/// An `Upgrade: h2c` request answered with 101: the connection to take over, and the
/// request as the frames of stream 1 ([`h2c`]).
struct PendingUpgrade {
    on_upgrade: hyper::upgrade::OnUpgrade,
    frames: Bytes,
}

type UpgradeSlot = Arc<std::sync::Mutex<Option<PendingUpgrade>>>;

/// How every connection is served: HTTP/1.1, or HTTP/2 when it opens with the HTTP/2
/// preface (h2c prior knowledge, or h2 chosen by ALPN), with the same timeouts. HTTP/2 heads
/// get the header-read timeout from [`h2_heads::HeadDeadline`]; an HTTP/2 client that
/// stops answering PINGs (sent after the header-read timeout without a frame from it) loses
/// its connection after that timeout again, so that neither an idle connection's graceful
/// shutdown nor a dead peer holds the connection.
fn connection_builder(limits: &crate::limits::Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let mut h2 = b.http2();
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_LIST_SIZE);
    if let Some(t) = limits.header_read_timeout {
        h2.keep_alive_interval(t).keep_alive_timeout(t);
    }
    b
}

/// The service of one connection: counts requests in flight for the idle timeout; with an
/// `upgrade` slot (cleartext HTTP/1.1), answers an `Upgrade: h2c` request with 101 and
/// leaves it in the slot for [`serve_http`].
fn connection_service(
    app: Arc<LoadedApp>,
    activity: Arc<Activity>,
    (client, local): (SocketAddr, SocketAddr),
    scheme: HttpScheme,
    upgrade: Option<UpgradeSlot>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Progress>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response<Progress>, std::convert::Infallible>> + Send + 'static,
> + Clone {
    let client_addr = client_addr_header(client);
    hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let app = app.clone();
        let client_addr = client_addr.clone();
        let busy = Busy::new(&activity);
        let activity = activity.clone();
        let upgrade = upgrade.clone().filter(|_| h2c::wants_upgrade(&req));
        let pending = upgrade.map(|slot| {
            let frames = h2c::stream_one(&req);
            (slot, hyper::upgrade::on(&mut req), frames)
        });
        async move {
            if let Some((slot, on_upgrade, frames)) = pending {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(PendingUpgrade { on_upgrade, frames });
                drop(busy);
                let r = empty(StatusCode::SWITCHING_PROTOCOLS);
                return Ok(h2c::switching_protocols(r).map(|b| Progress::new(b, activity)));
            }
            let r = handle(app, req, client_addr, local, scheme).await;
            drop(busy);
            // hyper takes the body as it is: one allocation less than boxing it again.
            Ok(r.map(|b| Progress::new(b, activity)))
        }
    })
}

/// How serving a connection ended.
enum Ended {
    /// The connection closed (or failed, or idled out).
    Closed,
    /// The server is shutting down: nothing more is served on it.
    Stopped,
}

/// The I/O error with kind `TimedOut` in `e`'s chain (the write timeout), if any.
fn timed_out<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return Some(io);
            }
        }
        cur = err.source();
    }
    None
}

/// Drives `conn` until it ends; `shutdown` starts its graceful shutdown (it then finishes
/// its current requests and closes) when it is idle for the idle timeout or `stop` fires. A
/// connection whose responses wait for the client for the write timeout (an HTTP/2 client
/// that keeps its flow-control window closed, see [`Progress`]) is dropped.
async fn drive<C, E>(
    mut conn: std::pin::Pin<&mut C>,
    shutdown: fn(std::pin::Pin<&mut C>),
    activity: &Activity,
    limits: &crate::limits::Limits,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    client: SocketAddr,
) -> Ended
where
    C: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use std::sync::atomic::Ordering::SeqCst;
    let (idle, write) = (limits.idle_timeout, limits.write_timeout);
    let (mut ended, mut shutting) = (Ended::Closed, false);
    loop {
        // Each check is due when its condition could first hold, never in the past while
        // it cannot (so the loop never spins).
        let now = tokio::time::Instant::now();
        let far = now + Duration::from_secs(86400);
        let idle_check = match idle {
            Some(i) if activity.busy.load(SeqCst) == 0 => activity.last() + i,
            Some(i) => now + i,
            None => far,
        };
        let stall_check = match write {
            Some(w) if activity.waiting.load(SeqCst) > 0 => activity.progress() + w,
            Some(w) => now + w,
            None => far,
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    let e: Box<dyn std::error::Error + Send + Sync> = e.into();
                    match timed_out(&*e) {
                        Some(io) => tracing::info!(%client, "closing connection: {io}"),
                        None => tracing::debug!(%client, "connection error: {e}"),
                    }
                }
                return ended;
            }
            _ = stop.changed(), if !matches!(ended, Ended::Stopped) => {
                if !shutting {
                    shutdown(conn.as_mut());
                }
                (ended, shutting) = (Ended::Stopped, true);
            }
            _ = tokio::time::sleep_until(idle_check), if idle.is_some() && !shutting => {
                let idle = idle.unwrap_or_default();
                let quiet = activity.busy.load(SeqCst) == 0;
                if quiet && activity.last() + idle <= tokio::time::Instant::now() {
                    tracing::debug!(%client, "closing connection idle for {idle:?}");
                    shutdown(conn.as_mut());
                    shutting = true;
                }
            }
            _ = tokio::time::sleep_until(stall_check), if write.is_some() => {
                let write = write.unwrap_or_default();
                let waiting = activity.waiting.load(SeqCst) > 0;
                if waiting && activity.progress() + write <= tokio::time::Instant::now() {
                    tracing::info!(
                        %client,
                        "closing connection: the client stopped reading its response: \
                         nothing could be sent for {write:?} (set {WRITE_TIMEOUT_ENV} to \
                         change it)"
                    );
                    return ended;
                }
            }
        }
    }
}

/// Serves HTTP/1.1 and HTTP/2 on `io` until the connection ends, is idle for the idle
/// timeout, makes no write progress for the write timeout ([`WriteProgress`]), owes an
/// HTTP/2 request head for the header-read timeout ([`h2_heads::HeadDeadline`]), or `stop`
/// fires. A cleartext HTTP/1.1 connection upgraded to h2c goes on as HTTP/2 under the same
/// bounds.
async fn serve_http<I>(
    app: Arc<LoadedApp>,
    io: I,
    scheme: HttpScheme,
    peers: (SocketAddr, SocketAddr),
    stop: &mut tokio::sync::watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let limits = app.limits.clone();
    let client = peers.0;
    let activity = Arc::new(Activity::new());
    let slot = (scheme == HttpScheme::Http).then(UpgradeSlot::default);
    {
        let builder = connection_builder(&limits);
        let service =
            connection_service(app.clone(), activity.clone(), peers, scheme, slot.clone());
        let io = h2_heads::HeadDeadline::new(io, limits.header_read_timeout);
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        let shutdown = |c: std::pin::Pin<&mut _>| auto::UpgradeableConnection::graceful_shutdown(c);
        if let Ended::Stopped = drive(conn, shutdown, &activity, &limits, stop, client).await {
            return;
        }
    }
    let Some(pending) = slot.and_then(|s| s.lock().unwrap_or_else(|p| p.into_inner()).take())
    else {
        return;
    };
    let upgraded = match pending.on_upgrade.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(%client, "h2c upgrade failed: {e}");
            return;
        }
    };
    let io = h2c::StreamOne::new(TokioIo::new(upgraded), pending.frames);
    let io = h2_heads::HeadDeadline::new(io, limits.header_read_timeout);
    let service = connection_service(app, activity.clone(), peers, scheme, None);
    let builder = connection_builder(&limits).http2_only();
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let shutdown = |c: std::pin::Pin<&mut _>| auto::Connection::graceful_shutdown(c);
    drive(conn, shutdown, &activity, &limits, stop, client).await;
}

/// Serves one accepted connection: over TLS when `tls` is given (after a handshake bounded
/// by the header-read timeout), else in cleartext; see [`serve_http`].
async fn serve_connection(
    app: Arc<LoadedApp>,
    stream: tokio::net::TcpStream,
    peers: (SocketAddr, SocketAddr),
    mut stop: tokio::sync::watch::Receiver<bool>,
    tls: Option<InboundTls>,
) {
    let io = WriteProgress::new(stream, app.limits.write_timeout);
    let Some(tls) = tls else {
        return serve_http(app, io, HttpScheme::Http, peers, &mut stop).await;
    };
    // A client that never finishes its handshake would hold a connection slot.
    let bound = app
        .limits
        .header_read_timeout
        .or(app.limits.idle_timeout)
        .unwrap_or(Duration::from_secs(86400));
    let handshake = tokio::time::timeout(bound, tls.acceptor().accept(io));
    let stream = tokio::select! {
        r = handshake => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(client = %peers.0, "TLS handshake failed: {e}");
                return;
            }
            Err(_) => {
                tracing::info!(
                    client = %peers.0,
                    "closing connection: no TLS handshake within {bound:?} (set {} to change it)",
                    crate::limits::HEADER_READ_TIMEOUT_ENV
                );
                return;
            }
        },
        _ = stop.changed() => return,
    };
    serve_http(app, stream, HttpScheme::Https, peers, &mut stop).await;
}

/// Serves `app` on `listener` (HTTP/1.1 and HTTP/2; over TLS with ALPN when `tls` is given)
/// until `shutdown` completes, then stops accepting and
/// waits up to `drain` for in-flight requests. At most `max_connections` connections are
/// served at once (the rest wait in the listen backlog); each closes after its idle,
/// header-read or write timeout ([`crate::limits::Limits`]). Returns when all connections
/// are done or the bound passed (those left are dropped).
pub async fn serve(
    app: Arc<LoadedApp>,
    listener: TcpListener,
    tls: Option<InboundTls>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    if let Some(tls) = &tls {
        tracing::info!("serving TLS on {local} (ALPN h2, http/1.1) with {tls:?}");
    }
    app.chain.bind(&app, local);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let max = app.limits.max_connections;
    let slots = Arc::new(tokio::sync::Semaphore::new(max));
    tokio::pin!(shutdown);
    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                tracing::warn!(
                    "connection limit of {max} reached ({}): new connections wait until one \
                     closes",
                    crate::limits::MAX_CONNECTIONS_ENV
                );
                tokio::select! {
                    _ = &mut shutdown => break,
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                }
            }
        };
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, client) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let stop = stop_rx.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    serve_connection(app, stream, (client, local), stop, tls).await;
                    drop(permit);
                });
                // Reap finished connection tasks so the set does not grow.
                while connections.try_join_next().is_some() {}
            }
        }
    }
    drop(listener);
    let in_flight = connections.len();
    tracing::info!(
        connections = in_flight,
        "shutting down: draining in-flight requests"
    );
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = connections.len(),
            "drain timeout of {drain:?} passed; dropping remaining connections"
        );
        connections.shutdown().await;
    }
    Ok(())
}
