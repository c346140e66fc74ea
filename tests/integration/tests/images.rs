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

// ---- Spin apps of both image forms through `ctr run --runtime io.containerd.spin.v2` ----

/// One GET and what must come back: (path, status, substring of the body).
type Check = (&'static str, u16, &'static str);

/// Runs image `name` (command `/`) detached on the host network, checks every GET, then
/// removes the container. `Err` carries `ctr run`'s failure text when create fails.
fn run_checks(c: &Containerd, name: &str, checks: &[Check]) -> Result<()> {
    run_checks_with(c, name, &[], checks)
}

/// [`run_checks`] with extra `ctr run` arguments (e.g. `--mount ...`).
fn run_checks_with(c: &Containerd, name: &str, extra: &[String], checks: &[Check]) -> Result<()> {
    let app = c.run_spin_app(name, extra)?;
    for (path, status, want) in checks {
        let (st, body) = app.get(path).with_context(|| name.to_string())?;
        ensure!(
            st == *status && body.contains(want),
            "{name}: GET {path} gave {st} {body:?}, wanted {status} with {want:?}"
        );
    }
    Ok(())
}

fn spin_apps() -> [(&'static str, Vec<Check>); 5] {
    [
        ("spin-hello", vec![("/hello", 200, "component=hello")]),
        // Spin 4 middleware: the composition from the artifact's layers (or the rootfs).
        (
            "mw-app",
            vec![
                (
                    "/hello",
                    200,
                    "SDK=6 ROUTE=/HELLO GREETING=HELLO FROM SPIN-SDK 6",
                ),
                ("/echo/a/b", 200, "sdk=6 route=/echo path=/a/b"),
            ],
        ),
        ("spin-kv", vec![("/kv/absent-key", 404, "")]),
        (
            "spin-files",
            vec![
                ("/static/hello.txt", 200, "hello from a static file"),
                ("/data/logo.txt", 200, ""),
            ],
        ),
        ("spin-cpu", vec![("/?n=20", 200, "6765")]),
    ]
}

/// `ctr run` arguments an app needs beyond its image: spin-kv's runtime config (store
/// `other`), which artifacts do not carry, bind-mounted at `/runtime-config.toml`.
fn extra_args(app: &str) -> Vec<String> {
    let rc = workspace_root()
        .join("tests/apps")
        .join(app)
        .join("runtime-config.toml");
    if !rc.is_file() {
        return vec![];
    }
    vec![
        "--mount".into(),
        format!(
            "type=bind,src={},dst=/runtime-config.toml,options=rbind:ro",
            rc.display()
        ),
    ]
}

fn artifact_forms(c: &Containerd, dir: &Path) -> Result<()> {
    for (app, checks) in spin_apps() {
        for (tag, layout) in [
            ("artifact", FileLayout::Simple),
            ("archive", FileLayout::Archive),
        ] {
            let name = format!("docker.io/library/{app}:{tag}");
            let tar = dir.join(format!("{app}-{tag}.tar"));
            spin::artifact_image(
                &name,
                &workspace_root().join("tests/apps").join(app),
                layout,
            )?
            .write_archive(&tar)?;
            c.import(&tar, true)?;
            run_checks_with(c, &name, &extra_args(app), &checks)?;
        }
    }
    // The single-layer `application/wasm` form is not run here: ctr 1.7 itself refuses
    // its config ("unknown image config media type application/vnd.wasm.config.v0+json").
    Ok(())
}

fn container_forms(c: &Containerd, dir: &Path) -> Result<()> {
    for (app, checks) in spin_apps() {
        let name = format!("docker.io/library/{app}:container");
        let tar = dir.join(format!("{app}-container.tar"));
        spin::container_image(&name, &workspace_root().join("tests/apps").join(app), &[])?
            .write_archive(&tar)?;
        c.import(&tar, false)?;
        run_checks(c, &name, &checks)?;
    }
    Ok(())
}

/// `ctr run` of `name` must fail with an error containing every `want`.
fn expect_create_error(c: &Containerd, name: &str, wants: &[&str]) -> Result<()> {
    let r = run_checks(c, name, &[("/", 200, "")]);
    let e = match r {
        Ok(()) => anyhow::bail!("{name} ran, but its content is broken"),
        Err(e) => format!("{e:#}"),
    };
    for w in wants {
        ensure!(
            e.contains(w),
            "the error for {name} does not name {w:?}: {e}"
        );
    }
    Ok(())
}

fn broken_artifacts(c: &Containerd, dir: &Path) -> Result<()> {
    let app = workspace_root().join("tests/apps/spin-hello");
    // Corrupt layer: rewrite the component blob in the content store after import.
    let name = "docker.io/library/spin-hello:corrupt";
    let img = spin::artifact_image(name, &app, FileLayout::Simple)?;
    let wasm = img.layers[0].digest();
    img.write_archive(&dir.join("corrupt.tar"))?;
    c.import(&dir.join("corrupt.tar"), true)?;
    let blob = c
        .root()
        .join("io.containerd.content.v1.content/blobs/sha256")
        .join(&wasm["sha256:".len()..]);
    let mut bytes = std::fs::read(&blob).with_context(|| format!("{}", blob.display()))?;
    bytes[100] ^= 0xff;
    std::fs::write(&blob, &bytes)?;
    expect_create_error(c, name, &[&wasm, "corrupt"])?;
    // Missing component: the lock references a Wasm layer the manifest does not carry.
    let name = "docker.io/library/spin-cpu:missing";
    let mut img = spin::artifact_image(
        name,
        &workspace_root().join("tests/apps/spin-cpu"),
        FileLayout::Simple,
    )?;
    let gone = img.layers.remove(0).digest();
    img.write_archive(&dir.join("missing.tar"))?;
    c.import(&dir.join("missing.tar"), true)?;
    // Earlier images share the blob; the shim would rightly find it by digest.
    let _ = c.ctr_output(
        &["content", "rm", &gone],
        std::time::Duration::from_secs(30),
    );
    expect_create_error(c, name, &[&gone, "missing"])
}

/// Cache entries (name, mtime) of `dir`.
/// The cache's entries by name and inode: a recompiled entry is a new file (written
/// aside and renamed), while a hit only touches the entry's mtime (eviction order).
fn cache_entries(dir: &Path) -> Result<Vec<(String, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".cwasm") {
            v.push((name, e.metadata()?.ino()));
        }
    }
    v.sort();
    Ok(v)
}

#[test]
fn spin_artifacts_serve_http_on_containerd_1_7() {
    let Some(_s) = integration::root_test("spin_artifacts_serve_http_on_containerd_1_7") else {
        return;
    };
    let r = (|| {
        integration::require_shim()?;
        let dir = tempfile::tempdir()?;
        let cache = dir.path().join("compile-cache");
        // The shim inherits containerd's environment: a cache private to this test.
        std::env::set_var("SPIN_SHIM_COMPILE_CACHE_DIR", &cache);
        let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host);
        std::env::remove_var("SPIN_SHIM_COMPILE_CACHE_DIR");
        let c = c?;
        artifact_forms(&c, dir.path())?;
        // Second start of an image already run: every component comes from the cache,
        // so no entry is added or rewritten.
        let before = cache_entries(&cache)?;
        ensure!(
            !before.is_empty(),
            "no compile cache entries in {}",
            cache.display()
        );
        run_checks(
            &c,
            "docker.io/library/spin-hello:artifact",
            &[
                ("/hello", 200, "component=hello"),
                // The shim passes the artifact's manifest digest to the app.
                (
                    "/.well-known/spin/info",
                    200,
                    "\"oci_image_digest\": \"sha256:",
                ),
            ],
        )?;
        ensure!(
            cache_entries(&cache)? == before,
            "the second start of spin-hello:artifact compiled again (cache entries changed)"
        );
        broken_artifacts(&c, dir.path())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn spin_container_images_serve_http_on_containerd_1_6() {
    let Some(_s) = integration::root_test("spin_container_images_serve_http_on_containerd_1_6")
    else {
        return;
    };
    let r = (|| {
        integration::require_shim()?;
        let dir = tempfile::tempdir()?;
        let c = Containerd::start(ContainerdVersion::V1_6, CgroupMode::Host)?;
        container_forms(&c, dir.path())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn spin_container_images_serve_http_on_containerd_1_7() {
    let Some(_s) = integration::root_test("spin_container_images_serve_http_on_containerd_1_7")
    else {
        return;
    };
    let r = (|| {
        integration::require_shim()?;
        let dir = tempfile::tempdir()?;
        let c = Containerd::start(ContainerdVersion::V1_7, CgroupMode::Host)?;
        container_forms(&c, dir.path())
    })();
    r.unwrap_or_else(|e| panic!("{e:#}"));
}
