//! The app forms besides SDK components that both `ctr run` and CRI tests serve: the WAGI
//! app's expected answers and an image whose one component is sourced by URL.

use std::path::Path;

use anyhow::{ensure, Result};
use oci_image_builder::{rootfs_image, ProcessConfig, TarTree};

/// Checks `tests/apps/wasi-wagi-p1`'s routes through `get` (path -> status and body):
/// argv from the query, the CGI environment, the manifest's environment, a CGI `Status`
/// header, a failing module (500) and a custom `argv` template.
pub fn check_wagi_routes(get: impl Fn(&str) -> Result<(u16, String)>) -> Result<()> {
    let (status, body) = get("/wagi/echo?name=spin&flag")?;
    ensure!(status == 200, "/wagi/echo: {status} {body}");
    for want in [
        "argv=/wagi/echo|name|spin|flag\n",
        "REQUEST_METHOD=GET\n",
        "SCRIPT_NAME=/wagi\n",
        "PATH_INFO=/echo\n",
        "X_MATCHED_ROUTE=/wagi/...\n",
        "GREETING=hello from the manifest\n",
    ] {
        ensure!(body.contains(want), "/wagi/echo lacks {want:?}: {body}");
    }
    let (status, body) = get("/wagi/created")?;
    ensure!(
        status == 201 && body == "created\n",
        "/wagi/created: {status} {body:?}"
    );
    let (status, _) = get("/wagi/fail")?;
    ensure!(status == 500, "/wagi/fail: {status}");
    let (status, body) = get("/custom/echo?a=1")?;
    ensure!(
        status == 200 && body.contains("argv=prog|--script=/custom/echo|a|1\n"),
        "/custom/echo: {status} {body}"
    );
    Ok(())
}

/// Writes to `tar` a spin-in-container image `name` holding only `/spin.toml`, whose one
/// component `fetched` (routes `/...`, `COMPONENT=fetched` in its environment) is sourced by
/// `url` with `digest`.
pub fn url_source_image(name: &str, url: &str, digest: &str, tar: &Path) -> Result<()> {
    let manifest = format!(
        "spin_manifest_version = 2\n[application]\nname = \"remote\"\n[[trigger.http]]\n\
         route = \"/...\"\ncomponent = \"fetched\"\n[component.fetched]\n\
         source = {{ url = \"{url}\", digest = \"{digest}\" }}\n\
         environment = {{ COMPONENT = \"fetched\" }}\n"
    );
    let mut tree = TarTree::new();
    tree.add_file("spin.toml", manifest.into_bytes(), 0o644)?;
    let process = ProcessConfig {
        cmd: vec!["/".into()],
        ..Default::default()
    };
    rootfs_image(name, tree, &process)?.write_archive(tar)?;
    Ok(())
}
