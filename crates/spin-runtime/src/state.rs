//! Per-request store data and the context host features are built from.

use std::future::Future;

use tracing::Instrument as _;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

pub use crate::host::HostContext;
use crate::host::{self, HostState, HostView};

/// The data of one `Store`: one component instance serving one request (or, for a reused
/// WASIp3 instance, several: [`crate::reuse`]).
pub struct InstanceState {
    /// WASI context (env, preopened files, stdio).
    pub wasi: WasiCtx,
    /// wasi:http context.
    pub http: WasiHttpCtx,
    /// Resources of this instance.
    pub table: ResourceTable,
    /// Memory caps (`SPIN_MAX_INSTANCE_MEMORY`).
    pub limits: crate::limits::MemoryLimiter,
    /// Host-feature state (variables, key-value, outbound allow-list).
    pub host: HostState,
    /// The time slice the store's epoch callback checks; restarted when a reused instance
    /// takes its next request.
    pub slice: std::sync::Arc<crate::limits::TimeSlice>,
}

impl HostView for InstanceState {
    fn host(&mut self) -> &mut HostState {
        &mut self.host
    }
}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for InstanceState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.host,
        }
    }
}

/// Outbound HTTP goes through the host features' allow-list before wasmtime-wasi-http's
/// default client sends it.
impl WasiHttpHooks for HostState {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<wasmtime_wasi_http::WasiBody>,
                        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                    ),
                    wasmtime_wasi_http::Error,
                >,
            > + Send,
    > {
        let _ = fut;
        let mut request = request;
        let span = outbound_span(&mut request, self);
        let verdict = host::check_outbound(self, request.uri());
        if let Some(target) = crate::chain::chaining_target(request.uri()) {
            let chain = self.chain.clone();
            return Box::new(
                async move {
                    verdict?;
                    let resp = chain.call(&target, request).await?;
                    Ok((
                        resp,
                        Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
                    ))
                }
                .instrument(span),
            );
        }
        let verdict = match verdict {
            Ok(()) if crate::chain::is_self_request(request.uri()) => {
                self.chain.to_self(&mut request)
            }
            v => v,
        };
        let tls = self.features.client_tls.for_https(request.uri());
        let policy = self.network_policy().clone();
        let component = self.component_id().to_string();
        Box::new(
            async move {
                verdict?;
                let r = host::outbound::send_http(&policy, &component, request, options, tls).await;
                record_outbound(&r);
                r
            }
            .instrument(span),
        )
    }
}

/// The client span of an outbound request (scheme, host, port and path; never the query),
/// whose context goes out as the request's `traceparent`. `Span::none()` when traces are off.
fn outbound_span<B>(request: &mut http::Request<B>, state: &HostState) -> tracing::Span {
    if !otel_export::enabled() {
        return tracing::Span::none();
    }
    let uri = request.uri();
    let host = uri.host().unwrap_or_default().to_string();
    let port = uri.port_u16();
    let url = format!(
        "{}://{}{}{}",
        uri.scheme_str().unwrap_or("http"),
        host,
        port.map(|p| format!(":{p}")).unwrap_or_default(),
        uri.path()
    );
    let method = request.method().as_str().to_string();
    let span = tracing::info_span!(
        "spin_outbound_http.send_request",
        otel.kind = "client",
        otel.name = method.as_str(),
        http.request.method = method.as_str(),
        server.address = host.as_str(),
        url.full = url.as_str(),
        server.port = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(p) = port {
        span.record("server.port", p);
    }
    crate::host::adopt_request_trace(&span, state);
    otel_export::inject_into(&span, request.headers_mut());
    span
}

/// Records an outbound response's status (or failure) on the current outbound span.
fn record_outbound<B, E: std::fmt::Debug>(r: &Result<(http::Response<B>, impl Sized), E>) {
    if !otel_export::enabled() {
        return;
    }
    let span = tracing::Span::current();
    match r {
        Ok((resp, _)) => {
            span.record("http.response.status_code", resp.status().as_u16());
        }
        Err(e) => otel_export::set_error(&span, format!("{e:?}")),
    }
}
