//! Every environment variable this project reads as a setting, per process role:
//!
//! - [`shim::ShimSettings`]: the long-lived shim process and its compile helper, from the
//!   shim's own environment (containerd's, which the shim inherits);
//! - [`container::ContainerSettings`]: the runtime inside a container (Spin and WASI), from
//!   the container's environment (the OCI spec's `process.env`; the runtime's own process
//!   environment is empty);
//! - [`serve::ServeSettings`]: `spin-serve`, from its process environment (the container
//!   runtime's settings plus its own).
//!
//! Each role parses and validates all of its variables at start; a bad value is a
//! [`SettingError`] naming the variable, the value and the fix. [`VARS`] lists every
//! variable with its roles, default and accepted values: the README's environment table is
//! checked against it (`tests/readme_table.rs`).

#![warn(missing_docs)]

pub mod container;
mod parse;
pub mod serve;
pub mod shim;

pub use parse::{lookup, parse_duration, process_env, Role, SettingError};

/// One variable: its name, who reads it, its default and what it accepts.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// The name (`SPIN_VARIABLE_<NAME>` stands for a family).
    pub name: &'static str,
    /// Who reads it.
    pub roles: &'static [Role],
    /// The default, as the README states it.
    pub default: &'static str,
    /// What it accepts (checked at start unless said otherwise).
    pub values: &'static str,
}

const SHIM: &[Role] = &[Role::Shim];
const SHIM_SERVE: &[Role] = &[Role::Shim, Role::Serve];
const CONTAINER: &[Role] = &[Role::Container, Role::Serve];
const CONTAINER_ONLY: &[Role] = &[Role::Container];
const SERVE: &[Role] = &[Role::Serve];
const EVERY: &[Role] = &[Role::Shim, Role::Container, Role::Serve];

/// A duration: `60`, `60s`, `1500ms`, `2m`; `0` off.
const DURATION: &str = "duration (`30`, `30s`, `500ms`, `2m`); `0` off";
const POSITIVE_SECS: &str = "whole seconds above 0";
const BYTES: &str = "whole number of bytes";
const FLAG: &str = "`0` or `1`";

/// Every variable, in the README table's order.
pub const VARS: &[Var] = &[
    // The shim process.
    Var { name: shim::STATE_DIR, roles: SHIM, default: "/run/spin-shim", values: "directory" },
    Var { name: shim::CREATE_TIMEOUT_SECS, roles: SHIM, default: "60", values: POSITIVE_SECS },
    Var { name: shim::MAX_APP_BYTES, roles: SHIM, default: "1073741824 (1 GiB)", values: BYTES },
    Var { name: shim::MAX_APP_ENTRIES, roles: SHIM, default: "100000", values: "whole number" },
    Var { name: shim::COMPILE_CACHE_DIR, roles: EVERY, default: "/var/lib/containerd-shim-spin-v2/compile-cache", values: "directory" },
    Var { name: shim::COMPILE_CACHE_MAX_BYTES, roles: SHIM, default: "2147483648 (2 GiB)", values: BYTES },
    Var { name: shim::COMPILE_CPU_SECS, roles: SHIM, default: "300", values: POSITIVE_SECS },
    Var { name: shim::COMPILE_TIMEOUT_SECS, roles: SHIM, default: "90", values: POSITIVE_SECS },
    Var { name: shim::SOURCE_CACHE_DIR, roles: SHIM, default: "`url-sources` beside the compile cache", values: "directory" },
    Var { name: shim::DOWNLOAD_TIMEOUT_SECS, roles: SHIM_SERVE, default: "300", values: POSITIVE_SECS },
    Var { name: shim::MAX_DOWNLOAD_BYTES, roles: SHIM_SERVE, default: "268435456 (256 MiB)", values: BYTES },
    Var { name: shim::IDLE_RELEASE_SECS, roles: EVERY, default: "30", values: "whole seconds; `0` off" },
    // The runtime in a container (and spin-serve).
    Var { name: container::HTTP_LISTEN_ADDR, roles: CONTAINER, default: "0.0.0.0:80", values: "address:port" },
    Var { name: container::MAX_INSTANCE_MEMORY, roles: CONTAINER, default: "half the container's memory limit (at most 4 GiB); none without a limit", values: BYTES },
    Var { name: container::REQUEST_TIMEOUT, roles: CONTAINER, default: "60s", values: DURATION },
    Var { name: container::HEADER_READ_TIMEOUT, roles: CONTAINER, default: "30s", values: DURATION },
    Var { name: container::IDLE_TIMEOUT, roles: CONTAINER, default: "30s", values: DURATION },
    Var { name: container::WRITE_TIMEOUT, roles: CONTAINER, default: "30s", values: DURATION },
    Var { name: container::MAX_CONNECTIONS, roles: CONTAINER, default: "the file limit minus 64 (16 to 4096)", values: "whole number above 0" },
    Var { name: container::MAX_INSTANCE_REUSE_COUNT, roles: CONTAINER, default: "128", values: "whole number above 0" },
    Var { name: container::MAX_INSTANCE_CONCURRENT_REUSE_COUNT, roles: CONTAINER, default: "16", values: "whole number above 0" },
    Var { name: container::IDLE_INSTANCE_TIMEOUT, roles: CONTAINER, default: "1s", values: DURATION },
    Var { name: container::METRICS_ADDR, roles: CONTAINER, default: "off", values: "address:port" },
    Var { name: container::TIERED_COMPILE, roles: EVERY, default: "1", values: FLAG },
    Var { name: container::TIERED_COMPILE_MIN_BYTES, roles: EVERY, default: "2097152 (2 MiB)", values: BYTES },
    Var { name: container::COMPILE_CACHE_READONLY, roles: CONTAINER, default: "0", values: FLAG },
    Var { name: container::POOLING, roles: CONTAINER, default: "1", values: FLAG },
    Var { name: container::TLS_CERT, roles: CONTAINER, default: "none (plain HTTP)", values: "PEM file, with SPIN_TLS_KEY" },
    Var { name: container::TLS_KEY, roles: CONTAINER, default: "none (plain HTTP)", values: "PEM file, with SPIN_TLS_CERT" },
    Var { name: container::RUNTIME_CONFIG_FILE, roles: CONTAINER, default: "`runtime-config.toml` of the app, if present", values: "file" },
    Var { name: container::STATE_DIR, roles: CONTAINER, default: "`.spin` in the app directory", values: "directory" },
    Var { name: container::COMPONENTS_TO_RETAIN, roles: CONTAINER, default: "all components", values: "component ids, comma-separated" },
    Var { name: container::WASI_TIMEOUT, roles: CONTAINER_ONLY, default: "none", values: "seconds (`30`, `0.5`); `0` none" },
    Var { name: container::VARIABLE_PREFIX_NAME, roles: CONTAINER, default: "the manifest's default", values: "text (the variable's value)" },
    Var { name: container::OTEL_TRACING_LEVEL, roles: CONTAINER, default: "Spin's", values: "Spin's levels; checked by the exporter, never stops an app" },
    Var { name: container::DISABLE_LOG_TO_TRACING, roles: CONTAINER, default: "unset", values: "set: the app's output is not exported as logs" },
    // spin-serve only.
    Var { name: serve::SOURCE_CACHE_DIR, roles: SERVE, default: "`$XDG_CACHE_HOME/spin-serve/url-sources` (else `~/.cache/...`, else the temp directory)", values: "directory" },
];

/// The variables `role` reads.
pub fn vars_of(role: Role) -> impl Iterator<Item = &'static Var> {
    VARS.iter().filter(move |v| v.roles.contains(&role))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::env_list as env;

    #[test]
    fn the_last_value_wins() {
        let env = env(&[("A", "1"), ("A", "2")]);
        assert_eq!(lookup(&env, "A"), Some("2"));
        assert_eq!(lookup(&env, "B"), None);
    }

    #[test]
    fn names_are_unique_and_every_role_has_variables() {
        let mut names: Vec<_> = VARS.iter().map(|v| v.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a variable is listed twice");
        for role in [Role::Shim, Role::Container, Role::Serve] {
            assert!(vars_of(role).count() > 0, "{role:?}");
        }
    }

    #[test]
    fn the_table_states_the_typed_defaults() {
        for (name, default) in [
            (
                shim::COMPILE_CACHE_MAX_BYTES,
                shim::DEFAULT_COMPILE_CACHE_MAX_BYTES,
            ),
            (shim::COMPILE_CPU_SECS, shim::DEFAULT_COMPILE_CPU_SECS),
            (
                shim::COMPILE_TIMEOUT_SECS,
                shim::DEFAULT_COMPILE_TIMEOUT_SECS,
            ),
            (
                shim::DOWNLOAD_TIMEOUT_SECS,
                shim::DEFAULT_DOWNLOAD_TIMEOUT_SECS,
            ),
            (shim::MAX_DOWNLOAD_BYTES, shim::DEFAULT_MAX_DOWNLOAD_BYTES),
            (shim::IDLE_RELEASE_SECS, shim::DEFAULT_IDLE_RELEASE_SECS),
        ] {
            let var = VARS.iter().find(|v| v.name == name).unwrap();
            let stated = var.default.split(' ').next().unwrap();
            assert_eq!(stated, default.to_string(), "{name}");
        }
    }
}
