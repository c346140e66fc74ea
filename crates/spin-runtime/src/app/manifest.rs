//! `spin.toml` manifest version 2.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;

use super::{App, Component, Content, FileMount, HttpTrigger, Route, Variable};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestToml {
    spin_manifest_version: toml::Value,
    application: ApplicationToml,
    #[serde(default)]
    variables: BTreeMap<String, VariableToml>,
    #[serde(default)]
    trigger: BTreeMap<String, toml::Value>,
    #[serde(default)]
    component: BTreeMap<String, ComponentToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplicationToml {
    name: String,
    version: Option<String>,
    description: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    authors: Vec<String>,
    /// `[application.trigger.http]` (e.g. `base`): accepted, ignored as Spin 2+ does.
    #[serde(default)]
    #[allow(dead_code)]
    trigger: Option<toml::Value>,
    /// `[application.tool]`: tool-specific metadata, ignored.
    #[serde(default)]
    #[allow(dead_code)]
    tool: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VariableToml {
    default: Option<String>,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    secret: bool,
    #[allow(dead_code)]
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpTriggerToml {
    id: Option<String>,
    route: RouteToml,
    component: Option<ComponentRefToml>,
    executor: Option<toml::Value>,
    static_response: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RouteToml {
    Path(String),
    Private { private: bool },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ComponentRefToml {
    Id(String),
    Inline(Box<ComponentToml>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ComponentToml {
    source: SourceToml,
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    files: Vec<FileToml>,
    #[serde(default)]
    exclude_files: Vec<String>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    allowed_outbound_hosts: Option<Vec<String>>,
    allowed_http_hosts: Option<Vec<String>>,
    #[serde(default)]
    key_value_stores: Vec<String>,
    #[serde(default)]
    sqlite_databases: Vec<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
    #[serde(default)]
    ai_models: Vec<String>,
    /// `[component.x.build]`: how `spin build` builds it; not needed to run.
    #[allow(dead_code)]
    build: Option<toml::Value>,
    #[allow(dead_code)]
    tool: Option<toml::Value>,
    dependencies: Option<toml::Value>,
    #[serde(default)]
    #[allow(dead_code)]
    dependencies_inherit_configuration: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SourceToml {
    Path(String),
    Remote {
        url: String,
        #[allow(dead_code)]
        digest: String,
    },
    Registry {
        registry: Option<String>,
        package: String,
        version: String,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FileToml {
    Pattern(String),
    Mapping { source: String, destination: String },
}

/// Reads and parses `path`.
pub(super) fn load(path: &Path) -> anyhow::Result<App> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read Spin manifest {}", path.display()))?;
    let base = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let base = if base.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base
    };
    parse(&text, &base, &path.display().to_string())
}

/// Parses manifest text; `origin` names the file in errors.
pub(super) fn parse(text: &str, base: &Path, origin: &str) -> anyhow::Result<App> {
    // Check the version first, so a v1 manifest gets a clear message rather than
    // a list of unknown keys.
    let raw: toml::Table =
        toml::from_str(text).map_err(|e| anyhow!("{origin}: invalid TOML: {e}"))?;
    match raw.get("spin_manifest_version") {
        Some(toml::Value::Integer(2)) => {}
        Some(toml::Value::String(v)) if v == "1" => bail!(
            "{origin}: key `spin_manifest_version`: manifest version 1 is not supported; \
             convert it to version 2 (`spin_manifest_version = 2`, see Spin's manifest v2 docs)"
        ),
        Some(other) => bail!(
            "{origin}: key `spin_manifest_version`: unsupported value {other}; only version 2 \
             is supported"
        ),
        None => bail!(
            "{origin}: key `spin_manifest_version` is missing; a Spin manifest v2 starts with \
             `spin_manifest_version = 2`"
        ),
    }
    let manifest: ManifestToml =
        toml::from_str(text).map_err(|e| anyhow!("{origin}: {}", one_line(&e.to_string())))?;
    let _ = manifest.spin_manifest_version;

    let mut variables = BTreeMap::new();
    for (name, v) in manifest.variables {
        if v.required && v.default.is_some() {
            bail!(
                "{origin}: key `variables.{name}`: a variable cannot be both `required` and \
                 have a `default`; remove one of them"
            );
        }
        if !v.required && v.default.is_none() {
            bail!(
                "{origin}: key `variables.{name}`: give it a `default` or mark it \
                 `required = true`"
            );
        }
        variables.insert(
            name,
            Variable {
                default: v.default,
                secret: v.secret,
            },
        );
    }

    let mut components = BTreeMap::new();
    for (id, c) in manifest.component {
        validate_component_id(&id).map_err(|e| anyhow!("{origin}: key `component.{id}`: {e}"))?;
        let component = convert_component(&id, c, base, origin, &format!("component.{id}"))?;
        components.insert(id, component);
    }

    let mut http_triggers = Vec::new();
    for (kind, value) in manifest.trigger {
        if kind != "http" {
            bail!(
                "{origin}: key `trigger.{kind}`: trigger type `{kind}` is not supported by this \
                 runtime (only `http` is)"
            );
        }
        let entries: Vec<HttpTriggerToml> = value.try_into().map_err(|e: toml::de::Error| {
            anyhow!(
                "{origin}: key `trigger.http`: {} (expected [[trigger.http]] tables with \
                 `route` and `component`)",
                one_line(&e.to_string())
            )
        })?;
        for (index, t) in entries.into_iter().enumerate() {
            let key = format!("trigger.http[{index}]");
            if t.static_response.is_some() {
                bail!("{origin}: key `{key}.static_response`: static responses are not supported by this runtime; serve the content from a component");
            }
            if let Some(executor) = &t.executor {
                let kind = executor.get("type").and_then(|v| v.as_str()).unwrap_or("?");
                if kind != "spin" {
                    bail!(
                        "{origin}: key `{key}.executor`: executor type `{kind}` is not \
                         supported (only the default `spin` executor; WAGI is not)"
                    );
                }
            }
            let component_id = match t.component {
                Some(ComponentRefToml::Id(id)) => id,
                Some(ComponentRefToml::Inline(inline)) => {
                    let id = t
                        .id
                        .clone()
                        .map(|i| format!("{i}-component"))
                        .unwrap_or_else(|| format!("inline-component{index}"));
                    let component =
                        convert_component(&id, *inline, base, origin, &format!("{key}.component"))?;
                    components.insert(id.clone(), component);
                    id
                }
                None => bail!("{origin}: key `{key}.component` is missing: name the component that handles this route"),
            };
            let route = match t.route {
                RouteToml::Path(p) => Route::Path(p),
                RouteToml::Private { private: true } => Route::Private,
                RouteToml::Private { private: false } => bail!(
                    "{origin}: key `{key}.route`: `{{ private = false }}` is not a route; \
                     give a path such as \"/...\""
                ),
            };
            http_triggers.push(HttpTrigger {
                id: t
                    .id
                    .unwrap_or_else(|| format!("{component_id}-http-trigger{}", suffix(index))),
                route,
                component: component_id,
            });
        }
    }

    let app = App {
        name: manifest.application.name,
        version: manifest.application.version,
        description: manifest.application.description,
        variables,
        http_triggers,
        components,
        oci_image_digest: None,
    };
    app.validate(origin)?;
    Ok(app)
}

/// The Wasm source path of every component of manifest `text` (as written, relative to
/// the manifest's directory), named `component.<id>` or `trigger.http[<n>].component`,
/// after checking that every `files` source and destination stays inside the app, without
/// touching the filesystem: for a host that must read the files itself (the shim
/// reads them from a container's rootfs, confined to it).
pub(super) fn component_sources(text: &str, origin: &str) -> anyhow::Result<Vec<(String, String)>> {
    let manifest: ManifestToml =
        toml::from_str(text).map_err(|e| anyhow!("{origin}: {}", one_line(&e.to_string())))?;
    let mut out = Vec::new();
    let confined = |key: &str, files: &[FileToml]| -> anyhow::Result<()> {
        for f in files {
            match f {
                FileToml::Pattern(p) if Path::new(p).is_absolute() || p.split('/').any(|s| s == "..") => bail!(
                    "{origin}: key `{key}.files`: pattern `{p}` must be relative to the manifest directory and stay inside it"
                ),
                FileToml::Mapping { source, destination } => check_inside(source, destination)
                    .map_err(|e| anyhow!("{origin}: key `{key}.files`: {e}"))?,
                FileToml::Pattern(_) => {}
            }
        }
        Ok(())
    };
    for (id, c) in manifest.component {
        let key = format!("component.{id}");
        confined(&key, &c.files)?;
        if let SourceToml::Path(p) = c.source {
            out.push((key, p));
        }
    }
    if let Some(http) = manifest.trigger.get("http") {
        let entries: Vec<HttpTriggerToml> = http.clone().try_into().unwrap_or_default();
        for (index, t) in entries.into_iter().enumerate() {
            if let Some(ComponentRefToml::Inline(c)) = t.component {
                let key = format!("trigger.http[{index}].component");
                confined(&key, &c.files)?;
                if let SourceToml::Path(p) = c.source {
                    out.push((key, p));
                }
            }
        }
    }
    Ok(out)
}

fn suffix(index: usize) -> String {
    if index == 0 {
        String::new()
    } else {
        index.to_string()
    }
}

fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn validate_component_id(id: &str) -> Result<(), String> {
    let ok = id.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid component id `{id}`: use letters, digits, `-` and `_`, starting with a letter"
        ))
    }
}

fn convert_component(
    id: &str,
    c: ComponentToml,
    base: &Path,
    origin: &str,
    key: &str,
) -> anyhow::Result<Component> {
    let source = match c.source {
        SourceToml::Path(p) => {
            let path = base.join(&p);
            if !path.is_file() {
                bail!(
                    "{origin}: key `{key}.source`: Wasm file `{p}` not found at {} (build the \
                     component first, or fix the path; it is relative to the manifest)",
                    path.display()
                );
            }
            Content::Path(path)
        }
        SourceToml::Remote { url, .. } => bail!(
            "{origin}: key `{key}.source`: remote sources ({url}) are not supported; download \
             the file and give its path, or push the app as an OCI artifact"
        ),
        SourceToml::Registry {
            registry,
            package,
            version,
        } => bail!(
            "{origin}: key `{key}.source`: registry package sources ({}{package}@{version}) are \
             not supported; give a file path",
            registry.map(|r| format!("{r}/")).unwrap_or_default()
        ),
    };
    if c.dependencies
        .as_ref()
        .and_then(|d| d.as_table())
        .is_some_and(|t| !t.is_empty())
    {
        bail!("{origin}: key `{key}.dependencies`: component dependencies (composition) are not supported by this runtime; compose the component before deploying");
    }
    let allowed_outbound_hosts = match (c.allowed_outbound_hosts, c.allowed_http_hosts) {
        (Some(_), Some(_)) => bail!(
            "{origin}: key `{key}.allowed_http_hosts`: give either `allowed_outbound_hosts` or \
             the old `allowed_http_hosts`, not both"
        ),
        (Some(hosts), None) => hosts,
        (None, Some(old)) => {
            tracing::warn!(
                "{origin}: `{key}.allowed_http_hosts` is deprecated; use allowed_outbound_hosts"
            );
            old.iter().map(|h| convert_http_host(h)).collect()
        }
        (None, None) => Vec::new(),
    };
    let files = expand_files(&c.files, &c.exclude_files, base, origin, key)?;
    Ok(Component {
        id: id.to_string(),
        source,
        files,
        exclude_files: c.exclude_files,
        environment: c.environment,
        allowed_outbound_hosts,
        key_value_stores: c.key_value_stores,
        sqlite_databases: c.sqlite_databases,
        ai_models: c.ai_models,
        variables: c.variables,
    })
}

/// Converts an old `allowed_http_hosts` entry to the `allowed_outbound_hosts` form, as
/// `spin` does: `insecure:allow-all` allows everything, a bare host means HTTPS or HTTP.
pub(super) fn convert_http_host(host: &str) -> String {
    if host == "insecure:allow-all" {
        "*://*:*".to_string()
    } else if host.contains("://") {
        host.to_string()
    } else {
        format!("http*://{host}")
    }
}

/// A `{ source, destination }` mount must name a source inside the app directory
/// (relative, no `..`) and a guest path without `..`.
fn check_inside(source: &str, destination: &str) -> Result<(), String> {
    if Path::new(source).is_absolute() || source.split('/').any(|s| s == "..") {
        return Err(format!(
            "source `{source}` must be a path relative to the manifest directory that stays inside it (no leading `/`, no `..`)"
        ));
    }
    if destination.split('/').any(|s| s == "..") {
        return Err(format!("destination `{destination}` must not contain `..`"));
    }
    Ok(())
}

/// Expands `files` into mounts: glob patterns become individual files at the same
/// relative path under `/`; `{ source, destination }` mounts a directory (or a file).
fn expand_files(
    files: &[FileToml],
    exclude: &[String],
    base: &Path,
    origin: &str,
    key: &str,
) -> anyhow::Result<Vec<FileMount>> {
    let excludes = exclude
        .iter()
        .map(|p| {
            glob::Pattern::new(p)
                .map_err(|e| anyhow!("{origin}: key `{key}.exclude_files`: bad pattern `{p}`: {e}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let excluded = |rel: &str| excludes.iter().any(|p| p.matches(rel));
    let mut mounts = Vec::new();
    for f in files {
        match f {
            FileToml::Pattern(pattern) => {
                if Path::new(pattern).is_absolute() || pattern.split('/').any(|s| s == "..") {
                    bail!("{origin}: key `{key}.files`: pattern `{pattern}` must be relative to the manifest directory and stay inside it");
                }
                let full = format!(
                    "{}/{}",
                    glob::Pattern::escape(&base.to_string_lossy()),
                    pattern
                );
                let paths = glob::glob(&full).map_err(|e| {
                    anyhow!("{origin}: key `{key}.files`: bad pattern `{pattern}`: {e}")
                })?;
                for entry in paths {
                    let path = entry.map_err(|e| anyhow!("{origin}: key `{key}.files`: {e}"))?;
                    if !path.is_file() {
                        continue;
                    }
                    let rel = path
                        .strip_prefix(base)
                        .map_err(|_| {
                            anyhow!(
                                "{origin}: key `{key}.files`: {} is outside the app directory",
                                path.display()
                            )
                        })?
                        .to_string_lossy()
                        .into_owned();
                    if excluded(&rel) {
                        continue;
                    }
                    mounts.push(FileMount::File {
                        content: Content::Path(path),
                        destination: format!("/{rel}"),
                    });
                }
            }
            FileToml::Mapping {
                source,
                destination,
            } => {
                if !destination.starts_with('/') {
                    bail!("{origin}: key `{key}.files`: destination `{destination}` must be an absolute guest path such as `/data`");
                }
                check_inside(source, destination)
                    .map_err(|e| anyhow!("{origin}: key `{key}.files`: {e}"))?;
                let path = base.join(source);
                if path.is_dir() {
                    mounts.push(FileMount::Directory {
                        source: path,
                        destination: destination.trim_end_matches('/').to_string(),
                    });
                } else if path.is_file() {
                    mounts.push(FileMount::File {
                        content: Content::Path(path),
                        destination: destination.clone(),
                    });
                } else {
                    bail!(
                        "{origin}: key `{key}.files`: source `{source}` not found at {}",
                        path.display()
                    );
                }
            }
        }
    }
    Ok(mounts)
}
