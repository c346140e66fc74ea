//! The node's compiled-component cache, and what each Spin container sees of it.
//!
//! Loading a compiled component runs its native code, so entries are written only by the
//! shim, never by a workload: before a Spin container starts, the shim (outside the
//! container and its memory limit) compiles every component of the app through the
//! engine's [`Precompiler`] into the host directory (default [`DEFAULT_DIR`], override
//! [`DIR_ENV`] in the shim's environment), which it keeps `0700` root. The container gets
//! no view of that directory: each of its own entries is bind-mounted read-only at
//! `/.spin-app/compiled/<entry>`, and its environment says [`DIR_ENV`]`=`[`CONTAINER_DIR`]
//! with the cache read-only, so the runtime inside loads exactly those entries and never
//! writes one. Before each compile the oldest entries beyond [`MAX_BYTES_ENV`] (default
//! [`DEFAULT_MAX_BYTES`]) are removed.

use std::path::{Path, PathBuf};

use anyhow::Context;
use libcontainer::oci_spec::runtime::{MountBuilder, Spec};

/// Default host directory (same as `spin_runtime::compile_cache::DEFAULT_DIR`).
pub const DEFAULT_DIR: &str = "/var/lib/containerd-shim-spin-v2/compile-cache";
/// Env var (shim's environment for the host dir; container env inside the container).
pub const DIR_ENV: &str = "SPIN_SHIM_COMPILE_CACHE_DIR";
/// Env var (shim's environment) capping the cache size in bytes.
pub const MAX_BYTES_ENV: &str = "SPIN_SHIM_COMPILE_CACHE_MAX_BYTES";
/// Default size cap: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// Where the shim's app directory appears inside a container (read-only).
pub const APP_MOUNT: &str = "/.spin-app";
/// The directory of compiled entries inside the app directory.
pub const COMPILED_DIR: &str = "compiled";
/// Where a container sees its own compiled entries (read-only, nothing else).
pub const CONTAINER_DIR: &str = "/.spin-app/compiled";

/// The host cache directory from the shim's environment.
pub fn host_dir() -> PathBuf {
    std::env::var(DIR_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// The size cap from the shim's environment.
pub fn max_bytes() -> anyhow::Result<u64> {
    match std::env::var(MAX_BYTES_ENV) {
        Ok(v) if !v.is_empty() => v.trim().parse().with_context(|| {
            format!("{MAX_BYTES_ENV}={v:?} is not a byte count (e.g. 2147483648)")
        }),
        _ => Ok(DEFAULT_MAX_BYTES),
    }
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
pub const READONLY_ENV: &str = "SPIN_SHIM_COMPILE_CACHE_READONLY";

/// What a Spin container will run, for the [`Precompiler`].
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
    },
}

/// A compiled entry: its file name (as the runtime looks it up) and host path.
pub type Entry = (String, PathBuf);

/// Compiles every component of an app into the host cache `dir`, returning the entries.
/// Blocking. Provided by the engine (the binary crate).
pub type Precompiler = fn(&AppSource, &Path) -> anyhow::Result<Vec<Entry>>;

static PRECOMPILER: std::sync::OnceLock<Precompiler> = std::sync::OnceLock::new();

/// Sets the engine's precompiler (once, before the shim starts).
pub fn set_precompiler(p: Precompiler) {
    let _ = PRECOMPILER.set(p);
}

/// Compiles `source` into the host cache (pruned first), off the async workers.
pub async fn precompile(source: AppSource) -> anyhow::Result<Vec<Entry>> {
    let Some(p) = PRECOMPILER.get().copied() else {
        return Ok(Vec::new());
    };
    let dir = host_dir();
    let max = max_bytes()?;
    tokio::task::spawn_blocking(move || {
        create_private_dir(&dir)?;
        if let Err(e) = prune(&dir, max) {
            tracing::warn!("compile cache {}: {e:#}", dir.display());
        }
        p(&source, &dir)
    })
    .await
    .context("compile task failed")?
}

/// Creates the host cache directory `0700` (mode restored if loosened); refuses a link or
/// file in its place.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("create the compile cache {} (set {DIR_ENV})", dir.display()))?;
    let md = std::fs::symlink_metadata(dir)?;
    anyhow::ensure!(
        md.is_dir(),
        "compile cache {} is not a directory (a link or file is in the way)",
        dir.display()
    );
    if md.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Gives the container read-only access to `app_dir` at [`APP_MOUNT`] and to exactly
/// `entries` below it at [`CONTAINER_DIR`], and points its runtime at them (read-only).
/// Creates the mount points in `app_dir`; drops any mount of the spec at those paths.
pub fn attach(spec: &mut Spec, app_dir: &Path, entries: &[Entry]) -> anyhow::Result<()> {
    let app = crate::confined::Dir::create(app_dir)?;
    let compiled = app.create_dir_all(Path::new(COMPILED_DIR))?;
    let ro = |src: &Path, dst: &str| {
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
    };
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
