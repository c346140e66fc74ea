//! The compile plan of an app: which Wasm the runtime compiles, decided once, from the app
//! model, for both sides of the compile cache. The runtime's load ([`crate::LoadedApp`])
//! compiles each unit (or loads it from the cache); the shim's precompile (crate
//! `spin-engine`) compiles the same units before the container starts. Both build the plan
//! with [`CompilePlan::of`] from the same [`App`], so the bytes each side compiles (a
//! component's source, with its middleware composed in front of it), and so the cache
//! entries they name ([`super::compile_cache::CompileCache::entry_name_for`]), are the same
//! by construction: a difference would be a silent cache miss, the container compiling
//! inside its own memory limit.
//!
//! Per unit the plan says what else decides its compiled form: whether an event trigger
//! runs it (its code must be final at start: no baseline tier), how HTTP triggers use it
//! (handler or WAGI command). A wasip1 core module (Spin 1.x or not) and a WASIp3 snapshot
//! component are converted by the compile step itself
//! ([`super::compile_cache::compile_component`]), keyed by the bytes as they ship.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use anyhow::{bail, Context as _};

use super::tier::TieringConfig;
use crate::app::http_trigger::{Middleware, WagiConfig};
use crate::app::{App, Component, Content};

/// How HTTP triggers use a component.
#[derive(Debug, Clone)]
pub enum HttpUse {
    /// It exports an HTTP handler (`wasi:http`, or Spin 1.x's `inbound-http`).
    Handler,
    /// A WASI command run per request (WAGI), with its trigger's settings.
    Wagi(Arc<WagiConfig>),
}

/// One unit of the plan: a component a trigger runs, as the runtime compiles it.
#[derive(Debug, Clone)]
pub struct Unit<'a> {
    /// The component.
    pub component: &'a Component,
    /// How HTTP triggers use it, if any does.
    pub http: Option<HttpUse>,
    /// Whether a trigger other than HTTP (Redis, MQTT, cron, command, ...) runs it.
    pub event: bool,
}

impl Unit<'_> {
    /// The component id.
    pub fn id(&self) -> &str {
        &self.component.id
    }

    /// The component's Wasm source as it ships.
    pub fn source(&self) -> &Content {
        &self.component.source
    }

    /// The middleware composed in front of it, outermost first (empty: compiled as it
    /// ships).
    pub fn middleware(&self) -> &[Middleware] {
        &self.component.middleware
    }

    /// Whether a unit of `len` bytes (after composition) that the cache misses starts on
    /// the baseline compiler under `tiering`: never for a component an event trigger runs
    /// (its trigger loop keeps the code it started with).
    pub fn starts_on_baseline(&self, tiering: &TieringConfig, len: usize) -> bool {
        !self.event && tiering.applies(len)
    }

    /// The Wasm the runtime compiles for it: the source, with its middleware composed in
    /// front of it ([`super::middleware::compose`]). Errors name the component.
    pub fn wasm(&self) -> anyhow::Result<Arc<[u8]>> {
        let id = self.id();
        let bytes = self
            .source()
            .read()
            .with_context(|| format!("component `{id}`: cannot read its Wasm source"))?;
        if self.middleware().is_empty() {
            return Ok(bytes);
        }
        let mut parts = Vec::new();
        for m in self.middleware() {
            let b = m.source.read().with_context(|| {
                format!("component `{id}`: middleware {}: cannot read it", m.name)
            })?;
            parts.push((m.name.clone(), m.inherit.clone(), b.to_vec()));
        }
        tracing::info!(
            component = %id,
            middleware = parts.len(),
            "composing HTTP middleware in front of the component"
        );
        Ok(super::middleware::compose(id, &bytes, &parts)?.into())
    }
}

/// The units of an app (see the module docs).
#[derive(Debug, Clone)]
pub struct CompilePlan<'a> {
    /// One unit per component a trigger runs, in component id order.
    pub units: Vec<Unit<'a>>,
}

impl<'a> CompilePlan<'a> {
    /// The plan of `app`: as Spin's trigger executors, only components a trigger uses are
    /// compiled (others, such as middleware listed as app components, may not link on
    /// their own). A component used both by a WAGI trigger and by another HTTP trigger is
    /// refused, naming it.
    pub fn of(app: &'a App) -> anyhow::Result<CompilePlan<'a>> {
        let mut http: BTreeMap<&str, HttpUse> = BTreeMap::new();
        for t in &app.http_triggers {
            if t.component.is_empty() {
                continue;
            }
            let use_ = match &t.wagi {
                Some(w) => HttpUse::Wagi(w.clone()),
                None => HttpUse::Handler,
            };
            match (http.get(t.component.as_str()), &use_) {
                (Some(HttpUse::Wagi(_)), HttpUse::Handler)
                | (Some(HttpUse::Handler), HttpUse::Wagi(_)) => bail!(
                    "component `{}` is used by a WAGI trigger and by an HTTP trigger with \
                     another executor; a component is either a WASI command (WAGI) or an HTTP \
                     handler: give each trigger its own component",
                    t.component
                ),
                (Some(_), _) => {}
                (None, _) => {
                    http.insert(t.component.as_str(), use_);
                }
            }
        }
        let event: HashSet<&str> = app.event_triggers.components().map(|(_, _, c)| c).collect();
        let mut units = Vec::new();
        for component in app.components.values() {
            let id = component.id.as_str();
            let http = http.get(id).cloned();
            let event = event.contains(id);
            if http.is_none() && !event {
                tracing::debug!(component = %id, "not used by any trigger: not loaded");
                continue;
            }
            units.push(Unit {
                component,
                http,
                event,
            });
        }
        Ok(CompilePlan { units })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(text: &str) -> anyhow::Result<App> {
        let lock = spin_app_format::manifest::lock_sources(text, "m")?;
        App::from_locked(lock, &crate::app::FileUrlResolver)
    }

    #[test]
    fn units_are_the_components_triggers_run_with_their_use() {
        let app = app(r#"spin_manifest_version = 2
[application]
name = "a"
[[trigger.http]]
route = "/web"
component = "web"
dependencies.middleware = [{ component = "mw" }]
[[trigger.http]]
route = "/cgi/..."
component = "cgi"
executor = { type = "wagi" }
[[trigger.cron]]
cron_expression = "* * * * * *"
component = "worker"
[component.web]
source = "web.wasm"
[component.cgi]
source = "cgi.wasm"
[component.worker]
source = "worker.wasm"
[component.mw]
source = "mw.wasm"
[component.unused]
source = "unused.wasm"
"#)
        .unwrap();
        let plan = CompilePlan::of(&app).unwrap();
        let got: Vec<_> = plan
            .units
            .iter()
            .map(|u| {
                let http = match &u.http {
                    Some(HttpUse::Handler) => "handler",
                    Some(HttpUse::Wagi(_)) => "wagi",
                    None => "-",
                };
                (u.id(), http, u.event, u.middleware().len())
            })
            .collect();
        assert_eq!(
            got,
            [
                ("cgi", "wagi", false, 0),
                ("web", "handler", false, 1),
                ("worker", "-", true, 0)
            ]
        );
        let tiering = TieringConfig {
            enabled: true,
            min_bytes: 1,
        };
        assert!(plan.units[1].starts_on_baseline(&tiering, 10));
        assert!(!plan.units[2].starts_on_baseline(&tiering, 10));
    }

    #[test]
    fn a_component_is_either_wagi_or_an_http_handler() {
        let app = app(r#"spin_manifest_version = 2
[application]
name = "a"
[[trigger.http]]
route = "/a"
component = "c"
[[trigger.http]]
route = "/b"
component = "c"
executor = { type = "wagi" }
[component.c]
source = "c.wasm"
"#)
        .unwrap();
        let e = CompilePlan::of(&app).unwrap_err().to_string();
        assert!(e.contains("component `c`") && e.contains("WAGI"), "{e}");
    }
}
