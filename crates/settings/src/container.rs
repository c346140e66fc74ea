//! The runtime's settings inside a container (Spin and WASI), from the container's
//! environment: the OCI spec's `process.env` (the runtime process's own environment is
//! empty). `spin-serve` reads the same settings from its process environment
//! ([`crate::serve`]). Validated when the runtime starts, before it loads the app.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::parse::{Reader, Role, SettingError};

/// The HTTP trigger's listen address.
pub const HTTP_LISTEN_ADDR: &str = "SPIN_HTTP_LISTEN_ADDR";
/// Each instance's linear-memory cap, bytes.
pub const MAX_INSTANCE_MEMORY: &str = "SPIN_MAX_INSTANCE_MEMORY";
/// One request's deadline.
pub const REQUEST_TIMEOUT: &str = "SPIN_SHIM_REQUEST_TIMEOUT";
/// How long a client may take to send a request head.
pub const HEADER_READ_TIMEOUT: &str = "SPIN_SHIM_HEADER_READ_TIMEOUT";
/// How long a keep-alive connection may sit idle.
pub const IDLE_TIMEOUT: &str = "SPIN_SHIM_IDLE_TIMEOUT";
/// How long a response write may make no progress.
pub const WRITE_TIMEOUT: &str = "SPIN_SHIM_WRITE_TIMEOUT";
/// Most connections served at once.
pub const MAX_CONNECTIONS: &str = "SPIN_SHIM_MAX_CONNECTIONS";
/// Requests one WASIp3 instance serves in all.
pub const MAX_INSTANCE_REUSE_COUNT: &str = "SPIN_SHIM_MAX_INSTANCE_REUSE_COUNT";
/// Requests one WASIp3 instance serves at once.
pub const MAX_INSTANCE_CONCURRENT_REUSE_COUNT: &str =
    "SPIN_SHIM_MAX_INSTANCE_CONCURRENT_REUSE_COUNT";
/// How long an idle WASIp3 instance is kept.
pub const IDLE_INSTANCE_TIMEOUT: &str = "SPIN_SHIM_IDLE_INSTANCE_TIMEOUT";
/// Where Prometheus metrics are served.
pub const METRICS_ADDR: &str = "SPIN_SHIM_METRICS_ADDR";
// Read by both roles (the shim's precompile too): defined with the shim's names.
pub use crate::shim::{TIERED_COMPILE, TIERED_COMPILE_MIN_BYTES};
/// Whether the compile cache is only read.
pub const COMPILE_CACHE_READONLY: &str = "SPIN_SHIM_COMPILE_CACHE_READONLY";
/// Whether the engine uses wasmtime's pooling allocator.
pub const POOLING: &str = "SPIN_SHIM_POOLING";
/// Inbound TLS: the PEM certificate chain.
pub const TLS_CERT: &str = "SPIN_TLS_CERT";
/// Inbound TLS: the PEM private key.
pub const TLS_KEY: &str = "SPIN_TLS_KEY";
/// The runtime config file.
pub const RUNTIME_CONFIG_FILE: &str = "SPIN_RUNTIME_CONFIG_FILE";
/// The state directory of key-value stores and SQLite databases.
pub const STATE_DIR: &str = "SPIN_STATE_DIR";
/// The components to serve (Spin's selective deployment).
pub const COMPONENTS_TO_RETAIN: &str = "SPIN_COMPONENTS_TO_RETAIN";
/// A WASI program's deadline.
pub const WASI_TIMEOUT: &str = "SPIN_SHIM_WASI_TIMEOUT";
/// An application variable's value (`SPIN_VARIABLE_` and its name upper-cased).
pub const VARIABLE_PREFIX_NAME: &str = "SPIN_VARIABLE_<NAME>";
/// Spin's tracing level of exported spans (read by `otel-export`).
pub const OTEL_TRACING_LEVEL: &str = "SPIN_OTEL_TRACING_LEVEL";
/// Spin's switch that keeps the app's output out of exported logs (read by `otel-export`).
pub const DISABLE_LOG_TO_TRACING: &str = "SPIN_DISABLE_LOG_TO_TRACING";

/// Default of [`HTTP_LISTEN_ADDR`].
pub const DEFAULT_LISTEN: &str = "0.0.0.0:80";

/// The container runtime's settings, typed. Values whose default depends on the container
/// (memory cap, connection cap) are `None` when unset.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSettings {
    /// [`HTTP_LISTEN_ADDR`].
    pub listen: SocketAddr,
    /// [`MAX_INSTANCE_MEMORY`]; `None`: derived from the container's memory limit.
    pub max_instance_memory: Option<u64>,
    /// [`REQUEST_TIMEOUT`]; `None`: off.
    pub request_timeout: Option<Duration>,
    /// [`HEADER_READ_TIMEOUT`]; `None`: off.
    pub header_read_timeout: Option<Duration>,
    /// [`IDLE_TIMEOUT`]; `None`: off.
    pub idle_timeout: Option<Duration>,
    /// [`WRITE_TIMEOUT`]; `None`: off.
    pub write_timeout: Option<Duration>,
    /// [`MAX_CONNECTIONS`]; `None`: derived from the file limit.
    pub max_connections: Option<u64>,
    /// [`MAX_INSTANCE_REUSE_COUNT`].
    pub max_instance_reuse_count: u64,
    /// [`MAX_INSTANCE_CONCURRENT_REUSE_COUNT`].
    pub max_instance_concurrent_reuse_count: u64,
    /// [`IDLE_INSTANCE_TIMEOUT`]; `None`: dropped as soon as idle.
    pub idle_instance_timeout: Option<Duration>,
    /// [`METRICS_ADDR`]; `None`: off.
    pub metrics_addr: Option<SocketAddr>,
    /// [`TIERED_COMPILE`].
    pub tiered_compile: bool,
    /// [`TIERED_COMPILE_MIN_BYTES`].
    pub tiered_compile_min_bytes: u64,
    /// [`crate::shim::COMPILE_CACHE_DIR`] as the container names it; `None`: the default.
    pub compile_cache_dir: Option<PathBuf>,
    /// [`COMPILE_CACHE_READONLY`].
    pub compile_cache_readonly: bool,
    /// [`POOLING`].
    pub pooling: bool,
    /// [`TLS_CERT`] and [`TLS_KEY`], both or neither.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// [`RUNTIME_CONFIG_FILE`].
    pub runtime_config_file: Option<PathBuf>,
    /// [`STATE_DIR`].
    pub state_dir: Option<PathBuf>,
    /// [`COMPONENTS_TO_RETAIN`]; empty: all.
    pub components_to_retain: Vec<String>,
    /// [`WASI_TIMEOUT`]; `None`: none.
    pub wasi_timeout: Option<Duration>,
    /// [`crate::shim::IDLE_RELEASE_SECS`] in the container's environment; `None`: off.
    pub idle_release: Option<Duration>,
}

impl ContainerSettings {
    /// Reads and checks every setting of the container runtime in `env` (the container's
    /// environment list).
    pub fn from_env(env: &[(String, String)]) -> Result<Self, SettingError> {
        Self::read(&Reader {
            env,
            role: Role::Container,
        })
    }

    /// Parses `env` and keeps the result as this process's settings
    /// ([`ContainerSettings::current`]): the runtime in a container calls it once, before it
    /// runs the app. A later call returns the first call's settings.
    pub fn init(env: &[(String, String)]) -> Result<&'static Self, SettingError> {
        if let Some(s) = CURRENT.get() {
            return Ok(s);
        }
        let s = Self::from_env(env)?;
        Ok(CURRENT.get_or_init(|| s))
    }

    /// Keeps `self` as this process's settings unless some are kept already (spin-serve's
    /// [`crate::serve::ServeSettings::init`]).
    pub(crate) fn keep(self) {
        let _ = CURRENT.set(self);
    }

    /// The settings [`ContainerSettings::init`] kept; `None` outside a container's runtime.
    pub fn current() -> Option<&'static Self> {
        CURRENT.get()
    }

    /// [`TIERED_COMPILE`] and [`TIERED_COMPILE_MIN_BYTES`] together.
    pub fn tiering(&self) -> Tiering {
        Tiering {
            enabled: self.tiered_compile,
            min_bytes: self.tiered_compile_min_bytes,
        }
    }

    pub(crate) fn read(r: &Reader<'_>) -> Result<Self, SettingError> {
        let secs = |s: u64| Some(Duration::from_secs(s));
        let listen = r.addr(HTTP_LISTEN_ADDR, "0.0.0.0:80")?;
        let tls = match (r.path(TLS_CERT), r.path(TLS_KEY)) {
            (None, None) => None,
            (Some(c), Some(k)) => Some((c, k)),
            (Some(c), None) => {
                return Err(pair_error(r, TLS_CERT, &c, TLS_KEY));
            }
            (None, Some(k)) => {
                return Err(pair_error(r, TLS_KEY, &k, TLS_CERT));
            }
        };
        Ok(ContainerSettings {
            listen: listen.unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("default address")),
            max_instance_memory: match r.get(MAX_INSTANCE_MEMORY) {
                None => None,
                Some(_) => Some(r.number(MAX_INSTANCE_MEMORY, 0, 134_217_728, 0)?),
            },
            request_timeout: r.duration(REQUEST_TIMEOUT, secs(60))?,
            header_read_timeout: r.duration(HEADER_READ_TIMEOUT, secs(30))?,
            idle_timeout: r.duration(IDLE_TIMEOUT, secs(30))?,
            write_timeout: r.duration(WRITE_TIMEOUT, secs(30))?,
            max_connections: match r.get(MAX_CONNECTIONS) {
                None => None,
                Some(_) => Some(r.number(MAX_CONNECTIONS, 1, 1000, 0)?),
            },
            max_instance_reuse_count: r.number(MAX_INSTANCE_REUSE_COUNT, 1, 128, 128)?,
            max_instance_concurrent_reuse_count: r.number(
                MAX_INSTANCE_CONCURRENT_REUSE_COUNT,
                1,
                16,
                16,
            )?,
            idle_instance_timeout: r.duration(IDLE_INSTANCE_TIMEOUT, secs(1))?,
            metrics_addr: r.addr(METRICS_ADDR, "0.0.0.0:9464")?,
            tiered_compile: r.flag(TIERED_COMPILE, true)?,
            tiered_compile_min_bytes: r.number(TIERED_COMPILE_MIN_BYTES, 0, 2 << 20, 2 << 20)?,
            compile_cache_dir: r.path(crate::shim::COMPILE_CACHE_DIR),
            compile_cache_readonly: r.flag(COMPILE_CACHE_READONLY, false)?,
            pooling: r.flag(POOLING, true)?,
            tls,
            runtime_config_file: r.path(RUNTIME_CONFIG_FILE),
            state_dir: r.path(STATE_DIR),
            components_to_retain: r
                .get(COMPONENTS_TO_RETAIN)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            wasi_timeout: r.fractional_secs(WASI_TIMEOUT)?,
            idle_release: crate::shim::idle_release(r)?,
        })
    }
}

/// [`WASI_TIMEOUT`] of `env` alone (a WASI program's runtime reads nothing else of the
/// container's settings): `None` when unset or `0`.
pub fn wasi_timeout(env: &[(String, String)]) -> Result<Option<Duration>, SettingError> {
    Reader {
        env,
        role: Role::Container,
    }
    .fractional_secs(WASI_TIMEOUT)
}

/// When a component the compile cache misses starts on baseline code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiering {
    /// [`TIERED_COMPILE`].
    pub enabled: bool,
    /// [`TIERED_COMPILE_MIN_BYTES`].
    pub min_bytes: u64,
}

/// The tiering the shim's precompile applies to a container: [`TIERED_COMPILE`] and
/// [`TIERED_COMPILE_MIN_BYTES`] each from the container's environment `env` where it sets
/// them (checked as the container's settings), else the shim's (`shim`, from the shim's
/// environment).
pub fn precompile_tiering(
    env: &[(String, String)],
    shim: &crate::shim::ShimSettings,
) -> Result<Tiering, SettingError> {
    let r = Reader {
        env,
        role: Role::Container,
    };
    Ok(Tiering {
        enabled: r.flag(TIERED_COMPILE, shim.tiered_compile)?,
        min_bytes: r.number(
            TIERED_COMPILE_MIN_BYTES,
            0,
            2 << 20,
            shim.tiered_compile_min_bytes,
        )?,
    })
}

static CURRENT: OnceLock<ContainerSettings> = OnceLock::new();

fn pair_error(r: &Reader<'_>, set: &str, value: &std::path::Path, missing: &str) -> SettingError {
    SettingError {
        name: set.to_string(),
        value: value.display().to_string(),
        source: r.role.source(),
        fix: format!(
            "{set} is set but {missing} is not: set both (the PEM certificate chain and its \
             private key) to serve TLS, or neither to serve plain HTTP"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::env_list as env;

    #[test]
    fn defaults() {
        let s = ContainerSettings::from_env(&[]).unwrap();
        assert_eq!(s.listen, "0.0.0.0:80".parse().unwrap());
        assert_eq!(s.request_timeout, Some(Duration::from_secs(60)));
        assert_eq!(s.idle_instance_timeout, Some(Duration::from_secs(1)));
        assert_eq!((s.max_instance_memory, s.max_connections), (None, None));
        assert!(s.pooling && s.tiered_compile && !s.compile_cache_readonly);
        assert_eq!(s.tls, None);
    }

    #[test]
    fn the_last_value_wins_and_bad_values_name_the_variable() {
        let s = ContainerSettings::from_env(&env(&[
            (HTTP_LISTEN_ADDR, "127.0.0.1:1"),
            (HTTP_LISTEN_ADDR, "127.0.0.1:2"),
            (POOLING, "0"),
            (COMPONENTS_TO_RETAIN, "a, b,"),
            (WASI_TIMEOUT, "0.25"),
        ]))
        .unwrap();
        assert_eq!(s.listen, "127.0.0.1:2".parse().unwrap());
        assert!(!s.pooling);
        assert_eq!(s.components_to_retain, ["a", "b"]);
        assert_eq!(s.wasi_timeout, Some(Duration::from_millis(250)));
        for (k, v) in [
            (HTTP_LISTEN_ADDR, "localhost"),
            (POOLING, "off"),
            (COMPILE_CACHE_READONLY, "true"),
            (MAX_CONNECTIONS, "0"),
            (REQUEST_TIMEOUT, "1h"),
            (WASI_TIMEOUT, "soon"),
            (MAX_INSTANCE_MEMORY, "128M"),
        ] {
            let msg = ContainerSettings::from_env(&env(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains(&format!("{k}=`{v}`")) && msg.contains("the container's environment"),
                "{msg}"
            );
        }
        let msg = ContainerSettings::from_env(&env(&[(TLS_CERT, "/c.pem")]))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("SPIN_TLS_CERT is set but SPIN_TLS_KEY is not"),
            "{msg}"
        );
        let msg = ContainerSettings::from_env(&env(&[(TLS_KEY, "/k.pem")]))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("SPIN_TLS_KEY is set but SPIN_TLS_CERT is not"),
            "{msg}"
        );
    }

    #[test]
    fn precompile_tiering_takes_the_containers_value_else_the_shims() {
        let shim = crate::shim::ShimSettings::from_env(&env(&[
            (TIERED_COMPILE, "0"),
            (TIERED_COMPILE_MIN_BYTES, "10"),
        ]))
        .unwrap();
        let t = precompile_tiering(&[], &shim).unwrap();
        assert_eq!((t.enabled, t.min_bytes), (false, 10));
        let t = precompile_tiering(&env(&[(TIERED_COMPILE, "1")]), &shim).unwrap();
        assert_eq!((t.enabled, t.min_bytes), (true, 10));
        let t = precompile_tiering(&env(&[(TIERED_COMPILE_MIN_BYTES, "7")]), &shim).unwrap();
        assert_eq!((t.enabled, t.min_bytes), (false, 7));
        let msg = precompile_tiering(&env(&[(TIERED_COMPILE_MIN_BYTES, "2M")]), &shim)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("SPIN_SHIM_TIERED_COMPILE_MIN_BYTES=`2M` in the container's environment"),
            "{msg}"
        );
    }
}
