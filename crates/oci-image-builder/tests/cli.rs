//! The `oci-image-builder` binary: each form writes an archive that `inspect` verifies,
//! and bad input fails with a message naming it.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oci-image-builder"))
}

#[test]
fn native_and_wasi_forms_round_trip_through_inspect() {
    let d = tempfile::tempdir().unwrap();
    let exe = d.path().join("tool");
    std::fs::write(&exe, b"#!/bin/sh\necho hi\n").unwrap();
    let wasm = d.path().join("x.wasm");
    std::fs::write(&wasm, b"\0asm\x01\0\0\0").unwrap();
    let native = d.path().join("native.tar");
    let st = bin()
        .args(["native", "--name", "docker.io/library/n:1", "--file"])
        .arg(format!("{}:/usr/bin/tool", exe.display()))
        .args([
            "--symlink",
            "/bin/tool:/usr/bin/tool",
            "--entrypoint",
            "/bin/tool",
        ])
        .arg("-o")
        .arg(&native)
        .status()
        .unwrap();
    assert!(st.success());
    let wasi = d.path().join("wasi.tar");
    let st = bin()
        .args(["wasi", "--name", "docker.io/library/w:1", "--wasm"])
        .arg(&wasm)
        .args(["--arg", "a", "-o"])
        .arg(&wasi)
        .status()
        .unwrap();
    assert!(st.success());
    for (archive, want) in [(&native, "\"/bin/tool\""), (&wasi, "\"/x.wasm\"")] {
        let out = bin().arg("inspect").arg(archive).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("digests verified: 1 layers"), "{text}");
        assert!(text.contains(want), "{text}");
    }
}

#[test]
fn bad_file_mapping_is_named() {
    let d = tempfile::tempdir().unwrap();
    let out = bin()
        .args([
            "native",
            "--name",
            "docker.io/library/n:1",
            "--file",
            "nocolon",
            "-o",
        ])
        .arg(d.path().join("o.tar"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--file \"nocolon\" must look like A:B"),
        "{err}"
    );
}
