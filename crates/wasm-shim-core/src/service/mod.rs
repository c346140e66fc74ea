//! The containerd Task service: one shim serves every container of a pod.
//!
//! - [`task`]: the Task API methods containerd calls;
//! - [`create`]: Create's work (placement, config.json rewrite, rootfs, zygote request) and
//!   the runtime-options decoding it needs;
//! - [`exits`]: turning reaped pids into task exits;
//! - [`lifecycle`]: per-create exit subscriptions, id reservations and the start gate.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cgroup_placement::Host;
use containerd_shim::asynchronous::monitor::monitor_subscribe;
use containerd_shim::asynchronous::ExitSignal;
use containerd_shim::monitor::{Subject, Topic};
use containerd_shim::protos::api;
use containerd_shim::protos::events::task::{
    TaskCreate, TaskDelete, TaskExit, TaskIO, TaskOOM, TaskPaused, TaskResumed, TaskStart,
};
use containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim::protos::protobuf::{MessageDyn, MessageField};
use containerd_shim::protos::shim_async::Task;
use containerd_shim::protos::topics;
use containerd_shim::protos::ttrpc::{self, r#async::TtrpcContext};
use containerd_shim::publisher::RemotePublisher;
use containerd_shim::TtrpcResult;
use tokio::sync::watch;

use crate::error::ShimError;
use crate::state::{self, Persisted};
use crate::zygote::{self, LIBCONTAINER_ID};

mod create;
mod exits;
mod lifecycle;
mod task;

use lifecycle::lock;

fn not_found(id: &str) -> ttrpc::Error {
    ShimError::NotFound(format!("task {id} not found")).into()
}
fn internal(e: impl std::fmt::Display) -> ttrpc::Error {
    ShimError::Internal(e.to_string()).into()
}
fn unsupported(what: &str) -> ttrpc::Error {
    ShimError::Unimplemented(format!(
        "{what} is not supported by {}",
        crate::shim_names().runtime_id
    ))
    .into()
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
    /// Orders Start, Delete and the TaskExit event (see [`lifecycle::StartGate`]).
    gate: lifecycle::StartGate<TaskExit>,
}

impl Ctr {
    fn phase(&self) -> Phase {
        *lock(&self.phase)
    }
    fn set_phase(&self, p: Phase) {
        *lock(&self.phase) = p;
    }
    fn exit(&self) -> Option<Exit> {
        self.exit.borrow().clone()
    }
}

struct Inner {
    namespace: String,
    containers: Mutex<HashMap<String, Arc<Ctr>>>,
    /// Exits of pids not (yet) known as a container init, for the creates in flight.
    exits: lifecycle::ExitRouter<Exit>,
    /// Ids whose Create is under way.
    reservations: lifecycle::Reservations,
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
                exits: lifecycle::ExitRouter::new(),
                reservations: lifecycle::Reservations::new(),
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
                    // Each exit in its own task: a panic while handling one is logged and
                    // the loop goes on with the next.
                    let s = s.clone();
                    let handled = tokio::spawn(async move { s.on_exit(pid, ev.exit_code).await });
                    if let Err(e) = handled.await {
                        tracing::error!("handling the exit of pid {pid} failed: {e}");
                    }
                }
            }
            tracing::error!("the process monitor closed: no more task exits can be reported");
        });
        svc
    }

    fn get(&self, id: &str) -> TtrpcResult<Arc<Ctr>> {
        lock(&self.inner.containers)
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
            return Err(ShimError::FailedPrecondition(format!(
                "cannot {what} task {id}: it is {:?}, not {from:?}",
                c.phase()
            ))
            .into());
        }
        let root = c.persisted.state_root.clone();
        tokio::task::spawn_blocking(move || -> TtrpcResult<()> {
            op(&mut load_container(&root)?).map_err(|e| internal(format!("{what}: {e}")))
        })
        .await
        .map_err(internal)??;
        // Under the exit channel's lock: a task that exited meanwhile stays Stopped.
        c.exit.send_if_modified(|exit| {
            if exit.is_none() {
                c.set_phase(to);
            }
            false
        });
        Ok(c)
    }
}

fn kill_pid(pid: i32, sig: i32) -> nix::Result<()> {
    let sig = nix::sys::signal::Signal::try_from(sig)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
}

fn load_container(state_root: &Path) -> TtrpcResult<libcontainer::container::Container> {
    libcontainer::container::Container::load(state_root.join(LIBCONTAINER_ID))
        .map_err(|e| internal(format!("loading container state: {e}")))
}
