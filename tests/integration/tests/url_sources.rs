//! Component sources by URL through `ctr run` with the shim: an image whose `/spin.toml`
//! names its component by `source = { url, digest }` (no component file in the image) is
//! downloaded by the shim at Create from a loopback HTTPS origin with a private CA, which
//! the node trusts through `SSL_CERT_FILE` in containerd's (so the shim's) environment,
//! into the node cache beside the compile cache; the container reads it read-only from its
//! app directory, and the shim compiles it (entry keyed by the digest). A second container of the same digest makes no request; a digest the
//! file does not have fails Create naming the component, the URL and the fix, and leaves
//! no file in the cache.
//! Root only: `cargo test --release --workspace --test url_sources -- --nocapture`.

use test_support::https_origin;

use std::path::Path;

use anyhow::{ensure, Result};
use integration::{
    dir_entries, guest_apps_dir, require_shim, root_test, CgroupMode, Containerd, ContainerdConfig,
    ContainerdVersion,
};

/// Imports [`integration::app_forms::url_source_image`] `name` into `c`.
fn image(c: &Containerd, dir: &Path, name: &str, url: &str, digest: &str) -> Result<()> {
    let tar = dir.join(format!("{}.tar", name.replace([':', '/'], "_")));
    integration::app_forms::url_source_image(name, url, digest, &tar)?;
    c.import(&tar, false)?;
    Ok(())
}

#[test]
fn url_source_is_downloaded_once_per_node_on_containerd_1_6() -> Result<()> {
    let Some(_serial) = root_test("url_source_is_downloaded_once_per_node") else {
        return Ok(());
    };
    require_shim()?;
    let origin =
        https_origin::Origin::start(std::fs::read(guest_apps_dir().join("spin_hello.wasm"))?);
    let node = tempfile::Builder::new()
        .prefix("urlsrc-")
        .tempdir_in("/tmp")?;
    let downloads = node.path().join("url-sources");
    let config = ContainerdConfig {
        env: vec![
            (
                "SPIN_SHIM_COMPILE_CACHE_DIR".into(),
                node.path().join("compile-cache").display().to_string(),
            ),
            (
                "SSL_CERT_FILE".into(),
                origin.ca_file().display().to_string(),
            ),
        ],
        ..Default::default()
    };
    let c = Containerd::start_with(ContainerdVersion::V1_6, CgroupMode::Host, &config)?;
    let dir = tempfile::tempdir()?;
    let digest = origin.digest();
    image(
        &c,
        dir.path(),
        "docker.io/library/urlsrc:good",
        &origin.url("/app.wasm"),
        &digest,
    )?;
    for round in 1..=2 {
        let app = c.run_spin_app("docker.io/library/urlsrc:good", &[])?;
        let (status, body) = app.get("/x")?;
        ensure!(
            status == 200 && body.contains("component=fetched"),
            "pod {round}: GET /x: {status} {body:?}"
        );
        ensure!(
            origin.requests("/app.wasm") == 1,
            "pod {round}: the origin saw {} requests; the node cache should make it one",
            origin.requests("/app.wasm")
        );
    }
    ensure!(
        dir_entries(&downloads) == [digest["sha256:".len()..].to_string()],
        "download cache {}: {:?}",
        downloads.display(),
        dir_entries(&downloads)
    );
    // Compiled by the shim (its helper), keyed by the digest it verified: the container
    // loads that entry and compiles nothing.
    let hex = &digest["sha256:".len()..];
    let compiled = dir_entries(&node.path().join("compile-cache"));
    ensure!(
        compiled
            .iter()
            .any(|e| e.starts_with(hex) && e.ends_with(".cwasm")),
        "no compile-cache entry for {hex}: {compiled:?}"
    );

    let wrong = format!("sha256:{}", "0".repeat(64));
    image(
        &c,
        dir.path(),
        "docker.io/library/urlsrc:wrong",
        &origin.url("/stream.wasm"),
        &wrong,
    )?;
    let err = match c.run_spin_app("docker.io/library/urlsrc:wrong", &[]) {
        Ok(_) => anyhow::bail!("a source whose digest differs started"),
        Err(e) => format!("{e:#}"),
    };
    for want in [
        "component `fetched`",
        "/stream.wasm",
        &digest,
        "fix `digest`",
    ] {
        ensure!(err.contains(want), "missing {want:?} in: {err}");
    }
    ensure!(origin.requests("/stream.wasm") == 1);
    ensure!(
        dir_entries(&downloads).len() == 1,
        "a failed download left files: {:?}",
        dir_entries(&downloads)
    );
    Ok(())
}
