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

use anyhow::Context;
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
use containerd_shim::protos::protobuf::MessageField;
use containerd_shim::protos::shim_async::Task;
use containerd_shim::protos::topics;
use containerd_shim::protos::ttrpc::{self, r#async::TtrpcContext};
use containerd_shim::publisher::RemotePublisher;
use containerd_shim::TtrpcResult;
use tokio::sync::watch;

use crate::error::ShimError;
use crate::state::{self, Persisted};
use crate::zygote::{self, LIBCONTAINER_ID};

mod backend;
mod create;
mod event;
mod exits;
mod lifecycle;
mod task;
#[cfg(test)]
mod tests;

pub use backend::{Backend, Machine, StateChange};
use lifecycle::lock;

fn not_found(id: &str) -> anyhow::Error {
    ShimError::NotFound(format!("task {id} not found")).into()
}
fn internal(e: impl std::fmt::Display) -> anyhow::Error {
    ShimError::Internal(e.to_string()).into()
}
fn unsupported(what: &str) -> anyhow::Error {
    ShimError::Unimplemented(format!(
        "{what} is not supported by {}",
        crate::shim_names().runtime_id
    ))
    .into()
}

/// Every Task method's error as containerd receives it ([`crate::error::to_ttrpc`]: the code
/// of the first typed error in the chain, the whole chain as the message). Failures of the
/// shim itself are logged here; answers about the caller's request (unknown task, wrong
/// phase, unsupported) are containerd's to report.
fn status(method: &str, id: &str, e: anyhow::Error) -> ttrpc::Error {
    let code = crate::error::code_of(&e);
    if matches!(code, ttrpc::Code::INTERNAL | ttrpc::Code::UNKNOWN)
        || (method == "create" && code != ttrpc::Code::ALREADY_EXISTS)
    {
        tracing::error!(%id, "{method} failed: {e:#}");
    } else {
        tracing::debug!(%id, "{method}: {e:#}");
    }
    crate::error::to_ttrpc(&e)
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

struct Ctr<C> {
    id: String,
    bundle: PathBuf,
    pid: i32,
    io: (String, String, String),
    /// The backend's record of the container.
    container: C,
    phase: Mutex<Phase>,
    exit: watch::Sender<Option<Exit>>,
    /// Orders Start, Delete and the TaskExit event (see [`lifecycle::StartGate`]).
    gate: lifecycle::StartGate<TaskExit>,
}

impl<C> Ctr<C> {
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

struct Inner<B: Backend> {
    backend: B,
    containers: Mutex<HashMap<String, Arc<Ctr<B::Container>>>>,
    /// Exits of pids not (yet) known as a container init, for the creates in flight.
    exits: lifecycle::ExitRouter<Exit>,
    /// Ids whose Create is under way.
    reservations: lifecycle::Reservations,
    exit_signal: Arc<ExitSignal>,
}

/// The Task service over a [`Backend`] ([`Machine`] in the shim).
pub struct Service<B: Backend = Machine> {
    inner: Arc<Inner<B>>,
}

impl<B: Backend> Clone for Service<B> {
    fn clone(&self) -> Self {
        Service {
            inner: self.inner.clone(),
        }
    }
}

impl Service<Machine> {
    /// Creates the service on this machine and starts the task that turns reaped pids into
    /// task exits.
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
        let svc = Service::with_backend(
            Machine::new(namespace, zygote, publisher, host),
            exit_signal,
        );
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
}

impl<B: Backend> Service<B> {
    /// The service over `backend`; reaped pids reach it through [`Service::on_exit`].
    pub fn with_backend(backend: B, exit_signal: Arc<ExitSignal>) -> Self {
        Service {
            inner: Arc::new(Inner {
                backend,
                containers: Mutex::new(HashMap::new()),
                exits: lifecycle::ExitRouter::new(),
                reservations: lifecycle::Reservations::new(),
                exit_signal,
            }),
        }
    }

    fn get(&self, id: &str) -> anyhow::Result<Arc<Ctr<B::Container>>> {
        lock(&self.inner.containers)
            .get(id)
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    async fn publish(&self, topic: &str, ev: impl event::TaskEventMessage) {
        match event::TaskEvent::new(&ev) {
            Ok(ev) => self.inner.backend.publish(topic, ev).await,
            Err(e) => tracing::warn!("publishing {topic}: {e:#}"),
        }
    }

    /// Applies a state change (start, pause, resume) to a task that must be in phase
    /// `from`, and moves it to `to` unless it exited meanwhile.
    async fn transition(
        &self,
        id: &str,
        from: Phase,
        to: Phase,
        change: StateChange,
    ) -> anyhow::Result<Arc<Ctr<B::Container>>> {
        let c = self.get(id)?;
        if c.phase() != from {
            return Err(ShimError::FailedPrecondition(format!(
                "cannot {} task {id}: it is {:?}, not {from:?}",
                change.verb(),
                c.phase()
            ))
            .into());
        }
        self.inner
            .backend
            .change_state(&c.container, change)
            .await?;
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
