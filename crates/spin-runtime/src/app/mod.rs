//! The in-memory Spin application model.
//!
//! Both sources of an app produce the same [`App`]: a `spin.toml` manifest v2
//! ([`App::load_manifest`]) and the locked-app JSON that Spin OCI artifacts carry
//! ([`App::from_locked_json`]).

mod locked;
mod manifest;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use locked::{ContentRef, ContentResolver, FileUrlResolver};

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

/// One `[[trigger.http]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTrigger {
    /// Trigger id (given, or `<component>-http-trigger` as Spin names them).
    pub id: String,
    /// Where the trigger is reachable.
    pub route: Route,
    /// Id of the component that handles the requests.
    pub component: String,
}

/// The route of an HTTP trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A public route such as `/hello`, `/users/:id` or `/static/...`, as written.
    Path(String),
    /// `route = { private = true }`: reachable only by internal service chaining, never
    /// from outside.
    Private,
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
    /// Reads the whole content (a path must name a regular file).
    pub fn read(&self) -> anyhow::Result<Arc<[u8]>> {
        match self {
            Content::Path(p) => std::fs::read(p)
                .map(Arc::from)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display())),
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
    /// Files visible to the component, `exclude_files` already applied.
    pub files: Vec<FileMount>,
    /// `exclude_files` patterns as written (already applied to `files`).
    pub exclude_files: Vec<String>,
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
}

impl App {
    /// Loads a `spin.toml` manifest (version 2). Relative paths resolve against the
    /// manifest's directory; file globs are expanded now.
    ///
    /// Errors name the file, the key and the reason.
    pub fn load_manifest(path: &Path) -> anyhow::Result<App> {
        manifest::load(path)
    }

    /// Parses a manifest from text; `base_dir` is where relative paths resolve and
    /// `origin` names the source in error messages.
    pub fn from_manifest_str(text: &str, base_dir: &Path, origin: &str) -> anyhow::Result<App> {
        manifest::parse(text, base_dir, origin)
    }

    /// Parses the locked-app JSON of a Spin OCI artifact (or of `spin up`). Content
    /// referenced by digest or by `file://` URL is obtained through `resolver`; inline
    /// content is decoded here.
    pub fn from_locked_json(bytes: &[u8], resolver: &dyn ContentResolver) -> anyhow::Result<App> {
        locked::parse(bytes, resolver)
    }

    /// The Wasm source paths (as written) of a manifest's components, keyed by where
    /// they are declared; reads nothing from disk.
    pub fn manifest_component_sources(
        text: &str,
        origin: &str,
    ) -> anyhow::Result<Vec<(String, String)>> {
        manifest::component_sources(text, origin)
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
            validate_variable_name(name)
                .map_err(|e| anyhow::anyhow!("{origin}: key `variables.{name}`: {e}"))?;
        }
        for trigger in &self.http_triggers {
            if !self.components.contains_key(&trigger.component) {
                anyhow::bail!(
                    "{origin}: http trigger `{}` names component `{}`, which is not defined \
                     (add a [component.{}] table)",
                    trigger.id,
                    trigger.component,
                    trigger.component
                );
            }
            if let Route::Path(route) = &trigger.route {
                crate::routing::validate_route(route).map_err(|e| {
                    anyhow::anyhow!(
                        "{origin}: http trigger `{}` route `{route}`: {e}",
                        trigger.id
                    )
                })?;
            }
        }
        for component in self.components.values() {
            for (key, template) in &component.variables {
                validate_variable_name(key).map_err(|e| {
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

/// Spin variable names: lower-case ASCII letters, digits and `_`, starting with a letter.
fn validate_variable_name(name: &str) -> Result<(), String> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid variable name `{name}`: use lower-case letters, digits and `_`, \
             starting with a letter"
        ))
    }
}

/// The variable names referenced by `{{ name }}` placeholders in a template.
pub fn template_references(template: &str) -> Result<Vec<String>, String> {
    let mut refs = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("unclosed `{{{{` in template `{template}`"))?;
        let name = after[..end].trim();
        validate_variable_name(name)?;
        refs.push(name.to_string());
        rest = &after[end + 2..];
    }
    Ok(refs)
}
