//! Reaped pids become task exits (TaskExit), also when the exit is seen before Create
//! has learned the pid.

use super::*;

/// Exits of pids not (yet) known as a container init kept for a later Create (newest win).
pub(super) const EARLY_EXITS_KEPT: usize = 256;

impl Service {
    pub(super) async fn on_exit(&self, pid: i32, code: i32) {
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
                if len > EARLY_EXITS_KEPT {
                    early.drain(..len - EARLY_EXITS_KEPT);
                }
            }
        }
    }

    pub(super) async fn record_exit(&self, c: &Ctr, exit: Exit) {
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
}
