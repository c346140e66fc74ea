//! The Spin engine of the shim ([`SpinEngine`]), everything Spin-specific on the shim side:
//! - [`artifact`]: Spin OCI artifacts (locked-app, archive and `application/wasm` layers)
//!   materialised from containerd's content store into a shim-owned directory the
//!   container sees read-only at `/`[`artifact::APP_DIR`], its layers unpacked by a helper
//!   ([`unpack`]);
//! - [`precompile`], [`compile_helper`] and [`cache_mount`]: components compiled in
//!   unprivileged helpers held by the container's cgroup limits, into the node's root-only
//!   cache, each container given read-only access to its own entries;
//! - [`docker`]: which image a container runs when containerd's record names none (Docker
//!   Engine 26 leaves it out; its own container config says);
//! - [`rootfs`]: lookups in a container's rootfs that never follow its links out of it;
//! - running the app (the artifact's lock, else `/spin.toml`) on `spin-runtime`.
//!
//! A container is Spin's when its command is `/` and its rootfs holds `/spin.toml` or the
//! image is a Spin OCI artifact (config architecture `wasm`).

#![warn(missing_docs)]

pub mod artifact;
pub mod cache_mount;
pub mod compile_helper;
pub mod docker;
pub mod precompile;
pub mod rootfs;
pub mod unpack;
pub mod url_sources;

use std::path::{Path, PathBuf};

use anyhow::Context;
use async_trait::async_trait;
use spin_runtime::app::ContentRef;
use spin_runtime::engine::tier::TieringConfig;
use spin_runtime::App;
use wasm_shim_core::confine::Confinement;
use wasm_shim_core::confined::Dir;
use wasm_shim_core::engine::{Engine, Entrypoint, Prepare};

use cache_mount::AppSource;

pub use spin_runtime::quiet_library_backtraces;

use artifact::{APP_DIR, DIGEST_FILE, LOCKED_FILE};

/// The shim-owned directory (under a container's state root) holding its Spin app and
/// the mount points of its compiled components.
pub const SPIN_APP_DIR: &str = "spin-app";

/// The engine name: runtime `io.containerd.spin.v2`.
pub const NAME: &str = "spin";

/// Runs Spin apps (see the crate docs).
pub struct SpinEngine;

#[async_trait]
impl Engine for SpinEngine {
    fn name(&self) -> &'static str {
        NAME
    }

    fn layer_media_types(&self) -> &'static [&'static str] {
        &[
            artifact::MEDIA_TYPE_LOCKED_APP,
            artifact::MEDIA_TYPE_ARCHIVE_LAYER,
            artifact::MEDIA_TYPE_WASM,
        ]
    }

    fn can_handle(&self, entry: &Entrypoint) -> Result<bool, String> {
        if entry.args.first().map(String::as_str) != Some("/") {
            return Ok(false);
        }
        let root = entry.root;
        let found = |rel: &Path| -> Result<bool, String> {
            let dir = Dir::open(root).map_err(|e| format!("{e:#}"))?;
            rootfs::is_regular_file(&dir, rel).map_err(|e| format!("{e:#}"))
        };
        if found(Path::new("spin.toml"))? || found(&Path::new(APP_DIR).join(LOCKED_FILE))? {
            return Ok(true);
        }
        Err(format!(
            "entrypoint `/` needs a Spin manifest at /spin.toml in the container image or a Spin OCI artifact image (config architecture `wasm`), found neither under {}",
            root.display()
        ))
    }

    /// For command `/` (then a command trigger's arguments, if any): materialises a Spin
    /// OCI artifact from containerd's content store (if the rootfs has no `/spin.toml`) into
    /// [`SPIN_APP_DIR`] under the container's state root, compiles the app's components into
    /// the node's cache in helpers placed in the container's cgroups
    /// ([`compile_helper`]), and gives the container read-only access to both (see
    /// [`cache_mount`]). Other containers are left alone.
    async fn prepare(&self, p: &mut Prepare<'_>) -> anyhow::Result<()> {
        let args = p.args();
        if args.first().map(String::as_str) != Some("/") {
            return Ok(());
        }
        let id = p.id;
        let rootfs = Dir::open(p.rootfs)?;
        rootfs::check_app_mount_point(&rootfs, id)?;
        let app_dir = p.state_root.join(SPIN_APP_DIR);
        let memory_limit = wasm_shim_core::executor::spec_memory_limit(p.spec);
        let cache_dir = cache_mount::host_dir();
        let sandbox =
            compile_helper::Sandbox::for_container(&cache_dir, p.placement, memory_limit)?;
        let mut source = None;
        if artifact::wants_artifact(&args, &rootfs) {
            anyhow::ensure!(
                !p.containerd_address.is_empty(),
                "container {id}: command `/` without /spin.toml needs the image from containerd, but the shim got no -address"
            );
            let docker_dir = docker::container_dir(p.spec, id);
            let unnamed = || docker::unnamed_image(docker_dir, id);
            match artifact::materialise(
                p.containerd_address,
                p.namespace,
                id,
                &app_dir,
                &sandbox,
                unnamed,
            )
            .await?
            {
                Some(m) => {
                    tracing::info!(
                        id,
                        image = %m.image,
                        manifest = %m.manifest_digest,
                        "Spin artifact materialised from the content store"
                    );
                    source = Some(AppSource::Locked {
                        lock: m.locked,
                        app_dir: app_dir.clone(),
                    });
                }
                None => tracing::debug!(id, "image is not a Wasm artifact"),
            }
        } else {
            source =
                Some(AppSource::manifest(p.rootfs).with_context(|| format!("container {id}"))?);
        }
        let downloads = url_sources::download(id, source.as_ref()).await?;
        let compiled = match source {
            Some(s) => precompile::compile_app(s, cache_dir, tiering(p.spec)?, sandbox.clone())
                .await
                .with_context(|| format!("container {id}: compiling the Spin app"))?,
            None => Default::default(),
        };
        cache_mount::attach(p.spec, &app_dir, &compiled.entries)?;
        url_sources::attach(p.spec, &app_dir, &downloads)?;
        tracing::debug!(
            id,
            entries = compiled.entries.len(),
            "compiled components attached"
        );
        precompile::compile_later(id, compiled.later, sandbox.background(p.placement));
        Ok(())
    }

    /// Runs the app; the Spin runtime installs its own SIGTERM/SIGINT handling (graceful
    /// drain, exit 0). The arguments after `/` go to a command trigger, whose exit code is
    /// the container's.
    fn run(&self, entry: &Entrypoint) -> i32 {
        match run_spin(
            entry.root,
            entry.env,
            entry.args.get(1..).unwrap_or_default(),
            entry.memory_limit,
        ) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("Error: {e:#}");
                wasm_shim_core::executor::report_start_failure(&format!("Spin app: {e:#}"));
                1
            }
        }
    }
}

/// When a component starts on baseline code: [`spin_runtime::engine::tier::TIERING_ENV`] and
/// [`spin_runtime::engine::tier::MIN_BYTES_ENV`] each from the container's environment where it sets
/// them, else the shim's ([`spin_shim_settings::container::precompile_tiering`]).
fn tiering(spec: &libcontainer::oci_spec::runtime::Spec) -> anyhow::Result<TieringConfig> {
    let env: Vec<(String, String)> = spec
        .process()
        .as_ref()
        .and_then(|p| p.env().clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let shim = spin_shim_settings::shim::ShimSettings::init()?;
    let tiering = spin_shim_settings::container::precompile_tiering(&env, shim)?;
    Ok(TieringConfig::from_settings(tiering))
}

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
    let resolve = |c: &ContentRef| artifact::content(&artifact, c);
    let mut app = App::from_locked_json(&bytes, &resolve)?;
    app.oci_image_digest = std::fs::read_to_string(artifact.join(DIGEST_FILE))
        .ok()
        .map(|d| d.trim().to_string());
    Ok(Some(app))
}

/// Runs the Spin app in the container: the materialised artifact if present, else
/// `/spin.toml`; `args` go to a command trigger; `memory_limit`: the spec's. The runtime
/// process confines itself ([`wasm_shim_core::confine`]) before the app is loaded.
fn run_spin(
    app_dir: &Path,
    env: &[(String, String)],
    args: &[String],
    memory_limit: Option<u64>,
) -> anyhow::Result<i32> {
    url_sources::use_in_container(app_dir)?;
    let app = match load_artifact(app_dir)? {
        Some(app) => app,
        None => spin_runtime::App::load_manifest(&app_dir.join(spin_runtime::MANIFEST_FILE))?,
    };
    let confinement = ProcessConfinement(Confinement::for_this_process());
    spin_runtime::Runner::new(app)
        .dir(app_dir)
        .env(env)
        .args(args)
        .in_container(spin_runtime::InContainer {
            spec_memory_limit: memory_limit,
            confinement: std::sync::Arc::new(confinement),
        })
        .run()
}

/// The shim's confinement of a container's runtime process, as the Spin runtime uses it.
#[derive(Debug)]
struct ProcessConfinement(Confinement);

impl spin_runtime::Confinement for ProcessConfinement {
    fn confine(&self) -> anyhow::Result<()> {
        let applied = self.0.apply()?;
        match applied.landlock {
            Some((abi, rules)) => tracing::info!(
                landlock_abi = abi,
                rules,
                denied_syscalls = applied.denied_syscalls,
                "runtime confined: Landlock, no capabilities, no_new_privs, seccomp"
            ),
            None => tracing::info!(
                denied_syscalls = applied.denied_syscalls,
                "runtime confined without Landlock: no capabilities, no_new_privs, seccomp"
            ),
        }
        Ok(())
    }

    fn files_view(&self, source: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
        self.0.check_source(source)?;
        let resolved = std::fs::canonicalize(source)?;
        // Preopened per instance, after confinement.
        Ok(self.0.guest_dirs(&resolved, false))
    }

    fn check_file(&self, path: &Path) -> anyhow::Result<()> {
        self.0.check_source(path)
    }

    fn serving(&self) {
        self.0.release_startup_memory();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use artifact::{single_component_lock, BLOBS_DIR};
    use sha2::Digest;

    #[test]
    fn claims_command_root_with_a_manifest() {
        let d = tempfile::tempdir().unwrap();
        let (args, env) = (vec!["/".to_string()], Vec::new());
        let entry = Entrypoint {
            args: &args,
            env: &env,
            cwd: Path::new("/"),
            root: d.path(),
            memory_limit: None,
        };
        let e = SpinEngine.can_handle(&entry).unwrap_err();
        assert!(e.contains("spin.toml"), "{e}");
        std::fs::write(d.path().join("spin.toml"), b"spin_manifest_version = 2").unwrap();
        assert_eq!(SpinEngine.can_handle(&entry), Ok(true));
        let other = vec!["/app.wasm".to_string()];
        let entry = Entrypoint {
            args: &other,
            ..entry
        };
        assert_eq!(SpinEngine.can_handle(&entry), Ok(false));
    }

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
