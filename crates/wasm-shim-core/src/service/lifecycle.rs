//! Bookkeeping that keeps exits and ids straight when containers come and go concurrently:
//! per-create exit subscriptions (as containerd's runc shim subscribes before each start),
//! id reservations taken before Create's first await, and the per-task start gate that
//! orders TaskExit after TaskStart without making exits wait for a Start.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, also after a panic poisoned it: the data guarded here stays consistent (every
/// critical section is a plain insert, remove or copy), and a poisoned lock must not end
/// exit reporting for the whole pod.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Most exits one pending create keeps (its window is one create; more means a fork storm).
pub(super) const EXITS_PER_CREATE: usize = 256;

/// Routes exits of pids that are no known container's init to the creates in flight.
///
/// An exit that arrives while no create is in flight belongs to no future container (it is
/// libcontainer's intermediate process, or a reaped orphan) and is dropped, so a later init
/// that reuses the pid is never reported as exited. A create subscribes before it asks for
/// the container and claims its init pid's exit, if it came early, when it registers the
/// container; everything else it saw is dropped with the subscription.
pub(super) struct ExitRouter<E> {
    state: Mutex<RouterState<E>>,
}

struct RouterState<E> {
    next: u64,
    pending: HashMap<u64, Vec<(i32, E)>>,
}

/// A create's subscription (see [`ExitRouter::subscribe`]); dropping it unsubscribes.
pub(super) struct Subscription<'a, E> {
    router: &'a ExitRouter<E>,
    id: u64,
}

impl<E: Clone> ExitRouter<E> {
    pub(super) fn new() -> Self {
        ExitRouter {
            state: Mutex::new(RouterState {
                next: 0,
                pending: HashMap::new(),
            }),
        }
    }

    /// Starts collecting unmatched exits for one create.
    pub(super) fn subscribe(&self) -> Subscription<'_, E> {
        let mut st = lock(&self.state);
        let id = st.next;
        st.next += 1;
        st.pending.insert(id, Vec::new());
        Subscription { router: self, id }
    }

    /// Handles the exit of `pid`: `find` looks the pid up among the known containers (run
    /// under the router's lock, so a create cannot register in between); if it finds none
    /// the exit goes to every create in flight, or nowhere. Returns what `find` found.
    pub(super) fn route<C>(
        &self,
        pid: i32,
        exit: E,
        find: impl FnOnce() -> Option<C>,
    ) -> Option<C> {
        let mut st = lock(&self.state);
        let found = find();
        if found.is_none() {
            for seen in st.pending.values_mut() {
                if seen.len() >= EXITS_PER_CREATE {
                    seen.remove(0);
                }
                seen.push((pid, exit.clone()));
            }
        }
        found
    }

    /// Number of creates in flight.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        lock(&self.state).pending.len()
    }
}

impl<E> Subscription<'_, E> {
    /// Registers the container (`register` runs under the router's lock, so no exit can fall
    /// between the subscription and the container table) and returns the exit of `pid` seen
    /// since [`ExitRouter::subscribe`], if any. Ends the subscription.
    pub(super) fn claim(self, pid: i32, register: impl FnOnce()) -> Option<E> {
        let mut st = lock(&self.router.state);
        register();
        let seen = st.pending.remove(&self.id).unwrap_or_default();
        seen.into_iter()
            .rev()
            .find(|(p, _)| *p == pid)
            .map(|(_, e)| e)
    }
}

impl<E> Drop for Subscription<'_, E> {
    fn drop(&mut self) {
        lock(&self.router.state).pending.remove(&self.id);
    }
}

/// Ids whose Create is under way.
pub(super) struct Reservations {
    ids: Mutex<HashSet<String>>,
}

/// A reserved id (see [`Reservations::reserve`]); dropping it frees the id.
pub(super) struct Reservation<'a> {
    owner: &'a Reservations,
    id: String,
}

impl Reservations {
    pub(super) fn new() -> Self {
        Reservations {
            ids: Mutex::new(HashSet::new()),
        }
    }

    /// Reserves `id` unless a Create for it is under way or `exists` says a container has
    /// it; None means the id is taken.
    pub(super) fn reserve(
        &self,
        id: &str,
        exists: impl FnOnce() -> bool,
    ) -> Option<Reservation<'_>> {
        let mut ids = lock(&self.ids);
        if ids.contains(id) || exists() {
            return None;
        }
        ids.insert(id.to_string());
        Some(Reservation {
            owner: self,
            id: id.to_string(),
        })
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        lock(&self.owner.ids).remove(&self.id);
    }
}

/// Per task: Start and Delete exclude each other (a Delete never cleans up under a Start);
/// exits never wait for either. An exit recorded while a Start is under way has its event
/// held back until that Start's TaskStart is out, so containerd never sees TaskExit first.
pub(super) struct StartGate<Ev> {
    serial: tokio::sync::Mutex<()>,
    state: Mutex<GateState<Ev>>,
}

struct GateState<Ev> {
    starting: bool,
    deferred: Option<Ev>,
}

/// A Start under way (see [`StartGate::begin_start`]).
pub(super) struct Starting<'a, Ev> {
    gate: &'a StartGate<Ev>,
    _serial: tokio::sync::MutexGuard<'a, ()>,
}

impl<Ev> StartGate<Ev> {
    pub(super) fn new() -> Self {
        StartGate {
            serial: tokio::sync::Mutex::new(()),
            state: Mutex::new(GateState {
                starting: false,
                deferred: None,
            }),
        }
    }

    /// Begins a Start, after a Start or Delete under way has finished.
    pub(super) async fn begin_start(&self) -> Starting<'_, Ev> {
        let serial = self.serial.lock().await;
        lock(&self.state).starting = true;
        Starting {
            gate: self,
            _serial: serial,
        }
    }

    /// Begins a Delete, after a Start under way has finished; the guard holds off Starts.
    pub(super) async fn begin_delete(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.serial.lock().await
    }

    /// Takes the event of an exit: returned to be published now, or kept (None) for the
    /// Start under way. Never waits.
    pub(super) fn exit(&self, ev: Ev) -> Option<Ev> {
        let mut st = lock(&self.state);
        if st.starting {
            st.deferred = Some(ev);
            None
        } else {
            Some(ev)
        }
    }
}

impl<Ev> Starting<'_, Ev> {
    /// Ends the Start (call it after publishing TaskStart, also when the Start failed):
    /// the exit event held back meanwhile, to publish now.
    pub(super) fn finish(self) -> Option<Ev> {
        let mut st = lock(&self.gate.state);
        st.starting = false;
        st.deferred.take()
    }
}

impl<Ev> Drop for Starting<'_, Ev> {
    fn drop(&mut self) {
        lock(&self.gate.state).starting = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fake process monitor: the exits the reaper would report, in order, against a
    /// container table.
    struct Monitor {
        router: ExitRouter<i32>,
        containers: Mutex<HashMap<i32, &'static str>>,
        reported: Mutex<Vec<(&'static str, i32)>>,
    }

    impl Monitor {
        fn new() -> Self {
            Monitor {
                router: ExitRouter::new(),
                containers: Mutex::new(HashMap::new()),
                reported: Mutex::new(Vec::new()),
            }
        }
        fn exit(&self, pid: i32, code: i32) {
            let c = self
                .router
                .route(pid, code, || lock(&self.containers).get(&pid).copied());
            if let Some(id) = c {
                lock(&self.reported).push((id, code));
            }
        }
        /// Create of `id` whose init is `pid`; `during` runs while it is in flight.
        fn create(&self, id: &'static str, pid: i32, during: impl FnOnce()) -> Option<i32> {
            let sub = self.router.subscribe();
            during();
            sub.claim(pid, || {
                lock(&self.containers).insert(pid, id);
            })
        }
    }

    #[test]
    fn a_stale_exit_is_never_pinned_on_a_new_container_that_reuses_the_pid() {
        let m = Monitor::new();
        // libcontainer's intermediate process (pid 300) exits during create a; its init is 301.
        assert_eq!(m.create("a", 301, || m.exit(300, 0)), None);
        // Nothing in flight: an orphan reaped now is forgotten.
        m.exit(302, 9);
        // The pid counter wraps: b's init gets 300, then 302: no exit for either.
        assert_eq!(m.create("b", 300, || {}), None);
        assert_eq!(m.create("c", 302, || {}), None);
        assert!(lock(&m.reported).is_empty());
        assert_eq!(m.router.in_flight(), 0);
        m.exit(300, 137);
        assert_eq!(*lock(&m.reported), [("b", 137)]);
    }

    #[test]
    fn an_exit_before_the_create_registers_is_kept_for_that_create() {
        let m = Monitor::new();
        // The init dies before Create has registered it (a crash right after clone).
        assert_eq!(m.create("a", 401, || m.exit(401, 1)), Some(1));
        // Concurrent creates: each claims only its own pid.
        let sub_b = m.router.subscribe();
        let early_c = m.create("c", 501, || {
            m.exit(500, 0); // b's init
            m.exit(501, 2); // c's init
        });
        assert_eq!(early_c, Some(2));
        let early_b = sub_b.claim(500, || {
            lock(&m.containers).insert(500, "b");
        });
        assert_eq!(early_b, Some(0));
        // A failed create (dropped subscription) leaves nothing behind.
        drop(m.router.subscribe());
        assert_eq!(m.router.in_flight(), 0);
    }

    #[test]
    fn a_poisoned_lock_does_not_stop_exit_routing() {
        let m = Monitor::new();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = m.containers.lock().unwrap();
            panic!("a handler failed while holding the container table");
        }));
        assert!(m.containers.is_poisoned());
        assert_eq!(m.create("a", 7, || {}), None);
        m.exit(7, 0);
        assert_eq!(*lock(&m.reported), [("a", 0)]);
    }

    #[test]
    fn an_exit_during_a_start_is_held_until_the_start_is_out_and_never_waits() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let gate: StartGate<&str> = StartGate::new();
            // No Start under way: the exit goes out at once.
            assert_eq!(gate.exit("early"), Some("early"));
            let start = gate.begin_start().await;
            // The exit is taken while the Start holds its lock (a stuck Start must not
            // stall exits), and held back for it.
            assert_eq!(gate.exit("exit"), None);
            assert_eq!(start.finish(), Some("exit"));
            // A Start that ended without finish (a failed or cancelled Start) holds
            // nothing back afterwards.
            drop(gate.begin_start().await);
            assert_eq!(gate.exit("later"), Some("later"));
        });
    }

    #[test]
    fn a_delete_during_a_start_waits_for_the_start() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let gate = std::sync::Arc::new(StartGate::<()>::new());
            let order = std::sync::Arc::new(Mutex::new(Vec::new()));
            let start = gate.begin_start().await;
            let (g, o) = (gate.clone(), order.clone());
            let delete = tokio::spawn(async move {
                let _d = g.begin_delete().await;
                lock(&o).push("delete");
            });
            // The Delete is parked behind the Start however long it runs.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert!(lock(&order).is_empty());
            lock(&order).push("start done");
            assert_eq!(start.finish(), None);
            delete.await.unwrap();
            assert_eq!(*lock(&order), ["start done", "delete"]);
            // And a Start waits for a Delete under way.
            let d = gate.begin_delete().await;
            let g = gate.clone();
            let start = tokio::spawn(async move { drop(g.begin_start().await) });
            tokio::task::yield_now().await;
            assert!(!start.is_finished());
            drop(d);
            start.await.unwrap();
        });
    }

    #[test]
    fn an_id_is_reserved_before_its_create_and_freed_after() {
        let r = Reservations::new();
        let first = r.reserve("x", || false).expect("free id");
        // A duplicate Create while the first is under way is refused, not started.
        assert!(r.reserve("x", || false).is_none());
        assert!(r.reserve("y", || false).is_some());
        drop(first);
        // Once the first registered its container the table answers.
        assert!(r.reserve("x", || true).is_none());
        assert!(r.reserve("x", || false).is_some());
    }
}
