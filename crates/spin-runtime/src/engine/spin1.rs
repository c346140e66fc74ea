//! Spin 1.x-style modules made into components before they are compiled: wasip1 core
//! modules written against Spin's first interfaces (wit-bindgen 0.2's ABI) export
//! `handle-http-request` (HTTP trigger) or `handle-redis-message` (Redis trigger) and import
//! `spin-config`, `wasi-outbound-http`, `key-value`, `outbound-redis`, ... as core module
//! names. The Spin Go SDK up to 2.x (TinyGo) builds such modules, and so did Rust's
//! spin-sdk 1.x.
//!
//! wit-bindgen 0.2's lowering of these interfaces is the canonical ABI's for the same types
//! (flat parameters, a return area for compound results, `canonical_abi_realloc` for what
//! the host hands the guest), and Spin 2 published the same interfaces as the unversioned
//! `fermyon:spin` WIT package. So a module is adapted by renaming, not by an adapter of its
//! own: each import is moved to its `fermyon:spin/<interface>` name, the two exports to
//! their `fermyon:spin/inbound-http#handle-request` and
//! `fermyon:spin/inbound-redis#handle-message` names, the world (that package's `host`
//! world, keeping only the exports the module has) is embedded, and `wit-component` makes
//! the component with the WASI preview1 reactor adapter. The host side of these interfaces
//! is [`crate::spin1`].

use std::borrow::Cow;

use anyhow::{bail, Context};
use wasm_encoder::reencode::{Reencode, RoundtripReencoder};

/// The unversioned `fermyon:spin` package (Spin 2's form of Spin 1.x's interfaces), as the
/// pinned spin-sdk ships it (copied under `OUT_DIR` by build.rs), in one source.
const SPIN1_WIT: &str = concat!(
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/world.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/config.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/http-types.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/http.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/inbound-http.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/inbound-redis.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/key-value.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/llm.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/mysql.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/postgres.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/rdbms-types.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/redis-types.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/redis.wit"
    )),
    "\n",
    include_str!(concat!(
        env!("OUT_DIR"),
        "/wit/deps/spin@unversioned/sqlite.wit"
    )),
);

/// Spin 1.x's HTTP export (wit-bindgen 0.2 name) and its component export.
pub const HTTP_EXPORT: (&str, &str) = ("handle-http-request", "fermyon:spin/inbound-http");
/// Spin 1.x's Redis export and its component export.
pub const REDIS_EXPORT: (&str, &str) = ("handle-redis-message", "fermyon:spin/inbound-redis");

/// Spin 1.x import modules and the `fermyon:spin` interface each became.
const IMPORTS: &[(&str, &str)] = &[
    ("spin-config", "config"),
    ("wasi-outbound-http", "http"),
    ("key-value", "key-value"),
    ("outbound-redis", "redis"),
    ("outbound-pg", "postgres"),
    ("outbound-mysql", "mysql"),
    ("sqlite", "sqlite"),
    ("llm", "llm"),
];

/// Whether core module `module` is a Spin 1.x-style module: it exports
/// `handle-http-request` or `handle-redis-message` and embeds no component type (a
/// wit-bindgen >= 0.5 world). Unparsable bytes are not.
pub fn is_spin1_module(module: &[u8]) -> bool {
    let mut export = false;
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        match payload {
            Ok(wasmparser::Payload::ExportSection(exports)) => {
                export |= exports.into_iter().any(|e| {
                    e.is_ok_and(|e| {
                        e.kind == wasmparser::ExternalKind::Func
                            && (e.name == HTTP_EXPORT.0 || e.name == REDIS_EXPORT.0)
                    })
                })
            }
            Ok(wasmparser::Payload::CustomSection(c)) if c.name().starts_with("component-type") => {
                return false
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    export
}

/// The component made from Spin 1.x module `module` (see the module docs). Errors name
/// component `id` and the reason: an import no Spin 1.x interface provides, or what
/// `wit-component` refused (a function whose signature is not the interface's).
pub fn componentize(module: &[u8], id: &str) -> anyhow::Result<Vec<u8>> {
    tracing::info!(
        component = id,
        "Spin 1.x module: adapting its imports and exports to the fermyon:spin interfaces"
    );
    adapt(module).with_context(|| failure(id))
}

fn failure(id: &str) -> String {
    format!(
        "component `{id}` is a Spin 1.x module (it exports `{}` or `{}`) that cannot be \
         adapted to the component model; rebuild it with a current Spin SDK",
        HTTP_EXPORT.0, REDIS_EXPORT.0
    )
}

/// Fails, naming component `id` and the reason, when `bytes` is a Spin 1.x module that
/// cannot be adapted ([`componentize`]); anything else passes. The runtime then serves the
/// app without that component instead of refusing the whole app.
pub fn check(bytes: &[u8], id: &str) -> anyhow::Result<()> {
    if wasmparser::Parser::is_core_wasm(bytes) && is_spin1_module(bytes) {
        adapt(bytes).with_context(|| failure(id))?;
    }
    Ok(())
}

fn adapt(module: &[u8]) -> anyhow::Result<Vec<u8>> {
    let (mut renamed, exports) = rename(module)?;
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve
        .push_source("spin@unversioned.wit", SPIN1_WIT)
        .context("parsing the fermyon:spin WIT")?;
    let world = resolve.select_world(&[pkg], Some("host"))?;
    let keep: Vec<&str> = exports
        .iter()
        .map(|e| e.trim_start_matches("fermyon:spin/"))
        .collect();
    let interfaces = resolve.interfaces.clone();
    resolve.worlds[world].exports.retain(|key, _| match key {
        wit_parser::WorldKey::Interface(i) => interfaces[*i]
            .name
            .as_deref()
            .is_some_and(|n| keep.contains(&n)),
        wit_parser::WorldKey::Name(_) => false,
    });
    wit_component::embed_component_metadata(
        &mut renamed,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )?;
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&renamed)?
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
}

/// `module` with its Spin 1.x import and export names moved to the `fermyon:spin` ones;
/// also the component exports it has.
fn rename(module: &[u8]) -> anyhow::Result<(Vec<u8>, Vec<String>)> {
    let mut out = wasm_encoder::Module::new();
    let mut exported = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        let payload = payload?;
        match &payload {
            wasmparser::Payload::ImportSection(reader) => {
                let mut imports = wasm_encoder::ImportSection::new();
                for import in reader.clone().into_imports() {
                    let import = import?;
                    let (m, name) = import_name(import.module, import.name)?;
                    imports.import(&m, &name, RoundtripReencoder.entity_type(import.ty)?);
                }
                out.section(&imports);
            }
            wasmparser::Payload::ExportSection(reader) => {
                let mut exports = wasm_encoder::ExportSection::new();
                for export in reader.clone() {
                    let export = export?;
                    let kind = RoundtripReencoder.export_kind(export.kind)?;
                    let name = match export.name {
                        n if n == HTTP_EXPORT.0 => {
                            exported.push(HTTP_EXPORT.1.to_string());
                            format!("{}#handle-request", HTTP_EXPORT.1)
                        }
                        n if n == REDIS_EXPORT.0 => {
                            exported.push(REDIS_EXPORT.1.to_string());
                            format!("{}#handle-message", REDIS_EXPORT.1)
                        }
                        n => n.to_string(),
                    };
                    exports.export(&name, kind, export.index);
                }
                out.section(&exports);
            }
            _ => {
                if let Some((id, range)) = payload.as_section() {
                    out.section(&wasm_encoder::RawSection {
                        id,
                        data: &module[range],
                    });
                }
            }
        }
    }
    Ok((out.finish(), exported))
}

/// The component import name of Spin 1.x import `module`.`name`.
fn import_name<'a>(module: &'a str, name: &'a str) -> anyhow::Result<(Cow<'a, str>, Cow<'a, str>)> {
    if module == "wasi_snapshot_preview1" {
        return Ok((module.into(), name.into()));
    }
    let Some((_, interface)) = IMPORTS.iter().find(|(m, _)| *m == module) else {
        bail!(
            "it imports `{name}` from `{module}`, which is not a Spin 1.x interface (those are \
             {})",
            IMPORTS
                .iter()
                .map(|(m, _)| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let name = match (module, name) {
        ("wasi-outbound-http", "request") => "send-request",
        _ => name,
    };
    Ok((format!("fermyon:spin/{interface}").into(), name.into()))
}
