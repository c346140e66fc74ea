//! Build facts for `containerd-shim-spin-v2 --version` (see `src/version.rs`), all from the
//! build itself, none typed by hand:
//! - `SHIM_WASMTIME_VERSION`, `SHIM_LIBCONTAINER_VERSION`: the versions Cargo.lock resolved;
//! - `SHIM_GIT_COMMIT`: `git rev-parse HEAD` of the checkout, else the `SHIM_GIT_COMMIT`
//!   variable (a build from a source tarball), else `unknown`;
//! - `SHIM_BUILD_DATE`: the UTC date of `SOURCE_DATE_EPOCH`, else of the commit, else
//!   `unknown` (never the wall clock, so two builds of one commit are byte-identical);
//! - `SHIM_TARGET`, `SHIM_SECCOMP_LINK`: the target triple and how libseccomp is linked
//!   (`LIBSECCOMP_LINK_TYPE`, which libseccomp-sys reads too);
//! - `SHIM_ALLOCATOR` and the `shim_musl_malloc` cfg: the allocator (see [`allocator`]);
//! - `SHIM_EXECUTABLE`: PIE or position-dependent (see [`link_non_pie`]).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let lock = manifest_dir.join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_else(|e| {
        fail(&format!(
            "reading {}: {e} (the workspace's Cargo.lock names the wasmtime and libcontainer versions)",
            lock.display()
        ))
    });
    for (package, var) in [
        ("wasmtime", "SHIM_WASMTIME_VERSION"),
        ("libcontainer", "SHIM_LIBCONTAINER_VERSION"),
    ] {
        let versions = locked_versions(&text, package);
        if versions.is_empty() {
            fail(&format!(
                "{} lists no `{package}` package: is it still a dependency?",
                lock.display()
            ));
        }
        println!("cargo:rustc-env={var}={}", versions.join(", "));
    }

    for var in [
        "SHIM_GIT_COMMIT",
        "SOURCE_DATE_EPOCH",
        "LIBSECCOMP_LINK_TYPE",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let commit = git_commit(&manifest_dir);
    println!(
        "cargo:rustc-env=SHIM_GIT_COMMIT={}",
        commit
            .clone()
            .or_else(|| std::env::var("SHIM_GIT_COMMIT")
                .ok()
                .filter(|c| !c.is_empty()))
            .unwrap_or_else(|| "unknown".into())
    );
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => Some(s.trim().parse::<i64>().unwrap_or_else(|_| {
            fail(&format!(
                "SOURCE_DATE_EPOCH={s:?} is not a number of seconds since 1970 (unset it or give e.g. `git log -1 --format=%ct`)"
            ))
        })),
        Err(_) if commit.is_some() => git(&manifest_dir, &["log", "-1", "--format=%ct"])
            .and_then(|s| s.parse().ok()),
        Err(_) => None,
    };
    println!(
        "cargo:rustc-env=SHIM_BUILD_DATE={}",
        epoch.map(utc_date).unwrap_or_else(|| "unknown".into())
    );
    println!("cargo:rustc-env=SHIM_TARGET={}", env("TARGET"));
    link_non_pie();
    allocator();
    println!(
        "cargo:rustc-env=SHIM_SECCOMP_LINK={}",
        std::env::var("LIBSECCOMP_LINK_TYPE").unwrap_or_else(|_| "dylib".into())
    );
}

/// Links the shim as a position-dependent executable when `SHIM_LINK_NO_PIE=1`; the default
/// is a PIE. Every process of a pod (server, container-creation helper, each Wasm container)
/// maps this binary; a PIE gets its ~2 MB of relocated data (`.data.rel.ro`, `.got`) written
/// at a random base, one private copy per pod (the pod's processes share it by fork), while
/// a non-PIE's is resolved at link time and stays clean, shared by every pod on the node.
/// The price of the opt-in is ASLR of the executable image, in the process that runs
/// untrusted Wasm too (heap, stacks, JIT code and Wasm memories stay randomized; in a glibc
/// build the shared libraries too, in a static musl build there are none).
/// - glibc: the link alone changes (`-no-pie`); dependencies stay PIC.
/// - musl: rustc links PIC objects with a static C runtime as a static-pie, so the whole
///   build must be position-dependent: `scripts/release.sh` adds `-C relocation-model=static`
///   to the target's flags when the variable is set; a build without it is refused here.
///
/// `SHIM_EXECUTABLE` names the result for `--version`.
fn link_non_pie() {
    let no_pie = switch(
        "SHIM_LINK_NO_PIE",
        "link non-PIE: pods share the relocated data, the executable is not randomized",
        "a PIE, the default",
    );
    // The flags rustc compiles this package with (the target's RUSTFLAGS), 0x1f-separated;
    // `-C relocation-model=static` may come as one argument or two.
    let rustflags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = rustflags.split('\x1f').collect();
    let static_model = flags.contains(&"-Crelocation-model=static")
        || flags
            .windows(2)
            .any(|w| w == ["-C", "relocation-model=static"]);
    let position_dependent = match env("CARGO_CFG_TARGET_ENV").as_str() {
        "gnu" if no_pie => {
            println!("cargo:rustc-link-arg-bins=-no-pie");
            true
        }
        "musl" if no_pie && !static_model => fail(
            "SHIM_LINK_NO_PIE=1 for a musl target needs the whole build position-dependent: \
             build with `scripts/release.sh build ARCH` (it adds -C relocation-model=static to \
             the target's RUSTFLAGS), or set that flag yourself",
        ),
        _ => static_model,
    };
    println!(
        "cargo:rustc-env=SHIM_EXECUTABLE={}",
        if position_dependent {
            "position-dependent (fixed address, not randomized)"
        } else {
            "PIE (randomized base)"
        }
    );
}

/// Chooses the allocator of musl builds: mimalloc (the default) or, with
/// `SHIM_MUSL_MALLOC=1`, musl's own malloc (cfg `shim_musl_malloc`). mimalloc serves a request
/// with ~19% fewer instructions than musl's malloc; musl's keeps ~1.3 MiB less per process
/// of a pod, 4.4 instead of 7.1 MiB per idle pod at 100 pods (README, memory per pod). glibc
/// builds always use glibc's malloc. `SHIM_ALLOCATOR` names the choice for `--version`.
fn allocator() {
    println!("cargo::rustc-check-cfg=cfg(shim_musl_malloc)");
    let musl_malloc = switch(
        "SHIM_MUSL_MALLOC",
        "musl builds allocate with musl's malloc: less memory per pod, more CPU per request",
        "mimalloc, the default",
    );
    let name = match env("CARGO_CFG_TARGET_ENV").as_str() {
        "musl" if musl_malloc => {
            println!("cargo:rustc-cfg=shim_musl_malloc");
            "musl malloc"
        }
        "musl" => "mimalloc",
        "gnu" => "glibc malloc",
        _ => "the C library's malloc",
    };
    println!("cargo:rustc-env=SHIM_ALLOCATOR={name}");
}

/// An on/off build variable: `1` is on; `0`, empty or unset is off; anything else fails the
/// build, saying what each setting means. Cargo reruns the script when it changes.
fn switch(var: &str, on: &str, off: &str) -> bool {
    println!("cargo:rerun-if-env-changed={var}");
    match std::env::var(var).as_deref() {
        Ok("1") => true,
        Ok("0") | Ok("") | Err(_) => false,
        Ok(other) => fail(&format!(
            "{var}={other:?}: set it to 1 ({on}) or 0 / unset ({off})"
        )),
    }
}

/// Every version of `package` in a Cargo.lock, in file order.
fn locked_versions(lock: &str, package: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut name: Option<&str> = None;
    for line in lock.lines() {
        let line = line.trim();
        if line == "[[package]]" {
            name = None;
        } else if let Some(v) = line.strip_prefix("name = ") {
            name = Some(v.trim_matches('"'));
        } else if let Some(v) = line.strip_prefix("version = ") {
            if name == Some(package) {
                out.push(v.trim_matches('"').to_string());
            }
        }
    }
    out
}

/// HEAD's commit, when the sources are a git checkout; asks cargo to rerun when HEAD moves.
fn git_commit(dir: &Path) -> Option<String> {
    let commit = git(dir, &["rev-parse", "HEAD"])?;
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(dir, &["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={}", dir.join(p).display());
        }
    }
    if let Some(head_ref) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(dir, &["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={}", dir.join(p).display());
        }
    }
    Some(commit)
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

/// `YYYY-MM-DD` (UTC) of a Unix time, by the civil-from-days algorithm.
fn utc_date(secs: i64) -> String {
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(&format!("cargo did not set {name}")))
}

fn fail(msg: &str) -> ! {
    panic!("containerd-shim-spin-v2 build script: {msg}");
}
