//! Spin OCI artifacts from containerd's content store.
//!
//! When a container's command is `/` and its rootfs has no `/spin.toml`, the Spin engine
//! (in Create, in the shim's tokio process, before the container exists) asks containerd
//! for the container's Wasm image through [`wasm_shim_core::content`]. An image whose
//! config says architecture `wasm` (or has the `application/vnd.wasm.config.v0+json` media
//! type) is materialised in the rootfs under [`APP_DIR`]:
//! - `locked.json`: the locked-app layer (`application/vnd.fermyon.spin.application.v1+config`),
//!   or, for the single-layer `application/wasm` form, a generated lock serving the
//!   component at `/...`;
//! - `blobs/<hex>`: every layer, every file of every archive layer (by its own sha256), and
//!   every further digest the lock references (fetched from the content store);
//! - `archives/<hex>/`: each `tar+gzip` archive layer, extracted;
//! - `oci-image-digest`: the manifest digest, shown as `oci_image_digest` by the app's
//!   `/.well-known/spin/info`.
//!
//! The Spin executor then runs the lock with digests resolved to those paths.
//! Missing or corrupt content fails Create with an error naming the digest.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use wasm_shim_core::content::{sha256_hex, Containerd};

/// Directory (relative to the rootfs) the shim materialises an artifact's app into.
pub const APP_DIR: &str = ".spin-app";
/// The lock inside [`APP_DIR`].
pub const LOCKED_FILE: &str = "locked.json";
/// Blobs by hex digest inside [`APP_DIR`].
pub const BLOBS_DIR: &str = "blobs";
/// The image's manifest digest (for Spin's `/.well-known/spin/info`) inside [`APP_DIR`].
pub const DIGEST_FILE: &str = "oci-image-digest";
/// Extracted archive layers by hex digest inside [`APP_DIR`].
pub const ARCHIVES_DIR: &str = "archives";

/// Locked-app layer media type.
pub const MEDIA_TYPE_LOCKED_APP: &str = "application/vnd.fermyon.spin.application.v1+config";
/// Archive layer media type.
pub const MEDIA_TYPE_ARCHIVE_LAYER: &str = "application/vnd.wasm.content.bundle.v1.tar+gzip";
/// Single-layer component form.
pub const MEDIA_TYPE_WASM: &str = "application/wasm";

/// Whether the container is an artifact candidate: command `/` without `/spin.toml`.
pub fn wants_artifact(args: &[String], rootfs: &Path) -> bool {
    args.first().map(String::as_str) == Some("/") && !rootfs.join("spin.toml").is_file()
}

/// What [`materialise`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Materialised {
    /// The image reference.
    pub image: String,
    /// The image's manifest digest.
    pub manifest_digest: String,
}

/// Reads container `id`'s image from containerd and, if it is a Wasm/Spin artifact,
/// writes it under `rootfs/`[`APP_DIR`]. Returns None for images that are not Wasm
/// artifacts (the rootfs is left alone).
pub async fn materialise(
    address: &str,
    namespace: &str,
    id: &str,
    rootfs: &Path,
) -> anyhow::Result<Option<Materialised>> {
    let cd = Containerd::connect(address, namespace).await?;
    let Some(wasm) = cd.wasm_image(id).await? else {
        return Ok(None);
    };
    let (image, manifest_desc, layers) = (wasm.image, wasm.manifest, wasm.layers);
    let what = |s: &str| format!("{s} of image {image}");
    let app = rootfs.join(APP_DIR);
    let blobs = app.join(BLOBS_DIR);
    std::fs::create_dir_all(&blobs).with_context(|| format!("create {}", blobs.display()))?;
    let mut locked: Option<Vec<u8>> = None;
    let mut wasm_layer: Option<String> = None;
    for (i, l) in layers.iter().enumerate() {
        let (digest, mt) = (l.digest.as_str(), l.media_type.as_str());
        let data = cd
            .read_blob(digest, &what(&format!("layer {i} ({mt})")))
            .await?;
        let hex_digest = &digest["sha256:".len()..];
        write_new(&blobs.join(hex_digest), &data)?;
        match mt {
            MEDIA_TYPE_LOCKED_APP => locked = Some(data),
            MEDIA_TYPE_ARCHIVE_LAYER => extract_archive(&data, hex_digest, &app)
                .with_context(|| what(&format!("archive layer {digest}")))?,
            MEDIA_TYPE_WASM => wasm_layer = Some(digest.to_string()),
            _ => {}
        }
    }
    let locked = match (locked, wasm_layer) {
        (Some(l), _) => l,
        (None, Some(d)) if layers.len() == 1 => single_component_lock(&image, &d),
        _ => bail!(
            "image {image} has a Wasm config but no locked-app layer ({MEDIA_TYPE_LOCKED_APP}) nor a single {MEDIA_TYPE_WASM} layer"
        ),
    };
    // Every digest the lock needs must be present: fetch the rest from the content store.
    let lock = spin_app_format::LockedApp::from_json(&locked)
        .with_context(|| format!("image {image}: the locked-app layer"))?;
    for d in referenced_digests(&lock) {
        let Some(hex_digest) = d.strip_prefix("sha256:") else {
            bail!("image {image}: the lock references {d:?}, not a sha256 digest");
        };
        let path = blobs.join(hex_digest);
        if !path.exists() {
            let data = cd
                .read_blob(&d, &what("content referenced by the locked app"))
                .await?;
            write_new(&path, &data)?;
        }
    }
    write_new(&app.join(DIGEST_FILE), manifest_desc.digest.as_bytes())?;
    write_new(&app.join(LOCKED_FILE), &locked)?;
    Ok(Some(Materialised {
        image,
        manifest_digest: manifest_desc.digest,
    }))
}

/// The digests of content the lock does not inline (component sources, dependencies and
/// files), read with the app format crate (Spin's `ContentPath` flattens the reference
/// beside `path`).
fn referenced_digests(lock: &spin_app_format::LockedApp) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut add = |c: &spin_app_format::ContentRef| {
        if c.inline.is_none() && c.source.is_none() {
            if let Some(d) = &c.digest {
                out.insert(d.clone());
            }
        }
    };
    for comp in &lock.components {
        add(&comp.source.content);
        for dep in comp.dependencies.values() {
            add(&dep.source.content);
        }
        for f in &comp.files {
            add(&f.content);
        }
    }
    out
}

/// A lock serving the single component `digest` at `/...` (the `application/wasm` form),
/// written by the app format crate in Spin's shape.
pub fn single_component_lock(image: &str, digest: &str) -> Vec<u8> {
    use spin_app_format::locked::{LockedComponent, LockedComponentSource, LockedTrigger};
    let mut metadata = spin_app_format::locked::ValuesMap::new();
    metadata.insert("name".into(), image.into());
    metadata.insert("trigger".into(), serde_json::json!({ "type": "http" }));
    metadata.insert("triggers".into(), serde_json::json!({}));
    spin_app_format::LockedApp {
        metadata,
        triggers: vec![LockedTrigger {
            id: "main-http-trigger".into(),
            trigger_type: "http".into(),
            trigger_config: serde_json::json!({ "route": "/...", "component": "main" }),
            trigger_dependencies: Default::default(),
        }],
        components: vec![LockedComponent {
            id: "main".into(),
            metadata: Default::default(),
            source: LockedComponentSource {
                content_type: MEDIA_TYPE_WASM.into(),
                content: spin_app_format::ContentRef {
                    digest: Some(digest.into()),
                    ..Default::default()
                },
            },
            env: Default::default(),
            files: Vec::new(),
            config: Default::default(),
            dependencies: Default::default(),
            trigger_dependencies: Default::default(),
            host_requirements: Default::default(),
        }],
        ..Default::default()
    }
    .to_json()
}

/// Extracts a tar+gzip layer to `app/archives/<hex>/` and stores each regular file as a
/// blob by its own digest (locks reference archive files by digest).
fn extract_archive(data: &[u8], hex_digest: &str, app: &Path) -> anyhow::Result<()> {
    let dest = app.join(ARCHIVES_DIR).join(hex_digest);
    std::fs::create_dir_all(&dest)?;
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(data));
    for entry in ar.entries().context("not a tar+gzip archive")? {
        let mut entry = entry.context("corrupt tar entry")?;
        let path = entry.path()?.into_owned();
        if path.components().any(|c| {
            !matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        }) {
            bail!("archive entry {} escapes the archive", path.display());
        }
        if entry.header().entry_type().is_dir() {
            std::fs::create_dir_all(dest.join(&path))?;
            continue;
        }
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        let target = dest.join(&path);
        if let Some(p) = target.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::write(&target, &bytes)?;
        write_new(&app.join(BLOBS_DIR).join(sha256_hex(&bytes)), &bytes)?;
    }
    Ok(())
}

fn write_new(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, data).with_context(|| format!("write {}", path.display()))
}

/// Maps a locked-app digest to the materialised file (or extracted archive directory)
/// under `app_dir` (the container's `/`[`APP_DIR`]).
pub fn blob_path(app_dir: &Path, digest: &str) -> anyhow::Result<PathBuf> {
    let hex_digest = digest
        .strip_prefix("sha256:")
        .with_context(|| format!("content digest {digest:?} is not a sha256 digest"))?;
    let archive = app_dir.join(ARCHIVES_DIR).join(hex_digest);
    if archive.is_dir() {
        return Ok(archive);
    }
    let blob = app_dir.join(BLOBS_DIR).join(hex_digest);
    if blob.is_file() {
        return Ok(blob);
    }
    bail!(
        "content {digest} referenced by the locked app is not in the image (missing component or file layer)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_digests_skip_inline_content() {
        let lock = serde_json::json!({"spin_lock_version": 0, "triggers": [], "components": [{
        "id": "c",
        "source": {"content_type": "application/wasm", "digest": "sha256:aa"},
        "files": [
            {"digest": "sha256:bb", "inline": "eA", "path": "a"},
            {"digest": "sha256:cc", "path": "b"},
        ]}]});
        let lock = spin_app_format::LockedApp::from_json(lock.to_string().as_bytes()).unwrap();
        let d: Vec<_> = referenced_digests(&lock).into_iter().collect();
        assert_eq!(d, ["sha256:aa", "sha256:cc"]);
    }

    #[test]
    fn archive_files_become_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "static/a.txt", &b"hello"[..])
            .unwrap();
        let tar = b.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        let gz = gz.finish().unwrap();
        std::fs::create_dir_all(dir.path().join(BLOBS_DIR)).unwrap();
        extract_archive(&gz, "ff", dir.path()).unwrap();
        let d = format!("sha256:{}", sha256_hex(b"hello"));
        assert_eq!(
            std::fs::read(blob_path(dir.path(), &d).unwrap()).unwrap(),
            b"hello"
        );
        assert!(blob_path(dir.path(), "sha256:ff")
            .unwrap()
            .join("static/a.txt")
            .is_file());
        let e = blob_path(dir.path(), "sha256:00").unwrap_err().to_string();
        assert!(e.contains("sha256:00"), "{e}");
    }
}
