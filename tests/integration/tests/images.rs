//! `ctr image import` accepts every archive form oci-image-builder writes, on containerd 1.6
//! and 1.7, and containerd's content store then holds the exact blobs (locked-app layer,
//! config with the lockedAppDigest label).
//! Run as root: `cargo test --release -p integration --test images -- --nocapture`.

use anyhow::{ensure, Context, Result};
use integration::{
    guest_apps_dir, workspace_root, CgroupMode, Containerd, ContainerdVersion, TestImages,
};
use oci_image_builder::spin::{self, FileLayout, LABEL_LOCKED_APP_DIGEST, MEDIA_TYPE_LOCKED_APP};
use oci_image_builder::{read_archive, Image};
use std::path::Path;

/// Writes `img` into `dir`, imports it and checks containerd lists it and serves the
/// manifest's blobs byte for byte.
fn import_and_check(c: &Containerd, dir: &Path, file: &str, img: Image, wasm: bool) -> Result<()> {
    let path = dir.join(file);
    let written = img.write_archive(&path)?;
    c.import(&path, wasm)?;
    let names = c.ctr_ok(&["image", "ls", "-q"])?;
    ensure!(
        names.lines().any(|n| n == written.name),
        "{} not listed after import; images:\n{names}",
        written.name
    );
    let ls = c.ctr_ok(&["image", "ls"])?;
    ensure!(
        ls.lines()
            .any(|l| l.starts_with(&written.name) && l.contains(&written.manifest_digest)),
        "{} does not point at manifest {}:\n{ls}",
        written.name,
        written.manifest_digest
    );
    let contents = read_archive(&std::fs::read(&path)?)?;
    for (i, (mt, data)) in contents.layers.iter().enumerate() {
        let d = oci_image_builder::sha256_digest(data);
        let got = c
            .ctr_output(&["content", "get", &d], std::time::Duration::from_secs(30))
            .context("ctr content get")?;
        ensure!(
            got.status.success() && &got.stdout == data,
            "layer {i} ({mt}, {d}) of {} is not in the content store as written",
            written.name
        );
    }
    Ok(())
}

fn all_forms(version: ContainerdVersion) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let c = Containerd::start(version, CgroupMode::Host)?;
    let imgs = TestImages::build(dir.path())?;
    for (p, wasm) in [
        (&imgs.wasi_hello, false),
        (&imgs.busybox, false),
        (&imgs.pause, false),
    ] {
        c.import(p, wasm)?;
    }
    let app = workspace_root().join("tests/apps/spin-files");
    ensure!(
        app.join("spin.toml").is_file(),
        "{} is missing (guest apps of the Spin runtime)",
        app.display()
    );
    import_and_check(
        &c,
        dir.path(),
        "spin-files-container.tar",
        spin::container_image("docker.io/library/spin-files:container", &app, &[])?,
        false,
    )?;
    let artifact = spin::artifact_image(
        "docker.io/library/spin-files:artifact",
        &app,
        FileLayout::Simple,
    )?;
    let locked = artifact
        .layers
        .last()
        .cloned()
        .context("artifact without layers")?;
    ensure!(
        locked.media_type == MEDIA_TYPE_LOCKED_APP,
        "locked app is not the last layer"
    );
    let config = artifact.config.clone();
    import_and_check(&c, dir.path(), "spin-files-artifact.tar", artifact, true)?;
    let cfg = c.ctr_ok(&["content", "get", &config.digest()])?;
    let cfg: serde_json::Value = serde_json::from_str(&cfg)?;
    ensure!(
        cfg["config"]["Labels"][LABEL_LOCKED_APP_DIGEST] == locked.digest(),
        "config in the content store lacks the lockedAppDigest label: {cfg}"
    );
    import_and_check(
        &c,
        dir.path(),
        "spin-files-archive.tar",
        spin::artifact_image(
            "docker.io/library/spin-files:archive",
            &app,
            FileLayout::Archive,
        )?,
        true,
    )?;
    import_and_check(
        &c,
        dir.path(),
        "wasm-component.tar",
        spin::wasm_component_image(
            "docker.io/library/spin-hello:wasm",
            &guest_apps_dir().join("spin_hello.wasm"),
        )?,
        true,
    )?;
    Ok(())
}

#[test]
fn ctr_imports_every_form_on_containerd_1_6() {
    let Some(_s) = integration::root_test("ctr_imports_every_form_on_containerd_1_6") else {
        return;
    };
    all_forms(ContainerdVersion::V1_6).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn ctr_imports_every_form_on_containerd_1_7() {
    let Some(_s) = integration::root_test("ctr_imports_every_form_on_containerd_1_7") else {
        return;
    };
    all_forms(ContainerdVersion::V1_7).unwrap_or_else(|e| panic!("{e:#}"));
}
