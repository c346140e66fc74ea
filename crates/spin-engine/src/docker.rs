//! The image of a container Docker Engine created when containerd's record of it names
//! none.
//!
//! With the containerd image store, Docker 28 writes the image name into containerd's
//! container record; Docker 26 (checked with Debian's 26.1.5) leaves it empty and sets no
//! snapshot key, no label or annotation naming the image either: it mounts the rootfs
//! itself and passes its path. What
//! Docker does record is its own container config, `<data-root>/containers/<id>/
//! config.v2.json`, whose `ImageManifest` is the descriptor of the manifest the container
//! was created from. The spec points there: Docker bind-mounts `/etc/hostname` from
//! `<data-root>/containers/<id>/hostname`. This module reads that descriptor (a
//! content address: a tag moved since the container was created does not change what
//! it runs) so that a Spin OCI artifact runs under Docker 26 as under 28.
//!
//! The directory is only trusted when it is laid out as Docker lays it out (the mount
//! source is `.../containers/<id>/hostname` for this container's id), its config file is
//! a regular root-owned file (no link followed) under [`MAX_CONFIG_BYTES`], and the
//! config's `ID` is the container's. The descriptor still only reaches content of the
//! container's containerd namespace, checked by digest like any image's.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use libcontainer::oci_spec::runtime::Spec;
use spin_app_format::untrusted::{read_capped, shown};
use wasm_shim_core::confined::Dir;
use wasm_shim_core::content::{digest_hex, Descriptor};

/// Docker's container config file in its per-container directory.
pub const CONFIG_FILE: &str = "config.v2.json";
/// Largest Docker container config read (they are a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Docker's per-container directory of container `id`, from the spec's `/etc/hostname`
/// bind mount, if the container is Docker's.
pub fn container_dir(spec: &Spec, id: &str) -> Option<PathBuf> {
    let mounts = spec.mounts().as_ref()?;
    let m = mounts
        .iter()
        .find(|m| m.destination() == Path::new("/etc/hostname"))?;
    let source = m.source().as_ref()?;
    let dir = source.parent()?;
    let laid_out = source.file_name()? == "hostname"
        && dir.file_name()? == id
        && dir.parent()?.file_name()? == "containers";
    laid_out.then(|| dir.to_path_buf())
}

/// The image of container `id`, whose containerd record names none: what Docker recorded
/// in its per-container directory `dir` (from [`container_dir`]); without that directory,
/// an error naming the cause and the fix.
pub fn unnamed_image(dir: Option<PathBuf>, id: &str) -> anyhow::Result<(String, Descriptor)> {
    match dir {
        Some(dir) => recorded_image(&dir, id),
        None => bail!(
            "container {id}: command `/` without /spin.toml runs a Spin OCI artifact, but containerd's record of the container names no image and no client recorded one (Docker Engine 26 leaves the name out; its container config was not found beside the spec's /etc/hostname mount); fix: create the container with its image (`ctr run IMAGE`, a CRI pod, Docker 28 or later) or use a spin-in-container image (a rootfs with /spin.toml)"
        ),
    }
}

/// The image (a name for messages, and the descriptor of its manifest) Docker recorded
/// for container `id` in `dir` (see the module docs).
pub fn recorded_image(dir: &Path, id: &str) -> anyhow::Result<(String, Descriptor)> {
    let what = format!(
        "Docker's container config {}",
        dir.join(CONFIG_FILE).display()
    );
    let d = Dir::open(dir)?;
    let f = d.open_file(Path::new(CONFIG_FILE))?;
    let owner = f
        .metadata()
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))?;
    anyhow::ensure!(owner == 0, "{what} is owned by uid {owner}, not root");
    let bytes = read_capped(f, MAX_CONFIG_BYTES, &what)?;
    image_in_config(&bytes, id).with_context(|| what.clone())
}

/// The image a Docker container config (`config.v2.json`) records for container `id`.
fn image_in_config(bytes: &[u8], id: &str) -> anyhow::Result<(String, Descriptor)> {
    let config: serde_json::Value = serde_json::from_slice(bytes).context("not JSON")?;
    let recorded = config["ID"].as_str().unwrap_or_default();
    if recorded != id {
        bail!(
            "it is the config of container \"{}\", not {id}",
            shown(recorded)
        );
    }
    let m = &config["ImageManifest"];
    let (Some(digest), Some(media_type), Some(size)) = (
        m["digest"].as_str(),
        m["mediaType"].as_str(),
        m["size"].as_i64().filter(|s| *s >= 0),
    ) else {
        bail!(
            "it records no `ImageManifest` descriptor (digest, mediaType, size) for the image {}; this Docker Engine does not say which manifest the container runs: run the Spin app with Docker 28 or later, or as a spin-in-container image (a rootfs with /spin.toml)",
            shown(config["Config"]["Image"].as_str().unwrap_or_default())
        );
    };
    digest_hex(digest).context("its `ImageManifest` digest")?;
    let name = m["annotations"]["io.containerd.image.name"]
        .as_str()
        .or(config["Config"]["Image"].as_str())
        .unwrap_or(digest);
    Ok((
        format!("{} ({digest}, recorded by Docker)", shown(name)),
        Descriptor {
            media_type: media_type.to_string(),
            digest: digest.to_string(),
            size,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcontainer::oci_spec::runtime::{MountBuilder, SpecBuilder};

    const ID: &str = "86cf6f4b8253b257dc2a05e4f97569d3e182545dce548bffc316bb240160d7a7";
    const DIGEST: &str = "sha256:01c4281642b5f975ca3a7edf723746d64c6b9ee6507490c1f14cd936b3b35ac0";

    fn spec_with_hostname(source: &str) -> Spec {
        let m = MountBuilder::default()
            .destination("/etc/hostname")
            .typ("bind")
            .source(source)
            .build()
            .unwrap();
        SpecBuilder::default().mounts(vec![m]).build().unwrap()
    }

    #[test]
    fn the_directory_is_found_only_where_docker_lays_it_out() {
        let s = spec_with_hostname(&format!("/var/lib/docker/containers/{ID}/hostname"));
        assert_eq!(
            container_dir(&s, ID),
            Some(PathBuf::from(format!("/var/lib/docker/containers/{ID}")))
        );
        assert_eq!(container_dir(&s, "other"), None);
        let cri = spec_with_hostname(&format!(
            "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{ID}/hostname"
        ));
        assert_eq!(container_dir(&cri, ID), None);
        assert_eq!(container_dir(&Spec::default(), ID), None);
        let e = unnamed_image(None, ID).unwrap_err().to_string();
        assert!(e.contains("names no image") && e.contains("fix:"), "{e}");
    }

    #[test]
    fn docker_26_config_gives_the_manifest_descriptor() {
        // As Docker 26.1.5 (Debian trixie) writes it, trimmed.
        let config = serde_json::json!({
            "ID": ID,
            "Image": DIGEST,
            "Config": { "Image": "spin-hello:artifact" },
            "ImageManifest": {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": DIGEST,
                "size": 686,
                "annotations": { "io.containerd.image.name": "docker.io/library/spin-hello:artifact" }
            },
        });
        let (name, d) = image_in_config(config.to_string().as_bytes(), ID).unwrap();
        assert!(
            name.starts_with("docker.io/library/spin-hello:artifact"),
            "{name}"
        );
        assert_eq!(
            (d.digest.as_str(), d.size, d.media_type.as_str()),
            (DIGEST, 686, "application/vnd.oci.image.manifest.v1+json")
        );
        let e = format!(
            "{:#}",
            image_in_config(config.to_string().as_bytes(), "x").unwrap_err()
        );
        assert!(e.contains("not x"), "{e}");
        let mut old = config.clone();
        old.as_object_mut().unwrap().remove("ImageManifest");
        let e = format!(
            "{:#}",
            image_in_config(old.to_string().as_bytes(), ID).unwrap_err()
        );
        assert!(
            e.contains("ImageManifest") && e.contains("spin-hello:artifact"),
            "{e}"
        );
        let mut bad = config;
        bad["ImageManifest"]["digest"] = "sha256:../../x".into();
        assert!(image_in_config(bad.to_string().as_bytes(), ID).is_err());
    }
}
