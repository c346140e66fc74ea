//! From a locked app (parsed by the app format crate) to the runtime's [`App`]: content
//! resolved, and everything this runtime cannot run refused with the key and the reason.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use spin_app_format::locked::WASM_CONTENT_TYPE;
use spin_app_format::untrusted::shown;
use spin_app_format::{ContentRef, HttpExecutor, LockedApp, TriggerConfig};

use super::{App, Component, Content, EventTriggers, FileMount, HttpTrigger, Trigger, Variable};

/// Maps locked-app content references (`source` and/or `digest`) to bytes or host paths.
/// The shim implements it over the artifact it materialised; [`FileUrlResolver`] handles
/// `file://`. Inline content is decoded before and never reaches a resolver.
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
        match (&content.source, content.file_path()) {
            (Some(_), Some(path)) => Ok(Content::Path(path)),
            (Some(source), None) => {
                bail!("content source `{}` is not a file:// URL", shown(source))
            }
            (None, _) => bail!(
                "content {} is referenced by digest only; a content-store resolver is needed",
                shown(content.digest.as_deref().unwrap_or("<no digest>"))
            ),
        }
    }
}

fn content(c: &ContentRef, resolver: &dyn ContentResolver) -> anyhow::Result<Content> {
    if let Some(bytes) = &c.inline {
        return Ok(Content::Bytes(Arc::from(bytes.as_slice())));
    }
    if c.source.is_none() && c.digest.is_none() {
        bail!("content has none of `source`, `digest` or `inline`");
    }
    resolver.resolve(c)
}

/// Host requirements this runtime meets: HTTP middleware (trigger dependencies).
const SUPPORTED_HOST_REQUIREMENTS: &[&str] = &[spin_app_format::locked::MIDDLEWARE_KEY];

/// `executor = { type = "wasip3-unstable" }` of Spin 3.x apps with a WASIp3 handler.
const WASIP3_UNSTABLE: &str = "wasip3-unstable";

/// Component ids name staging directories and compiled entries, file paths name staged
/// files, and ids appear in every message about their trigger or component: those of
/// both sources (a manifest's and a lock's, and the ids of components cloned for a
/// trigger's middleware) are checked before anything is built from them or says them.
fn check_ids(lock: &LockedApp, origin: &str) -> anyhow::Result<()> {
    for t in &lock.triggers {
        spin_app_format::ids::check_trigger_id(&t.id).map_err(|e| {
            anyhow!(
                "{origin}: trigger id `{}` ([[trigger.{}]]) is invalid: {e}",
                shown(&t.id),
                shown(&t.trigger_type)
            )
        })?;
    }
    for c in &lock.components {
        if let Some(e) = spin_app_format::ids::component_id_error("component", &c.id) {
            return Err(e.context(origin.to_string()));
        }
        for f in &c.files {
            spin_app_format::locked::check_guest_path(&f.path).map_err(|e| {
                anyhow!(
                    "{origin}: component `{}`: file path `{}` is refused: {e}",
                    c.id,
                    shown(&f.path)
                )
            })?;
        }
    }
    Ok(())
}

pub(super) fn convert(
    mut lock: LockedApp,
    resolver: &dyn ContentResolver,
    origin: &str,
) -> anyhow::Result<App> {
    // A lock written by Spin has them on the components already; this is a no-op then.
    lock.move_trigger_dependencies_to_components();
    check_ids(&lock, origin)?;
    let unmet = lock.unmet_host_requirements(SUPPORTED_HOST_REQUIREMENTS);
    if !unmet.is_empty() {
        bail!(
            "{origin}: key `host_requirements`: the app requires {}, which this runtime does not support",
            unmet.join(", ")
        );
    }
    let name = lock
        .metadata_str("name")
        .ok_or_else(|| anyhow!("{origin}: key `metadata.name` is missing"))?
        .to_string();

    let mut http_triggers = Vec::new();
    let mut event_triggers = EventTriggers::default();
    for t in &lock.triggers {
        let id = t.id.clone();
        match TriggerConfig::of(t).map_err(|e| anyhow!("{origin}: {e:#}"))? {
            TriggerConfig::Other { trigger_type, .. } => bail!(
                "{origin}: trigger `{}` ([[trigger.{ty}]]): trigger type `{ty}` \
                 is not supported by this runtime (supported: http, redis, mqtt, cron, command, sqs, nats)",
                t.id,
                ty = shown(&trigger_type)
            ),
            TriggerConfig::Redis(config) => event_triggers.redis.push(Trigger { id, config }),
            TriggerConfig::Mqtt(config) => event_triggers.mqtt.push(Trigger { id, config }),
            TriggerConfig::Cron(config) => event_triggers.cron.push(Trigger { id, config }),
            TriggerConfig::Command(config) => event_triggers.command.push(Trigger { id, config }),
            TriggerConfig::Sqs(config) => event_triggers.sqs.push(Trigger { id, config }),
            TriggerConfig::Nats(config) => event_triggers.nats.push(Trigger { id, config }),
            TriggerConfig::Http(h) => {
                h.check(&t.id).map_err(|e| anyhow!("{origin}: {e}"))?;
                let mut wagi = None;
                match &h.executor {
                    None | Some(HttpExecutor::Http) => {}
                    Some(HttpExecutor::Wagi { argv, entrypoint }) => {
                        // Spin runs a WAGI module's `_start` (its `wasi:cli/run`); another
                        // entry point is Spin 1's deprecated setting.
                        if entrypoint != spin_app_format::trigger::WAGI_DEFAULT_ENTRYPOINT {
                            bail!(
                                "{origin}: http trigger `{}`: wagi `entrypoint` = `{}`: only \
                                 `_start` is run (as Spin 2 and later do); export the program's \
                                 entry as `_start` (a `fn main` program) or remove the key",
                                t.id,
                                shown(entrypoint)
                            );
                        }
                        wagi = Some(Arc::new(super::http_trigger::WagiConfig { argv: argv.clone() }));
                    }
                    // Spin 3.x's opt-in to WASIp3 handlers (Spin 4 detects them from the
                    // export, as this runtime does): the same executor.
                    Some(HttpExecutor::Other {
                        executor_type,
                        config,
                    }) if executor_type == WASIP3_UNSTABLE && config.is_empty() => {}
                    Some(other) => bail!(
                        "{origin}: http trigger `{}`: key `executor`: executor type `{}` is not \
                         supported (the default `http`/`spin` executor, `wagi` and \
                         `{WASIP3_UNSTABLE}`)",
                        t.id,
                        other.type_name()
                    ),
                }
                http_triggers.push(HttpTrigger {
                    id: t.id.clone(),
                    route: h.route,
                    component: h.component.unwrap_or_default(),
                    static_response: h.static_response.map(Arc::new),
                    wagi,
                });
            }
        }
    }

    event_triggers.read_settings(&lock, origin)?;
    let version = lock.metadata_str("version").map(str::to_string);
    let description = lock.metadata_str("description").map(str::to_string);
    let mut components = BTreeMap::new();
    for c in lock.components {
        let key = format!("component `{}`", c.id);
        if !c.dependencies.is_empty() {
            bail!(
                "{origin}: {key}: component dependencies (imports satisfied by other \
                 components) are not supported by this runtime; compose the component before \
                 deploying (e.g. `wac plug`)"
            );
        }
        let mut middleware = Vec::new();
        for (role, deps) in &c.trigger_dependencies {
            let using = c
                .metadata
                .get("resolve-trigger-dependencies-using")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("http");
            if role != spin_app_format::locked::MIDDLEWARE_KEY || using != "http" {
                bail!(
                    "{origin}: {key}: {} trigger dependencies `{}` are not supported \
                     (the HTTP trigger's only trigger dependency is `middleware`)",
                    shown(using),
                    shown(role)
                );
            }
            for (i, d) in deps.iter().enumerate() {
                let name = format!(
                    "dependencies.middleware[{i}] ({})",
                    shown(
                        d.source
                            .content
                            .source
                            .as_deref()
                            .or(d.source.content.digest.as_deref())
                            .unwrap_or("inline")
                    )
                );
                if d.source.content_type != WASM_CONTENT_TYPE {
                    bail!(
                        "{origin}: {key}: {name}: content type `{}` is not supported \
                         ({WASM_CONTENT_TYPE} is)",
                        shown(&d.source.content_type)
                    );
                }
                let source = content(&d.source.content, resolver)
                    .with_context(|| format!("{origin}: {key}: {name}"))?;
                middleware.push(super::http_trigger::Middleware {
                    name,
                    inherit: (&d.inherit).into(),
                    source,
                });
            }
        }
        if c.source.content_type != WASM_CONTENT_TYPE {
            bail!(
                "{origin}: {key}: source content type `{}` is not supported ({WASM_CONTENT_TYPE} is)",
                shown(&c.source.content_type)
            );
        }
        let source = content(&c.source.content, resolver)
            .with_context(|| format!("{origin}: {key}: source"))?;
        let mut files = Vec::new();
        for f in &c.files {
            let data = content(&f.content, resolver)
                .with_context(|| format!("{origin}: {key}: file `{}`", shown(&f.path)))?;
            let rel = f.path.trim_start_matches('/').trim_end_matches('/');
            let destination = format!("/{rel}");
            match data {
                Content::Path(p) if p.is_dir() => files.push(FileMount::Directory {
                    source: p,
                    destination: if rel.is_empty() {
                        String::new()
                    } else {
                        destination
                    },
                }),
                content => files.push(FileMount::File {
                    content,
                    destination,
                }),
            }
        }
        let allowed_outbound_hosts = c
            .allowed_outbound_hosts()
            .map_err(|e| anyhow!("{origin}: {e:#}"))?;
        components.insert(
            c.id.clone(),
            Component {
                key_value_stores: c.metadata_list("key_value_stores")?,
                sqlite_databases: c.metadata_list("databases")?,
                ai_models: c.metadata_list("ai_models")?,
                id: c.id,
                source,
                files,
                environment: c.env,
                allowed_outbound_hosts,
                variables: c.config,
                middleware,
            },
        );
    }

    let variables = lock
        .variables
        .iter()
        .map(|(name, v)| {
            (
                name.clone(),
                Variable {
                    default: v.default.clone(),
                    secret: v.secret,
                },
            )
        })
        .collect();
    let app = App {
        name,
        version,
        description,
        variables,
        http_triggers,
        event_triggers,
        components,
        oci_image_digest: None,
    };
    app.validate(origin)?;
    Ok(app)
}
