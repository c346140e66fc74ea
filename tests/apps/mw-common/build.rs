//! Build script shared by the middleware guests (`build = "../mw-common/build.rs"` in
//! mw-header and mw-upper): writes `OUT_DIR/bindings.rs`, a `wit_bindgen::generate!` call for
//! the `wasi:http/middleware` world, which the crate `include!`s.
//!
//! The WIT is not copied into this repository: it is the `wit/` directory of the published
//! `wasip3` crate, pinned (`wasip3 = "=0.6.0"`) as a never-referenced dependency of the guest so
//! that Cargo.lock fixes its version and `cargo metadata` finds (and, if missing, downloads)
//! its source. `generate!` takes its path as a literal, hence the generated file holding the
//! absolute path. The world's version comes from the crate's build metadata
//! (`0.6.0+wasi-0.3.0-rc-2026-03-15` -> `wasi:http/middleware@0.3.0-rc-2026-03-15`).

use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "wasip3";
const VERSION_PREFIX: &str = "0.6.0+wasi-";

fn main() {
    println!("cargo:rerun-if-changed=Cargo.toml");
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let (crate_dir, wasi_version) = locate_wasip3(&manifest_dir);
    let wit = crate_dir.join("wit");
    if !wit.join("deps").join("http.wit").is_file() {
        fail(&format!("{} has no deps/http.wit", wit.display()));
    }
    println!("cargo:rerun-if-changed={}", wit.display());
    let wit = wit
        .to_str()
        .unwrap_or_else(|| fail(&format!("{} is not UTF-8", wit.display())));
    let world = format!("wasi:http/middleware@{wasi_version}");
    let text = format!(
        "wit_bindgen::generate!({{\n    path: {wit:?},\n    world: {world:?},\n    generate_all,\n}});\n"
    );
    let out = PathBuf::from(env("OUT_DIR")).join("bindings.rs");
    if std::fs::read_to_string(&out).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::write(&out, text).unwrap_or_else(|e| fail(&format!("write {}: {e}", out.display())));
}

/// The pinned wasip3 crate's source directory and the WASI version it was generated from,
/// through `cargo metadata` on the guest's own manifest.
fn locate_wasip3(manifest_dir: &Path) -> (PathBuf, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.arg("metadata")
        .arg("--format-version=1")
        .arg("--filter-platform=wasm32-wasip2")
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"));
    if std::env::var_os("CARGO_NET_OFFLINE").is_some_and(|v| v == "true") {
        cmd.arg("--offline");
    }
    // Meant for the outer build only.
    cmd.env_remove("CARGO_TARGET_DIR");
    let output = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("running `{cargo} metadata`: {e}")));
    if !output.status.success() {
        fail(&format!(
            "`{cargo} metadata` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| fail(&format!("`cargo metadata` output: {e}")));
    let found = meta["packages"].as_array().and_then(|pkgs| {
        pkgs.iter().find_map(|pkg| {
            if pkg["name"].as_str()? != PACKAGE {
                return None;
            }
            let wasi = pkg["version"].as_str()?.strip_prefix(VERSION_PREFIX)?;
            let dir = Path::new(pkg["manifest_path"].as_str()?).parent()?;
            Some((dir.to_path_buf(), wasi.to_string()))
        })
    });
    found.unwrap_or_else(|| {
        fail(&format!(
            "`cargo metadata` lists no {PACKAGE} {VERSION_PREFIX}* package: keep it pinned in \
             the guest's Cargo.toml"
        ))
    })
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(&format!("cargo did not set {name}")))
}

fn fail(msg: &str) -> ! {
    panic!("middleware build script: {msg}");
}
