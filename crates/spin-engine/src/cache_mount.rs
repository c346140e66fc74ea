//! The node's compiled-component cache, and what each Spin container sees of it.
//!
//! Loading a compiled component runs its native code, so entries are written only by the
//! shim, never by a workload: before a Spin container starts, the shim compiles every
//! component of the app ([`crate::precompile`]) in helper processes held by the
//! container's cgroup limits ([`crate::compile_helper`]) and writes their output into the
//! host directory (default [`DEFAULT_DIR`], override [`DIR_ENV`] in the shim's
//! environment), which it keeps `0700` root, under the digest of the bytes it handed to
//! the helper. The container gets
//! no view of that directory: each of its own entries is bind-mounted read-only at
//! `/.spin-app/compiled/<entry>`, and its environment says [`DIR_ENV`]`=`[`CONTAINER_DIR`]
//! with the cache read-only, so the runtime inside loads exactly those entries and never
//! writes one. A large component the cache has no Cranelift entry for is compiled with the
//! baseline compiler first, and its Cranelift entry bound as a reserved file the shim fills
//! once the container runs ([`crate::precompile`]). Before each compile the oldest entries
//! beyond [`MAX_BYTES_ENV`] (default
//! [`spin_shim_settings::shim::DEFAULT_COMPILE_CACHE_MAX_BYTES`]) are removed, and temporary or
//! reserved files a dead shim left behind once they are an hour old.

use std::path::{Path, PathBuf};

use anyhow::Context;
use libcontainer::oci_spec::runtime::{MountBuilder, Spec};

/// Default host directory: the Spin runtime's own default.
pub use spin_runtime::engine::compile_cache::DEFAULT_DIR;
/// Env var (shim's environment for the host dir; container env inside the container).
pub use spin_runtime::engine::compile_cache::DIR_ENV;
/// Env var (shim's environment) capping the cache size in bytes.
pub const MAX_BYTES_ENV: &str = spin_shim_settings::shim::COMPILE_CACHE_MAX_BYTES;
/// Where the shim's app directory appears inside a container (read-only).
pub const APP_MOUNT: &str = "/.spin-app";
/// The directory of compiled entries inside the app directory.
pub const COMPILED_DIR: &str = "compiled";
/// Where a container sees its own compiled entries (read-only, nothing else).
pub const CONTAINER_DIR: &str = "/.spin-app/compiled";

/// The host cache directory of the shim's settings ([`DIR_ENV`]).
pub fn host_dir() -> PathBuf {
    spin_shim_settings::shim::ShimSettings::get()
        .compile_cache_dir
        .clone()
}

/// The size cap of the shim's settings ([`MAX_BYTES_ENV`]).
pub fn max_bytes() -> anyhow::Result<u64> {
    Ok(spin_shim_settings::shim::ShimSettings::init()?.compile_cache_max_bytes)
}

/// Removes the oldest (by modification time) `*.cwasm` entries of `dir` until the total is
/// at most `max`; returns the number removed. Stale temporary files older than an hour
/// are removed too.
pub fn prune(dir: &Path, max: u64) -> anyhow::Result<usize> {
    let mut entries = Vec::new();
    let mut removed = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let e = e?;
        let Ok(md) = e.metadata() else { continue };
        if !md.is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let mtime = md.modified().unwrap_or(std::time::UNIX_EPOCH);
        if name.starts_with(".tmp-") {
            if mtime.elapsed().is_ok_and(|a| a.as_secs() > 3600) {
                let _ = std::fs::remove_file(e.path());
            }
            continue;
        }
        if name.ends_with(".cwasm") {
            entries.push((mtime, md.len(), e.path()));
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    entries.sort();
    for (_, len, path) in entries {
        if total <= max {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            tracing::debug!(path = %path.display(), "compile cache: evicted");
            total -= len;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Env var (container environment) making the runtime's cache read-only.
pub use spin_runtime::engine::compile_cache::READONLY_ENV;

/// What a Spin container will run, for [`crate::precompile`].
#[derive(Debug, Clone)]
pub enum AppSource {
    /// A materialised artifact: its locked app, and the shim's app directory (blobs by
    /// digest).
    Locked {
        /// The locked-app JSON.
        lock: Vec<u8>,
        /// The shim-owned app directory.
        app_dir: PathBuf,
    },
    /// `/spin.toml` in the container's rootfs (read confined to the rootfs).
    Manifest {
        /// The container's rootfs on the host.
        rootfs: PathBuf,
        /// The manifest locked as the container will lock it, without touching the rootfs
        /// ([`spin_app_format::manifest::lock_sources`]).
        lock: spin_app_format::LockedApp,
    },
}

/// Largest `/spin.toml` the shim reads from a rootfs.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

impl AppSource {
    /// The app of `/spin.toml` in `rootfs`, read once, confined to the rootfs, and locked
    /// without touching anything else. Errors name `/spin.toml` and the key.
    pub fn manifest(rootfs: &Path) -> anyhow::Result<AppSource> {
        let root = wasm_shim_core::confined::Dir::open(rootfs)?;
        let text = root.read_in_root(Path::new("spin.toml"), MAX_MANIFEST_BYTES)?;
        let text = String::from_utf8(text).map_err(|e| {
            anyhow::anyhow!(
                "/spin.toml is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        })?;
        Ok(AppSource::Manifest {
            rootfs: rootfs.to_path_buf(),
            lock: spin_app_format::manifest::lock_sources(&text, "/spin.toml")?,
        })
    }
}

/// A compiled entry: its file name (as the runtime looks it up) and host path.
pub type Entry = (String, PathBuf);

/// A read-only, nosuid, nodev bind mount of host `src` at container path `dst`.
pub fn read_only_bind(
    src: &Path,
    dst: &str,
) -> anyhow::Result<libcontainer::oci_spec::runtime::Mount> {
    MountBuilder::default()
        .destination(dst)
        .typ("bind")
        .source(src)
        .options(vec![
            "rbind".to_string(),
            "ro".to_string(),
            "nosuid".to_string(),
            "nodev".to_string(),
        ])
        .build()
        .context("Spin app mount")
}

/// Gives the container read-only access to `app_dir` at [`APP_MOUNT`] and to exactly
/// `entries` below it at [`CONTAINER_DIR`], and points its runtime at them (read-only).
/// Creates the mount points in `app_dir`; drops any mount of the spec at those paths.
pub fn attach(spec: &mut Spec, app_dir: &Path, entries: &[Entry]) -> anyhow::Result<()> {
    let app = wasm_shim_core::confined::Dir::create(app_dir)?;
    let compiled = app.create_dir_all(Path::new(COMPILED_DIR))?;
    let ro = read_only_bind;
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    mounts.retain(|m| !m.destination().starts_with(APP_MOUNT));
    mounts.push(ro(app_dir, APP_MOUNT)?);
    for (name, host) in entries {
        if !compiled.contains(name) {
            compiled.create_file(name, 0o444)?;
        }
        mounts.push(ro(host, &format!("{CONTAINER_DIR}/{name}"))?);
    }
    spec.set_mounts(Some(mounts));
    if let Some(mut p) = spec.process().clone() {
        let mut env = p.env().clone().unwrap_or_default();
        env.retain(|kv| {
            !kv.starts_with(&format!("{DIR_ENV}=")) && !kv.starts_with(&format!("{READONLY_ENV}="))
        });
        env.push(format!("{DIR_ENV}={CONTAINER_DIR}"));
        env.push(format!("{READONLY_ENV}=1"));
        p.set_env(Some(env));
        spec.set_process(Some(p));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_removes_oldest_beyond_cap() {
        let d = tempfile::tempdir().unwrap();
        for (i, name) in ["a.cwasm", "b.cwasm", "c.cwasm"].iter().enumerate() {
            let p = d.path().join(name);
            std::fs::write(&p, vec![0u8; 100]).unwrap();
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(100 - i as u64);
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        std::fs::write(d.path().join("other"), vec![0u8; 1000]).unwrap();
        assert_eq!(prune(d.path(), 250).unwrap(), 1);
        assert!(!d.path().join("a.cwasm").exists());
        assert!(d.path().join("b.cwasm").exists() && d.path().join("c.cwasm").exists());
        assert_eq!(prune(d.path(), 1000).unwrap(), 0);
        assert_eq!(prune(d.path(), 0).unwrap(), 2);
        assert!(d.path().join("other").exists());
    }
}
