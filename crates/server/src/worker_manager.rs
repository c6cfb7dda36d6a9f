//! The worker manager (article 3.3.3b): keeps the workers' statuses, sorted
//! by score in [`ScoreBuckets`], for the dispatcher ([`WorkerDirectory`]);
//! balances load by waking suspended workers when queues build up (elastic
//! allocation); commissions and decommissions workers.
//!
//! Decommissioning is gentle: the worker is published as Decommissioned, so
//! schedulers stop sending it new unpinned work, but it keeps serving its
//! queue, including reads and deletes pinned to it because it holds the
//! data. Once it holds no data and its queue is empty, the manager stops it
//! and removes it from the inventory.

mod buckets;

pub use buckets::ScoreBuckets;

use crate::worker::{Worker, WorkerConfig, WorkerHandle};
use labios_label::{
    Error, Result, Weights, WorkerDirectory, WorkerId, WorkerSpec, WorkerState, WorkerStatus,
};
use labios_stack::Place;
use labios_store::Stores;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How long the manager waits for a woken worker to report Active.
const WAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Wake-up latencies kept for inspection.
const LATENCIES_KEPT: usize = 1024;

/// Worker manager settings, from configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ManagerConfig {
    /// "static": only the workers that are active serve (the dispatcher
    /// places labels on them); "elastic": suspended workers are woken when
    /// the active ones fall behind (article 4.2.3).
    pub allocation: String,
    /// Elastic: workers kept active; the rest start suspended.
    pub min_active: usize,
    /// Elastic: average queued labels per active worker above which one
    /// more suspended worker is woken.
    pub wake_threshold: u32,
    /// Period of the load-balancing loop.
    pub interval_ms: u64,
    /// Bins of the score sort.
    pub buckets: usize,
    /// `labios manager` (distributed deployment): a worker whose status
    /// (heartbeat) has not been published for this long is declared down,
    /// taken out of scheduling and its queued tasks are re-dispatched.
    /// Must exceed `worker.score_interval_ms`, the heartbeat period.
    pub dead_after_ms: u64,
    /// `labios manager`: start the configured workers as processes itself
    /// (and stop them when it stops) instead of expecting them started.
    pub launch: bool,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            allocation: "static".into(),
            min_active: 1,
            wake_threshold: 64,
            interval_ms: 100,
            buckets: 10,
            dead_after_ms: 3000,
            launch: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allocation {
    Static,
    Elastic,
}

impl ManagerConfig {
    /// Whether the allocation is "elastic" (validated separately).
    pub fn elastic(&self) -> bool {
        self.allocation == "elastic"
    }

    fn allocation(&self) -> Result<Allocation> {
        match self.allocation.as_str() {
            "static" => Ok(Allocation::Static),
            "elastic" => Ok(Allocation::Elastic),
            other => Err(Error::InvalidArgument(format!(
                "worker allocation {other:?} is neither \"static\" nor \"elastic\""
            ))),
        }
    }

    pub fn validate(&self) -> Result<()> {
        self.allocation()?;
        if self.interval_ms == 0 || self.buckets == 0 || self.dead_after_ms == 0 {
            return Err(Error::InvalidArgument(
                "manager interval_ms, buckets and dead_after_ms must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// The pool as the dispatcher sees it: statuses and their score order.
struct View {
    statuses: HashMap<WorkerId, WorkerStatus>,
    buckets: ScoreBuckets,
}

impl View {
    fn set(&mut self, status: WorkerStatus) {
        self.buckets.update(status.spec.id, status.score);
        self.statuses.insert(status.spec.id, status);
    }

    fn sorted(&self) -> Vec<WorkerStatus> {
        self.buckets
            .sorted()
            .iter()
            .filter_map(|(id, _)| self.statuses.get(id).cloned())
            .collect()
    }
}

struct Inner {
    stores: Stores,
    config: ManagerConfig,
    worker_config: WorkerConfig,
    weights: Weights,
    handles: Mutex<BTreeMap<WorkerId, WorkerHandle>>,
    view: RwLock<View>,
    wake_latencies: Mutex<VecDeque<Duration>>,
    stopping: AtomicBool,
    stop: Notify,
}

pub struct WorkerManager {
    inner: Arc<Inner>,
    balancer: Mutex<Option<JoinHandle<()>>>,
}

impl WorkerManager {
    /// A manager with no workers yet. Configuration errors surface at the
    /// first [`WorkerManager::commission`].
    pub fn new(
        stores: Stores,
        config: ManagerConfig,
        worker_config: WorkerConfig,
        weights: Weights,
    ) -> Self {
        let buckets = ScoreBuckets::new(config.buckets);
        WorkerManager {
            inner: Arc::new(Inner {
                stores,
                config,
                worker_config,
                weights,
                handles: Mutex::new(BTreeMap::new()),
                view: RwLock::new(View {
                    statuses: HashMap::new(),
                    buckets,
                }),
                wake_latencies: Mutex::new(VecDeque::new()),
                stopping: AtomicBool::new(false),
                stop: Notify::new(),
            }),
            balancer: Mutex::new(None),
        }
    }

    /// Starts a worker storing under `dir`. In elastic allocation, workers
    /// beyond `min_active` active ones are suspended right after start.
    pub async fn commission(&self, spec: WorkerSpec, place: impl Into<Place>) -> Result<WorkerId> {
        let inner = &self.inner;
        inner.config.validate()?;
        if inner.stopping.load(Ordering::Acquire) {
            return Err(Error::Unavailable(
                "the worker manager is shutting down".into(),
            ));
        }
        let id = spec.id;
        if inner.handles.lock().contains_key(&id) {
            return Err(Error::AlreadyExists(format!("worker {id}")));
        }
        let handle = Worker::spawn(
            spec,
            place,
            inner.stores.clone(),
            inner.worker_config.clone(),
            inner.weights,
        )
        .await?;
        let elastic = inner.config.allocation()? == Allocation::Elastic;
        let raced = {
            let mut handles = inner.handles.lock();
            let active = handles
                .values()
                .filter(|h| h.status().state == WorkerState::Active)
                .count();
            match handles.entry(id) {
                Entry::Occupied(_) => true,
                Entry::Vacant(slot) => {
                    if elastic && active >= inner.config.min_active {
                        handle.suspend();
                    }
                    slot.insert(handle.clone());
                    false
                }
            }
        };
        if raced {
            handle.shutdown().await;
            return Err(Error::AlreadyExists(format!("worker {id}")));
        }
        if handle.status().state == WorkerState::Suspended {
            handle.wait_for(WorkerState::Suspended, WAKE_TIMEOUT).await;
        }
        inner.view.write().set(handle.status());
        self.balancer
            .lock()
            .get_or_insert_with(|| tokio::spawn(balance(self.inner.clone())));
        Ok(id)
    }

    /// Stops giving the worker new unpinned work; see the module docs for
    /// what it keeps doing.
    pub async fn decommission(&self, id: WorkerId) -> Result<()> {
        let handle = self.handle(id)?;
        handle.decommission();
        handle
            .wait_for(WorkerState::Decommissioned, WAKE_TIMEOUT)
            .await;
        self.inner.view.write().set(handle.status());
        Ok(())
    }

    /// Sends an activation message to a suspended worker and records how
    /// long it took to become active; a worker already active is left alone.
    pub async fn wake(&self, id: WorkerId) -> Result<()> {
        let handle = self.handle(id)?;
        wake(&self.inner, &handle).await;
        Ok(())
    }

    /// Latest statuses, best score first.
    pub fn workers(&self) -> Vec<WorkerStatus> {
        self.inner.view.read().sorted()
    }

    /// Handle of a running worker.
    pub fn handle(&self, id: WorkerId) -> Result<WorkerHandle> {
        self.inner
            .handles
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("worker {id}")))
    }

    /// Wake-up latencies of the workers this manager woke, oldest first.
    pub fn wake_latencies(&self) -> Vec<Duration> {
        self.inner.wake_latencies.lock().iter().copied().collect()
    }

    /// Stops load balancing and shuts every worker down (each finishes the
    /// tasks it already took).
    pub async fn shutdown(&self) {
        self.stop(false).await
    }

    /// As [`Self::shutdown`], each worker first running every task queued
    /// for it ([`WorkerHandle::drain_and_shutdown`]): for queues in memory,
    /// once nothing dispatches any more.
    pub async fn drain_and_shutdown(&self) {
        self.stop(true).await
    }

    async fn stop(&self, drain: bool) {
        self.inner.stopping.store(true, Ordering::Release);
        self.inner.stop.notify_one();
        let balancer = self.balancer.lock().take();
        if let Some(balancer) = balancer {
            if let Err(e) = balancer.await {
                tracing::error!("load balancer ended abnormally: {e}");
            }
        }
        let handles: Vec<WorkerHandle> = self.inner.handles.lock().values().cloned().collect();
        futures::future::join_all(handles.iter().map(|h| async move {
            if drain {
                h.drain_and_shutdown().await
            } else {
                h.shutdown().await
            }
        }))
        .await;
        let mut view = self.inner.view.write();
        for h in &handles {
            view.set(h.status());
        }
    }
}

impl WorkerDirectory for WorkerManager {
    fn commissioned(&self) -> Vec<WorkerStatus> {
        WorkerManager::workers(self)
    }

    /// The available list (article 3.5.2). Static allocation: every worker,
    /// so an idle-suspended one wakes when work is assigned to it. Elastic:
    /// only active workers; the reserve joins when this manager wakes it as
    /// load builds (or, if none is active, all of them).
    fn workers(&self) -> Vec<WorkerStatus> {
        let all = WorkerManager::workers(self);
        if self.inner.config.allocation() != Ok(Allocation::Elastic) {
            return all;
        }
        let active: Vec<WorkerStatus> = all
            .iter()
            .filter(|w| w.state == WorkerState::Active)
            .cloned()
            .collect();
        if active.is_empty() {
            all
        } else {
            active
        }
    }

    /// Counts freshly assigned labels in the snapshot at once, so the next
    /// scheduling round sees the load before the worker reports it.
    fn assigned(&self, worker: WorkerId, labels: u32, _bytes: u64) {
        let mut view = self.inner.view.write();
        if let Some(mut status) = view.statuses.get(&worker).cloned() {
            status.queued = status.queued.saturating_add(labels);
            status.score = self.inner.weights.score(&status);
            view.set(status);
        }
    }
}

async fn wake(inner: &Inner, handle: &WorkerHandle) {
    let start = Instant::now();
    let wakes = handle.stats().wakes;
    if !handle.wake() {
        return;
    }
    if handle.wait_woken(wakes, WAKE_TIMEOUT).await {
        let mut latencies = inner.wake_latencies.lock();
        if latencies.len() == LATENCIES_KEPT {
            latencies.pop_front();
        }
        latencies.push_back(start.elapsed());
        drop(latencies);
        inner.view.write().set(handle.status());
    } else {
        tracing::warn!(
            worker = handle.id(),
            "worker did not wake within {WAKE_TIMEOUT:?}"
        );
    }
}

/// The load-balancing loop: refresh statuses, keep the score order, wake
/// workers in elastic allocation, retire drained decommissioned workers.
async fn balance(inner: Arc<Inner>) {
    let mut ticker = tokio::time::interval(Duration::from_millis(inner.config.interval_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let elastic = inner.config.allocation() == Ok(Allocation::Elastic);
    while !inner.stopping.load(Ordering::Acquire) {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = inner.stop.notified() => break,
        }
        let handles: Vec<WorkerHandle> = inner.handles.lock().values().cloned().collect();
        let mut statuses = Vec::with_capacity(handles.len());
        for h in &handles {
            statuses.push(h.refresh().await);
        }
        {
            let mut view = inner.view.write();
            for s in &statuses {
                view.set(s.clone());
            }
        }
        if elastic {
            if let Some(id) = worker_to_wake(&statuses, &inner.config) {
                if let Some(h) = handles.iter().find(|h| h.id() == id) {
                    wake(&inner, h).await;
                }
            }
        }
        for s in statuses.iter().filter(|s| drained(s)) {
            retire(&inner, s.spec.id).await;
        }
    }
}

/// The best suspended worker, if active workers are fewer than
/// `min_active` or their average queue is above `wake_threshold`.
pub(crate) fn worker_to_wake(
    statuses: &[WorkerStatus],
    config: &ManagerConfig,
) -> Option<WorkerId> {
    let active: Vec<&WorkerStatus> = statuses
        .iter()
        .filter(|s| s.state == WorkerState::Active)
        .collect();
    let queued: u64 = statuses
        .iter()
        .filter(|s| s.state != WorkerState::Decommissioned)
        .map(|s| s.queued as u64)
        .sum();
    let overloaded = match active.len() {
        0 => queued > 0,
        n => queued as f64 / n as f64 > config.wake_threshold as f64,
    };
    if active.len() >= config.min_active && !overloaded {
        return None;
    }
    statuses
        .iter()
        .filter(|s| s.state == WorkerState::Suspended)
        .max_by(|a, b| a.score.total_cmp(&b.score).then(b.spec.id.cmp(&a.spec.id)))
        .map(|s| s.spec.id)
}

/// A decommissioned worker with no data and nothing queued can go.
fn drained(status: &WorkerStatus) -> bool {
    status.state == WorkerState::Decommissioned && status.used == 0 && status.queued == 0
}

async fn retire(inner: &Inner, id: WorkerId) {
    let handle = inner.handles.lock().remove(&id);
    if let Some(handle) = handle {
        handle.shutdown().await;
        if let Err(e) = inner.stores.inventory.remove_worker(id).await {
            tracing::warn!(
                worker = id,
                "cannot remove retired worker from the inventory: {e}"
            );
        }
        let mut view = inner.view.write();
        view.statuses.remove(&id);
        view.buckets.remove(id);
        tracing::info!(worker = id, "decommissioned worker retired");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(id: WorkerId, state: WorkerState, queued: u32, score: f64) -> WorkerStatus {
        let spec = WorkerSpec {
            id,
            tier: "t".into(),
            speed: 3,
            energy: 3,
            capacity: 100,
            max_queue: 100,
            functions: true,
        };
        WorkerStatus {
            state,
            queued,
            score,
            ..WorkerStatus::new(spec)
        }
    }

    #[test]
    fn config_defaults_and_validation() {
        let c = ManagerConfig::default();
        assert_eq!(c.allocation, "static");
        assert_eq!(
            (c.min_active, c.wake_threshold, c.interval_ms, c.buckets),
            (1, 64, 100, 10)
        );
        c.validate().unwrap();
        let bad = ManagerConfig {
            allocation: "lazy".into(),
            ..c
        };
        assert!(bad.validate().unwrap_err().to_string().contains("lazy"));
        assert!(serde_json::from_str::<ManagerConfig>(r#"{"alloc": "x"}"#).is_err());
    }

    #[test]
    fn elastic_wakes_best_suspended_only_when_needed() {
        let config = ManagerConfig {
            allocation: "elastic".into(),
            wake_threshold: 10,
            ..ManagerConfig::default()
        };
        let calm = [
            status(1, WorkerState::Active, 10, 0.9),
            status(2, WorkerState::Suspended, 0, 0.3),
        ];
        assert_eq!(worker_to_wake(&calm, &config), None);
        let busy = [
            status(1, WorkerState::Active, 11, 0.9),
            status(2, WorkerState::Suspended, 0, 0.3),
            status(3, WorkerState::Suspended, 0, 0.4),
            status(4, WorkerState::Decommissioned, 0, 0.8),
        ];
        assert_eq!(worker_to_wake(&busy, &config), Some(3));
        let none_active = [status(2, WorkerState::Suspended, 0, 0.3)];
        assert_eq!(worker_to_wake(&none_active, &config), Some(2));
    }

    #[test]
    fn only_empty_decommissioned_workers_are_retired() {
        assert!(drained(&status(1, WorkerState::Decommissioned, 0, 0.0)));
        assert!(!drained(&status(1, WorkerState::Decommissioned, 1, 0.0)));
        assert!(!drained(&status(1, WorkerState::Active, 0, 0.0)));
        let mut holding = status(1, WorkerState::Decommissioned, 0, 0.0);
        holding.used = 4096;
        assert!(!drained(&holding));
    }
}
