//! Spin 4 apps' WASIp3 interfaces: the WASI 0.3.0 interfaces wasmtime links and Spin 4's
//! `async func` interfaces. Components built for the `0.3.0-rc-2026-03-15` snapshot are
//! retargeted to `@0.3.0` before they are compiled ([`crate::engine::retarget`]).

pub use crate::engine::retarget::{mentions_rc_snapshot, retarget_snapshot, RC_SNAPSHOT, RELEASE};

/// The WASIp3 interfaces the runtime links (wasmtime-wasi's and wasmtime-wasi-http's, at
/// `@0.3.0`; components built for the snapshot import them under that name once
/// retargeted), as `package/interface` without version.
pub const WASI_P3_INTERFACES: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/run",
    "wasi:cli/types",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/types",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/system-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/types",
    "wasi:sockets/ip-name-lookup",
    "wasi:http/types",
    "wasi:http/client",
];

/// Spin 4's `async func` interfaces this runtime links (`spin:variables` here, the others
/// by their host features in [`crate::host::add_to_linker`], on the backends of their Spin 3
/// forms).
/// `spin:postgres@4.2.0` also serves components importing `@4.1.0` (the linker picks the
/// newest minor version of a major it has).
pub const SPIN4_INTERFACES: &[&str] = &[
    "spin:variables/variables@3.0.0",
    "spin:key-value/key-value@3.0.0",
    "spin:sqlite/sqlite@3.1.0",
    "spin:redis/redis@3.0.0",
    "spin:mqtt/mqtt@3.0.0",
    "spin:postgres/postgres@4.2.0",
    "spin:mysql/mysql@3.0.0",
];

/// Whether the runtime links WASIp3 import `name`.
pub fn provides(name: &str) -> bool {
    if SPIN4_INTERFACES.contains(&name) || same_major_older_minor(name) {
        return true;
    }
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    WASI_P3_INTERFACES.contains(&path) && version == RELEASE
}

/// Whether `name` is a Spin 4 interface we link at a newer minor version of the same major
/// (`spin:postgres/postgres@4.1.0` is served by `@4.2.0`, which has all of it).
fn same_major_older_minor(name: &str) -> bool {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    };
    let Some((path, version)) = name.split_once('@') else {
        return false;
    };
    let Some((major, minor)) = parse(version).filter(|_| !version.contains('-')) else {
        return false;
    };
    SPIN4_INTERFACES.iter().any(|ours| {
        ours.split_once('@').is_some_and(|(p, v)| {
            p == path && parse(v).is_some_and(|(ma, mi)| ma == major && major > 0 && minor <= mi)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provides_the_release_and_older_minor_spin4_versions() {
        assert!(provides("wasi:http/types@0.3.0"));
        assert!(!provides("wasi:http/types@0.3.0-rc-2026-03-15"));
        assert!(provides("spin:postgres/postgres@4.2.0"));
        assert!(provides("spin:postgres/postgres@4.1.0"));
        assert!(!provides("spin:postgres/postgres@4.3.0"));
        assert!(!provides("spin:sqlite/sqlite@4.0.0"));
    }
}
