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
//!
//! Trust: loading an entry runs its native code, so an entry must only ever have been
//! written by this code, never by a workload. On a node the shim compiles with
//! [`CompileCache::precompile`] into a root-only directory before a container starts and
//! gives each container a read-only view of exactly its own entries; inside the container
//! the cache is opened read-only ([`READONLY_ENV`]) and a miss compiles in memory only.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Default cache directory.
pub const DEFAULT_DIR: &str = "/var/lib/containerd-shim-spin-v2/compile-cache";
/// Env var overriding the cache directory.
pub const DIR_ENV: &str = "SPIN_SHIM_COMPILE_CACHE_DIR";
/// Env var: `1` opens the cache read-only (entries are loaded, never written).
pub const READONLY_ENV: &str = "SPIN_SHIM_COMPILE_CACHE_READONLY";

/// Whether a component came from the cache or was compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Loaded a compiled artifact from the cache.
    Hit,
    /// Compiled now (and stored, if the cache is writable).
    Miss,
}

/// Whether a cache entry can be loaded ([`entry_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// No such file.
    Missing,
    /// Promised by the shim, which is still compiling it: a container sees a reserved file
    /// ([`Reservation`]) that has no read permission until its bytes are complete.
    Pending,
    /// A complete entry, or (readable but empty) one the shim gave up on.
    Ready,
}

/// The state of the entry file at `path`.
pub fn entry_state(path: &Path) -> EntryState {
    match std::fs::metadata(path) {
        Ok(md) if md.is_file() && md.permissions().mode() & 0o444 == 0 => EntryState::Pending,
        Ok(md) if md.is_file() => EntryState::Ready,
        _ => EntryState::Missing,
    }
}

/// An entry the shim has promised a container before compiling it: a file in the cache
/// directory (named `.tmp-...`, so pruning removes it if the shim dies first) created empty
/// with mode 0, which the container binds at the entry's name and sees as
/// [`EntryState::Pending`]. [`Reservation::fill`] writes the compiled bytes into that same
/// file, then makes it readable and links it under the entry's name; a reservation dropped
/// unfilled is made readable empty (the container stops waiting) and removed.
#[derive(Debug)]
pub struct Reservation {
    file: PathBuf,
    entry: PathBuf,
    done: bool,
}

impl Reservation {
    /// The reserved file (what the container binds).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The entry's path in the cache once filled.
    pub fn entry(&self) -> &Path {
        &self.entry
    }

    /// Compiles `wasm` on `engine` (the engine the reservation was made for, or one with
    /// its compatibility hash) into the reserved file and publishes it under the entry's
    /// name. Blocking.
    pub fn fill(mut self, engine: &Engine, wasm: &[u8], name: &str) -> anyhow::Result<PathBuf> {
        let component = compile_component(engine, wasm, name)?;
        let bytes = component.serialize().map_err(anyhow::Error::from)?;
        drop(component);
        let mut f = std::fs::File::options()
            .write(true)
            .open(&self.file)
            .with_context(|| format!("open {}", self.file.display()))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("write {}", self.file.display()))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o444))
            .with_context(|| format!("chmod {}", self.file.display()))?;
        self.done = true;
        // The reserved name stays until pruned: the container's bind may not exist yet.
        match std::fs::hard_link(&self.file, &self.entry) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e).with_context(|| format!("link {}", self.entry.display()));
            }
        }
        Ok(self.entry.clone())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::set_permissions(&self.file, std::fs::Permissions::from_mode(0o444));
            let _ = std::fs::remove_file(&self.file);
        }
    }
}

/// A compiled-component cache in one directory.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
    read_only: bool,
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
        CompileCache {
            dir: dir.into(),
            read_only: false,
        }
    }

    /// A cache whose entries are loaded but never written (a miss compiles in memory).
    pub fn read_only(dir: impl Into<PathBuf>) -> Self {
        CompileCache {
            dir: dir.into(),
            read_only: true,
        }
    }

    /// The cache at [`DIR_ENV`] if set in `env` (or the process env), else [`DEFAULT_DIR`];
    /// read-only if [`READONLY_ENV`] is `1`.
    pub fn from_env(env: &[(String, String)]) -> Self {
        let get = |key: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(key).ok())
                .filter(|v| !v.is_empty())
        };
        let dir = get(DIR_ENV).unwrap_or_else(|| DEFAULT_DIR.to_string());
        CompileCache {
            dir: PathBuf::from(dir),
            read_only: get(READONLY_ENV).as_deref() == Some("1"),
        }
    }

    /// Whether entries are never written.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The entry's file name for these bytes and engine: keyed by the bytes as the app
    /// ships them, so for a wasip1 core module (made a component with the preview1
    /// adapter, form `p1-reactor`) a hit skips the conversion too.
    pub fn entry_name(engine: &Engine, wasm: &[u8]) -> String {
        let form = if crate::componentize::is_core_module(wasm) {
            "-p1-reactor"
        } else {
            ""
        };
        format!(
            "{}{form}-{}.cwasm",
            component_digest(wasm),
            &engine_key(engine)[..16]
        )
    }

    /// Compiles `wasm` for the runtime's engine configuration (without its instance pool,
    /// which does not change compiled code) and stores the entry unless one exists;
    /// returns the entry's path. For the shim, before the container starts: compilation
    /// then happens outside the container and its memory limit. Blocking.
    pub fn precompile(&self, wasm: &[u8], name: &str) -> anyhow::Result<(PathBuf, Outcome)> {
        self.precompile_on(compile_engine()?, wasm, name)
    }

    /// [`CompileCache::precompile`] on `engine` (e.g. [`baseline_compile_engine`]).
    pub fn precompile_on(
        &self,
        engine: &Engine,
        wasm: &[u8],
        name: &str,
    ) -> anyhow::Result<(PathBuf, Outcome)> {
        anyhow::ensure!(
            !self.read_only,
            "compile cache {} is read-only",
            self.dir.display()
        );
        let path = self.entry_path(engine, wasm);
        if entry_state(&path) == EntryState::Ready {
            // Touch it: eviction removes the least recently used entries first.
            let _ = std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            return Ok((path, Outcome::Hit));
        }
        let component = compile_component(engine, wasm, name)?;
        self.store(&path, &component)?;
        Ok((path, Outcome::Miss))
    }

    /// Reserves the entry of `wasm` for `engine` ([`Reservation`]), to be compiled later.
    pub fn reserve(&self, engine: &Engine, wasm: &[u8]) -> anyhow::Result<Reservation> {
        anyhow::ensure!(
            !self.read_only,
            "compile cache {} is read-only",
            self.dir.display()
        );
        create_private_dir(&self.dir)?;
        let entry = self.entry_path(engine, wasm);
        let file = self.temp_path("reserved-", &entry);
        std::fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&file)
            .with_context(|| format!("create {}", file.display()))?;
        Ok(Reservation {
            file,
            entry,
            done: false,
        })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file an entry for these bytes and engine lives in.
    pub fn entry_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        self.dir.join(Self::entry_name(engine, wasm))
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
        if entry_state(&path) == EntryState::Ready {
            // SAFETY: the file is one this code wrote with `Component::serialize` for an
            // engine with the same compatibility hash (part of the file name); wasmtime
            // checks the header again. In a container the entry is the shim's, bind-mounted
            // read-only from a root-only directory; elsewhere the cache directory must be
            // writable only by the runtime's user.
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
        let component = compile_component(engine, wasm, name)?;
        if self.read_only {
            tracing::info!(
                component = name,
                "compiled in memory (read-only compile cache)"
            );
        } else if let Err(e) = self.store(&path, &component) {
            tracing::warn!(component = name, dir = %self.dir.display(), "cannot write compile cache: {e:#}");
        }
        Ok((component, Outcome::Miss))
    }

    /// A unique temporary file name in the cache directory for `entry`: `.tmp-<kind><pid>-
    /// <seq>-<entry name>` (pruned when an hour old, so a dead process leaves nothing).
    fn temp_path(&self, kind: &str, entry: &Path) -> PathBuf {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        self.dir.join(format!(
            ".tmp-{kind}{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            entry.file_name().unwrap_or_default().to_string_lossy()
        ))
    }

    fn store(&self, path: &Path, component: &Component) -> anyhow::Result<()> {
        let bytes = component.serialize().map_err(anyhow::Error::from)?;
        create_private_dir(&self.dir)?;
        let tmp = self.temp_path("", path);
        let result = (|| {
            let mut f = std::fs::File::options()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&tmp)?;
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

/// Compiles a component, or a wasip1 core module made a component with the preview1
/// adapter (as Spin does at load). `name` names it in errors.
pub fn compile_component(engine: &Engine, wasm: &[u8], name: &str) -> anyhow::Result<Component> {
    let converted;
    let bytes = if crate::componentize::is_core_module(wasm) {
        tracing::info!(
            component = name,
            "core module (wasip1): componentizing with the preview1 adapter"
        );
        converted = crate::componentize::componentize(wasm, name)?;
        &converted[..]
    } else if crate::p3::mentions_rc_snapshot(wasm) {
        tracing::info!(
            component = name,
            "WASIp3 snapshot {} component (Spin 4): retargeting it to WASI {}",
            crate::p3::RC_SNAPSHOT,
            crate::p3::RELEASE
        );
        converted = crate::p3::retarget_snapshot(wasm)
            .with_context(|| format!("component `{name}` is not a valid Wasm component"))?;
        &converted[..]
    } else {
        wasm
    };
    Component::new(engine, bytes)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("component `{name}` is not a valid Wasm component"))
}

/// The engine the shim compiles with: the runtime's configuration without instance
/// pooling (no address space reserved for instances it never runs).
pub fn compile_engine() -> anyhow::Result<&'static Engine> {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let e = crate::runtime::new_engine(false, None)?;
    Ok(ENGINE.get_or_init(|| e))
}

/// The baseline (Winch) engine the shim compiles with: [`compile_engine`]'s configuration
/// with Winch as the compiler, as the runtime's baseline engine (same compatibility hash).
pub fn baseline_compile_engine() -> anyhow::Result<&'static Engine> {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let e = Engine::new(&crate::tier::baseline_config())
        .map_err(anyhow::Error::from)
        .context("cannot create the baseline (Winch) engine")?;
    Ok(ENGINE.get_or_init(|| e))
}

/// Creates `dir` (and parents) and makes it `0700`, so only its owner (root, on a node)
/// can list or write entries; the mode is restored if someone loosened it.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let md = std::fs::symlink_metadata(dir).with_context(|| format!("stat {}", dir.display()))?;
    anyhow::ensure!(
        md.is_dir(),
        "compile cache {} is not a directory (a link or file is in the way)",
        dir.display()
    );
    if md.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("chmod 0700 {}", dir.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &str = r#"(component
        (core module $m (func (export "f") (result i32) i32.const 42))
        (core instance $i (instantiate $m))
        (func (export "f") (result s32) (canon lift (core func $i "f")))
    )"#;

    #[test]
    fn precompiled_entries_load_in_the_pooling_engine() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("cache");
        let wasm = wat::parse_str(HELLO).unwrap();
        let cache = CompileCache::new(&dir);
        let (path, outcome) = cache.precompile(&wasm, "hello").unwrap();
        assert_eq!(outcome, Outcome::Miss);
        assert_eq!(cache.precompile(&wasm, "hello").unwrap().1, Outcome::Hit);
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let pooling = crate::runtime::new_engine(true, Some(64 << 20)).unwrap();
        assert_eq!(
            engine_key(&pooling),
            engine_key(compile_engine().unwrap()),
            "pooling changes the compatibility hash: the shim's entries would never hit"
        );
        assert_eq!(path, cache.entry_path(&pooling, &wasm));
        // A read-only view of the directory (as a container gets) hits and never writes.
        let ro = CompileCache::read_only(&dir);
        let (_, o) = ro.load_or_compile(&pooling, &wasm, "hello").unwrap();
        assert_eq!(o, Outcome::Hit);
        std::fs::remove_file(&path).unwrap();
        let (_, o) = ro.load_or_compile(&pooling, &wasm, "hello").unwrap();
        assert_eq!(o, Outcome::Miss);
        assert!(!path.exists(), "a read-only cache stored an entry");
        assert!(ro.precompile(&wasm, "hello").is_err());
        let e = cache.precompile(b"\0asm junk", "bad").unwrap_err();
        assert!(format!("{e:#}").contains("component `bad`"), "{e:#}");
    }

    #[test]
    fn from_env_reads_the_read_only_flag() {
        let env = |ro: &str| {
            vec![
                (DIR_ENV.to_string(), "/x".to_string()),
                (READONLY_ENV.to_string(), ro.to_string()),
            ]
        };
        assert!(CompileCache::from_env(&env("1")).is_read_only());
        assert!(!CompileCache::from_env(&env("0")).is_read_only());
        assert_eq!(CompileCache::from_env(&env("1")).dir(), Path::new("/x"));
    }

    #[test]
    fn a_reservation_is_pending_until_filled_and_gone_if_abandoned() {
        let d = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(d.path().join("cache"));
        let wasm = wat::parse_str(HELLO).unwrap();
        let engine = compile_engine().unwrap();
        let r = cache.reserve(engine, &wasm).unwrap();
        let reserved = r.file().to_path_buf();
        let reserved_first = reserved.clone();
        let entry = cache.entry_path(engine, &wasm);
        assert_eq!(r.entry(), entry);
        assert_eq!(entry_state(&reserved), EntryState::Pending);
        assert_eq!(entry_state(&entry), EntryState::Missing);
        assert!(
            reserved
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".tmp-"),
            "pruning must know a reserved file a dead shim left"
        );
        // The same inode a container bound becomes the entry.
        let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&reserved).unwrap());
        assert_eq!(r.fill(engine, &wasm, "hello").unwrap(), entry);
        assert_eq!(entry_state(&reserved), EntryState::Ready);
        let md = std::fs::metadata(&entry).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::ino(&md), ino);
        assert!(md.len() > 0);
        let (_, o) = CompileCache::read_only(cache.dir())
            .load_or_compile(engine, &wasm, "hello")
            .unwrap();
        assert_eq!(o, Outcome::Hit);

        // Abandoned (or failed): readable and empty for a container that bound it, and
        // removed from the cache.
        let other = wat::parse_str(HELLO.replace("42", "43")).unwrap();
        let r = cache.reserve(engine, &other).unwrap();
        let reserved = r.file().to_path_buf();
        let f = std::fs::File::open(&reserved).unwrap();
        drop(r);
        assert!(!reserved.exists());
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o444, 0o444);
        assert_eq!(f.metadata().unwrap().len(), 0);
        let bad = cache.reserve(engine, &other).unwrap();
        assert!(bad.fill(engine, b"\0asm junk", "bad").is_err());
        assert_eq!(
            entry_state(&cache.entry_path(engine, &other)),
            EntryState::Missing
        );
        // Left: the first entry and its reserved name (the shim removes that name once the
        // container is created), nothing of the failed or abandoned ones.
        let mut left: Vec<_> = std::fs::read_dir(cache.dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        left.sort();
        assert_eq!(left, [reserved_first, entry], "{left:?}");
    }
}
