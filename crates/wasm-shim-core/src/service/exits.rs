//! Reaped pids become task exits (TaskExit), also when the exit is seen before Create
//! has learned the pid; exits of pids no create is waiting for are dropped.

use super::*;

impl<B: Backend> Service<B> {
    /// Reports that `pid`, a child of this process, exited with `code` (as the process
    /// monitor does for every reaped pid).
    pub async fn on_exit(&self, pid: i32, code: i32) {
        let exit = Exit {
            code: code as u32,
            at: Timestamp::now(),
        };
        let ctr = self.inner.exits.route(pid, exit.clone(), || {
            lock(&self.inner.containers)
                .values()
                .find(|c| c.pid == pid)
                .cloned()
        });
        if let Some(c) = ctr {
            self.record_exit(&c, exit).await;
        }
    }

    /// Records the task's exit at once; publishes TaskExit now, or after TaskStart when a
    /// Start is under way.
    pub(super) async fn record_exit(&self, c: &Ctr<B::Container>, exit: Exit) {
        // Under the exit channel's lock, so a concurrent state change cannot undo Stopped
        // (see `Service::transition`).
        let first = c.exit.send_if_modified(|cur| {
            if cur.is_some() {
                return false;
            }
            c.set_phase(Phase::Stopped);
            *cur = Some(exit.clone());
            true
        });
        if !first {
            return;
        }
        tracing::debug!(id = %c.id, pid = c.pid, code = exit.code, "task exited");
        let ev = TaskExit {
            container_id: c.id.clone(),
            id: c.id.clone(),
            pid: c.pid as u32,
            exit_status: exit.code,
            exited_at: MessageField::some(exit.at),
            ..Default::default()
        };
        if let Some(ev) = c.gate.exit(ev) {
            self.publish(topics::TASK_EXIT_EVENT_TOPIC, ev).await;
        }
    }
}
