//! Spin OCI artifacts from containerd's content store.
//!
//! When a container's command is `/` and its rootfs has no `/spin.toml`, the shim (in
//! Create, in its tokio process, before the container exists) asks containerd over its
//! gRPC API (the `-address` socket and namespace containerd gave the shim) for the
//! container's image: containers service -> image name -> images service -> manifest
//! (an index is resolved to its Wasm manifest) -> config and layers from the content
//! service. An image whose config says architecture `wasm` (or has the
//! `application/vnd.wasm.config.v0+json` media type) is materialised into a directory the
//! shim owns under the container's state root (never into the rootfs, whose links the
//! image chose), which the container then sees read-only at `/`[`APP_DIR`]:
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
//! [`crate::content::Limits`]. All writes go through [`crate::confined::Dir`].
//! Missing, corrupt or refused content fails Create with an error naming the digest.

use std::collections::BTreeSet;
use std::io::Read;

use crate::confined::Dir;
use crate::content::{BlobWriter, Budget, Limits};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint, Uri};

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
/// Config media type of the single-layer form.
pub const MEDIA_TYPE_WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";

/// How long connecting to containerd's gRPC socket may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Deadline of each request to containerd (a blob read streams the whole blob).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// containerd's gRPC address (`-address` flag), set once by the shim.
pub(crate) static CONTAINERD_ADDRESS: OnceLock<String> = OnceLock::new();

pub(crate) mod proto {
    //! The few containerd API messages the loader needs (field numbers as in containerd's
    //! `api/services/{containers,images,content}/v1/*.proto`; other fields are skipped).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetContainerRequest {
        #[prost(string, tag = "1")]
        pub id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Container {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(string, tag = "3")]
        pub image: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetContainerResponse {
        #[prost(message, optional, tag = "1")]
        pub container: Option<Container>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetImageRequest {
        #[prost(string, tag = "1")]
        pub name: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Descriptor {
        #[prost(string, tag = "1")]
        pub media_type: String,
        #[prost(string, tag = "2")]
        pub digest: String,
        #[prost(int64, tag = "3")]
        pub size: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Image {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "3")]
        pub target: Option<Descriptor>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetImageResponse {
        #[prost(message, optional, tag = "1")]
        pub image: Option<Image>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ReadContentRequest {
        #[prost(string, tag = "1")]
        pub digest: String,
        #[prost(int64, tag = "2")]
        pub offset: i64,
        #[prost(int64, tag = "3")]
        pub size: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ReadContentResponse {
        #[prost(int64, tag = "1")]
        pub offset: i64,
        #[prost(bytes = "vec", tag = "2")]
        pub data: Vec<u8>,
    }
}

/// A client of containerd's containers, images and content services in one namespace.
pub struct Containerd {
    channel: Channel,
    namespace: String,
    address: String,
}

impl Containerd {
    /// Connects to containerd's gRPC socket (`unix://` prefix optional).
    pub async fn connect(address: &str, namespace: &str) -> anyhow::Result<Self> {
        let path = PathBuf::from(address.strip_prefix("unix://").unwrap_or(address));
        let p = path.clone();
        // The URI is a placeholder: the connector always dials the Unix socket.
        let channel = Endpoint::try_from("http://[::]:50051")?
            .connect_timeout(CONNECT_TIMEOUT)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let p = p.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
                }
            }))
            .await
            .with_context(|| {
                format!(
                    "cannot connect to containerd's gRPC socket {} (the shim's -address)",
                    path.display()
                )
            })?;
        Ok(Containerd {
            channel,
            namespace: namespace.to_string(),
            address: address.to_string(),
        })
    }

    fn request<T>(&self, msg: T) -> anyhow::Result<tonic::Request<T>> {
        let mut req = tonic::Request::new(msg);
        req.metadata_mut().insert(
            "containerd-namespace",
            self.namespace
                .parse()
                .with_context(|| format!("namespace {:?} is not a valid header", self.namespace))?,
        );
        req.set_timeout(REQUEST_TIMEOUT);
        Ok(req)
    }

    async fn unary<Q, R>(&self, path: &'static str, msg: Q) -> Result<R, tonic::Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let req = self
            .request(msg)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<Q, R>::default();
        let resp = grpc
            .unary(req, http::uri::PathAndQuery::from_static(path), codec)
            .await?;
        Ok(resp.into_inner())
    }

    /// The image reference of container `id`.
    pub async fn container_image(&self, id: &str) -> anyhow::Result<String> {
        let resp: proto::GetContainerResponse = self
            .unary(
                "/containerd.services.containers.v1.Containers/Get",
                proto::GetContainerRequest { id: id.into() },
            )
            .await
            .map_err(|s| anyhow::anyhow!("containerd: get container {id}: {}", s.message()))?;
        Ok(resp.container.map(|c| c.image).unwrap_or_default())
    }

    /// The descriptor image `name` points at.
    pub async fn image_target(&self, name: &str) -> anyhow::Result<proto::Descriptor> {
        let resp: proto::GetImageResponse = self
            .unary(
                "/containerd.services.images.v1.Images/Get",
                proto::GetImageRequest { name: name.into() },
            )
            .await
            .map_err(|s| {
                anyhow::anyhow!(
                    "containerd: image {name} (namespace {}): {}",
                    self.namespace,
                    s.message()
                )
            })?;
        resp.image
            .and_then(|i| i.target)
            .with_context(|| format!("containerd: image {name} has no target descriptor"))
    }

    /// The blob `digest` from the content service, verified against its sha256.
    /// `what` names the blob for errors (e.g. "layer 2 of image x").
    pub async fn read_blob(&self, digest: &str, what: &str) -> anyhow::Result<Vec<u8>> {
        let hex_digest = crate::content::sha256_hex(digest).with_context(|| what.to_string())?;
        let mut data = Vec::new();
        self.stream_blob(digest, what, |chunk| {
            data.extend_from_slice(chunk);
            Ok(())
        })
        .await?;
        verify(&data, hex_digest, what)?;
        Ok(data)
    }

    /// Streams the blob `digest` from the content service to `sink`, chunk by chunk, as
    /// containerd sends it (unverified: the sink checks size and digest). `what` names the
    /// blob for errors.
    pub async fn stream_blob(
        &self,
        digest: &str,
        what: &str,
        mut sink: impl FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        crate::content::sha256_hex(digest).with_context(|| what.to_string())?;
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| anyhow::anyhow!("containerd at {}: {e}", self.address))?;
        let req = self.request(proto::ReadContentRequest {
            digest: digest.into(),
            offset: 0,
            size: 0,
        })?;
        let codec =
            tonic_prost::ProstCodec::<proto::ReadContentRequest, proto::ReadContentResponse>::default();
        let missing = |s: tonic::Status| {
            if s.code() == tonic::Code::NotFound {
                anyhow::anyhow!(
                    "{what}: content {digest} is missing from containerd's content store (namespace {}); re-import or re-pull the image",
                    self.namespace
                )
            } else {
                anyhow::anyhow!("{what}: reading content {digest}: {}", s.message())
            }
        };
        let mut stream = grpc
            .server_streaming(
                req,
                http::uri::PathAndQuery::from_static(
                    "/containerd.services.content.v1.Content/Read",
                ),
                codec,
            )
            .await
            .map_err(missing)?
            .into_inner();
        while let Some(chunk) = stream.message().await.map_err(missing)? {
            sink(&chunk.data)?;
        }
        Ok(())
    }
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Checks `data` hashes to `hex_digest`.
fn verify(data: &[u8], hex_digest: &str, what: &str) -> anyhow::Result<()> {
    let got = sha256_hex(data);
    if got != hex_digest {
        bail!(
            "{what}: content sha256:{hex_digest} is corrupt in containerd's content store (its {} bytes hash to sha256:{got}); delete it (`ctr content rm sha256:{hex_digest}`) and re-import or re-pull the image",
            data.len()
        );
    }
    Ok(())
}

/// Whether the container is an artifact candidate: command `/` and no `/spin.toml` in
/// the rootfs (looked up as the container would see it, links confined to the rootfs).
pub fn wants_artifact(args: &[String], rootfs: &Dir) -> bool {
    args.len() == 1 && args[0] == "/" && rootfs.open_in_root(Path::new("spin.toml")).is_err()
}

/// An OCI image index or manifest, as far as the artifact loader follows it
/// (image-spec `image-index.md` and `manifest.md`).
#[derive(Debug, Clone, PartialEq)]
pub enum ImageDocument {
    /// An index (it has `manifests`): the Wasm manifest picked from it (platform
    /// architecture `wasm`, else an os starting with `wasi`), or None if there is none.
    Index(Option<proto::Descriptor>),
    /// A manifest: its config and layer descriptors, in order.
    Manifest {
        /// The config descriptor.
        config: proto::Descriptor,
        /// The layer descriptors.
        layers: Vec<proto::Descriptor>,
    },
}

/// Reads a manifest or index blob. Every descriptor the loader will follow must carry a
/// `sha256:` digest of 64 lower-case hex digits (they become file names) and string media
/// types; anything else is an error naming `what` and the entry.
pub fn read_image_document(bytes: &[u8], what: &str) -> anyhow::Result<ImageDocument> {
    let doc: serde_json::Value =
        serde_json::from_slice(bytes).with_context(|| format!("{what}: not JSON"))?;
    let descriptor = |v: &serde_json::Value, entry: &str| -> anyhow::Result<proto::Descriptor> {
        let digest = v["digest"]
            .as_str()
            .with_context(|| format!("{what}: {entry} has no digest"))?;
        check_digest(digest, &format!("{what}: {entry}"))?;
        let media_type = match &v["mediaType"] {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) => s.clone(),
            other => bail!("{what}: {entry} has mediaType {other}, not a string"),
        };
        Ok(proto::Descriptor {
            media_type,
            digest: digest.to_string(),
            size: v["size"].as_i64().unwrap_or_default(),
        })
    };
    if let Some(entries) = doc.get("manifests") {
        let entries = entries
            .as_array()
            .with_context(|| format!("{what}: `manifests` is not an array"))?;
        let pick = entries
            .iter()
            .position(|m| m["platform"]["architecture"] == "wasm")
            .or_else(|| {
                entries.iter().position(|m| {
                    m["platform"]["os"]
                        .as_str()
                        .is_some_and(|o| o.starts_with("wasi"))
                })
            });
        return Ok(ImageDocument::Index(match pick {
            Some(i) => Some(descriptor(&entries[i], &format!("manifests[{i}]"))?),
            None => None,
        }));
    }
    let config = descriptor(&doc["config"], "the config descriptor")?;
    let layers = match &doc["layers"] {
        serde_json::Value::Null => Vec::new(),
        serde_json::Value::Array(ls) => ls
            .iter()
            .enumerate()
            .map(|(i, l)| descriptor(l, &format!("layers[{i}]")))
            .collect::<anyhow::Result<_>>()?,
        _ => bail!("{what}: `layers` is not an array"),
    };
    Ok(ImageDocument::Manifest { config, layers })
}

/// Checks that `digest` is `sha256:` and 64 lower-case hex digits.
fn check_digest(digest: &str, what: &str) -> anyhow::Result<()> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !ok {
        bail!("{what}: digest {digest:?} is not sha256: and 64 lower-case hex digits");
    }
    Ok(())
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

/// A descriptor as the manifest or index gives it: digest checked, size non-negative.
fn descriptor(v: &serde_json::Value, what: &str) -> anyhow::Result<proto::Descriptor> {
    let digest = v["digest"]
        .as_str()
        .with_context(|| format!("{what}: descriptor without a digest"))?;
    crate::content::sha256_hex(digest).with_context(|| what.to_string())?;
    let size = v["size"]
        .as_i64()
        .filter(|s| *s >= 0)
        .with_context(|| format!("{what}: descriptor of {digest} without a valid size"))?;
    Ok(proto::Descriptor {
        media_type: v["mediaType"].as_str().unwrap_or_default().into(),
        digest: digest.into(),
        size,
    })
}

impl Containerd {
    /// Reads a JSON document (index, manifest, config) of at most
    /// [`crate::content::MAX_JSON_BYTES`], checking its size and digest against `desc`.
    async fn read_json(
        &self,
        desc: &proto::Descriptor,
        what: &str,
    ) -> anyhow::Result<serde_json::Value> {
        let hex_digest =
            crate::content::sha256_hex(&desc.digest).with_context(|| what.to_string())?;
        if desc.size < 0 || desc.size as u64 > crate::content::MAX_JSON_BYTES {
            bail!(
                "{what}: {} states {} bytes; JSON documents over {} bytes are refused",
                desc.digest,
                desc.size,
                crate::content::MAX_JSON_BYTES
            );
        }
        let mut data = Vec::new();
        self.stream_blob(&desc.digest, what, |chunk| {
            if (data.len() + chunk.len()) as i64 > desc.size {
                bail!(
                    "{what}: content {} is larger than the {} bytes its descriptor states",
                    desc.digest,
                    desc.size
                );
            }
            data.extend_from_slice(chunk);
            Ok(())
        })
        .await?;
        verify(&data, hex_digest, what)?;
        serde_json::from_slice(&data).with_context(|| format!("{what}: not JSON"))
    }

    /// Streams blob `desc` into `dir` as `<hex>` (size and digest checked as it goes).
    async fn write_blob(
        &self,
        desc: &proto::Descriptor,
        dir: &Dir,
        budget: &mut Budget,
        what: &str,
    ) -> anyhow::Result<()> {
        let mut w = BlobWriter::new(dir, &desc.digest, desc.size, what)?;
        self.stream_blob(&desc.digest, what, |chunk| w.write(chunk, budget))
            .await?;
        w.finish()?;
        Ok(())
    }
}

/// Reads container `id`'s image from containerd and, if it is a Wasm/Spin artifact,
/// writes it into `app_dir` (a new directory the shim owns, outside the container's
/// rootfs; see the module docs). Returns None for images that are not Wasm artifacts.
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
) -> anyhow::Result<Option<Materialised>> {
    let cd = Containerd::connect(address, namespace).await?;
    let image = cd.container_image(id).await?;
    if image.is_empty() {
        return Ok(None);
    }
    let target = cd.image_target(&image).await?;
    let what = |s: &str| format!("{s} of image {image}");
    let mut manifest_desc = descriptor(
        &serde_json::json!({"digest": target.digest, "size": target.size, "mediaType": target.media_type}),
        &what("the image target"),
    )?;
    let mut manifest = cd
        .read_json(&manifest_desc, &what("the manifest or index"))
        .await?;
    if manifest.get("manifests").is_some() {
        let entries = manifest["manifests"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let pick = entries
            .iter()
            .find(|m| m["platform"]["architecture"] == "wasm")
            .or_else(|| {
                entries.iter().find(|m| {
                    m["platform"]["os"]
                        .as_str()
                        .is_some_and(|o| o.starts_with("wasi"))
                })
            });
        let Some(pick) = pick else {
            return Ok(None);
        };
        manifest_desc = descriptor(pick, &what("the index's Wasm manifest"))?;
        manifest = cd
            .read_json(&manifest_desc, &what("the Wasm manifest"))
            .await?;
    }
    let config_desc = descriptor(&manifest["config"], &what("the config"))?;
    let config = cd.read_json(&config_desc, &what("the config")).await?;
    if config_desc.media_type != MEDIA_TYPE_WASM_CONFIG && config["architecture"] != "wasm" {
        return Ok(None);
    }
    let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
    let limits = Limits::from_env()?;
    let mut budget = Budget::new(limits);
    let app = Dir::create(app_dir)?;
    let blobs = app.create_dir_all(Path::new(BLOBS_DIR))?;
    let archives = app.create_dir_all(Path::new(ARCHIVES_DIR))?;
    // Digests the lock may reference: layers and files inside archive layers.
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut locked: Option<Vec<u8>> = None;
    let mut wasm_layer: Option<String> = None;
    for (i, l) in layers.iter().enumerate() {
        let layer_what = what(&format!(
            "layer {i} ({})",
            l["mediaType"].as_str().unwrap_or("no media type")
        ));
        let desc = descriptor(l, &layer_what)?;
        let hex_digest = desc.digest["sha256:".len()..].to_string();
        // A tar rootfs layer (containerd unpacks those into the rootfs) is not app content.
        if desc
            .media_type
            .starts_with("application/vnd.oci.image.layer.")
            || desc
                .media_type
                .starts_with("application/vnd.docker.image.rootfs.")
        {
            continue;
        }
        if !blobs.contains(&hex_digest) {
            cd.write_blob(&desc, &blobs, &mut budget, &layer_what)
                .await?;
        }
        listed.insert(desc.digest.clone());
        match desc.media_type.as_str() {
            MEDIA_TYPE_LOCKED_APP => {
                let f = blobs.open_file(Path::new(&hex_digest))?;
                let mut data = Vec::new();
                f.take(crate::content::MAX_JSON_BYTES + 1)
                    .read_to_end(&mut data)?;
                if data.len() as u64 > crate::content::MAX_JSON_BYTES {
                    bail!(
                        "{layer_what}: the locked app is over {} bytes",
                        crate::content::MAX_JSON_BYTES
                    );
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
                    let r = crate::content::extract_tar_gz(
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
    let lock_json: serde_json::Value = serde_json::from_slice(&locked)
        .with_context(|| format!("image {image}: the locked-app layer is not JSON"))?;
    for d in referenced_digests(&lock_json) {
        crate::content::sha256_hex(&d)
            .with_context(|| format!("image {image}: the locked app references content {d:?}"))?;
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

/// The digests of content the lock does not inline (component sources and files; a
/// file entry carries its reference flattened, as Spin's `ContentPath` does, or under
/// `content`).
pub fn referenced_digests(lock: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut add = |c: &serde_json::Value| {
        if c.get("inline").is_none() && c.get("source").is_none() {
            if let Some(d) = c.get("digest").and_then(|d| d.as_str()) {
                out.insert(d.to_string());
            }
        }
    };
    for comp in lock["components"].as_array().into_iter().flatten() {
        add(&comp["source"]);
        for f in comp["files"].as_array().into_iter().flatten() {
            add(f);
            add(&f["content"]);
        }
    }
    out
}

/// A lock serving the single component `digest` at `/...` (the `application/wasm` form).
pub fn single_component_lock(image: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "spin_lock_version": 0,
        "metadata": {
            "name": image,
            "trigger": { "type": "http" },
            "triggers": { "http": {} },
        },
        "triggers": [{
            "id": "main-http-trigger",
            "trigger_type": "http",
            "trigger_config": { "route": "/...", "component": "main" },
        }],
        "components": [{
            "id": "main",
            "source": { "content_type": MEDIA_TYPE_WASM, "digest": digest },
            "files": [],
        }],
    }))
    .expect("static JSON")
}

/// Maps a locked-app digest to the materialised file (or extracted archive directory)
/// under `app_dir` (the container's `/`[`APP_DIR`]). Only `sha256:<64 hex>` digests are
/// accepted.
pub fn blob_path(app_dir: &Path, digest: &str) -> anyhow::Result<PathBuf> {
    let hex_digest = crate::content::sha256_hex(digest)
        .with_context(|| "content referenced by the locked app".to_string())?;
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
    fn verify_names_both_digests() {
        let good = sha256_hex(b"abc");
        verify(b"abc", &good, "x").unwrap();
        let e = verify(b"abd", &good, "layer 1").unwrap_err().to_string();
        assert!(
            e.contains(&format!("sha256:{good}")) && e.contains("corrupt"),
            "{e}"
        );
        assert!(e.contains(&sha256_hex(b"abd")), "{e}");
    }

    #[test]
    fn image_documents_follow_only_sha256_descriptors() {
        let d = format!("sha256:{}", sha256_hex(b"x"));
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[
                {{"mediaType":"m","digest":"{d}","platform":{{"os":"linux","architecture":"amd64"}}}},
                {{"mediaType":"m","digest":"{d}","size":3,"platform":{{"os":"wasip1","architecture":"wasm"}}}}]}}"#
        );
        match read_image_document(index.as_bytes(), "index").unwrap() {
            ImageDocument::Index(Some(p)) => assert_eq!((p.digest.as_str(), p.size), (&d[..], 3)),
            other => panic!("{other:?}"),
        }
        let no_wasm = r#"{"manifests":[{"platform":{"architecture":"amd64"}}]}"#;
        assert_eq!(
            read_image_document(no_wasm.as_bytes(), "index").unwrap(),
            ImageDocument::Index(None)
        );
        let manifest = format!(
            r#"{{"config":{{"mediaType":"{MEDIA_TYPE_WASM_CONFIG}","digest":"{d}"}},"layers":[{{"mediaType":"{MEDIA_TYPE_WASM}","digest":"{d}"}}]}}"#
        );
        let ImageDocument::Manifest { config, layers } =
            read_image_document(manifest.as_bytes(), "m").unwrap()
        else {
            panic!("not a manifest")
        };
        assert_eq!(config.media_type, MEDIA_TYPE_WASM_CONFIG);
        assert_eq!(layers.len(), 1);
        // Digests become file names: anything but sha256:<64 hex> is refused, named.
        for bad in ["sha256:../../etc", "sha256:", "sha512:00", "sha256:/"] {
            let m = format!(r#"{{"config":{{"digest":"{d}"}},"layers":[{{"digest":"{bad}"}}]}}"#);
            let e = read_image_document(m.as_bytes(), "the manifest").unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains("layers[0]") && e.contains(bad), "{e}");
        }
        assert!(read_image_document(b"{\"manifests\":{}}", "i").is_err());
        assert!(read_image_document(b"[]", "m").is_err());
    }

    #[test]
    fn lock_digests_skip_inline_content() {
        let lock = serde_json::json!({"components": [{
        "source": {"digest": "sha256:aa"},
        "files": [
            {"digest": "sha256:bb", "inline": "eA", "path": "/a"},
            {"digest": "sha256:cc", "path": "/b"},
            {"content": {"digest": "sha256:dd"}, "path": "/c"},
        ]}]});
        let d: Vec<_> = referenced_digests(&lock).into_iter().collect();
        assert_eq!(d, ["sha256:aa", "sha256:cc", "sha256:dd"]);
    }

    #[test]
    fn blob_paths_are_digests_only() {
        let dir = tempfile::tempdir().unwrap();
        let hex = sha256_hex(b"hello");
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
        let missing = format!("sha256:{}", sha256_hex(b"other"));
        let e = blob_path(dir.path(), &missing).unwrap_err().to_string();
        assert!(e.contains(&missing), "{e}");
    }
}
