//! The containerd Task service: one shim serves every container of a pod.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use async_trait::async_trait;
use cgroup_placement::{Host, Placement};
use containerd_shim::asynchronous::monitor::monitor_subscribe;
use containerd_shim::asynchronous::ExitSignal;
use containerd_shim::monitor::{Subject, Topic};
use containerd_shim::protos::api;
use containerd_shim::protos::events::task::{
    TaskCreate, TaskDelete, TaskExit, TaskIO, TaskOOM, TaskPaused, TaskResumed, TaskStart,
};
use containerd_shim::protos::protobuf::well_known_types::any::Any;
use containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim::protos::protobuf::{Message, MessageDyn, MessageField};
use containerd_shim::protos::shim_async::Task;
use containerd_shim::protos::topics;
use containerd_shim::protos::ttrpc::{self, r#async::TtrpcContext};
use containerd_shim::publisher::RemotePublisher;
use containerd_shim::TtrpcResult;
use tokio::sync::watch;

use crate::state::{self, Persisted};
use crate::zygote::{self, LIBCONTAINER_ID};

/// Runtime name used in error messages.
pub const RUNTIME: &str = "io.containerd.spin.v2";

fn status(code: ttrpc::Code, msg: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg.into()))
}
fn not_found(id: &str) -> ttrpc::Error {
    status(ttrpc::Code::NOT_FOUND, format!("task {id} not found"))
}
fn internal(e: impl std::fmt::Display) -> ttrpc::Error {
    status(ttrpc::Code::INTERNAL, e.to_string())
}
fn unsupported(what: &str) -> ttrpc::Error {
    status(
        ttrpc::Code::UNIMPLEMENTED,
        format!("{what} is not supported by {RUNTIME}"),
    )
}

/// Lifecycle of a task as containerd sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Created,
    Running,
    Paused,
    Stopped,
}

#[derive(Debug, Clone)]
struct Exit {
    code: u32,
    at: Timestamp,
}

struct Ctr {
    id: String,
    bundle: PathBuf,
    pid: i32,
    io: (String, String, String),
    persisted: Persisted,
    phase: Mutex<Phase>,
    exit: watch::Sender<Option<Exit>>,
    /// Held while starting, so TaskExit is never published before TaskStart.
    starting: tokio::sync::Mutex<()>,
}

impl Ctr {
    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap()
    }
    fn set_phase(&self, p: Phase) {
        *self.phase.lock().unwrap() = p;
    }
    fn exit(&self) -> Option<Exit> {
        self.exit.borrow().clone()
    }
}

struct Inner {
    namespace: String,
    containers: Mutex<HashMap<String, Arc<Ctr>>>,
    /// Exits of pids not (yet) known as a container init, newest last (bounded).
    early_exits: Mutex<Vec<(i32, Exit)>>,
    zygote: Arc<zygote::Client>,
    publisher: RemotePublisher,
    exit_signal: Arc<ExitSignal>,
    host: Host,
}

/// The Task service.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

impl Service {
    /// Creates the service and starts the task that turns reaped pids into task exits.
    pub async fn new(
        namespace: String,
        zygote: Arc<zygote::Client>,
        publisher: RemotePublisher,
        exit_signal: Arc<ExitSignal>,
    ) -> Self {
        let host = Host::detect().unwrap_or_else(|e| {
            tracing::error!("cannot detect the host's cgroup layout: {e:#}");
            std::process::exit(1)
        });
        let svc = Service {
            inner: Arc::new(Inner {
                namespace,
                containers: Mutex::new(HashMap::new()),
                early_exits: Mutex::new(Vec::new()),
                zygote,
                publisher,
                exit_signal,
                host,
            }),
        };
        let mut sub = monitor_subscribe(Topic::Pid)
            .await
            .expect("subscribing to process exits");
        let s = svc.clone();
        tokio::spawn(async move {
            while let Some(ev) = sub.rx.recv().await {
                if let Subject::Pid(pid) = ev.subject {
                    s.on_exit(pid, ev.exit_code).await;
                }
            }
        });
        svc
    }

    fn get(&self, id: &str) -> TtrpcResult<Arc<Ctr>> {
        self.inner
            .containers
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    async fn publish(&self, topic: &str, ev: Box<dyn MessageDyn>) {
        let ctx = containerd_shim::protos::ttrpc::context::Context::default();
        if let Err(e) = self
            .inner
            .publisher
            .publish(ctx, topic, &self.inner.namespace, ev)
            .await
        {
            tracing::warn!("publishing {topic}: {e}");
        }
    }

    async fn on_exit(&self, pid: i32, code: i32) {
        let exit = Exit {
            code: code as u32,
            at: Timestamp::now(),
        };
        let ctr = self
            .inner
            .containers
            .lock()
            .unwrap()
            .values()
            .find(|c| c.pid == pid)
            .cloned();
        match ctr {
            Some(c) => self.record_exit(&c, exit).await,
            None => {
                let mut early = self.inner.early_exits.lock().unwrap();
                early.push((pid, exit));
                let len = early.len();
                if len > 256 {
                    early.drain(..len - 256);
                }
            }
        }
    }

    async fn record_exit(&self, c: &Ctr, exit: Exit) {
        let _starting = c.starting.lock().await;
        if c.exit().is_some() {
            return;
        }
        tracing::debug!(id = %c.id, pid = c.pid, code = exit.code, "task exited");
        c.set_phase(Phase::Stopped);
        let ev = TaskExit {
            container_id: c.id.clone(),
            id: c.id.clone(),
            pid: c.pid as u32,
            exit_status: exit.code,
            exited_at: MessageField::some(exit.at.clone()),
            ..Default::default()
        };
        c.exit.send_replace(Some(exit));
        self.publish(topics::TASK_EXIT_EVENT_TOPIC, Box::new(ev))
            .await;
    }

    /// Runs a libcontainer state change (start, pause, resume) on a task that must be in
    /// phase `from`, and moves it to `to` unless it exited meanwhile.
    async fn transition(
        &self,
        id: &str,
        from: Phase,
        to: Phase,
        what: &'static str,
        op: fn(
            &mut libcontainer::container::Container,
        ) -> Result<(), libcontainer::error::LibcontainerError>,
    ) -> TtrpcResult<Arc<Ctr>> {
        let c = self.get(id)?;
        if c.phase() != from {
            return Err(status(
                ttrpc::Code::FAILED_PRECONDITION,
                format!(
                    "cannot {what} task {id}: it is {:?}, not {from:?}",
                    c.phase()
                ),
            ));
        }
        let root = c.persisted.state_root.clone();
        tokio::task::spawn_blocking(move || -> TtrpcResult<()> {
            op(&mut load_container(&root)?).map_err(|e| internal(format!("{what}: {e}")))
        })
        .await
        .map_err(internal)??;
        if c.exit().is_none() {
            c.set_phase(to);
        }
        Ok(c)
    }

    async fn create_inner(&self, req: &api::CreateTaskRequest) -> anyhow::Result<Arc<Ctr>> {
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

fn kill_pid(pid: i32, sig: i32) -> nix::Result<()> {
    let sig = nix::sys::signal::Signal::try_from(sig)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
}

fn load_container(state_root: &Path) -> TtrpcResult<libcontainer::container::Container> {
    libcontainer::container::Container::load(state_root.join(LIBCONTAINER_ID))
        .map_err(|e| internal(format!("loading container state: {e}")))
}

#[async_trait]
impl Task for Service {
    async fn create(
        &self,
        _ctx: &TtrpcContext,
        req: api::CreateTaskRequest,
    ) -> TtrpcResult<api::CreateTaskResponse> {
        tracing::debug!(id = %req.id, bundle = %req.bundle, "create");
        if self.inner.containers.lock().unwrap().contains_key(&req.id) {
            return Err(status(
                ttrpc::Code::ALREADY_EXISTS,
                format!("task {} already exists", req.id),
            ));
        }
        if req.terminal {
            return Err(unsupported("a terminal (tty)"));
        }
        if !req.checkpoint.is_empty() || !req.parent_checkpoint.is_empty() {
            return Err(unsupported("restoring from a checkpoint"));
        }
        let ctr = self.create_inner(&req).await.map_err(|e| {
            tracing::error!(id = %req.id, "create failed: {e:#}");
            status(ttrpc::Code::UNKNOWN, format!("{e:#}"))
        })?;
        self.inner
            .containers
            .lock()
            .unwrap()
            .insert(req.id.clone(), ctr.clone());
        let early = {
            let mut early = self.inner.early_exits.lock().unwrap();
            early
                .iter()
                .position(|(p, _)| *p == ctr.pid)
                .map(|i| early.remove(i).1)
        };
        let ev = TaskCreate {
            container_id: req.id.clone(),
            bundle: req.bundle.clone(),
            rootfs: req.rootfs.clone(),
            io: MessageField::some(TaskIO {
                stdin: req.stdin.clone(),
                stdout: req.stdout.clone(),
                stderr: req.stderr.clone(),
                terminal: req.terminal,
                ..Default::default()
            }),
            pid: ctr.pid as u32,
            ..Default::default()
        };
        self.publish(topics::TASK_CREATE_EVENT_TOPIC, Box::new(ev))
            .await;
        let (svc, handle, id) = (
            self.clone(),
            tokio::runtime::Handle::current(),
            req.id.clone(),
        );
        crate::oom::watch(&ctr.persisted.placement, move || {
            let (svc, id) = (svc.clone(), id.clone());
            handle.spawn(async move {
                tracing::debug!(%id, "OOM kill in the container's cgroup");
                let ev = TaskOOM {
                    container_id: id,
                    ..Default::default()
                };
                svc.publish(topics::TASK_OOM_EVENT_TOPIC, Box::new(ev))
                    .await;
            });
        });
        if let Some(exit) = early {
            self.record_exit(&ctr, exit).await;
        }
        Ok(api::CreateTaskResponse {
            pid: ctr.pid as u32,
            ..Default::default()
        })
    }

    async fn start(
        &self,
        _ctx: &TtrpcContext,
        req: api::StartRequest,
    ) -> TtrpcResult<api::StartResponse> {
        if !req.exec_id.is_empty() {
            return Err(unsupported("exec"));
        }
        let ctr = self.get(&req.id)?;
        let _starting = ctr.starting.lock().await;
        let c = self
            .transition(&req.id, Phase::Created, Phase::Running, "start", |c| {
                c.start()
            })
            .await?;
        self.publish(
            topics::TASK_START_EVENT_TOPIC,
            Box::new(TaskStart {
                container_id: c.id.clone(),
                pid: c.pid as u32,
                ..Default::default()
            }),
        )
        .await;
        Ok(api::StartResponse {
            pid: c.pid as u32,
            ..Default::default()
        })
    }

    async fn state(
        &self,
        _ctx: &TtrpcContext,
        req: api::StateRequest,
    ) -> TtrpcResult<api::StateResponse> {
        let c = self.get(&req.id)?;
        let exit = c.exit();
        let st = match c.phase() {
            Phase::Created => api::Status::CREATED,
            Phase::Running => api::Status::RUNNING,
            Phase::Paused => api::Status::PAUSED,
            Phase::Stopped => api::Status::STOPPED,
        };
        Ok(api::StateResponse {
            id: c.id.clone(),
            bundle: c.bundle.to_string_lossy().into_owned(),
            pid: c.pid as u32,
            status: st.into(),
            stdin: c.io.0.clone(),
            stdout: c.io.1.clone(),
            stderr: c.io.2.clone(),
            terminal: false,
            exit_status: exit.as_ref().map(|e| e.code).unwrap_or_default(),
            exited_at: MessageField::from_option(exit.map(|e| e.at)),
            exec_id: req.exec_id,
            ..Default::default()
        })
    }

    async fn wait(
        &self,
        _ctx: &TtrpcContext,
        req: api::WaitRequest,
    ) -> TtrpcResult<api::WaitResponse> {
        if !req.exec_id.is_empty() {
            return Err(unsupported("exec"));
        }
        let c = self.get(&req.id)?;
        let mut rx = c.exit.subscribe();
        let exit = rx
            .wait_for(|e| e.is_some())
            .await
            .map_err(internal)?
            .clone()
            .expect("waited for Some");
        Ok(api::WaitResponse {
            exit_status: exit.code,
            exited_at: MessageField::some(exit.at),
            ..Default::default()
        })
    }

    async fn kill(&self, _ctx: &TtrpcContext, req: api::KillRequest) -> TtrpcResult<api::Empty> {
        if !req.exec_id.is_empty() {
            return Err(unsupported("exec"));
        }
        let c = self.get(&req.id)?;
        tracing::debug!(id = %req.id, signal = req.signal, all = req.all, "kill");
        let sig = req.signal as i32;
        if nix::sys::signal::Signal::try_from(sig).is_err() {
            return Err(status(
                ttrpc::Code::INVALID_ARGUMENT,
                format!("invalid signal {sig}"),
            ));
        }
        if req.all {
            for pid in c.persisted.placement.pids().map_err(internal)? {
                let _ = kill_pid(pid, sig);
            }
            return Ok(api::Empty::new());
        }
        if c.exit().is_some() {
            return Err(status(
                ttrpc::Code::NOT_FOUND,
                format!("process already finished: task {}", req.id),
            ));
        }
        match kill_pid(c.pid, sig) {
            Ok(()) => Ok(api::Empty::new()),
            Err(nix::errno::Errno::ESRCH) => Err(status(
                ttrpc::Code::NOT_FOUND,
                format!("process already finished: task {}", req.id),
            )),
            Err(e) => Err(internal(format!("signalling pid {}: {e}", c.pid))),
        }
    }

    async fn delete(
        &self,
        _ctx: &TtrpcContext,
        req: api::DeleteRequest,
    ) -> TtrpcResult<api::DeleteResponse> {
        if !req.exec_id.is_empty() {
            return Err(unsupported("exec"));
        }
        let c = self.get(&req.id)?;
        if c.exit().is_none() {
            if c.phase() != Phase::Created {
                return Err(status(
                    ttrpc::Code::FAILED_PRECONDITION,
                    format!("task {} is still running: kill it first", req.id),
                ));
            }
            // Created but never started: end it, as runc does.
            let _ = kill_pid(c.pid, libc::SIGKILL);
            let mut rx = c.exit.subscribe();
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                rx.wait_for(|e| e.is_some()),
            )
            .await;
        }
        let p = c.persisted.clone();
        let bundle = c.bundle.clone();
        tokio::task::spawn_blocking(move || {
            state::kill_all(&p.placement);
            state::cleanup(&p, &bundle)
        })
        .await
        .map_err(internal)?
        .map_err(|e| internal(format!("{e:#}")))?;
        self.inner.containers.lock().unwrap().remove(&req.id);
        let exit = c.exit().unwrap_or(Exit {
            code: 137,
            at: Timestamp::now(),
        });
        self.publish(
            topics::TASK_DELETE_EVENT_TOPIC,
            Box::new(TaskDelete {
                container_id: c.id.clone(),
                id: c.id.clone(),
                pid: c.pid as u32,
                exit_status: exit.code,
                exited_at: MessageField::some(exit.at.clone()),
                ..Default::default()
            }),
        )
        .await;
        Ok(api::DeleteResponse {
            pid: c.pid as u32,
            exit_status: exit.code,
            exited_at: MessageField::some(exit.at),
            ..Default::default()
        })
    }

    async fn pids(
        &self,
        _ctx: &TtrpcContext,
        req: api::PidsRequest,
    ) -> TtrpcResult<api::PidsResponse> {
        let c = self.get(&req.id)?;
        let processes = c
            .persisted
            .placement
            .pids()
            .map_err(internal)?
            .into_iter()
            .map(|pid| api::ProcessInfo {
                pid: pid as u32,
                ..Default::default()
            })
            .collect();
        Ok(api::PidsResponse {
            processes,
            ..Default::default()
        })
    }

    async fn stats(
        &self,
        _ctx: &TtrpcContext,
        req: api::StatsRequest,
    ) -> TtrpcResult<api::StatsResponse> {
        let c = self.get(&req.id)?;
        let metrics = c.persisted.placement.metrics().map_err(internal)?;
        Ok(api::StatsResponse {
            stats: MessageField::some(metrics.to_any().map_err(internal)?),
            ..Default::default()
        })
    }

    async fn update(
        &self,
        _ctx: &TtrpcContext,
        req: api::UpdateTaskRequest,
    ) -> TtrpcResult<api::Empty> {
        let c = self.get(&req.id)?;
        let Some(any) = req.resources.as_ref() else {
            return Ok(api::Empty::new());
        };
        let mut res: libcontainer::oci_spec::runtime::LinuxResources =
            serde_json::from_slice(&any.value).map_err(|e| {
                status(
                    ttrpc::Code::INVALID_ARGUMENT,
                    format!(
                        "update: resources ({}) are not OCI LinuxResources JSON: {e}",
                        any.type_url
                    ),
                )
            })?;
        cgroup_placement::filter_resources(&self.inner.host, &mut res);
        let placement = c.persisted.placement.clone();
        tokio::task::spawn_blocking(move || apply_resources(&placement, &res))
            .await
            .map_err(internal)?
            .map_err(|e| internal(format!("update: applying resources: {e:#}")))?;
        Ok(api::Empty::new())
    }

    async fn pause(&self, _ctx: &TtrpcContext, req: api::PauseRequest) -> TtrpcResult<api::Empty> {
        let c = self
            .transition(&req.id, Phase::Running, Phase::Paused, "pause", |c| {
                c.pause()
            })
            .await?;
        self.publish(
            topics::TASK_PAUSED_EVENT_TOPIC,
            Box::new(TaskPaused {
                container_id: c.id.clone(),
                ..Default::default()
            }),
        )
        .await;
        Ok(api::Empty::new())
    }

    async fn resume(
        &self,
        _ctx: &TtrpcContext,
        req: api::ResumeRequest,
    ) -> TtrpcResult<api::Empty> {
        let c = self
            .transition(&req.id, Phase::Paused, Phase::Running, "resume", |c| {
                c.resume()
            })
            .await?;
        self.publish(
            topics::TASK_RESUMED_EVENT_TOPIC,
            Box::new(TaskResumed {
                container_id: c.id.clone(),
                ..Default::default()
            }),
        )
        .await;
        Ok(api::Empty::new())
    }

    async fn connect(
        &self,
        _ctx: &TtrpcContext,
        req: api::ConnectRequest,
    ) -> TtrpcResult<api::ConnectResponse> {
        let task_pid = self.get(&req.id).map(|c| c.pid as u32).unwrap_or_default();
        Ok(api::ConnectResponse {
            shim_pid: std::process::id(),
            task_pid,
            version: env!("CARGO_PKG_VERSION").to_string(),
            ..Default::default()
        })
    }

    async fn shutdown(
        &self,
        _ctx: &TtrpcContext,
        _req: api::ShutdownRequest,
    ) -> TtrpcResult<api::Empty> {
        if self.inner.containers.lock().unwrap().is_empty() {
            tracing::debug!("shutdown: no tasks left, exiting");
            self.inner.exit_signal.signal();
        }
        Ok(api::Empty::new())
    }

    async fn close_io(
        &self,
        _ctx: &TtrpcContext,
        _req: api::CloseIORequest,
    ) -> TtrpcResult<api::Empty> {
        Ok(api::Empty::new())
    }

    async fn resize_pty(
        &self,
        _ctx: &TtrpcContext,
        _req: api::ResizePtyRequest,
    ) -> TtrpcResult<api::Empty> {
        Ok(api::Empty::new())
    }

    async fn exec(
        &self,
        _ctx: &TtrpcContext,
        _req: api::ExecProcessRequest,
    ) -> TtrpcResult<api::Empty> {
        Err(unsupported("exec"))
    }

    async fn checkpoint(
        &self,
        _ctx: &TtrpcContext,
        _req: api::CheckpointTaskRequest,
    ) -> TtrpcResult<api::Empty> {
        Err(unsupported("checkpoint"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
