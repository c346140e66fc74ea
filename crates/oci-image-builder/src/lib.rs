//! Writes OCI image-layout archives that `ctr image import` accepts, in four forms:
//!
//! - **wasi**: a rootfs layer holding one `.wasm` file at `/`, entrypoint that file;
//!   platform `linux/amd64`, so `ctr image import` and `ctr run` need no platform flags.
//! - **native**: a rootfs from a host directory and/or listed files, with entrypoint, cmd
//!   and env (the `pause` and busybox test images).
//! - **spin-container**: a plain rootfs with `/spin.toml` (component sources rewritten to
//!   rootfs paths) and the component files; command `/`.
//! - **spin-artifact**: a Spin OCI artifact laid out as `spin registry push` does it
//!   (config architecture `wasm`, os `wasip1`, label `com.fermyon.spin.lockedAppDigest`,
//!   wasm/data/archive layers, the locked-app JSON layer last), or the single-layer
//!   `application/wasm` form.
//!
//! Every archive holds `oci-layout`, `index.json` and `blobs/sha256/<hex>`; the index entry
//! carries the image name in `org.opencontainers.image.ref.name` and
//! `io.containerd.image.name`.
//!
//! Importing (a private containerd: add `--address <socket>`):
//! ```text
//! ctr -n default image import image.tar                               # linux/amd64 images
//! ctr -n default image import --all-platforms image.tar               # wasi/wasm platform images
//! ctr -n default image import --all-platforms --no-unpack artifact.tar # Spin artifacts on containerd 1.6
//! ```
//! containerd 1.6 cannot unpack non-tar layers (Spin artifacts): import them with
//! `--no-unpack` there; CRI can still run them, `ctr run` cannot. containerd 1.7 unpacks them.
//!
//! The `oci-image-builder` binary writes each form:
//! ```text
//! oci-image-builder wasi --name docker.io/library/wasi-hello:latest --wasm hello.wasm -o hello.tar
//! oci-image-builder native --name docker.io/library/pause:latest --file ./pause:/pause --entrypoint /pause -o pause.tar
//! oci-image-builder native --name docker.io/library/busybox:latest --file /bin/busybox:/bin/busybox \
//!     --symlink /bin/sh:busybox --cmd /bin/sh -o busybox.tar
//! oci-image-builder spin-container --name docker.io/library/app:container --app tests/apps/spin-hello -o c.tar
//! oci-image-builder spin-artifact --name docker.io/library/app:artifact --app tests/apps/spin-hello [--archive-layers] -o a.tar
//! oci-image-builder wasm-component --name docker.io/library/app:wasm --wasm app.wasm -o w.tar
//! oci-image-builder inspect a.tar     # verifies every digest, prints index/manifest/config
//! ```

#![warn(missing_docs)]

pub mod hostile;
pub mod rootfs;
pub mod spin;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

pub use rootfs::TarTree;

/// Media type of an OCI image index.
pub const MEDIA_TYPE_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Media type of an OCI image manifest.
pub const MEDIA_TYPE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of an OCI image config.
pub const MEDIA_TYPE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Media type of an uncompressed tar rootfs layer.
pub const MEDIA_TYPE_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// Index annotation containerd reads the image name from.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
/// OCI index annotation for the reference name.
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// An OCI platform (`os`/`architecture`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// Architecture, e.g. `amd64` or `wasm`.
    pub architecture: String,
    /// Operating system, e.g. `linux` or `wasip1`.
    pub os: String,
}

impl Platform {
    /// `linux/amd64`: importable and runnable without platform flags on these hosts.
    pub fn linux_amd64() -> Self {
        Self {
            architecture: "amd64".into(),
            os: "linux".into(),
        }
    }
    /// `wasip1/wasm`, the platform of Spin artifacts.
    pub fn wasm_wasip1() -> Self {
        Self {
            architecture: "wasm".into(),
            os: "wasip1".into(),
        }
    }
}

/// A content blob with its media type and optional descriptor annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// Media type recorded in the descriptor.
    pub media_type: String,
    /// Content.
    pub data: Vec<u8>,
    /// Descriptor annotations (e.g. a layer title).
    pub annotations: BTreeMap<String, String>,
}

impl Blob {
    /// A blob without annotations.
    pub fn new(media_type: &str, data: Vec<u8>) -> Self {
        Self {
            media_type: media_type.into(),
            data,
            annotations: BTreeMap::new(),
        }
    }
    /// `sha256:<hex>` of the content.
    pub fn digest(&self) -> String {
        sha256_digest(&self.data)
    }
    /// The OCI descriptor of this blob.
    pub fn descriptor(&self) -> Value {
        let mut d = json!({
            "mediaType": self.media_type,
            "digest": self.digest(),
            "size": self.data.len(),
        });
        if !self.annotations.is_empty() {
            d["annotations"] = json!(self.annotations);
        }
        d
    }
}

/// An image to be written as an OCI image-layout archive.
#[derive(Debug, Clone)]
pub struct Image {
    /// Image name, e.g. `docker.io/library/wasi-hello:latest`.
    pub name: String,
    /// Platform recorded in the index entry.
    pub platform: Platform,
    /// The config blob (its media type is the manifest's `config.mediaType`).
    pub config: Blob,
    /// Layers, in order.
    pub layers: Vec<Blob>,
    /// Whether the manifest body carries `mediaType` (Spin artifacts do not).
    pub manifest_media_type_field: bool,
    /// Manifest annotations.
    pub manifest_annotations: BTreeMap<String, String>,
}

/// What [`Image::write_archive`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenImage {
    /// Image name.
    pub name: String,
    /// Digest of the manifest (containerd's image target).
    pub manifest_digest: String,
    /// Digest of the config blob.
    pub config_digest: String,
}

impl Image {
    /// The manifest JSON bytes.
    pub fn manifest_bytes(&self) -> Vec<u8> {
        let mut m = json!({ "schemaVersion": 2 });
        if self.manifest_media_type_field {
            m["mediaType"] = json!(MEDIA_TYPE_MANIFEST);
        }
        m["config"] = self.config.descriptor();
        m["layers"] = Value::Array(self.layers.iter().map(Blob::descriptor).collect());
        if !self.manifest_annotations.is_empty() {
            m["annotations"] = json!(self.manifest_annotations);
        }
        serde_json::to_vec(&m).expect("manifest serializes")
    }

    /// Builds the archive in memory.
    pub fn archive_bytes(&self) -> Result<(Vec<u8>, WrittenImage)> {
        validate_name(&self.name)?;
        let manifest = Blob::new(MEDIA_TYPE_MANIFEST, self.manifest_bytes());
        let mut entry = manifest.descriptor();
        entry["platform"] = json!(self.platform);
        entry["annotations"] = json!({
            ANNOTATION_REF_NAME: self.name,
            ANNOTATION_CONTAINERD_NAME: self.name,
        });
        let index = json!({
            "schemaVersion": 2,
            "mediaType": MEDIA_TYPE_INDEX,
            "manifests": [entry],
        });
        let mut t = TarTree::new();
        t.add_file(
            "oci-layout",
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
            0o644,
        )?;
        t.add_file("index.json", serde_json::to_vec(&index)?, 0o644)?;
        for blob in std::iter::once(&self.config)
            .chain(self.layers.iter())
            .chain(std::iter::once(&manifest))
        {
            let path = format!("blobs/sha256/{}", &blob.digest()["sha256:".len()..]);
            t.add_file(&path, blob.data.clone(), 0o644)?;
        }
        let written = WrittenImage {
            name: self.name.clone(),
            manifest_digest: manifest.digest(),
            config_digest: self.config.digest(),
        };
        Ok((t.to_tar()?, written))
    }

    /// Writes the archive to `path` (atomically: a temp file renamed into place).
    pub fn write_archive(&self, path: &Path) -> Result<WrittenImage> {
        let (bytes, written) = self.archive_bytes()?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create output directory {}", dir.display()))?;
        }
        let tmp = path.with_extension("tar.partial");
        std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} into place", path.display()))?;
        Ok(written)
    }
}

fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.contains(':')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/:@".contains(c));
    ensure!(
        ok,
        "image name {name:?} is not a full lowercase reference; use e.g. docker.io/library/hello:latest"
    );
    Ok(())
}

/// Process settings of an image config (`config` in the OCI image config).
#[derive(Debug, Clone, Default)]
pub struct ProcessConfig {
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `Env` as `NAME=VALUE`.
    pub env: Vec<String>,
    /// `WorkingDir` (empty: `/`).
    pub working_dir: String,
    /// `Labels`.
    pub labels: BTreeMap<String, String>,
}

/// Directories every container rootfs gets (mount points for the runtime).
const BASE_DIRS: &[&str] = &["dev", "proc", "sys", "tmp", "etc"];

/// A linux/amd64 image with a single rootfs layer built from `tree`.
pub fn rootfs_image(name: &str, mut tree: TarTree, process: &ProcessConfig) -> Result<Image> {
    for d in BASE_DIRS {
        if !tree.contains(d) {
            tree.add_dir(d)?;
        }
    }
    let layer = Blob::new(MEDIA_TYPE_LAYER_TAR, tree.to_tar()?);
    let mut cfg = json!({
        "WorkingDir": if process.working_dir.is_empty() { "/" } else { &process.working_dir },
    });
    if !process.entrypoint.is_empty() {
        cfg["Entrypoint"] = json!(process.entrypoint);
    }
    if !process.cmd.is_empty() {
        cfg["Cmd"] = json!(process.cmd);
    }
    let mut env = process.env.clone();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(
            0,
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        );
    }
    for e in &env {
        ensure!(e.contains('='), "env entry {e:?} must look like NAME=VALUE");
    }
    cfg["Env"] = json!(env);
    if !process.labels.is_empty() {
        cfg["Labels"] = json!(process.labels);
    }
    let platform = Platform::linux_amd64();
    let config = json!({
        "architecture": platform.architecture,
        "os": platform.os,
        "config": cfg,
        "rootfs": { "type": "layers", "diff_ids": [layer.digest()] },
        "history": [{ "created_by": "oci-image-builder", "comment": "rootfs" }],
    });
    Ok(Image {
        name: name.into(),
        platform,
        config: Blob::new(MEDIA_TYPE_CONFIG, serde_json::to_vec(&config)?),
        layers: vec![layer],
        manifest_media_type_field: true,
        manifest_annotations: BTreeMap::new(),
    })
}

/// A WASI image: `wasm` at `/<file name>`, entrypoint that path, `args` as Cmd.
pub fn wasi_image(name: &str, wasm: &Path, args: &[String], env: &[String]) -> Result<Image> {
    let file = wasm
        .file_name()
        .and_then(|f| f.to_str())
        .with_context(|| format!("{} has no file name", wasm.display()))?;
    if !file.ends_with(".wasm") {
        bail!(
            "{} must end in .wasm: the shim picks the WASI executor by that suffix",
            wasm.display()
        );
    }
    let data = std::fs::read(wasm).with_context(|| {
        format!(
            "cannot read {}: build the guest apps first (make apps)",
            wasm.display()
        )
    })?;
    ensure!(
        data.starts_with(b"\0asm"),
        "{} is not a WebAssembly binary (no \\0asm header)",
        wasm.display()
    );
    let mut tree = TarTree::new();
    tree.add_file(file, data, 0o755)?;
    rootfs_image(
        name,
        tree,
        &ProcessConfig {
            entrypoint: vec![format!("/{file}")],
            cmd: args.to_vec(),
            env: env.to_vec(),
            ..Default::default()
        },
    )
}

/// The files of an OCI image-layout archive, with every blob's digest checked.
#[derive(Debug, Clone)]
pub struct ArchiveContents {
    /// `index.json`.
    pub index: Value,
    /// The (single) manifest.
    pub manifest: Value,
    /// The config blob, parsed.
    pub config: Value,
    /// Layer blobs in manifest order: (media type, content).
    pub layers: Vec<(String, Vec<u8>)>,
}

/// Reads an archive written by this crate (or any single-manifest OCI layout tar) and
/// verifies it: `oci-layout` present, every blob's name matches its sha256, every
/// descriptor's size matches, the manifest and all referenced blobs exist.
pub fn read_archive(bytes: &[u8]) -> Result<ArchiveContents> {
    let t = TarTree::from_tar(bytes).context("not a tar archive")?;
    let file = |p: &str| -> Result<&Vec<u8>> {
        match t.nodes().get(p) {
            Some(rootfs::Node::File { data, .. }) => Ok(data),
            _ => bail!("archive has no {p}"),
        }
    };
    let layout: Value = serde_json::from_slice(file("oci-layout")?)?;
    ensure!(
        layout["imageLayoutVersion"] == "1.0.0",
        "bad oci-layout {layout}"
    );
    for (p, n) in t.nodes() {
        if let (Some(hexd), rootfs::Node::File { data, .. }) = (p.strip_prefix("blobs/sha256/"), n)
        {
            let actual = sha256_digest(data);
            ensure!(
                actual == format!("sha256:{hexd}"),
                "blob {p} has digest {actual}: the archive is corrupt"
            );
        }
    }
    let blob = |d: &Value| -> Result<&Vec<u8>> {
        let digest = d["digest"].as_str().context("descriptor without digest")?;
        let data = file(&format!(
            "blobs/sha256/{}",
            digest
                .strip_prefix("sha256:")
                .context("digest is not sha256")?
        ))?;
        ensure!(
            d["size"].as_u64() == Some(data.len() as u64),
            "descriptor size of {digest} does not match its blob"
        );
        Ok(data)
    };
    let index: Value = serde_json::from_slice(file("index.json")?)?;
    let manifests = index["manifests"]
        .as_array()
        .context("index without manifests")?;
    ensure!(
        manifests.len() == 1,
        "expected one manifest, found {}",
        manifests.len()
    );
    let manifest: Value = serde_json::from_slice(blob(&manifests[0])?)?;
    let config: Value = serde_json::from_slice(blob(&manifest["config"])?)?;
    let mut layers = Vec::new();
    for l in manifest["layers"]
        .as_array()
        .context("manifest without layers")?
    {
        layers.push((
            l["mediaType"].as_str().unwrap_or_default().to_string(),
            blob(l)?.clone(),
        ));
    }
    Ok(ArchiveContents {
        index,
        manifest,
        config,
        layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wasm_file(dir: &Path) -> std::path::PathBuf {
        let p = dir.join("hello.wasm");
        std::fs::write(&p, b"\0asm\x01\0\0\0").unwrap();
        p
    }

    #[test]
    fn wasi_archive_structure_and_digests() {
        let d = tempfile::tempdir().unwrap();
        let img = wasi_image(
            "docker.io/library/hello:latest",
            &wasm_file(d.path()),
            &["a".into()],
            &["K=V".into()],
        )
        .unwrap();
        let (bytes, written) = img.archive_bytes().unwrap();
        let c = read_archive(&bytes).unwrap();
        let entry = &c.index["manifests"][0];
        assert_eq!(entry["digest"], written.manifest_digest);
        assert_eq!(
            entry["annotations"][ANNOTATION_CONTAINERD_NAME],
            "docker.io/library/hello:latest"
        );
        assert_eq!(
            entry["annotations"][ANNOTATION_REF_NAME],
            "docker.io/library/hello:latest"
        );
        assert_eq!(entry["platform"]["os"], "linux");
        assert_eq!(c.manifest["mediaType"], MEDIA_TYPE_MANIFEST);
        assert_eq!(c.config["config"]["Entrypoint"], json!(["/hello.wasm"]));
        assert_eq!(c.config["config"]["Cmd"], json!(["a"]));
        assert!(c.config["config"]["Env"]
            .as_array()
            .unwrap()
            .contains(&json!("K=V")));
        // diff_id of an uncompressed layer is its digest
        assert_eq!(
            c.config["rootfs"]["diff_ids"][0],
            sha256_digest(&c.layers[0].1)
        );
        let rootfs = TarTree::from_tar(&c.layers[0].1).unwrap();
        assert!(matches!(
            rootfs.nodes().get("hello.wasm"),
            Some(rootfs::Node::File { mode: 0o755, .. })
        ));
        assert!(rootfs.contains("proc") && rootfs.contains("dev"));
        // deterministic
        assert_eq!(bytes, img.archive_bytes().unwrap().0);
    }

    #[test]
    fn corrupt_blob_is_detected() {
        let d = tempfile::tempdir().unwrap();
        let img = wasi_image(
            "docker.io/library/hello:latest",
            &wasm_file(d.path()),
            &[],
            &[],
        )
        .unwrap();
        let (bytes, _) = img.archive_bytes().unwrap();
        let mut t = TarTree::from_tar(&bytes).unwrap();
        let layer = format!("blobs/sha256/{}", &img.layers[0].digest()[7..]);
        t.add_file(&layer, b"tampered".to_vec(), 0o644).unwrap();
        let err = read_archive(&t.to_tar().unwrap()).unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
    }

    #[test]
    fn bad_inputs_are_named() {
        let d = tempfile::tempdir().unwrap();
        let w = wasm_file(d.path());
        let err = wasi_image("Hello", &w, &[], &[])
            .unwrap()
            .archive_bytes()
            .unwrap_err();
        assert!(err.to_string().contains("\"Hello\""), "{err}");
        let txt = d.path().join("x.txt");
        std::fs::write(&txt, "x").unwrap();
        assert!(wasi_image("a/b:c", &txt, &[], &[])
            .unwrap_err()
            .to_string()
            .contains(".wasm"));
        let err = wasi_image("a/b:c", &w, &[], &["NOEQ".into()]).unwrap_err();
        assert!(err.to_string().contains("NOEQ"), "{err}");
    }
}
