//! The worker directory for a dispatcher that runs apart from the worker
//! manager: workers as the inventory last reported them, refreshed in the
//! background so scheduling never waits on a network round trip.
//!
//! It offers the same available list as the in-process worker manager
//! (article 3.5.2): in static allocation every worker, so an idle-suspended
//! one wakes when work reaches its queue; in elastic allocation only the
//! active ones, so the suspended reserve stays asleep until the manager
//! wakes it as load builds (or every worker, if none is active).

use labios_label::{Result, WorkerDirectory, WorkerId, WorkerState, WorkerStatus};
use labios_store::Inventory;
use parking_lot::RwLock;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::task::JoinHandle;

pub struct InventoryDirectory {
    cache: Arc<RwLock<Vec<WorkerStatus>>>,
    /// Elastic allocation: the suspended reserve is held back.
    elastic: bool,
    refresher: JoinHandle<()>,
}

impl InventoryDirectory {
    /// Loads the workers once (so the first batch sees them), then refreshes
    /// every `refresh` until dropped. `elastic`: the manager runs elastic
    /// allocation (`manager.allocation = "elastic"`), so suspended workers
    /// are its reserve, not available. Must be called inside a tokio runtime.
    pub async fn start(
        inventory: Arc<dyn Inventory>,
        refresh: Duration,
        elastic: bool,
    ) -> Result<Self> {
        let cache = Arc::new(RwLock::new(ranked(inventory.workers().await?)));
        let weak = Arc::downgrade(&cache);
        let refresher = tokio::spawn(refresh_loop(inventory, weak, refresh));
        Ok(InventoryDirectory {
            cache,
            elastic,
            refresher,
        })
    }
}

async fn refresh_loop(
    inventory: Arc<dyn Inventory>,
    cache: Weak<RwLock<Vec<WorkerStatus>>>,
    refresh: Duration,
) {
    let mut tick = tokio::time::interval(refresh.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let fresh = inventory.workers().await;
        let Some(cache) = cache.upgrade() else { return };
        match fresh {
            Ok(workers) => *cache.write() = ranked(workers),
            Err(e) => tracing::warn!("worker directory refresh failed: {e}"),
        }
    }
}

/// Best score first, as [`WorkerDirectory::workers`] promises.
fn ranked(mut workers: Vec<WorkerStatus>) -> Vec<WorkerStatus> {
    workers.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.spec.id.cmp(&b.spec.id)));
    workers
}

impl Drop for InventoryDirectory {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

impl WorkerDirectory for InventoryDirectory {
    fn commissioned(&self) -> Vec<WorkerStatus> {
        self.cache.read().clone()
    }

    fn workers(&self) -> Vec<WorkerStatus> {
        let all = self.cache.read();
        if self.elastic && all.iter().any(|w| w.state == WorkerState::Active) {
            return all
                .iter()
                .filter(|w| w.state == WorkerState::Active)
                .cloned()
                .collect();
        }
        all.clone()
    }

    /// Counts the labels as queued until the next refresh brings the
    /// workers' own numbers, so back-to-back batches see the load.
    fn assigned(&self, worker: WorkerId, labels: u32, _bytes: u64) {
        if let Some(w) = self.cache.write().iter_mut().find(|w| w.spec.id == worker) {
            w.queued = w.queued.saturating_add(labels);
        }
    }
}
