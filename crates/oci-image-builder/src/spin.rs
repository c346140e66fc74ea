//! Spin app images: the spin-in-container form and the Spin OCI artifact form (as
//! `spin registry push` lays it out), with the locked-app JSON generated from `spin.toml`.

use crate::rootfs::{normalize, TarTree};
use crate::{rootfs_image, Blob, Image, Platform, ProcessConfig, MEDIA_TYPE_CONFIG};
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use spin_app_format::{ContentPath, ContentRef};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The artifact media types the builder writes (owned by the app format).
pub use spin_app_format::oci::{
    MEDIA_TYPE_ARCHIVE_LAYER, MEDIA_TYPE_DATA_LAYER, MEDIA_TYPE_LOCKED_APP, MEDIA_TYPE_WASM,
    MEDIA_TYPE_WASM_LAYER,
};
/// Config media type of the single-layer Wasm component form.
pub const MEDIA_TYPE_WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// Image config label holding the digest of the locked-app layer.
pub const LABEL_LOCKED_APP_DIGEST: &str = "com.fermyon.spin.lockedAppDigest";
/// Files up to this size are inlined in the locked app (base64 without padding).
pub const INLINE_MAX: usize = spin_app_format::locked::INLINE_MAX;

/// A content reference as `spin registry push` writes it for a layer (the digest, plus the
/// bytes inline, standard base64 without padding, when they are at most [`INLINE_MAX`]).
pub fn content_ref(data: &[u8]) -> Value {
    serde_json::to_value(ContentRef::for_layer(data)).expect("a content ref serialises")
}

/// How a Spin artifact carries static files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileLayout {
    /// One data layer per file (files <= 128 bytes only inlined), as `spin registry push`.
    Simple,
    /// One tar+gzip archive layer per component (`SPIN_OCI_ARCHIVE_LAYERS=1`).
    Archive,
}

fn read(p: &Path) -> Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))
}

fn source_path(c: &spin_app_format::LockedComponent) -> Result<PathBuf> {
    c.source
        .content
        .file_path()
        .with_context(|| format!("component {}: source is not a local file", c.id))
}

fn dep_path(d: &spin_app_format::locked::LockedComponentDependency, id: &str) -> Result<PathBuf> {
    d.source
        .content
        .file_path()
        .with_context(|| format!("component {id}: middleware is not a local file"))
}

/// A Spin OCI artifact of the app in `app_dir`, laid out as `spin registry push` lays it
/// out (spin-oci's `push_locked_core`): the app locked by the app format crate, then per
/// component its Wasm layer and its file layers (or one archive layer), identical layers
/// once, the lock (`metadata.origin` removed, contents by digest/inline) last; config
/// architecture `wasm`, os `wasip1`, label `com.fermyon.spin.lockedAppDigest`.
pub fn artifact_image(name: &str, app_dir: &Path, layout: FileLayout) -> Result<Image> {
    let local = spin_app_format::manifest::load(app_dir)?;
    let mut locked = local.locked.clone();
    locked.metadata.remove("origin");
    let mut layers: Vec<Blob> = Vec::new();
    let mut push = |b: Blob| {
        if !layers
            .iter()
            .any(|l| l.data == b.data && l.media_type == b.media_type)
        {
            layers.push(b);
        }
    };
    for c in &mut locked.components {
        let wasm = read(&source_path(c)?)?;
        c.source.content = ContentRef::for_layer(&wasm);
        push(Blob::new(MEDIA_TYPE_WASM_LAYER, wasm));
        // Middleware (Spin 4 trigger dependencies): Wasm layers like the sources.
        for deps in c.trigger_dependencies.values_mut() {
            for d in deps {
                let wasm = read(&dep_path(d, &c.id)?)?;
                d.source.content = ContentRef::for_layer(&wasm);
                push(Blob::new(MEDIA_TYPE_WASM_LAYER, wasm));
            }
        }
        let files = local.files(&c.id);
        let mut entries = Vec::new();
        for f in files {
            let data = read(&f.host)?;
            let content = ContentRef::for_layer(&data);
            if layout == FileLayout::Simple && content.inline.is_none() {
                push(Blob::new(MEDIA_TYPE_DATA_LAYER, data));
            }
            entries.push(ContentPath {
                content,
                path: f.path.clone(),
            });
        }
        if layout == FileLayout::Archive && !files.is_empty() {
            let mut t = TarTree::new();
            for f in files {
                t.add_host_file(&f.host, &f.path)?;
            }
            push(Blob::new(MEDIA_TYPE_ARCHIVE_LAYER, t.to_tar_gz()?));
        }
        c.files = entries;
    }
    let locked_layer = Blob::new(MEDIA_TYPE_LOCKED_APP, locked.to_json());
    let locked_digest = locked_layer.digest();
    layers.push(locked_layer);
    let platform = Platform::wasm_wasip1();
    let config = json!({
        "architecture": platform.architecture,
        "os": platform.os,
        "config": { "Labels": { LABEL_LOCKED_APP_DIGEST: locked_digest } },
        "rootfs": { "type": "layers", "diff_ids": [] },
    });
    let mut annotations = BTreeMap::new();
    for (key, annotation) in [
        ("name", "org.opencontainers.image.title"),
        ("version", "org.opencontainers.image.version"),
        ("description", "org.opencontainers.image.description"),
    ] {
        if let Some(v) = locked.metadata_str(key) {
            annotations.insert(annotation.into(), v.to_string());
        }
    }
    Ok(Image {
        name: name.into(),
        platform,
        config: Blob::new(MEDIA_TYPE_CONFIG, serde_json::to_vec(&config)?),
        layers,
        manifest_media_type_field: false,
        manifest_annotations: annotations,
    })
}

/// The single-layer form: one `application/wasm` component layer (served at `/...` by
/// the Spin executor), config `application/vnd.wasm.config.v0+json`, platform wasip2/wasm.
pub fn wasm_component_image(name: &str, wasm: &Path) -> Result<Image> {
    let data = std::fs::read(wasm).with_context(|| format!("cannot read {}", wasm.display()))?;
    ensure!(
        data.starts_with(b"\0asm"),
        "{} is not a WebAssembly binary",
        wasm.display()
    );
    let layer = Blob::new(MEDIA_TYPE_WASM, data);
    let platform = Platform {
        architecture: "wasm".into(),
        os: "wasip2".into(),
    };
    let config = json!({
        "architecture": platform.architecture,
        "os": platform.os,
        "layerDigests": [layer.digest()],
    });
    Ok(Image {
        name: name.into(),
        platform,
        config: Blob::new(MEDIA_TYPE_WASM_CONFIG, serde_json::to_vec(&config)?),
        layers: vec![layer],
        manifest_media_type_field: true,
        manifest_annotations: BTreeMap::new(),
    })
}

/// A spin-in-container image: rootfs with `/spin.toml` (component sources rewritten to
/// `components/<name>-<digest12>.wasm` inside the rootfs), the component files at their
/// manifest-relative paths, `/runtime-config.toml` if the app has one; command `/`.
pub fn container_image(name: &str, app_dir: &Path, env: &[String]) -> Result<Image> {
    let local = spin_app_format::manifest::load(app_dir)?;
    let text = std::fs::read_to_string(app_dir.join("spin.toml"))?;
    let mut manifest: toml::Table = toml::from_str(&text)?;
    let mut tree = TarTree::new();
    let component_sources: Vec<PathBuf> = local
        .locked
        .components
        .iter()
        .filter_map(|c| c.source.content.file_path())
        .collect();
    for c in &local.locked.components {
        // Middleware given as `{ path = .. }` keeps its manifest-relative path; given as
        // `{ component = .. }` it is that component's (rewritten) source.
        for d in c.trigger_dependencies.values().flatten() {
            let host = dep_path(d, &c.id)?;
            if component_sources.contains(&host) {
                continue;
            }
            let rel = rel_to(&local.base_dir, &host)?;
            if !tree.contains(&rel) {
                tree.add_host_file(&host, &rel)?;
            }
        }
        let declared = manifest
            .get("component")
            .and_then(|t| t.get(&c.id))
            .is_some();
        if !declared && !c.trigger_dependencies.is_empty() {
            // A clone the lock made for a trigger with its own middleware: the manifest
            // does not list it, its declared original carries the source.
            continue;
        }
        let source = source_path(c)?;
        let data = read(&source)?;
        let stem = source
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("component");
        let rel = format!(
            "components/{stem}-{}.wasm",
            &crate::sha256_digest(&data)[7..19]
        );
        if !tree.contains(&rel) {
            tree.add_file(&rel, data, 0o644)?;
        }
        let Some(entry) = manifest
            .get_mut("component")
            .and_then(|t| t.get_mut(&c.id))
            .and_then(|t| t.as_table_mut())
        else {
            bail!(
                "component {}: inline components in triggers are not supported by the \
                 spin-container form; declare it as [component.{}]",
                c.id,
                c.id
            );
        };
        entry.insert("source".into(), toml::Value::String(rel));
        for f in local.files(&c.id) {
            let rel = rel_to(&local.base_dir, &f.host)?;
            if !tree.contains(&rel) {
                tree.add_host_file(&f.host, &rel)?;
            }
        }
    }
    tree.add_file("spin.toml", toml::to_string(&manifest)?.into_bytes(), 0o644)?;
    let rc = app_dir.join("runtime-config.toml");
    if rc.is_file() {
        tree.add_host_file(&rc, "runtime-config.toml")?;
    }
    rootfs_image(
        name,
        tree,
        &ProcessConfig {
            cmd: vec!["/".into()],
            env: env.to_vec(),
            ..Default::default()
        },
    )
}

fn rel_to(dir: &Path, p: &Path) -> Result<String> {
    let rel = p
        .strip_prefix(dir)
        .with_context(|| format!("{} is not inside {}", p.display(), dir.display()))?;
    normalize(&rel.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_archive;

    fn app(dir: &Path) {
        std::fs::create_dir_all(dir.join("static/sub")).unwrap();
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("app.wasm"), b"\0asm\x01\0\0\0component-bytes").unwrap();
        std::fs::write(dir.join("static/small.txt"), b"tiny").unwrap();
        std::fs::write(dir.join("static/sub/big.txt"), vec![b'x'; 300]).unwrap();
        std::fs::write(dir.join("static/secret.txt"), b"no").unwrap();
        std::fs::write(dir.join("assets/a.txt"), vec![b'a'; 200]).unwrap();
        std::fs::write(
            dir.join("spin.toml"),
            r#"
spin_manifest_version = 2
[application]
name = "t"
version = "1.0.0"
[variables]
greeting = { default = "hi" }
token = { required = true, secret = true }
[[trigger.http]]
route = "/..."
component = "web"
[[trigger.http]]
route = { private = true }
component = "web"
[component.web]
source = "app.wasm"
files = ["static/**/*", { source = "assets", destination = "/data" }]
exclude_files = ["static/secret.txt"]
environment = { A = "1" }
allowed_outbound_hosts = ["https://example.com"]
key_value_stores = ["default"]
variables = { msg = "{{ greeting }}" }
"#,
        )
        .unwrap();
    }

    #[test]
    fn artifact_layout_matches_spin_registry_push() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let img = artifact_image("docker.io/library/t:1", d.path(), FileLayout::Simple).unwrap();
        let c = read_archive(&img.archive_bytes().unwrap().0).unwrap();
        assert!(c.manifest.get("mediaType").is_none());
        assert_eq!(c.config["architecture"], "wasm");
        assert_eq!(c.config["os"], "wasip1");
        let types: Vec<&str> = c.layers.iter().map(|l| l.0.as_str()).collect();
        // wasm, data layers of the two big files (small one inlined), locked app last
        assert_eq!(
            types,
            [
                MEDIA_TYPE_WASM_LAYER,
                MEDIA_TYPE_DATA_LAYER,
                MEDIA_TYPE_DATA_LAYER,
                MEDIA_TYPE_LOCKED_APP
            ]
        );
        let (_, locked_bytes) = c.layers.last().unwrap();
        assert_eq!(
            c.config["config"]["Labels"][LABEL_LOCKED_APP_DIGEST],
            crate::sha256_digest(locked_bytes)
        );
        let locked: Value = serde_json::from_slice(locked_bytes).unwrap();
        assert_eq!(locked["spin_lock_version"], 0);
        assert_eq!(locked["triggers"][0]["id"], "web-http-trigger");
        assert_eq!(
            locked["triggers"][1]["trigger_config"]["route"],
            json!({"private": true})
        );
        assert_ne!(locked["triggers"][0]["id"], locked["triggers"][1]["id"]);
        assert_eq!(locked["variables"]["token"], json!({"secret": true}));
        assert_eq!(locked["variables"]["greeting"]["default"], "hi");
        let comp = &locked["components"][0];
        assert_eq!(comp["config"]["msg"], "{{ greeting }}");
        assert_eq!(comp["source"]["content_type"], "application/wasm");
        assert_eq!(
            comp["source"]["digest"],
            crate::sha256_digest(&c.layers[0].1)
        );
        let files = comp["files"].as_array().unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
        assert_eq!(
            paths,
            ["static/small.txt", "static/sub/big.txt", "data/a.txt"]
        );
        // Spin's ContentPath: the reference sits beside `path`, no `content` key.
        assert!(files.iter().all(|f| f.get("content").is_none()));
        assert_eq!(files[0]["inline"], "dGlueQ"); // "tiny", no padding
        assert!(files[1].get("inline").is_none());
        assert!(locked["metadata"].get("origin").is_none());
        assert_eq!(files[1]["digest"], crate::sha256_digest(&c.layers[1].1));
    }

    #[test]
    fn archive_layout_has_one_archive_per_component() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let img = artifact_image("docker.io/library/t:1", d.path(), FileLayout::Archive).unwrap();
        let c = read_archive(&img.archive_bytes().unwrap().0).unwrap();
        assert_eq!(c.layers[1].0, MEDIA_TYPE_ARCHIVE_LAYER);
        assert_eq!(c.layers.len(), 3);
        let mut gz = flate2::read::GzDecoder::new(c.layers[1].1.as_slice());
        let mut tar = Vec::new();
        std::io::Read::read_to_end(&mut gz, &mut tar).unwrap();
        let t = TarTree::from_tar(&tar).unwrap();
        assert!(t.contains("data/a.txt") && t.contains("static/sub/big.txt"));
        assert!(!t.contains("static/secret.txt"));
    }

    #[test]
    fn container_form_rewrites_sources() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let img = container_image("docker.io/library/t:c", d.path(), &[]).unwrap();
        let c = read_archive(&img.archive_bytes().unwrap().0).unwrap();
        assert_eq!(c.config["config"]["Cmd"], json!(["/"]));
        let t = TarTree::from_tar(&c.layers[0].1).unwrap();
        let Some(crate::rootfs::Node::File { data, .. }) = t.nodes().get("spin.toml") else {
            panic!("no spin.toml")
        };
        let m: toml::Table = toml::from_str(std::str::from_utf8(data).unwrap()).unwrap();
        let src = m["component"]["web"]["source"].as_str().unwrap();
        assert!(
            src.starts_with("components/app-") && t.contains(src),
            "{src}"
        );
        assert!(t.contains("assets/a.txt") && t.contains("static/small.txt"));
    }

    #[test]
    fn manifest_errors_name_the_problem() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let p = d.path().join("spin.toml");
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            text.replace("source = \"app.wasm\"", "source = \"missing.wasm\""),
        )
        .unwrap();
        let err = format!(
            "{:#}",
            spin_app_format::manifest::load(d.path()).unwrap_err()
        );
        assert!(
            err.contains("component.web.source") && err.contains("missing.wasm"),
            "{err}"
        );
        std::fs::write(&p, "spin_manifest_version = 1").unwrap();
        assert!(format!(
            "{:#}",
            spin_app_format::manifest::load(d.path()).unwrap_err()
        )
        .contains("spin_manifest_version"));
    }
}
