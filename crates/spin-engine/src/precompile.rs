//! Compiling a Spin app in the shim, before its container starts: outside the container,
//! outside its memory limit, into the node's root-only compile cache.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use spin_runtime::compile_cache::{
    baseline_compile_engine, compile_engine, entry_state, CompileCache, EntryState, Outcome,
    Reservation,
};
use spin_runtime::tier::TieringConfig;
use wasm_shim_core::confined::Dir;
use wasm_shim_core::content::digest_hex;
use wasm_shim_core::untrusted::Limits;

use crate::artifact::BLOBS_DIR;
use crate::cache_mount::{AppSource, Entry};

/// Largest `/spin.toml` the shim reads from a rootfs.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// One component source the runtime compiles as it ships.
struct Source {
    /// Where it is declared, for logs and errors.
    label: String,
    /// Whether an event trigger (not HTTP) runs it: its code must be final at start.
    event: bool,
    /// The Wasm.
    bytes: Vec<u8>,
}

/// The bytes of every component source of `source` that the runtime compiles as it
/// ships (not composed with dependencies), named by where they are declared.
fn sources(source: &AppSource, max: u64) -> anyhow::Result<Vec<Source>> {
    let mut out = Vec::new();
    match source {
        AppSource::Locked { lock, app_dir } => {
            let lock = spin_app_format::LockedApp::from_json(lock)
                .context("the locked app of the artifact")?;
            let event: BTreeSet<&str> = lock
                .triggers
                .iter()
                .filter(|t| t.trigger_type != spin_app_format::trigger::HTTP)
                .filter_map(|t| t.trigger_config.get("component")?.as_str())
                .collect();
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
                        out.push(Source {
                            label: format!("component `{}` with its middleware", c.id),
                            event: event.contains(c.id.as_str()),
                            bytes: composed,
                        });
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
                out.push(Source {
                    label: format!("component `{id}`"),
                    event: event.contains(id.as_str()),
                    bytes,
                });
            }
        }
        AppSource::Manifest { rootfs } => {
            let root = Dir::open(rootfs)?;
            let text = root.read_in_root(Path::new("spin.toml"), MAX_MANIFEST_BYTES)?;
            let text = String::from_utf8(text).context("/spin.toml is not UTF-8")?;
            let event = spin_app_format::manifest::event_trigger_components(&text, "/spin.toml")?;
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
                out.push(Source {
                    label: format!("component `{}`", s.id),
                    event: event.contains(&s.id),
                    bytes,
                });
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
                // Middleware composes HTTP triggers only.
                out.push(Source {
                    label: format!("{} with its middleware", m.trigger),
                    event: false,
                    bytes: composed,
                });
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
    bytes: Vec<u8>,
    reservation: Reservation,
}

/// Compiles each distinct component of `source` into the node cache `cache_dir` (entries
/// named as the runtime looks them up). A component `tiering` applies to (large, run by
/// HTTP triggers only, without a Cranelift entry yet) is compiled with the baseline
/// compiler (Winch) instead, several times faster, and its Cranelift entry reserved: the
/// container serves on the baseline code and swaps in Cranelift's when [`compile_later`]
/// has filled the reservation. Blocking.
pub fn precompile(
    source: &AppSource,
    cache_dir: &Path,
    tiering: TieringConfig,
) -> anyhow::Result<Precompiled> {
    let limits = Limits::from_env()?;
    let cache = CompileCache::new(cache_dir);
    let engine = compile_engine()?;
    let mut entries: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut later = Vec::new();
    let file_name = |path: &Path| {
        path.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .context("cache entry without a file name")
    };
    for Source {
        label,
        event,
        bytes,
    } in sources(source, limits.max_bytes)?
    {
        let started = std::time::Instant::now();
        let main = cache.entry_path(engine, &bytes);
        let name = file_name(&main)?;
        if entries.contains_key(&name) {
            continue;
        }
        let tier =
            !event && tiering.applies(bytes.len()) && entry_state(&main) == EntryState::Missing;
        // Winch does not compile every proposal Cranelift does: such a component is
        // compiled with Cranelift before the container starts, as without tiering.
        let base = match tier
            .then(|| baseline_compile_engine().and_then(|b| cache.precompile_on(b, &bytes, &label)))
        {
            Some(Ok((base, _))) => Some(base),
            Some(Err(e)) => {
                tracing::info!(
                    component = %label,
                    "the baseline compiler cannot compile it, compiling with Cranelift before \
                     the container starts: {e:#}"
                );
                None
            }
            None => None,
        };
        if let Some(base) = base {
            let reservation = cache.reserve(engine, &bytes)?;
            tracing::info!(
                component = %label,
                bytes = bytes.len(),
                ms = started.elapsed().as_millis() as u64,
                "compiled in the shim with the baseline compiler (Winch) to start now; \
                 Cranelift's code follows while the container serves"
            );
            entries.insert(file_name(&base)?, base);
            entries.insert(name, reservation.file().to_path_buf());
            later.push(Later {
                label,
                bytes,
                reservation,
            });
            continue;
        }
        let (path, outcome) = cache.precompile(&bytes, &label)?;
        if outcome == Outcome::Miss {
            tracing::info!(
                component = %label,
                bytes = bytes.len(),
                ms = started.elapsed().as_millis() as u64,
                "compiled in the shim"
            );
        }
        entries.insert(name, path);
    }
    Ok(Precompiled {
        entries: entries.into_iter().collect(),
        later,
    })
}

/// Past the create timeout, when a reserved name is surely bound or no longer needed.
const BIND_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Fills the reserved Cranelift entries of `later` on a background thread of the shim at a
/// lower CPU priority (the container serves meanwhile), then gives the memory the
/// compilation used back. A failure is logged; the container stays on baseline code.
pub fn compile_later(id: &str, later: Vec<Later>) {
    if later.is_empty() {
        return;
    }
    let owned = id.to_string();
    let spawned = std::thread::Builder::new()
        .name("tier-up".into())
        .spawn(move || {
            let id = owned;
            spin_runtime::tier::lower_thread_priority();
            let t0 = std::time::Instant::now();
            let mut published = Vec::new();
            for l in later {
                let reserved = l.reservation.file().to_path_buf();
                let filled = compile_engine()
                    .and_then(|engine| l.reservation.fill(engine, &l.bytes, &l.label));
                spin_runtime::tier::release_freed_memory();
                match filled {
                    Ok(path) => {
                        published.push(reserved);
                        tracing::info!(
                        id,
                        component = %l.label,
                        entry = %path.display(),
                        ms = t0.elapsed().as_millis() as u64,
                        "compiled with Cranelift in the shim; the container swaps it in"
                        )
                    }
                    Err(e) => tracing::warn!(
                        id,
                        component = %l.label,
                        "Cranelift compilation in the shim failed, the container stays on \
                         baseline code: {e:#}"
                    ),
                }
            }
            // The entries are published under their own names; the reserved names go once
            // the container's creation (which binds them) is over either way. If the shim
            // exits first, pruning removes them.
            let bound = wasm_shim_core::zygote::configured_create_timeout() + BIND_MARGIN;
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
