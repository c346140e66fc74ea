//! `spin-serve`'s settings: the container runtime's ([`crate::container`]) and its own, all
//! from its process environment.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::container::ContainerSettings;
use crate::parse::{process_env, Reader, Role, SettingError};

/// spin-serve's cache of downloaded URL sources.
pub const SOURCE_CACHE_DIR: &str = "SPIN_SERVE_SOURCE_CACHE_DIR";

/// spin-serve's settings, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeSettings {
    /// What the runtime reads, as in a container.
    pub runtime: ContainerSettings,
    /// [`SOURCE_CACHE_DIR`]; `None`: under `$XDG_CACHE_HOME`, `~/.cache` or the temp dir.
    pub source_cache_dir: Option<PathBuf>,
    /// [`crate::shim::DOWNLOAD_TIMEOUT_SECS`].
    pub download_timeout: Duration,
    /// [`crate::shim::MAX_DOWNLOAD_BYTES`].
    pub max_download_bytes: u64,
}

impl ServeSettings {
    /// Reads and checks every setting of spin-serve in `env` (its environment as a list).
    pub fn from_env(env: &[(String, String)]) -> Result<Self, SettingError> {
        let r = Reader {
            env,
            role: Role::Serve,
        };
        Ok(ServeSettings {
            runtime: ContainerSettings::read(&r)?,
            source_cache_dir: r.path(SOURCE_CACHE_DIR),
            download_timeout: r.positive_secs(
                crate::shim::DOWNLOAD_TIMEOUT_SECS,
                crate::shim::DEFAULT_DOWNLOAD_TIMEOUT_SECS,
            )?,
            max_download_bytes: r.number(
                crate::shim::MAX_DOWNLOAD_BYTES,
                0,
                crate::shim::DEFAULT_MAX_DOWNLOAD_BYTES,
                crate::shim::DEFAULT_MAX_DOWNLOAD_BYTES,
            )?,
        })
    }
}

impl ServeSettings {
    /// Parses `env` and keeps the result as this process's settings, its runtime part as
    /// [`ContainerSettings::current`]: spin-serve calls it first, before it loads the app.
    pub fn init(env: &[(String, String)]) -> Result<&'static Self, SettingError> {
        if let Some(s) = SERVE.get() {
            return Ok(s);
        }
        let s = Self::from_env(env)?;
        s.runtime.clone().keep();
        Ok(SERVE.get_or_init(|| s))
    }
}

impl ServeSettings {
    /// The settings [`ServeSettings::init`] kept; `None` outside spin-serve.
    pub fn current() -> Option<&'static Self> {
        SERVE.get()
    }
}

/// spin-serve's download cache directory ([`SOURCE_CACHE_DIR`]): the kept settings' when
/// [`ServeSettings::init`] ran, else the variable read alone from this process's environment
/// (a host tool that resolves URL sources without being spin-serve). `None`: unset.
pub fn source_cache_dir() -> Option<PathBuf> {
    match SERVE.get() {
        Some(s) => s.source_cache_dir.clone(),
        None => Reader {
            env: &process_env(),
            role: Role::Serve,
        }
        .path(SOURCE_CACHE_DIR),
    }
}

static SERVE: OnceLock<ServeSettings> = OnceLock::new();

/// The download bounds of this process: spin-serve's settings when it kept them
/// ([`ServeSettings::init`]), else the shim's ([`crate::shim::ShimSettings::init`]): both
/// roles read the same variables, each from its own environment.
pub fn downloads() -> Result<crate::shim::Downloads, SettingError> {
    if let Some(s) = ServeSettings::current() {
        return Ok(crate::shim::Downloads {
            timeout: s.download_timeout,
            max_bytes: s.max_download_bytes,
        });
    }
    let s = crate::shim::ShimSettings::init()?;
    Ok(crate::shim::Downloads {
        timeout: s.download_timeout,
        max_bytes: s.max_download_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_spin_serve_as_the_source() {
        let env = vec![(crate::container::POOLING.to_string(), "no".to_string())];
        let msg = ServeSettings::from_env(&env).unwrap_err().to_string();
        assert!(msg.contains("spin-serve's environment"), "{msg}");
        let s = ServeSettings::from_env(&[]).unwrap();
        assert_eq!(s.download_timeout, Duration::from_secs(300));
        assert_eq!(s.source_cache_dir, None);
    }
}
