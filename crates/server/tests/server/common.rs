//! A test rig: embedded stores, labels built by hand, a task queue that can
//! be held shut to make a worker's queue build up.

use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{
    FileId, Label, LabelIdGen, LabelKind, LabelState, LabelStatus, Pointer, Result, Task, WorkerId,
    WorkerSpec,
};
use labios_store::embedded::{MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::{worker_queue, Delivery, FileKind, FileMeta, Inventory, LabelQueue, Stores};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The task queue, with pulls on chosen queues held back.
pub struct GatedQueue {
    inner: MemoryQueue<Task>,
    gates: Mutex<Gates>,
    /// While set, a depth query never answers (a queue service coming
    /// back after a restart).
    pub depth_stalls: std::sync::atomic::AtomicBool,
    /// While set, each depth query (a worker's tick asks one right after
    /// publishing its heartbeat) first records the heartbeat of every
    /// worker the inventory holds.
    pub heartbeats: Mutex<Option<HeartbeatLog>>,
    /// Signalled when a pull inside `inner` ends.
    pulled: Notify,
}

/// The inventory heartbeats are read from, and what was read, per depth query.
pub type HeartbeatLog = (Arc<dyn Inventory>, Vec<Vec<u64>>);

#[derive(Default)]
struct Gates {
    closed: HashSet<String>,
    /// Pulls running inside `inner`, per queue: closing waits them out, as
    /// one may still take what is pushed after the gate shut.
    pulling: HashMap<String, usize>,
}

impl GatedQueue {
    /// Shuts `queue`: once this returns, nothing is taken from it until
    /// [`GatedQueue::open`].
    pub async fn close(&self, queue: &str) {
        self.gates.lock().closed.insert(queue.to_string());
        loop {
            let pulled = self.pulled.notified();
            tokio::pin!(pulled);
            pulled.as_mut().enable();
            if self.gates.lock().pulling.get(queue).copied().unwrap_or(0) == 0 {
                return;
            }
            pulled.await;
        }
    }
    pub fn open(&self, queue: &str) {
        self.gates.lock().closed.remove(queue);
    }
}

#[async_trait]
impl LabelQueue<Task> for GatedQueue {
    async fn push(&self, queue: &str, items: Vec<Task>) -> Result<()> {
        self.inner.push(queue, items).await
    }
    async fn pull(&self, queue: &str, max: usize, wait: Duration) -> Result<Vec<Delivery<Task>>> {
        // Short slices, so a pull already waiting notices the gate closing.
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let slice = Duration::from_millis(10);
            let open = {
                let mut gates = self.gates.lock();
                let open = !gates.closed.contains(queue);
                if open {
                    *gates.pulling.entry(queue.to_string()).or_default() += 1;
                }
                open
            };
            if open {
                let got = self.inner.pull(queue, max, slice).await;
                *self
                    .gates
                    .lock()
                    .pulling
                    .entry(queue.to_string())
                    .or_default() -= 1;
                self.pulled.notify_waiters();
                let got = got?;
                if !got.is_empty() {
                    return Ok(got);
                }
            } else {
                tokio::time::sleep(slice).await;
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }
    async fn ack(&self, queue: &str, tokens: &[u64]) -> Result<()> {
        self.inner.ack(queue, tokens).await
    }
    async fn depth(&self, queue: &str) -> Result<usize> {
        let watched = self.heartbeats.lock().as_ref().map(|(i, _)| i.clone());
        if let Some(inventory) = watched {
            let beats = inventory
                .workers()
                .await?
                .iter()
                .map(|w| w.heartbeat)
                .collect();
            if let Some((_, log)) = self.heartbeats.lock().as_mut() {
                log.push(beats);
            }
        }
        if self.depth_stalls.load(std::sync::atomic::Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
        self.inner.depth(queue).await
    }
    async fn queues(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.queues(prefix).await
    }
}

/// The secret of application 1, which owns every label the rig builds.
pub const SECRET: &str = "rig-secret";

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub stores: Stores,
    pub gate: Arc<GatedQueue>,
    ids: LabelIdGen,
}

impl Rig {
    pub fn new() -> Rig {
        Rig::with_bounds(4096, 256 << 20)
    }

    /// A rig whose task queues hold at most `bound` tasks each, and its
    /// warehouse `warehouse` bytes.
    pub fn with_bounds(bound: usize, warehouse: u64) -> Rig {
        let gate = Arc::new(GatedQueue {
            inner: MemoryQueue::new(bound, Duration::from_secs(5)),
            gates: Mutex::new(Gates::default()),
            depth_stalls: std::sync::atomic::AtomicBool::new(false),
            heartbeats: Mutex::new(None),
            pulled: Notify::new(),
        });
        let stores = Stores {
            labels: Arc::new(MemoryQueue::new(1024, Duration::from_secs(5))),
            tasks: gate.clone(),
            warehouse: Arc::new(MemoryWarehouse::new(warehouse, Duration::from_secs(5))),
            inventory: Arc::new(RedbInventory::in_memory().unwrap()),
            locks: Arc::new(labios_store::locks::MemoryLocks::default()),
        };
        Rig {
            dir: tempfile::tempdir().unwrap(),
            stores,
            gate,
            ids: LabelIdGen::new(1),
        }
    }

    pub fn worker_dir(&self, id: WorkerId) -> PathBuf {
        self.dir.path().join(format!("worker{id}"))
    }

    pub async fn file(&self, path: &str) -> FileMeta {
        self.stores
            .inventory
            .create(path, FileKind::File, 0o644, labios_store::Owner::root(1))
            .await
            .unwrap()
    }

    /// A write label whose data is already in the warehouse.
    pub async fn write(&self, file: &FileMeta, offset: u64, data: &[u8]) -> Label {
        let mut label = Label::new(self.ids.next(), LabelKind::Write, 1);
        let key = format!("a1/w/{}", label.id);
        self.stores
            .warehouse
            .put(&key, Bytes::copy_from_slice(data))
            .await
            .unwrap();
        label.source = Pointer::Warehouse {
            key,
            len: data.len() as u64,
        };
        label.destination = file_ptr(file, offset, data.len() as u64);
        label
    }

    pub fn read(&self, file: &FileMeta, offset: u64, len: u64) -> Label {
        let mut label = Label::new(self.ids.next(), LabelKind::Read, 1);
        label.source = file_ptr(file, offset, len);
        label.destination = Pointer::Warehouse {
            key: format!("a1/r/{}", label.id),
            len,
        };
        label
    }

    pub fn on_file(&self, kind: LabelKind, file: &FileMeta) -> Label {
        let mut label = Label::new(self.ids.next(), kind, 1);
        label.source = file_ptr(file, 0, 0);
        label
    }

    pub fn rename(&self, from: &FileMeta, to: &str) -> Label {
        let mut label = Label::new(self.ids.next(), LabelKind::Rename, 1);
        label.source = file_ptr(from, 0, 0);
        label.destination = Pointer::File {
            path: to.to_string(),
            file: 0,
            offset: 0,
            len: 0,
        };
        label
    }

    /// Registers application 1 and signs every label with its secret, as a
    /// client would: workers verify labels before running them.
    pub async fn push(&self, worker: WorkerId, mut tasks: Vec<Task>) {
        self.stores
            .inventory
            .put_app(labios_store::AppRecord {
                id: 1,
                name: "rig".into(),
                key: "LBKRIG".into(),
                secret: SECRET.into(),
                settings: Vec::new(),
            })
            .await
            .unwrap();
        for label in tasks.iter_mut().flat_map(|t| t.labels.iter_mut()) {
            labios_label::auth::sign(label, SECRET.as_bytes());
        }
        self.stores
            .tasks
            .push(&worker_queue(worker), tasks)
            .await
            .unwrap();
    }

    /// Pushes each label as its own task and waits for all of them.
    pub async fn run(&self, worker: WorkerId, labels: Vec<Label>) -> Vec<LabelStatus> {
        let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
        self.push(worker, labels.into_iter().map(Task::single).collect())
            .await;
        self.wait(&ids).await
    }

    pub async fn wait(&self, ids: &[labios_label::LabelId]) -> Vec<LabelStatus> {
        let statuses = self
            .stores
            .inventory
            .wait(ids, Duration::from_secs(20))
            .await
            .unwrap();
        assert!(
            statuses.iter().all(|s| s.state.is_final()),
            "labels not final: {statuses:?}"
        );
        statuses
    }

    /// Bytes a completed read left in the warehouse.
    pub async fn result(&self, status: &LabelStatus) -> Bytes {
        assert_eq!(status.state, LabelState::Complete, "{status:?}");
        let key = status.result_key.as_ref().expect("read has a result key");
        let data = self.stores.warehouse.take(key).await.unwrap().unwrap();
        assert_eq!(data.len() as u64, status.result_len);
        data
    }
}

pub fn file_ptr(file: &FileMeta, offset: u64, len: u64) -> Pointer {
    Pointer::File {
        path: file.path.clone(),
        file: file.id,
        offset,
        len,
    }
}

pub fn spec(id: WorkerId, capacity: u64) -> WorkerSpec {
    WorkerSpec {
        id,
        tier: "test".into(),
        speed: 3,
        energy: 3,
        capacity,
        max_queue: 64,
        functions: true,
    }
}

pub fn local(dir: &Path, file: FileId) -> PathBuf {
    dir.join("files").join(format!("{file:016x}"))
}

pub fn complete(statuses: &[LabelStatus]) {
    for s in statuses {
        assert_eq!(s.state, LabelState::Complete, "{s:?}");
    }
}

/// Every regular file under `root`.
pub fn tree(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
