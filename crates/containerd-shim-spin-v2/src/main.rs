//! `containerd-shim-spin-v2`: the containerd shim for runtime type `io.containerd.spin.v2`.
//! Everything lives in `containerd-shim-wasm`; this binary plugs in the Spin engine.

use std::path::Path;

use containerd_shim_wasm::image::{blob_path, APP_DIR, DIGEST_FILE, LOCKED_FILE};
use spin_runtime::app::{Content, ContentRef};

/// Runs the Spin app in the container: the artifact the shim materialised under
/// `/.spin-app` (locked app, content by digest) if present, else `/spin.toml`.
fn run_spin(app_dir: &Path, env: &[(String, String)]) -> anyhow::Result<i32> {
    let artifact = app_dir.join(APP_DIR);
    let locked = artifact.join(LOCKED_FILE);
    if !locked.is_file() {
        return spin_runtime::run_in_container(app_dir, env);
    }
    spin_runtime::init_tracing(env);
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
    let mut app = spin_runtime::App::from_locked_json(&bytes, &resolve)?;
    app.oci_image_digest = std::fs::read_to_string(artifact.join(DIGEST_FILE))
        .ok()
        .map(|d| d.trim().to_string());
    spin_runtime::run_app(app, app_dir, env)
}

fn main() {
    containerd_shim_wasm::run_shim("io.containerd.spin.v2", Some(run_spin));
}
