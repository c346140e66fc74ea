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
//! other content of the namespace); blobs are written with their size and sha256 checked;
//! archives hold only regular files and directories and stay within [`Limits`]. All
//! writes go through [`Dir`]. The root shim reads no layer itself: it streams each from
//! containerd into a pipe, and a helper ([`crate::compile_helper`], [`Job::Unpack`]: in the
//! container's cgroup, uid 65534, confined, rlimits, killed at its time bound) verifies,
//! writes and extracts them into `blobs/` and `archives/`, the only directories it may
//! write, and only while it runs. Afterwards the shim makes them root-owned again, refuses
//! anything but regular files and directories in them, and hashes itself the lock and the
//! content the lock references before handing them on.
//! Missing, corrupt or refused content fails Create with an error naming the digest.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};
use wasm_shim_core::confined::Dir;
use wasm_shim_core::content::{digest_hex, Containerd, Descriptor};
use wasm_shim_core::untrusted::{shown, shown_path, Limits, MAX_JSON_BYTES};

use crate::compile_helper::{Job, Sandbox, HELPER_ID};
use crate::unpack::{UnpackJob, UnpackLayer, Unpacked};

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
/// the manifest lists (or files inside its archive layers). The layers are verified,
/// written and extracted within [`Limits`] by a helper in `sandbox` ([`unpack`]): the
/// shim only streams them from containerd into pipes, then takes the directories back
/// and verifies what it uses itself. Errors name the image, the layer and the rule.
pub async fn materialise(
    address: &str,
    namespace: &str,
    id: &str,
    app_dir: &Path,
    sandbox: &Sandbox,
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
    let limits = Limits::from_env()?;
    let app = Dir::create(app_dir)?;
    let blobs = app.create_dir_all(Path::new(BLOBS_DIR))?;
    let archives = app.create_dir_all(Path::new(ARCHIVES_DIR))?;
    // Digests the lock may reference: layers and files inside archive layers.
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut locked_digest: Option<String> = None;
    let mut wasm_layer: Option<String> = None;
    let mut plan: Vec<UnpackLayer> = Vec::new();
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
        digest_hex(&desc.digest).with_context(|| layer_what.clone())?;
        match mt {
            MEDIA_TYPE_LOCKED_APP => {
                if desc.size > MAX_JSON_BYTES as i64 {
                    bail!("{layer_what}: the locked app is over {MAX_JSON_BYTES} bytes");
                }
                locked_digest = Some(desc.digest.clone());
            }
            MEDIA_TYPE_WASM => wasm_layer = Some(desc.digest.clone()),
            _ => {}
        }
        if listed.insert(desc.digest.clone()) {
            plan.push(UnpackLayer {
                digest: desc.digest.clone(),
                size: desc.size,
                archive: mt == MEDIA_TYPE_ARCHIVE_LAYER,
                what: layer_what,
            });
        }
    }
    let bound = limits.max_entries.saturating_add(plan.len() as u64 + 16);
    let unpacked = unpack(cd, sandbox, &blobs, &archives, plan, limits, &image).await?;
    seal(&blobs, bound).with_context(|| format!("image {image}"))?;
    seal(&archives, bound).with_context(|| format!("image {image}"))?;
    for d in unpacked.files {
        let d = format!("sha256:{d}");
        digest_hex(&d).context("the unpacking helper's verdict")?;
        listed.insert(d);
    }
    let locked = match (locked_digest, wasm_layer) {
        (Some(d), _) => read_verified(&blobs, &d, MAX_JSON_BYTES)
            .with_context(|| format!("image {image}: the locked-app layer"))?,
        (None, Some(d)) if layers.len() == 1 => single_component_lock(&image, &d),
        _ => bail!(
            "image {image} has a Wasm config but no locked-app layer ({MEDIA_TYPE_LOCKED_APP}) nor a single {MEDIA_TYPE_WASM} layer"
        ),
    };
    let lock = spin_app_format::LockedApp::from_json(&locked)
        .with_context(|| format!("image {image}: the locked-app layer"))?;
    for d in referenced_digests(&lock) {
        let hex = digest_hex(&d).with_context(|| {
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
        // What the shim hands on (component sources key the node's compile cache) is
        // checked by the shim itself, not taken from the helper.
        if blobs.contains(hex) {
            read_verified(&blobs, &d, u64::MAX)
                .with_context(|| format!("image {image}: content {d}"))?;
        }
    }
    let write = |name: &str, data: &[u8]| -> anyhow::Result<()> {
        let mut f = app.create_file(name, 0o644)?;
        std::io::Write::write_all(&mut f, data)
            .with_context(|| format!("write {}", app.path().join(name).display()))
    };
    write(DIGEST_FILE, manifest_desc.digest.as_bytes())?;
    write(LOCKED_FILE, &locked)?;
    tracing::debug!(image = %image, bytes = unpacked.bytes, "artifact materialised");
    Ok(Some(Materialised {
        image,
        manifest_digest: manifest_desc.digest,
        locked,
    }))
}

/// Most layers one artifact may have: the helper's inputs are the two directories and
/// one pipe per layer, below its descriptor limit.
pub const MAX_LAYERS: usize = 46;

/// Has a helper of `sandbox` (in the container's cgroup, unprivileged, bounded; see
/// [`crate::compile_helper`]) verify, write and extract `plan`'s layers into `blobs` and
/// `archives`, which it may write only while it runs. The shim streams each layer from
/// containerd into a pipe of its own (a blocking thread; the helper reads them in order)
/// and holds nothing but the copy buffers: what an archive inflates to, its headers and
/// its depth cost the pod's memory and CPU. Errors from containerd (missing content) win
/// over the helper's, which name the layer and the rule.
async fn unpack(
    cd: Containerd,
    sandbox: &Sandbox,
    blobs: &Dir,
    archives: &Dir,
    plan: Vec<UnpackLayer>,
    limits: Limits,
    image: &str,
) -> anyhow::Result<Unpacked> {
    if plan.len() > MAX_LAYERS {
        bail!(
            "image {image} has {} content layers; at most {MAX_LAYERS} are supported",
            plan.len()
        );
    }
    for d in [blobs, archives] {
        let id = Some(rustix::fs::Uid::from_raw(HELPER_ID));
        rustix::fs::fchown(d.fd(), id, Some(rustix::fs::Gid::from_raw(HELPER_ID)))
            .and_then(|_| rustix::fs::fchmod(d.fd(), rustix::fs::Mode::from_raw_mode(0o700)))
            .map_err(std::io::Error::from)
            .with_context(|| format!("handing {} to the unpacking helper", d.path().display()))?;
    }
    let mut inputs: Vec<File> = vec![
        File::from(blobs.fd().try_clone_to_owned()?),
        File::from(archives.fd().try_clone_to_owned()?),
    ];
    let mut feeds = Vec::new();
    for layer in &plan {
        let (r, w) = std::io::pipe()?;
        inputs.push(File::from(OwnedFd::from(r)));
        feeds.push((layer.digest.clone(), layer.what.clone(), w));
    }
    let job = Job::Unpack(UnpackJob {
        max_bytes: limits.max_bytes,
        max_entries: limits.max_entries,
        layers: plan,
    });
    let handle = tokio::runtime::Handle::current();
    let feeder = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for (digest, what, mut pipe) in feeds {
            let mut helper_gone = false;
            let fed = handle.block_on(cd.stream_blob(&digest, &what, |chunk| {
                pipe.write_all(chunk).map_err(|e| {
                    helper_gone = true;
                    anyhow::Error::from(e)
                })
            }));
            match fed {
                // The helper ended early: its verdict says why.
                Err(_) if helper_gone => return Ok(()),
                Err(e) => return Err(e),
                Ok(()) => {}
            }
        }
        Ok(())
    });
    let sandbox = sandbox.clone();
    let label = format!("image {image}");
    let max_output = limits
        .max_entries
        .saturating_mul(80)
        .saturating_add(64 << 10);
    let helper = tokio::task::spawn_blocking(move || {
        let refs: Vec<&File> = inputs.iter().collect();
        let mut out = Vec::new();
        let r = sandbox.run(&job, &refs, &mut out, max_output, &label);
        // The shim's read ends close here, so a feeder still writing stops.
        drop(refs);
        drop(inputs);
        r.map(|_| out)
    });
    let helper = helper.await.context("the unpacking helper's task failed")?;
    feeder
        .await
        .context("streaming the layers from containerd failed")??;
    let out = helper?;
    serde_json::from_slice(&out).context("the unpacking helper's verdict is malformed")
}

/// Takes back a directory an unpacking helper wrote (every process of the helper is gone:
/// its PID namespace ended before the shim saw it exit): everything below becomes
/// root-owned and read-only to others (directories 0755, files 0644, no set-id bits), and
/// anything but a regular file or directory (which only a subverted helper could have
/// made) fails, naming it. Iterative; at most `bound` entries.
fn seal(top: &Dir, bound: u64) -> anyhow::Result<()> {
    use rustix::fs::{AtFlags, FileType, Gid, Mode, Uid};
    let own = |dir: &Dir, name: Option<&std::ffi::CStr>, mode: u32| -> anyhow::Result<()> {
        let r = match name {
            None => rustix::fs::fchown(dir.fd(), Some(Uid::ROOT), Some(Gid::ROOT))
                .and_then(|_| rustix::fs::fchmod(dir.fd(), Mode::from_raw_mode(mode))),
            Some(n) => rustix::fs::chownat(
                dir.fd(),
                n,
                Some(Uid::ROOT),
                Some(Gid::ROOT),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .and_then(|_| {
                rustix::fs::chmodat(dir.fd(), n, Mode::from_raw_mode(mode), AtFlags::empty())
            }),
        };
        r.map_err(std::io::Error::from).with_context(|| {
            format!(
                "taking back {}",
                shown_path(&dir.path().join(OsStr::from_bytes(
                    name.map(|n| n.to_bytes()).unwrap_or_default()
                )))
            )
        })
    };
    own(top, None, 0o755)?;
    let mut pending = vec![PathBuf::new()];
    let mut seen = 0u64;
    while let Some(rel) = pending.pop() {
        let dir = if rel.as_os_str().is_empty() {
            top.try_clone()?
        } else {
            top.open_dir(&rel)?
        };
        let entries = rustix::fs::Dir::read_from(dir.fd())
            .map_err(std::io::Error::from)
            .with_context(|| format!("reading {}", dir.path().display()))?;
        for entry in entries {
            let entry = entry.map_err(std::io::Error::from)?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            seen += 1;
            anyhow::ensure!(
                seen <= bound,
                "{} holds more than {bound} entries after unpacking",
                top.path().display()
            );
            let st = rustix::fs::statat(dir.fd(), name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(std::io::Error::from)?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    own(&dir, Some(name), 0o755)?;
                    pending.push(rel.join(OsStr::from_bytes(name.to_bytes())));
                }
                FileType::RegularFile => own(&dir, Some(name), 0o644)?,
                other => bail!(
                    "{} is {other:?} after unpacking: only regular files and directories are \
                     accepted (the unpacking helper did not do what it was asked)",
                    shown_path(&dir.path().join(OsStr::from_bytes(name.to_bytes())))
                ),
            }
        }
    }
    Ok(())
}

/// The blob `digest` in `blobs`, at most `max` bytes read, its sha256 checked by the shim
/// (it was written by a helper). Returns the bytes when `max` is within
/// [`MAX_JSON_BYTES`], else nothing (hashed as it streams).
fn read_verified(blobs: &Dir, digest: &str, max: u64) -> anyhow::Result<Vec<u8>> {
    let hex = digest_hex(digest)?;
    let mut f = blobs.open_file(Path::new(hex))?;
    let keep = max <= MAX_JSON_BYTES;
    let mut data = Vec::new();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        n += k as u64;
        if n > max {
            bail!("content {digest} is over {max} bytes");
        }
        hasher.update(&buf[..k]);
        if keep {
            data.extend_from_slice(&buf[..k]);
        }
    }
    let got = hex::encode(hasher.finalize());
    if got != hex {
        bail!("content {digest} as unpacked hashes to sha256:{got}; the unpacking helper did not do what it was asked");
    }
    Ok(data)
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

/// Content `c` of the locked app of the artifact materialised in `artifact` (as the
/// container sees it, or the shim's own directory): referenced by digest.
pub fn content(
    artifact: &Path,
    c: &spin_runtime::app::ContentRef,
) -> anyhow::Result<spin_runtime::app::Content> {
    match &c.digest {
        Some(d) => Ok(spin_runtime::app::Content::Path(blob_path(artifact, d)?)),
        None => anyhow::bail!(
            "content {:?} of the locked app has no digest (artifacts reference content by digest)",
            c.source
        ),
    }
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
    fn sealing_takes_the_helpers_tree_back_and_refuses_links() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: chown needs root");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("archives");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::fs::write(top.join("a/b/f"), b"x").unwrap();
        std::fs::set_permissions(top.join("a/b/f"), std::fs::Permissions::from_mode(0o4777))
            .unwrap();
        for p in ["", "a", "a/b", "a/b/f"] {
            std::os::unix::fs::chown(top.join(p), Some(HELPER_ID), Some(HELPER_ID)).unwrap();
        }
        seal(&Dir::open(&top).unwrap(), 10).unwrap();
        for (p, mode) in [("", 0o755), ("a", 0o755), ("a/b", 0o755), ("a/b/f", 0o644)] {
            let md = std::fs::symlink_metadata(top.join(p)).unwrap();
            assert_eq!(
                (md.uid(), md.gid(), md.mode() & 0o7777),
                (0, 0, mode),
                "{p}"
            );
        }
        // More entries than the bound, and a link: refused, naming it.
        let e = format!("{:#}", seal(&Dir::open(&top).unwrap(), 2).unwrap_err());
        assert!(e.contains("more than 2 entries"), "{e}");
        std::os::unix::fs::symlink("/etc", top.join("a/link\nx")).unwrap();
        let e = format!("{:#}", seal(&Dir::open(&top).unwrap(), 10).unwrap_err());
        assert!(
            e.contains("link") && e.contains("only regular files and directories"),
            "{e}"
        );
    }

    #[test]
    fn the_shim_hashes_what_a_helper_wrote() {
        let t = tempfile::tempdir().unwrap();
        let blobs = Dir::open(t.path()).unwrap();
        let hex = wasm_shim_core::content::sha256_hex(b"hello");
        std::fs::write(t.path().join(&hex), b"hello").unwrap();
        let d = format!("sha256:{hex}");
        assert_eq!(read_verified(&blobs, &d, MAX_JSON_BYTES).unwrap(), b"hello");
        assert!(read_verified(&blobs, &d, u64::MAX).unwrap().is_empty());
        let e = read_verified(&blobs, &d, 3).unwrap_err().to_string();
        assert!(e.contains("over 3 bytes"), "{e}");
        // A file under another file's digest, and a FIFO named like a blob.
        std::fs::write(t.path().join(&hex), b"hellO").unwrap();
        let e = read_verified(&blobs, &d, MAX_JSON_BYTES)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&d) && e.contains("hashes to"), "{e}");
        let other = wasm_shim_core::content::sha256_hex(b"fifo");
        nix::unistd::mkfifo(
            &t.path().join(&other),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = format!(
            "{:#}",
            read_verified(&blobs, &format!("sha256:{other}"), 10).unwrap_err()
        );
        assert!(e.contains("FIFO"), "{e}");
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
