//! The unit the dispatcher hands to a worker: one label, several labels
//! aggregated for locality, or a supertask of dependent labels. Either way the
//! worker executes the labels strictly in the order given.

use crate::label::Label;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub labels: Vec<Label>,
    /// Consecutive writes merged by the shuffler: the worker may write them
    /// with one vectored call.
    pub aggregated: bool,
    /// Labels with RAW/WAW/WAR dependencies: strict order, one worker.
    pub supertask: bool,
}

impl Task {
    pub fn single(label: Label) -> Self {
        Task {
            labels: vec![label],
            aggregated: false,
            supertask: false,
        }
    }

    /// A task with no labels: an activation message (article 3.3.3b). A
    /// worker manager in another process wakes a suspended worker by putting
    /// one in its queue, since the worker's only input is its queue; the
    /// worker acknowledges it and executes nothing.
    pub fn wake_up() -> Self {
        Task {
            labels: Vec::new(),
            aggregated: false,
            supertask: false,
        }
    }

    /// Whether this is an activation message ([`Task::wake_up`]).
    pub fn is_wake_up(&self) -> bool {
        self.labels.is_empty()
    }

    /// Total bytes moved by the task (scheduling weight).
    pub fn size(&self) -> u64 {
        self.labels.iter().map(|l| l.size()).sum()
    }
}
