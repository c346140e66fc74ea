//! The host-feature seam: what one host interface (variables, key-value, LLM, client TLS,
//! ...) owns, as Spin's `spin-factors` split it. [`super::host_features!`] in `host/mod.rs`
//! lists the features; the runtime config, the per-app state and the per-instance state are
//! composed from that one list.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use wasmtime::component::{Linker, Resource, ResourceTable};

use super::runtime_config::Source;
use super::HostView;
use crate::app::{App, Component};

/// One host interface: its runtime-config sections, its per-app state and its
/// per-instance state, and its linking.
pub trait HostFeature: 'static {
    /// The runtime config's top-level keys this feature reads (none for a feature without
    /// configuration).
    const SECTIONS: &'static [&'static str];
    /// The feature's runtime-config sections, parsed (`Default`: no section in the file).
    type Config: Default + Clone + std::fmt::Debug + PartialEq + Eq + Send + Sync;
    /// What the feature keeps per app, built once from its config when the app loads.
    type App: Send + Sync + 'static;
    /// What one component's instance holds; cloned for each new instance (share what is
    /// shared behind an `Arc`).
    type Instance: Clone + Send + Sync + 'static;

    /// Reads this feature's [`Self::SECTIONS`] from `source` (with [`Source::take`]). A
    /// malformed section fails naming the file, the key and the fix.
    fn parse(source: &Source<'_>) -> anyhow::Result<Self::Config>;

    /// Builds the per-app state from the parsed config.
    fn build(config: &Self::Config, cx: &AppContext<'_>) -> anyhow::Result<Self::App>;

    /// Builds a component's instance state (once per component; instances clone it).
    fn instance(app: &Self::App, cx: &ComponentContext<'_>) -> anyhow::Result<Self::Instance>;

    /// Adds the feature's guest interfaces to `linker`; `get` reaches the instance state in
    /// the store's data (functions linked by hand reach it through [`HostView`], which also
    /// gives the request's trace context for their spans). Features without guest
    /// interfaces link nothing.
    fn add_to_linker<T: HostView>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self::Instance,
    ) -> anyhow::Result<()> {
        let _ = (linker, get);
        Ok(())
    }
}

/// Where the app runs: what host features need beyond the app model.
#[derive(Debug, Clone, Default)]
pub struct HostContext {
    /// The app's root directory (`/` inside a container): `/.spin/` and
    /// `/runtime-config.toml` are found relative to it.
    pub app_dir: PathBuf,
    /// The container's (or the process's) environment, for variable values.
    pub env: HashMap<String, String>,
}

/// What features build their per-app state from.
pub struct AppContext<'a> {
    /// The app model.
    pub app: &'a App,
    /// Where the app runs (app directory, container environment).
    pub host: &'a HostContext,
    /// The state directory (default stores and databases live there).
    pub state_dir: PathBuf,
}

/// What features build a component's instance state from.
pub struct ComponentContext<'a> {
    /// The component.
    pub component: &'a Component,
    /// Every application variable, resolved once per app.
    pub variables: &'a BTreeMap<String, Resolved>,
    /// What the component's outbound connections are checked against: its allow-list, the
    /// app's network policy and its `[[client_tls]]` entries (shared by its instances).
    pub outbound: &'a std::sync::Arc<super::ComponentHost>,
}

/// The per-app state of a feature whose runtime config defines labelled resources (stores,
/// databases): the definitions, and where the `default` one lives.
pub struct Labelled<D> {
    /// Definitions by label.
    pub definitions: BTreeMap<String, D>,
    /// The state directory (the `default` resource's home).
    pub state_dir: PathBuf,
    /// The app directory (identifies the app's in-memory resources).
    pub app_dir: PathBuf,
}

/// Parses one labelled section's value; relative paths resolve against the base directory
/// (the runtime config file's), errors name the origin (the file).
pub type ParseLabelled<D> = fn(&toml::Value, &Path, &str) -> anyhow::Result<BTreeMap<String, D>>;

impl<D: Clone> Labelled<D> {
    /// [`HostFeature::parse`] of a feature whose one section (`section`) is a table of
    /// labelled definitions, read by `parse`: none when the file has no such section.
    pub fn parse(
        source: &Source<'_>,
        section: &str,
        parse: ParseLabelled<D>,
    ) -> anyhow::Result<BTreeMap<String, D>> {
        match source.take(section) {
            Some(v) => parse(v, source.base_dir(), source.origin()),
            None => Ok(BTreeMap::new()),
        }
    }

    /// [`HostFeature::build`] of such a feature: the definitions of `config` for the app of
    /// `cx`.
    pub fn build(config: &BTreeMap<String, D>, cx: &AppContext<'_>) -> anyhow::Result<Self> {
        Ok(Labelled {
            definitions: config.clone(),
            state_dir: cx.state_dir.clone(),
            app_dir: cx.host.app_dir.clone(),
        })
    }
}

/// A feature instance's own resource table: the guest's handles of the feature's resources
/// (stores, connections, ...), and how many of them count toward the feature's cap. A clone
/// is empty (each instance starts with no handles). The table sits behind a `Mutex` only so
/// that the prepared (never used) instance state is `Sync`: access goes through `get_mut`,
/// which never locks.
#[derive(Default)]
pub struct FeatureTable {
    table: Mutex<ResourceTable>,
    counted: usize,
}

impl Clone for FeatureTable {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// The cap of a [`FeatureTable`] is reached (or its table is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

impl FeatureTable {
    /// The table.
    pub fn get(&mut self) -> &mut ResourceTable {
        self.table
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many counted handles are open.
    pub fn counted(&self) -> usize {
        self.counted
    }

    /// Adds a handle that counts toward `cap`, unless `cap` are open.
    pub fn push_counted<R: Send + 'static>(
        &mut self,
        value: R,
        cap: usize,
    ) -> Result<Resource<R>, TableFull> {
        if self.counted >= cap {
            return Err(TableFull);
        }
        let handle = self.get().push(value).map_err(|_| TableFull)?;
        self.counted += 1;
        Ok(handle)
    }

    /// Removes a counted handle the guest dropped.
    pub fn delete_counted<R: 'static>(&mut self, handle: Resource<R>) -> wasmtime::Result<R> {
        let value = self.get().delete(handle)?;
        self.counted = self.counted.saturating_sub(1);
        Ok(value)
    }
}

/// Where a resolved value came from (for logs; values of secrets are never logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueSource {
    /// The container env var named like the variable, upper-cased.
    ContainerEnv,
    /// `SPIN_VARIABLE_<NAME>`.
    SpinVariableEnv,
    /// The manifest default.
    Default,
    /// A `[[variables_provider]]` of the runtime config (its index).
    Provider(usize),
}

/// A resolved application variable value.
#[derive(Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The value.
    pub value: String,
    /// Where it came from.
    pub source: ValueSource,
    /// Whether the variable is secret (its value is redacted in `Debug`).
    pub secret: bool,
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value: &dyn fmt::Debug = if self.secret {
            &"<secret>"
        } else {
            &self.value
        };
        f.debug_struct("Resolved")
            .field("value", value)
            .field("source", &self.source)
            .finish()
    }
}
