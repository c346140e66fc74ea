//! The media types of a Spin app as an OCI artifact, as Spin's `spin-oci` crate writes them
//! (`spin registry push`) and reads them back.

/// The locked-app JSON layer (the artifact's config).
pub const MEDIA_TYPE_LOCKED_APP: &str = "application/vnd.fermyon.spin.application.v1+config";
/// A component layer.
pub const MEDIA_TYPE_WASM_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// A single static file layer.
pub const MEDIA_TYPE_DATA_LAYER: &str = "application/vnd.wasm.content.layer.v1+data";
/// A gzip tar archive of a component's files.
pub const MEDIA_TYPE_ARCHIVE_LAYER: &str = "application/vnd.wasm.content.bundle.v1.tar+gzip";
/// The single-layer Wasm component form (wkg).
pub const MEDIA_TYPE_WASM: &str = "application/wasm";
