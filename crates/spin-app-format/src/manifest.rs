//! `spin.toml` manifest version 2, as Spin's `spin-manifest` crate (`schema/v2.rs`) defines
//! it, and its locking into a [`LockedApp`] as Spin's loader (`spin up`) does: trigger ids
//! and inline components normalised (`normalize.rs`), `allowed_http_hosts` converted,
//! metadata, variables, triggers and components written in Spin's shape, sources as
//! `file://` URLs.
//!
//! Files: Spin copies a component's files into a temporary directory and locks that one
//! directory at `/`. We do not copy: a `{ source = "dir", destination = ".." }` mount of a
//! directory (with no `exclude_files`) is locked as that directory at its destination (the
//! form of `spin up --direct-mounts`), every other file as its own entry at its guest path.
//! [`LocalApp::files`] lists every file with its guest path, as `spin registry push`
//! walks them.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;
use serde_json::Value;

use crate::ids::validate_id;
use crate::locked::{
    ContentPath, ContentRef, InheritConfiguration, LockedApp, LockedComponent,
    LockedComponentDependency, LockedComponentSource, LockedTrigger, ValuesMap, Variable,
    WASM_CONTENT_TYPE,
};
use crate::ordered::OrderedMap;
use crate::untrusted::{shown, shown_path, toml_error, MAX_DOCUMENT_BYTES};

/// The manifest file name Spin looks for in an app directory.
pub const MANIFEST_FILE: &str = "spin.toml";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppManifest {
    #[allow(dead_code)]
    spin_manifest_version: toml::Value,
    application: AppDetails,
    #[serde(default)]
    variables: OrderedMap<VariableToml>,
    #[serde(rename = "trigger")]
    triggers: OrderedMap<Vec<toml::Table>>,
    #[serde(rename = "component", default)]
    components: OrderedMap<ComponentToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppDetails {
    name: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    authors: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    targets: Vec<toml::Value>,
    #[serde(rename = "trigger", default)]
    trigger_global_configs: OrderedMap<toml::Table>,
    #[serde(default)]
    #[allow(dead_code)]
    tool: OrderedMap<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VariableToml {
    description: Option<String>,
    #[serde(default)]
    required: bool,
    default: Option<String>,
    #[serde(default)]
    secret: bool,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct ComponentToml {
    source: SourceToml,
    #[serde(default)]
    description: String,
    #[serde(default)]
    variables: OrderedMap<String>,
    #[serde(default)]
    environment: OrderedMap<String>,
    #[serde(default)]
    files: Vec<FilesMount>,
    #[serde(default)]
    exclude_files: Vec<String>,
    #[serde(default)]
    allowed_http_hosts: Vec<String>,
    #[serde(default)]
    allowed_outbound_hosts: Vec<String>,
    #[serde(default)]
    key_value_stores: Vec<String>,
    #[serde(default)]
    sqlite_databases: Vec<String>,
    #[serde(default)]
    ai_models: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    targets: Option<Vec<toml::Value>>,
    #[serde(default)]
    build: Option<BuildConfig>,
    #[serde(default)]
    #[allow(dead_code)]
    tool: OrderedMap<toml::Table>,
    #[serde(default)]
    #[allow(dead_code)]
    dependencies_inherit_configuration: Option<bool>,
    #[serde(default)]
    dependencies: OrderedMap<toml::Value>,
    #[serde(default)]
    #[allow(dead_code)]
    profile: OrderedMap<toml::Value>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, untagged)]
enum SourceToml {
    Local(String),
    Remote {
        url: String,
        digest: String,
    },
    Registry {
        registry: Option<String>,
        package: String,
        version: String,
    },
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, untagged)]
enum FilesMount {
    Pattern(String),
    Placement { source: String, destination: String },
}

#[derive(Deserialize, serde::Serialize, Clone)]
#[serde(deny_unknown_fields)]
struct BuildConfig {
    command: toml::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workdir: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    watch: Vec<String>,
}

/// One file of a component on this host, with its guest path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFile {
    /// The file on the host.
    pub host: PathBuf,
    /// Its guest path, relative (no leading `/`), as `spin registry push` records it.
    pub path: String,
}

/// A manifest locked for running from this host.
#[derive(Debug, Clone)]
pub struct LocalApp {
    /// The directory holding the manifest (relative paths resolve against it).
    pub base_dir: PathBuf,
    /// The lock, sources and files as `file://` URLs, `metadata.origin` the manifest.
    pub locked: LockedApp,
    /// Every file of every component (by component id, in lock order), directories walked.
    pub files: Vec<(String, Vec<LocalFile>)>,
}

impl LocalApp {
    /// The files of component `id`.
    pub fn files(&self, id: &str) -> &[LocalFile] {
        self.files
            .iter()
            .find(|(c, _)| c == id)
            .map(|(_, f)| f.as_slice())
            .unwrap_or(&[])
    }
}

/// Reads `path` (a `spin.toml`, or a directory holding one) and locks it. Only a regular
/// file of at most [`MAX_DOCUMENT_BYTES`] is read (a FIFO or a device is refused unopened).
pub fn load(path: &Path) -> anyhow::Result<LocalApp> {
    let file = if path.is_dir() {
        path.join(MANIFEST_FILE)
    } else {
        path.to_path_buf()
    };
    let bytes = crate::untrusted::read_regular(&file, MAX_DOCUMENT_BYTES, "Spin manifest")?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "Spin manifest {} is not UTF-8 text (invalid byte at offset {})",
            shown_path(&file),
            e.utf8_error().valid_up_to()
        )
    })?;
    let base = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = base
        .canonicalize()
        .with_context(|| format!("cannot resolve the app directory {}", base.display()))?;
    let mut app = parse(&text, &base, &file.display().to_string())?;
    let manifest_abs = base.join(file.file_name().unwrap_or_default());
    app.locked.metadata.insert(
        "origin".into(),
        crate::locked::file_url(&manifest_abs).into(),
    );
    Ok(app)
}

/// A TOML error of a value (no position in the text): one line, [`shown`].
fn one_line(s: &str) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    shown(&line).to_string()
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
        validate_id(name, '_', true)?;
        refs.push(name.to_string());
        rest = &after[end + 2..];
    }
    Ok(refs)
}

/// A trigger entry split into Spin's fixed keys and its type-specific config.
struct TriggerEntry {
    trigger_type: String,
    id: String,
    component: Option<ComponentSpec>,
    components: OrderedMap<Vec<ComponentSpec>>,
    /// `dependencies.<role> = [..]` (Spin 4: `middleware` of HTTP triggers).
    dependencies: OrderedMap<Vec<TriggerDependency>>,
    config: toml::Table,
}

/// One entry of a trigger's `dependencies.<role>` list (Spin's `v2::TriggerDependency`).
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, untagged)]
enum TriggerDependency {
    AppComponent {
        component: String,
        inherit_configuration: Option<InheritToml>,
    },
    Local {
        path: String,
        inherit_configuration: Option<InheritToml>,
    },
    Http {
        url: String,
        #[allow(dead_code)]
        digest: String,
        #[allow(dead_code)]
        inherit_configuration: Option<InheritToml>,
    },
    Package {
        #[allow(dead_code)]
        version: String,
        #[allow(dead_code)]
        registry: Option<String>,
        package: String,
        #[allow(dead_code)]
        inherit_configuration: Option<InheritToml>,
    },
}

/// `inherit_configuration = true | false | ["allowed_outbound_hosts", ..]`.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum InheritToml {
    All(bool),
    Some(Vec<String>),
}

/// Spin's `locked_inherit`: `true` is everything, a list those keys, `false` or nothing
/// is nothing.
fn locked_inherit(i: &Option<InheritToml>) -> InheritConfiguration {
    match i {
        Some(InheritToml::All(true)) => InheritConfiguration::All,
        Some(InheritToml::Some(keys)) => InheritConfiguration::Some(keys.clone()),
        Some(InheritToml::All(false)) | None => InheritConfiguration::Some(Vec::new()),
    }
}

/// Parses a trigger's `dependencies` table: role -> list of dependencies.
fn trigger_dependencies(
    v: toml::Value,
    origin: &str,
    key: &str,
) -> anyhow::Result<OrderedMap<Vec<TriggerDependency>>> {
    let toml::Value::Table(t) = v else {
        bail!("{origin}: key `{key}`: must be a table of lists (e.g. `dependencies.middleware = [{{ component = \"m\" }}]`)");
    };
    let mut out = OrderedMap::default();
    for (role, list) in t {
        let k = format!("{key}.{role}");
        let toml::Value::Array(items) = list else {
            bail!("{origin}: key `{k}`: must be a list of dependencies");
        };
        let mut deps = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let dep = item.try_into::<TriggerDependency>().map_err(|_| {
                anyhow!(
                    "{origin}: key `{k}[{i}]`: a trigger dependency is `{{ component = \"<id>\" }}`, \
                     `{{ path = \"<file>.wasm\" }}`, `{{ url, digest }}` or `{{ package, version, \
                     registry? }}`, each with an optional `inherit_configuration = true | false | \
                     [\"<key>\", ..]`"
                )
            })?;
            deps.push(dep);
        }
        out.insert(role, deps);
    }
    Ok(out)
}

/// Locks one trigger dependency: a local file or an app component's (local) source.
fn lock_trigger_dependency(
    dep: &TriggerDependency,
    components: &OrderedMap<ComponentToml>,
    base: &Path,
    origin: &str,
    key: &str,
    touch: Touch,
) -> anyhow::Result<LockedComponentDependency> {
    let (path, inherit) = match dep {
        TriggerDependency::AppComponent {
            component,
            inherit_configuration,
        } => {
            let Some(c) = components.get(component) else {
                bail!(
                    "{origin}: key `{key}`: names component `{component}`, which is not defined \
                     (add a [component.{component}] table)"
                );
            };
            let SourceToml::Local(p) = &c.source else {
                bail!(
                    "{origin}: key `{key}`: component `{component}` has a remote or registry \
                     source; a trigger dependency's component needs a local file source here"
                );
            };
            (p, inherit_configuration)
        }
        TriggerDependency::Local {
            path,
            inherit_configuration,
        } => (path, inherit_configuration),
        TriggerDependency::Http { url, .. } => bail!(
            "{origin}: key `{key}`: remote dependencies ({url}) are not supported here; download \
             the file and give it as `{{ path = \"<file>.wasm\" }}`"
        ),
        TriggerDependency::Package { package, .. } => bail!(
            "{origin}: key `{key}`: registry dependencies ({package}) are not supported here; \
             fetch the component and give it as `{{ path = \"<file>.wasm\" }}`"
        ),
    };
    let file = base.join(path);
    if touch == Touch::Host && !file.is_file() {
        bail!(
            "{origin}: key `{key}`: Wasm file `{path}` not found at {} (build it first, or fix \
             the path; it is relative to the manifest)",
            file.display()
        );
    }
    Ok(LockedComponentDependency {
        source: LockedComponentSource {
            content_type: WASM_CONTENT_TYPE.into(),
            content: ContentRef {
                source: Some(crate::locked::file_url(&file)),
                ..Default::default()
            },
        },
        export: None,
        inherit: locked_inherit(inherit),
    })
}

#[derive(Clone)]
enum ComponentSpec {
    Reference(String),
    Inline(Box<ComponentToml>),
}

fn component_spec(v: toml::Value, origin: &str, key: &str) -> anyhow::Result<ComponentSpec> {
    match v {
        toml::Value::String(id) => {
            validate_id(&id, '-', false).map_err(|e| {
                anyhow!(
                    "{origin}: key `{key}`: invalid component id `{}`: {e}",
                    shown(&id)
                )
            })?;
            Ok(ComponentSpec::Reference(id))
        }
        other => other
            .try_into::<ComponentToml>()
            .map(|c| ComponentSpec::Inline(Box::new(c)))
            .map_err(|e| anyhow!("{origin}: key `{key}`: {}", one_line(&e.to_string()))),
    }
}

/// Parses and locks manifest text; `base` (absolute) is where relative paths resolve and
/// `origin` names the file in errors.
pub fn parse(text: &str, base: &Path, origin: &str) -> anyhow::Result<LocalApp> {
    parse_with(text, base, origin, Touch::Host)
}

/// Locks manifest `text` as the runtime in a container locks its `/spin.toml`, without
/// touching the filesystem or the network, for a host that reads the sources itself,
/// confined to the container's rootfs (the shim, before the container starts): local
/// sources become `file://` URLs of their paths under `/` (the container's view), URL
/// sources `{ source = <url>, digest }` (checked, not fetched), and no files are listed
/// (each `files` entry is only checked to stay inside the app). `origin` names the file in
/// errors.
pub fn lock_sources(text: &str, origin: &str) -> anyhow::Result<LockedApp> {
    Ok(parse_with(text, Path::new("/"), origin, Touch::Nothing)?.locked)
}

/// What locking a manifest may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    /// This host's files (sources checked, files listed) and, for URL sources, the network.
    Host,
    /// Nothing ([`lock_sources`]).
    Nothing,
}

fn parse_with(text: &str, base: &Path, origin: &str, touch: Touch) -> anyhow::Result<LocalApp> {
    check_version(text, origin)?;
    let manifest: AppManifest =
        toml::from_str(text).map_err(|e| anyhow!("{origin}: {}", toml_error(&e, text)))?;

    // Variables.
    let mut variables = std::collections::BTreeMap::new();
    for (name, v) in manifest.variables {
        validate_id(&name, '_', true).map_err(|e| {
            anyhow!(
                "{origin}: key `variables.{}`: invalid variable name: {e}",
                shown(&name)
            )
        })?;
        if v.required == v.default.is_some() {
            bail!(
                "{origin}: key `variables.{name}`: must be `required = true` OR have a `default`{}",
                if v.required {
                    " (it has both; remove one)"
                } else {
                    " (it has neither)"
                }
            );
        }
        variables.insert(
            name,
            Variable {
                description: v.description,
                default: v.default,
                secret: v.secret,
            },
        );
    }

    // Components, in manifest order.
    let mut components: OrderedMap<ComponentToml> = OrderedMap::default();
    for (id, c) in manifest.components {
        validate_id(&id, '-', false).map_err(|e| {
            anyhow!(
                "{origin}: key `component.{}`: invalid component id: {e}",
                shown(&id)
            )
        })?;
        components.insert(id, c);
    }

    // Triggers: split fixed keys from config.
    let mut entries = Vec::new();
    for (trigger_type, list) in manifest.triggers {
        for (index, mut table) in list.into_iter().enumerate() {
            let key = format!("trigger.{}[{index}]", shown(&trigger_type));
            let id = match table.remove("id") {
                None => String::new(),
                Some(toml::Value::String(s)) => s,
                Some(other) => bail!(
                    "{origin}: key `{key}.id`: must be a string, found {}",
                    shown(&other.to_string())
                ),
            };
            let component = table
                .remove("component")
                .map(|v| component_spec(v, origin, &format!("{key}.component")))
                .transpose()?;
            let mut extra = OrderedMap::default();
            if let Some(v) = table.remove("components") {
                let toml::Value::Table(t) = v else {
                    bail!("{origin}: key `{key}.components`: must be a table");
                };
                for (role, specs) in t {
                    let k = format!("{key}.components.{role}");
                    let list = match specs {
                        toml::Value::Array(a) => a
                            .into_iter()
                            .map(|v| component_spec(v, origin, &k))
                            .collect::<anyhow::Result<Vec<_>>>()?,
                        one => vec![component_spec(one, origin, &k)?],
                    };
                    extra.insert(role, list);
                }
            }
            let dependencies = match table.remove("dependencies") {
                None => OrderedMap::default(),
                Some(v) => trigger_dependencies(v, origin, &format!("{key}.dependencies"))?,
            };
            entries.push(TriggerEntry {
                trigger_type: trigger_type.clone(),
                id,
                component,
                components: extra,
                dependencies,
                config: table,
            });
        }
    }
    normalize_trigger_ids(&mut entries);
    normalize_inline_components(&mut entries, &mut components);

    // Cross references.
    for e in &entries {
        for spec in e
            .component
            .iter()
            .chain(e.components.iter().flat_map(|(_, v)| v.iter()))
        {
            if let ComponentSpec::Reference(id) = spec {
                if !components.contains_key(id) {
                    bail!(
                        "{origin}: {} trigger `{}` names component `{id}`, which is not defined \
                         (add a [component.{id}] table)",
                        e.trigger_type,
                        e.id
                    );
                }
            }
        }
    }

    let trigger_types: Vec<&str> = {
        let mut t: Vec<&str> = Vec::new();
        for e in &entries {
            if !t.contains(&e.trigger_type.as_str()) {
                t.push(&e.trigger_type);
            }
        }
        t
    };
    let metadata = locked_metadata(&manifest.application, &trigger_types)?;

    let mut triggers = Vec::new();
    for e in &entries {
        let mut config = e.config.clone();
        if let Some(ComponentSpec::Reference(id)) = &e.component {
            config.insert("component".into(), id.clone().into());
        }
        if !e.components.is_empty() {
            let mut t = toml::Table::new();
            for (role, specs) in e.components.iter() {
                let ids: Vec<toml::Value> = specs
                    .iter()
                    .filter_map(|s| match s {
                        ComponentSpec::Reference(id) => Some(id.clone().into()),
                        ComponentSpec::Inline(_) => None,
                    })
                    .collect();
                t.insert(role.clone(), ids.into());
            }
            config.insert("components".into(), t.into());
        }
        let trigger_config: Value = serde_json::to_value(&config).with_context(|| {
            format!(
                "{origin}: trigger `{}`: config is not representable as JSON",
                e.id
            )
        })?;
        let mut trigger_dependencies = std::collections::BTreeMap::new();
        for (role, deps) in e.dependencies.iter() {
            let locked = deps
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let key = format!("trigger `{}` dependencies.{role}[{i}]", e.id);
                    lock_trigger_dependency(d, &components, base, origin, &key, touch)
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            trigger_dependencies.insert(role.clone(), locked);
        }
        triggers.push(LockedTrigger {
            id: e.id.clone(),
            trigger_type: e.trigger_type.clone(),
            trigger_config,
            trigger_dependencies,
        });
    }

    let mut locked_components = Vec::new();
    let mut files = Vec::new();
    for (id, c) in components.iter() {
        let key = format!("component.{id}");
        let (component, local_files) =
            lock_component(id, c, base, origin, &key, &variables, touch)?;
        locked_components.push(component);
        files.push((id.clone(), local_files));
    }

    let mut locked = LockedApp {
        spin_lock_version: 0,
        must_understand: Vec::new(),
        metadata,
        host_requirements: ValuesMap::new(),
        variables,
        triggers,
        components: locked_components,
    };
    for (clone, original) in locked.move_trigger_dependencies_to_components() {
        let same = files
            .iter()
            .find(|(id, _)| *id == original)
            .map(|(_, f)| f.clone())
            .unwrap_or_default();
        files.push((clone, same));
    }
    Ok(LocalApp {
        base_dir: base.to_path_buf(),
        locked,
        files,
    })
}

/// Checks the text is at most [`MAX_DOCUMENT_BYTES`], is TOML and says
/// `spin_manifest_version = 2`.
fn check_version(text: &str, origin: &str) -> anyhow::Result<()> {
    if text.len() as u64 > MAX_DOCUMENT_BYTES {
        bail!(
            "{origin}: the manifest has {} bytes, more than the limit of {MAX_DOCUMENT_BYTES}",
            text.len()
        );
    }
    let raw: toml::Table = toml::from_str(text)
        .map_err(|e| anyhow!("{origin}: invalid TOML: {}", toml_error(&e, text)))?;
    match raw.get("spin_manifest_version") {
        Some(toml::Value::Integer(2)) => {}
        Some(toml::Value::String(v)) if v == "1" => bail!(
            "{origin}: key `spin_manifest_version`: manifest version 1 is not supported; \
             convert it to version 2 (`spin doctor` does, or see Spin's manifest v2 docs)"
        ),
        Some(other) => bail!(
            "{origin}: key `spin_manifest_version`: unsupported value {}; only version 2 is supported",
            shown(&other.to_string())
        ),
        None => bail!(
            "{origin}: key `spin_manifest_version` is missing; a Spin manifest v2 starts with \
             `spin_manifest_version = 2`"
        ),
    }
    Ok(())
}

/// Spin's `normalize_trigger_ids`: `<component>-<type>-trigger` when free, else
/// `<type>-trigger<N>`.
fn normalize_trigger_ids(entries: &mut [TriggerEntry]) {
    let mut ids: std::collections::HashSet<String> = entries.iter().map(|e| e.id.clone()).collect();
    let mut counters: std::collections::HashMap<String, usize> = Default::default();
    for e in entries.iter_mut() {
        if !e.id.is_empty() {
            continue;
        }
        if let Some(ComponentSpec::Reference(c)) = &e.component {
            let candidate = format!("{c}-{}-trigger", e.trigger_type);
            if !ids.contains(&candidate) {
                e.id.clone_from(&candidate);
                ids.insert(candidate);
                continue;
            }
        }
        let counter = counters.entry(e.trigger_type.clone()).or_insert(1);
        e.id = loop {
            let id = format!("{}-trigger{counter}", e.trigger_type);
            if !ids.contains(&id) {
                ids.insert(id.clone());
                break id;
            }
            *counter += 1;
        };
    }
}

/// Spin's `normalize_inline_components`: an inline component becomes a top-level one named
/// `<trigger id>-component` (or `inline-component<N>` when that is taken, not an id, or the
/// trigger has several components).
fn normalize_inline_components(
    entries: &mut [TriggerEntry],
    components: &mut OrderedMap<ComponentToml>,
) {
    for e in entries.iter_mut() {
        let trigger_id = e.id.clone();
        let mut specs: Vec<&mut ComponentSpec> = e.component.iter_mut().collect();
        for (_, list) in e.components.0.iter_mut() {
            specs.extend(list.iter_mut());
        }
        let multiple = specs.len() > 1;
        let mut counter = 1;
        for spec in specs {
            let ComponentSpec::Inline(inline) = spec else {
                continue;
            };
            let natural = format!("{trigger_id}-component");
            let id = if multiple
                || validate_id(&natural, '-', false).is_err()
                || components.contains_key(&natural)
            {
                loop {
                    let id = format!("inline-component{counter}");
                    if !components.contains_key(&id) {
                        break id;
                    }
                    counter += 1;
                }
            } else {
                natural
            };
            components.insert(id.clone(), (**inline).clone());
            *spec = ComponentSpec::Reference(id);
        }
    }
}

/// Spin's `locked_metadata`.
fn locked_metadata(details: &AppDetails, trigger_types: &[&str]) -> anyhow::Result<ValuesMap> {
    let mut m = ValuesMap::new();
    let mut string = |k: &str, v: &str| {
        if !v.is_empty() {
            m.insert(k.into(), v.into());
        }
    };
    string("name", &details.name);
    string("version", &details.version);
    string("description", &details.description);
    if !details.authors.is_empty() {
        m.insert("authors".into(), details.authors.clone().into());
    }
    m.insert(
        "triggers".into(),
        serde_json::to_value(&details.trigger_global_configs)?,
    );
    if let [only] = trigger_types {
        let mut single = details
            .trigger_global_configs
            .get(only)
            .cloned()
            .unwrap_or_default();
        single.insert("type".into(), (*only).into());
        m.insert("trigger".into(), serde_json::to_value(single)?);
    }
    Ok(m)
}

fn lock_component(
    id: &str,
    c: &ComponentToml,
    base: &Path,
    origin: &str,
    key: &str,
    variables: &std::collections::BTreeMap<String, Variable>,
    touch: Touch,
) -> anyhow::Result<(LockedComponent, Vec<LocalFile>)> {
    let source =
        match &c.source {
            SourceToml::Local(p) => {
                let path = base.join(p);
                if touch == Touch::Host && !path.is_file() {
                    bail!(
                        "{origin}: key `{key}.source`: Wasm file `{}` not found at {} (build the \
                     component first, or fix the path; it is relative to the manifest)",
                        shown(p),
                        shown_path(&path)
                    );
                }
                ContentRef::file(&path)
            }
            SourceToml::Remote { url, digest } => {
                let remote = crate::remote::RemoteSource {
                    id: id.to_string(),
                    url: url.clone(),
                    digest: digest.clone(),
                };
                let what = format!("{origin}: key `{key}.source`");
                match touch {
                    Touch::Host => ContentRef::file(&remote.resolve(&what)?),
                    Touch::Nothing => {
                        remote.check(&what)?;
                        ContentRef {
                            source: Some(url.clone()),
                            digest: Some(digest.clone()),
                            ..Default::default()
                        }
                    }
                }
            }
            SourceToml::Registry {
                registry,
                package,
                version,
            } => bail!(
            "{origin}: key `{key}.source`: registry package sources ({}{package}@{version}) are \
             not supported here; give a file path",
            registry.as_ref().map(|r| format!("{r}/")).unwrap_or_default()
        ),
        };
    if !c.dependencies.is_empty() {
        bail!(
            "{origin}: key `{key}.dependencies`: component dependencies cannot be locked here; \
             compose the component (e.g. `spin build` with `wac`) before deploying"
        );
    }
    let converted = crate::hosts::convert_allowed_http_hosts(&c.allowed_http_hosts, false)
        .map_err(|e| anyhow!("{origin}: key `{key}.allowed_http_hosts`: {e}"))?;
    let allowed: Vec<String> = c
        .allowed_outbound_hosts
        .iter()
        .cloned()
        .chain(converted)
        .collect();
    for (k, template) in c.variables.iter() {
        validate_id(k, '_', true).map_err(|e| {
            anyhow!("{origin}: key `{key}.variables.{k}`: invalid variable name: {e}")
        })?;
        for r in template_references(template)
            .map_err(|e| anyhow!("{origin}: key `{key}.variables.{k}`: {e}"))?
        {
            if !variables.contains_key(&r) {
                bail!(
                    "{origin}: key `{key}.variables.{k}`: template refers to application \
                     variable `{r}`, which is not declared in [variables]"
                );
            }
        }
    }

    let mut metadata = ValuesMap::new();
    if !c.description.is_empty() {
        metadata.insert("description".into(), c.description.clone().into());
    }
    for (k, list) in [
        ("allowed_outbound_hosts", &allowed),
        ("key_value_stores", &c.key_value_stores),
        ("databases", &c.sqlite_databases),
        ("ai_models", &c.ai_models),
    ] {
        if !list.is_empty() {
            metadata.insert(k.into(), list.clone().into());
        }
    }
    if let Some(build) = &c.build {
        metadata.insert("build".into(), serde_json::to_value(build)?);
    }

    let (lock_files, local_files) = match touch {
        Touch::Host => component_files(c, base, origin, key)?,
        Touch::Nothing => {
            check_files_confined(&c.files, origin, key)?;
            Default::default()
        }
    };
    Ok((
        LockedComponent {
            id: id.to_string(),
            metadata,
            source: LockedComponentSource {
                content_type: WASM_CONTENT_TYPE.into(),
                content: source,
            },
            env: c
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            files: lock_files,
            config: c
                .variables
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            dependencies: Default::default(),
            trigger_dependencies: Default::default(),
            host_requirements: ValuesMap::new(),
        },
        local_files,
    ))
}

/// Every file below `dir` in the order of a depth-first walk by name, links followed (a
/// link to a file is that file, a link to a directory is walked), without recursion: a
/// directory reached twice (a link loop) is walked once, and a tree deeper than
/// [`crate::untrusted::MAX_PATH_DEPTH`] is an error naming it.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    enum Item {
        Dir(PathBuf, usize),
        File(PathBuf),
    }
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![Item::Dir(dir.to_path_buf(), 0)];
    while let Some(item) = todo.pop() {
        let (d, depth) = match item {
            Item::File(p) => {
                out.push(p);
                continue;
            }
            Item::Dir(d, depth) => (d, depth),
        };
        let md = std::fs::metadata(&d)?;
        if !seen.insert((md.dev(), md.ino())) {
            continue;
        }
        if depth > crate::untrusted::MAX_PATH_DEPTH {
            bail!(
                "{} is more than {} directories below {}; file trees are limited to that depth",
                shown_path(&d),
                crate::untrusted::MAX_PATH_DEPTH,
                shown_path(dir)
            );
        }
        let mut entries: Vec<_> = std::fs::read_dir(&d)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries.into_iter().rev() {
            let p = e.path();
            if p.is_dir() {
                todo.push(Item::Dir(p, depth + 1));
            } else if p.is_file() {
                todo.push(Item::File(p));
            }
        }
    }
    Ok(())
}

fn rel_string(p: &Path) -> String {
    p.components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Checks, without touching the filesystem, that every `files` entry stays inside the
/// app: patterns and sources relative without `..`, destinations without `..`.
fn check_files_confined(files: &[FilesMount], origin: &str, key: &str) -> anyhow::Result<()> {
    let escapes = |p: &str| Path::new(p).is_absolute() || p.split('/').any(|s| s == "..");
    for f in files {
        match f {
            FilesMount::Pattern(pattern) if escapes(pattern) => bail!(
                "{origin}: key `{key}.files`: pattern `{}` must be relative to the \
                 manifest directory and stay inside it",
                shown(pattern)
            ),
            FilesMount::Placement { source, .. } if escapes(source) => bail!(
                "{origin}: key `{key}.files`: source `{}` must be a path relative to the \
                 manifest directory that stays inside it (no leading `/`, no `..`)",
                shown(source)
            ),
            FilesMount::Placement { destination, .. }
                if destination.split('/').any(|s| s == "..") =>
            {
                bail!(
                    "{origin}: key `{key}.files`: destination `{}` must not contain `..`",
                    shown(destination)
                )
            }
            _ => {}
        }
    }
    Ok(())
}

/// The lock's `files` and every file with its guest path (see the module doc).
fn component_files(
    c: &ComponentToml,
    base: &Path,
    origin: &str,
    key: &str,
) -> anyhow::Result<(Vec<ContentPath>, Vec<LocalFile>)> {
    let excludes = c
        .exclude_files
        .iter()
        .map(|p| {
            glob::Pattern::new(p).map_err(|e| {
                anyhow!("{origin}: key `{key}.exclude_files`: invalid pattern `{p}`: {e}")
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let excluded = |host: &Path| {
        host.strip_prefix(base)
            .map(|rel| excludes.iter().any(|p| p.matches_path(rel)))
            .unwrap_or(false)
    };
    let inside = |host: &Path| -> anyhow::Result<()> {
        let canon = host.canonicalize().unwrap_or_else(|_| host.to_path_buf());
        if !canon.starts_with(base) {
            bail!(
                "{origin}: key `{key}.files`: {} is outside the application directory; files \
                 must be inside it",
                host.display()
            );
        }
        Ok(())
    };
    check_files_confined(&c.files, origin, key)?;
    let mut lock = Vec::new();
    let mut all = Vec::new();
    fn add_file(
        host: PathBuf,
        guest: String,
        lock: &mut Vec<ContentPath>,
        all: &mut Vec<LocalFile>,
    ) {
        lock.push(ContentPath {
            content: ContentRef::file(&host),
            path: format!("/{guest}"),
        });
        all.push(LocalFile { host, path: guest });
    }
    for mount in &c.files {
        match mount {
            FilesMount::Pattern(pattern) => {
                let rel = Path::new(pattern);
                if pattern == "." || pattern.ends_with("/.") {
                    bail!("{origin}: key `{key}.files`: a file pattern can't end in `.`; use the {{ source, destination }} form or a pattern ending in **/*");
                }
                let path = base.join(pattern);
                if path.is_dir() {
                    let mut found = Vec::new();
                    walk(&path, &mut found)?;
                    for f in found {
                        if !excluded(&f) {
                            inside(&f)?;
                            let guest = rel_string(f.strip_prefix(base)?);
                            add_file(f, guest, &mut lock, &mut all);
                        }
                    }
                } else if path.is_file() {
                    inside(&path)?;
                    add_file(path, rel_string(rel), &mut lock, &mut all);
                } else if glob::Pattern::escape(pattern) != *pattern {
                    let full = format!(
                        "{}/{}",
                        glob::Pattern::escape(&base.to_string_lossy()),
                        pattern
                    );
                    let mut matched = Vec::new();
                    for m in glob::glob(&full).map_err(|e| {
                        anyhow!("{origin}: key `{key}.files`: bad pattern `{pattern}`: {e}")
                    })? {
                        let m = m.map_err(|e| anyhow!("{origin}: key `{key}.files`: {e}"))?;
                        if m.is_file() {
                            matched.push(m);
                        }
                    }
                    matched.sort();
                    for m in matched {
                        inside(&m)?;
                        if !excluded(&m) {
                            let guest = rel_string(m.strip_prefix(base)?);
                            add_file(m, guest, &mut lock, &mut all);
                        }
                    }
                } else {
                    bail!("{origin}: key `{key}.files`: `{pattern}` does not exist and doesn't appear to be a glob pattern");
                }
            }
            FilesMount::Placement {
                source,
                destination,
            } => {
                let src = base.join(source);
                let dest = rel_string(Path::new(destination));
                if src.is_dir() {
                    inside(&src)?;
                    let mut found = Vec::new();
                    walk(&src, &mut found)?;
                    let keep: Vec<PathBuf> = found.into_iter().filter(|f| !excluded(f)).collect();
                    if c.exclude_files.is_empty() {
                        lock.push(ContentPath {
                            content: ContentRef::file(&src),
                            path: format!("/{dest}"),
                        });
                        for f in keep {
                            let inner = rel_string(f.strip_prefix(&src)?);
                            let guest = if dest.is_empty() {
                                inner
                            } else {
                                format!("{dest}/{inner}")
                            };
                            all.push(LocalFile {
                                host: f,
                                path: guest,
                            });
                        }
                    } else {
                        for f in keep {
                            let inner = rel_string(f.strip_prefix(&src)?);
                            let guest = if dest.is_empty() {
                                inner
                            } else {
                                format!("{dest}/{inner}")
                            };
                            add_file(f, guest, &mut lock, &mut all);
                        }
                    }
                } else if src.is_file() {
                    inside(&src)?;
                    if dest.is_empty() {
                        bail!("{origin}: key `{key}.files`: \"{destination}\" is not a valid destination file name");
                    }
                    add_file(src, dest, &mut lock, &mut all);
                } else {
                    bail!(
                        "{origin}: key `{key}.files`: source `{source}` not found at {}",
                        src.display()
                    );
                }
            }
        }
    }
    Ok((lock, all))
}
