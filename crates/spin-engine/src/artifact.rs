//! Spin OCI artifacts from containerd's content store.
//!
//! When a container's command is `/` and its rootfs has no `/spin.toml`, the Spin engine
//! (in Create, in the shim's tokio process, before the container exists) asks containerd
//! for the container's Wasm image through [`wasm_shim_core::content`]. An image whose
//! config says architecture `wasm` (or has the `application/vnd.wasm.config.v0+json` media
//! type) is materialised into a directory the shim owns under the container's state root
//! (never into the rootfs, whose links the image chose), which the container then sees
//! read-only at `/`[`APP_DIR`]:
//! - `locked.json`: the locked-app layer (`application/vnd.fermyon.spin.application.v1+config`),
//!   or, for the single-layer `application/wasm` form, a generated lock serving the
//!   component at `/...`;
//! - `blobs/<hex>`: every non-rootfs layer, and every file of every archive layer (by its
//!   own sha256);
//! - `archives/<hex>/`: each `tar+gzip` archive layer, extracted;
//! - `oci-image-digest`: the manifest digest, shown as `oci_image_digest` by the app's
//!   `/.well-known/spin/info`.
//!
//! Trust rules (the image is untrusted): digests must be `sha256:<64 hex>`; the lock may
//! only reference layers the manifest lists or files inside its archive layers (never
//! other content of the namespace); blobs are streamed to disk with their size and sha256
//! checked; archives hold only regular files and directories and stay within
//! [`Limits`]. All writes go through [`Dir`].
//! Missing, corrupt or refused content fails Create with an error naming the digest.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use wasm_shim_core::confined::Dir;
use wasm_shim_core::content::{digest_hex, Containerd, Descriptor};
use wasm_shim_core::untrusted::{extract_tar_gz, shown, Budget, Limits, MAX_JSON_BYTES};

/// Where the container sees the shim's app directory (relative to its root, read-only).
pub const APP_DIR: &str = ".spin-app";
/// The lock inside [`APP_DIR`].
pub const LOCKED_FILE: &str = "locked.json";
/// Blobs by hex digest inside [`APP_DIR`].
pub const BLOBS_DIR: &str = "blobs";
/// The image's manifest digest (for Spin's `/.well-known/spin/info`) inside [`APP_DIR`].
pub const DIGEST_FILE: &str = "oci-image-digest";
/// Extracted archive layers by hex digest inside [`APP_DIR`].
pub const ARCHIVES_DIR: &str = "archives";

/// The artifact media types this loader reads (owned by the app format).
pub use spin_app_format::oci::{MEDIA_TYPE_ARCHIVE_LAYER, MEDIA_TYPE_LOCKED_APP, MEDIA_TYPE_WASM};

/// Whether the container is an artifact candidate: command `/` (then a command trigger's
/// arguments, if any) and no `/spin.toml` in the rootfs (looked up as the container would
/// see it, links confined to the rootfs).
pub fn wants_artifact(args: &[String], rootfs: &Dir) -> bool {
    args.first().map(String::as_str) == Some("/")
        && !rootfs
            .exists_in_root(Path::new("spin.toml"))
            .unwrap_or(false)
}

/// What [`materialise`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Materialised {
    /// The image reference.
    pub image: String,
    /// The image's manifest digest.
    pub manifest_digest: String,
    /// The locked app as materialised.
    pub locked: Vec<u8>,
}

/// Whether a layer of media type `mt` is a container rootfs layer (containerd unpacks
/// those into the rootfs; they are not app content).
fn is_rootfs_layer(mt: &str) -> bool {
    mt.starts_with("application/vnd.oci.image.layer.")
        || mt.starts_with("application/vnd.docker.image.rootfs.")
}

/// Reads container `id`'s image from containerd and, if it is a Wasm/Spin artifact,
/// writes it into `app_dir` (a new directory the shim owns, outside the container's
/// rootfs; see the module docs). Returns None for images that are not Wasm artifacts.
/// When containerd's record of the container names no image (Docker 26), `unnamed` says
/// which image it runs: a name for messages and the descriptor of its manifest or index.
///
/// Only `sha256:<64 hex>` digests are accepted, and the lock may only reference layers
/// the manifest lists (or files inside its archive layers); every blob is streamed to
/// disk with its size and sha256 checked; archive layers are extracted off the async
/// workers within [`Limits`]. Errors name the image, the layer and the rule.
pub async fn materialise(
    address: &str,
    namespace: &str,
    id: &str,
    app_dir: &Path,
    unnamed: impl FnOnce() -> anyhow::Result<(String, Descriptor)>,
) -> anyhow::Result<Option<Materialised>> {
    let cd = Containerd::connect(address, namespace).await?;
    let image = cd.container_image(id).await?;
    let (image, target) = if image.is_empty() {
        unnamed()?
    } else {
        let target = cd.image_target(&image).await?;
        (image, target)
    };
    let Some(wasm) = cd.wasm_image_at(image, target).await? else {
        return Ok(None);
    };
    let (image, manifest_desc, layers) = (wasm.image, wasm.manifest, wasm.layers);
    let what = |s: &str| format!("{s} of image {image}");
    let mut budget = Budget::new(Limits::from_env()?);
    let app = Dir::create(app_dir)?;
    let blobs = app.create_dir_all(Path::new(BLOBS_DIR))?;
    let archives = app.create_dir_all(Path::new(ARCHIVES_DIR))?;
    // Digests the lock may reference: layers and files inside archive layers.
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut locked: Option<Vec<u8>> = None;
    let mut wasm_layer: Option<String> = None;
    for (i, desc) in layers.iter().enumerate() {
        let mt = desc.media_type.as_str();
        let layer_what = what(&format!(
            "layer {i} ({})",
            if mt.is_empty() {
                "no media type".to_string()
            } else {
                shown(mt).to_string()
            }
        ));
        if is_rootfs_layer(mt) {
            continue;
        }
        let hex_digest = digest_hex(&desc.digest)
            .with_context(|| layer_what.clone())?
            .to_string();
        if !blobs.contains(&hex_digest) {
            cd.write_blob(desc, &blobs, &mut budget, &layer_what)
                .await?;
        }
        listed.insert(desc.digest.clone());
        match mt {
            MEDIA_TYPE_LOCKED_APP => {
                let mut data = Vec::new();
                blobs
                    .open_file(Path::new(&hex_digest))?
                    .take(MAX_JSON_BYTES + 1)
                    .read_to_end(&mut data)?;
                if data.len() as u64 > MAX_JSON_BYTES {
                    bail!("{layer_what}: the locked app is over {MAX_JSON_BYTES} bytes");
                }
                locked = Some(data);
            }
            MEDIA_TYPE_ARCHIVE_LAYER => {
                let src = blobs.open_file(Path::new(&hex_digest))?;
                let dest = archives.create_dir_all(Path::new(&hex_digest))?;
                let blobs2 = blobs.try_clone()?;
                let w = layer_what.clone();
                // Inflating is CPU-bound and blocking: keep it off the async workers.
                let (res, b) = tokio::task::spawn_blocking(move || {
                    let r = extract_tar_gz(
                        std::io::BufReader::new(src),
                        &dest,
                        &blobs2,
                        &mut budget,
                        &w,
                    );
                    (r, budget)
                })
                .await
                .context("archive extraction task failed")?;
                budget = b;
                for d in res?.file_digests {
                    listed.insert(format!("sha256:{d}"));
                }
            }
            MEDIA_TYPE_WASM => wasm_layer = Some(desc.digest.clone()),
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
    let lock = spin_app_format::LockedApp::from_json(&locked)
        .with_context(|| format!("image {image}: the locked-app layer"))?;
    for d in referenced_digests(&lock) {
        digest_hex(&d).with_context(|| {
            format!(
                "image {image}: the locked app references content \"{}\"",
                shown(&d)
            )
        })?;
        if !listed.contains(&d) {
            bail!(
                "image {image}: the locked app references content {d}, which is missing from the image: its manifest lists no such layer (missing component or file layer)"
            );
        }
    }
    let write = |name: &str, data: &[u8]| -> anyhow::Result<()> {
        let mut f = app.create_file(name, 0o644)?;
        std::io::Write::write_all(&mut f, data)
            .with_context(|| format!("write {}", app.path().join(name).display()))
    };
    write(DIGEST_FILE, manifest_desc.digest.as_bytes())?;
    write(LOCKED_FILE, &locked)?;
    tracing::debug!(image = %image, bytes = budget.bytes(), "artifact materialised");
    Ok(Some(Materialised {
        image,
        manifest_digest: manifest_desc.digest,
        locked,
    }))
}

/// The digests of content the lock does not inline (component sources, dependencies and
/// files), read with the app format crate (Spin's `ContentPath` flattens the reference
/// beside `path`).
pub fn referenced_digests(lock: &spin_app_format::LockedApp) -> BTreeSet<String> {
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
        for dep in comp.trigger_dependencies.values().flatten() {
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

/// Maps a locked-app digest to the materialised file (or extracted archive directory)
/// under `app_dir` (the container's `/`[`APP_DIR`]). Only `sha256:<64 hex>` digests are
/// accepted.
pub fn blob_path(app_dir: &Path, digest: &str) -> anyhow::Result<PathBuf> {
    let hex_digest = digest_hex(digest).context("content referenced by the locked app")?;
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
    fn blob_paths_are_digests_only() {
        let dir = tempfile::tempdir().unwrap();
        let hex = wasm_shim_core::content::sha256_hex(b"hello");
        std::fs::create_dir_all(dir.path().join(BLOBS_DIR)).unwrap();
        std::fs::write(dir.path().join(BLOBS_DIR).join(&hex), b"hello").unwrap();
        let d = format!("sha256:{hex}");
        assert_eq!(
            std::fs::read(blob_path(dir.path(), &d).unwrap()).unwrap(),
            b"hello"
        );
        for bad in ["sha256:/", "sha256:../x", "sha256:../../etc/passwd"] {
            let e = format!("{:#}", blob_path(dir.path(), bad).unwrap_err());
            assert!(e.contains("sha256:<64"), "{bad}: {e}");
        }
        let missing = format!("sha256:{}", wasm_shim_core::content::sha256_hex(b"other"));
        let e = blob_path(dir.path(), &missing).unwrap_err().to_string();
        assert!(e.contains(&missing), "{e}");
    }

    #[test]
    fn rootfs_layers_are_not_app_content() {
        assert!(is_rootfs_layer(
            "application/vnd.oci.image.layer.v1.tar+gzip"
        ));
        assert!(is_rootfs_layer(
            "application/vnd.docker.image.rootfs.diff.tar.gzip"
        ));
        assert!(!is_rootfs_layer(MEDIA_TYPE_ARCHIVE_LAYER));
        assert!(!is_rootfs_layer(MEDIA_TYPE_WASM));
    }
}
