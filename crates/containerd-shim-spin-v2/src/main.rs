//! `containerd-shim-spin-v2`: the containerd shim for runtime type `io.containerd.spin.v2`.
//! Everything lives in `containerd-shim-wasm`; this binary plugs in the Spin engine.

mod precompile;

use std::path::Path;

use containerd_shim_wasm::image::{blob_path, APP_DIR, DIGEST_FILE, LOCKED_FILE};
use spin_runtime::app::{Content, ContentRef};
use spin_runtime::App;

/// The artifact the shim materialised under `app_dir/.spin-app` (locked app, content by
/// digest), or None if there is none.
fn load_artifact(app_dir: &Path) -> anyhow::Result<Option<App>> {
    let artifact = app_dir.join(APP_DIR);
    let locked = artifact.join(LOCKED_FILE);
    if !locked.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(&locked)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", locked.display()))?;
    let resolve = |c: &ContentRef| -> anyhow::Result<Content> {
        match &c.digest {
            Some(d) => Ok(Content::Path(blob_path(&artifact, d)?)),
            None => anyhow::bail!(
                "content {:?} of the locked app has no digest (artifacts reference content by digest)",
                c.source
            ),
        }
    };
    let mut app = App::from_locked_json(&bytes, &resolve)?;
    app.oci_image_digest = std::fs::read_to_string(artifact.join(DIGEST_FILE))
        .ok()
        .map(|d| d.trim().to_string());
    Ok(Some(app))
}

/// Runs the Spin app in the container: the materialised artifact if present, else
/// `/spin.toml`.
fn run_spin(app_dir: &Path, env: &[(String, String)]) -> anyhow::Result<i32> {
    spin_runtime::init_tracing(env);
    match load_artifact(app_dir)? {
        Some(app) => spin_runtime::run_app(app, app_dir, env),
        None => spin_runtime::run_in_container(app_dir, env),
    }
}

fn main() {
    containerd_shim_wasm::cache::set_precompiler(precompile::precompile);
    containerd_shim_wasm::run_shim("io.containerd.spin.v2", Some(run_spin));
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_wasm::image::{single_component_lock, BLOBS_DIR};
    use sha2::Digest;

    #[test]
    fn single_layer_form_serves_the_component_at_root() {
        let d = tempfile::tempdir().unwrap();
        let wasm = b"\0asm\x0d\0\x01\0".to_vec();
        let hex = hex::encode(sha2::Sha256::digest(&wasm));
        let app = d.path().join(APP_DIR);
        std::fs::create_dir_all(app.join(BLOBS_DIR)).unwrap();
        std::fs::write(app.join(BLOBS_DIR).join(&hex), &wasm).unwrap();
        std::fs::write(app.join(DIGEST_FILE), "sha256:abc\n").unwrap();
        let digest = format!("sha256:{hex}");
        std::fs::write(
            app.join(LOCKED_FILE),
            single_component_lock("x:wasm", &digest),
        )
        .unwrap();
        let loaded = load_artifact(d.path()).unwrap().expect("artifact");
        assert_eq!(loaded.oci_image_digest.as_deref(), Some("sha256:abc"));
        let c = loaded.component("main").expect("component main");
        assert_eq!(c.source.read().unwrap().as_ref(), &wasm[..]);
        let t = &loaded.http_triggers;
        assert!(
            t.len() == 1
                && t[0].component == "main"
                && t[0].route == spin_runtime::app::Route::Path("/...".into()),
            "{t:?}"
        );
        // A lock naming content that is not materialised fails naming the digest.
        std::fs::remove_file(app.join(BLOBS_DIR).join(&hex)).unwrap();
        let e = format!("{:#}", load_artifact(d.path()).unwrap_err());
        assert!(e.contains(&digest), "{e}");
        // No artifact: the caller falls back to /spin.toml.
        assert!(load_artifact(&d.path().join("none")).unwrap().is_none());
    }
}
