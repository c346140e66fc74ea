//! The locked-app JSON carried by Spin OCI artifacts (and written by `spin up`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use base64::Engine as _;
use serde::Deserialize;

use super::{App, Component, Content, FileMount, HttpTrigger, Route, Variable};

/// A reference to content in a locked app: a `file://` URL, a digest, or both.
/// (Inline content is decoded by the parser and never reaches a resolver.)
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContentRef {
    /// `source`: usually a `file://` URL (apps locked by `spin up`).
    pub source: Option<String>,
    /// `digest`: `sha256:<hex>` of the content (OCI layers).
    pub digest: Option<String>,
}

/// Maps locked-app content references to bytes or host paths. The image loader
/// implements it over containerd's content store; [`FileUrlResolver`] handles `file://`.
pub trait ContentResolver {
    /// Returns the content, or an error naming the reference and why it is unavailable.
    fn resolve(&self, content: &ContentRef) -> anyhow::Result<Content>;
}

impl<F> ContentResolver for F
where
    F: Fn(&ContentRef) -> anyhow::Result<Content>,
{
    fn resolve(&self, content: &ContentRef) -> anyhow::Result<Content> {
        self(content)
    }
}

/// Resolves `file://` sources to host paths; digest-only references are an error.
pub struct FileUrlResolver;

impl ContentResolver for FileUrlResolver {
    fn resolve(&self, content: &ContentRef) -> anyhow::Result<Content> {
        match &content.source {
            Some(source) => match source.strip_prefix("file://") {
                Some(path) => Ok(Content::Path(PathBuf::from(path))),
                None => bail!("content source `{source}` is not a file:// URL"),
            },
            None => bail!(
                "content {} is referenced by digest only; a content-store resolver is needed",
                content.digest.as_deref().unwrap_or("<no digest>")
            ),
        }
    }
}

#[derive(Deserialize)]
struct LockedApp {
    spin_lock_version: u32,
    #[serde(default)]
    must_understand: Vec<String>,
    #[serde(default)]
    host_requirements: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    variables: BTreeMap<String, LockedVariable>,
    #[serde(default)]
    triggers: Vec<LockedTrigger>,
    #[serde(default)]
    components: Vec<LockedComponent>,
}

#[derive(Deserialize)]
struct LockedVariable {
    default: Option<String>,
    #[serde(default)]
    secret: bool,
}

#[derive(Deserialize)]
struct LockedTrigger {
    id: String,
    trigger_type: String,
    #[serde(default)]
    trigger_config: serde_json::Value,
}

#[derive(Deserialize)]
struct LockedComponent {
    id: String,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
    source: LockedSource,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    files: Vec<LockedFile>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    dependencies: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct LockedSource {
    #[serde(default)]
    content_type: Option<String>,
    #[serde(flatten)]
    content: LockedContent,
}

#[derive(Deserialize, Default)]
struct LockedContent {
    source: Option<String>,
    inline: Option<String>,
    digest: Option<String>,
}

#[derive(Deserialize)]
struct LockedFile {
    content: LockedContent,
    path: String,
}

const ORIGIN: &str = "locked app";

pub(super) fn parse(bytes: &[u8], resolver: &dyn ContentResolver) -> anyhow::Result<App> {
    let locked: LockedApp = serde_json::from_slice(bytes)
        .map_err(|e| anyhow!("{ORIGIN}: invalid locked-app JSON: {e}"))?;
    if locked.spin_lock_version > 1 {
        bail!(
            "{ORIGIN}: key `spin_lock_version`: version {} is not supported (0 and 1 are)",
            locked.spin_lock_version
        );
    }
    if let Some(feature) = locked.must_understand.first() {
        bail!("{ORIGIN}: key `must_understand`: the app requires `{feature}`, which this runtime does not support");
    }
    if let Some((req, _)) = locked.host_requirements.iter().next() {
        bail!("{ORIGIN}: key `host_requirements`: host requirement `{req}` is not supported by this runtime");
    }
    let meta_str = |k: &str| {
        locked
            .metadata
            .get(k)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let name =
        meta_str("name").ok_or_else(|| anyhow!("{ORIGIN}: key `metadata.name` is missing"))?;

    let variables = locked
        .variables
        .into_iter()
        .map(|(name, v)| {
            (
                name,
                Variable {
                    default: v.default,
                    secret: v.secret,
                },
            )
        })
        .collect();

    let mut http_triggers = Vec::new();
    for t in locked.triggers {
        if t.trigger_type != "http" {
            bail!(
                "{ORIGIN}: trigger `{}`: trigger type `{}` is not supported by this runtime \
                 (only `http` is)",
                t.id,
                t.trigger_type
            );
        }
        let cfg = &t.trigger_config;
        if cfg.get("static_response").is_some() {
            bail!(
                "{ORIGIN}: trigger `{}`: static responses are not supported by this runtime",
                t.id
            );
        }
        if let Some(exec) = cfg.get("executor").filter(|v| !v.is_null()) {
            let kind = exec.get("type").and_then(|v| v.as_str()).unwrap_or("?");
            if kind != "spin" {
                bail!(
                    "{ORIGIN}: trigger `{}`: executor type `{kind}` is not supported (only `spin`)",
                    t.id
                );
            }
        }
        let component = cfg
            .get("component")
            .and_then(|v| v.as_str())
            .ok_or_else(|| anyhow!("{ORIGIN}: trigger `{}`: key `trigger_config.component` is missing or not a string", t.id))?
            .to_string();
        let route = match cfg.get("route") {
            Some(serde_json::Value::String(r)) => Route::Path(r.clone()),
            Some(v) if v.get("private").and_then(|p| p.as_bool()) == Some(true) => Route::Private,
            other => bail!(
                "{ORIGIN}: trigger `{}`: key `trigger_config.route` must be a path or \
                 {{\"private\": true}}, found {}",
                t.id,
                other
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "nothing".into())
            ),
        };
        http_triggers.push(HttpTrigger {
            id: t.id,
            route,
            component,
        });
    }

    let mut components = BTreeMap::new();
    for c in locked.components {
        let key = format!("component `{}`", c.id);
        if !c.dependencies.is_empty() {
            bail!("{ORIGIN}: {key}: component dependencies are not supported by this runtime");
        }
        if let Some(ct) = &c.source.content_type {
            if ct != "application/wasm" {
                bail!("{ORIGIN}: {key}: source content type `{ct}` is not supported (application/wasm is)");
            }
        }
        let source = content(&c.source.content, resolver)
            .with_context(|| format!("{ORIGIN}: {key}: source"))?;
        let mut files = Vec::new();
        for f in c.files {
            let content = content(&f.content, resolver)
                .with_context(|| format!("{ORIGIN}: {key}: file `{}`", f.path))?;
            let destination = format!("/{}", f.path.trim_start_matches('/'));
            match content {
                Content::Path(p) if p.is_dir() => files.push(FileMount::Directory {
                    source: p,
                    destination: destination
                        .trim_end_matches('/')
                        .to_string()
                        .replace("//", "/"),
                }),
                content => files.push(FileMount::File {
                    content,
                    destination,
                }),
            }
        }
        let list = |k: &str| -> anyhow::Result<Vec<String>> {
            match c.metadata.get(k) {
                None | Some(serde_json::Value::Null) => Ok(Vec::new()),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| anyhow!("{ORIGIN}: {key}: key `metadata.{k}`: {e}")),
            }
        };
        let mut allowed_outbound_hosts = list("allowed_outbound_hosts")?;
        if allowed_outbound_hosts.is_empty() {
            allowed_outbound_hosts = list("allowed_http_hosts")?
                .iter()
                .map(|h| super::manifest::convert_http_host(h))
                .collect();
        }
        components.insert(
            c.id.clone(),
            Component {
                id: c.id,
                source,
                files,
                exclude_files: Vec::new(),
                environment: c.env,
                allowed_outbound_hosts,
                key_value_stores: list("key_value_stores")?,
                sqlite_databases: list("databases")?,
                ai_models: list("ai_models")?,
                variables: c.config,
            },
        );
    }

    let app = App {
        name,
        version: meta_str("version"),
        description: meta_str("description"),
        variables,
        http_triggers,
        components,
        oci_image_digest: None,
    };
    app.validate(ORIGIN)?;
    Ok(app)
}

fn content(c: &LockedContent, resolver: &dyn ContentResolver) -> anyhow::Result<Content> {
    if let Some(inline) = &c.inline {
        let engine = base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new()
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
        );
        let bytes = engine
            .decode(inline.as_bytes())
            .map_err(|e| anyhow!("inline content is not valid base64: {e}"))?;
        return Ok(Content::Bytes(Arc::from(bytes)));
    }
    if c.source.is_none() && c.digest.is_none() {
        bail!("content has none of `source`, `digest` or `inline`");
    }
    resolver.resolve(&ContentRef {
        source: c.source.clone(),
        digest: c.digest.clone(),
    })
}
