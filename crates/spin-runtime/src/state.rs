//! Per-request store data and the context host features are built from.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::host::{self, HostState};

/// Where the app runs: what host features need beyond the app model.
#[derive(Debug, Clone, Default)]
pub struct HostContext {
    /// The app's root directory (`/` inside a container): `/.spin/` and
    /// `/runtime-config.toml` are found relative to it.
    pub app_dir: PathBuf,
    /// The container's (or the process's) environment, for variable values.
    pub env: HashMap<String, String>,
}

/// The data of one `Store`: one component instance serving one request.
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
        let verdict = host::check_outbound(self, request.uri());
        if let Some(target) = crate::chain::chaining_target(request.uri()) {
            let chain = self.chain.clone();
            return Box::new(async move {
                verdict?;
                let resp = chain.call(&target, request).await?;
                Ok((
                    resp,
                    Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
                ))
            });
        }
        let verdict = match verdict {
            Ok(()) if crate::chain::is_self_request(request.uri()) => {
                self.chain.to_self(&mut request)
            }
            v => v,
        };
        if let Some(config) = host::client_tls_for(self, request.uri()) {
            return Box::new(async move {
                verdict?;
                host::tls::send(request, options, config).await
            });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            verdict?;
            let (res, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                res.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}
