//! A bad setting stops each role at start, naming the variable, the value, where it was read
//! and the fix: the shim before it serves, spin-serve before it loads the app. Runs the built
//! binaries (`SHIM_BIN_DIR`, default `target/release`); nothing is started that outlives them.

use std::path::PathBuf;
use std::process::Command;

fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("SHIM_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} is not built (cargo build --release --workspace --bins)",
        bin.display()
    );
    bin
}

/// Runs `cmd` with an empty environment plus `var=value`; returns (exit code, stderr).
fn run(mut cmd: Command, var: &str, value: &str) -> (Option<i32>, String) {
    let out = cmd.env_clear().env(var, value).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_shim_refuses_a_bad_setting_before_it_serves() {
    let mut cmd = Command::new(bin("containerd-shim-spin-v2"));
    cmd.args([
        "-namespace",
        "settings-test",
        "-id",
        "settings-test",
        "start",
    ]);
    let (code, err) = run(cmd, "SPIN_SHIM_IDLE_RELEASE_SECS", "soon");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("SPIN_SHIM_IDLE_RELEASE_SECS=`soon` in the shim's environment")
            && err.contains("whole number"),
        "{err}"
    );
}

#[test]
fn spin_serve_refuses_a_bad_setting_before_it_loads() {
    // Any non-`0` value used to turn pooling on silently.
    let app = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/apps/spin-hello");
    let mut cmd = Command::new(bin("spin-serve"));
    cmd.arg(&app).args(["--listen", "127.0.0.1:0"]);
    let (code, err) = run(cmd, "SPIN_SHIM_POOLING", "off");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "SPIN_SHIM_POOLING=`off` in spin-serve's environment: set it to 0 (off) or 1 (on)"
        ),
        "{err}"
    );
}
