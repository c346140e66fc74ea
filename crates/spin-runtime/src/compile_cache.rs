//! Cache of compiled (precompiled, native) Wasm components on disk.
//!
//! Key: the sha256 of the component's bytes and a hash of the engine's
//! `precompile_compatibility_hash()` (wasmtime version, target, compiler settings), so an
//! entry is only ever loaded by an engine that could have produced it. Writes go to a
//! temporary file in the same directory and are renamed into place, so concurrent starts
//! of the same app never see a partial file; the last writer wins with identical bytes.
//!
//! Default directory: [`DEFAULT_DIR`]; override with the env var [`DIR_ENV`]. The Spin
//! runtime and the image loader both use this module.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Default cache directory.
pub const DEFAULT_DIR: &str = "/var/lib/containerd-shim-spin-v2/compile-cache";
/// Env var overriding the cache directory.
pub const DIR_ENV: &str = "SPIN_SHIM_COMPILE_CACHE_DIR";

/// Whether a component came from the cache or was compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Loaded a compiled artifact from the cache.
    Hit,
    /// Compiled now (and stored, if the cache is writable).
    Miss,
}

/// A compiled-component cache in one directory.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
}

/// Feeds `Hash` output into sha256 so the key is stable for one binary.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        // Unused: the key is taken from the full digest.
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Hex sha256 of the engine's compatibility hash.
pub fn engine_key(engine: &Engine) -> String {
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(h.0.finalize())
}

/// Hex sha256 of component bytes (the `sha256:` digest without its prefix).
pub fn component_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl CompileCache {
    /// A cache in `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CompileCache { dir: dir.into() }
    }

    /// The cache at [`DIR_ENV`] if set in `env` (or the process env), else [`DEFAULT_DIR`].
    pub fn from_env(env: &[(String, String)]) -> Self {
        let dir = env
            .iter()
            .rev()
            .find(|(k, _)| k == DIR_ENV)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(DIR_ENV).ok())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_DIR.to_string());
        CompileCache::new(dir)
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file an entry for these bytes and engine lives in.
    pub fn entry_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        self.dir.join(format!(
            "{}-{}.cwasm",
            component_digest(wasm),
            &engine_key(engine)[..16]
        ))
    }

    /// Loads the compiled component for `wasm` from the cache, or compiles it and stores
    /// the result. A corrupt or unwritable cache never fails the load: it is logged and
    /// the component is compiled.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        name: &str,
    ) -> anyhow::Result<(Component, Outcome)> {
        let path = self.entry_path(engine, wasm);
        if path.is_file() {
            // SAFETY: the file is one we wrote with `Component::serialize` for an engine
            // with the same compatibility hash (part of the file name); wasmtime checks the
            // header again. The cache directory must be writable only by the runtime's user.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => {
                    tracing::debug!(component = name, path = %path.display(), "compile cache hit");
                    return Ok((c, Outcome::Hit));
                }
                Err(e) => tracing::warn!(
                    component = name,
                    path = %path.display(),
                    "compile cache entry unusable, recompiling: {e:#}"
                ),
            }
        }
        tracing::debug!(component = name, path = %path.display(), "compile cache miss");
        let component = Component::new(engine, wasm)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("component `{name}` is not a valid Wasm component"))?;
        if let Err(e) = self.store(&path, &component) {
            tracing::warn!(component = name, dir = %self.dir.display(), "cannot write compile cache: {e:#}");
        }
        Ok((component, Outcome::Miss))
    }

    /// Like [`CompileCache::load_or_compile`] for a core module that `convert` turns into a
    /// component first (wasip1 modules and the preview1 adapter): the entry is keyed by the
    /// module's own bytes and `form` (e.g. `p1-reactor`), so a hit skips the conversion too.
    pub fn load_or_compile_converted(
        &self,
        engine: &Engine,
        module: &[u8],
        form: &str,
        name: &str,
        convert: impl FnOnce(&[u8]) -> anyhow::Result<Vec<u8>>,
    ) -> anyhow::Result<(Component, Outcome)> {
        let path = self.dir.join(format!(
            "{}-{form}-{}.cwasm",
            component_digest(module),
            &engine_key(engine)[..16]
        ));
        if path.is_file() {
            // SAFETY: as in `load_or_compile`: only this code writes entries.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => return Ok((c, Outcome::Hit)),
                Err(e) => {
                    tracing::warn!(component = name, path = %path.display(), "compile cache entry unusable, recompiling: {e:#}")
                }
            }
        }
        let wasm = convert(module)?;
        let component = Component::new(engine, &wasm)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("component `{name}` is not a valid Wasm component"))?;
        if let Err(e) = self.store(&path, &component) {
            tracing::warn!(component = name, dir = %self.dir.display(), "cannot write compile cache: {e:#}");
        }
        Ok((component, Outcome::Miss))
    }

    fn store(&self, path: &Path, component: &Component) -> anyhow::Result<()> {
        let bytes = component.serialize().map_err(anyhow::Error::from)?;
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("create {}", self.dir.display()))?;
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.with_context(|| format!("write {}", path.display()))
    }
}
