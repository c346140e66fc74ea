//! The seam between the Task service and the machine.
//!
//! The service keeps phases, exits, the order of events and the error codes containerd
//! sees; everything it does to the machine (containers through the zygote and libcontainer,
//! cgroups through `cgroup-placement`, signals, containerd's event publisher) goes through
//! a [`Backend`]. [`Machine`] is the real one; the service's unit tests drive the same
//! service over a fake, without root.

use containerd_shim::protos::protobuf::well_known_types::any::Any;
use libcontainer::oci_spec::runtime::LinuxResources;
use nix::sys::signal::Signal;

use super::*;

/// Which libcontainer state change a Task method asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateChange {
    /// Start: the init runs the workload.
    Start,
    /// Pause: the container's processes are frozen.
    Pause,
    /// Resume: they are thawed.
    Resume,
}

impl StateChange {
    /// The verb, as error messages say it.
    pub fn verb(self) -> &'static str {
        match self {
            StateChange::Start => "start",
            StateChange::Pause => "pause",
            StateChange::Resume => "resume",
        }
    }
}

/// What the Task service does outside its own bookkeeping. Errors carry a
/// [`ShimError`] (or a `PlacementError`) in their chain where containerd should tell the
/// failure apart; the service sends every method's error through one mapping
/// ([`crate::error::to_ttrpc`]).
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// What the backend keeps per container.
    type Container: Send + Sync + 'static;

    /// Create's work: the container exists, its init stopped before the workload. Returns
    /// the init's pid and the container's record. On error nothing of it is left.
    async fn create(&self, req: &api::CreateTaskRequest) -> anyhow::Result<(i32, Self::Container)>;

    /// Applies a state change to the container.
    async fn change_state(&self, c: &Self::Container, change: StateChange) -> anyhow::Result<()>;

    /// Sends `sig` to `pid`.
    fn signal(&self, pid: i32, sig: Signal) -> nix::Result<()>;

    /// Every process in the container's cgroup.
    fn pids(&self, c: &Self::Container) -> anyhow::Result<Vec<i32>>;

    /// The container's cgroup metrics, as containerd's Stats answer carries them.
    fn stats(&self, c: &Self::Container) -> anyhow::Result<Any>;

    /// Applies new resource limits to the container's cgroups.
    async fn update(&self, c: &Self::Container, res: LinuxResources) -> anyhow::Result<()>;

    /// Kills whatever is left of the container and removes its cgroups, mounts and state.
    async fn remove(&self, c: &Self::Container, bundle: &Path) -> anyhow::Result<()>;

    /// Calls `on_oom` for every OOM kill in the container's memory cgroup, until the
    /// cgroup is gone.
    fn watch_oom(&self, c: &Self::Container, on_oom: Box<dyn Fn() + Send + 'static>);

    /// Sends an event to containerd; a failure is logged, not returned (containerd also
    /// learns the task's state by asking).
    async fn publish(&self, topic: &str, ev: super::event::TaskEvent);
}

/// The real backend: containers created by the zygote on youki's libcontainer, cgroups
/// placed by `cgroup-placement`, events to containerd's publisher.
pub struct Machine {
    pub(super) namespace: String,
    pub(super) zygote: Arc<zygote::Client>,
    pub(super) publisher: RemotePublisher,
    pub(super) host: Host,
}

impl Machine {
    /// The backend of the shim server in containerd namespace `namespace`.
    pub fn new(
        namespace: String,
        zygote: Arc<zygote::Client>,
        publisher: RemotePublisher,
        host: Host,
    ) -> Self {
        Machine {
            namespace,
            zygote,
            publisher,
            host,
        }
    }
}

#[async_trait]
impl Backend for Machine {
    type Container = Persisted;

    async fn create(&self, req: &api::CreateTaskRequest) -> anyhow::Result<(i32, Persisted)> {
        self.create_container(req).await
    }

    async fn change_state(&self, c: &Persisted, change: StateChange) -> anyhow::Result<()> {
        let root = c.state_root.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let mut ctr = libcontainer::container::Container::load(root.join(LIBCONTAINER_ID))
                .map_err(|e| anyhow::anyhow!("loading container state: {e}"))?;
            match change {
                StateChange::Start => ctr.start(),
                StateChange::Pause => ctr.pause(),
                StateChange::Resume => ctr.resume(),
            }
            .map_err(|e| anyhow::anyhow!("{}: {e}", change.verb()))
        })
        .await?
    }

    fn signal(&self, pid: i32, sig: Signal) -> nix::Result<()> {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
    }

    fn pids(&self, c: &Persisted) -> anyhow::Result<Vec<i32>> {
        c.placement.pids()
    }

    fn stats(&self, c: &Persisted) -> anyhow::Result<Any> {
        c.placement.metrics()?.to_any()
    }

    async fn update(&self, c: &Persisted, res: LinuxResources) -> anyhow::Result<()> {
        let (placement, host) = (c.placement.clone(), self.host.clone());
        tokio::task::spawn_blocking(move || placement.update_resources(&host, &res))
            .await?
            .context("update: applying resources")
    }

    async fn remove(&self, c: &Persisted, bundle: &Path) -> anyhow::Result<()> {
        let (p, bundle) = (c.clone(), bundle.to_path_buf());
        tokio::task::spawn_blocking(move || {
            p.placement.kill_all();
            state::cleanup(&p, &bundle)
        })
        .await?
    }

    fn watch_oom(&self, c: &Persisted, on_oom: Box<dyn Fn() + Send + 'static>) {
        crate::oom::watch(&c.placement, on_oom);
    }

    async fn publish(&self, topic: &str, ev: super::event::TaskEvent) {
        use containerd_shim::protos::shim::{event::Envelope, events::ForwardRequest};
        use containerd_shim::protos::shim_async::Events as _;
        let envelope = Envelope {
            timestamp: MessageField::some(Timestamp::now()),
            namespace: self.namespace.clone(),
            topic: topic.to_string(),
            event: MessageField::some(ev.any),
            ..Default::default()
        };
        let req = ForwardRequest {
            envelope: MessageField::some(envelope),
            ..Default::default()
        };
        // The publisher's own queue (with its retries), entered as containerd's event
        // service would be; the context is not read.
        let ctx = TtrpcContext {
            mh: Default::default(),
            metadata: Default::default(),
            timeout_nano: 0,
        };
        if let Err(e) = self.publisher.forward(&ctx, req).await {
            tracing::warn!("publishing {topic}: {e}");
        }
    }
}
