//! Spin host features: every Spin interface of Spin 3.x's platform world (variables,
//! key-value, SQLite, outbound Redis, PostgreSQL, MySQL and MQTT, LLM, config) and Spin 4's
//! `async func` forms of them, the `allowed_outbound_hosts` allow-list for them and for
//! outbound HTTP.
//!
//! Each interface is a host feature ([`HostFeature`], listed once in [`host_features!`]):
//! it owns its runtime-config sections, its per-app and per-instance state and its linking.
//! The runtime core uses exactly these items:
//! - [`AppHost::new`] once per app: reads the runtime config once and builds every feature's
//!   per-app state (a malformed or unknown section, or a required variable without a value,
//!   fails the start).
//! - [`HostState::new`] once per component (a bad `allowed_outbound_hosts` entry, an
//!   undefined key-value store or SQLite database fails the start); every request then gets
//!   a `clone()` (cheap: shared state behind `Arc`s, and fresh resource tables).
//! - [`add_to_linker`] once per engine, for any store data that is a [`HostView`]: every
//!   interface of `wit/host.wit` ([`HOST_INTERFACES`]), in the `fermyon:spin@2.0.0`,
//!   `spin:*@3.0.0`/`@4.0.0` and unversioned forms Spin 3.6 links, and Spin 4's `async
//!   func` interfaces (linked with the dynamic linker on the same backends).
//! - [`check_outbound`] from the `send_request` hook before any outbound HTTP request.
//!
//! The WIT comes from the published spin-sdk crate (see `build.rs`); the world we
//! implement is `wit/host.wit`.

// Spin 4's interfaces are linked with these (the dynamic linker; the `bindgen!` forms above
// are for Spin 3's). Each host call runs in the span `bindgen!`'s `tracing` flag makes
// ("wit-bindgen import", with `module` = the interface's name and `function` = the WIT
// function's name), so it is exported like the Spin 3 forms' (see otel-export's
// `HOST_CALL_SPAN`).

/// The span of one host call of a Spin 4 interface: the one `bindgen!`'s `tracing` flag makes
/// for the Spin 3 forms (see above). Its parent is the current span, or, in a reused WASIp3
/// instance's task (no current span), `host`'s request ([`adopt_request_trace`]).
pub(crate) fn import_span(
    module: &'static str,
    function: &'static str,
    host: &HostState,
) -> tracing::Span {
    // The bindings' target: the exporter passes host-call spans by it at TRACE.
    let span = tracing::span!(
        target: otel_export::HOST_CALL_TARGETS,
        tracing::Level::TRACE,
        "wit-bindgen import",
        module = module,
        function = function
    );
    adopt_request_trace(&span, host);
    span
}

/// Makes `span`, just created by a host call, a child of the request the instance last took
/// when there is no current span (in a reused WASIp3 instance's task) to be its parent.
pub(crate) fn adopt_request_trace(span: &tracing::Span, host: &HostState) {
    if let Some(parent) = &host.request_trace {
        if !span.is_disabled() && tracing::Span::current().is_none() {
            otel_export::set_parent_context(span, parent);
        }
    }
}

/// Defines the WIT `async func` `$name` of interface `$module` in linker instance `$inst`
/// as a concurrent host function: `$f(accessor, args...)` is awaited and its
/// `wasmtime::Result<R>` becomes the function's one result `R` (an `Err` traps).
macro_rules! async_func {
    ($inst:expr, $module:expr, $name:literal, $f:path, ($($arg:ident : $ty:ty),* $(,)?)) => {{
        let module: &'static str = $module;
        $inst.func_wrap_concurrent(
            $name,
            move |acc: &wasmtime::component::Accessor<T>,
                  ($($arg,)*): ($($ty,)*)| {
                use tracing::Instrument as _;
                let span = acc.with(|mut a| crate::host::import_span(module, $name, crate::host::HostView::host(a.data_mut())));
                Box::pin(async move { Ok(($f(acc, $($arg),*).await?,)) }.instrument(span))
            },
        )?
    }};
}

/// Defines the plain (not `async`) WIT `func` `$name` of `$module` in `$inst` as
/// `$f(&mut HostState, args...)`, returning `wasmtime::Result<R>` (an `Err` traps).
macro_rules! sync_func {
    ($inst:expr, $module:expr, $name:literal, $f:path, ($($arg:ident : $ty:ty),* $(,)?)) => {{
        let module: &'static str = $module;
        $inst.func_wrap(
            $name,
            move |mut store: wasmtime::StoreContextMut<'_, T>,
                  ($($arg,)*): ($($ty,)*)| {
                let span = crate::host::import_span(module, $name, crate::host::HostView::host(store.data_mut()));
                let _entered = span.enter();
                Ok(($f(crate::host::HostView::host(store.data_mut()), $($arg),*)?,))
            },
        )?
    }};
}

/// Defines the plain WIT `func` `$name` of `$module` in `$inst` as the async Rust function
/// `$f(&mut HostState, args...)`: the guest blocks (on its fiber) until it returns.
macro_rules! blocking_func {
    ($inst:expr, $module:expr, $name:literal, $f:path, ($($arg:ident : $ty:ty),* $(,)?)) => {{
        let module: &'static str = $module;
        $inst.func_wrap_async(
            $name,
            move |mut store: wasmtime::StoreContextMut<'_, T>,
                  ($($arg,)*): ($($ty,)*)| {
                use tracing::Instrument as _;
                let span = crate::host::import_span(module, $name, crate::host::HostView::host(store.data_mut()));
                Box::new(
                    async move { Ok(($f(crate::host::HostView::host(store.data_mut()), $($arg),*).await?,)) }
                        .instrument(span),
                )
            },
        )?
    }};
}

/// Defines resource `$name` of host type `$ty` in `$inst`, dropped by `$drop(&mut
/// HostState, Resource<$ty>)`.
macro_rules! host_resource {
    ($inst:expr, $name:literal, $ty:ty, $drop:path) => {
        $inst.resource(
            $name,
            wasmtime::component::ResourceType::host::<$ty>(),
            |mut store: wasmtime::StoreContextMut<'_, T>, rep: u32| {
                $drop(
                    crate::host::HostView::host(store.data_mut()),
                    wasmtime::component::Resource::<$ty>::new_own(rep),
                )
            },
        )?
    };
}

pub mod aws_json;
pub mod connections;
pub mod feature;
pub mod kv;
pub mod llm;
pub mod mqtt;
pub mod mysql;
pub mod network_policy;
pub mod otel;
pub mod outbound;
pub mod pg;
pub mod redis;
pub mod runtime_config;
pub mod secret_stores;
pub mod sqlite;
pub mod tls;
pub mod variables;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use wasmtime::component::Linker;

use crate::app::{App, Component};
pub use feature::{AppContext, ComponentContext, HostContext, HostFeature, Labelled};
use outbound::AllowedHosts;

/// Bindings generated from the spin-sdk WIT for the world in `wit/host.wit`.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    /// `bindgen!` with our options; build.rs calls it with the absolute path of the WIT it
    /// laid out under `OUT_DIR` (the macro takes only a literal path).
    macro_rules! host_bindgen {
        ($path:tt) => {
            wasmtime::component::bindgen!({
                path: $path,
                world: "spin-runtime:host/host",
                imports: {
                    "fermyon:spin/redis@2.0.0": async | trappable | tracing,
                    "fermyon:spin/key-value@2.0.0": async | trappable | tracing,
                    "wasi:keyvalue/store@0.2.0-draft2": async | trappable | tracing,
                    "wasi:keyvalue/batch@0.2.0-draft2": async | trappable | tracing,
                    "wasi:keyvalue/atomics@0.2.0-draft2": async | trappable | tracing,
                    "fermyon:spin/sqlite@2.0.0": async | trappable | tracing,
                    "spin:sqlite/sqlite@3.0.0": async | trappable | tracing,
                    "fermyon:spin/postgres@2.0.0": async | trappable | tracing,
                    "fermyon:spin/mysql@2.0.0": async | trappable | tracing,
                    "fermyon:spin/mqtt@2.0.0": async | trappable | tracing,
                    "fermyon:spin/llm@2.0.0": async | trappable | tracing,
                    "spin:postgres/postgres@3.0.0": async | trappable | tracing,
                    "spin:postgres/postgres@4.0.0": async | trappable | tracing,
                    default: trappable | tracing,
                },
                with: {
                    "fermyon:spin/key-value.store": super::kv::StoreHandle,
                    "wasi:keyvalue/store.bucket": super::kv::StoreHandle,
                    "wasi:keyvalue/atomics.cas": super::kv::Cas,
                    "fermyon:spin/sqlite@2.0.0.connection": super::sqlite::SqliteConnection,
                    "spin:sqlite/sqlite@3.0.0.connection": super::sqlite::SqliteConnection,
                    "fermyon:spin/redis@2.0.0.connection": super::redis::RedisConnection,
                    "fermyon:spin/postgres@2.0.0.connection": super::pg::PgConnection,
                    "spin:postgres/postgres@3.0.0.connection": super::pg::PgConnection,
                    "spin:postgres/postgres@4.0.0.connection": super::pg::PgConnection,
                    "fermyon:spin/mysql@2.0.0.connection": super::mysql::MysqlConnection,
                    "fermyon:spin/mqtt@2.0.0.connection": super::mqtt::MqttConnection,
                },
            });
        };
    }
    include!(concat!(env!("OUT_DIR"), "/host_bindings.rs"));
}

include!(concat!(env!("OUT_DIR"), "/host_interfaces.rs"));

/// File name of the runtime config in the app directory (`/runtime-config.toml`).
pub const RUNTIME_CONFIG_FILE: &str = "runtime-config.toml";

/// Environment variable (in [`HostContext::env`]) that moves the state directory, where the
/// default key-value store lives. Default: `<app dir>/.spin`.
pub const STATE_DIR_ENV: &str = spin_shim_settings::container::STATE_DIR;

/// Environment variable (in [`HostContext::env`]) naming the runtime config file.
/// Default: `<app dir>/runtime-config.toml` when it exists.
pub const RUNTIME_CONFIG_ENV: &str = spin_shim_settings::container::RUNTIME_CONFIG_FILE;

/// Declares the host features from one list of `field: Feature` ([`HostFeature`]) pairs:
/// [`RuntimeConfig`] (one typed field per feature), [`FeatureApps`] (per app) and
/// [`Features`] (per instance), and their parsing, building and linking in list order.
macro_rules! host_features {
    ($($field:ident: $feature:ty),* $(,)?) => {
        /// The runtime config, parsed: each host feature's sections, typed.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct RuntimeConfig {
            $(
                #[doc = concat!("The sections of [`", stringify!($feature), "`].")]
                pub $field: <$feature as HostFeature>::Config,
            )*
        }

        impl RuntimeConfig {
            /// Every top-level key a host feature reads.
            pub fn sections() -> Vec<&'static str> {
                let mut all = Vec::new();
                $(all.extend_from_slice(<$feature as HostFeature>::SECTIONS);)*
                all
            }

            fn from_source(source: &runtime_config::Source<'_>) -> anyhow::Result<Self> {
                Ok(RuntimeConfig {
                    $($field: <$feature as HostFeature>::parse(source)?,)*
                })
            }
        }

        /// Every host feature's per-app state.
        pub struct FeatureApps {
            $(
                #[doc = concat!("[`", stringify!($feature), "`]'s.")]
                pub $field: <$feature as HostFeature>::App,
            )*
        }

        impl FeatureApps {
            fn build(config: &RuntimeConfig, cx: &AppContext<'_>) -> anyhow::Result<Self> {
                Ok(FeatureApps {
                    $($field: <$feature as HostFeature>::build(&config.$field, cx)?,)*
                })
            }
        }

        /// Every host feature's state in one instance.
        #[derive(Clone)]
        pub struct Features {
            $(
                #[doc = concat!("[`", stringify!($feature), "`]'s.")]
                pub $field: <$feature as HostFeature>::Instance,
            )*
        }

        impl Features {
            fn new(apps: &FeatureApps, cx: &ComponentContext<'_>) -> anyhow::Result<Self> {
                Ok(Features {
                    $($field: <$feature as HostFeature>::instance(&apps.$field, cx)?,)*
                })
            }

            fn add_to_linker<T: HostView>(linker: &mut Linker<T>) -> anyhow::Result<()> {
                $(<$feature as HostFeature>::add_to_linker(
                    linker,
                    |t: &mut T| &mut t.host().features.$field,
                )?;)*
                Ok(())
            }
        }
    };
}

host_features! {
    variables: variables::Variables,
    key_value: kv::KeyValue,
    sqlite: sqlite::Sqlite,
    llm: llm::Llm,
    client_tls: tls::ClientTlsFeature,
    network: network_policy::Network,
    otel: otel::Otel,
    redis: redis::OutboundRedis,
    pg: pg::OutboundPg,
    mysql: mysql::OutboundMysql,
    mqtt: mqtt::OutboundMqtt,
}

impl RuntimeConfig {
    /// Reads a runtime config file (a regular file of at most 4 MiB); relative paths
    /// resolve against its directory.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = runtime_config::read_file(path)?;
        let base = path.parent().unwrap_or(Path::new("/"));
        Self::parse(&text, base, &path.display().to_string())
    }

    /// Parses runtime config text; `origin` names the source in errors. A top-level key no
    /// feature reads is an error, as in Spin ([`runtime_config::Source::finish`]).
    pub fn parse(text: &str, base_dir: &Path, origin: &str) -> anyhow::Result<Self> {
        let doc = runtime_config::parse_document(text, origin)?;
        let source = runtime_config::Source::new(&doc, base_dir, origin);
        let config = Self::from_source(&source)?;
        source.finish(&Self::sections())?;
        Ok(config)
    }
}

/// Every host feature's per-app state, built once per app from the runtime config (read
/// once, here).
pub struct AppHost {
    features: FeatureApps,
}

impl AppHost {
    /// Reads the app's runtime config ([`RUNTIME_CONFIG_ENV`], else
    /// `<app dir>/runtime-config.toml` when it exists) and builds every feature's per-app
    /// state: application variables are resolved here (a required one without a value
    /// fails naming it).
    pub fn new(app: &App, ctx: &HostContext) -> anyhow::Result<Self> {
        let config = load_runtime_config(ctx)?;
        Self::with_config(&config, app, ctx)
    }

    /// [`Self::new`] with an already parsed runtime config.
    pub fn with_config(
        config: &RuntimeConfig,
        app: &App,
        ctx: &HostContext,
    ) -> anyhow::Result<Self> {
        let cx = AppContext {
            app,
            host: ctx,
            state_dir: state_dir(ctx),
        };
        Ok(AppHost {
            features: FeatureApps::build(config, &cx)?,
        })
    }

    /// Every application variable, resolved (runtime-config providers > container env
    /// `NAME` > `SPIN_VARIABLE_NAME` > default), for settings outside components such as
    /// trigger addresses.
    pub fn variables(&self) -> &BTreeMap<String, variables::Resolved> {
        &self.features.variables.resolved
    }
}

/// Store data that holds a [`HostState`]: how linking reaches the host features from the
/// instance's data type (implemented by the instance layer).
pub trait HostView: Send + 'static {
    /// The instance's host-feature state.
    fn host(&mut self) -> &mut HostState;
}

/// What a component's instances share beyond the features: its id and allow-list, and
/// what outbound features check a connection against besides them (the app's network
/// policy, the component's `[[client_tls]]` entries).
pub struct ComponentHost {
    id: String,
    allowed_hosts: AllowedHosts,
    policy: Arc<network_policy::NetworkPolicy>,
    client_tls: tls::ComponentTls,
}

impl ComponentHost {
    /// The component's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The app's outbound limits.
    pub fn network_policy(&self) -> &Arc<network_policy::NetworkPolicy> {
        &self.policy
    }

    /// The component's `[[client_tls]]` entries.
    pub fn client_tls(&self) -> &tls::ComponentTls {
        &self.client_tls
    }

    /// Whether this component may connect to `address`, checked as Spin checks it: the
    /// address is parsed as a URL (`{default_scheme}://` is put in front when it has no
    /// scheme or host) and its scheme, host and port must match an `allowed_outbound_hosts`
    /// entry. A refusal is logged with the entry that would allow it.
    pub fn outbound_allowed(&self, address: &str, default_scheme: &str) -> bool {
        let Some((scheme, host, port)) = outbound::parse_outbound_url(address, default_scheme)
        else {
            // Connection strings carry passwords: scheme and authority only.
            tracing::warn!(
                "component `{}` tried to connect to `{}`, which is not a URL",
                self.id,
                outbound::origin_only(address)
            );
            return false;
        };
        let allowed = self
            .allowed_hosts
            .entries()
            .iter()
            .any(|e| e.allows(&scheme, Some(&host), port));
        if !allowed {
            let authority = match port {
                Some(p) => format!("{host}:{p}"),
                None => host.clone(),
            };
            tracing::error!(
                "component `{id}` tried to make an outbound network connection to disallowed \
                 destination '{scheme}://{authority}'. To allow it, add \
                 allowed_outbound_hosts = [\"{scheme}://{authority}\"] to [component.{id}] in \
                 spin.toml",
                id = self.id
            );
        }
        allowed
    }
}

impl fmt::Debug for ComponentHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComponentHost")
            .field("id", &self.id)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

/// Host-feature state of one component instance (cloned per request).
pub struct HostState {
    component: Arc<ComponentHost>,
    /// Every host feature's state in this instance ([`host_features!`]).
    pub features: Features,
    /// The app itself, for service chaining and self requests ([`outbound::ChainSlot`]).
    pub(crate) chain: Arc<outbound::ChainSlot>,
    /// The trace context of the request a reused WASIp3 instance most recently took
    /// ([`crate::server::reuse`]) when traces are exported: such an instance runs in a task of its
    /// own, outside the request's span, so its host calls' spans take this parent.
    pub(crate) request_trace: Option<otel_export::ParentContext>,
}

/// At most this many connections of one outbound interface may be open at once in one
/// instance (as in Spin, whose outbound factors each keep a table of this size).
pub const MAX_OPEN_CONNECTIONS: usize = 1024;

impl Clone for HostState {
    /// Shares the component's state; the clone starts with no open handles.
    fn clone(&self) -> Self {
        HostState {
            component: self.component.clone(),
            features: self.features.clone(),
            chain: self.chain.clone(),
            request_trace: None,
        }
    }
}

impl fmt::Debug for HostState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostState")
            .field("component", &self.component)
            .finish_non_exhaustive()
    }
}

impl HostState {
    /// Builds the state for `component` from the app's per-app state `app` (built once per
    /// app by [`AppHost::new`]).
    ///
    /// Expands the component's `allowed_outbound_hosts` and builds each feature's state
    /// (e.g. the component's variable templates expanded, the key-value stores and SQLite
    /// databases it lists opened: an undefined one fails naming it).
    pub fn new(component: &Component, app: &AppHost) -> anyhow::Result<Self> {
        let resolved = app.variables();
        let allowed_hosts =
            AllowedHosts::parse(&component.id, &component.allowed_outbound_hosts, |entry| {
                variables::render_template(entry, |name| {
                    resolved.get(name).map(|r| r.value.clone())
                })
            })?;
        let outbound = Arc::new(ComponentHost {
            id: component.id.clone(),
            allowed_hosts,
            policy: app.features.network.clone(),
            client_tls: tls::ComponentTls::for_component(&app.features.client_tls, &component.id),
        });
        let cx = ComponentContext {
            component,
            variables: resolved,
            outbound: &outbound,
        };
        let features = Features::new(&app.features, &cx)?;
        Ok(HostState {
            component: outbound,
            features,
            chain: Default::default(),
            request_trace: None,
        })
    }

    /// The component id this state belongs to.
    pub fn component_id(&self) -> &str {
        &self.component.id
    }

    /// The app's outbound limits.
    pub fn network_policy(&self) -> &Arc<network_policy::NetworkPolicy> {
        &self.features.network
    }
}

/// The directory of the default key-value store.
fn state_dir(ctx: &HostContext) -> PathBuf {
    match ctx.env.get(STATE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => ctx.app_dir.join(".spin"),
    }
}

/// Reads the runtime config named by [`RUNTIME_CONFIG_ENV`] (must exist) or
/// `<app dir>/runtime-config.toml` (if it exists).
fn load_runtime_config(ctx: &HostContext) -> anyhow::Result<RuntimeConfig> {
    if let Some(path) = ctx.env.get(RUNTIME_CONFIG_ENV).filter(|p| !p.is_empty()) {
        return RuntimeConfig::load(Path::new(path))
            .with_context(|| format!("runtime config named by {RUNTIME_CONFIG_ENV}"));
    }
    let default = ctx.app_dir.join(RUNTIME_CONFIG_FILE);
    if default.is_file() {
        RuntimeConfig::load(&default)
    } else {
        Ok(RuntimeConfig::default())
    }
}

/// A concurrent host function's access to the store.
pub(crate) type Accessor<T> = wasmtime::component::Accessor<T>;

/// Runs `f` on the instance's [`HostState`] (between awaits of a concurrent host function:
/// the store is not held across an await).
pub(crate) fn with_host<T: HostView, R>(
    acc: &Accessor<T>,
    f: impl FnOnce(&mut HostState) -> R,
) -> R {
    acc.with(|mut access| f(access.data_mut().host()))
}

/// A stream and the future that resolves once its items are all delivered (a `tuple<stream<T>,
/// future<result<_, E>>>` of a Spin 4 `async func`).
pub(crate) type StreamAndFuture<T, E> = (
    wasmtime::component::StreamReader<T>,
    wasmtime::component::FutureReader<Result<(), E>>,
);

/// A stream of `items` and a future resolving to `result`, created in the instance's store.
/// The items are all read before (each Spin 4 `async func` returning a stream reads its
/// result as the plain form does, under the same caps, e.g. [`sqlite::MAX_RESULT_BYTES`]).
pub(crate) fn stream_and_future<D: 'static, T, E>(
    acc: &Accessor<D>,
    items: Vec<T>,
    result: Result<(), E>,
) -> wasmtime::Result<StreamAndFuture<T, E>>
where
    T: wasmtime::component::ComponentType
        + wasmtime::component::Lift
        + wasmtime::component::Lower
        + Unpin
        + Send
        + Sync
        + 'static,
    E: wasmtime::component::ComponentType
        + wasmtime::component::Lift
        + wasmtime::component::Lower
        + Send
        + Sync
        + 'static,
{
    acc.with(|mut access| {
        let stream = wasmtime::component::StreamReader::new(&mut access, items)?;
        let future = wasmtime::component::FutureReader::new(&mut access, async move {
            Ok::<_, wasmtime::Error>(result)
        })?;
        Ok((stream, future))
    })
}

/// Adds every interface of [`HOST_INTERFACES`] to the linker: each feature of
/// [`host_features!`] links its own, on its own instance state.
pub fn add_to_linker<T: HostView>(linker: &mut Linker<T>) -> anyhow::Result<()> {
    Features::add_to_linker(linker)
}

/// Decides whether an outbound HTTP request to `uri` is allowed for this instance.
///
/// A denied request fails with `HttpRequestDenied` (as in Spin), and the log says which
/// component tried what and which `allowed_outbound_hosts` entry would allow it.
pub fn check_outbound(state: &HostState, uri: &http::Uri) -> Result<(), wasmtime_wasi_http::Error> {
    let component = &state.component;
    // A request to the app itself may use either scheme (Spin's `check_relative_url`).
    let allowed = if outbound::is_self_request(uri) {
        ["http", "https"].iter().any(|s| {
            component
                .allowed_hosts
                .entries()
                .iter()
                .any(|e| e.allows(s, None, None))
        })
    } else {
        component.allowed_hosts.allows_uri(uri)
    };
    if allowed {
        return Ok(());
    }
    tracing::error!("{}", denied_message(&component.id, uri));
    Err(wasmtime_wasi_http::Error::HttpRequestDenied)
}

/// The message logged for a denied outbound request: names the component, the
/// destination and the `allowed_outbound_hosts` entry that would allow it.
pub fn denied_message(component_id: &str, uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("http");
    // Scheme, host and port only: paths and queries may carry tokens.
    let suggestion = match (uri.host().filter(|h| !h.is_empty()), uri.port_u16()) {
        (None, _) => "http://self".to_string(),
        (Some(host), Some(port)) => format!("{scheme}://{host}:{port}"),
        (Some(host), None) => format!("{scheme}://{host}"),
    };
    format!(
        "component `{component_id}` is not allowed to send an HTTP request to {suggestion}: the \
         destination is not in its allowed_outbound_hosts; to allow it, add \
         allowed_outbound_hosts = [\"{suggestion}\"] to [component.{component_id}] in spin.toml"
    )
}
