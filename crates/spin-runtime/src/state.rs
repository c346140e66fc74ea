//! Per-request store data and the context host features are built from.

use std::future::Future;

use tracing::Instrument as _;
use wasmtime::component::{ComponentType, Linker, Lower, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

pub use crate::host::HostContext;
use crate::host::{self, HostState, HostView};

/// The data of one `Store`: one component instance serving one request (or, for a reused
/// WASIp3 instance, several: [`crate::server::reuse`]).
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
    /// wasmtime-wasi-http's default list, checked in place: the trait's default builds its
    /// filter (an `Arc`) anew for every header of every request.
    fn is_forbidden_header(&mut self, name: &http::HeaderName) -> bool {
        static FORBIDDEN: [http::HeaderName; 9] = wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS;
        FORBIDDEN.contains(name)
    }

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
        if let Some(target) = host::outbound::chaining_target(request.uri()) {
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
            Ok(()) if host::outbound::is_self_request(request.uri()) => {
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

// ---- Why a component does not link: what the instance layer links, all floors together ----

/// WASI packages the runtime links besides [`host::HOST_INTERFACES`] (wasmtime-wasi's
/// `wasi:*@0.2.x` and wasi:http), as `package/interface` without version: any 0.2.x
/// version of them links.
const WASI_INTERFACES: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
];

/// Whether the runtime links import `name` (`ns:pkg/iface[@version]`).
fn provides(name: &str) -> bool {
    if host::HOST_INTERFACES.contains(&name)
        || host::otel::INTERFACES.contains(&name)
        || crate::p3::provides(name)
        || crate::wasi_rc::provides(name)
    {
        return true;
    }
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    WASI_INTERFACES.contains(&path) && version.starts_with("0.2.") && !version.contains('-')
}

/// The interface we provide that is nearest to `name`: the same interface in another
/// version if there is one (the newest we have), else the one with the fewest character
/// edits.
pub fn nearest_interface(name: &str) -> &'static str {
    let path = name.split_once('@').map_or(name, |(p, _)| p);
    let candidates = host::HOST_INTERFACES.iter().copied().chain(
        WASI_INTERFACES
            .iter()
            .copied()
            .filter(|w| !w.starts_with("wasi:cli/terminal")),
    );
    let mut best: Option<(usize, &'static str)> = None;
    for candidate in candidates {
        let cand_path = candidate.split_once('@').map_or(candidate, |(p, _)| p);
        let same_name = cand_path.rsplit('/').next() == path.rsplit('/').next();
        let distance = if cand_path == path {
            0
        } else if same_name {
            1
        } else {
            2 + edit_distance(path, cand_path)
        };
        // HOST_INTERFACES lists versions oldest first: a later same-path entry wins.
        if best.is_none_or(|(d, _)| distance < d || (distance == 0 && d == 0)) {
            best = Some((distance, candidate));
        }
    }
    best.map_or("", |(_, c)| c)
}

/// Levenshtein distance between two short names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Explains why `component` (id `id`) does not link: each instance import this runtime
/// does not provide, with the nearest one it does. `None` when every import is provided
/// (the link error is then about types, and wasmtime's message says it).
pub fn link_error(
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
    id: &str,
) -> Option<String> {
    let missing: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .filter(|name| name.contains(':') && !provides(name))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let list: Vec<String> = missing
        .iter()
        .map(|m| format!("`{m}` (nearest provided: `{}`)", nearest_interface(m)))
        .collect();
    Some(format!(
        "component `{id}` imports {} that no Spin version provides and this runtime does \
         not link: {}. Rebuild it against a released Spin SDK (this runtime provides Spin \
         3.x's interfaces: fermyon:spin@2.0.0, spin:postgres@3.0.0/@4.0.0, \
         spin:sqlite@3.0.0, wasi:keyvalue, wasi:config, WASI 0.2 and Spin 2.0's WASI \
         0.2.0-rc-2023-10-18; and Spin 4's: WASI \
         0.3.0 (and its 0.3.0-rc-2026-03-15 snapshot), {})",
        if missing.len() == 1 {
            "an interface"
        } else {
            "interfaces"
        },
        list.join(", "),
        crate::p3::SPIN4_INTERFACES.join(", ")
    ))
}

/// `error` of Spin 4's `spin:variables/variables@3.0.0`.
#[derive(ComponentType, Lower, Debug)]
#[component(variant)]
enum VariablesError {
    #[component(name = "invalid-name")]
    InvalidName(String),
    #[component(name = "undefined")]
    Undefined(String),
    #[component(name = "provider")]
    #[allow(dead_code)]
    Provider(String),
    #[component(name = "other")]
    #[allow(dead_code)]
    Other(String),
}

/// Adds WASIp3 (wasmtime-wasi's cli, clocks, filesystem, random, sockets and
/// wasmtime-wasi-http's types and client, at `@0.3.0`) and Spin 4's `async func`
/// interfaces ([`crate::p3::SPIN4_INTERFACES`]) to `linker`. The WASIp2 interfaces stay: a Rust component built for
/// `wasm32-wasip2` imports both (its standard library uses WASIp2).
pub fn add_p3_to_linker(linker: &mut Linker<InstanceState>) -> anyhow::Result<()> {
    wasmtime_wasi::p3::add_to_linker(linker)?;
    wasmtime_wasi_http::p3::add_to_linker(linker)?;
    // spin:variables/variables@3.0.0 (Spin 4): `get: async func(name: string) ->
    // result<string, error>`, answered from the values resolved at start, as the
    // fermyon:spin/variables@2.0.0 form is.
    let mut vars = linker.instance("spin:variables/variables@3.0.0")?;
    vars.func_wrap_concurrent("get", |accessor, (name,): (String,)| {
        use tracing::Instrument as _;
        let span =
            accessor.with(|mut a| crate::host::import_span("variables", "get", &a.data_mut().host));
        Box::pin(
            async move {
                let result = accessor.with(|mut access| {
                    match access.data_mut().host.variable_for_guest(&name) {
                        Ok(v) => Ok(v),
                        Err(crate::host::variables::VarError::Invalid(e)) => {
                            Err(VariablesError::InvalidName(e))
                        }
                        Err(crate::host::variables::VarError::Undefined(e)) => {
                            Err(VariablesError::Undefined(e))
                        }
                    }
                });
                Ok((result,))
            }
            .instrument(span),
        )
    })?;
    Ok(())
}
