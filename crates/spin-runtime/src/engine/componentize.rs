//! WASI preview 1 core modules made into components at load, as Spin does
//! (`spin-componentize`): the module is wrapped with the WASI preview1 adapter (the adapters
//! wasmtime publishes as `wasi-preview1-component-adapter-provider`) by `wit-component`'s
//! encoder. `spin new http-rust` (Spin 2.7-3.6) and spin-sdk 3.x/5.x apps built for
//! `wasm32-wasip1` are such modules: wit-bindgen already embedded their world
//! (`component-type` custom section), the reactor adapter supplies preview 1 on top of WASI
//! 0.2. As in Spin, a module that exports `_start` and embeds no world (a plain `fn main`
//! built for `wasm32-wasip1`, e.g. for a command trigger) gets the command adapter, which
//! exports its `_start` as `wasi:cli/run`.

use anyhow::Context;

/// The import module name of WASI preview 1.
const ADAPTER_NAME: &str = "wasi_snapshot_preview1";

/// Whether `bytes` is a core Wasm module (binary version 1) rather than a component.
pub fn is_core_module(bytes: &[u8]) -> bool {
    wasmparser::Parser::is_core_wasm(bytes)
}

/// Whether core module `module` is a plain WASI command: it exports a `_start` function and
/// embeds no component type (no wit-bindgen world). Unparsable bytes are not.
pub fn is_plain_command(module: &[u8]) -> bool {
    let mut start = false;
    let mut world = false;
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        match payload {
            Ok(wasmparser::Payload::ExportSection(exports)) => {
                start |= exports.into_iter().any(|e| {
                    e.is_ok_and(|e| e.name == "_start" && e.kind == wasmparser::ExternalKind::Func)
                })
            }
            Ok(wasmparser::Payload::CustomSection(c)) => {
                world |= c.name().starts_with("component-type")
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    start && !world
}

/// The component made from core module `module` with the preview1 adapter: a Spin 1.x
/// module ([`super::spin1`]) renamed to the `fermyon:spin` interfaces first, the command
/// adapter for a plain command ([`is_plain_command`]), else the reactor adapter. Errors name
/// `id` and what the encoder refused (e.g. a module without embedded component type
/// information, or preview1 functions the adapter lacks).
pub fn componentize(module: &[u8], id: &str) -> anyhow::Result<Vec<u8>> {
    if super::spin1::is_spin1_module(module) {
        return super::spin1::componentize(module, id);
    }
    let adapter = if is_plain_command(module) {
        wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER
    } else {
        wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER
    };
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(module)
        .and_then(|e| e.adapter(ADAPTER_NAME, adapter))
        .and_then(|mut e| e.encode())
        .with_context(|| {
            format!(
                "component `{id}` is a core Wasm module (wasm32-wasip1) that cannot be made \
                 into a component with the WASI preview1 adapter; rebuild it with a Spin SDK \
                 (its bindings embed the component type) or for wasm32-wasip2"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_modules_and_names_the_component_on_failure() {
        // (module) with no component-type section still encodes (no imports, no exports).
        let empty_module = b"\0asm\x01\0\0\0";
        assert!(is_core_module(empty_module));
        assert!(!is_core_module(b"\0asm\x0d\0\x01\0"));
        componentize(empty_module, "e").unwrap();
        let e = componentize(b"\0asm\x01\0\0\0garbage", "bad").unwrap_err();
        assert!(format!("{e:#}").contains("component `bad`"), "{e:#}");
    }
}
