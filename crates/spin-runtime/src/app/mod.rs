//! The in-memory Spin application model the runtime serves.
//!
//! Both sources of an app go through the app format crate ([`spin_app_format`]): a
//! `spin.toml` manifest is locked by it ([`App::load_manifest`]) and a locked-app JSON
//! (from a Spin OCI artifact or `spin up`) is parsed by it ([`App::from_locked_json`]);
//! [`App::from_locked`] turns the lock into this model, refusing what the runtime cannot run.

mod events;
pub mod http_trigger;
mod kernel_files;
mod locked;
mod retain;
pub(crate) mod trigger_config;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use events::{EventTriggers, Trigger};
pub use http_trigger::HttpTrigger;
pub use locked::{ContentResolver, FileUrlResolver};
pub use retain::{parse_retain_list, COMPONENTS_TO_RETAIN_ENV};
pub use spin_app_format::manifest::template_references;
pub use spin_app_format::trigger::StaticResponse;
use spin_app_format::untrusted::{open_regular, shown, shown_path};
pub use spin_app_format::ContentRef;
/// The route of an HTTP trigger (the app format's `HttpRoute`).
pub use spin_app_format::HttpRoute as Route;

/// Name of the manifest the runtime looks for in the app directory.
pub const MANIFEST_FILE: &str = "spin.toml";

/// A Spin application: metadata, variables, HTTP triggers and components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// `[application] name`.
    pub name: String,
    /// `[application] version`, if given.
    pub version: Option<String>,
    /// `[application] description`, if given.
    pub description: Option<String>,
    /// Application variables by name (lower-case names, as Spin requires).
    pub variables: BTreeMap<String, Variable>,
    /// HTTP triggers in manifest order (later duplicates win at routing time).
    pub http_triggers: Vec<HttpTrigger>,
    /// Redis, MQTT, cron and command triggers.
    pub event_triggers: EventTriggers,
    /// Components by id.
    pub components: BTreeMap<String, Component>,
    /// Digest of the OCI image the app came from, shown by `/.well-known/spin/info`.
    pub oci_image_digest: Option<String>,
}

/// An application variable (`[variables] name = { default = ".." | required = true }`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Variable {
    /// Default value; `None` means the variable is required.
    pub default: Option<String>,
    /// Whether the value is a secret (never logged).
    pub secret: bool,
}

impl Variable {
    /// A variable without a default must be provided at start.
    pub fn is_required(&self) -> bool {
        self.default.is_none()
    }
}

/// Bytes of a component or a file: a path on this host or content held in memory.
#[derive(Clone, PartialEq, Eq)]
pub enum Content {
    /// A file (or, for file mounts, a directory) on this host.
    Path(PathBuf),
    /// Content held in memory (inline in a locked app, or fetched by a resolver).
    Bytes(Arc<[u8]>),
}

impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Path(p) => write!(f, "Path({})", p.display()),
            Content::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
        }
    }
}

impl Content {
    /// Reads the whole content. A path must name a regular file: a FIFO, device or socket
    /// is refused without being opened (opening a FIFO blocks until a writer comes).
    pub fn read(&self) -> anyhow::Result<Arc<[u8]>> {
        use std::io::Read as _;
        match self {
            Content::Path(p) => {
                let cannot = |e: &dyn std::fmt::Display| {
                    anyhow::anyhow!("cannot read {}: {e}", shown_path(p))
                };
                let mut f = open_regular(p).map_err(|e| cannot(&e))?;
                let mut out = Vec::new();
                f.read_to_end(&mut out).map_err(|e| cannot(&e))?;
                Ok(Arc::from(out))
            }
            Content::Bytes(b) => Ok(b.clone()),
        }
    }
}

/// A file or directory made visible (read-only) to a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileMount {
    /// A host directory mounted at `destination` (from `{ source, destination }`).
    Directory {
        /// Host directory.
        source: PathBuf,
        /// Absolute guest path.
        destination: String,
    },
    /// A single file placed at `destination` (from globs, or a locked app's file list).
    File {
        /// The file's bytes.
        content: Content,
        /// Absolute guest path of the file.
        destination: String,
    },
}

impl FileMount {
    /// The absolute guest path.
    pub fn destination(&self) -> &str {
        match self {
            FileMount::Directory { destination, .. } | FileMount::File { destination, .. } => {
                destination
            }
        }
    }
}

/// A component (`[component.<id>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// Component id.
    pub id: String,
    /// The Wasm component.
    pub source: Content,
    /// Files visible to the component (`exclude_files` was applied when the app was locked).
    pub files: Vec<FileMount>,
    /// Environment variables of the guest.
    pub environment: BTreeMap<String, String>,
    /// Outbound network allow-list (`allowed_outbound_hosts`, old `allowed_http_hosts`
    /// converted to the new form).
    pub allowed_outbound_hosts: Vec<String>,
    /// Key-value store labels the component may open.
    pub key_value_stores: Vec<String>,
    /// SQLite database labels the component may open.
    pub sqlite_databases: Vec<String>,
    /// LLM models the component may use (`ai_models`).
    pub ai_models: Vec<String>,
    /// Component variables: templates such as `"{{ redis_address }}"`.
    pub variables: BTreeMap<String, String>,
    /// HTTP middleware composed in front of it (Spin 4's trigger `dependencies.middleware`,
    /// outermost first).
    pub middleware: Vec<http_trigger::Middleware>,
}

impl App {
    /// Loads a `spin.toml` manifest (version 2), or the one in a directory. Relative
    /// paths resolve against the manifest's directory; file globs are expanded now.
    ///
    /// Errors name the file, the key and the reason.
    pub fn load_manifest(path: &Path) -> anyhow::Result<App> {
        if let Some(e) = kernel_files::kernel_files_error(path) {
            return Err(e);
        }
        let local = spin_app_format::manifest::load(path)?;
        let origin = path.display().to_string();
        locked::convert(local.locked, &FileUrlResolver, &origin)
    }

    /// Parses a manifest from text; `base_dir` is where relative paths resolve and
    /// `origin` names the source in error messages.
    pub fn from_manifest_str(text: &str, base_dir: &Path, origin: &str) -> anyhow::Result<App> {
        let base = base_dir
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("{origin}: app directory {}: {e}", base_dir.display()))?;
        let local = spin_app_format::manifest::parse(text, &base, origin)?;
        locked::convert(local.locked, &FileUrlResolver, origin)
    }

    /// Parses the locked-app JSON of a Spin OCI artifact (or of `spin up`). Content
    /// referenced by digest or by `file://` URL is obtained through `resolver`; inline
    /// content is decoded here.
    pub fn from_locked_json(bytes: &[u8], resolver: &dyn ContentResolver) -> anyhow::Result<App> {
        let lock = spin_app_format::LockedApp::from_json(bytes)
            .map_err(|e| anyhow::anyhow!("locked app: {e:#}"))?;
        Self::from_locked(lock, resolver)
    }

    /// Turns a parsed lock into the app model, resolving content through `resolver`.
    pub fn from_locked(
        lock: spin_app_format::LockedApp,
        resolver: &dyn ContentResolver,
    ) -> anyhow::Result<App> {
        locked::convert(lock, resolver, "locked app")
    }

    /// The component with this id.
    pub fn component(&self, id: &str) -> Option<&Component> {
        self.components.get(id)
    }

    /// Checks the cross references shared by both sources: triggers name existing
    /// components, component variable templates name existing app variables, names are
    /// well-formed.
    pub(crate) fn validate(&self, origin: &str) -> anyhow::Result<()> {
        for name in self.variables.keys() {
            spin_app_format::ids::validate_id(name, '_', true)
                .map_err(|e| anyhow::anyhow!("{origin}: key `variables.{name}`: {e}"))?;
        }
        for trigger in &self.http_triggers {
            if let Some(sr) = &trigger.static_response {
                http::StatusCode::from_u16(sr.status()).map_err(|_| {
                    anyhow::anyhow!(
                        "{origin}: http trigger `{}`: static_response status_code {} is not an \
                         HTTP status",
                        trigger.id,
                        sr.status()
                    )
                })?;
            } else if !self.components.contains_key(&trigger.component) {
                anyhow::bail!(
                    "{origin}: http trigger `{}` names component `{c}`, which is not defined \
                     (add a [component.{c}] table)",
                    shown(&trigger.id),
                    c = shown(&trigger.component),
                );
            }
            if let Route::Path(route) = &trigger.route {
                http_trigger::validate_route(route).map_err(|e| {
                    anyhow::anyhow!(
                        "{origin}: http trigger `{}` route `{route}`: {e}",
                        trigger.id
                    )
                })?;
            }
        }
        for (id, trigger_type, component) in self.event_triggers.components() {
            if !self.components.contains_key(component) {
                anyhow::bail!(
                    "{origin}: {trigger_type} trigger `{}` names component `{c}`, which \
                     is not defined (add a [component.{c}] table)",
                    shown(id),
                    c = shown(component),
                );
            }
        }
        self.event_triggers.validate(origin)?;
        for component in self.components.values() {
            for (key, template) in &component.variables {
                spin_app_format::ids::validate_id(key, '_', true).map_err(|e| {
                    anyhow::anyhow!(
                        "{origin}: key `component.{}.variables.{key}`: {e}",
                        component.id
                    )
                })?;
                for reference in template_references(template).map_err(|e| {
                    anyhow::anyhow!(
                        "{origin}: key `component.{}.variables.{key}`: {e}",
                        component.id
                    )
                })? {
                    if !self.variables.contains_key(&reference) {
                        anyhow::bail!(
                            "{origin}: key `component.{}.variables.{key}`: template refers to \
                             application variable `{reference}`, which is not declared in \
                             [variables]",
                            component.id
                        );
                    }
                }
            }
        }
        Ok(())
    }
}
