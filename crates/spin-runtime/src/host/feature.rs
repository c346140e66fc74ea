//! The host-feature seam: what one host interface (variables, key-value, LLM, client TLS,
//! ...) owns, as Spin's `spin-factors` split it. [`super::host_features!`] in `host/mod.rs`
//! lists the features; the runtime config, the per-app state and the per-instance state are
//! composed from that one list.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use wasmtime::component::Linker;

use super::runtime_config::Source;
use super::variables::Resolved;
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
    /// the store's data. Features without guest interfaces link nothing.
    fn add_to_linker<T: Send + 'static>(
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

impl<D: Clone> Labelled<D> {
    /// The definitions of `config` for the app of `cx`.
    pub fn new(config: &BTreeMap<String, D>, cx: &AppContext<'_>) -> Self {
        Labelled {
            definitions: config.clone(),
            state_dir: cx.state_dir.clone(),
            app_dir: cx.host.app_dir.clone(),
        }
    }
}
