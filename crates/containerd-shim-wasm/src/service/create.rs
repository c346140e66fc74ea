//! Create's work: the placement decision, the config.json rewrite, the rootfs mount, the
//! Spin preparation and the zygote request; plus resource updates and the runtime-options
//! decoding that feeds the placement.

use super::*;
use anyhow::Context as _;

impl Service {
    pub(super) async fn create_inner(
        &self,
        req: &api::CreateTaskRequest,
    ) -> anyhow::Result<Arc<Ctr>> {
        let bundle = PathBuf::from(&req.bundle);
        let systemd_opt = systemd_option(req.options.as_ref())?;
        let mut spec = libcontainer::oci_spec::runtime::Spec::load(bundle.join("config.json"))
            .map_err(|e| anyhow::anyhow!("reading {}/config.json: {e}", bundle.display()))?;
        let cgroups_path = spec
            .linux()
            .as_ref()
            .and_then(|l| l.cgroups_path().clone())
            .map(|p| p.to_string_lossy().into_owned());
        let placement = cgroup_placement::decide(
            cgroups_path.as_deref(),
            &req.id,
            systemd_opt,
            &self.inner.host,
        )?;
        rewrite_spec_cgroups(&mut spec, &placement, &self.inner.host);
        spec.save(bundle.join("config.json"))
            .map_err(|e| anyhow::anyhow!("writing {}/config.json: {e}", bundle.display()))?;

        let rootfs_mounted = if req.rootfs.is_empty() {
            None
        } else {
            let target = bundle.join("rootfs");
            state::mount_rootfs(&req.rootfs, &target)?;
            Some(target)
        };
        let mut persisted = Persisted {
            id: req.id.clone(),
            state_root: state::state_root(&bundle),
            placement,
            rootfs_mounted,
            pid: None,
        };
        let result = async {
            if persisted.state_root.join(LIBCONTAINER_ID).exists() {
                anyhow::bail!(
                    "stale state for {} at {}: run `ctr task delete {}` first",
                    req.id,
                    persisted.state_root.display(),
                    req.id
                );
            }
            std::fs::create_dir_all(&persisted.state_root)?;
            persisted.save(&bundle)?;
            self.prepare_spin(&req.id, &bundle, &persisted.state_root, &mut spec)
                .await?;
            let zreq = zygote::CreateRequest {
                bundle: bundle.clone(),
                state_root: persisted.state_root.clone(),
                systemd: persisted.placement.youki_systemd(),
                stdin: req.stdin.clone(),
                stdout: req.stdout.clone(),
                stderr: req.stderr.clone(),
            };
            let z = self.inner.zygote.clone();
            let pid = tokio::task::spawn_blocking(move || z.create(&zreq)).await??;
            persisted.placement.add_process(pid)?;
            persisted.pid = Some(pid);
            persisted.save(&bundle)?;
            Ok(pid)
        }
        .await;
        let pid = match result {
            Ok(pid) => pid,
            Err(e) => {
                state::kill_all(&persisted.placement);
                if let Err(ce) = state::cleanup(&persisted, &bundle) {
                    tracing::warn!(id = %req.id, "cleanup after failed create: {ce:#}");
                }
                return Err(e);
            }
        };
        let (tx, _) = watch::channel(None);
        let ctr = Arc::new(Ctr {
            id: req.id.clone(),
            bundle,
            pid,
            io: (req.stdin.clone(), req.stdout.clone(), req.stderr.clone()),
            persisted,
            phase: Mutex::new(Phase::Created),
            exit: tx,
            starting: tokio::sync::Mutex::new(()),
        });
        Ok(ctr)
    }
}

impl Service {
    /// For command `/`: materialises a Spin OCI artifact from containerd's content store
    /// (if the rootfs has no `/spin.toml`) into the shim-owned [`SPIN_APP_DIR`] under the
    /// container's state root, compiles the app's components into the node's cache, and
    /// gives the container read-only access to both (see [`crate::cache`]); saves the spec
    /// again. Other containers are left alone.
    async fn prepare_spin(
        &self,
        id: &str,
        bundle: &std::path::Path,
        state_root: &std::path::Path,
        spec: &mut libcontainer::oci_spec::runtime::Spec,
    ) -> anyhow::Result<()> {
        let args = spec
            .process()
            .as_ref()
            .and_then(|p| p.args().clone())
            .unwrap_or_default();
        if args.len() != 1 || args[0] != "/" {
            return Ok(());
        }
        let root = spec
            .root()
            .as_ref()
            .map(|r| r.path().clone())
            .unwrap_or_else(|| PathBuf::from("rootfs"));
        let rootfs = bundle.join(root);
        let rootfs_dir = crate::confined::Dir::open(&rootfs)?;
        if rootfs_dir.exists_in_root(Path::new(crate::image::APP_DIR))? {
            anyhow::bail!(
                "container {id}: the image has /{}, a path the shim reserves for the Spin app it mounts read-only; remove it from the image",
                crate::image::APP_DIR
            );
        }
        let app_dir = state_root.join(SPIN_APP_DIR);
        let mut source = None;
        if crate::image::wants_artifact(&args, &rootfs_dir) {
            let address = crate::image::CONTAINERD_ADDRESS
                .get()
                .cloned()
                .unwrap_or_default();
            anyhow::ensure!(
                !address.is_empty(),
                "container {id}: command `/` without /spin.toml needs the image from containerd, but the shim got no -address"
            );
            match crate::image::materialise(&address, &self.inner.namespace, id, &app_dir).await? {
                Some(m) => {
                    tracing::info!(
                        id,
                        image = %m.image,
                        manifest = %m.manifest_digest,
                        "Spin artifact materialised from the content store"
                    );
                    source = Some(crate::cache::AppSource::Locked {
                        lock: m.locked,
                        app_dir: app_dir.clone(),
                    });
                }
                None => tracing::debug!(id, "image is not a Wasm artifact"),
            }
        } else {
            source = Some(crate::cache::AppSource::Manifest {
                rootfs: rootfs.clone(),
            });
        }
        let entries = match source {
            Some(s) => crate::cache::precompile(s)
                .await
                .with_context(|| format!("container {id}: compiling the Spin app"))?,
            None => Vec::new(),
        };
        crate::cache::attach(spec, &app_dir, &entries)?;
        tracing::debug!(id, entries = entries.len(), "compiled components attached");
        spec.save(bundle.join("config.json"))
            .map_err(|e| anyhow::anyhow!("writing {}/config.json: {e}", bundle.display()))
    }
}

/// The shim-owned directory (under a container's state root) holding its Spin app and
/// the mount points of its compiled components.
pub const SPIN_APP_DIR: &str = "spin-app";

/// Puts the placement's path into the spec youki reads, and drops resource settings
/// whose controller the host lacks (logged).
fn rewrite_spec_cgroups(
    spec: &mut libcontainer::oci_spec::runtime::Spec,
    placement: &Placement,
    host: &Host,
) {
    let mut linux = spec.linux().clone().unwrap_or_default();
    linux.set_cgroups_path(Some(PathBuf::from(placement.youki_cgroups_path())));
    if let Some(mut res) = linux.resources().clone() {
        // filter_resources logs each setting it drops.
        cgroup_placement::filter_resources(host, &mut res);
        linux.set_resources(Some(res));
    }
    spec.set_linux(Some(linux));
}

/// Applies new resource settings to the container's cgroup through youki's cgroup manager
/// for the placement's path and driver.
pub fn apply_resources(
    placement: &Placement,
    res: &libcontainer::oci_spec::runtime::LinuxResources,
) -> anyhow::Result<()> {
    use libcgroups::common::CgroupManager;
    let mgr = libcgroups::common::create_cgroup_manager(libcgroups::common::CgroupConfig {
        cgroup_path: PathBuf::from(placement.youki_cgroups_path()),
        systemd_cgroup: placement.youki_systemd(),
        container_name: LIBCONTAINER_ID.to_string(),
    })?;
    mgr.apply(&libcgroups::common::ControllerOpt {
        resources: res,
        disable_oom_killer: false,
        oom_score_adj: None,
        freezer_state: None,
    })?;
    Ok(())
}

/// Reads `SystemdCgroup` from the runtime options containerd passes (runc-style
/// `containerd.runc.v1.Options`, or CRI's `runtimeoptions.v1.Options` with a TOML body).
pub fn systemd_option(options: Option<&Any>) -> anyhow::Result<Option<bool>> {
    let Some(any) = options else { return Ok(None) };
    if any.type_url.ends_with("runtimeoptions.v1.Options") {
        let body = runtimeoptions_config_body(&any.value)?;
        return Ok(cgroup_placement::systemd_cgroup_option(&body)?);
    }
    if any.type_url.ends_with("runc.v1.Options") {
        let o = containerd_shim::protos::shim::oci::Options::parse_from_bytes(&any.value)?;
        return Ok(Some(o.systemd_cgroup));
    }
    Ok(None)
}

/// Field 3 (`config_body`) of CRI's `runtimeoptions.v1.Options`.
fn runtimeoptions_config_body(bytes: &[u8]) -> anyhow::Result<String> {
    use containerd_shim::protos::protobuf::CodedInputStream;
    let mut is = CodedInputStream::from_bytes(bytes);
    let mut body = String::new();
    while let Some(tag) = is.read_raw_tag_or_eof()? {
        if tag >> 3 == 3 && tag & 7 == 2 {
            body = is.read_string()?;
        } else {
            is.skip_field(
                containerd_shim::protos::protobuf::rt::WireType::new(tag & 7).ok_or_else(|| {
                    anyhow::anyhow!("runtime options: bad wire type in tag {tag}")
                })?,
            )?;
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cgroup_placement::Host;
    use containerd_shim::protos::protobuf::Message;

    /// Removes the test's cgroup and the parent it created, also on failure.
    struct CgroupGuard(Placement, String);
    impl Drop for CgroupGuard {
        fn drop(&mut self) {
            let _ = self.0.remove();
            for (_, d) in self.0.v1_dirs() {
                let root = d.ancestors().nth(1).map(Path::to_path_buf);
                if let Some(p) = root.filter(|p| p.ends_with(&self.1)) {
                    let _ = std::fs::remove_dir(p);
                }
            }
            if let Some(p) = self
                .0
                .unified_dir()
                .and_then(|d| d.parent().map(Path::to_path_buf))
            {
                if p.ends_with(&self.1) {
                    let _ = std::fs::remove_dir(p);
                }
            }
        }
    }

    #[test]
    fn update_applies_memory_limit_to_the_container_cgroup() {
        let host = Host::detect().unwrap();
        if host
            .v1_hierarchies()
            .iter()
            .all(|(c, _)| !c.split(',').any(|c| c == "memory"))
        {
            eprintln!("skipped: no cgroup v1 memory hierarchy on this host");
            return;
        }
        let parent = format!("spin-shim-test-{}", std::process::id());
        let path = format!("/{parent}/c1");
        let placement = cgroup_placement::decide(Some(&path), "c1", None, &host).unwrap();
        let _guard = CgroupGuard(placement.clone(), parent);
        placement.create().unwrap();
        let res: libcontainer::oci_spec::runtime::LinuxResources =
            serde_json::from_str(r#"{"memory":{"limit":33554432}}"#).unwrap();
        apply_resources(&placement, &res).unwrap();
        let (_, mem) = placement
            .v1_dirs()
            .into_iter()
            .find(|(c, _)| c == "memory")
            .unwrap();
        let limit = std::fs::read_to_string(mem.join("memory.limit_in_bytes")).unwrap();
        assert_eq!(limit.trim(), "33554432");
    }

    #[test]
    fn reads_runtimeoptions_body() {
        // runtimeoptions.v1.Options { type_url = "x" (1), config_body = "SystemdCgroup = true" (3) }
        let body = b"SystemdCgroup = true";
        let mut bytes = vec![0x0a, 1, b'x', 0x1a, body.len() as u8];
        bytes.extend_from_slice(body);
        assert_eq!(
            runtimeoptions_config_body(&bytes).unwrap(),
            "SystemdCgroup = true"
        );
        assert!(runtimeoptions_config_body(&[0x1a, 10, b'a']).is_err());
    }

    #[test]
    fn runc_options_systemd_flag() {
        let o = containerd_shim::protos::shim::oci::Options {
            systemd_cgroup: true,
            ..Default::default()
        };
        let any = Any {
            type_url: "containerd.runc.v1.Options".into(),
            value: o.write_to_bytes().unwrap(),
            ..Default::default()
        };
        assert_eq!(systemd_option(Some(&any)).unwrap(), Some(true));
        assert_eq!(systemd_option(None).unwrap(), None);
    }
}
