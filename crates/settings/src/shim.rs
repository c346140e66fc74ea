//! The shim process's settings (and its compile helper's, which the shim hands over): read
//! from the shim's environment, which is containerd's. Validated once at start
//! ([`ShimSettings::init`]); a bad value stops the shim before it serves, naming it.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::parse::{process_env, Reader, Role, SettingError};

/// The shim's state directory (per-container app directories, its state file).
pub const STATE_DIR: &str = "SPIN_SHIM_STATE_DIR";
/// How long a container's Create may take in the creation helper.
pub const CREATE_TIMEOUT_SECS: &str = "SPIN_SHIM_CREATE_TIMEOUT_SECS";
/// Bytes one app may write when its layers are extracted.
pub const MAX_APP_BYTES: &str = "SPIN_SHIM_MAX_APP_BYTES";
/// Archive entries one app may hold.
pub const MAX_APP_ENTRIES: &str = "SPIN_SHIM_MAX_APP_ENTRIES";
/// The node's compiled-component cache directory.
pub const COMPILE_CACHE_DIR: &str = "SPIN_SHIM_COMPILE_CACHE_DIR";
/// The compile cache's size cap; the oldest entries are evicted above it.
pub const COMPILE_CACHE_MAX_BYTES: &str = "SPIN_SHIM_COMPILE_CACHE_MAX_BYTES";
/// A compile helper's CPU time limit (`RLIMIT_CPU`).
pub const COMPILE_CPU_SECS: &str = "SPIN_SHIM_COMPILE_CPU_SECS";
/// How long a compile helper may run before the shim kills it.
pub const COMPILE_TIMEOUT_SECS: &str = "SPIN_SHIM_COMPILE_TIMEOUT_SECS";
/// The node's cache of downloaded URL sources.
pub const SOURCE_CACHE_DIR: &str = "SPIN_SHIM_SOURCE_CACHE_DIR";
/// The longest a URL source's download may take.
pub const DOWNLOAD_TIMEOUT_SECS: &str = "SPIN_SHIM_DOWNLOAD_TIMEOUT_SECS";
/// The largest URL source downloaded.
pub const MAX_DOWNLOAD_BYTES: &str = "SPIN_SHIM_MAX_DOWNLOAD_BYTES";
/// Idle seconds after which a process gives back its executable's pages; `0` off.
pub const IDLE_RELEASE_SECS: &str = "SPIN_SHIM_IDLE_RELEASE_SECS";
/// Whether a component the compile cache misses starts on baseline code (the container's
/// variable; the shim's precompile reads it too).
pub const TIERED_COMPILE: &str = "SPIN_SHIM_TIERED_COMPILE";
/// The size from which tiering applies (as [`TIERED_COMPILE`]).
pub const TIERED_COMPILE_MIN_BYTES: &str = "SPIN_SHIM_TIERED_COMPILE_MIN_BYTES";

/// Default of [`STATE_DIR`].
pub const DEFAULT_STATE_DIR: &str = "/run/spin-shim";
/// Default of [`COMPILE_CACHE_DIR`].
pub const DEFAULT_COMPILE_CACHE_DIR: &str = "/var/lib/containerd-shim-spin-v2/compile-cache";
/// Default of [`IDLE_RELEASE_SECS`].
pub const DEFAULT_IDLE_RELEASE_SECS: u64 = 30;
/// Default of [`COMPILE_CACHE_MAX_BYTES`]: 2 GiB.
pub const DEFAULT_COMPILE_CACHE_MAX_BYTES: u64 = 2 << 30;
/// Default of [`COMPILE_CPU_SECS`].
pub const DEFAULT_COMPILE_CPU_SECS: u64 = 300;
/// Default of [`COMPILE_TIMEOUT_SECS`] (kubelet gives CreateContainer 2 minutes).
pub const DEFAULT_COMPILE_TIMEOUT_SECS: u64 = 90;
/// Default of [`DOWNLOAD_TIMEOUT_SECS`]: 5 minutes.
pub const DEFAULT_DOWNLOAD_TIMEOUT_SECS: u64 = 300;
/// Default of [`MAX_DOWNLOAD_BYTES`]: 256 MiB (Spin's Python components are about 40 MiB).
pub const DEFAULT_MAX_DOWNLOAD_BYTES: u64 = 256 << 20;

/// The shim's settings, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimSettings {
    /// [`STATE_DIR`].
    pub state_dir: PathBuf,
    /// [`CREATE_TIMEOUT_SECS`].
    pub create_timeout: Duration,
    /// [`MAX_APP_BYTES`].
    pub max_app_bytes: u64,
    /// [`MAX_APP_ENTRIES`].
    pub max_app_entries: u64,
    /// [`COMPILE_CACHE_DIR`].
    pub compile_cache_dir: PathBuf,
    /// [`COMPILE_CACHE_MAX_BYTES`].
    pub compile_cache_max_bytes: u64,
    /// [`COMPILE_CPU_SECS`].
    pub compile_cpu_secs: u64,
    /// [`COMPILE_TIMEOUT_SECS`].
    pub compile_timeout: Duration,
    /// [`SOURCE_CACHE_DIR`], else `url-sources` beside the compile cache.
    pub source_cache_dir: PathBuf,
    /// [`DOWNLOAD_TIMEOUT_SECS`].
    pub download_timeout: Duration,
    /// [`MAX_DOWNLOAD_BYTES`].
    pub max_download_bytes: u64,
    /// [`IDLE_RELEASE_SECS`]; `None`: off.
    pub idle_release: Option<Duration>,
    /// [`TIERED_COMPILE`] for the shim's precompile, where the container's
    /// environment does not set it.
    pub tiered_compile: bool,
    /// [`TIERED_COMPILE_MIN_BYTES`], as [`ShimSettings::tiered_compile`].
    pub tiered_compile_min_bytes: u64,
}

impl ShimSettings {
    /// Reads and checks every shim setting in `env` (the shim's environment as a list).
    pub fn from_env(env: &[(String, String)]) -> Result<Self, SettingError> {
        let r = Reader {
            env,
            role: Role::Shim,
        };
        let compile_cache_dir = r
            .path(COMPILE_CACHE_DIR)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_COMPILE_CACHE_DIR));
        Ok(ShimSettings {
            state_dir: r
                .path(STATE_DIR)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            create_timeout: r.positive_secs(CREATE_TIMEOUT_SECS, 60)?,
            max_app_bytes: r.number(MAX_APP_BYTES, 0, 1 << 30, 1 << 30)?,
            max_app_entries: r.number(MAX_APP_ENTRIES, 0, 100_000, 100_000)?,
            source_cache_dir: r
                .path(SOURCE_CACHE_DIR)
                .unwrap_or_else(|| compile_cache_dir.with_file_name("url-sources")),
            compile_cache_dir,
            compile_cache_max_bytes: r.number(
                COMPILE_CACHE_MAX_BYTES,
                0,
                DEFAULT_COMPILE_CACHE_MAX_BYTES,
                DEFAULT_COMPILE_CACHE_MAX_BYTES,
            )?,
            compile_cpu_secs: r
                .positive_secs(COMPILE_CPU_SECS, DEFAULT_COMPILE_CPU_SECS)?
                .as_secs(),
            compile_timeout: r.positive_secs(COMPILE_TIMEOUT_SECS, DEFAULT_COMPILE_TIMEOUT_SECS)?,
            download_timeout: r
                .positive_secs(DOWNLOAD_TIMEOUT_SECS, DEFAULT_DOWNLOAD_TIMEOUT_SECS)?,
            max_download_bytes: r.number(
                MAX_DOWNLOAD_BYTES,
                0,
                DEFAULT_MAX_DOWNLOAD_BYTES,
                DEFAULT_MAX_DOWNLOAD_BYTES,
            )?,
            idle_release: idle_release(&r)?,
            tiered_compile: r.flag(TIERED_COMPILE, true)?,
            tiered_compile_min_bytes: r.number(TIERED_COMPILE_MIN_BYTES, 0, 2 << 20, 2 << 20)?,
        })
    }

    /// Reads this process's environment once and keeps the result for [`ShimSettings::get`].
    /// The shim calls it first thing; a bad value is returned, for the shim to stop on.
    pub fn init() -> Result<&'static Self, SettingError> {
        if let Some(s) = SETTINGS.get() {
            return Ok(s);
        }
        let s = Self::from_env(&process_env())?;
        Ok(SETTINGS.get_or_init(|| s))
    }

    /// The settings [`ShimSettings::init`] read. In a process that did not call it (a test,
    /// a tool), the environment is read now, and a bad value panics naming it.
    pub fn get() -> &'static Self {
        Self::init().unwrap_or_else(|e| panic!("{e}"))
    }
}

static SETTINGS: OnceLock<ShimSettings> = OnceLock::new();

/// [`STATE_DIR`] of this process: the kept settings' ([`ShimSettings::init`]), else the
/// variable read alone from the shim's environment. `delete` (run by containerd after a
/// shim died) skips the check of the other settings, so that a bad value of one of them
/// never leaves a container behind; it finds the state directory here.
pub fn state_dir() -> PathBuf {
    if let Some(s) = SETTINGS.get() {
        return s.state_dir.clone();
    }
    Reader {
        env: &process_env(),
        role: Role::Shim,
    }
    .path(STATE_DIR)
    .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// The bounds of one URL source's download.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Downloads {
    /// [`DOWNLOAD_TIMEOUT_SECS`].
    pub timeout: Duration,
    /// [`MAX_DOWNLOAD_BYTES`].
    pub max_bytes: u64,
}

/// [`IDLE_RELEASE_SECS`] through `r`: whole seconds, `0` off.
pub(crate) fn idle_release(r: &Reader<'_>) -> Result<Option<Duration>, SettingError> {
    let secs = r.number(
        IDLE_RELEASE_SECS,
        0,
        DEFAULT_IDLE_RELEASE_SECS,
        DEFAULT_IDLE_RELEASE_SECS,
    )?;
    Ok((secs > 0).then(|| Duration::from_secs(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::env_list as env;

    #[test]
    fn defaults() {
        let s = ShimSettings::from_env(&[]).unwrap();
        assert_eq!(s.state_dir, PathBuf::from("/run/spin-shim"));
        assert_eq!(s.create_timeout, Duration::from_secs(60));
        assert_eq!(s.max_app_bytes, 1 << 30);
        assert_eq!(
            s.source_cache_dir,
            PathBuf::from("/var/lib/containerd-shim-spin-v2/url-sources")
        );
        assert_eq!(s.compile_timeout, Duration::from_secs(90));
        assert_eq!(s.idle_release, Some(Duration::from_secs(30)));
    }

    #[test]
    fn values_and_errors() {
        let s = ShimSettings::from_env(&env(&[
            (COMPILE_CACHE_DIR, "/c/cache"),
            (IDLE_RELEASE_SECS, "0"),
            (CREATE_TIMEOUT_SECS, " 7 "),
        ]))
        .unwrap();
        assert_eq!(s.source_cache_dir, PathBuf::from("/c/url-sources"));
        assert_eq!(s.idle_release, None);
        assert_eq!(s.create_timeout, Duration::from_secs(7));
        for (k, v) in [
            (CREATE_TIMEOUT_SECS, "0"),
            (CREATE_TIMEOUT_SECS, "10s"),
            (MAX_APP_BYTES, "1G"),
            (IDLE_RELEASE_SECS, "soon"),
            (COMPILE_CPU_SECS, "-3"),
            (TIERED_COMPILE, "fast"),
        ] {
            let e = ShimSettings::from_env(&env(&[(k, v)])).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("{k}=`{v}`")) && msg.contains("the shim's environment"),
                "{msg}"
            );
        }
    }
}
