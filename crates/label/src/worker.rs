//! Worker and label status records kept in the inventory (article 3.3.3):
//! what the worker manager publishes and what schedulers read.

use crate::id::{AppId, LabelId, WorkerId};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The stack module that tunes who may use a worker (LabStor's permission
/// LabMod; README "Worker I/O stacks"), first in a stack when named.
/// Every worker checks that a label is signed by its owner and touches only
/// the owner's files and warehouse entries; `auth:A+B` also keeps the
/// worker to applications A and B (an island of data only they reach).
/// `auth` alone names those checks explicitly.
pub const AUTH: &str = "auth";

/// Applications admitted by the `auth` module `module` (`auth`: every one,
/// `None`; `auth:3+7`: 3 and 7); an error names a malformed module.
pub fn admitted(module: &str) -> Result<Option<BTreeSet<AppId>>> {
    let bad = |why: &str| {
        Error::InvalidArgument(format!(
            "stack: {module:?}: {why}; write {AUTH} or {AUTH}:APP+APP (application ids)"
        ))
    };
    match module.split_once(':') {
        None if module == AUTH => Ok(None),
        Some((AUTH, apps)) => apps
            .split('+')
            .map(|a| {
                a.parse::<AppId>()
                    .map_err(|_| bad(&format!("{a:?} is not an application id")))
            })
            .collect::<Result<BTreeSet<AppId>>>()
            .map(Some),
        _ => Err(bad("not the auth module")),
    }
}

/// Whether `module` is the `auth` module, with or without applications.
pub fn is_auth(module: &str) -> bool {
    module.split(':').next() == Some(AUTH)
}

/// What a worker running `stack` (module names, first to last) admits, by
/// its `auth` module: `None` (every application) when the stack does not
/// name one or names it without applications. A module that does not
/// parse admits every application: a stack is validated before a worker
/// runs it (and publishes it), so only a status altered in the inventory
/// could hold one, and the worker, which checks its own stack, refuses
/// what it does not admit whatever a scheduler read. Parsed once per
/// stack (a worker's, a scheduling round's), not per label.
pub fn admitted_by(stack: &[String]) -> Option<BTreeSet<AppId>> {
    let first = stack.first().filter(|m| is_auth(m))?;
    admitted(first).ok().flatten()
}

/// Static description of a worker, declared at commission time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub id: WorkerId,
    /// Human name of the storage tier ("ram", "nvme", "hdd", ...).
    pub tier: String,
    /// 1 (<= 200 MB/s) .. 5 (>= 3500 MB/s), article 3.3.3a (iv).
    pub speed: u8,
    /// 1 (lowest power draw at full load) .. 5 (highest).
    pub energy: u8,
    /// Bytes this worker may store.
    pub capacity: u64,
    /// Maximum queue length used to normalize load.
    pub max_queue: u32,
    /// Runs labels with operations (software-defined storage, 3.5.3); the
    /// dispatcher gives such labels only to workers that do.
    pub functions: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WorkerState {
    Active,
    Suspended,
    Decommissioned,
}

/// Live status of a worker, updated by the worker itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub spec: WorkerSpec,
    pub state: WorkerState,
    /// Bytes stored.
    pub used: u64,
    /// Labels waiting in its queue or executing.
    pub queued: u32,
    pub score: f64,
    pub labels_done: u64,
    pub bytes_done: u64,
    /// When the worker last published this status (ns since the epoch): a
    /// worker manager in another process tells a dead worker by its silence.
    pub heartbeat: u64,
    /// The worker's I/O stack as it runs now: module names, the backend
    /// last (README "Worker I/O stacks"); empty until the worker says.
    pub stack: Vec<String>,
    /// Calls, bytes and time at each layer, top first, when the stack
    /// names `metrics` (README "Worker I/O stacks"); empty otherwise.
    pub layers: Vec<LayerStats>,
    /// The host the worker runs on, as it names itself (`[worker] host`,
    /// by default the machine's hostname): where `labios locate` says a
    /// file's bytes are, so that a task can run beside its input.
    pub host: String,
}

/// One layer's counters since its stack was built (the `metrics` layer).
/// Times include the layers below, so a layer's own time is its `nanos`
/// less the next layer's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerStats {
    /// The module as the stack names it (`zstd`, `cache:1MiB`, `file`).
    pub name: String,
    pub writes: u64,
    pub reads: u64,
    /// Flushes, removals, reclamations and write-backs at a stop.
    pub others: u64,
    /// Bytes of successful writes and reads.
    pub written: u64,
    pub read: u64,
    /// Time in calls to this layer and everything below it.
    pub nanos: u64,
}

impl WorkerStatus {
    pub fn new(spec: WorkerSpec) -> Self {
        WorkerStatus {
            spec,
            state: WorkerState::Active,
            used: 0,
            queued: 0,
            score: 0.0,
            labels_done: 0,
            bytes_done: 0,
            heartbeat: crate::id::now_nanos(),
            stack: Vec::new(),
            layers: Vec::new(),
            host: String::new(),
        }
    }

    pub fn remaining(&self) -> u64 {
        self.spec.capacity.saturating_sub(self.used)
    }

    /// The applications the worker's stack lets run there (its `auth`
    /// module, [`AUTH`]; `None`: every one); schedulers place an
    /// application's new data only on workers that admit it.
    pub fn admitted(&self) -> Option<BTreeSet<AppId>> {
        admitted_by(&self.stack)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LabelState {
    Queued,
    Scheduled,
    Complete,
    Failed,
}

impl LabelState {
    pub fn is_final(self) -> bool {
        matches!(self, LabelState::Complete | LabelState::Failed)
    }
}

/// Inventory record of a published label (article 3.3.1c: label status and
/// label -> worker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelStatus {
    pub id: LabelId,
    pub state: LabelState,
    pub worker: Option<WorkerId>,
    pub error: Option<String>,
    /// Where a read label left its result in the warehouse.
    pub result_key: Option<String>,
    pub result_len: u64,
}

impl LabelStatus {
    pub fn new(id: LabelId, state: LabelState) -> Self {
        LabelStatus {
            id,
            state,
            worker: None,
            error: None,
            result_key: None,
            result_len: 0,
        }
    }
}

/// The worker pool as schedulers see it (article 3.3.3b: the dispatcher asks
/// the worker manager for workers). Implemented by the in-process worker
/// manager and by a cached view of the inventory for remote dispatchers.
pub trait WorkerDirectory: Send + Sync {
    /// Every commissioned worker with its latest status, best score first.
    fn workers(&self) -> Vec<WorkerStatus>;
    /// Every commissioned worker, including those an elastic allocation
    /// holds in reserve (which [`WorkerDirectory::workers`] leaves out):
    /// placement by hints ranks over these, so that a group's worker does
    /// not change each time the reserve wakes or sleeps.
    fn commissioned(&self) -> Vec<WorkerStatus> {
        self.workers()
    }
    /// Tells the directory that labels were just assigned, so load seen by
    /// the next scheduling round includes them before workers report back.
    fn assigned(&self, worker: WorkerId, labels: u32, bytes: u64) {
        let _ = (worker, labels, bytes);
    }
}
