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

use crate::error::ShimError;

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

    /// The blob `digest` from the content service, verified against its sha256.
    /// `what` names the blob for errors (e.g. "layer 2 of image x").
    pub async fn read_blob(&self, digest: &str, what: &str) -> anyhow::Result<Vec<u8>> {
        let Some(hex_digest) = digest.strip_prefix("sha256:") else {
            bail!("{what}: digest {digest:?} is not a sha256 digest");
        };
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
        let mut data = Vec::new();
        while let Some(chunk) = stream.message().await.map_err(missing)? {
            data.extend_from_slice(&chunk.data);
        }
        verify(&data, hex_digest, what)?;
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
        let cd = self;
        let image = cd.container_image(id).await?;
        if image.is_empty() {
            return Ok(None);
        }
        let target = cd.image_target(&image).await?;
        let what = |s: &str| format!("{s} of image {image}");
        let mut manifest_desc = target.clone();
        let manifest_bytes = cd
            .read_blob(&target.digest, &what("the manifest or index"))
            .await?;
        let mut manifest: serde_json::Value = serde_json::from_slice(&manifest_bytes)
            .with_context(|| format!("{}: not JSON", what("the manifest")))?;
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
            manifest_desc = Descriptor {
                media_type: pick["mediaType"].as_str().unwrap_or_default().into(),
                digest: pick["digest"].as_str().unwrap_or_default().into(),
                size: pick["size"].as_i64().unwrap_or_default(),
            };
            let manifest_bytes = cd
                .read_blob(&manifest_desc.digest, &what("the Wasm manifest"))
                .await?;
            manifest = serde_json::from_slice(&manifest_bytes)
                .with_context(|| format!("{}: not JSON", what("the manifest")))?;
        }
        let config_desc = &manifest["config"];
        let config_digest = config_desc["digest"]
            .as_str()
            .with_context(|| format!("{} has no config digest", what("the manifest")))?;
        let config_mt = config_desc["mediaType"].as_str().unwrap_or_default();
        let config = cd.read_blob(config_digest, &what("the config")).await?;
        let config: serde_json::Value = serde_json::from_slice(&config).unwrap_or_default();
        if config_mt != MEDIA_TYPE_WASM_CONFIG && config["architecture"] != "wasm" {
            return Ok(None);
        }
        let layers = manifest["layers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| Descriptor {
                media_type: l["mediaType"].as_str().unwrap_or_default().into(),
                digest: l["digest"].as_str().unwrap_or_default().into(),
                size: l["size"].as_i64().unwrap_or_default(),
            })
            .collect();
        Ok(Some(WasmImage {
            image,
            manifest: manifest_desc,
            layers,
        }))
    }
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
}
