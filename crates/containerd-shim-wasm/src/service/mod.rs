//! The containerd Task service: one shim serves every container of a pod.
//!
//! - [`task`]: the Task API methods containerd calls;
//! - [`create`]: Create's work (placement, config.json rewrite, rootfs, zygote request) and
//!   the runtime-options decoding it needs;
//! - [`exits`]: turning reaped pids into task exits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

mod create;
mod exits;
mod task;

pub use create::{apply_resources, systemd_option};

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
}

fn kill_pid(pid: i32, sig: i32) -> nix::Result<()> {
    let sig = nix::sys::signal::Signal::try_from(sig)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
}

fn load_container(state_root: &Path) -> TtrpcResult<libcontainer::container::Container> {
    libcontainer::container::Container::load(state_root.join(LIBCONTAINER_ID))
        .map_err(|e| internal(format!("loading container state: {e}")))
}
