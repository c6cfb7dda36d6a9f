//! Deterministic fault injection around the three stores, for tests that
//! must show what LABIOS promises when its engines misbehave (issue 11):
//! an operation that returned success is never lost; one that returned an
//! error changed nothing or is reported as failed with its outcome
//! unknown; a label delivered twice never changes bytes twice.
//!
//! One layer wraps any warehouse, inventory and label queue (the OpenDAL
//! shape: a cross-cutting concern in one place, composed in one call,
//! [`wrap`]). At each call on the data path a seeded generator decides:
//! pass, fail before the call takes effect, take effect and then report
//! failure (a lost reply), or wait first; a queue push may deliver its
//! items twice, and an acknowledgement may be lost (the queue hands the
//! task out again if it redelivers). The seed fixes the decisions of a
//! sequence of calls; concurrent interleavings still vary between runs.
//!
//! Off unless configured (`[faults] seed` non-zero): never for production.

use crate::inventory::{
    AppRecord, Extent, FileKind, FileMeta, Inventory, Owner, RenameHow, SetAttr, XattrCond,
};
use crate::label_queue::{Delivery, LabelQueue};
use crate::warehouse::Warehouse;
use crate::Stores;
use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{
    AppId, Error, FileId, Label, LabelId, LabelStatus, Result, Task, WorkerId, WorkerStatus,
};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `[faults]`: rates are per million calls of the data path: the stores'
/// calls, and (`error_ppm` and `lost_reply_ppm`) each worker's device
/// calls (`labios_stack::faults`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// 0: no faults at all.
    pub seed: u64,
    /// A call fails before it takes effect.
    pub error_ppm: u32,
    /// A call takes effect, then reports failure.
    pub lost_reply_ppm: u32,
    /// A call first waits up to `max_delay_ms`.
    pub delay_ppm: u32,
    pub max_delay_ms: u64,
    /// A queue push delivers its items twice.
    pub duplicate_ppm: u32,
    /// A queue acknowledgement is reported done but not made.
    pub lost_ack_ppm: u32,
}

impl FaultConfig {
    pub fn enabled(&self) -> bool {
        self.seed != 0
    }

    pub fn validate(&self) -> Result<()> {
        let rates = [
            self.error_ppm,
            self.lost_reply_ppm,
            self.delay_ppm,
            self.duplicate_ppm,
            self.lost_ack_ppm,
        ];
        if rates.iter().any(|&r| r > 1_000_000) {
            return Err(Error::InvalidArgument(
                "faults: every *_ppm rate is at most 1000000".into(),
            ));
        }
        Ok(())
    }
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pass,
    Fail,
    FailAfter,
}

/// Faults injected so far, by kind.
#[derive(Debug, Default)]
pub struct FaultCounts {
    pub errors: AtomicU64,
    pub lost_replies: AtomicU64,
    pub delays: AtomicU64,
    pub duplicates: AtomicU64,
    pub lost_acks: AtomicU64,
}

/// The decisions of one run.
#[derive(Debug)]
pub struct Faults {
    config: FaultConfig,
    rng: parking_lot::Mutex<fastrand::Rng>,
    pub counts: FaultCounts,
}

fn injected(point: &str) -> Error {
    Error::Unavailable(format!("injected fault at {point}"))
}

impl Faults {
    pub fn new(config: FaultConfig) -> Arc<Faults> {
        Arc::new(Faults {
            rng: parking_lot::Mutex::new(fastrand::Rng::with_seed(config.seed)),
            config,
            counts: FaultCounts::default(),
        })
    }

    fn roll(&self, ppm: u32) -> bool {
        ppm > 0 && self.rng.lock().u32(0..1_000_000) < ppm
    }

    /// The fate of a call at `point`, after any delay. `lost_reply` tells
    /// whether the call may take effect and still fail (false for calls
    /// whose failure after effect nobody could tell from success).
    async fn decide(&self, lost_reply: bool) -> Fate {
        if self.roll(self.config.delay_ppm) {
            self.counts.delays.fetch_add(1, Ordering::Relaxed);
            let ms = self.rng.lock().u64(0..=self.config.max_delay_ms);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if self.roll(self.config.error_ppm) {
            self.counts.errors.fetch_add(1, Ordering::Relaxed);
            return Fate::Fail;
        }
        if lost_reply && self.roll(self.config.lost_reply_ppm) {
            self.counts.lost_replies.fetch_add(1, Ordering::Relaxed);
            return Fate::FailAfter;
        }
        Fate::Pass
    }

    /// Runs `call` under a decision: a failure before it, or its result
    /// replaced by a failure after it.
    async fn around<T, F>(&self, point: &str, lost_reply: bool, call: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        match self.decide(lost_reply).await {
            Fate::Fail => Err(injected(point)),
            Fate::Pass => call.await,
            Fate::FailAfter => {
                call.await?;
                Err(injected(point))
            }
        }
    }
}

/// The stores, each behind the fault layer of `config` (unchanged when it
/// is off).
pub fn wrap(stores: Stores, config: &FaultConfig) -> (Stores, Option<Arc<Faults>>) {
    if !config.enabled() {
        return (stores, None);
    }
    let faults = Faults::new(config.clone());
    let wrapped = Stores {
        labels: Arc::new(FaultyQueue::<Label> {
            inner: stores.labels,
            faults: faults.clone(),
        }),
        tasks: Arc::new(FaultyQueue::<Task> {
            inner: stores.tasks,
            faults: faults.clone(),
        }),
        warehouse: Arc::new(FaultyWarehouse {
            inner: stores.warehouse,
            faults: faults.clone(),
        }),
        inventory: Arc::new(FaultyInventory {
            inner: stores.inventory,
            faults: faults.clone(),
        }),
        // Locks decide no byte's fate: they pass unchanged.
        locks: stores.locks,
    };
    (wrapped, Some(faults))
}

struct FaultyWarehouse {
    inner: Arc<dyn Warehouse>,
    faults: Arc<Faults>,
}

#[async_trait]
impl Warehouse for FaultyWarehouse {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.faults
            .around("warehouse put", true, self.inner.put(key, data))
            .await
    }
    async fn put_result(&self, key: &str, data: Bytes) -> Result<()> {
        self.faults
            .around("warehouse put", true, self.inner.put_result(key, data))
            .await
    }
    async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        self.faults
            .around("warehouse get", false, self.inner.get(key))
            .await
    }
    /// A take that took and then failed would lose the value: the engines
    /// do not promise that either, so only failures before it.
    async fn take(&self, key: &str) -> Result<Option<Bytes>> {
        self.faults
            .around("warehouse take", false, self.inner.take(key))
            .await
    }
    async fn delete(&self, key: &str) -> Result<bool> {
        self.faults
            .around("warehouse delete", true, self.inner.delete(key))
            .await
    }
    async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.keys(prefix).await
    }
    async fn usage(&self) -> Result<u64> {
        self.inner.usage().await
    }
}

struct FaultyQueue<T> {
    inner: Arc<dyn LabelQueue<T>>,
    faults: Arc<Faults>,
}

#[async_trait]
impl<T: Clone + Send + Sync + 'static> LabelQueue<T> for FaultyQueue<T> {
    /// No lost replies here: a push reported failed that went through runs
    /// later, after its caller was told it failed, and nothing can tell the
    /// caller otherwise (README "Durability" says so). So a push that is
    /// to fail fails before anything is delivered, and only one that
    /// succeeds may deliver its items twice, the delivery fault of queues.
    async fn push(&self, queue: &str, items: Vec<T>) -> Result<()> {
        if self.faults.decide(false).await == Fate::Fail {
            return Err(injected("queue push"));
        }
        if self.faults.roll(self.faults.config.duplicate_ppm) {
            self.faults
                .counts
                .duplicates
                .fetch_add(1, Ordering::Relaxed);
            self.inner.push(queue, items.clone()).await?;
        }
        self.inner.push(queue, items).await
    }
    async fn pull(&self, queue: &str, max: usize, wait: Duration) -> Result<Vec<Delivery<T>>> {
        self.inner.pull(queue, max, wait).await
    }
    async fn ack(&self, queue: &str, tokens: &[u64]) -> Result<()> {
        if self.faults.roll(self.faults.config.lost_ack_ppm) {
            self.faults.counts.lost_acks.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.inner.ack(queue, tokens).await
    }
    async fn depth(&self, queue: &str) -> Result<usize> {
        self.inner.depth(queue).await
    }
    async fn queues(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.queues(prefix).await
    }
}

struct FaultyInventory {
    inner: Arc<dyn Inventory>,
    faults: Arc<Faults>,
}

#[async_trait]
impl Inventory for FaultyInventory {
    async fn create(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        owner: Owner,
    ) -> Result<FileMeta> {
        self.faults
            .around(
                "inventory create",
                true,
                self.inner.create(path, kind, mode, owner),
            )
            .await
    }
    async fn symlink(&self, path: &str, target: &str, owner: Owner) -> Result<FileMeta> {
        self.faults
            .around(
                "inventory symlink",
                true,
                self.inner.symlink(path, target, owner),
            )
            .await
    }
    async fn set_attr(&self, file: FileId, attr: SetAttr) -> Result<FileMeta> {
        self.faults
            .around("inventory set_attr", true, self.inner.set_attr(file, attr))
            .await
    }
    async fn link(&self, from: &str, to: &str) -> Result<FileMeta> {
        self.faults
            .around("inventory link", true, self.inner.link(from, to))
            .await
    }
    async fn lookup(&self, path: &str) -> Result<Option<FileMeta>> {
        self.faults
            .around("inventory lookup", false, self.inner.lookup(path))
            .await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        self.inner.list(prefix).await
    }
    async fn remove(&self, path: &str) -> Result<(FileMeta, Vec<Extent>)> {
        self.faults
            .around("inventory remove", true, self.inner.remove(path))
            .await
    }
    async fn rename_as(
        &self,
        from: &str,
        to: &str,
        how: RenameHow,
    ) -> Result<Option<(FileMeta, Vec<Extent>)>> {
        self.faults
            .around(
                "inventory rename",
                true,
                self.inner.rename_as(from, to, how),
            )
            .await
    }
    async fn set_size(&self, file: FileId, size: u64) -> Result<()> {
        self.faults
            .around("inventory set_size", true, self.inner.set_size(file, size))
            .await
    }
    async fn commit_extent(&self, file: FileId, extent: Extent) -> Result<()> {
        self.faults
            .around(
                "inventory commit_extent",
                true,
                self.inner.commit_extent(file, extent),
            )
            .await
    }
    async fn reserve_append(&self, file: FileId, len: u64) -> Result<u64> {
        self.faults
            .around(
                "inventory reserve_append",
                true,
                self.inner.reserve_append(file, len),
            )
            .await
    }
    async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.faults
            .around(
                "inventory extents",
                false,
                self.inner.extents(file, offset, len),
            )
            .await
    }
    async fn file(&self, file: FileId) -> Result<Option<FileMeta>> {
        self.faults
            .around("inventory file", false, self.inner.file(file))
            .await
    }
    async fn open(&self, file: FileId, access: u32) -> Result<FileMeta> {
        self.faults
            .around("inventory open", false, self.inner.open(file, access))
            .await
    }
    async fn hold(&self, file: FileId, session: u64) -> Result<bool> {
        self.faults
            .around("inventory hold", false, self.inner.hold(file, session))
            .await
    }
    async fn let_go(&self, file: FileId, session: u64) -> Result<Option<FileMeta>> {
        self.faults
            .around("inventory let_go", false, self.inner.let_go(file, session))
            .await
    }
    async fn let_go_session(&self, session: u64) -> Result<Vec<FileMeta>> {
        self.inner.let_go_session(session).await
    }
    async fn set_xattr_if(
        &self,
        file: FileId,
        name: &str,
        value: Option<Bytes>,
        cond: XattrCond,
    ) -> Result<()> {
        self.faults
            .around(
                "inventory set_xattr",
                true,
                self.inner.set_xattr_if(file, name, value, cond),
            )
            .await
    }
    async fn xattrs(&self, file: FileId) -> Result<Vec<(String, Bytes)>> {
        self.faults
            .around("inventory xattrs", false, self.inner.xattrs(file))
            .await
    }
    async fn set_status(&self, status: LabelStatus) -> Result<()> {
        self.faults
            .around("inventory set_status", true, self.inner.set_status(status))
            .await
    }
    async fn status(&self, id: LabelId) -> Result<Option<LabelStatus>> {
        self.inner.status(id).await
    }
    /// Waiting reclaims the statuses it returns: a reply lost after that
    /// would leave the waiter nothing to find, which the engines do not do
    /// either. Only failures before it.
    async fn wait(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>> {
        self.faults
            .around("inventory wait", false, self.inner.wait(ids, timeout))
            .await
    }
    async fn label_count(&self) -> Result<usize> {
        self.inner.label_count().await
    }
    async fn put_worker(&self, status: WorkerStatus) -> Result<()> {
        self.inner.put_worker(status).await
    }
    async fn workers(&self) -> Result<Vec<WorkerStatus>> {
        self.inner.workers().await
    }
    async fn remove_worker(&self, id: WorkerId) -> Result<()> {
        self.inner.remove_worker(id).await
    }
    async fn ask_stack(&self, id: WorkerId, stack: Vec<String>) -> Result<()> {
        self.inner.ask_stack(id, stack).await
    }
    async fn take_stack(&self, id: WorkerId) -> Result<Option<Vec<String>>> {
        self.inner.take_stack(id).await
    }
    async fn put_app(&self, app: AppRecord) -> Result<()> {
        self.inner.put_app(app).await
    }
    async fn app(&self, id: AppId) -> Result<Option<AppRecord>> {
        self.inner.app(id).await
    }
    async fn apps(&self) -> Result<Vec<AppRecord>> {
        self.inner.apps().await
    }
    async fn put_function(&self, app: AppId, name: &str, module: Option<Bytes>) -> Result<()> {
        self.inner.put_function(app, name, module).await
    }
    async fn function(&self, app: AppId, name: &str) -> Result<Option<Bytes>> {
        self.inner.function(app, name).await
    }
    async fn functions(&self, app: AppId) -> Result<Vec<String>> {
        self.inner.functions(app).await
    }
    async fn next_id(&self, counter: &str) -> Result<u64> {
        self.inner.next_id(counter).await
    }
    async fn sync(&self) -> Result<()> {
        self.inner.sync().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::MemoryWarehouse;

    fn plan(seed: u64) -> FaultConfig {
        FaultConfig {
            seed,
            error_ppm: 200_000,
            lost_reply_ppm: 200_000,
            ..Default::default()
        }
    }

    async fn outcomes(seed: u64) -> Vec<(bool, bool)> {
        let inner: Arc<dyn Warehouse> =
            Arc::new(MemoryWarehouse::new(1 << 20, Duration::from_secs(1)));
        let faulty = FaultyWarehouse {
            inner: inner.clone(),
            faults: Faults::new(plan(seed)),
        };
        let mut out = Vec::new();
        for i in 0..200 {
            let key = format!("k{i}");
            let put = faulty.put(&key, Bytes::from_static(b"x")).await;
            let stored = inner.get(&key).await.unwrap().is_some();
            out.push((put.is_ok(), stored));
        }
        out
    }

    /// The same seed makes the same decisions; a failure is either before
    /// the effect (nothing stored) or after it (stored, reported failed),
    /// and a success always took effect.
    #[tokio::test]
    async fn decisions_replay_by_seed_and_failures_are_before_or_after() {
        let a = outcomes(7).await;
        assert_eq!(a, outcomes(7).await);
        assert_ne!(a, outcomes(8).await);
        assert!(a.iter().all(|&(ok, stored)| !ok || stored));
        assert!(a.iter().any(|&(ok, stored)| !ok && !stored));
        assert!(a.iter().any(|&(ok, stored)| !ok && stored));
    }
}
