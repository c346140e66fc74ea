//! Spin host features: application variables, key-value stores and the outbound HTTP
//! allow-list.
//!
//! The runtime core uses exactly these items:
//! - [`HostState::new`] once per component when the app loads (a required variable without
//!   a value, a bad `allowed_outbound_hosts` entry or an undefined key-value store fails the
//!   start); every request then gets a `clone()` (cheap: shared state behind an `Arc`, and
//!   a fresh resource table).
//! - [`add_to_linker`] once per engine: `fermyon:spin/variables@2.0.0`,
//!   `fermyon:spin/key-value@2.0.0`, `fermyon:spin/config`,
//!   `wasi:config/store@0.2.0-draft-2024-09-27` and
//!   `wasi:keyvalue/{store,batch,atomics}@0.2.0-draft2`.
//! - [`check_outbound`] from the `send_request` hook before any outbound HTTP request.
//!
//! The WIT comes from the published spin-sdk crate (see `build.rs`); the world we
//! implement is `wit/host.wit`.

pub mod kv;
pub mod outbound;
pub mod variables;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use anyhow::Context as _;
use wasmtime::component::{HasSelf, ResourceTable};

use crate::app::{App, Component};
use crate::{HostContext, InstanceState};
use kv::{KvStores, RuntimeConfig, SqliteStore, StoreDefinition};
use outbound::AllowedHosts;
use variables::ComponentValue;

/// Bindings generated from the spin-sdk WIT for the world in `wit/host.wit`.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "spin-runtime:host/host",
        imports: { default: trappable },
        with: {
            "fermyon:spin/key-value.store": super::kv::StoreHandle,
            "wasi:keyvalue/store.bucket": super::kv::StoreHandle,
            "wasi:keyvalue/atomics.cas": super::kv::Cas,
        },
    });
}

/// File name of the runtime config in the app directory (`/runtime-config.toml`).
pub const RUNTIME_CONFIG_FILE: &str = "runtime-config.toml";

/// Environment variable (in [`HostContext::env`]) that moves the state directory, where the
/// default key-value store lives. Default: `<app dir>/.spin`.
pub const STATE_DIR_ENV: &str = "SPIN_STATE_DIR";

/// Environment variable (in [`HostContext::env`]) naming the runtime config file.
/// Default: `<app dir>/runtime-config.toml` when it exists.
pub const RUNTIME_CONFIG_ENV: &str = "SPIN_RUNTIME_CONFIG_FILE";

/// Everything a component's instances share: resolved variables, allow-list, stores.
pub struct ComponentHost {
    id: String,
    variables: HashMap<String, ComponentValue>,
    allowed_hosts: AllowedHosts,
    key_value_stores: BTreeSet<String>,
    kv: KvStores,
}

impl fmt::Debug for ComponentHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values are left out: some may come from secret variables.
        let mut keys: Vec<&String> = self.variables.keys().collect();
        keys.sort();
        f.debug_struct("ComponentHost")
            .field("id", &self.id)
            .field("variables", &keys)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("key_value_stores", &self.key_value_stores)
            .finish()
    }
}

/// Host-feature state of one component instance (cloned per request).
pub struct HostState {
    component: Arc<ComponentHost>,
    /// Guest handles of open stores, buckets and CAS handles. Behind a `Mutex` only so
    /// that the prepared (never used) state of a component is `Sync`; access goes through
    /// `get_mut`, which never locks.
    table: Mutex<ResourceTable>,
    open_stores: usize,
}

impl Clone for HostState {
    /// Shares the component's state; the clone starts with no open handles.
    fn clone(&self) -> Self {
        HostState {
            component: self.component.clone(),
            table: Mutex::new(ResourceTable::new()),
            open_stores: 0,
        }
    }
}

impl fmt::Debug for HostState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostState")
            .field("component", &self.component)
            .field("open_stores", &self.open_stores)
            .finish()
    }
}

impl Default for HostState {
    /// A component with no variables, no stores and no outbound access.
    fn default() -> Self {
        HostState {
            component: Arc::new(ComponentHost {
                id: String::new(),
                variables: HashMap::new(),
                allowed_hosts: AllowedHosts::default(),
                key_value_stores: BTreeSet::new(),
                kv: KvStores::default(),
            }),
            table: Mutex::new(ResourceTable::new()),
            open_stores: 0,
        }
    }
}

impl HostState {
    /// Builds the state for `component` of `app`; `ctx` gives the container env and app
    /// directory.
    ///
    /// Resolves every application variable (container env `NAME` > `SPIN_VARIABLE_NAME` >
    /// default; a required one without a value is an error naming it), expands the
    /// component's variable templates and `allowed_outbound_hosts`, and opens the key-value
    /// stores the component lists (shared with other components of the process that use
    /// the same database).
    pub fn new(component: &Component, app: &App, ctx: &HostContext) -> anyhow::Result<Self> {
        let resolved = variables::resolve_all(&app.variables, &ctx.env)?;
        let values = variables::component_values(&component.id, &component.variables, &resolved)?;
        let allowed_hosts =
            AllowedHosts::parse(&component.id, &component.allowed_outbound_hosts, |entry| {
                variables::render_template(entry, |name| {
                    resolved.get(name).map(|r| r.value.clone())
                })
            })?;

        let key_value_stores: BTreeSet<String> =
            component.key_value_stores.iter().cloned().collect();
        let kv = if key_value_stores.is_empty() {
            KvStores::default()
        } else {
            let runtime = load_runtime_config(ctx)?;
            let state_dir = state_dir(ctx);
            open_shared_stores(&key_value_stores, &state_dir, &runtime, &ctx.app_dir)
                .with_context(|| format!("component `{}`", component.id))?
        };
        Ok(HostState {
            component: Arc::new(ComponentHost {
                id: component.id.clone(),
                variables: values,
                allowed_hosts,
                key_value_stores,
                kv,
            }),
            table: Mutex::new(ResourceTable::new()),
            open_stores: 0,
        })
    }

    /// The guest handles of this instance.
    fn table(&mut self) -> &mut ResourceTable {
        self.table
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The component id this state belongs to.
    pub fn component_id(&self) -> &str {
        &self.component.id
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

/// Stores already open in this process, so that every component using a database shares
/// one connection (and in-memory stores are shared at all).
type StoreKey = (PathBuf, String);
fn open_stores_registry() -> &'static Mutex<HashMap<StoreKey, Weak<SqliteStore>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<StoreKey, Weak<SqliteStore>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn open_shared_stores(
    labels: &BTreeSet<String>,
    state_dir: &Path,
    runtime: &RuntimeConfig,
    app_dir: &Path,
) -> anyhow::Result<KvStores> {
    let mut registry = open_stores_registry()
        .lock()
        .map_err(|_| anyhow::anyhow!("key-value store registry is unusable"))?;
    registry.retain(|_, weak| weak.strong_count() > 0);
    KvStores::open_with(labels, state_dir, runtime, |label, def| {
        // In-memory stores are identified by the app they belong to.
        let key_path = match def {
            StoreDefinition::Sqlite(Some(path)) => path.clone(),
            _ => app_dir.join(":memory:"),
        };
        let key = (key_path, label.to_string());
        if let Some(store) = registry.get(&key).and_then(Weak::upgrade) {
            return Ok(store);
        }
        let store = Arc::new(kv::open_definition(label, def)?);
        registry.insert(key, Arc::downgrade(&store));
        Ok(store)
    })
}

/// Adds the host-feature interfaces to the linker.
pub fn add_to_linker(
    linker: &mut wasmtime::component::Linker<InstanceState>,
) -> anyhow::Result<()> {
    fn host(state: &mut InstanceState) -> &mut HostState {
        &mut state.host
    }
    use bindings::fermyon::spin::config;
    use bindings::fermyon::spin2_0_0::{key_value, variables as vars};
    use bindings::wasi::config::store as wasi_config;
    use bindings::wasi::keyvalue::{atomics, batch, store};
    vars::add_to_linker::<_, HasSelf<HostState>>(linker, host)?;
    key_value::add_to_linker::<_, HasSelf<HostState>>(linker, host)?;
    config::add_to_linker::<_, HasSelf<HostState>>(linker, host)?;
    wasi_config::add_to_linker::<_, HasSelf<HostState>>(linker, host)?;
    store::add_to_linker::<_, HasSelf<HostState>>(linker, host)?;
    batch::add_to_linker::<_, HasSelf<HostState>>(linker, host)?;
    atomics::add_to_linker::<_, HasSelf<HostState>>(linker, host)?;
    Ok(())
}

/// Decides whether an outbound HTTP request to `uri` is allowed for this instance.
///
/// A denied request fails with `HttpRequestDenied` (as in Spin), and the log says which
/// component tried what and which `allowed_outbound_hosts` entry would allow it.
pub fn check_outbound(state: &HostState, uri: &http::Uri) -> Result<(), wasmtime_wasi_http::Error> {
    let component = &state.component;
    if component.allowed_hosts.allows_uri(uri) {
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
    let suggestion = match (uri.host(), uri.port_u16()) {
        (Some(host), Some(port)) => format!("{scheme}://{host}:{port}"),
        (Some(host), None) => format!("{scheme}://{host}"),
        (None, _) => format!("{scheme}://self"),
    };
    format!(
        "component `{component_id}` is not allowed to send an HTTP request to {suggestion}: the \
         destination is not in its allowed_outbound_hosts; to allow it, add \
         allowed_outbound_hosts = [\"{suggestion}\"] to [component.{component_id}] in spin.toml"
    )
}
