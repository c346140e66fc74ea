//! Spin 4's HTTP middleware: `[[trigger.http]] dependencies.middleware = [..]` composes
//! each listed component in front of the trigger's component, outermost first, as Spin 4
//! does (its `HttpMiddlewareComposer`): every middleware imports and exports
//! `wasi:http/handler@0.3.0` (WASIp3); the innermost middleware's import is satisfied by
//! the component's export, each outer one's by the next inner one's, and the composition
//! exports the outermost handler. The result is one component, compiled and cached like
//! any other (keyed by its bytes).
//!
//! Middleware runs inside the component and would reach the host with the component's
//! configuration. As Spin's deny adapter does, every import of a middleware that uses
//! configuration it does not inherit (`inherit_configuration`; nothing by default) is cut
//! off from the host: the composition imports it under a name of its own
//! ([`DENIED_PREFIX`]...), which [`define_denied`] links to functions that trap with a
//! message naming the interface, the configuration and the key to add. A middleware that
//! imports such an interface and never calls it (Rust's standard library imports
//! `wasi:cli/environment`) runs.

use anyhow::{bail, Context};
use wac_graph::types::{ItemKind, Package};
use wac_graph::{CompositionGraph, EncodeOptions};

/// The interface middleware chains on (after a snapshot component is retargeted).
pub const HANDLER: &str = "wasi:http/handler@0.3.0";

/// First label of the import names under which a composition imports what a middleware
/// may not reach.
pub const DENIED_PREFIX: &str = "spin-denied";

/// Configuration a component dependency may inherit (Spin's capability sets), with the
/// interfaces (package/interface, any version) that use it.
const CAPABILITIES: &[(&str, &[&str])] = &[
    ("ai_models", &["fermyon:spin/llm"]),
    (
        "allowed_outbound_hosts",
        &[
            "fermyon:spin/http",
            "fermyon:spin/mqtt",
            "fermyon:spin/mysql",
            "fermyon:spin/postgres",
            "fermyon:spin/redis",
            "spin:mqtt/mqtt",
            "spin:mysql/mysql",
            "spin:postgres/postgres",
            "spin:redis/redis",
            "wasi:http/client",
            "wasi:http/outgoing-handler",
            "wasi:sockets/ip-name-lookup",
            "wasi:sockets/tcp",
            "wasi:sockets/tcp-create-socket",
            "wasi:sockets/udp",
            "wasi:sockets/udp-create-socket",
        ],
    ),
    ("environment", &["wasi:cli/environment"]),
    ("files", &["wasi:filesystem/preopens"]),
    (
        "key_value_stores",
        &[
            "fermyon:spin/key-value",
            "spin:key-value/key-value",
            "wasi:keyvalue/store",
            "wasi:keyvalue/batch",
            "wasi:keyvalue/atomics",
        ],
    ),
    (
        "sqlite_databases",
        &["fermyon:spin/sqlite", "spin:sqlite/sqlite"],
    ),
    (
        "variables",
        &[
            "fermyon:spin/config",
            "fermyon:spin/variables",
            "spin:variables/variables",
            "wasi:config/store",
        ],
    ),
];

pub use crate::app::http_trigger::{Inherit, Middleware};

/// The configuration an import (with version) uses, if any.
fn capability_of(import: &str) -> Option<&'static str> {
    let path = import.split_once('@').map_or(import, |(p, _)| p);
    CAPABILITIES
        .iter()
        .find(|(_, ifaces)| ifaces.contains(&path))
        .map(|(cap, _)| *cap)
}

/// A part of the chain as the composer takes it: a WASIp3 component, snapshot names
/// retargeted to 0.3.0 (the chain is wired by name).
fn prepared(bytes: &[u8], what: &str) -> anyhow::Result<Vec<u8>> {
    if super::componentize::is_core_module(bytes) {
        bail!(
            "{what} is a core module (wasip1); middleware chains on the WASIp3 handler \
             ({HANDLER}), so it and the component must be WASIp3 components (Spin 4 SDKs)"
        );
    }
    if super::retarget::mentions_rc_snapshot(bytes) {
        super::retarget::retarget_snapshot(bytes)
            .with_context(|| format!("{what}: not a valid component"))
    } else {
        Ok(bytes.to_vec())
    }
}

/// Top-level import and export names of a component.
fn names(bytes: &[u8]) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload? {
            wasmparser::Payload::ModuleSection { .. }
            | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentImportSection(s) if depth == 0 => {
                for i in s {
                    imports.push(i?.name.name.to_string());
                }
            }
            wasmparser::Payload::ComponentExportSection(s) if depth == 0 => {
                for e in s {
                    exports.push(e?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

/// Composes `middleware` (outermost first) in front of `component` (`id` names it in
/// errors and logs). Errors name the part and say what to change.
pub fn compose(
    id: &str,
    component: &[u8],
    middleware: &[(String, Inherit, Vec<u8>)],
) -> anyhow::Result<Vec<u8>> {
    let primary = prepared(component, &format!("component `{id}`"))?;
    let (_, exports) = names(&primary)?;
    if !exports.iter().any(|e| e == HANDLER) {
        bail!(
            "component `{id}` has HTTP middleware but does not export {HANDLER} (a WASIp3 \
             handler, Spin 4 SDKs); middleware can only be composed in front of one (its \
             exports: {})",
            exports.join(", ")
        );
    }
    let mut parts = Vec::new();
    for (name, inherit, bytes) in middleware {
        let what = format!("component `{id}`: middleware {name}");
        let bytes = prepared(bytes, &what)?;
        let (imports, exports) =
            names(&bytes).with_context(|| format!("{what}: not a valid component"))?;
        if !imports.iter().any(|i| i == HANDLER) || !exports.iter().any(|e| e == HANDLER) {
            bail!(
                "{what} is not HTTP middleware: it must import and export {HANDLER} (the \
                 `wasi:http/middleware` world); it imports [{}] and exports [{}]",
                imports.join(", "),
                exports.join(", ")
            );
        }
        let denied: Vec<(String, &'static str)> = imports
            .iter()
            .filter_map(|i| capability_of(i).map(|cap| (i.clone(), cap)))
            .filter(|(_, cap)| !inherit.allows(cap))
            .collect();
        parts.push((what, bytes, denied));
    }

    let mut graph = CompositionGraph::new();
    let mut ids = Vec::new();
    for (index, (what, bytes, denied)) in parts.into_iter().enumerate() {
        let package = Package::from_bytes(
            &format!("middleware{index}"),
            None,
            bytes,
            graph.types_mut(),
        )
        .with_context(|| format!("{what}: cannot read its component type"))?;
        ids.push((
            graph
                .register_package(package)
                .with_context(|| what.clone())?,
            denied,
        ));
    }
    let package = Package::from_bytes("primary", None, primary, graph.types_mut())
        .with_context(|| format!("component `{id}`: cannot read its component type"))?;
    let inner = graph.register_package(package)?;

    // Innermost first: the component, then each middleware wired to the one inside it.
    let instance = graph.instantiate(inner);
    let mut handler = graph.alias_instance_export(instance, HANDLER)?;
    for (index, (package, denied)) in ids.iter().enumerate().rev() {
        let instance = graph.instantiate(*package);
        for (import, cap) in denied {
            let kind = graph.types()[graph[*package].ty()]
                .imports
                .get(import)
                .copied()
                .with_context(|| format!("component `{id}`: middleware import `{import}`"))?;
            // Without its interface id, so the encoder keeps it apart from the host import
            // of the same interface (it merges instance imports by interface).
            let kind = match kind {
                ItemKind::Instance(iface) => {
                    let mut anonymous = graph.types()[iface].clone();
                    anonymous.id = None;
                    ItemKind::Instance(graph.types_mut().add_interface(anonymous))
                }
                other => other,
            };
            let name = denied_name(index, import, cap);
            let node = graph
                .import(name.clone(), kind)
                .with_context(|| format!("component `{id}`: cutting off `{import}`"))?;
            graph
                .set_instantiation_argument(instance, import, node)
                .with_context(|| format!("component `{id}`: cutting off `{import}`"))?;
        }
        graph
            .set_instantiation_argument(instance, HANDLER, handler)
            .with_context(|| {
                format!(
                    "component `{id}`: middleware {} cannot take the handler inside it",
                    middleware[index].0
                )
            })?;
        handler = graph.alias_instance_export(instance, HANDLER)?;
    }
    graph.export(handler, HANDLER)?;
    let bytes = graph
        .encode(EncodeOptions {
            // wasmtime validates the result when it compiles it (with the component-model
            // async features this encoder's validator may not enable).
            validate: false,
            ..Default::default()
        })
        .with_context(|| format!("component `{id}`: composing its middleware"))?;
    Ok(bytes)
}

/// The import name of `import` of middleware `index`, cut off for lack of `cap`: an
/// interface name `spin-denied:m<index>-<cap>/<import>` (kebab-case labels) that
/// [`denied_parts`] reads back. (A plain label would make the encoder add an
/// `(implements ..)` directive, which wasmtime does not read yet.)
fn denied_name(index: usize, import: &str, cap: &str) -> String {
    let kebab = |text: &str| -> String {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| {
                let w = w.to_ascii_lowercase();
                if w.starts_with(|c: char| c.is_ascii_digit()) {
                    format!("v{w}")
                } else {
                    w
                }
            })
            .collect::<Vec<_>>()
            .join("-")
    };
    format!("{DENIED_PREFIX}:m{index}-{}/{}", kebab(cap), kebab(import))
}

/// (middleware index, configuration) of a cut-off import name, if it is one.
fn denied_parts(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix(DENIED_PREFIX)?.strip_prefix(":m")?;
    let (package, _) = rest.split_once('/')?;
    let (index, cap) = package.split_once('-')?;
    let cap = CAPABILITIES
        .iter()
        .map(|(c, _)| *c)
        .find(|c| c.replace('_', "-") == cap)?;
    Some((index.to_string(), cap.to_string()))
}

/// Links every cut-off import of composed component `component` (see the module doc) to
/// functions that trap naming what was called and the key to add. Names already defined
/// (another component with the same middleware) are left as they are.
pub fn define_denied<T: 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
) -> anyhow::Result<()> {
    use wasmtime::component::types::ComponentItem;
    for (name, item) in component.component_type().imports(engine) {
        let Some((index, cap)) = denied_parts(name) else {
            continue;
        };
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        let mut root = linker.root();
        let mut inst = match root.instance(name) {
            Ok(i) => i,
            Err(_) => continue,
        };
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(_) => {
                    let msg = format!(
                        "HTTP middleware (dependencies.middleware[{index}]) called `{export}`, \
                         which needs the component's `{cap}` configuration that the middleware \
                         does not inherit; add `inherit_configuration = [\"{cap}\"]` (or \
                         `true`) to its entry in the trigger's `dependencies.middleware`"
                    );
                    let _ = inst.func_new(export, move |_, _, _, _| {
                        Err(wasmtime::format_err!("{msg}"))
                    });
                }
                ComponentItem::Resource(_) => {
                    let _ = inst.resource(
                        export,
                        wasmtime::component::ResourceType::host::<DeniedResource>(),
                        |_, _| Ok(()),
                    );
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The host type of a resource a middleware may not reach (none is ever created).
struct DeniedResource;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_match_by_interface_whatever_the_version() {
        assert_eq!(
            capability_of("wasi:http/client@0.3.0"),
            Some("allowed_outbound_hosts")
        );
        assert_eq!(
            capability_of("wasi:cli/environment@0.2.6"),
            Some("environment")
        );
        assert_eq!(
            capability_of("spin:sqlite/sqlite@3.1.0"),
            Some("sqlite_databases")
        );
        assert_eq!(capability_of("wasi:http/types@0.3.0"), None);
        assert_eq!(capability_of(HANDLER), None);
        assert!(Inherit::All.allows("files"));
        assert!(!Inherit::Some(vec![]).allows("files"));
        assert!(Inherit::Some(vec!["files".into()]).allows("files"));
    }

    #[test]
    fn denied_names_are_plain_names_that_read_back() {
        let n = denied_name(1, "wasi:cli/environment@0.2.6", "environment");
        assert_eq!(
            n,
            "spin-denied:m1-environment/wasi-cli-environment-v0-v2-v6"
        );
        assert_eq!(denied_parts(&n), Some(("1".into(), "environment".into())));
        let n = denied_name(0, "wasi:http/client@0.3.0", "allowed_outbound_hosts");
        assert_eq!(
            denied_parts(&n),
            Some(("0".into(), "allowed_outbound_hosts".into()))
        );
        assert_eq!(denied_parts("wasi:cli/environment@0.2.6"), None);
    }

    #[test]
    fn a_component_without_the_p3_handler_is_refused() {
        let wat = r#"(component (core module $m) )"#;
        let bytes = wat::parse_str(wat).unwrap();
        let err = compose("web", &bytes, &[]).unwrap_err();
        assert!(
            format!("{err:#}").contains("does not export wasi:http/handler@0.3.0"),
            "{err:#}"
        );
    }
}
