//! Builders shared by the dispatcher's unit tests.

pub(crate) use super::bench::{read_label as read, write_label as write};
use super::shuffler::Routed;
use labios_label::{Label, Task, WorkerSpec, WorkerStatus};

/// An active, empty worker with plenty of room.
pub(crate) fn worker(id: u32, speed: u8, energy: u8) -> WorkerStatus {
    WorkerStatus::new(WorkerSpec {
        id,
        tier: "test".into(),
        speed,
        energy,
        capacity: 1 << 40,
        max_queue: 1024,
        functions: true,
    })
}

/// One unpinned single-label task per label.
pub(crate) fn routed(labels: Vec<Label>) -> Vec<Routed> {
    labels
        .into_iter()
        .map(|l| Routed {
            task: Task::single(l),
            pinned: None,
        })
        .collect()
}
