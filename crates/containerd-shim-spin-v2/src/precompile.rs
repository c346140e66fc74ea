//! Compiling a Spin app in the shim, before its container starts: outside the container,
//! outside its memory limit, into the node's root-only compile cache.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use containerd_shim_wasm::cache::{AppSource, Entry};
use containerd_shim_wasm::confined::Dir;
use containerd_shim_wasm::content::{sha256_hex, Limits};
use containerd_shim_wasm::image::BLOBS_DIR;
use spin_runtime::compile_cache::{CompileCache, Outcome};

/// The bytes of every component source of `source`, by where they are declared.
fn sources(source: &AppSource, max: u64) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    match source {
        AppSource::Locked { lock, app_dir } => {
            let lock: serde_json::Value =
                serde_json::from_slice(lock).context("the locked app is not JSON")?;
            let blobs = Dir::open(&app_dir.join(BLOBS_DIR))?;
            for c in lock["components"].as_array().into_iter().flatten() {
                let id = c["id"].as_str().unwrap_or("?");
                // Inline sources are compiled by the runtime (Spin never inlines Wasm).
                let Some(digest) = c["source"]["digest"].as_str() else {
                    continue;
                };
                if c["source"].get("inline").is_some() {
                    continue;
                }
                let hex = sha256_hex(digest)
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
            let text = root.read_in_root(Path::new("spin.toml"), 4 << 20)?;
            let text = String::from_utf8(text).context("/spin.toml is not UTF-8")?;
            for (key, src) in spin_runtime::App::manifest_component_sources(&text, "/spin.toml")? {
                // Resolved as the runtime will in the container: relative to `/`, links
                // and `..` confined to the rootfs.
                let bytes = root
                    .read_in_root(Path::new(&src), max)
                    .with_context(|| format!("/spin.toml: key `{key}.source` ({src})"))?;
                out.push((format!("`{key}`"), bytes));
            }
        }
    }
    Ok(out)
}

/// The shim's [`containerd_shim_wasm::cache::Precompiler`]: compiles each distinct
/// component of `source` into `cache_dir` (entries named as the runtime looks them up).
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
