//! Vendors the Spin WIT packages for `wasmtime::component::bindgen!`.
//!
//! The WIT files are not retyped: they are copied from the published `spin-sdk` crate
//! (pinned in this crate's `Cargo.toml` as a WASI-only, never-built dependency, so that
//! `Cargo.lock` pins its exact version and cargo knows where its source is). Everything this
//! script writes goes under `OUT_DIR` (never into the source tree, so checkouts sharing a
//! `CARGO_TARGET_DIR` cannot see each other's or a stale copy):
//! - `OUT_DIR/wit/`: our world (`wit/host.wit`) and the SDK packages under `deps/`;
//! - `OUT_DIR/host_bindings.rs`: `host_bindgen!("<OUT_DIR>/wit");`, included by
//!   `src/host/mod.rs` (`bindgen!` takes its path as a literal, relative to the manifest
//!   directory unless absolute); likewise `wasi_rc_bindings.rs` and
//!   `wasi_rc_http_bindings.rs` for `src/wasi_rc/` (the WASI 0.2.0-rc-2023-10-18 packages
//!   Spin 2 SDKs import);
//! - `OUT_DIR/host_interfaces.rs`: the interfaces the world imports, for the error that
//!   names the nearest provided interface when a component imports an unknown one;
//! - `OUT_DIR/wit-otel/` and `OUT_DIR/otel_bindings.rs`: the `wasi:otel@0.2.0-rc.2`
//!   package (and the `wasi:clocks@0.2.0` and `wasi:io@0.2.0` it uses) from spin-sdk 6.0's `wit/`, under our
//!   world `wit/otel.wit`, for `src/host/otel.rs`.
//!
//! Where the SDK source is found, in order:
//! 1. `SPIN_SDK_WIT_DIR` (5.2) and `SPIN_SDK6_WIT_DIR` (6.0): directories holding the SDK's
//!    `wit/` layout (offline builds).
//! 2. `cargo metadata --filter-platform wasm32-wasip2` for this crate (which also downloads
//!    the crates if they are missing).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The spin-sdk version whose WIT the host implements. spin-sdk 5.2's `wit/` is Spin 3.6's
/// (`spin:up@3.6.0` platform world: `fermyon:spin@2.0.0`, `spin:postgres@3.0.0`/`@4.0.0`,
/// `spin:sqlite@3.0.0`, `wasi:keyvalue`, `wasi:config`).
const SDK_PACKAGE: &str = "spin-sdk";
const SDK_VERSION_PREFIX: &str = "5.2.";
/// The spin-sdk release whose `wit/deps/` holds `wasi:otel` (pinned as `spin-sdk-6`).
const SDK6_VERSION_PREFIX: &str = "6.0.";

/// Packages taken from spin-sdk 6.0's `wit/deps/` for the `wasi:otel` bindings.
const OTEL_PACKAGES: &[&str] = &["otel@0.2.0-rc.2", "clocks@0.2.0", "io@0.2.0"];

/// SDK WIT packages (directories under the SDK's `wit/deps/`) that the host binds.
/// `fermyon:spin@2.0.0` pulls in the WASI 0.2.0 (and 0.2.0-rc-2023-10-18) packages its
/// worlds include, so those come along; nothing newer is needed.
const PACKAGES: &[&str] = &[
    "spin@2.0.0",
    "spin@unversioned",
    "spin-postgres@3.0.0",
    "spin-postgres@4.0.0",
    "spin-sqlite@3.0.0",
    "keyvalue-2024-10-17",
    "wasi-runtime-config-2024-09-27",
    "cli@0.2.0",
    "clocks@0.2.0",
    "filesystem@0.2.0",
    "http@0.2.0",
    "io@0.2.0",
    "random@0.2.0",
    "sockets@0.2.0",
    "cli-2023-10-18",
    "clocks-2023-10-18",
    "filesystem-2023-10-18",
    "http-2023-10-18",
    "io-2023-10-18",
    "random-2023-10-18",
    "sockets-2023-10-18",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-env-changed=SPIN_SDK_WIT_DIR");
    println!("cargo:rerun-if-env-changed=SPIN_SDK6_WIT_DIR");

    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let wit_dirs = [
        ("SPIN_SDK_WIT_DIR", SDK_VERSION_PREFIX),
        ("SPIN_SDK6_WIT_DIR", SDK6_VERSION_PREFIX),
    ];
    let metadata = if wit_dirs
        .iter()
        .all(|(var, _)| std::env::var_os(var).is_some())
    {
        String::new()
    } else {
        cargo_metadata(&manifest_dir)
    };
    let [sdk_wit, sdk6_wit] = wit_dirs.map(|(var, version)| match std::env::var_os(var) {
        Some(dir) => PathBuf::from(dir),
        None => find_package_dir(&metadata, version)
            .unwrap_or_else(|| {
                fail(&format!(
                    "`cargo metadata` lists no {SDK_PACKAGE} {version}x package: keep it pinned \
                     in crates/spin-runtime/Cargo.toml (or set {var})"
                ))
            })
            .join("wit"),
    });
    let deps = sdk_wit.join("deps");
    if !deps.is_dir() {
        fail(&format!(
            "{} has no deps/ directory: it is not the wit/ directory of spin-sdk {SDK_VERSION_PREFIX}x \
             (set SPIN_SDK_WIT_DIR to that directory, or unset it to let cargo locate the crate)",
            sdk_wit.display()
        ));
    }

    let out_dir = PathBuf::from(env("OUT_DIR"));
    let out = out_dir.join("wit");
    let out_deps = out.join("deps");
    for pkg in PACKAGES {
        let from = deps.join(pkg);
        if !from.is_dir() {
            fail(&format!(
                "WIT package directory {} is missing from {}: the pinned spin-sdk no longer \
                 ships it; update PACKAGES in build.rs",
                pkg,
                deps.display()
            ));
        }
        copy_dir(&from, &out_deps.join(pkg));
    }
    println!("cargo:rerun-if-changed={}", sdk_wit.display());

    let world = manifest_dir.join("wit").join("host.wit");
    println!("cargo:rerun-if-changed={}", world.display());
    let world_text = std::fs::read_to_string(&world)
        .unwrap_or_else(|e| fail(&format!("read {}: {e}", world.display())));
    write_if_changed(&out.join("host.wit"), &world_text);

    let out_wit = out
        .to_str()
        .unwrap_or_else(|| fail(&format!("OUT_DIR {} is not UTF-8", out.display())));
    // `bindgen!` takes its path as a literal: each bindings module defines a macro that
    // these files call with the absolute path of the WIT laid out above.
    for (file, mac) in [
        ("host_bindings.rs", "host_bindgen"),
        ("wasi_rc_bindings.rs", "wasi_rc_bindgen"),
        ("wasi_rc_http_bindings.rs", "wasi_rc_http_bindgen"),
    ] {
        write_if_changed(&out_dir.join(file), &format!("{mac}!({out_wit:?});\n"));
    }

    vendor_otel(&manifest_dir, &sdk6_wit, &out_dir);

    let imports = world_imports(&world_text);
    if imports.is_empty() {
        fail(&format!("{} imports no interface", world.display()));
    }
    let list: String = imports.iter().map(|i| format!("    {i:?},\n")).collect();
    write_if_changed(
        &out_dir.join("host_interfaces.rs"),
        &format!(
            "/// Every interface the `host` world (`wit/host.wit`) imports.\n\
             pub const HOST_INTERFACES: &[&str] = &[\n{list}];\n"
        ),
    );
}

/// The `import <interface>;` lines of our world file (one per line, as `host.wit` is written).
fn world_imports(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("import "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(|name| name.trim().to_string())
        .collect()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(&format!("cargo did not set {name}")))
}

fn fail(msg: &str) -> ! {
    panic!("spin-runtime build script: {msg}");
}

/// This crate's `cargo metadata` (JSON), which lists the pinned spin-sdk crates' sources.
fn cargo_metadata(manifest_dir: &Path) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.arg("metadata")
        .arg("--format-version=1")
        // spin-sdk is a WASI-only dependency; filtering keeps cargo from fetching the
        // packages of every other platform (e.g. Windows) as an unfiltered query would.
        .arg("--filter-platform=wasm32-wasip2")
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"));
    if std::env::var_os("CARGO_NET_OFFLINE").is_some_and(|v| v == "true") {
        cmd.arg("--offline");
    }
    // The outer cargo sets variables (e.g. a target dir lock) meant for this build only.
    cmd.env_remove("CARGO_TARGET_DIR");
    let output = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("running `{cargo} metadata`: {e}")));
    if !output.status.success() {
        fail(&format!(
            "`{cargo} metadata` failed ({}): {}\nSet SPIN_SDK_WIT_DIR and SPIN_SDK6_WIT_DIR to \
             the wit/ directories of spin-sdk {SDK_VERSION_PREFIX}x and {SDK6_VERSION_PREFIX}x \
             to build without it.",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Picks the directory of the `spin-sdk` package whose version starts with `version` out
/// of `cargo metadata` JSON.
fn find_package_dir(json: &str, version_prefix: &str) -> Option<PathBuf> {
    let meta: serde_json::Value = serde_json::from_str(json).ok()?;
    meta["packages"].as_array()?.iter().find_map(|pkg| {
        let name = pkg["name"].as_str()?;
        let version = pkg["version"].as_str()?;
        if name != SDK_PACKAGE || !version.starts_with(version_prefix) {
            return None;
        }
        let manifest = Path::new(pkg["manifest_path"].as_str()?);
        manifest.parent().map(Path::to_path_buf)
    })
}

/// Lays out `OUT_DIR/wit-otel/` (our world `wit/otel.wit` and [`OTEL_PACKAGES`] from
/// spin-sdk 6.0's `wit/deps/`) and writes `OUT_DIR/otel_bindings.rs`.
fn vendor_otel(manifest_dir: &Path, sdk6_wit: &Path, out_dir: &Path) {
    let out = out_dir.join("wit-otel");
    for pkg in OTEL_PACKAGES {
        let from = sdk6_wit.join("deps").join(pkg);
        if !from.is_dir() {
            fail(&format!(
                "WIT package directory {pkg} is missing from {}: the pinned spin-sdk \
                 {SDK6_VERSION_PREFIX}x no longer ships it; update OTEL_PACKAGES in build.rs",
                sdk6_wit.join("deps").display()
            ));
        }
        copy_dir(&from, &out.join("deps").join(pkg));
    }
    println!("cargo:rerun-if-changed={}", sdk6_wit.display());
    let world = manifest_dir.join("wit").join("otel.wit");
    println!("cargo:rerun-if-changed={}", world.display());
    let text = std::fs::read_to_string(&world)
        .unwrap_or_else(|e| fail(&format!("read {}: {e}", world.display())));
    write_if_changed(&out.join("otel.wit"), &text);
    let path = out
        .to_str()
        .unwrap_or_else(|| fail(&format!("OUT_DIR {} is not UTF-8", out.display())));
    write_if_changed(
        &out_dir.join("otel_bindings.rs"),
        &format!("otel_bindgen!({path:?});\n"),
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| fail(&format!("mkdir {}: {e}", to.display())));
    let entries =
        std::fs::read_dir(from).unwrap_or_else(|e| fail(&format!("read {}: {e}", from.display())));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| fail(&format!("read {}: {e}", from.display())));
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| fail(&format!("read {}: {e}", path.display())));
            write_if_changed(&target, &text);
        }
    }
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::write(path, text).unwrap_or_else(|e| fail(&format!("write {}: {e}", path.display())));
}
