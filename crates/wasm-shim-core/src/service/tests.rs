//! The Task service over a fake backend: phases, the order of events around exits, and the
//! status codes containerd receives, without root, containers or cgroups.

use std::sync::atomic::{AtomicI32, Ordering};

use containerd_shim::protos::protobuf::well_known_types::any::Any;
use libcontainer::oci_spec::runtime::LinuxResources;
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, Notify};

use super::*;

/// Makes the error an operation of the fake fails with.
type Failure = fn() -> anyhow::Error;

/// A machine that only records: each create gets the next pid, a SIGKILL or SIGTERM "kills"
/// the pid (its exit goes to the reaper channel, as the process monitor reports it), and
/// chosen operations fail with a chosen error.
#[derive(Default)]
struct Fake {
    next_pid: AtomicI32,
    events: Mutex<Vec<(String, String)>>,
    signals: Mutex<Vec<(i32, Signal)>>,
    removed: Mutex<Vec<String>>,
    reaper: Mutex<Option<mpsc::UnboundedSender<(i32, i32)>>>,
    /// Operation name -> the error it fails with.
    failures: Mutex<HashMap<&'static str, Failure>>,
    /// Operation name -> where it waits (after saying so on `entered`) before it goes on.
    holds: Mutex<HashMap<&'static str, Arc<Notify>>>,
    entered: Notify,
}

impl Fake {
    /// Waits in `op` if the test holds it.
    async fn held(&self, op: &'static str) {
        let hold = lock(&self.holds).get(op).cloned();
        if let Some(hold) = hold {
            self.entered.notify_one();
            hold.notified().await;
        }
    }

    fn fail(&self, op: &'static str) -> anyhow::Result<()> {
        match lock(&self.failures).get(op) {
            Some(e) => Err(e()),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Backend for Fake {
    type Container = String;

    async fn create(&self, req: &api::CreateTaskRequest) -> anyhow::Result<(i32, String)> {
        self.held("create").await;
        self.fail("create")?;
        Ok((
            1000 + self.next_pid.fetch_add(1, Ordering::SeqCst),
            req.id.clone(),
        ))
    }

    async fn change_state(&self, _c: &String, change: StateChange) -> anyhow::Result<()> {
        self.held(change.verb()).await;
        self.fail(change.verb())
    }

    fn signal(&self, pid: i32, sig: Signal) -> nix::Result<()> {
        lock(&self.signals).push((pid, sig));
        if matches!(sig, Signal::SIGKILL | Signal::SIGTERM) {
            if let Some(tx) = lock(&self.reaper).as_ref() {
                let _ = tx.send((pid, 128 + sig as i32));
            }
        }
        Ok(())
    }

    fn pids(&self, _c: &String) -> anyhow::Result<Vec<i32>> {
        self.fail("pids")?;
        Ok(vec![])
    }

    fn stats(&self, _c: &String) -> anyhow::Result<Any> {
        self.fail("stats")?;
        Ok(Any::new())
    }

    async fn update(&self, _c: &String, _res: LinuxResources) -> anyhow::Result<()> {
        self.fail("update")
    }

    async fn remove(&self, c: &String, _bundle: &Path) -> anyhow::Result<()> {
        self.fail("remove")?;
        lock(&self.removed).push(c.clone());
        Ok(())
    }

    fn watch_oom(&self, _c: &String, _on_oom: Box<dyn Fn() + Send + 'static>) {}

    async fn publish(&self, topic: &str, ev: super::event::TaskEvent) {
        lock(&self.events).push((topic.to_string(), ev.container_id));
    }
}

/// A service over a [`Fake`] whose "killed" pids are reported back as exits, as the
/// shim's reaper does.
fn service() -> Service<Fake> {
    let svc = Service::with_backend(Fake::default(), Arc::new(ExitSignal::default()));
    let (tx, mut rx) = mpsc::unbounded_channel();
    *lock(&svc.inner.backend.reaper) = Some(tx);
    let s = svc.clone();
    tokio::spawn(async move {
        while let Some((pid, code)) = rx.recv().await {
            s.on_exit(pid, code).await;
        }
    });
    svc
}

fn ctx() -> TtrpcContext {
    TtrpcContext {
        mh: Default::default(),
        metadata: Default::default(),
        timeout_nano: 0,
    }
}

fn code<T: std::fmt::Debug>(r: TtrpcResult<T>) -> (ttrpc::Code, String) {
    match r {
        Err(ttrpc::Error::RpcStatus(s)) => (s.code(), s.message),
        other => panic!("expected a status, got {other:?}"),
    }
}

fn topics_of(svc: &Service<Fake>, id: &str) -> Vec<String> {
    lock(&svc.inner.backend.events)
        .iter()
        .filter(|(_, i)| i == id)
        .map(|(t, _)| t.rsplit('/').next().unwrap_or_default().to_string())
        .collect()
}

async fn create(svc: &Service<Fake>, id: &str) -> TtrpcResult<api::CreateTaskResponse> {
    let req = api::CreateTaskRequest {
        id: id.into(),
        bundle: format!("/run/test/{id}"),
        ..Default::default()
    };
    svc.create(&ctx(), req).await
}

async fn status_of(svc: &Service<Fake>, id: &str) -> api::Status {
    let req = api::StateRequest {
        id: id.into(),
        ..Default::default()
    };
    svc.state(&ctx(), req).await.unwrap().status.unwrap()
}

#[tokio::test]
async fn a_task_lives_create_start_kill_wait_delete_with_events_in_order() {
    let svc = service();
    let pid = create(&svc, "a").await.unwrap().pid;
    assert_eq!(status_of(&svc, "a").await, api::Status::CREATED);
    let start = api::StartRequest {
        id: "a".into(),
        ..Default::default()
    };
    assert_eq!(svc.start(&ctx(), start).await.unwrap().pid, pid);
    assert_eq!(status_of(&svc, "a").await, api::Status::RUNNING);
    let kill = api::KillRequest {
        id: "a".into(),
        signal: 15,
        ..Default::default()
    };
    svc.kill(&ctx(), kill.clone()).await.unwrap();
    let wait = api::WaitRequest {
        id: "a".into(),
        ..Default::default()
    };
    assert_eq!(svc.wait(&ctx(), wait).await.unwrap().exit_status, 143);
    assert_eq!(status_of(&svc, "a").await, api::Status::STOPPED);
    // A second signal to a finished task: NOT_FOUND, as runc's shim answers.
    assert_eq!(code(svc.kill(&ctx(), kill).await).0, ttrpc::Code::NOT_FOUND);
    let del = api::DeleteRequest {
        id: "a".into(),
        ..Default::default()
    };
    assert_eq!(
        svc.delete(&ctx(), del.clone()).await.unwrap().exit_status,
        143
    );
    assert_eq!(*lock(&svc.inner.backend.removed), vec!["a".to_string()]);
    assert_eq!(
        topics_of(&svc, "a"),
        ["create", "start", "exit", "delete"],
        "events of task a"
    );
    // Gone: every method answers NOT_FOUND naming the task.
    let (c, msg) = code(svc.delete(&ctx(), del).await);
    assert_eq!(
        (c, msg.as_str()),
        (ttrpc::Code::NOT_FOUND, "task a not found")
    );
}

#[tokio::test]
async fn an_exit_during_start_is_published_after_task_start() {
    let svc = service();
    let pid = create(&svc, "b").await.unwrap().pid as i32;
    let hold = Arc::new(Notify::new());
    lock(&svc.inner.backend.holds).insert("start", hold.clone());
    let s = svc.clone();
    let start = tokio::spawn(async move {
        let req = api::StartRequest {
            id: "b".into(),
            ..Default::default()
        };
        s.start(&ctx(), req).await
    });
    svc.inner.backend.entered.notified().await;
    // The workload exits while Start is still under way: the exit is recorded at once...
    svc.on_exit(pid, 3).await;
    assert_eq!(status_of(&svc, "b").await, api::Status::STOPPED);
    assert_eq!(topics_of(&svc, "b"), ["create"]);
    // ...and its event goes out after TaskStart, which containerd needs first.
    hold.notify_one();
    start.await.unwrap().unwrap();
    assert_eq!(topics_of(&svc, "b"), ["create", "start", "exit"]);
    assert_eq!(
        status_of(&svc, "b").await,
        api::Status::STOPPED,
        "a task that exited during Start stays stopped"
    );
}

#[tokio::test]
async fn an_exit_seen_before_create_returns_belongs_to_the_new_task_and_no_other() {
    let svc = service();
    // Pid 1000 (the fake's first) exits with no create in flight: a stray reaped pid,
    // dropped, so the task that later gets that pid is not reported as exited.
    svc.on_exit(1000, 9).await;
    create(&svc, "c0").await.unwrap();
    assert_eq!(status_of(&svc, "c0").await, api::Status::CREATED);
    // The next task's init (pid 1001) exits while its Create is still under way.
    let hold = Arc::new(Notify::new());
    lock(&svc.inner.backend.holds).insert("create", hold.clone());
    let s = svc.clone();
    let creating = tokio::spawn(async move { create(&s, "c").await });
    svc.inner.backend.entered.notified().await;
    svc.on_exit(1001, 7).await;
    hold.notify_one();
    assert_eq!(creating.await.unwrap().unwrap().pid, 1001);
    assert_eq!(status_of(&svc, "c").await, api::Status::STOPPED);
    assert_eq!(topics_of(&svc, "c"), ["create", "exit"]);
    assert_eq!(status_of(&svc, "c0").await, api::Status::CREATED);
}

#[tokio::test]
async fn deleting_a_created_task_kills_it_and_a_running_one_is_refused() {
    let svc = service();
    let pid = create(&svc, "d").await.unwrap().pid as i32;
    create(&svc, "e").await.unwrap();
    let start = api::StartRequest {
        id: "e".into(),
        ..Default::default()
    };
    svc.start(&ctx(), start).await.unwrap();
    let del = |id: &str| api::DeleteRequest {
        id: id.into(),
        ..Default::default()
    };
    let (c, msg) = code(svc.delete(&ctx(), del("e")).await);
    assert_eq!(c, ttrpc::Code::FAILED_PRECONDITION, "{msg}");
    assert!(msg.contains("kill it first"), "{msg}");
    let r = svc.delete(&ctx(), del("d")).await.unwrap();
    assert_eq!(r.exit_status, 137);
    assert!(lock(&svc.inner.backend.signals).contains(&(pid, Signal::SIGKILL)));
    assert_eq!(*lock(&svc.inner.backend.removed), vec!["d".to_string()]);
}

#[tokio::test]
async fn phases_are_checked_and_named() {
    let svc = service();
    create(&svc, "f").await.unwrap();
    let pause = api::PauseRequest {
        id: "f".into(),
        ..Default::default()
    };
    let (c, msg) = code(svc.pause(&ctx(), pause.clone()).await);
    assert_eq!(c, ttrpc::Code::FAILED_PRECONDITION);
    assert_eq!(msg, "cannot pause task f: it is Created, not Running");
    let start = api::StartRequest {
        id: "f".into(),
        ..Default::default()
    };
    svc.start(&ctx(), start.clone()).await.unwrap();
    svc.pause(&ctx(), pause).await.unwrap();
    assert_eq!(status_of(&svc, "f").await, api::Status::PAUSED);
    let resume = api::ResumeRequest {
        id: "f".into(),
        ..Default::default()
    };
    svc.resume(&ctx(), resume).await.unwrap();
    assert_eq!(
        topics_of(&svc, "f"),
        ["create", "start", "paused", "resumed"]
    );
    let (c, _) = code(svc.start(&ctx(), start).await);
    assert_eq!(c, ttrpc::Code::FAILED_PRECONDITION);
}

#[tokio::test]
async fn every_method_sends_the_code_of_the_typed_error_in_its_chain() {
    let svc = service();
    create(&svc, "g").await.unwrap();
    // A duplicate create, before and after the first one finished.
    assert_eq!(code(create(&svc, "g").await).0, ttrpc::Code::ALREADY_EXISTS);
    {
        let mut f = lock(&svc.inner.backend.failures);
        f.insert("create", || {
            anyhow::Error::new(ShimError::InvalidArgument("cgroupsPath `a:b` ...".into()))
                .context("placing the container")
        });
        f.insert("stats", || {
            anyhow::Error::new(ShimError::NotFound("cgroup /x is gone".into()))
        });
        f.insert("update", || {
            anyhow::Error::new(ShimError::InvalidArgument(
                "memory limit below usage".into(),
            ))
        });
        f.insert("pids", || anyhow::anyhow!("reading cgroup.procs: EIO"));
        f.insert("remove", || anyhow::anyhow!("unmounting the rootfs: EBUSY"));
    }
    let (c, msg) = code(create(&svc, "h").await);
    assert_eq!(c, ttrpc::Code::INVALID_ARGUMENT);
    assert_eq!(msg, "placing the container: cgroupsPath `a:b` ...");
    // The failed create left no task behind and its id is free again.
    assert_eq!(
        code(
            svc.state(
                &ctx(),
                api::StateRequest {
                    id: "h".into(),
                    ..Default::default()
                }
            )
            .await
        )
        .0,
        ttrpc::Code::NOT_FOUND
    );
    let (c, msg) = code(
        svc.stats(
            &ctx(),
            api::StatsRequest {
                id: "g".into(),
                ..Default::default()
            },
        )
        .await,
    );
    assert_eq!(c, ttrpc::Code::NOT_FOUND, "{msg}");
    assert!(msg.starts_with("stats: reading the container's cgroup metrics: cgroup /x"));
    let update = api::UpdateTaskRequest {
        id: "g".into(),
        resources: MessageField::some(Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources".into(),
            value: br#"{"memory":{"limit":1}}"#.to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        code(svc.update(&ctx(), update.clone()).await).0,
        ttrpc::Code::INVALID_ARGUMENT
    );
    let mut bad = update;
    bad.resources.as_mut().unwrap().value = b"not json".to_vec();
    let (c, msg) = code(svc.update(&ctx(), bad).await);
    assert_eq!(c, ttrpc::Code::INVALID_ARGUMENT);
    assert!(msg.contains("are not OCI LinuxResources JSON"), "{msg}");
    // Untyped failures keep their whole chain.
    let kill_all = api::KillRequest {
        id: "g".into(),
        signal: 9,
        all: true,
        ..Default::default()
    };
    let (c, msg) = code(svc.kill(&ctx(), kill_all).await);
    assert_eq!(c, ttrpc::Code::UNKNOWN);
    assert_eq!(
        msg,
        "kill --all: listing the container's processes: reading cgroup.procs: EIO"
    );
    let bad_signal = api::KillRequest {
        id: "g".into(),
        signal: 4242,
        ..Default::default()
    };
    assert_eq!(
        code(svc.kill(&ctx(), bad_signal).await).0,
        ttrpc::Code::INVALID_ARGUMENT
    );
    let del = api::DeleteRequest {
        id: "g".into(),
        ..Default::default()
    };
    let (c, msg) = code(svc.delete(&ctx(), del).await);
    assert_eq!(c, ttrpc::Code::UNKNOWN);
    assert_eq!(msg, "delete: removing task g: unmounting the rootfs: EBUSY");
    // A delete that failed keeps the task, so containerd can retry it.
    assert_eq!(status_of(&svc, "g").await, api::Status::STOPPED);
    let exec = api::ExecProcessRequest {
        id: "g".into(),
        ..Default::default()
    };
    assert_eq!(
        code(svc.exec(&ctx(), exec).await).0,
        ttrpc::Code::UNIMPLEMENTED
    );
}
