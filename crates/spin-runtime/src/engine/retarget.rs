//! Spin 4 apps: components of spin-sdk 6.x (Rust) and the Python SDK 4.x export only
//! `wasi:http/handler@0.3.0-rc-2026-03-15` and import the WASIp3 packages of that snapshot
//! (`wasi:cli`, `wasi:clocks`, `wasi:random`, `wasi:filesystem`, `wasi:sockets`,
//! `wasi:http` at `@0.3.0-rc-2026-03-15`) plus Spin 4's `async func` interfaces.
//!
//! wasmtime-wasi and wasmtime-wasi-http 48 implement WASI 0.3.0, the release that followed
//! that snapshot: its WIT differs from the snapshot only in the version and in
//! `wasi:cli/exit.exit-with-code` turning stable (both checked against wasmtime's own
//! vendoring commit, "Update WASI to 0.3.0"), so every function and resource type is the
//! same. Spin 4 bridges the two with a second set of bindings forwarding each function; we
//! instead rename the snapshot's import and export names to `@0.3.0` before compiling
//! ([`retarget_snapshot`], top-level sections only, everything else copied byte for byte).
//! The renamed component then links against wasmtime's WASIp3 implementation, and
//! wasmtime's type check at link time still proves every import type matches: a component
//! whose snapshot types did differ would fail to link with wasmtime's message.

use anyhow::{bail, Context as _};

/// The WASIp3 snapshot Spin 4's SDKs build against.
pub const RC_SNAPSHOT: &str = "0.3.0-rc-2026-03-15";
/// The WASIp3 release wasmtime 48 implements.
pub const RELEASE: &str = "0.3.0";

/// The versioned name suffix of the snapshot, as it appears in import names.
fn rc_suffix() -> String {
    format!("@{RC_SNAPSHOT}")
}

/// Whether component `bytes` mentions the WASIp3 snapshot anywhere (a cheap pre-check:
/// only such components are rewritten). It runs on every component before its first compile,
/// on the path to a cold start's first response, over up to tens of MB (a Python or
/// JavaScript SDK component): a vectorized substring search, not a compare per byte offset.
pub fn mentions_rc_snapshot(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, rc_suffix().as_bytes()).is_some()
}

/// `name` with the snapshot's version replaced by the release's, when it is a
/// `wasi:*@0.3.0-rc-2026-03-15` interface; else `None`.
fn retarget_name(name: &str) -> Option<String> {
    let (path, version) = name.rsplit_once('@')?;
    (path.starts_with("wasi:") && version == RC_SNAPSHOT).then(|| format!("{path}@{RELEASE}"))
}

/// Reads one unsigned LEB128 u32 at `*pos`.
fn read_u32(bytes: &[u8], pos: &mut usize) -> anyhow::Result<u32> {
    let mut result: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*pos).context("truncated section header")?;
        *pos += 1;
        result |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 28 {
            bail!("section size is not a valid u32");
        }
    }
    u32::try_from(result).context("section size is not a valid u32")
}

const COMPONENT_IMPORT_SECTION: u8 = 10;
const COMPONENT_EXPORT_SECTION: u8 = 11;

/// Component `bytes` with every top-level import and export named
/// `wasi:<pkg>/<iface>@0.3.0-rc-2026-03-15` renamed to `@0.3.0`; all other sections (core
/// modules, nested components, types, instances, aliases, custom sections) are copied
/// unchanged. Nested components keep their own names: they are satisfied inside the
/// component, by the same strings on both sides.
pub fn retarget_snapshot(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    use wasm_encoder::reencode::{ReencodeComponent, RoundtripReencoder};
    if bytes.len() < 8 || bytes[..4] != *b"\0asm" || bytes[4..8] != [0x0d, 0, 0x01, 0] {
        bail!("not a Wasm component (layer 1, version 0xd)");
    }
    let mut out = Vec::with_capacity(bytes.len());
    out.extend_from_slice(&bytes[..8]);
    let mut pos = 8;
    while pos < bytes.len() {
        let section_start = pos;
        let id = bytes[pos];
        pos += 1;
        let size = read_u32(bytes, &mut pos)? as usize;
        let start = pos;
        let end = start
            .checked_add(size)
            .filter(|e| *e <= bytes.len())
            .context("section runs past the end of the component")?;
        let data = &bytes[start..end];
        pos = end;
        // The re-encoded section (size prefix included), when a name was renamed.
        let encoded: Option<Vec<u8>> = match id {
            COMPONENT_IMPORT_SECTION => {
                let reader = wasmparser::ComponentImportSectionReader::new(
                    wasmparser::BinaryReader::new(data, start),
                )?;
                let mut section = wasm_encoder::ComponentImportSection::new();
                let mut renamed = false;
                for import in reader {
                    let import = import?;
                    let ty = RoundtripReencoder.component_type_ref(import.ty)?;
                    let mut name = wasm_encoder::ComponentExternName::from(import.name);
                    if let Some(new) = retarget_name(&name.name) {
                        name.name = new.into();
                        renamed = true;
                    }
                    section.import(name, ty);
                }
                renamed.then(|| encoded_section(&section))
            }
            COMPONENT_EXPORT_SECTION => {
                let reader = wasmparser::ComponentExportSectionReader::new(
                    wasmparser::BinaryReader::new(data, start),
                )?;
                let mut section = wasm_encoder::ComponentExportSection::new();
                let mut renamed = false;
                for export in reader {
                    let export = export?;
                    let ty = export
                        .ty
                        .map(|t| RoundtripReencoder.component_type_ref(t))
                        .transpose()?;
                    let kind = RoundtripReencoder.component_export_kind(export.kind);
                    let mut name = wasm_encoder::ComponentExternName::from(export.name);
                    if let Some(new) = retarget_name(&name.name) {
                        name.name = new.into();
                        renamed = true;
                    }
                    section.export(name, kind, export.index, ty);
                }
                renamed.then(|| encoded_section(&section))
            }
            _ => None,
        };
        match encoded {
            Some(section) => {
                out.push(id);
                out.extend_from_slice(&section);
            }
            None => out.extend_from_slice(&bytes[section_start..end]),
        }
    }
    Ok(out)
}

/// A section's encoding after its id: size, count, items.
fn encoded_section(section: &impl wasm_encoder::Encode) -> Vec<u8> {
    let mut v = Vec::new();
    section.encode(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_only_snapshot_wasi_names() {
        assert_eq!(
            retarget_name("wasi:http/handler@0.3.0-rc-2026-03-15").as_deref(),
            Some("wasi:http/handler@0.3.0")
        );
        assert_eq!(retarget_name("wasi:cli/stdout@0.2.6"), None);
        assert_eq!(retarget_name("spin:variables/variables@3.0.0"), None);
        assert_eq!(retarget_name("other:pkg/x@0.3.0-rc-2026-03-15"), None);
    }

    #[test]
    fn retargets_imports_and_exports_and_keeps_the_rest() {
        let wat = r#"(component
            (import "wasi:clocks/monotonic-clock@0.3.0-rc-2026-03-15" (instance
                (export "now" (func (result u64)))))
            (import "wasi:cli/stdout@0.2.6" (instance))
            (core module $m (func (export "f")))
            (instance $i (export "x" (core module $m)))
            (export "wasi:http/handler@0.3.0-rc-2026-03-15" (instance $i))
        )"#;
        let original = wat::parse_str(wat).unwrap();
        assert!(mentions_rc_snapshot(&original));
        let out = retarget_snapshot(&original).unwrap();
        wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
            .validate_all(&out)
            .unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("wasi:clocks/monotonic-clock@0.3.0"));
        assert!(text.contains("wasi:http/handler@0.3.0"));
        assert!(text.contains("wasi:cli/stdout@0.2.6"));
        assert!(!mentions_rc_snapshot(&out), "{text}");
        assert!(retarget_snapshot(b"\0asm\x01\0\0\0").is_err());
    }
}
