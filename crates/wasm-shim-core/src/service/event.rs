//! Task events encoded for containerd's event service by the generated code alone.
//!
//! containerd-shim's `RemotePublisher::publish` names an event's type through the message's
//! reflection descriptor. Its first use parses the embedded descriptors of
//! `events/task.proto` and of every file that imports (`descriptor.proto` with its comments
//! among them) and keeps them for the life of the process: about 0.5 MiB of heap in every
//! shim server, one server per pod, to learn a type name the generated code already has.
//! [`TaskEvent::new`] encodes with the generated code and names the type from
//! [`EVENTS_PACKAGE`] and the message's name; the server then hands the envelope to the same
//! publisher queue (`Events::forward`), which keeps its retries.

use containerd_shim::protos::events::task::{
    TaskCreate, TaskDelete, TaskExit, TaskOOM, TaskPaused, TaskResumed, TaskStart,
};
use containerd_shim::protos::protobuf::well_known_types::any::Any;
use containerd_shim::protos::protobuf::Message;

/// The protobuf package of containerd's task events (`api/events/task.proto`): an event's
/// type URL is `<package>.<message>`, as containerd's own shims send it.
pub const EVENTS_PACKAGE: &str = "containerd.events";

/// One of containerd's task event messages.
pub trait TaskEventMessage: Message {
    /// The container the event is about.
    fn container_id(&self) -> &str;
}

macro_rules! task_event_messages {
    ($($m:ty),* $(,)?) => {$(
        impl TaskEventMessage for $m {
            fn container_id(&self) -> &str {
                &self.container_id
            }
        }
    )*};
}

task_event_messages!(
    TaskCreate,
    TaskStart,
    TaskExit,
    TaskDelete,
    TaskOOM,
    TaskPaused,
    TaskResumed
);

/// A task event, encoded as containerd's event service takes it.
#[derive(Debug, Clone)]
pub struct TaskEvent {
    /// The container the event is about.
    pub container_id: String,
    /// The message in an `Any` whose type URL is its full name
    /// (`containerd.events.TaskExit`).
    pub any: Any,
}

impl TaskEvent {
    /// Encodes `msg`; fails only for a message protobuf cannot encode (over 2 GiB).
    pub fn new<M: TaskEventMessage>(msg: &M) -> anyhow::Result<Self> {
        let any = Any {
            type_url: format!("{EVENTS_PACKAGE}.{}", M::NAME),
            value: msg.write_to_bytes()?,
            ..Default::default()
        };
        Ok(TaskEvent {
            container_id: msg.container_id().to_string(),
            any,
        })
    }
}

#[cfg(test)]
mod tests {
    use containerd_shim::protos::protobuf::{MessageField, MessageFull};

    use super::*;

    /// The type URL is what protobuf reflection (and `RemotePublisher::publish`) would name,
    /// and the bytes decode back to the message.
    fn packs_as_reflection_names<M: TaskEventMessage + MessageFull + PartialEq>(msg: M) {
        let ev = TaskEvent::new(&msg).unwrap();
        assert_eq!(ev.any.type_url, M::descriptor().full_name());
        assert_eq!(ev.container_id, msg.container_id());
        assert_eq!(M::parse_from_bytes(&ev.any.value).unwrap(), msg);
    }

    #[test]
    fn every_task_event_is_named_as_containerd_expects() {
        let id = || "c1".to_string();
        let at = || {
            MessageField::some(
                containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp {
                    seconds: 1_765_000_000,
                    nanos: 5,
                    ..Default::default()
                },
            )
        };
        packs_as_reflection_names(TaskCreate {
            container_id: id(),
            bundle: "/run/b".into(),
            pid: 7,
            ..Default::default()
        });
        packs_as_reflection_names(TaskStart {
            container_id: id(),
            pid: 7,
            ..Default::default()
        });
        packs_as_reflection_names(TaskExit {
            container_id: id(),
            id: id(),
            pid: 7,
            exit_status: 137,
            exited_at: at(),
            ..Default::default()
        });
        packs_as_reflection_names(TaskDelete {
            container_id: id(),
            id: id(),
            pid: 7,
            exit_status: 0,
            exited_at: at(),
            ..Default::default()
        });
        packs_as_reflection_names(TaskOOM {
            container_id: id(),
            ..Default::default()
        });
        packs_as_reflection_names(TaskPaused {
            container_id: id(),
            ..Default::default()
        });
        packs_as_reflection_names(TaskResumed {
            container_id: id(),
            ..Default::default()
        });
        assert_eq!(
            TaskEvent::new(&TaskOOM::default()).unwrap().any.type_url,
            "containerd.events.TaskOOM"
        );
    }
}
