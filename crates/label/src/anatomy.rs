//! Where a label's time goes (the article's Figure 11). Components add the
//! time they spend on a phase to process-wide counters, only while a
//! measurement is switched on, so the hot path pays one relaxed load when it
//! is off. Meaningful for the embedded runtime, where all components share
//! one process.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Client: data into the warehouse.
    WarehousePut,
    /// Client: label into the label queue.
    QueuePublish,
    /// Dispatcher: read locality look-ups and shuffling.
    Shuffle,
    /// Dispatcher: the scheduling policy.
    Schedule,
    /// Dispatcher: tasks into worker queues.
    DispatchPublish,
    /// Worker: warehouse get/put/delete.
    WorkerWarehouse,
    /// Worker: reads and writes on its device.
    WorkerStorage,
    /// Worker: inventory updates (extents, label status).
    WorkerInventory,
    /// Client: read results out of the warehouse.
    ResultFetch,
}

pub const PHASES: [Phase; 9] = [
    Phase::WarehousePut,
    Phase::QueuePublish,
    Phase::Shuffle,
    Phase::Schedule,
    Phase::DispatchPublish,
    Phase::WorkerWarehouse,
    Phase::WorkerStorage,
    Phase::WorkerInventory,
    Phase::ResultFetch,
];

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::WarehousePut => "client: warehouse put",
            Phase::QueuePublish => "client: label queue publish",
            Phase::Shuffle => "dispatcher: shuffle",
            Phase::Schedule => "dispatcher: schedule",
            Phase::DispatchPublish => "dispatcher: publish to worker queue",
            Phase::WorkerWarehouse => "worker: warehouse",
            Phase::WorkerStorage => "worker: storage I/O",
            Phase::WorkerInventory => "worker: inventory update",
            Phase::ResultFetch => "client: result from warehouse",
        }
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static NANOS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];

/// Switches measurement on or off and clears the counters.
pub fn enable(on: bool) {
    for n in &NANOS {
        n.store(0, Ordering::Relaxed);
    }
    ON.store(on, Ordering::Relaxed);
}

/// A start time, only while measuring.
pub fn start() -> Option<Instant> {
    ON.load(Ordering::Relaxed).then(Instant::now)
}

pub fn record(phase: Phase, since: Option<Instant>) {
    if let Some(t) = since {
        NANOS[phase as usize].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Nanoseconds per phase since the last `enable`.
pub fn totals() -> Vec<(Phase, u64)> {
    PHASES
        .iter()
        .map(|p| (*p, NANOS[*p as usize].load(Ordering::Relaxed)))
        .collect()
}
