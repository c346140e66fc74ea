//! Application variables: resolution at start, `{{ name }}` templates, and the guest
//! interfaces `fermyon:spin/variables@2.0.0`, `fermyon:spin/config` and
//! `wasi:config/store@0.2.0-draft-2024-09-27`.
//!
//! Precedence: the runtime config's `[[variables_provider]]` entries in order (Spin's
//! `static`, `env`, `vault`, `openbao` and `azure_key_vault` types, see [`Provider`]), then
//! (as SpinKube) container env `NAME` (the variable's name upper-cased) > `SPIN_VARIABLE_NAME` > the manifest default. Every
//! app variable is resolved when the app starts, so a required variable without a value
//! fails the start with its name.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

use super::bindings::fermyon::spin::config as spin_config;
use super::bindings::fermyon::spin2_0_0::variables as spin_variables;
use super::bindings::wasi::config::store as wasi_config;
use super::feature::HostFeature;
pub use super::feature::{Resolved, ValueSource};
use super::secret_stores::{self, AzureCredential, Remote, Store};
use super::HostState;
use crate::app::Variable;

/// Prefix of the environment variables Spin's env provider reads.
pub const SPIN_VARIABLE_PREFIX: &str = "SPIN_VARIABLE_";

/// One `[[variables_provider]]` (or Spin 1's `[[config_provider]]`) of the runtime config,
/// as Spin's `VariableProviderConfiguration` defines them.
#[derive(Clone, PartialEq, Eq)]
pub enum Provider {
    /// `type = "static"`, `values = { name = "value", ... }`.
    Static(BTreeMap<String, String>),
    /// `type = "env"`: `<prefix>_<NAME>` (prefix default `SPIN_VARIABLE`) from the
    /// container's environment, else from the `dotenv_path` file.
    Env {
        /// The prefix, without the joining `_`.
        prefix: String,
        /// The dotenv file's entries.
        dotenv: BTreeMap<String, String>,
    },
    /// `type = "vault"`, `"openbao"` or `"azure_key_vault"`: a secret store asked over
    /// HTTPS ([`secret_stores`]).
    Remote(Arc<Remote>),
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Static(v) => f
                .debug_struct("Static")
                .field("names", &v.keys().collect::<Vec<_>>())
                .finish(),
            Provider::Env { prefix, dotenv } => f
                .debug_struct("Env")
                .field("prefix", prefix)
                .field("dotenv_names", &dotenv.keys().collect::<Vec<_>>())
                .finish(),
            Provider::Remote(r) => r.fmt(f),
        }
    }
}

impl Provider {
    fn get(&self, name: &str, env: &HashMap<String, String>) -> anyhow::Result<Option<String>> {
        Ok(match self {
            Provider::Static(values) => values.get(name).cloned(),
            Provider::Remote(store) => store.get(name, env)?,
            Provider::Env { prefix, dotenv } => {
                let key = if prefix.is_empty() {
                    name.to_ascii_uppercase()
                } else {
                    format!("{prefix}_{}", name.to_ascii_uppercase())
                };
                env.get(&key).or_else(|| dotenv.get(&key)).cloned()
            }
        })
    }
}

/// Parses the `variables_provider` (or `config_provider`) array of a runtime config;
/// relative `dotenv_path`s resolve against `base`; Azure credentials missing from an
/// `azure_key_vault` entry come from the container's `AZURE_*` environment when the
/// provider is first asked.
pub fn parse_providers(
    value: &toml::Value,
    section: &str,
    base: &Path,
    origin: &str,
) -> anyhow::Result<Vec<Provider>> {
    let list = value.as_array().with_context(|| {
        format!("{origin}: `{section}` must be an array of tables ([[{section}]])")
    })?;
    let mut out = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let key = format!("{section}[{i}]");
        let t = entry
            .as_table()
            .with_context(|| format!("{origin}: `{key}` must be a table"))?;
        let kind = t.get("type").and_then(|v| v.as_str()).with_context(|| {
            format!("{origin}: `{key}.type` is missing (\"static\" or \"env\")")
        })?;
        let allowed: &[&str] = match kind {
            "static" => &["type", "values"],
            "env" => &["type", "prefix", "dotenv_path"],
            "vault" | "openbao" => &["type", "url", "token", "mount", "prefix"],
            "azure_key_vault" => &[
                "type",
                "vault_url",
                "client_id",
                "client_secret",
                "tenant_id",
                "authority_host",
            ],
            other => anyhow::bail!(
                "{origin}: `{key}.type` = \"{other}\" is not a variables provider type (Spin's are \
                 static, env, vault, openbao, azure_key_vault)"
            ),
        };
        if let Some(unknown) = t.keys().find(|k| !allowed.contains(&k.as_str())) {
            anyhow::bail!("{origin}: `{key}.{unknown}` is not a field of a `{kind}` provider");
        }
        let text = |field: &str| -> anyhow::Result<Option<String>> {
            t.get(field)
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .with_context(|| format!("{origin}: `{key}.{field}` must be a string"))
                })
                .transpose()
        };
        let required = |field: &str| -> anyhow::Result<String> {
            text(field)?
                .with_context(|| format!("{origin}: `{key}.{field}` is missing ({kind} provider)"))
        };
        out.push(match kind {
            "vault" | "openbao" => Provider::Remote(Remote::new(Store::Vault {
                kind: if kind == "vault" { "vault" } else { "openbao" },
                url: required("url")?,
                token: required("token")?,
                mount: required("mount")?,
                prefix: text("prefix")?,
            })),
            "azure_key_vault" => {
                let authority = match text("authority_host")? {
                    Some(name) => Some(
                        secret_stores::azure_authority(&name)
                            .with_context(|| {
                                format!(
                                    "{origin}: `{key}.authority_host` = \"{name}\" is not an \
                                     Azure cloud (AzurePublicCloud, AzureChina, \
                                     AzureGovernment, AzureGermany)"
                                )
                            })?
                            .to_string(),
                    ),
                    None => None,
                };
                let given = (
                    text("client_id")?,
                    text("client_secret")?,
                    text("tenant_id")?,
                );
                let credential = match given {
                    (Some(client_id), Some(secret), Some(tenant)) => {
                        Some(AzureCredential::ClientSecret {
                            tenant,
                            client_id,
                            secret,
                        })
                    }
                    (None, None, None) => None,
                    _ => anyhow::bail!(
                        "{origin}: `{key}` gives some but not all of `client_id`, \
                         `client_secret` and `tenant_id`: give all three, or none to use the \
                         AZURE_* environment (client secret or workload identity)"
                    ),
                };
                Provider::Remote(Remote::new(Store::AzureKeyVault {
                    vault_url: required("vault_url")?,
                    authority,
                    credential,
                }))
            }
            "static" => {
                let mut values = BTreeMap::new();
                if let Some(v) = t.get("values") {
                    let v = v
                        .as_table()
                        .with_context(|| format!("{origin}: `{key}.values` must be a table"))?;
                    for (name, value) in v {
                        let value = value.as_str().with_context(|| {
                            format!("{origin}: `{key}.values.{name}` must be a string")
                        })?;
                        values.insert(name.clone(), value.to_string());
                    }
                }
                Provider::Static(values)
            }
            _ => {
                let prefix = match t.get("prefix") {
                    None => "SPIN_VARIABLE".to_string(),
                    Some(v) => v
                        .as_str()
                        .with_context(|| format!("{origin}: `{key}.prefix` must be a string"))?
                        .to_string(),
                };
                let mut dotenv = BTreeMap::new();
                if let Some(p) = t.get("dotenv_path") {
                    let p = p.as_str().with_context(|| {
                        format!("{origin}: `{key}.dotenv_path` must be a string")
                    })?;
                    let path = base.join(p);
                    let iter = dotenvy::from_path_iter(&path).map_err(|e| {
                        anyhow::anyhow!(
                            "{origin}: `{key}.dotenv_path`: cannot read {}: {e}",
                            path.display()
                        )
                    })?;
                    for item in iter {
                        let (k, v) =
                            item.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                        dotenv.insert(k, v);
                    }
                }
                Provider::Env { prefix, dotenv }
            }
        });
    }
    Ok(out)
}

/// Checks a variable or config key the way Spin does: lower-case ASCII letters, digits and
/// single `_` separators, starting with a letter and ending with a letter or digit.
pub fn check_key(key: &str) -> Result<(), String> {
    let problem = if key.is_empty() {
        "must not be empty"
    } else if !key.starts_with(|c: char| c.is_ascii_lowercase()) {
        "must start with a lower-case ASCII letter"
    } else if !key.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        "must end with a lower-case ASCII letter or a digit"
    } else if !key
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        "may contain only lower-case ASCII letters, digits and `_`"
    } else if key.contains("__") {
        "must not contain `__`"
    } else {
        return Ok(());
    };
    Err(format!("invalid variable name `{key}`: {problem}"))
}

/// Resolves every application variable from `env` (a snapshot of the container's
/// environment) and the manifest defaults.
///
/// Fails naming the first required variable that has no value, and how to provide it.
pub fn resolve_all(
    variables: &BTreeMap<String, Variable>,
    env: &HashMap<String, String>,
) -> anyhow::Result<BTreeMap<String, Resolved>> {
    resolve_with(variables, env, &[])
}

/// [`resolve_all`] with the runtime config's providers first, in order.
pub fn resolve_with(
    variables: &BTreeMap<String, Variable>,
    env: &HashMap<String, String>,
    providers: &[Provider],
) -> anyhow::Result<BTreeMap<String, Resolved>> {
    let mut out = BTreeMap::new();
    for (name, decl) in variables {
        let upper = name.to_ascii_uppercase();
        let spin_name = format!("{SPIN_VARIABLE_PREFIX}{upper}");
        let mut provided = None;
        for (i, p) in providers.iter().enumerate() {
            if let Some(v) = p
                .get(name, env)
                .with_context(|| format!("application variable `{name}`"))?
            {
                provided = Some((v, ValueSource::Provider(i)));
                break;
            }
        }
        let (value, source) = if let Some(found) = provided {
            found
        } else if let Some(v) = env.get(&upper) {
            (v.clone(), ValueSource::ContainerEnv)
        } else if let Some(v) = env.get(&spin_name) {
            (v.clone(), ValueSource::SpinVariableEnv)
        } else if let Some(v) = &decl.default {
            (v.clone(), ValueSource::Default)
        } else {
            anyhow::bail!(
                "required application variable `{name}` has no value: set the environment \
                 variable `{upper}` (or `{spin_name}`), or give it a default in spin.toml"
            );
        };
        if decl.secret {
            tracing::debug!(variable = %name, ?source, "resolved secret variable");
        } else {
            tracing::debug!(variable = %name, ?source, %value, "resolved variable");
        }
        out.insert(
            name.clone(),
            Resolved {
                value,
                source,
                secret: decl.secret,
            },
        );
    }
    Ok(out)
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part<'a> {
    Literal(&'a str),
    Variable(&'a str),
}

/// Splits `template` into literal text and `{{ name }}` references.
fn parse_template(template: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            parts.push(Part::Literal(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("template `{template}` has `{{{{` without a closing `}}}}`"))?;
        let name = after[..end].trim();
        check_key(name).map_err(|e| format!("template `{template}`: {e}"))?;
        parts.push(Part::Variable(name));
        rest = &after[end + 2..];
    }
    if rest.contains("}}") {
        return Err(format!(
            "template `{template}` has `}}}}` without an opening `{{{{`"
        ));
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest));
    }
    Ok(parts)
}

/// Expands the `{{ name }}` placeholders of `template` with `lookup`.
///
/// Errors name the template and the unknown variable.
pub fn render_template(
    template: &str,
    mut lookup: impl FnMut(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    for part in parse_template(template)? {
        match part {
            Part::Literal(text) => out.push_str(text),
            Part::Variable(name) => match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    return Err(format!(
                        "template `{template}` refers to application variable `{name}`, which \
                         is not declared in [variables]"
                    ))
                }
            },
        }
    }
    Ok(out)
}

/// Whether a value was built from a secret variable (then it is never logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentValue {
    /// The expanded value.
    pub value: String,
    /// True when any referenced variable is secret.
    pub secret: bool,
}

/// Expands a component's `variables` table against the resolved app variables.
pub fn component_values(
    component_id: &str,
    templates: &BTreeMap<String, String>,
    resolved: &BTreeMap<String, Resolved>,
) -> anyhow::Result<HashMap<String, ComponentValue>> {
    let mut out = HashMap::new();
    for (key, template) in templates {
        check_key(key).map_err(|e| anyhow::anyhow!("component `{component_id}` variable: {e}"))?;
        let mut secret = false;
        let value = render_template(template, |name| {
            let r = resolved.get(name)?;
            secret |= r.secret;
            Some(r.value.clone())
        })
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("component `{component_id}` variable `{key}`"))?;
        out.insert(key.clone(), ComponentValue { value, secret });
    }
    Ok(out)
}

/// The variables host feature: `[[variables_provider]]` (and `[[config_provider]]`), every
/// application variable resolved once per app, each component's expanded `variables`, and
/// `fermyon:spin/variables@2.0.0`, `fermyon:spin/config` and `wasi:config/store`.
pub struct Variables;

/// Every application variable, resolved once per app.
pub struct AppVariables {
    /// By name.
    pub resolved: BTreeMap<String, Resolved>,
}

/// One component's variables, as its instances read them.
#[derive(Clone)]
pub struct ComponentVariables {
    component_id: Arc<str>,
    values: Arc<HashMap<String, ComponentValue>>,
}

impl HostFeature for Variables {
    const SECTIONS: &'static [&'static str] = &["variables_provider", "config_provider"];
    type Config = Vec<Provider>;
    type App = AppVariables;
    type Instance = ComponentVariables;

    fn parse(source: &super::runtime_config::Source<'_>) -> anyhow::Result<Vec<Provider>> {
        // Both sections, in the file's order.
        let mut out = Vec::new();
        for section in source.keys() {
            if Self::SECTIONS.contains(&section) {
                if let Some(value) = source.take(section) {
                    out.extend(parse_providers(
                        value,
                        section,
                        source.base_dir(),
                        source.origin(),
                    )?);
                }
            }
        }
        Ok(out)
    }

    fn build(
        config: &Vec<Provider>,
        cx: &super::feature::AppContext<'_>,
    ) -> anyhow::Result<AppVariables> {
        Ok(AppVariables {
            resolved: resolve_with(&cx.app.variables, &cx.host.env, config)?,
        })
    }

    fn instance(
        _: &AppVariables,
        cx: &super::feature::ComponentContext<'_>,
    ) -> anyhow::Result<ComponentVariables> {
        let c = cx.component;
        Ok(ComponentVariables {
            component_id: c.id.as_str().into(),
            values: Arc::new(component_values(&c.id, &c.variables, cx.variables)?),
        })
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentVariables,
    ) -> anyhow::Result<()> {
        type H = wasmtime::component::HasSelf<ComponentVariables>;
        spin_variables::add_to_linker::<T, H>(linker, get)?;
        spin_config::add_to_linker::<T, H>(linker, get)?;
        wasi_config::add_to_linker::<T, H>(linker, get)?;
        Ok(())
    }
}

impl HostState {
    /// The value of component variable `key`, owned: for Spin 4's
    /// `spin:variables/variables@3.0.0` ([`crate::p3`]).
    pub(crate) fn variable_for_guest(&self, key: &str) -> Result<String, VarError> {
        self.features.variables.variable(key).map(str::to_string)
    }
}

impl ComponentVariables {
    /// The value of component variable `key`, with Spin's error cases.
    fn variable(&self, key: &str) -> Result<&str, VarError> {
        check_key(key).map_err(VarError::Invalid)?;
        self.values
            .get(key)
            .map(|v| v.value.as_str())
            .ok_or_else(|| {
                VarError::Undefined(format!(
                    "no variable `{key}` for component `{}`: declare it in \
                     [component.{}.variables]",
                    self.component_id, self.component_id
                ))
            })
    }
}

/// Why a guest's variable lookup failed (Spin's error cases).
pub(crate) enum VarError {
    /// The name is not a valid variable name.
    Invalid(String),
    /// The component declares no such variable.
    Undefined(String),
}

impl spin_variables::Host for ComponentVariables {
    fn get(&mut self, name: String) -> wasmtime::Result<Result<String, spin_variables::Error>> {
        Ok(match self.variable(&name) {
            Ok(v) => Ok(v.to_string()),
            Err(VarError::Invalid(e)) => Err(spin_variables::Error::InvalidName(e)),
            Err(VarError::Undefined(e)) => Err(spin_variables::Error::Undefined(e)),
        })
    }
}

impl spin_config::Host for ComponentVariables {
    fn get_config(&mut self, key: String) -> wasmtime::Result<Result<String, spin_config::Error>> {
        Ok(match self.variable(&key) {
            Ok(v) => Ok(v.to_string()),
            Err(VarError::Invalid(e)) => Err(spin_config::Error::InvalidKey(e)),
            Err(VarError::Undefined(e)) => Err(spin_config::Error::Provider(e)),
        })
    }
}

impl wasi_config::Host for ComponentVariables {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, wasi_config::Error>> {
        // An undeclared key has no value; a malformed one is reported as `upstream`
        // (wasi:config has no "invalid key" case).
        Ok(match self.variable(&key) {
            Ok(v) => Ok(Some(v.to_string())),
            Err(VarError::Undefined(_)) => Ok(None),
            Err(VarError::Invalid(e)) => Err(wasi_config::Error::Upstream(e)),
        })
    }

    fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, wasi_config::Error>> {
        let mut all: Vec<(String, String)> = self
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect();
        all.sort();
        Ok(Ok(all))
    }
}
