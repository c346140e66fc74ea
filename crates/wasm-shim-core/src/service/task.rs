//! The Task API methods containerd calls over ttrpc. Each method's work returns an
//! `anyhow` error with its chain; [`status`] turns it into the one code and message
//! containerd receives.

use nix::sys::signal::Signal;
use tracing::Instrument as _;

use super::*;

/// How long Delete waits for a created-but-never-started task to die after SIGKILL.
const CREATED_KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The server span of a Task API call, as containerd names them, parented to the trace
/// context containerd 2.x sends in the call's ttrpc metadata (`traceparent`, when its own
/// tracing is on); made before the call's work is entered, as a parent can only be set then.
fn task_span(name: &'static str, id: &str, ctx: &TtrpcContext) -> tracing::Span {
    let span = tracing::trace_span!(
        target: "wasm_shim_core::service",
        "containerd.task.v2.Task",
        otel.name = name,
        otel.kind = "server",
        container.id = %id
    );
    otel_export::set_parent_from_metadata(&span, &ctx.metadata);
    span
}

#[async_trait]
impl<B: Backend> Task for Service<B> {
    async fn create(
        &self,
        ctx: &TtrpcContext,
        req: api::CreateTaskRequest,
    ) -> TtrpcResult<api::CreateTaskResponse> {
        let span = task_span("containerd.task.v2.Task/Create", &req.id, ctx);
        async {
            self.create_task(&req)
                .await
                .map_err(|e| status("create", &req.id, e))
        }
        .instrument(span)
        .await
    }

    async fn start(
        &self,
        ctx: &TtrpcContext,
        req: api::StartRequest,
    ) -> TtrpcResult<api::StartResponse> {
        let span = task_span("containerd.task.v2.Task/Start", &req.id, ctx);
        async {
            self.start_task(&req)
                .await
                .map_err(|e| status("start", &req.id, e))
        }
        .instrument(span)
        .await
    }

    async fn state(
        &self,
        _ctx: &TtrpcContext,
        req: api::StateRequest,
    ) -> TtrpcResult<api::StateResponse> {
        self.task_state(req.clone())
            .map_err(|e| status("state", &req.id, e))
    }

    async fn wait(
        &self,
        ctx: &TtrpcContext,
        req: api::WaitRequest,
    ) -> TtrpcResult<api::WaitResponse> {
        let span = task_span("containerd.task.v2.Task/Wait", &req.id, ctx);
        async {
            self.wait_task(&req)
                .await
                .map_err(|e| status("wait", &req.id, e))
        }
        .instrument(span)
        .await
    }

    async fn kill(&self, ctx: &TtrpcContext, req: api::KillRequest) -> TtrpcResult<api::Empty> {
        let span = task_span("containerd.task.v2.Task/Kill", &req.id, ctx);
        async { self.kill_task(&req).map_err(|e| status("kill", &req.id, e)) }
            .instrument(span)
            .await
    }

    async fn delete(
        &self,
        ctx: &TtrpcContext,
        req: api::DeleteRequest,
    ) -> TtrpcResult<api::DeleteResponse> {
        let span = task_span("containerd.task.v2.Task/Delete", &req.id, ctx);
        async {
            self.delete_task(&req)
                .await
                .map_err(|e| status("delete", &req.id, e))
        }
        .instrument(span)
        .await
    }

    async fn pids(
        &self,
        _ctx: &TtrpcContext,
        req: api::PidsRequest,
    ) -> TtrpcResult<api::PidsResponse> {
        self.task_pids(&req).map_err(|e| status("pids", &req.id, e))
    }

    async fn stats(
        &self,
        _ctx: &TtrpcContext,
        req: api::StatsRequest,
    ) -> TtrpcResult<api::StatsResponse> {
        self.task_stats(&req)
            .map_err(|e| status("stats", &req.id, e))
    }

    async fn update(
        &self,
        ctx: &TtrpcContext,
        req: api::UpdateTaskRequest,
    ) -> TtrpcResult<api::Empty> {
        let span = task_span("containerd.task.v2.Task/Update", &req.id, ctx);
        async {
            self.update_task(&req)
                .await
                .map_err(|e| status("update", &req.id, e))
        }
        .instrument(span)
        .await
    }

    async fn pause(&self, ctx: &TtrpcContext, req: api::PauseRequest) -> TtrpcResult<api::Empty> {
        let span = task_span("containerd.task.v2.Task/Pause", &req.id, ctx);
        async {
            self.pause_or_resume(&req.id, StateChange::Pause)
                .await
                .map_err(|e| status("pause", &req.id, e))
        }
        .instrument(span)
        .await
    }

    async fn resume(&self, ctx: &TtrpcContext, req: api::ResumeRequest) -> TtrpcResult<api::Empty> {
        let span = task_span("containerd.task.v2.Task/Resume", &req.id, ctx);
        async {
            self.pause_or_resume(&req.id, StateChange::Resume)
                .await
                .map_err(|e| status("resume", &req.id, e))
        }
        .instrument(span)
        .await
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
        if lock(&self.inner.containers).is_empty() {
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
        req: api::ExecProcessRequest,
    ) -> TtrpcResult<api::Empty> {
        Err(status("exec", &req.id, unsupported("exec")))
    }

    async fn checkpoint(
        &self,
        _ctx: &TtrpcContext,
        req: api::CheckpointTaskRequest,
    ) -> TtrpcResult<api::Empty> {
        Err(status("checkpoint", &req.id, unsupported("checkpoint")))
    }
}

impl<B: Backend> Service<B> {
    async fn create_task(
        &self,
        req: &api::CreateTaskRequest,
    ) -> anyhow::Result<api::CreateTaskResponse> {
        tracing::debug!(id = %req.id, bundle = %req.bundle, "create");
        // Reserved before any await: a duplicate Create fails here and never reaches the
        // failure path that would clean up the first one's cgroup, state and rootfs.
        let _reservation = self
            .inner
            .reservations
            .reserve(&req.id, || {
                lock(&self.inner.containers).contains_key(&req.id)
            })
            .ok_or_else(|| ShimError::AlreadyExists(format!("task {} already exists", req.id)))?;
        if req.terminal {
            return Err(unsupported("a terminal (tty)"));
        }
        if !req.checkpoint.is_empty() || !req.parent_checkpoint.is_empty() {
            return Err(unsupported("restoring from a checkpoint"));
        }
        // Exits of unknown pids are kept only while a create is in flight.
        let exits = self.inner.exits.subscribe();
        let (pid, container) = self.inner.backend.create(req).await?;
        let (tx, _) = watch::channel(None);
        let ctr = Arc::new(Ctr {
            id: req.id.clone(),
            bundle: PathBuf::from(&req.bundle),
            pid,
            io: (req.stdin.clone(), req.stdout.clone(), req.stderr.clone()),
            container,
            phase: Mutex::new(Phase::Created),
            exit: tx,
            gate: lifecycle::StartGate::new(),
        });
        let early = exits.claim(ctr.pid, || {
            lock(&self.inner.containers).insert(req.id.clone(), ctr.clone());
        });
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
        self.publish(topics::TASK_CREATE_EVENT_TOPIC, ev).await;
        let (svc, handle, id) = (
            self.clone(),
            tokio::runtime::Handle::current(),
            req.id.clone(),
        );
        self.inner.backend.watch_oom(
            &ctr.container,
            Box::new(move || {
                let (svc, id) = (svc.clone(), id.clone());
                handle.spawn(async move {
                    tracing::debug!(%id, "OOM kill in the container's cgroup");
                    let ev = TaskOOM {
                        container_id: id,
                        ..Default::default()
                    };
                    svc.publish(topics::TASK_OOM_EVENT_TOPIC, ev).await;
                });
            }),
        );
        if let Some(exit) = early {
            self.record_exit(&ctr, exit).await;
        }
        Ok(api::CreateTaskResponse {
            pid: ctr.pid as u32,
            ..Default::default()
        })
    }

    async fn start_task(&self, req: &api::StartRequest) -> anyhow::Result<api::StartResponse> {
        if !req.exec_id.is_empty() {
            return Err(unsupported("exec"));
        }
        let ctr = self.get(&req.id)?;
        let starting = ctr.gate.begin_start().await;
        let started = self
            .transition(&req.id, Phase::Created, Phase::Running, StateChange::Start)
            .await;
        if let Ok(c) = &started {
            self.publish(
                topics::TASK_START_EVENT_TOPIC,
                TaskStart {
                    container_id: c.id.clone(),
                    pid: c.pid as u32,
                    ..Default::default()
                },
            )
            .await;
        }
        // An exit recorded meanwhile goes out now, after TaskStart.
        if let Some(ev) = starting.finish() {
            self.publish(topics::TASK_EXIT_EVENT_TOPIC, ev).await;
        }
        let c = started?;
        Ok(api::StartResponse {
            pid: c.pid as u32,
            ..Default::default()
        })
    }

    fn task_state(&self, req: api::StateRequest) -> anyhow::Result<api::StateResponse> {
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

    async fn wait_task(&self, req: &api::WaitRequest) -> anyhow::Result<api::WaitResponse> {
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

    fn kill_task(&self, req: &api::KillRequest) -> anyhow::Result<api::Empty> {
        if !req.exec_id.is_empty() {
            return Err(unsupported("exec"));
        }
        let c = self.get(&req.id)?;
        tracing::debug!(id = %req.id, signal = req.signal, all = req.all, "kill");
        let sig = Signal::try_from(req.signal as i32)
            .map_err(|_| ShimError::InvalidArgument(format!("invalid signal {}", req.signal)))?;
        let backend = &self.inner.backend;
        if req.all {
            for pid in backend
                .pids(&c.container)
                .context("kill --all: listing the container's processes")?
            {
                let _ = backend.signal(pid, sig);
            }
            return Ok(api::Empty::new());
        }
        let finished = || ShimError::NotFound(format!("process already finished: task {}", req.id));
        if c.exit().is_some() {
            return Err(finished().into());
        }
        match backend.signal(c.pid, sig) {
            Ok(()) => Ok(api::Empty::new()),
            Err(nix::errno::Errno::ESRCH) => Err(finished().into()),
            Err(e) => Err(internal(format!("signalling pid {}: {e}", c.pid))),
        }
    }

    async fn delete_task(&self, req: &api::DeleteRequest) -> anyhow::Result<api::DeleteResponse> {
        if !req.exec_id.is_empty() {
            return Err(unsupported("exec"));
        }
        let c = self.get(&req.id)?;
        // A Start under way finishes first: Delete then sees a running task (refused) or a
        // created one, and never cleans up under a Start.
        let _deleting = c.gate.begin_delete().await;
        // A Delete that waited for another Delete of this task finds it gone.
        if !lock(&self.inner.containers)
            .get(&req.id)
            .is_some_and(|x| Arc::ptr_eq(x, &c))
        {
            return Err(not_found(&req.id));
        }
        if c.exit().is_none() {
            if c.phase() != Phase::Created {
                return Err(ShimError::FailedPrecondition(format!(
                    "task {} is still running: kill it first",
                    req.id
                ))
                .into());
            }
            // Created but never started: end it, as runc does.
            let _ = self.inner.backend.signal(c.pid, Signal::SIGKILL);
            let mut rx = c.exit.subscribe();
            let _ = tokio::time::timeout(CREATED_KILL_WAIT, rx.wait_for(|e| e.is_some())).await;
        }
        self.inner
            .backend
            .remove(&c.container, &c.bundle)
            .await
            .with_context(|| format!("delete: removing task {}", req.id))?;
        lock(&self.inner.containers).remove(&req.id);
        let exit = c.exit().unwrap_or(Exit {
            code: state::KILLED_EXIT_STATUS,
            at: Timestamp::now(),
        });
        self.publish(
            topics::TASK_DELETE_EVENT_TOPIC,
            TaskDelete {
                container_id: c.id.clone(),
                id: c.id.clone(),
                pid: c.pid as u32,
                exit_status: exit.code,
                exited_at: MessageField::some(exit.at.clone()),
                ..Default::default()
            },
        )
        .await;
        Ok(api::DeleteResponse {
            pid: c.pid as u32,
            exit_status: exit.code,
            exited_at: MessageField::some(exit.at),
            ..Default::default()
        })
    }

    fn task_pids(&self, req: &api::PidsRequest) -> anyhow::Result<api::PidsResponse> {
        let c = self.get(&req.id)?;
        let processes = self
            .inner
            .backend
            .pids(&c.container)
            .context("pids: listing the container's processes")?
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

    fn task_stats(&self, req: &api::StatsRequest) -> anyhow::Result<api::StatsResponse> {
        let c = self.get(&req.id)?;
        let stats = self
            .inner
            .backend
            .stats(&c.container)
            .context("stats: reading the container's cgroup metrics")?;
        Ok(api::StatsResponse {
            stats: MessageField::some(stats),
            ..Default::default()
        })
    }

    async fn update_task(&self, req: &api::UpdateTaskRequest) -> anyhow::Result<api::Empty> {
        let c = self.get(&req.id)?;
        let Some(any) = req.resources.as_ref() else {
            return Ok(api::Empty::new());
        };
        let res: libcontainer::oci_spec::runtime::LinuxResources =
            serde_json::from_slice(&any.value).map_err(|e| {
                ShimError::InvalidArgument(format!(
                    "update: resources ({}) are not OCI LinuxResources JSON: {e}",
                    any.type_url
                ))
            })?;
        self.inner.backend.update(&c.container, res).await?;
        Ok(api::Empty::new())
    }

    async fn pause_or_resume(&self, id: &str, change: StateChange) -> anyhow::Result<api::Empty> {
        let (from, to, topic): (_, _, &str) = match change {
            StateChange::Pause => (
                Phase::Running,
                Phase::Paused,
                topics::TASK_PAUSED_EVENT_TOPIC,
            ),
            _ => (
                Phase::Paused,
                Phase::Running,
                topics::TASK_RESUMED_EVENT_TOPIC,
            ),
        };
        let c = self.transition(id, from, to, change).await?;
        let container_id = c.id.clone();
        if change == StateChange::Pause {
            let ev = TaskPaused {
                container_id,
                ..Default::default()
            };
            self.publish(topic, ev).await;
        } else {
            let ev = TaskResumed {
                container_id,
                ..Default::default()
            };
            self.publish(topic, ev).await;
        }
        Ok(api::Empty::new())
    }
}
