//! The label dispatcher (article 3.3.2c): pulls batches of labels from client
//! queues, shuffles them into tasks, schedules the tasks onto workers and
//! publishes each worker's share to its queue, all workers in parallel.
//!
//! Batching follows the article's two triggers, tuned so that latency is not
//! traded away when there is no throughput to gain: an idle queue hands over
//! a lone label at once; only after a full batch (the queue is under load)
//! does the dispatcher linger up to the window to fill the next one.

pub mod bench;
pub mod config;
pub mod directory;
mod minmax;
mod placement;
pub mod scheduler;
pub mod shuffler;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

pub use bench::{bench_dispatch, BenchReport};
pub use config::DispatcherConfig;
pub use directory::InventoryDirectory;
pub use scheduler::{Plan, Policy, Scheduler};
pub use shuffler::{shuffle, Routed};

use futures::{future::join_all, stream, StreamExt};
use labios_label::anatomy::{self, Phase};
use labios_label::id::RecentIds;
use labios_label::{
    Label, LabelId, LabelKind, LabelState, LabelStatus, Pointer, Result, Task, WorkerDirectory,
    WorkerId, WorkerState,
};
use labios_store::warehouse::release;
use labios_store::{worker_queue, Delivery, LabelVerifier, Stores};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a pull blocks on an empty queue when serving one queue; bounds
/// how quickly shutdown is noticed (a pending pull is never cancelled, so no
/// delivery is lost in flight).
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// The same when serving several queues: short, so that a label arriving on
/// another queue is not held up behind an empty one.
const IDLE_WAIT_SHARED: Duration = Duration::from_millis(2);
/// Pause after a queue error before trying again, so a broken queue is not
/// hammered in a tight loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// How long a batch waits for a worker to appear before its labels fail.
const NO_WORKERS_GRACE: Duration = Duration::from_secs(10);
/// How often a dispatcher serving a queue prefix looks for new queues (an
/// application's queue appears with its first label).
const QUEUE_REFRESH: Duration = Duration::from_millis(200);
/// The longest a draining dispatcher ([`Dispatcher::draining`]) goes on
/// after a stop: a stop must end even if workers no longer take tasks.
pub const DRAIN_MAX: Duration = Duration::from_secs(60);
/// Inventory lookups (read locality, failure records) in flight at once.
const INVENTORY_CONCURRENCY: usize = 32;

/// Running totals, for `labios status` (labels/s = delta of `labels`).
#[derive(Debug, Default)]
pub struct DispatcherStats {
    labels: AtomicU64,
    failed: AtomicU64,
    tasks: AtomicU64,
    batches: AtomicU64,
    /// Labels published to each worker's queue.
    per_worker: parking_lot::Mutex<BTreeMap<WorkerId, u64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DispatchCounts {
    /// Labels published to a worker queue.
    pub labels: u64,
    /// Labels marked failed (no workers, or their worker queue refused them).
    pub failed: u64,
    pub tasks: u64,
    pub batches: u64,
}

impl DispatcherStats {
    pub fn snapshot(&self) -> DispatchCounts {
        DispatchCounts {
            labels: self.labels.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            tasks: self.tasks.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
        }
    }

    /// Labels published to each worker's queue so far.
    pub fn per_worker(&self) -> BTreeMap<WorkerId, u64> {
        self.per_worker.lock().clone()
    }

    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Which client queues a dispatcher serves: a fixed list, or every queue
/// whose name starts with a prefix (one queue per application, found as
/// applications start publishing).
#[derive(Debug, Clone)]
pub enum Queues {
    Named(Vec<String>),
    Prefix(String),
}

pub struct Dispatcher {
    config: DispatcherConfig,
    stores: Stores,
    directory: Arc<dyn WorkerDirectory>,
    scheduler: Scheduler,
    /// Where the writes of files with a placement hint go.
    placements: placement::Placements,
    stats: Arc<DispatcherStats>,
    /// Checks each label's signature against the application registry
    /// before it is scheduled (README "Tenants").
    verifier: LabelVerifier,
    /// Labels this dispatcher handed on lately (to a worker queue, or
    /// failed and recorded). A copy delivered again, by a push a queue
    /// repeated or a redelivery after a lost acknowledgement, is dropped:
    /// scheduled anew it could reach another worker than the first copy
    /// (data moved meanwhile), which workers' own memory of labels cannot
    /// catch. A read run twice so put a result nobody takes (the model
    /// checker under injected faults saw a 1 MiB result held for good).
    recent: RecentIds,
    /// Whether a stop first dispatches what the client queues hold
    /// ([`Dispatcher::draining`]).
    drain: bool,
}

/// Label ids a dispatcher remembers (as a worker does).
const RECENT_LABELS: usize = 1 << 16;

impl Dispatcher {
    pub fn new(
        config: DispatcherConfig,
        stores: Stores,
        directory: Arc<dyn WorkerDirectory>,
    ) -> Result<Self> {
        config.validate()?;
        let scheduler = Scheduler::new(config.policy()?);
        let verifier = LabelVerifier::new(stores.inventory.clone());
        Ok(Dispatcher {
            config,
            verifier,
            stores,
            directory,
            scheduler,
            placements: placement::Placements::default(),
            stats: Arc::default(),
            recent: RecentIds::new(RECENT_LABELS),
            drain: false,
        })
    }

    /// At a stop, goes on until the client queues are empty (for at most
    /// [`DRAIN_MAX`]): for queues that live in memory (the embedded
    /// runtime), where a label left in them at the stop is lost although
    /// its client was told it was published. A dispatcher of durable queues
    /// stops at once; its labels wait in the queue for the next one.
    pub fn draining(mut self) -> Self {
        self.drain = true;
        self
    }

    /// Schedules labels without checking their signatures: only for
    /// benchmarks and tests that feed hand-made labels.
    pub fn without_label_auth(mut self) -> Self {
        self.verifier = LabelVerifier::disabled(self.stores.inventory.clone());
        self
    }

    pub fn stats(&self) -> Arc<DispatcherStats> {
        self.stats.clone()
    }

    /// Serves `queues` in turn until `shutdown` holds `true` (and, when
    /// [`Dispatcher::draining`], until they are empty). Every label pulled
    /// ends up either in a worker queue or marked failed in the inventory
    /// before it is acknowledged.
    pub async fn run(mut self, queues: Queues, shutdown: watch::Receiver<bool>) {
        let mut names: Vec<String> = Vec::new();
        let mut under_load: HashMap<String, bool> = HashMap::new();
        let mut listed: Option<Instant> = None;
        let mut turn = 0usize;
        let mut stopping: Option<Instant> = None;
        loop {
            if *shutdown.borrow() {
                let since = *stopping.get_or_insert_with(|| {
                    listed = None;
                    Instant::now()
                });
                if !self.drain || self.drained(&queues, since).await {
                    return;
                }
            }
            match &queues {
                Queues::Named(fixed) => names.clone_from(fixed),
                Queues::Prefix(prefix) => {
                    if listed.is_none_or(|t| t.elapsed() >= QUEUE_REFRESH) {
                        match self.stores.labels.queues(prefix).await {
                            Ok(found) => names = found,
                            Err(e) => tracing::warn!("dispatcher: listing queues {prefix}*: {e}"),
                        }
                        listed = Some(Instant::now());
                    }
                }
            }
            if names.is_empty() {
                tokio::time::sleep(IDLE_WAIT).await;
                listed = None;
                continue;
            }
            turn = (turn + 1) % names.len();
            let queue = names[turn].clone();
            let idle_wait = if names.len() == 1 {
                IDLE_WAIT
            } else {
                IDLE_WAIT_SHARED
            };
            let linger = under_load.get(&queue).copied().unwrap_or(false);
            let batch = match self.collect(&queue, linger, idle_wait).await {
                Ok(batch) => batch,
                Err(e) => {
                    tracing::warn!("dispatcher: pulling from {queue} failed: {e}");
                    tokio::time::sleep(ERROR_BACKOFF).await;
                    continue;
                }
            };
            under_load.insert(queue.clone(), batch.len() >= self.config.batch_size);
            if !batch.is_empty() {
                self.dispatch(&queue, batch).await;
            }
        }
    }

    /// Whether a draining stop that began at `since` may end: every queue
    /// is empty, or [`DRAIN_MAX`] has passed (what is left is logged, and
    /// lost with the process).
    async fn drained(&self, queues: &Queues, since: Instant) -> bool {
        let names = match queues {
            Queues::Named(fixed) => fixed.clone(),
            Queues::Prefix(prefix) => match self.stores.labels.queues(prefix).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::error!("dispatcher: listing queues {prefix}* at the stop: {e}");
                    return true;
                }
            },
        };
        let mut left = 0;
        for name in &names {
            match self.stores.labels.depth(name).await {
                Ok(n) => left += n,
                Err(e) => tracing::warn!("dispatcher: depth of {name} at the stop: {e}"),
            }
        }
        if left > 0 && since.elapsed() >= DRAIN_MAX {
            tracing::error!(
                "dispatcher: stopping with {left} labels still queued after {DRAIN_MAX:?}; \
                 they are lost"
            );
            return true;
        }
        left == 0
    }

    /// One batch from `queue`. Returns as soon as anything is available,
    /// except after a full batch, when it keeps pulling until the batch is
    /// full or the window closes.
    async fn collect(
        &self,
        queue: &str,
        linger: bool,
        idle_wait: Duration,
    ) -> Result<Vec<Delivery<Label>>> {
        let max = self.config.batch_size;
        let labels = &self.stores.labels;
        let mut batch = labels.pull(queue, max, idle_wait).await?;
        if !linger || batch.is_empty() {
            return Ok(batch);
        }
        let deadline = Instant::now() + Duration::from_millis(self.config.batch_window_ms);
        while batch.len() < max {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match labels.pull(queue, max - batch.len(), left).await {
                Ok(more) if more.is_empty() => break,
                Ok(more) => batch.extend(more),
                // What was already pulled must still be dispatched.
                Err(e) => {
                    tracing::warn!("dispatcher: pulling from {queue} failed: {e}");
                    break;
                }
            }
        }
        Ok(batch)
    }

    async fn dispatch(&mut self, queue: &str, batch: Vec<Delivery<Label>>) {
        // Every delivery's token, with its label.
        let mut tokens: Vec<(u64, LabelId)> = Vec::with_capacity(batch.len());
        let mut labels = Vec::with_capacity(batch.len());
        let mut ids: Vec<LabelId> = Vec::with_capacity(batch.len());
        let mut unrecorded = Vec::new();
        let mut in_batch = HashSet::new();
        for d in batch {
            tokens.push((d.token, d.item.id));
            if self.recent.contains(d.item.id) || !in_batch.insert(d.item.id) {
                tracing::info!(label = %d.item.id, "label delivered twice, dispatched once");
                continue;
            }
            ids.push(d.item.id);
            // A forged or unsigned label is failed, never scheduled.
            match self.verifier.verify(&d.item).await {
                Ok(()) => labels.push(d.item),
                Err(e) => unrecorded.extend(self.fail(vec![d.item.id], e.to_string()).await),
            }
        }
        let mut planned: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
        // Staged data of labels failed here is released (Label::staged_key).
        let staged: HashMap<LabelId, String> = labels
            .iter()
            .filter_map(|l| Some((l.id, l.staged_key()?.to_string())))
            .collect();
        let workers = self.workers_or_wait().await;
        let t = anatomy::start();
        let mut located = self.locate_reads(&labels, &workers).await;
        located.extend(self.place_writes(&labels).await);
        let tasks = shuffle(labels, self.config.aggregation, &located);
        anatomy::record(Phase::Shuffle, t);
        let (held_back, tasks) = self.pin_to_unlisted(tasks, &workers).await;
        let t = anatomy::start();
        let plan = self.scheduler.schedule(tasks, &workers);
        anatomy::record(Phase::Schedule, t);
        let plan = match plan {
            Ok(mut plan) => {
                plan.extend(held_back);
                plan
            }
            Err(e) => {
                let pinned: HashSet<LabelId> = held_back
                    .iter()
                    .flat_map(|(_, tasks)| tasks.iter().flat_map(|t| &t.labels))
                    .map(|l| l.id)
                    .collect();
                planned.retain(|id| !pinned.contains(id));
                let keys: Vec<&String> = planned.iter().filter_map(|id| staged.get(id)).collect();
                release(self.stores.warehouse.as_ref(), &keys).await;
                unrecorded.extend(self.fail(planned, e.to_string()).await);
                held_back
            }
        };
        let t = anatomy::start();
        unrecorded.extend(self.publish(plan).await);
        anatomy::record(Phase::DispatchPublish, t);
        // A label whose failure could not be recorded stays unacknowledged, so
        // a queue that redelivers gives it another chance; the others are
        // remembered, and their copies dropped.
        let skip: HashSet<LabelId> = unrecorded.into_iter().collect();
        for id in ids.iter().filter(|id| !skip.contains(id)) {
            self.recent.insert(*id);
        }
        let tokens: Vec<u64> = tokens
            .into_iter()
            .filter(|(_, id)| !skip.contains(id))
            .map(|(t, _)| t)
            .collect();
        if let Err(e) = self.stores.labels.ack(queue, &tokens).await {
            tracing::warn!("dispatcher: acknowledging on {queue} failed: {e}");
        }
        DispatcherStats::add(&self.stats.batches, 1);
    }

    /// The worker pool; if it is empty (workers still starting, or all
    /// restarting), waits up to [`NO_WORKERS_GRACE`] before the batch is
    /// scheduled (and then failed with "no workers" if none came).
    async fn workers_or_wait(&self) -> Vec<labios_label::WorkerStatus> {
        let deadline = Instant::now() + NO_WORKERS_GRACE;
        loop {
            let workers = self.directory.workers();
            if !workers.is_empty() || Instant::now() >= deadline {
                return workers;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes out the tasks pinned to a worker outside the available list
    /// that the inventory shows alive: an elastic reserve the directory
    /// holds back from new work, or a worker newer than its view. Only that
    /// worker holds the data they need (and work in its queue wakes it), so
    /// they go to it rather than to the scheduler, which would hand them to
    /// a worker without the data. Tasks pinned to a decommissioned or
    /// unknown worker stay with the scheduler.
    async fn pin_to_unlisted(
        &self,
        tasks: Vec<Routed>,
        workers: &[labios_label::WorkerStatus],
    ) -> (Plan, Vec<Routed>) {
        let listed = |id: WorkerId| workers.iter().any(|w| w.spec.id == id);
        if tasks.iter().all(|r| r.pinned.is_none_or(listed)) {
            return (Vec::new(), tasks);
        }
        let alive: HashSet<WorkerId> = match self.stores.inventory.workers().await {
            Ok(all) => all
                .into_iter()
                .filter(|w| w.state != WorkerState::Decommissioned)
                .map(|w| w.spec.id)
                .collect(),
            Err(e) => {
                tracing::warn!("dispatcher: cannot look up the workers of pinned tasks: {e}");
                return (Vec::new(), tasks);
            }
        };
        let mut held_back: BTreeMap<WorkerId, Vec<Task>> = BTreeMap::new();
        let mut rest = Vec::with_capacity(tasks.len());
        for r in tasks {
            match r.pinned {
                Some(id) if !listed(id) && alive.contains(&id) => {
                    held_back.entry(id).or_default().push(r.task)
                }
                _ => rest.push(r),
            }
        }
        (held_back.into_iter().collect(), rest)
    }

    /// Reads whose bytes all live on one worker, so the shuffler can send
    /// them there (article 3.3.2c: read locality): the worker the client's
    /// read plan named ([`Label::holder`]) when it is a worker of the pool
    /// scheduling may use now (`workers`: a client must not wake a
    /// suspended worker or reach an unlisted one by naming it), else the one
    /// the inventory names. Lookup failures only cost locality, never the
    /// label.
    async fn locate_reads(
        &self,
        labels: &[Label],
        workers: &[labios_label::WorkerStatus],
    ) -> HashMap<LabelId, WorkerId> {
        let usable = |id: WorkerId| {
            workers
                .iter()
                .any(|w| w.spec.id == id && w.state != WorkerState::Decommissioned)
        };
        let reads = labels.iter().filter(|l| {
            // A gathered read (index set) reads nothing from any device.
            l.kind == LabelKind::Read
                && l.index.is_empty()
                && !matches!(l.destination, Pointer::Worker(_))
        });
        let mut located = HashMap::new();
        let mut wanted: Vec<(LabelId, (u64, u64, u64))> = Vec::new();
        for l in reads {
            match (
                l.holder.filter(|&w| usable(w)),
                l.source.file().filter(|r| r.2 > 0),
            ) {
                (_, None) => {}
                (Some(worker), Some(_)) => {
                    located.insert(l.id, worker);
                }
                (None, Some(range)) => wanted.push((l.id, range)),
            }
        }
        if wanted.is_empty() {
            return located;
        }
        let inventory = self.stores.inventory.clone();
        let looked_up: HashMap<LabelId, WorkerId> = stream::iter(wanted)
            .map(move |(id, (file, offset, len))| {
                let inventory = inventory.clone();
                async move { (id, inventory.extents(file, offset, len).await) }
            })
            .buffer_unordered(INVENTORY_CONCURRENCY)
            .filter_map(|(id, extents)| async move {
                let extents = extents.ok()?;
                let first = extents.first()?.worker;
                extents
                    .iter()
                    .all(|e| e.worker == first)
                    .then_some((id, first))
            })
            .collect()
            .await;
        located.extend(looked_up);
        located
    }

    /// The workers the writes of files with a placement hint go to (README
    /// "Hints"), ranked over every commissioned worker (an elastic reserve
    /// included: `pin_to_unlisted` delivers to it) so that a group keeps its
    /// worker while the available list changes. A label goes only to a
    /// worker whose stack admits its owner, that runs functions if it has
    /// a pipeline, and that has room for its bytes; else to the next.
    async fn place_writes(&mut self, labels: &[Label]) -> HashMap<LabelId, WorkerId> {
        let workers: Vec<labios_label::WorkerStatus> = self
            .directory
            .commissioned()
            .into_iter()
            .filter(|w| w.state != WorkerState::Decommissioned)
            .collect();
        // Parsed once per batch, not per label and worker.
        let admitted: HashMap<WorkerId, _> =
            workers.iter().map(|w| (w.spec.id, w.admitted())).collect();
        let admits = |w: &labios_label::WorkerStatus, label: &Label| {
            let len = label.destination.file().map_or(0, |(_, _, len)| len);
            admitted[&w.spec.id]
                .as_ref()
                .is_none_or(|apps| apps.contains(&label.owner))
                && (w.spec.functions || label.operations.is_empty())
                && w.remaining() >= len
        };
        let inventory = self.stores.inventory.clone();
        self.placements
            .pins(inventory.as_ref(), labels, &workers, admits)
            .await
    }

    /// Publishes every worker's tasks at once; returns the labels whose
    /// failure could not be recorded.
    async fn publish(&self, plan: Plan) -> Vec<LabelId> {
        let pushes = plan.into_iter().map(|(worker, tasks)| {
            let ids: Vec<LabelId> = tasks.iter().flat_map(|t| &t.labels).map(|l| l.id).collect();
            let keys: Vec<String> = tasks
                .iter()
                .flat_map(|t| &t.labels)
                .filter_map(|l| l.staged_key().map(str::to_string))
                .collect();
            let bytes = tasks.iter().map(|t| t.size()).fold(0, u64::saturating_add);
            self.directory
                .assigned(worker, u32::try_from(ids.len()).unwrap_or(u32::MAX), bytes);
            let count = tasks.len();
            let queue = worker_queue(worker);
            let store = self.stores.tasks.clone();
            async move { (worker, ids, keys, count, store.push(&queue, tasks).await) }
        });
        let mut unrecorded = Vec::new();
        for (worker, ids, keys, count, pushed) in join_all(pushes).await {
            match pushed {
                Ok(()) => {
                    DispatcherStats::add(&self.stats.labels, ids.len());
                    DispatcherStats::add(&self.stats.tasks, count);
                    *self.stats.per_worker.lock().entry(worker).or_default() += ids.len() as u64;
                }
                Err(e) => {
                    let reason = format!("could not queue on worker {worker}: {e}");
                    release(self.stores.warehouse.as_ref(), &keys).await;
                    unrecorded.extend(self.fail(ids, reason).await);
                }
            }
        }
        unrecorded
    }

    /// Marks labels failed in the inventory so their owners learn why;
    /// returns those that could not be marked.
    async fn fail(&self, ids: Vec<LabelId>, reason: String) -> Vec<LabelId> {
        tracing::warn!("dispatcher: failing {} labels: {reason}", ids.len());
        let total = ids.len();
        let inventory = self.stores.inventory.clone();
        let reason: Arc<str> = reason.into();
        let unrecorded: Vec<LabelId> = stream::iter(ids)
            .map(move |id| {
                let inventory = inventory.clone();
                let status = LabelStatus {
                    error: Some(reason.to_string()),
                    ..LabelStatus::new(id, LabelState::Failed)
                };
                async move {
                    let e = labios_store::inventory::record_status(inventory.as_ref(), &status)
                        .await
                        .err()?;
                    tracing::error!("dispatcher: cannot record failure of label {id}: {e}");
                    Some(id)
                }
            })
            .buffer_unordered(INVENTORY_CONCURRENCY)
            .filter_map(|x| async move { x })
            .collect()
            .await;
        DispatcherStats::add(&self.stats.failed, total - unrecorded.len());
        unrecorded
    }
}
