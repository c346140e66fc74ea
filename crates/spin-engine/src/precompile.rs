//! Compiling a Spin app for its container, before it starts: the units are those of the
//! runtime's compile plan ([`spin_runtime::engine::plan`]), built by the same function from
//! the same app model the container will load, so every entry the shim writes is one the
//! runtime looks up. Each distinct component source is opened once (the same digest, or the same file however the manifest names it, is one
//! source), the distinct sources together are held to the app's byte budget
//! (`SPIN_SHIM_MAX_APP_BYTES`) before they are read, anything that is not a Wasm binary is
//! refused with a short error, and every compilation (and Spin 4 middleware composition)
//! runs in a helper process held by the container's cgroup limits
//! ([`crate::compile_helper`]). The shim keys each cache entry by the digest of the bytes it
//! handed over and writes it itself.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use sha2::{Digest, Sha256};
use spin_runtime::app::Content;
use spin_runtime::engine::compile_cache::{
    baseline_compile_engine, compile_engine, entry_state, is_binary, CompileCache, EntryState,
    Reservation,
};
use spin_runtime::engine::componentize::is_core_module;
use spin_runtime::engine::middleware::Inherit;
use spin_runtime::engine::plan::{self, CompilePlan};
use spin_runtime::engine::tier::TieringConfig;
use spin_runtime::App;
use wasm_shim_core::confined::Dir;
use wasm_shim_core::content::digest_hex;
use wasm_shim_core::untrusted::{Limits, MAX_BYTES_ENV};

use crate::artifact::BLOBS_DIR;
use crate::cache_mount::{self, AppSource, Entry};
use crate::compile_helper::{Compiler, FailureKind, HelperError, Job, MiddlewarePart, Sandbox};

/// Longest part of an untrusted name (a path from the manifest) quoted in an error.
const MAX_NAME: usize = 200;

/// One distinct component source: a read-only file whose bytes the shim knows the digest
/// of, for compile helpers to read.
#[derive(Debug)]
pub struct Input {
    file: File,
    len: u64,
    /// Hex sha256 of the bytes.
    digest: String,
    core_module: bool,
}

/// The distinct sources of one app, by identity, within the app's byte budget.
struct Inputs<'a> {
    cache: &'a CompileCache,
    max: u64,
    total: u64,
    /// Bytes the shim read from sources (each distinct source once).
    read: u64,
    seen: HashMap<Identity, Arc<Input>>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
enum Identity {
    /// A blob of the artifact, by digest.
    Digest(String),
    /// A rootfs file, by device and inode.
    File(u64, u64),
}

impl<'a> Inputs<'a> {
    fn new(cache: &'a CompileCache, max: u64) -> Self {
        Inputs {
            cache,
            max,
            total: 0,
            read: 0,
            seen: HashMap::new(),
        }
    }

    /// Counts a new source of `len` bytes against the budget, before it is read.
    fn take(&mut self, len: u64, origin: &str) -> anyhow::Result<()> {
        self.total = self.total.saturating_add(len);
        anyhow::ensure!(
            self.total <= self.max,
            "{origin}: the app's distinct component sources add up to more than the limit of \
             {} bytes ({MAX_BYTES_ENV} in the shim's environment)",
            self.max
        );
        Ok(())
    }

    /// The artifact blob `digest` (verified and named by its digest when the shim wrote it).
    fn blob(&mut self, blobs: &Dir, digest: &str, origin: &str) -> anyhow::Result<Arc<Input>> {
        let hex = digest_hex(digest).with_context(|| origin.to_string())?;
        if let Some(i) = self.seen.get(&Identity::Digest(hex.to_string())) {
            return Ok(i.clone());
        }
        let file = blobs
            .open_file(Path::new(hex))
            .with_context(|| format!("{origin}: {digest}"))?;
        let len = file.metadata()?.len();
        self.take(len, origin)?;
        let core_module = check_magic(&file, origin)?;
        let input = Arc::new(Input {
            file,
            len,
            digest: hex.to_string(),
            core_module,
        });
        self.seen
            .insert(Identity::Digest(hex.to_string()), input.clone());
        Ok(input)
    }

    /// The rootfs file `rel` (resolved as the container will resolve it), copied once into
    /// a private file as it is hashed: the container could change its own copy later.
    fn rootfs(&mut self, root: &Dir, rel: &str, origin: &str) -> anyhow::Result<Arc<Input>> {
        let file = root
            .open_in_root(Path::new(rel))
            .with_context(|| origin.to_string())?;
        let md = file.metadata()?;
        let id = Identity::File(md.dev(), md.ino());
        if let Some(i) = self.seen.get(&id) {
            return Ok(i.clone());
        }
        let len = md.len();
        self.take(len, origin)?;
        let core_module = check_magic(&file, origin)?;
        let mut copy = self.cache.scratch_file("source")?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 << 10];
        let mut src = (&file).take(len + 1);
        let mut n = 0u64;
        loop {
            let k = src.read(&mut buf)?;
            if k == 0 {
                break;
            }
            hasher.update(&buf[..k]);
            copy.write_all(&buf[..k])
                .with_context(|| format!("{origin}: copying it into the compile cache"))?;
            n += k as u64;
        }
        self.read += n;
        anyhow::ensure!(n == len, "{origin}: it changed while the shim read it");
        let input = Arc::new(Input {
            file: read_only(&copy)?,
            len,
            digest: hex::encode(hasher.finalize()),
            core_module,
        });
        self.seen.insert(id, input.clone());
        Ok(input)
    }
}

impl Inputs<'_> {
    /// Content the app holds in memory (inline in a locked app), copied once into a private
    /// file.
    fn bytes(&mut self, bytes: &[u8], origin: &str) -> anyhow::Result<Arc<Input>> {
        let hex = hex::encode(Sha256::digest(bytes));
        if let Some(i) = self.seen.get(&Identity::Digest(hex.clone())) {
            return Ok(i.clone());
        }
        let len = bytes.len() as u64;
        self.take(len, origin)?;
        let mut copy = self.cache.scratch_file("source")?;
        copy.write_all(bytes)
            .with_context(|| format!("{origin}: copying it into the compile cache"))?;
        let file = read_only(&copy)?;
        let core_module = check_magic(&file, origin)?;
        let input = Arc::new(Input {
            file,
            len,
            digest: hex.clone(),
            core_module,
        });
        self.seen.insert(Identity::Digest(hex), input.clone());
        Ok(input)
    }
}

/// A read-only descriptor of `f` (its own open file: a helper can read, never write it).
fn read_only(f: &File) -> anyhow::Result<File> {
    let path = format!("/proc/self/fd/{}", f.as_raw_fd());
    File::open(&path).with_context(|| format!("reopening {path} read-only"))
}

/// Refuses a source that is not a Wasm binary, by its first bytes only (a text file is
/// never read further, nor quoted); returns whether it is a core module.
fn check_magic(file: &File, origin: &str) -> anyhow::Result<bool> {
    let mut head = [0u8; 8];
    let mut n = 0;
    while n < head.len() {
        match file.read_at(&mut head[n..], n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    anyhow::ensure!(
        is_binary(&head[..n]),
        "{origin}: not a Wasm binary (it does not start with the `\\0asm` magic; text-format \
         .wat and other files are refused); point the source at a compiled .wasm file"
    );
    Ok(is_core_module(&head[..n]))
}

/// `s` escaped and cut for an error message.
fn name(s: &str) -> String {
    crate::compile_helper::shown(s, MAX_NAME)
}

/// One thing to compile: a unit of the runtime's compile plan and the inputs the shim
/// verified for it.
struct Unit<'a> {
    /// How errors and logs name it.
    label: String,
    /// The plan's unit (component id, whether it may start on baseline code).
    plan: plan::Unit<'a>,
    what: What,
}

enum What {
    /// A source compiled as it ships.
    Plain(Arc<Input>),
    /// Spin 4 middleware composed in front of a component (as the runtime composes it).
    Composed {
        primary: Arc<Input>,
        middleware: Vec<(String, Inherit, Arc<Input>)>,
    },
}

/// Where the sources of `source`'s app model live on the host, for [`Inputs`].
enum Sources {
    /// The artifact's blobs, by hex digest.
    Blobs { dir: PathBuf, blobs: Dir },
    /// The container's rootfs (paths as the container sees them) and the node's downloads
    /// (URL sources, seen at [`crate::url_sources::CONTAINER_DIR`]).
    Rootfs { root: Dir, downloads: Option<Dir> },
}

impl Sources {
    fn of(source: &AppSource) -> anyhow::Result<Sources> {
        Ok(match source {
            AppSource::Locked { app_dir, .. } => {
                let dir = app_dir.join(BLOBS_DIR);
                Sources::Blobs {
                    blobs: Dir::open(&dir)?,
                    dir,
                }
            }
            AppSource::Manifest { rootfs, .. } => Sources::Rootfs {
                root: Dir::open(rootfs)?,
                downloads: None,
            },
        })
    }

    /// The verified input of `content` (a source of the app model of [`app_model`]).
    fn input(
        &mut self,
        inputs: &mut Inputs<'_>,
        content: &Content,
        origin: &str,
    ) -> anyhow::Result<Arc<Input>> {
        let path = match content {
            Content::Bytes(b) => return inputs.bytes(b, origin),
            Content::Path(p) => p,
        };
        let named = |dir: &Path| {
            path.strip_prefix(dir)
                .ok()
                .and_then(|rest| rest.to_str())
                .filter(|hex| {
                    spin_app_format::remote::digest_hex(&format!("sha256:{hex}")).is_some()
                })
                .map(|hex| format!("sha256:{hex}"))
        };
        match self {
            Sources::Blobs { dir, blobs } => {
                let digest = named(dir).with_context(|| {
                    format!("{origin}: not a Wasm layer of the artifact (a directory of files?)")
                })?;
                inputs.blob(blobs, &digest, origin)
            }
            Sources::Rootfs { root, downloads } => {
                if let Some(digest) = named(Path::new(crate::url_sources::CONTAINER_DIR)) {
                    // Downloaded by the shim into the node cache, named by their verified
                    // digest (crate::url_sources).
                    let dir = match downloads {
                        Some(d) => d,
                        None => downloads.insert(Dir::open(&crate::url_sources::host_dir())?),
                    };
                    return inputs.blob(dir, &digest, origin);
                }
                // Resolved as the runtime will in the container: relative to `/`, links
                // and `..` confined to the rootfs.
                let rel = path.strip_prefix("/").unwrap_or(path);
                let rel = rel.to_str().context("a source path that is not UTF-8")?;
                inputs.rootfs(root, rel, origin)
            }
        }
    }
}

/// The app model of `source` as the container's runtime will build it, from the locked
/// app or the `/spin.toml` the shim read (locked without touching the rootfs: sources are
/// read confined, by [`Sources`]).
pub fn app_model(source: &AppSource) -> anyhow::Result<App> {
    match source {
        AppSource::Locked { lock, app_dir } => {
            App::from_locked_json(lock, &|c: &spin_app_format::ContentRef| {
                crate::artifact::content(app_dir, c)
            })
            .context("the locked app of the artifact")
        }
        AppSource::Manifest { lock, .. } => {
            App::from_locked(lock.clone(), &|c: &spin_app_format::ContentRef| {
                if let Some(path) = c.file_path() {
                    return Ok(Content::Path(path));
                }
                match c
                    .digest
                    .as_deref()
                    .and_then(spin_app_format::remote::digest_hex)
                {
                    Some(hex) => Ok(Content::Path(
                        Path::new(crate::url_sources::CONTAINER_DIR).join(hex),
                    )),
                    None => {
                        anyhow::bail!("a source that is neither a file nor a URL with a digest")
                    }
                }
            })
            .context("/spin.toml")
        }
    }
}

/// The units of `plan` with their distinct inputs, each source opened once.
fn units<'a>(
    source: &AppSource,
    plan: &CompilePlan<'a>,
    inputs: &mut Inputs<'_>,
) -> anyhow::Result<Vec<Unit<'a>>> {
    let mut sources = Sources::of(source)?;
    let mut out = Vec::new();
    for u in &plan.units {
        let label = format!("component `{}`", name(u.id()));
        let origin = match (source, u.source()) {
            (AppSource::Manifest { .. }, Content::Path(p)) => format!(
                "/spin.toml: {label}: source `{}`",
                name(&p.to_string_lossy())
            ),
            _ => label.clone(),
        };
        let primary = sources.input(inputs, u.source(), &origin)?;
        if u.middleware().is_empty() {
            out.push(Unit {
                label,
                plan: u.clone(),
                what: What::Plain(primary),
            });
            continue;
        }
        let mut middleware = Vec::new();
        for m in u.middleware() {
            let origin = format!("{label}: {}", name(&m.name));
            let input = sources.input(inputs, &m.source, &origin)?;
            middleware.push((m.name.clone(), m.inherit.clone(), input));
        }
        out.push(Unit {
            label: format!("{label} with its middleware"),
            plan: u.clone(),
            what: What::Composed {
                primary,
                middleware,
            },
        });
    }
    Ok(out)
}

/// Compiles `source` into the host cache `dir` (created `0700`, pruned first) in helpers of
/// `sandbox`, off the async workers; returns the entries the container may load and those
/// to compile once it runs ([`precompile`]).
pub async fn compile_app(
    source: AppSource,
    dir: PathBuf,
    tiering: TieringConfig,
    sandbox: Sandbox,
) -> anyhow::Result<Precompiled> {
    let max = cache_mount::max_bytes()?;
    tokio::task::spawn_blocking(move || {
        spin_runtime::engine::compile_cache::create_private_dir(&dir)
            .with_context(|| format!("the compile cache (set {})", cache_mount::DIR_ENV))?;
        if let Err(e) = cache_mount::prune(&dir, max) {
            tracing::warn!("compile cache {}: {e:#}", dir.display());
        }
        precompile(&source, &dir, tiering, &sandbox)
    })
    .await
    .context("compile task failed")?
}

/// What [`precompile`] made: the entries the container may load, and the components it
/// starts on baseline code, to be compiled with Cranelift once it runs ([`compile_later`]).
#[derive(Debug, Default)]
pub struct Precompiled {
    /// Entries by file name.
    pub entries: Vec<Entry>,
    /// Reserved Cranelift entries, to fill.
    pub later: Vec<Later>,
}

/// A component whose Cranelift entry is reserved (the container waits for it on baseline
/// code).
#[derive(Debug)]
pub struct Later {
    label: String,
    id: String,
    input: Arc<Input>,
    reservation: Reservation,
}

/// Bound on a helper's output for an input of `len` bytes: compiled code is a few times
/// the size of its Wasm, a composition about the size of its parts.
fn max_output(len: u64) -> u64 {
    len.saturating_mul(16).saturating_add(256 << 20)
}

/// Compiles each distinct component of `source` into the node cache `cache_dir` (entries
/// named as the runtime looks them up), each in a helper of `sandbox`. A component
/// `tiering` applies to (large, run by HTTP triggers only, without a Cranelift entry yet) is
/// compiled with the baseline compiler (Winch) instead, several times faster, and its
/// Cranelift entry reserved: the container serves on the baseline code and swaps in
/// Cranelift's when [`compile_later`] has filled the reservation. Blocking.
pub fn precompile(
    source: &AppSource,
    cache_dir: &Path,
    tiering: TieringConfig,
    sandbox: &Sandbox,
) -> anyhow::Result<Precompiled> {
    let limits = Limits::from_env()?;
    let cache = CompileCache::new(cache_dir);
    // Only for entry names (compatibility hashes): nothing is compiled in this process.
    let engine = compile_engine()?;
    let base_engine = baseline_compile_engine()?;
    let mut inputs = Inputs::new(&cache, limits.max_bytes);
    let app = app_model(source)?;
    let plan = CompilePlan::of(&app)?;
    let units = units(source, &plan, &mut inputs)?;
    tracing::debug!(
        sources = inputs.seen.len(),
        bytes = inputs.total,
        read = inputs.read,
        "component sources"
    );
    let mut entries: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut later = Vec::new();
    for unit in units {
        let started = std::time::Instant::now();
        let input = match &unit.what {
            What::Plain(i) => i.clone(),
            What::Composed {
                primary,
                middleware,
            } => compose(sandbox, &cache, &unit, primary, middleware)?,
        };
        let main = cache.entry_path_for(engine, &input.digest, input.core_module);
        let name = file_name(&main)?;
        if entries.contains_key(&name) {
            continue;
        }
        let tier = unit.plan.starts_on_baseline(&tiering, input.len as usize)
            && entry_state(&main) == EntryState::Missing;
        if tier {
            let base = cache.entry_path_for(base_engine, &input.digest, input.core_module);
            let ready = match compile_into(sandbox, &cache, &base, Compiler::Winch, &unit, &input) {
                Ok(()) => true,
                // Winch does not compile every proposal Cranelift does: such a component is
                // compiled with Cranelift before the container starts, as without tiering.
                Err(e) if e.kind == FailureKind::Rejected => {
                    tracing::info!(
                        component = %unit.label,
                        "the baseline compiler cannot compile it, compiling with Cranelift \
                         before the container starts: {e}"
                    );
                    false
                }
                Err(e) => return Err(e.into()),
            };
            if ready {
                let reservation = cache.reserve_entry(main.clone())?;
                tracing::info!(
                    component = %unit.label,
                    bytes = input.len,
                    ms = started.elapsed().as_millis() as u64,
                    "compiled with the baseline compiler (Winch) in a helper in the \
                     container's cgroup, to start now; Cranelift's code follows while the \
                     container serves"
                );
                entries.insert(file_name(&base)?, base);
                entries.insert(name, reservation.file().to_path_buf());
                later.push(Later {
                    id: unit.plan.id().to_string(),
                    label: unit.label,
                    input,
                    reservation,
                });
                continue;
            }
        }
        compile_into(sandbox, &cache, &main, Compiler::Cranelift, &unit, &input)?;
        tracing::info!(
            component = %unit.label,
            bytes = input.len,
            ms = started.elapsed().as_millis() as u64,
            "compiled in a helper in the container's cgroup"
        );
        entries.insert(name, main);
    }
    Ok(Precompiled {
        entries: entries.into_iter().collect(),
        later,
    })
}

fn file_name(path: &Path) -> anyhow::Result<String> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .context("cache entry without a file name")
}

/// Makes the cache entry `entry` of `input` with `compiler`, unless it exists (then marks it
/// used): the helper's output is copied into a file of the shim's, renamed to `entry` once
/// the helper succeeded.
fn compile_into(
    sandbox: &Sandbox,
    cache: &CompileCache,
    entry: &Path,
    compiler: Compiler,
    unit: &Unit,
    input: &Input,
) -> Result<(), HelperError> {
    if entry_state(entry) == EntryState::Ready {
        CompileCache::touch(entry);
        return Ok(());
    }
    let shim_failed = |e| HelperError::shim(&unit.label, e);
    let mut w = cache.entry_writer(entry).map_err(shim_failed)?;
    let job = Job::Compile {
        compiler,
        serial: false,
        id: unit.plan.id().to_string(),
        len: input.len,
    };
    sandbox.run(
        &job,
        &[&input.file],
        &mut w,
        max_output(input.len),
        &unit.label,
    )?;
    w.commit().map_err(shim_failed)?;
    Ok(())
}

/// Composes `middleware` in front of `primary` in a helper; the composition becomes an
/// input the shim hashed as it arrived.
fn compose(
    sandbox: &Sandbox,
    cache: &CompileCache,
    unit: &Unit,
    primary: &Arc<Input>,
    middleware: &[(String, Inherit, Arc<Input>)],
) -> anyhow::Result<Arc<Input>> {
    let mut copy = cache.scratch_file("composed")?;
    let mut hashing = Hashing {
        inner: &mut copy,
        hasher: Sha256::new(),
    };
    let job = Job::Compose {
        id: unit.plan.id().to_string(),
        len: primary.len,
        middleware: middleware
            .iter()
            .map(|(name, inherit, input)| MiddlewarePart {
                name: name.clone(),
                inherit: match inherit {
                    Inherit::All => None,
                    Inherit::Some(keys) => Some(keys.clone()),
                },
                len: input.len,
            })
            .collect(),
    };
    let files: Vec<&File> = std::iter::once(&primary.file)
        .chain(middleware.iter().map(|(_, _, i)| &i.file))
        .collect();
    let total = primary.len + middleware.iter().map(|m| m.2.len).sum::<u64>();
    let len = sandbox.run(&job, &files, &mut hashing, max_output(total), &unit.label)?;
    let digest = hex::encode(hashing.hasher.finalize());
    let file = read_only(&copy)?;
    let core_module = check_magic(&file, &unit.label)?;
    Ok(Arc::new(Input {
        file,
        len,
        digest,
        core_module,
    }))
}

/// Hashes what it writes.
struct Hashing<'a> {
    inner: &'a mut File,
    hasher: Sha256,
}

impl Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Past the create timeout, when a reserved name is surely bound or no longer needed.
const BIND_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Fills the reserved Cranelift entries of `later` from a background thread of the shim,
/// each compiled by a helper of `sandbox` (the container's cgroup, at a lower priority;
/// [`Sandbox::background`]) while the container serves. A failure (the pod's limits
/// included) is logged and leaves the container on baseline code; so does a container
/// that is gone.
pub fn compile_later(id: &str, later: Vec<Later>, sandbox: Sandbox) {
    if later.is_empty() {
        return;
    }
    let owned = id.to_string();
    let spawned = std::thread::Builder::new()
        .name("tier-up".into())
        .spawn(move || {
            let id = owned;
            let t0 = std::time::Instant::now();
            let bound = wasm_shim_core::zygote::configured_create_timeout() + BIND_MARGIN;
            let mut published = Vec::new();
            for l in later {
                if !sandbox.wait_for_cgroup(bound) {
                    tracing::info!(
                        id,
                        component = %l.label,
                        "the container's cgroup does not exist: no Cranelift compilation, \
                         the container (if any) stays on baseline code"
                    );
                    continue;
                }
                let reserved = l.reservation.file().to_path_buf();
                let filled = fill(&sandbox, l.reservation, &l.id, &l.label, &l.input);
                match filled {
                    Ok(path) => {
                        published.push(reserved);
                        tracing::info!(
                            id,
                            component = %l.label,
                            entry = %path.display(),
                            ms = t0.elapsed().as_millis() as u64,
                            "compiled with Cranelift in a helper in the container's cgroup; \
                             the container swaps it in"
                        )
                    }
                    Err(e) => tracing::warn!(
                        id,
                        "Cranelift compilation failed, the container stays on baseline code: \
                         {e:#}"
                    ),
                }
            }
            // The entries are published under their own names; the reserved names go once
            // the container's creation (which binds them) is over either way. If the shim
            // exits first, pruning removes them.
            std::thread::sleep(bound.saturating_sub(t0.elapsed()));
            for f in published {
                let _ = std::fs::remove_file(f);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(
            id,
            "cannot start the shim's tier-up thread ({e}); the container stays on baseline code"
        );
    }
}

/// Compiles `input` with Cranelift in a helper into `reservation` and publishes it.
fn fill(
    sandbox: &Sandbox,
    reservation: Reservation,
    id: &str,
    label: &str,
    input: &Input,
) -> anyhow::Result<PathBuf> {
    let mut w = reservation.writer()?;
    let job = Job::Compile {
        compiler: Compiler::Cranelift,
        serial: true,
        id: id.to_string(),
        len: input.len,
    };
    sandbox.run(&job, &[&input.file], &mut w, max_output(input.len), label)?;
    drop(w);
    reservation.publish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn manifest(components: &[(&str, &str)]) -> String {
        let mut m = String::from("spin_manifest_version = 2\n[application]\nname = \"t\"\n");
        for (id, source) in components {
            m.push_str(&format!(
                "[[trigger.http]]\nroute = \"/{id}/...\"\ncomponent = \"{id}\"\n\
                 [component.{id}]\nsource = \"{source}\"\n"
            ));
        }
        m
    }

    /// Each unit's (primary) input of the app in `rootfs`, and the bytes read.
    fn gather(
        rootfs: &Path,
        cache: &CompileCache,
        max: u64,
    ) -> anyhow::Result<(Vec<Arc<Input>>, u64)> {
        let mut inputs = Inputs::new(cache, max);
        let source = AppSource::manifest(rootfs)?;
        let app = app_model(&source)?;
        let plan = CompilePlan::of(&app)?;
        let units = units(&source, &plan, &mut inputs)?
            .into_iter()
            .map(|u| match u.what {
                What::Plain(i) => i,
                What::Composed { primary, .. } => primary,
            })
            .collect();
        Ok((units, inputs.read))
    }

    #[test]
    fn one_source_named_by_many_components_is_read_once() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("rootfs");
        std::fs::create_dir_all(root.join("c")).unwrap();
        let mut big = COMPONENT.to_vec();
        big.resize(1 << 20, 0);
        std::fs::write(root.join("c/big.wasm"), &big).unwrap();
        std::os::unix::fs::symlink("c/big.wasm", root.join("link.wasm")).unwrap();
        let names = [
            ("a", "c/big.wasm"),
            ("b", "./c/big.wasm"),
            ("c", "c/../c/big.wasm"),
            ("d", "/c/big.wasm"),
            ("e", "link.wasm"),
            ("f", "c/big.wasm"),
        ];
        std::fs::write(root.join("spin.toml"), manifest(&names)).unwrap();
        let cache = CompileCache::new(d.path().join("cache"));
        // Six components, one source: within a budget of one copy, read once.
        let (units, read) = gather(&root, &cache, big.len() as u64).unwrap();
        assert_eq!(units.len(), 6);
        assert!(units.iter().all(|u| Arc::ptr_eq(u, &units[0])));
        assert_eq!(read, big.len() as u64);
        let i = &units[0];
        assert_eq!(i.digest, hex::encode(Sha256::digest(&big)));
        assert_eq!(i.len, big.len() as u64);
        // The helper's copy is the shim's, read-only.
        let mut back = Vec::new();
        (&i.file).read_to_end(&mut back).unwrap();
        assert!(back == big);
        assert!((&i.file).write_all(b"x").is_err());
        // Nothing of the copies stays in the cache directory.
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 0);

        // Two distinct sources over the budget fail before the second is read.
        std::fs::copy(root.join("c/big.wasm"), root.join("other.wasm")).unwrap();
        std::fs::write(
            root.join("spin.toml"),
            manifest(&[("a", "c/big.wasm"), ("b", "other.wasm")]),
        )
        .unwrap();
        let e = format!(
            "{:#}",
            gather(&root, &cache, big.len() as u64 + 100).err().unwrap()
        );
        assert!(e.contains(MAX_BYTES_ENV) && e.contains("other.wasm"), "{e}");
    }

    #[test]
    fn text_sources_are_refused_without_being_read_or_quoted() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("rootfs");
        std::fs::create_dir_all(&root).unwrap();
        let secret = "(component) ;; SECRET-TEXT ".repeat(50_000);
        std::fs::write(root.join("app.wat"), &secret).unwrap();
        std::fs::write(root.join("spin.toml"), manifest(&[("a", "app.wat")])).unwrap();
        let cache = CompileCache::new(d.path().join("cache"));
        let e = format!("{:#}", gather(&root, &cache, 1 << 30).err().unwrap());
        assert!(e.len() < 1024, "{} bytes: {e}", e.len());
        assert!(!e.contains("SECRET"), "{e}");
        assert!(
            e.contains("app.wat") && e.contains("not a Wasm binary"),
            "{e}"
        );
        // An empty file too.
        std::fs::write(root.join("app.wat"), b"").unwrap();
        let e = format!("{:#}", gather(&root, &cache, 1 << 30).err().unwrap());
        assert!(e.contains("not a Wasm binary"), "{e}");
    }

    #[test]
    fn blobs_are_one_input_per_digest() {
        let d = tempfile::tempdir().unwrap();
        let blobs = d.path().join("blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        let hex = hex::encode(Sha256::digest(COMPONENT));
        std::fs::write(blobs.join(&hex), COMPONENT).unwrap();
        let text_hex = hex::encode(Sha256::digest(b"hello"));
        std::fs::write(blobs.join(&text_hex), b"hello").unwrap();
        let cache = CompileCache::new(d.path().join("cache"));
        let mut inputs = Inputs::new(&cache, COMPONENT.len() as u64);
        let dir = Dir::open(&blobs).unwrap();
        let digest = format!("sha256:{hex}");
        let a = inputs.blob(&dir, &digest, "component `a`").unwrap();
        let b = inputs.blob(&dir, &digest, "component `b`").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.digest, hex);
        let mut inputs = Inputs::new(&cache, 1 << 20);
        let e = inputs
            .blob(&dir, &format!("sha256:{text_hex}"), "component `t`")
            .unwrap_err();
        assert!(format!("{e:#}").contains("not a Wasm binary"), "{e:#}");
    }
}
