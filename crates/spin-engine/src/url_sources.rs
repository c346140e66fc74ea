//! Component sources by URL (`source = { url, digest }` in `/spin.toml`) on the node: the
//! shim downloads them at Create into the node's download cache, beside the compile cache
//! (default `/var/lib/containerd-shim-spin-v2/url-sources`, override [`DIR_ENV`]), once per
//! node: every later container naming the same digest reads the cached file. Download,
//! digest check, size cap, proxy and CA rules are [`spin_app_format::remote`]'s.
//!
//! The container sees each of its downloads read-only at [`CONTAINER_DIR`]`/<hex digest>`
//! (nothing else of the cache), and its runtime reads them from there only
//! ([`use_in_container`]): it never downloads. The shim compiles them as any other source
//! ([`crate::precompile`]), keyed by the digest it verified.

use std::path::{Path, PathBuf};

use anyhow::Context;
use libcontainer::oci_spec::runtime::Spec;
use spin_app_format::remote::{Policy, RemoteSource};
use wasm_shim_core::confined::Dir;

use crate::cache_mount::{read_only_bind, AppSource, APP_MOUNT};

/// Env var (shim's environment): the node's download cache directory.
pub const DIR_ENV: &str = spin_shim_settings::shim::SOURCE_CACHE_DIR;
/// The directory of a container's downloads in its app directory.
const DIR_NAME: &str = "url-sources";
/// Where a container sees its downloaded sources (read-only, by hex digest).
pub const CONTAINER_DIR: &str = "/.spin-app/url-sources";

/// One downloaded source: its hex digest and its file in the node cache.
pub type Download = (String, PathBuf);

/// The node's download cache of the shim's settings: [`DIR_ENV`], else `url-sources` beside
/// the compile cache.
pub fn host_dir() -> PathBuf {
    spin_shim_settings::shim::ShimSettings::get()
        .source_cache_dir
        .clone()
}

/// The URL sources of a `/spin.toml` app `source` (read confined to the rootfs), each
/// downloaded into the node cache unless it is there already (an artifact has none: `spin
/// registry push` made them layers). The downloads run off the async workers. Errors name
/// the container, the component, the URL and the fix; a failed download leaves no file
/// behind.
pub async fn download(id: &str, source: Option<&AppSource>) -> anyhow::Result<Vec<Download>> {
    let Some(AppSource::Manifest { lock, .. }) = source else {
        return Ok(Vec::new());
    };
    let sources: Vec<RemoteSource> = lock
        .components
        .iter()
        .filter_map(|c| {
            let content = &c.source.content;
            match (&content.source, &content.digest) {
                (Some(url), Some(digest)) if content.file_path().is_none() => Some(RemoteSource {
                    id: c.id.clone(),
                    url: url.clone(),
                    digest: digest.clone(),
                }),
                _ => None,
            }
        })
        .collect();
    if sources.is_empty() {
        return Ok(Vec::new());
    }
    let dir = host_dir();
    let id = id.to_string();
    tokio::task::spawn_blocking(move || fetch_all(&id, &sources, &dir))
        .await
        .context("download task failed")?
}

fn fetch_all(id: &str, sources: &[RemoteSource], dir: &Path) -> anyhow::Result<Vec<Download>> {
    let mut out: Vec<Download> = Vec::new();
    for s in sources {
        let what = format!(
            "container {id}: /spin.toml: component `{}`",
            spin_app_format::untrusted::shown(&s.id)
        );
        let hex = s.check(&what)?.to_string();
        if out.iter().any(|(h, _)| *h == hex) {
            continue;
        }
        let path = s.fetch(dir, &what)?;
        tracing::info!(
            id,
            component = %spin_app_format::untrusted::shown(&s.id),
            digest = %s.digest,
            "URL source ready in the node cache"
        );
        out.push((hex, path));
    }
    Ok(out)
}

/// Gives the container read-only access to exactly `downloads`, at
/// [`CONTAINER_DIR`]`/<hex>` below its app directory `app_dir` (mount points created
/// there). Call after [`crate::cache_mount::attach`], which resets the app's mounts.
pub fn attach(spec: &mut Spec, app_dir: &Path, downloads: &[Download]) -> anyhow::Result<()> {
    if downloads.is_empty() {
        return Ok(());
    }
    let dir = Dir::create(app_dir)?.create_dir_all(Path::new(DIR_NAME))?;
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    for (hex, host) in downloads {
        if !dir.contains(hex) {
            dir.create_file(hex, 0o444)?;
        }
        mounts.push(read_only_bind(host, &format!("{CONTAINER_DIR}/{hex}"))?);
    }
    spec.set_mounts(Some(mounts));
    Ok(())
}

/// In the container (root `root`): URL sources resolve to what the shim placed at
/// [`CONTAINER_DIR`], never to a download.
pub fn use_in_container(root: &Path) -> anyhow::Result<()> {
    let rel = CONTAINER_DIR.trim_start_matches('/');
    debug_assert!(CONTAINER_DIR.starts_with(APP_MOUNT));
    spin_app_format::remote::set_policy(Policy::Provided(root.join(rel)))
}
