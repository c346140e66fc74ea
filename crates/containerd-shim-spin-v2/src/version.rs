//! `containerd-shim-spin-v2 --version`: what this binary is (version, commit, the wasmtime
//! and libcontainer it was built with, how it links) and which features it has, with the
//! device filter probed on this kernel. Every build fact comes from `build.rs`.

/// The facts compiled into this binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// The workspace's package version.
    pub version: &'static str,
    /// `git rev-parse HEAD` at build time, or `unknown`.
    pub commit: &'static str,
    /// The commit's (or `SOURCE_DATE_EPOCH`'s) UTC date, or `unknown`.
    pub date: &'static str,
    /// The Rust target triple, e.g. `x86_64-unknown-linux-musl`.
    pub target: &'static str,
    /// wasmtime's version as Cargo.lock resolved it.
    pub wasmtime: &'static str,
    /// youki libcontainer's version as Cargo.lock resolved it.
    pub libcontainer: &'static str,
    /// How libseccomp is linked: `static` or `dylib`.
    pub seccomp_link: &'static str,
    /// The allocator: `glibc malloc`, `mimalloc` or `musl malloc` (musl builds).
    pub allocator: &'static str,
    /// `PIE (randomized base)`, or position-dependent for a `SHIM_LINK_NO_PIE=1` build.
    pub executable: &'static str,
    /// Whether this build enforces device rules on cgroup v2 with its own eBPF filter.
    pub device_filter: bool,
}

/// This binary's build facts.
pub fn build_info() -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        commit: env!("SHIM_GIT_COMMIT"),
        date: env!("SHIM_BUILD_DATE"),
        target: env!("SHIM_TARGET"),
        wasmtime: env!("SHIM_WASMTIME_VERSION"),
        libcontainer: env!("SHIM_LIBCONTAINER_VERSION"),
        seccomp_link: env!("SHIM_SECCOMP_LINK"),
        allocator: env!("SHIM_ALLOCATOR"),
        executable: env!("SHIM_EXECUTABLE"),
        // cgroup-placement builds and attaches the program with raw bpf(2) on every Linux
        // target; there is no build without it.
        device_filter: cfg!(target_os = "linux"),
    }
}

/// What this kernel says of the device filter, for the `--version` report.
pub fn device_filter_probe() -> String {
    use cgroup_placement::CgroupLayout;
    match cgroup_placement::Host::detect().map(|h| h.layout()) {
        Ok(CgroupLayout::Unified) => match cgroup_placement::device_filter_support() {
            Ok(()) => "this kernel loads it".into(),
            Err(e) => format!("this kernel refuses it: {e}"),
        },
        Ok(_) => "cgroup v1 host: the devices controller enforces device rules instead".into(),
        Err(e) => format!("cgroup layout unknown: {e:#}"),
    }
}

/// The `--version` text: build facts, then the kernel probe's answer (`probe`).
pub fn render(info: &BuildInfo, probe: &str) -> String {
    let on_off = |b: bool| if b { "on" } else { "off" };
    format!(
        "containerd-shim-spin-v2 {version}\n\
         commit: {commit} ({date})\n\
         target: {target}\n\
         wasmtime: {wasmtime}\n\
         libcontainer: {libcontainer}\n\
         libseccomp: linked {seccomp}\n\
         allocator: {allocator}\n\
         executable: {executable}\n\
         features: device-filter={df} (cgroup v2 eBPF device filter; {probe})\n",
        version = info.version,
        commit = info.commit,
        date = info.date,
        target = info.target,
        wasmtime = info.wasmtime,
        libcontainer = info.libcontainer,
        seccomp = info.seccomp_link,
        allocator = info.allocator,
        executable = info.executable,
        df = on_off(info.device_filter),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_comes_from_the_build() {
        let info = build_info();
        // The lock file's versions, not placeholders: the workspace pins wasmtime 48 and
        // libcontainer 0.7.
        let lock = include_str!("../../../Cargo.lock");
        for (name, v) in [
            ("wasmtime", info.wasmtime),
            ("libcontainer", info.libcontainer),
        ] {
            assert!(
                lock.contains(&format!("name = \"{name}\"\nversion = \"{v}\"")),
                "{name} {v} not in Cargo.lock"
            );
        }
        assert!(info.wasmtime.starts_with("48."), "{}", info.wasmtime);
        assert!(
            info.libcontainer.starts_with("0.7."),
            "{}",
            info.libcontainer
        );
        assert!(
            info.target.starts_with(std::env::consts::ARCH),
            "{}",
            info.target
        );
        assert!(
            info.commit == "unknown" || info.commit.len() == 40,
            "{}",
            info.commit
        );
        assert!(info.device_filter);
        let expected = if cfg!(target_env = "gnu") {
            "glibc malloc"
        } else if cfg!(shim_musl_malloc) {
            "musl malloc"
        } else {
            "mimalloc"
        };
        assert_eq!(info.allocator, expected);
        // The test binary is linked as the shim is: a PIE has a dynamic base (ET_DYN).
        let mut header = [0u8; 18];
        std::io::Read::read_exact(
            &mut std::fs::File::open(std::env::current_exe().unwrap()).unwrap(),
            &mut header,
        )
        .unwrap();
        let et_dyn = u16::from_ne_bytes([header[16], header[17]]) == 3;
        assert_eq!(
            info.executable.starts_with("PIE"),
            et_dyn,
            "{} for an ELF of type {}",
            info.executable,
            if et_dyn { "DYN" } else { "EXEC" }
        );
    }

    #[test]
    fn render_names_every_fact() {
        let info = BuildInfo {
            version: "1.2.3",
            commit: "abc",
            date: "2026-01-02",
            target: "aarch64-unknown-linux-musl",
            wasmtime: "48.0.1",
            libcontainer: "0.7.0",
            seccomp_link: "static",
            allocator: "mimalloc",
            executable: "PIE (randomized base)",
            device_filter: false,
        };
        let text = render(&info, "probe said no");
        assert_eq!(
            text,
            "containerd-shim-spin-v2 1.2.3\ncommit: abc (2026-01-02)\ntarget: aarch64-unknown-linux-musl\n\
             wasmtime: 48.0.1\nlibcontainer: 0.7.0\nlibseccomp: linked static\n\
             allocator: mimalloc\nexecutable: PIE (randomized base)\nfeatures: device-filter=off (cgroup v2 eBPF device filter; probe said no)\n"
        );
    }
}
