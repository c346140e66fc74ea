//! The node-local compiled-component cache shared by all Spin containers.
//!
//! The shim bind-mounts the host cache directory (default [`DEFAULT_DIR`], override with
//! [`DIR_ENV`] in the shim's environment) read-write into every Spin container at
//! [`CONTAINER_DIR`] and sets [`DIR_ENV`]`=`[`CONTAINER_DIR`] in the container's env, so the
//! Spin runtime's `compile_cache` (keyed by component sha256 and the engine's
//! compatibility hash, atomic writes) is reused across shim processes: a second start of
//! the same image loads instead of compiling. Before each Spin container starts, the
//! oldest entries beyond [`MAX_BYTES_ENV`] (default [`DEFAULT_MAX_BYTES`]) are removed.

use std::path::{Path, PathBuf};

use anyhow::Context;
use libcontainer::oci_spec::runtime::{MountBuilder, Spec};

/// Default host directory: the Spin runtime's own default.
pub use spin_runtime::compile_cache::DEFAULT_DIR;
/// Env var (shim's environment for the host dir; container env inside the container).
pub use spin_runtime::compile_cache::DIR_ENV;
/// Env var (shim's environment) capping the cache size in bytes.
pub const MAX_BYTES_ENV: &str = "SPIN_SHIM_COMPILE_CACHE_MAX_BYTES";
/// Default size cap: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// Where the cache appears inside a container.
pub const CONTAINER_DIR: &str = "/.spin-compile-cache";

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

/// Prepares the host cache and adds its bind mount and env var to `spec`.
pub fn attach(spec: &mut Spec) -> anyhow::Result<PathBuf> {
    let dir = host_dir();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("create the compile cache {} (set {DIR_ENV})", dir.display()))?;
    let max = max_bytes()?;
    if let Err(e) = prune(&dir, max) {
        tracing::warn!("compile cache {}: {e:#}", dir.display());
    }
    let mount = MountBuilder::default()
        .destination(CONTAINER_DIR)
        .typ("bind")
        .source(&dir)
        .options(vec!["rbind".to_string(), "rw".to_string()])
        .build()
        .context("compile cache mount")?;
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    mounts.retain(|m| m.destination() != Path::new(CONTAINER_DIR));
    mounts.push(mount);
    spec.set_mounts(Some(mounts));
    if let Some(mut p) = spec.process().clone() {
        let mut env = p.env().clone().unwrap_or_default();
        env.retain(|kv| !kv.starts_with(&format!("{DIR_ENV}=")));
        env.push(format!("{DIR_ENV}={CONTAINER_DIR}"));
        p.set_env(Some(env));
        spec.set_process(Some(p));
    }
    Ok(dir)
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
