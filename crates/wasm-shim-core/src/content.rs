//! A client of containerd's containers, images and content services (gRPC on the
//! `-address` socket containerd gives the shim), for engines that read their program from
//! the content store rather than the rootfs: container -> image name -> manifest (an index
//! is resolved to its Wasm manifest) -> config and layer descriptors. Every blob's sha256
//! is verified; missing or corrupt content is an error naming the digest.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::{bail, Context};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::confined::Dir;
use crate::error::ShimError;
pub use crate::untrusted::digest_hex;
use crate::untrusted::{BlobWriter, Budget, MAX_JSON_BYTES};

/// Config media type of Wasm OCI artifacts (`application/vnd.wasm.config.v0+json`).
pub const MEDIA_TYPE_WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";

/// How long connecting to containerd's gRPC socket may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Deadline of each request to containerd (a blob read streams the whole blob).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// containerd's gRPC address (`-address` flag), set once by the shim.
pub static CONTAINERD_ADDRESS: OnceLock<String> = OnceLock::new();

mod proto {
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
    /// An OCI content descriptor (containerd's `types.Descriptor`).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Descriptor {
        /// The content's media type.
        #[prost(string, tag = "1")]
        pub media_type: String,
        /// `sha256:<hex>`.
        #[prost(string, tag = "2")]
        pub digest: String,
        /// Size in bytes.
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

pub use proto::Descriptor;

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
            .map_err(|s| status_error(s, format!("containerd: get container {id}")))?;
        Ok(resp.container.map(|c| c.image).unwrap_or_default())
    }

    /// The descriptor image `name` points at.
    pub async fn image_target(&self, name: &str) -> anyhow::Result<Descriptor> {
        let resp: proto::GetImageResponse = self
            .unary(
                "/containerd.services.images.v1.Images/Get",
                proto::GetImageRequest { name: name.into() },
            )
            .await
            .map_err(|s| {
                status_error(
                    s,
                    format!("containerd: image {name} (namespace {})", self.namespace),
                )
            })?;
        resp.image
            .and_then(|i| i.target)
            .with_context(|| format!("containerd: image {name} has no target descriptor"))
    }

    /// The blob `digest` from the content service, verified against its sha256, at most
    /// `max` bytes (more fails naming `what`). `what` names the blob for errors (e.g.
    /// "layer 2 of image x").
    pub async fn read_blob(&self, digest: &str, max: u64, what: &str) -> anyhow::Result<Vec<u8>> {
        let hex_digest = digest_hex(digest).with_context(|| what.to_string())?;
        let mut data = Vec::new();
        self.stream_blob(digest, what, |chunk| {
            if (data.len() + chunk.len()) as u64 > max {
                bail!("{what}: content {digest} is over {max} bytes; refused");
            }
            data.extend_from_slice(chunk);
            Ok(())
        })
        .await?;
        verify(&data, hex_digest, what)?;
        Ok(data)
    }

    /// Streams the blob `digest` (checked with [`digest_hex`]) from the content service
    /// to `sink`, chunk by chunk as containerd sends it; the sink checks size and digest.
    /// `what` names the blob for errors.
    pub async fn stream_blob(
        &self,
        digest: &str,
        what: &str,
        mut sink: impl FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        digest_hex(digest).with_context(|| what.to_string())?;
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
                anyhow::Error::new(ShimError::NotFound(format!(
                    "{what}: content {digest} is missing from containerd's content store (namespace {}); re-import or re-pull the image",
                    self.namespace
                )))
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

    /// Streams blob `desc` into `dir` as `<hex>`, its size checked against the
    /// descriptor as it arrives and its sha256 before it gets its name, accounted in
    /// `budget` (see [`BlobWriter`]).
    pub async fn write_blob(
        &self,
        desc: &Descriptor,
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

    /// A JSON document (index, manifest, config) of at most [`MAX_JSON_BYTES`], its size
    /// and digest checked against `desc`.
    async fn read_document(&self, desc: &Descriptor, what: &str) -> anyhow::Result<Vec<u8>> {
        if desc.size < 0 || desc.size as u64 > MAX_JSON_BYTES {
            bail!(
                "{what}: {} states {} bytes; JSON documents over {MAX_JSON_BYTES} bytes are refused",
                desc.digest,
                desc.size
            );
        }
        let data = self.read_blob(&desc.digest, desc.size as u64, what).await?;
        if data.len() as i64 != desc.size {
            bail!(
                "{what}: content {} has {} bytes, its descriptor states {}; the image is corrupt",
                desc.digest,
                data.len(),
                desc.size
            );
        }
        Ok(data)
    }
}

/// containerd's error `s` about `what`; NOT_FOUND stays [`ShimError::NotFound`].
fn status_error(s: tonic::Status, what: String) -> anyhow::Error {
    let msg = format!("{what}: {}", s.message());
    if s.code() == tonic::Code::NotFound {
        ShimError::NotFound(msg).into()
    } else {
        anyhow::anyhow!(msg)
    }
}

/// Lower-case hex sha256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
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

/// A Wasm OCI artifact: the image's Wasm manifest with its layer descriptors.
#[derive(Debug, Clone)]
pub struct WasmImage {
    /// The image reference.
    pub image: String,
    /// The descriptor of the Wasm manifest (for an index: the entry picked from it).
    pub manifest: Descriptor,
    /// The manifest's layers, in order.
    pub layers: Vec<Descriptor>,
}

impl Containerd {
    /// Container `id`'s image if it is a Wasm artifact: an index is resolved to its entry
    /// with platform architecture `wasm` (else os `wasi*`), and the manifest's config must
    /// say architecture `wasm` or have [`MEDIA_TYPE_WASM_CONFIG`]. None for containers
    /// without an image and for images that are not Wasm artifacts.
    pub async fn wasm_image(&self, id: &str) -> anyhow::Result<Option<WasmImage>> {
        let image = self.container_image(id).await?;
        if image.is_empty() {
            return Ok(None);
        }
        let target = self.image_target(&image).await?;
        self.wasm_image_at(image, target).await
    }

    /// The image whose manifest or index is `target` (named `image` in messages) if it is
    /// a Wasm artifact, resolved as in [`Containerd::wasm_image`]: for a container whose
    /// record names no image but whose client said which content it runs.
    pub async fn wasm_image_at(
        &self,
        image: String,
        target: Descriptor,
    ) -> anyhow::Result<Option<WasmImage>> {
        let cd = self;
        let what = |s: &str| format!("{s} of image {image}");
        check_digest(&target.digest, &what("the image target"))?;
        let mut manifest_desc = target.clone();
        let mut manifest_bytes = cd
            .read_document(&target, &what("the manifest or index"))
            .await?;
        let mut doc = read_image_document(&manifest_bytes, &what("the manifest or index"))?;
        if let ImageDocument::Index(pick) = doc {
            let Some(pick) = pick else {
                return Ok(None);
            };
            manifest_desc = pick;
            manifest_bytes = cd
                .read_document(&manifest_desc, &what("the Wasm manifest"))
                .await?;
            doc = read_image_document(&manifest_bytes, &what("the Wasm manifest"))?;
        }
        let ImageDocument::Manifest { config, layers } = doc else {
            bail!(
                "{}: {} is an index inside an index",
                what("the Wasm manifest"),
                manifest_desc.digest
            );
        };
        let config_mt = config.media_type.as_str();
        let config_bytes = cd.read_document(&config, &what("the config")).await?;
        let config_json: serde_json::Value =
            serde_json::from_slice(&config_bytes).unwrap_or_default();
        if config_mt != MEDIA_TYPE_WASM_CONFIG && config_json["architecture"] != "wasm" {
            return Ok(None);
        }
        Ok(Some(WasmImage {
            image,
            manifest: manifest_desc,
            layers,
        }))
    }
}

/// An OCI image index or manifest, as far as the artifact loader follows it
/// (image-spec `image-index.md` and `manifest.md`).
#[derive(Debug, Clone, PartialEq)]
pub enum ImageDocument {
    /// An index (it has `manifests`): the Wasm manifest picked from it (platform
    /// architecture `wasm`, else an os starting with `wasi`), or None if there is none.
    Index(Option<Descriptor>),
    /// A manifest: its config and layer descriptors, in order.
    Manifest {
        /// The config descriptor.
        config: Descriptor,
        /// The layer descriptors.
        layers: Vec<Descriptor>,
    },
}

/// Reads a manifest or index blob. Every descriptor the loader will follow must carry a
/// `sha256:` digest of 64 lower-case hex digits (they become file names) and string media
/// types; anything else is an error naming `what` and the entry.
pub fn read_image_document(bytes: &[u8], what: &str) -> anyhow::Result<ImageDocument> {
    let doc: serde_json::Value =
        serde_json::from_slice(bytes).with_context(|| format!("{what}: not JSON"))?;
    let descriptor = |v: &serde_json::Value, entry: &str| -> anyhow::Result<Descriptor> {
        let digest = v["digest"]
            .as_str()
            .with_context(|| format!("{what}: {entry} has no digest"))?;
        check_digest(digest, &format!("{what}: {entry}"))?;
        let media_type = match &v["mediaType"] {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) => s.clone(),
            other => bail!(
                "{what}: {entry} has mediaType {}, not a string",
                crate::untrusted::shown(&other.to_string())
            ),
        };
        let size = v["size"]
            .as_i64()
            .filter(|s| *s >= 0)
            .with_context(|| format!("{what}: {entry} has no valid `size`"))?;
        Ok(Descriptor {
            media_type,
            digest: digest.to_string(),
            size,
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
    digest_hex(digest).with_context(|| what.to_string())?;
    Ok(())
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
            r#"{{"config":{{"mediaType":"{MEDIA_TYPE_WASM_CONFIG}","digest":"{d}","size":1}},"layers":[{{"mediaType":"application/wasm","digest":"{d}","size":1}}]}}"#
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
            let m = format!(
                r#"{{"config":{{"digest":"{d}","size":1}},"layers":[{{"digest":"{bad}","size":1}}]}}"#
            );
            let e = read_image_document(m.as_bytes(), "the manifest").unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains("layers[0]") && e.contains(bad), "{e}");
        }
        // Sizes bound every read: a descriptor without one is refused, named.
        let m =
            format!(r#"{{"config":{{"digest":"{d}","size":1}},"layers":[{{"digest":"{d}"}}]}}"#);
        let e = format!("{:#}", read_image_document(m.as_bytes(), "m").unwrap_err());
        assert!(e.contains("layers[0]") && e.contains("size"), "{e}");
        assert!(read_image_document(b"{\"manifests\":{}}", "i").is_err());
        assert!(read_image_document(b"[]", "m").is_err());
    }
}
