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
//! written by this code, never by a workload. On a node the shim writes entries into a
//! root-only directory before a container starts ([`EntryWriter`], [`Reservation`]): it
//! names each entry by the digest of the bytes it handed to its compile helper and copies
//! the helper's output in itself; each container gets a read-only view of exactly its own
//! entries; inside the container the cache is opened read-only ([`READONLY_ENV`]) and a
//! miss compiles in memory only.
//!
//! Component bytes are untrusted: [`compile_component`] accepts only the binary format
//! (`\0asm`), never wasmtime's text-format fallback, which parses any other bytes as WAT
//! and can echo them into its error.

use std::hash::{Hash, Hasher};
use std::io::{Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Default cache directory.
pub const DEFAULT_DIR: &str = spin_shim_settings::shim::DEFAULT_COMPILE_CACHE_DIR;
/// Env var overriding the cache directory.
pub const DIR_ENV: &str = spin_shim_settings::shim::COMPILE_CACHE_DIR;
/// Env var: `1` opens the cache read-only (entries are loaded, never written).
pub const READONLY_ENV: &str = spin_shim_settings::container::COMPILE_CACHE_READONLY;

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
/// [`EntryState::Pending`]. [`Reservation::fill`] (or [`Reservation::writer`] then
/// [`Reservation::publish`]) writes the compiled bytes into that same file, then makes it
/// readable and links it under the entry's name; a reservation dropped unpublished is
/// emptied, made readable (the container stops waiting) and removed.
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
    pub fn fill(self, engine: &Engine, wasm: &[u8], name: &str) -> anyhow::Result<PathBuf> {
        let component = compile_component(engine, wasm, name)?;
        let bytes = component.serialize().map_err(anyhow::Error::from)?;
        drop(component);
        let mut f = self.writer()?;
        f.write_all(&bytes)
            .with_context(|| format!("write {}", self.file.display()))?;
        self.publish()
    }

    /// The reserved file, emptied and open for writing the compiled bytes (then
    /// [`Reservation::publish`]).
    pub fn writer(&self) -> anyhow::Result<std::fs::File> {
        std::fs::File::options()
            .write(true)
            .truncate(true)
            .open(&self.file)
            .with_context(|| format!("open {}", self.file.display()))
    }

    /// Makes the bytes written through [`Reservation::writer`] durable and readable and
    /// links them under the entry's name; returns the entry's path.
    pub fn publish(mut self) -> anyhow::Result<PathBuf> {
        let f = std::fs::File::open(&self.file)
            .with_context(|| format!("open {}", self.file.display()))?;
        anyhow::ensure!(
            f.metadata()?.len() > 0,
            "nothing was written to {}",
            self.file.display()
        );
        f.sync_all()
            .with_context(|| format!("sync {}", self.file.display()))?;
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
            // A partial write must not look like an entry to the container that bound it.
            let _ = std::fs::File::options()
                .write(true)
                .open(&self.file)
                .and_then(|f| f.set_len(0));
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

    /// The cache the runtime's settings name ([`DIR_ENV`], else [`DEFAULT_DIR`]); read-only
    /// if [`READONLY_ENV`] is `1`.
    pub fn from_settings(s: &spin_shim_settings::container::ContainerSettings) -> Self {
        CompileCache {
            dir: s
                .compile_cache_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR)),
            read_only: s.compile_cache_readonly,
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
        Self::entry_name_for(
            engine,
            &component_digest(wasm),
            super::componentize::is_core_module(wasm),
        )
    }

    /// [`CompileCache::entry_name`] from the bytes' hex sha256 and whether they are a core
    /// module ([`super::componentize::is_core_module`] of their first 8 bytes), for a
    /// caller that hashed them as it streamed them.
    pub fn entry_name_for(engine: &Engine, digest_hex: &str, core_module: bool) -> String {
        let form = if core_module { "-p1-reactor" } else { "" };
        format!("{digest_hex}{form}-{}.cwasm", &engine_key(engine)[..16])
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
            Self::touch(&path);
            return Ok((path, Outcome::Hit));
        }
        let component = compile_component(engine, wasm, name)?;
        self.store(&path, &component)?;
        Ok((path, Outcome::Miss))
    }

    /// Reserves the entry of `wasm` for `engine` ([`Reservation`]), to be compiled later.
    pub fn reserve(&self, engine: &Engine, wasm: &[u8]) -> anyhow::Result<Reservation> {
        self.reserve_entry(self.entry_path(engine, wasm))
    }

    /// Reserves the entry at `entry` (a path of this cache, [`CompileCache::entry_path`]).
    pub fn reserve_entry(&self, entry: PathBuf) -> anyhow::Result<Reservation> {
        anyhow::ensure!(
            !self.read_only,
            "compile cache {} is read-only",
            self.dir.display()
        );
        create_private_dir(&self.dir)?;
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

    /// The file the entry named by [`CompileCache::entry_name_for`] lives in.
    pub fn entry_path_for(&self, engine: &Engine, digest_hex: &str, core_module: bool) -> PathBuf {
        self.dir
            .join(Self::entry_name_for(engine, digest_hex, core_module))
    }

    /// Marks the entry at `path` as just used (eviction removes the least recently used
    /// entries first).
    pub fn touch(path: &Path) {
        let _ = std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
    }

    /// A private temporary file for the entry at `entry` (a path of this cache): bytes
    /// written to it become the entry on [`EntryWriter::commit`], never before; dropped
    /// uncommitted, it is removed.
    pub fn entry_writer(&self, entry: &Path) -> anyhow::Result<EntryWriter> {
        anyhow::ensure!(
            !self.read_only,
            "compile cache {} is read-only",
            self.dir.display()
        );
        create_private_dir(&self.dir)?;
        let tmp = self.temp_path("", entry);
        let file = std::fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("create {}", tmp.display()))?;
        Ok(EntryWriter {
            tmp,
            file,
            entry: entry.to_path_buf(),
            done: false,
        })
    }

    /// An anonymous file in the cache directory (created and unlinked at once, so nothing
    /// is left whatever happens), open for reading and writing: a private copy of bytes a
    /// container could still change, for a compile helper to read.
    pub fn scratch_file(&self, what: &str) -> anyhow::Result<std::fs::File> {
        create_private_dir(&self.dir)?;
        let tmp = self.temp_path("scratch-", Path::new(what));
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("create {}", tmp.display()))?;
        let _ = std::fs::remove_file(&tmp);
        Ok(file)
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
        let mut w = self.entry_writer(path)?;
        w.write_all(&bytes)
            .with_context(|| format!("write {}", path.display()))?;
        w.commit()?;
        Ok(())
    }
}

/// A cache entry being written ([`CompileCache::entry_writer`]).
#[derive(Debug)]
pub struct EntryWriter {
    tmp: PathBuf,
    file: std::fs::File,
    entry: PathBuf,
    done: bool,
}

impl EntryWriter {
    /// Bytes written so far.
    pub fn written(&mut self) -> std::io::Result<u64> {
        self.file.stream_position()
    }

    /// Makes the written bytes durable and readable and renames them to the entry's name
    /// (an entry already there is replaced: same key, same bytes); returns its path.
    pub fn commit(mut self) -> anyhow::Result<PathBuf> {
        anyhow::ensure!(
            self.written()? > 0,
            "nothing was written for {}",
            self.entry.display()
        );
        self.file
            .sync_all()
            .and_then(|()| {
                self.file
                    .set_permissions(std::fs::Permissions::from_mode(0o644))
            })
            .and_then(|()| std::fs::rename(&self.tmp, &self.entry))
            .with_context(|| format!("write {}", self.entry.display()))?;
        self.done = true;
        Ok(self.entry.clone())
    }
}

impl Write for EntryWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for EntryWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Refuses bytes that are not a Wasm binary (no `\0asm` magic) with a short error naming
/// `name` that never quotes them: wasmtime would otherwise try them as the text format.
pub fn ensure_binary(wasm: &[u8], name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        is_binary(wasm),
        "component `{name}` is not a Wasm binary: it does not start with the `\\0asm` magic \
         (text-format .wat and other files are refused); build it to a .wasm binary"
    );
    Ok(())
}

/// Whether `head` (a file's first bytes) starts with the Wasm binary magic `\0asm`.
pub fn is_binary(head: &[u8]) -> bool {
    head.starts_with(b"\0asm")
}

/// Compiles a component, or a wasip1 core module made a component with the preview1
/// adapter (as Spin does at load). `name` names it in errors. Only the binary format is
/// accepted ([`ensure_binary`]).
pub fn compile_component(engine: &Engine, wasm: &[u8], name: &str) -> anyhow::Result<Component> {
    let bytes = as_component(wasm, name)?;
    Component::from_binary(engine, &bytes)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("component `{name}` is not a valid Wasm component"))
}

/// What [`compile_component`] compiles, serialized as a cache entry holds it, without
/// loading the code into executable memory (so without a second copy of it besides the
/// serialized one): for a process that only writes entries.
pub fn precompile_component(engine: &Engine, wasm: &[u8], name: &str) -> anyhow::Result<Vec<u8>> {
    let bytes = as_component(wasm, name)?;
    engine
        .precompile_component(&bytes)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("component `{name}` is not a valid Wasm component"))
}

/// `wasm` as the component the runtime compiles: a binary component as it is, a wasip1 core
/// module made a component with the preview1 adapter, a WASIp3 snapshot component
/// retargeted to the release; refused unless it is a Wasm binary ([`ensure_binary`]).
fn as_component<'a>(wasm: &'a [u8], name: &str) -> anyhow::Result<std::borrow::Cow<'a, [u8]>> {
    ensure_binary(wasm, name)?;
    Ok(if super::componentize::is_core_module(wasm) {
        tracing::info!(
            component = name,
            "core module (wasip1): componentizing with the preview1 adapter"
        );
        super::componentize::componentize(wasm, name)?.into()
    } else if super::retarget::mentions_rc_snapshot(wasm) {
        tracing::info!(
            component = name,
            "WASIp3 snapshot {} component (Spin 4): retargeting it to WASI {}",
            super::retarget::RC_SNAPSHOT,
            super::retarget::RELEASE
        );
        super::retarget::retarget_snapshot(wasm)
            .with_context(|| format!("component `{name}` is not a valid Wasm component"))?
            .into()
    } else {
        wasm.into()
    })
}

/// The engine the shim compiles with: the runtime's configuration without instance
/// pooling (no address space reserved for instances it never runs).
pub fn compile_engine() -> anyhow::Result<&'static Engine> {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let e = super::config::new_engine(false, None)?;
    Ok(ENGINE.get_or_init(|| e))
}

/// The baseline (Winch) engine the shim compiles with: [`compile_engine`]'s configuration
/// with Winch as the compiler, as the runtime's baseline engine (same compatibility hash).
pub fn baseline_compile_engine() -> anyhow::Result<&'static Engine> {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let e = Engine::new(&super::config::baseline_config())
        .map_err(anyhow::Error::from)
        .context("cannot create the baseline (Winch) engine")?;
    Ok(ENGINE.get_or_init(|| e))
}

/// A new engine that compiles entries [`compile_engine`] (or, `winch`,
/// [`baseline_compile_engine`]) loads (the same compatibility hash), on the calling thread
/// only unless `parallel`: one compilation holds fewer functions in flight, so less memory.
pub fn entry_compile_engine(winch: bool, parallel: bool) -> anyhow::Result<Engine> {
    let mut config = if winch {
        super::config::baseline_config()
    } else {
        super::config::engine_config()
    };
    config.parallel_compilation(parallel);
    Engine::new(&config)
        .map_err(anyhow::Error::from)
        .context("cannot create the compile engine")
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
        let pooling = crate::engine::config::new_engine(true, Some(64 << 20)).unwrap();
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
    fn only_binaries_compile_and_text_is_never_quoted() {
        let engine = compile_engine().unwrap();
        // Valid text format: wasmtime's fallback would compile it.
        let e = compile_component(engine, HELLO.as_bytes(), "t").unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("not a Wasm binary") && !e.contains("i32.const"),
            "{e}"
        );
        let unknown = format!(
            "(component (core module (func (call ${}))))",
            "X".repeat(100_000)
        );
        let e = format!(
            "{:#}",
            precompile_component(engine, unknown.as_bytes(), "t").unwrap_err()
        );
        assert!(e.len() < 300 && !e.contains("XXXX"), "{e}");
        assert!(ensure_binary(b"", "t").is_err() && ensure_binary(b"\0as", "t").is_err());
        // The serialized form loads like a compiled component's.
        let wasm = wat::parse_str(HELLO).unwrap();
        let bytes = precompile_component(engine, &wasm, "hello").unwrap();
        // SAFETY: bytes this engine just serialized.
        unsafe { Component::deserialize(engine, &bytes) }.unwrap();
    }

    #[test]
    fn entry_engines_write_what_the_runtime_loads() {
        let key = |winch, parallel| engine_key(&entry_compile_engine(winch, parallel).unwrap());
        let main = engine_key(compile_engine().unwrap());
        let base = engine_key(baseline_compile_engine().unwrap());
        assert_eq!(key(false, true), main);
        assert_eq!(key(false, false), main);
        assert_eq!(key(true, true), base);
        assert_eq!(key(true, false), base);
    }

    #[test]
    fn entries_appear_only_when_committed_or_published() {
        let d = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(d.path().join("cache"));
        let entry = cache.dir().join("e.cwasm");
        let mut w = cache.entry_writer(&entry).unwrap();
        w.write_all(b"partial").unwrap();
        assert_eq!(entry_state(&entry), EntryState::Missing);
        drop(w);
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 0);
        let w = cache.entry_writer(&entry).unwrap();
        assert!(w.commit().is_err(), "an empty entry was committed");
        let mut w = cache.entry_writer(&entry).unwrap();
        w.write_all(b"code").unwrap();
        assert_eq!(w.commit().unwrap(), entry);
        assert_eq!(std::fs::read(&entry).unwrap(), b"code");
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 1);
        // A reservation written in part and dropped is empty for the container that bound it.
        let r = cache.reserve_entry(cache.dir().join("r.cwasm")).unwrap();
        let bound = std::fs::File::open(r.file()).unwrap();
        r.writer().unwrap().write_all(b"half").unwrap();
        drop(r);
        assert_eq!(bound.metadata().unwrap().len(), 0);
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 1);
        // Scratch files leave nothing.
        let mut f = cache.scratch_file("x").unwrap();
        f.write_all(b"x").unwrap();
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 1);
    }

    #[test]
    fn from_settings_reads_the_read_only_flag() {
        let settings = |ro: &str| {
            spin_shim_settings::container::ContainerSettings::from_env(&[
                (DIR_ENV.to_string(), "/x".to_string()),
                (READONLY_ENV.to_string(), ro.to_string()),
            ])
            .unwrap()
        };
        assert!(CompileCache::from_settings(&settings("1")).is_read_only());
        assert!(!CompileCache::from_settings(&settings("0")).is_read_only());
        assert_eq!(
            CompileCache::from_settings(&settings("1")).dir(),
            Path::new("/x")
        );
        let none = spin_shim_settings::container::ContainerSettings::from_env(&[]).unwrap();
        assert_eq!(
            CompileCache::from_settings(&none).dir(),
            Path::new(DEFAULT_DIR)
        );
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
