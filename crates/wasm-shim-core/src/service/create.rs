//! Create's work: config.json loaded once, the placement decision (cgroup-placement, from
//! the spec and the runtime options), the rootfs mount, the container's cgroups with their
//! limits, the engines' preparation (whose helpers run in those cgroups), one save of the
//! rewritten config.json, and the zygote request.

use super::*;

impl Machine {
    /// [`Backend::create`] on this machine: the container's init pid and its record.
    pub(super) async fn create_container(
        &self,
        req: &api::CreateTaskRequest,
    ) -> anyhow::Result<(i32, Persisted)> {
        let bundle = PathBuf::from(&req.bundle);
        let systemd_opt = cgroup_placement::systemd_option(req.options.as_ref())?;
        let mut spec = libcontainer::oci_spec::runtime::Spec::load(bundle.join("config.json"))
            .map_err(|e| {
                ShimError::InvalidArgument(format!("reading {}/config.json: {e}", bundle.display()))
            })?;
        let cgroups_path = spec
            .linux()
            .as_ref()
            .and_then(|l| l.cgroups_path().clone())
            .map(|p| p.to_string_lossy().into_owned());
        let mut placement =
            cgroup_placement::decide(cgroups_path.as_deref(), &req.id, systemd_opt, &self.host)?;
        placement.claim()?;
        placement.rewrite_spec(&mut spec, &self.host);
        let device_filter = device_filter_check(&self.host, &mut spec);
        let device_rules = spec
            .linux()
            .as_ref()
            .and_then(|l| l.resources().as_ref())
            .and_then(|r| r.devices().clone())
            .unwrap_or_default();
        let sandbox = crate::executor::is_pod_sandbox(&spec);

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
                return Err(ShimError::FailedPrecondition(format!(
                    "stale state for {} at {}: run `ctr task delete {}` first",
                    req.id,
                    persisted.state_root.display(),
                    req.id
                ))
                .into());
            }
            std::fs::create_dir_all(&persisted.state_root)?;
            persisted.save(&bundle)?;
            // The container's directories in every hierarchy exist, with its memory, CPU and
            // pids limits, before an engine reads the image: engines run their work on
            // untrusted content (compiling) in helpers placed there, held by the pod's
            // limits. They also exist before the container's init mounts them (the spec's
            // cgroup mount binds them on v1 hosts).
            let resources = spec.linux().as_ref().and_then(|l| l.resources().clone());
            persisted
                .placement
                .create_with_limits(&self.host, resources.as_ref())?;
            self.prepare_engines(
                &req.id,
                &bundle,
                &persisted.state_root,
                &persisted.placement,
                &mut spec,
            )
            .await?;
            // The one write of config.json per Create: placement and engines' changes.
            spec.save(bundle.join("config.json"))
                .map_err(|e| anyhow::anyhow!("writing {}/config.json: {e}", bundle.display()))?;
            let zreq = zygote::CreateRequest {
                bundle: bundle.clone(),
                state_root: persisted.state_root.clone(),
                systemd: persisted.placement.youki_systemd(),
                stdin: req.stdin.clone(),
                stdout: req.stdout.clone(),
                stderr: req.stderr.clone(),
            };
            let z = self.zygote.clone();
            let pid = tokio::task::spawn_blocking(move || z.create(&zreq)).await??;
            persisted.placement.add_process(pid)?;
            // The container's process waits for Start: the filter is in place before
            // anything of the image runs.
            if device_filter {
                match persisted.placement.apply_device_filter(&device_rules) {
                    Ok(_) => {}
                    Err(e) if sandbox => tracing::warn!(
                        id = %req.id,
                        "pod sandbox runs without a device filter: {e:#}"
                    ),
                    Err(e) => {
                        return Err(ShimError::FailedPrecondition(format!(
                            "cannot enforce the container's device rules on cgroup v2: {e:#}"
                        ))
                        .into())
                    }
                }
            }
            persisted.pid = Some(pid);
            persisted.save(&bundle)?;
            Ok(pid)
        }
        .await;
        let pid = match result {
            Ok(pid) => pid,
            Err(e) => {
                persisted.placement.kill_all();
                if let Err(ce) = state::cleanup(&persisted, &bundle) {
                    tracing::warn!(id = %req.id, "cleanup after failed create: {ce:#}");
                }
                return Err(e);
            }
        };
        Ok((pid, persisted))
    }
}

impl Machine {
    /// Lets every engine prepare the container ([`crate::engine::Engine::prepare`]).
    async fn prepare_engines(
        &self,
        id: &str,
        bundle: &Path,
        state_root: &Path,
        placement: &cgroup_placement::Placement,
        spec: &mut libcontainer::oci_spec::runtime::Spec,
    ) -> anyhow::Result<()> {
        let root = spec
            .root()
            .as_ref()
            .map(|r| r.path().clone())
            .unwrap_or_else(|| PathBuf::from("rootfs"));
        let rootfs = bundle.join(root);
        let address = crate::content::CONTAINERD_ADDRESS
            .get()
            .cloned()
            .unwrap_or_default();
        for engine in crate::engines() {
            let mut p = crate::engine::Prepare {
                id,
                namespace: &self.namespace,
                bundle,
                rootfs: &rootfs,
                state_root,
                placement,
                spec: &mut *spec,
                containerd_address: &address,
            };
            engine.prepare(&mut p).await?;
        }
        Ok(())
    }
}

/// On unified hosts, whether the device filter can be attached (the kernel accepted a
/// device program once in this shim process); when it cannot, marks `spec` so that the
/// executor refuses native containers other than the pod sandbox
/// ([`crate::executor::DEVICE_FILTER_UNAVAILABLE`]). Any value of that annotation a client
/// sent is dropped. False on legacy and hybrid hosts (the v1 devices controller applies).
fn device_filter_check(
    host: &cgroup_placement::Host,
    spec: &mut libcontainer::oci_spec::runtime::Spec,
) -> bool {
    use crate::executor::DEVICE_FILTER_UNAVAILABLE;
    static SUPPORT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let mut annotations = spec.annotations().clone().unwrap_or_default();
    annotations.remove(DEVICE_FILTER_UNAVAILABLE);
    let ok = if host.layout() == cgroup_placement::CgroupLayout::Unified {
        match SUPPORT.get_or_init(cgroup_placement::device_filter_support) {
            Ok(()) => true,
            Err(reason) => {
                tracing::warn!("cgroup v2 device rules cannot be enforced here: {reason}");
                annotations.insert(DEVICE_FILTER_UNAVAILABLE.to_string(), reason.clone());
                false
            }
        }
    } else {
        false
    };
    spec.set_annotations((!annotations.is_empty()).then_some(annotations));
    ok
}
