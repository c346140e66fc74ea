//! Compiling a Spin app in the shim, before its container starts: outside the container,
//! outside its memory limit, into the node's root-only compile cache.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use spin_runtime::compile_cache::{CompileCache, Outcome};
use wasm_shim_core::confined::Dir;
use wasm_shim_core::content::digest_hex;
use wasm_shim_core::untrusted::Limits;

use crate::artifact::BLOBS_DIR;
use crate::cache_mount::{AppSource, Entry};

/// Largest `/spin.toml` the shim reads from a rootfs.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// The bytes of every component source of `source` that the runtime compiles as it
/// ships (not composed with dependencies), named by where they are declared.
fn sources(source: &AppSource, max: u64) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    match source {
        AppSource::Locked { lock, app_dir } => {
            let lock = spin_app_format::LockedApp::from_json(lock)
                .context("the locked app of the artifact")?;
            let blobs = Dir::open(&app_dir.join(BLOBS_DIR))?;
            for c in &lock.components {
                let content = &c.source.content;
                // Inline sources and components with dependencies (composed at load) are
                // compiled by the runtime, in memory.
                if content.inline.is_some() || !c.dependencies.is_empty() {
                    continue;
                }
                if !c.trigger_dependencies.is_empty() {
                    // Composed here as the runtime composes it, so its entry is found.
                    if let Some(composed) = locked_composition(c, &blobs, max)? {
                        out.push((
                            format!("component `{}` with its middleware", c.id),
                            composed,
                        ));
                    }
                    continue;
                }
                let Some(digest) = content.digest.as_deref() else {
                    continue;
                };
                let id = &c.id;
                let hex = digest_hex(digest)
                    .with_context(|| format!("component `{id}` of the locked app"))?;
                let mut bytes = Vec::new();
                blobs
                    .open_file(Path::new(hex))
                    .with_context(|| format!("component `{id}`: source {digest}"))?
                    .take(max + 1)
                    .read_to_end(&mut bytes)?;
                anyhow::ensure!(
                    bytes.len() as u64 <= max,
                    "component `{id}`: source {digest} is over {max} bytes"
                );
                out.push((format!("component `{id}`"), bytes));
            }
        }
        AppSource::Manifest { rootfs } => {
            let root = Dir::open(rootfs)?;
            let text = root.read_in_root(Path::new("spin.toml"), MAX_MANIFEST_BYTES)?;
            let text = String::from_utf8(text).context("/spin.toml is not UTF-8")?;
            for s in spin_app_format::manifest::component_sources(&text, "/spin.toml")? {
                if s.has_dependencies {
                    continue;
                }
                // Resolved as the runtime will in the container: relative to `/`, links
                // and `..` confined to the rootfs.
                let bytes = root
                    .read_in_root(Path::new(&s.source), max)
                    .with_context(|| {
                        format!("/spin.toml: component `{}`: source {}", s.id, s.source)
                    })?;
                out.push((format!("component `{}`", s.id), bytes));
            }
            for m in spin_app_format::manifest::middleware_sources(&text, "/spin.toml")? {
                let read = |path: &str| {
                    root.read_in_root(Path::new(path), max).with_context(|| {
                        format!("/spin.toml: {}: middleware source {path}", m.trigger)
                    })
                };
                let primary = read(&m.component)?;
                let mut parts = Vec::new();
                for (i, (path, inherit)) in m.middleware.iter().enumerate() {
                    parts.push((format!("[{i}] {path}"), inherit.into(), read(path)?));
                }
                let composed = spin_runtime::middleware::compose(&m.trigger, &primary, &parts)?;
                out.push((format!("{} with its middleware", m.trigger), composed));
            }
        }
    }
    Ok(out)
}

/// A locked component with Spin 4 middleware, composed as the runtime composes it; `None`
/// when a part is not a layer of the artifact (inline: the runtime composes it in memory).
fn locked_composition(
    c: &spin_app_format::LockedComponent,
    blobs: &Dir,
    max: u64,
) -> anyhow::Result<Option<Vec<u8>>> {
    let id = &c.id;
    let read = |content: &spin_app_format::ContentRef| -> anyhow::Result<Option<Vec<u8>>> {
        let (None, Some(digest)) = (&content.inline, content.digest.as_deref()) else {
            return Ok(None);
        };
        let hex =
            digest_hex(digest).with_context(|| format!("component `{id}` of the locked app"))?;
        let mut bytes = Vec::new();
        blobs
            .open_file(Path::new(hex))
            .with_context(|| format!("component `{id}`: {digest}"))?
            .take(max + 1)
            .read_to_end(&mut bytes)?;
        anyhow::ensure!(
            bytes.len() as u64 <= max,
            "component `{id}`: {digest} is over {max} bytes"
        );
        Ok(Some(bytes))
    };
    let Some(primary) = read(&c.source.content)? else {
        return Ok(None);
    };
    let mut parts = Vec::new();
    for (i, d) in c
        .trigger_dependencies
        .get(spin_app_format::locked::MIDDLEWARE_KEY)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(bytes) = read(&d.source.content)? else {
            return Ok(None);
        };
        parts.push((format!("[{i}]"), (&d.inherit).into(), bytes));
    }
    Ok(Some(spin_runtime::middleware::compose(
        id, &primary, &parts,
    )?))
}

/// Compiles each distinct component of `source` into the node cache `cache_dir` (entries
/// named as the runtime looks them up) and returns them. Blocking.
pub fn precompile(source: &AppSource, cache_dir: &Path) -> anyhow::Result<Vec<Entry>> {
    let limits = Limits::from_env()?;
    let cache = CompileCache::new(cache_dir);
    let mut entries: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (name, bytes) in sources(source, limits.max_bytes)? {
        let started = std::time::Instant::now();
        let (path, outcome) = cache.precompile(&bytes, &name)?;
        let file = path
            .file_name()
            .and_then(|n| n.to_str())
            .context("cache entry without a file name")?
            .to_string();
        if outcome == Outcome::Miss {
            tracing::info!(
                component = %name,
                bytes = bytes.len(),
                ms = started.elapsed().as_millis() as u64,
                "compiled in the shim"
            );
        }
        entries.insert(file, path);
    }
    Ok(entries.into_iter().collect())
}
