//! Create's work: config.json loaded once, the placement decision (cgroup-placement, from
//! the spec and the runtime options), the rootfs mount, the engines' preparation, one save
//! of the rewritten config.json, and the zygote request.

use super::*;

impl Service {
    pub(super) async fn create_inner(
        &self,
        req: &api::CreateTaskRequest,
    ) -> anyhow::Result<Arc<Ctr>> {
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
        let mut placement = cgroup_placement::decide(
            cgroups_path.as_deref(),
            &req.id,
            systemd_opt,
            &self.inner.host,
        )?;
        placement.claim()?;
        placement.rewrite_spec(&mut spec, &self.inner.host);

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
            self.prepare_engines(&req.id, &bundle, &persisted.state_root, &mut spec)
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
                persisted.placement.kill_all();
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
    /// Lets every engine prepare the container ([`crate::engine::Engine::prepare`]).
    async fn prepare_engines(
        &self,
        id: &str,
        bundle: &Path,
        state_root: &Path,
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
                namespace: &self.inner.namespace,
                bundle,
                rootfs: &rootfs,
                state_root,
                spec: &mut *spec,
                containerd_address: &address,
            };
            engine.prepare(&mut p).await?;
        }
        Ok(())
    }
}
