//! The worker (article 3.3.3a): the storage server. It is decoupled from
//! applications and only (a) serves its own queue, (b) executes labels,
//! (c) scores itself and publishes the score, (d) suspends itself when its
//! queue stays empty, and (e) reaches its storage (here: a local directory).
//!
//! Concurrency: `threads` lanes execute tasks at once, and every task that
//! changes data is routed to a lane by its file id. A lane runs several
//! tasks side by side, but never two that touch the same bytes and never
//! anything beside a whole-file operation, in queue order: two overlapping
//! writes reach the disk in the order the dispatcher queued them. Labels
//! inside a task run strictly in order.
//!
//! Durability: a write label is Complete once its bytes are in the local
//! file (the page cache) and its extent is in the inventory; with
//! `label.sync` the bytes are on the device (fdatasync) first. A task is
//! acknowledged only after all its labels are final, so a queue that
//! redelivers unacknowledged tasks replays at most work whose effects are
//! idempotent (positional writes, newest-label-wins extents).

mod auth;
mod compute;
mod execute;
mod reclaim;
mod score;
mod space;

use crate::replay::took_effect;
use compute::Compute;
use execute::{Executor, Outcome};
use futures::stream::{FuturesUnordered, StreamExt};
use labios_label::anatomy::{self, Phase};
use labios_label::{
    Error, Label, LabelKind, LabelState, LabelStatus, Result, Task, Weights, WorkerId, WorkerSpec,
    WorkerState, WorkerStatus,
};
use labios_stack::live::Live;
use labios_stack::{Backend, Place, Spec};
use labios_store::{worker_queue, Delivery, Stores};
use parking_lot::Mutex;
use score::ScoreReporter;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

/// How long one pull waits for a first task. Pulls are never cancelled
/// while the worker runs (a pull that already took tasks must deliver
/// them), so this only bounds how stale an outstanding pull can be.
const PULL_WAIT: Duration = Duration::from_secs(1);
/// A suspended worker waits this long per pull: it does no polling work.
const SUSPENDED_PULL_WAIT: Duration = Duration::from_secs(60);
/// Pause after a failing pull, so an unreachable queue is not hammered.
const PULL_ERROR_PAUSE: Duration = Duration::from_millis(200);

/// Worker settings, from configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Executor lanes: tasks on different files run concurrently.
    pub threads: usize,
    /// Tasks taken from the queue per pull.
    pub pull_batch: usize,
    /// Suspend after the queue stayed empty this long; 0 = never.
    pub idle_suspend_ms: u64,
    /// Publish the status at least this often.
    pub score_interval_ms: u64,
    /// Retries of a failing local I/O operation before the label fails.
    pub retries: u32,
    /// Queue length that counts as fully loaded, for specs that give none
    /// (`max_queue == 0`).
    pub max_queue: u32,
    /// Limits of one user function (WebAssembly) run (article 3.6.2d):
    /// instructions (wasmtime fuel), memory and wall-clock time.
    pub function_fuel: u64,
    pub function_memory_bytes: u64,
    pub function_timeout_ms: u64,
    /// Pipelines run at once, at most: the compute lane's threads
    /// (worker/compute.rs). 0 (the default): one less than the machine's
    /// CPUs, at least one.
    pub compute_threads: usize,
    /// The host name the worker reports with its status (`labios locate`,
    /// `user.labios.location`); by default the machine's hostname. Workers
    /// of one machine given different names stand for different hosts.
    pub host: String,
    /// External storage labels may name (the configuration's top-level
    /// `[mounts.NAME]` tables).
    #[serde(skip)]
    pub mounts: std::collections::BTreeMap<String, labios_bridge::MountConfig>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            threads: 2,
            pull_batch: 32,
            idle_suspend_ms: 30_000,
            score_interval_ms: 1000,
            retries: 3,
            max_queue: 1024,
            function_fuel: 10_000_000_000,
            function_memory_bytes: 256 << 20,
            function_timeout_ms: 10_000,
            compute_threads: 0,
            host: machine_host(),
            mounts: Default::default(),
        }
    }
}

/// The machine's hostname, or `localhost` if it has none that reads.
pub fn machine_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if rc == 0 && !name.is_empty() => name.to_string(),
        _ => "localhost".to_string(),
    }
}

impl WorkerConfig {
    pub fn validate(&self) -> Result<()> {
        // A word: one column of `labios locate`, and never an option of
        // the launcher `labios run --near` hands it to.
        let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
        if self.host.is_empty() || self.host.starts_with('-') || !self.host.chars().all(word) {
            return Err(Error::InvalidArgument(format!(
                "worker host {:?}: a host name is letters, digits, '.', '-' and '_', not \
                 starting with '-'",
                self.host
            )));
        }
        if self.threads == 0 || self.pull_batch == 0 || self.score_interval_ms == 0 {
            return Err(Error::InvalidArgument(
                "worker threads, pull_batch and score_interval_ms must be at least 1".into(),
            ));
        }
        if self.function_fuel == 0
            || self.function_memory_bytes == 0
            || self.function_timeout_ms == 0
        {
            return Err(Error::InvalidArgument(
                "worker function_fuel, function_memory_bytes and function_timeout_ms must be at least 1"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// What a worker has done since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkerStats {
    /// Labels executed to a final status (complete or failed).
    pub labels_done: u64,
    /// Bytes written and read.
    pub bytes_done: u64,
    /// Time from the last wake event (a task arriving in the queue of a
    /// suspended worker, or `wake()`) until the worker was active and
    /// executing again.
    pub last_wake_latency: Option<Duration>,
    pub wakes: u64,
    /// The most pipelines that ran at once (never above
    /// `compute_threads`).
    pub compute_peak: usize,
    /// The compute lane's threads now (none while no pipeline ran for a
    /// while).
    pub compute_threads_now: usize,
}

/// State shared by a worker's loop, its lanes and its handles.
struct Shared {
    spec: WorkerSpec,
    /// What the status names as the worker's host.
    host: String,
    weights: Weights,
    stores: Stores,
    queue: String,
    /// The worker's stack, changeable while it runs.
    storage: Arc<Live>,
    suspended: AtomicBool,
    decommissioned: AtomicBool,
    stopping: AtomicBool,
    /// A stop first runs every task still queued for the worker
    /// ([`WorkerHandle::drain_and_shutdown`]).
    draining: AtomicBool,
    /// When `wake()` was called on a suspended worker, until served.
    wake_requested: Mutex<Option<Instant>>,
    /// Wakes the loop for wake/suspend/decommission/shutdown.
    signal: Notify,
    /// Queue depth at the last look.
    depth: AtomicU32,
    /// Labels handed to lanes and not yet final.
    executing: AtomicU32,
    labels_done: AtomicU64,
    bytes_done: AtomicU64,
    wakes: AtomicU64,
    last_wake_latency: Mutex<Option<Duration>>,
    /// Last moment the worker had work, as nanoseconds since `epoch`.
    activity: AtomicU64,
    epoch: Instant,
    /// Serializes publications so an older status never overwrites a newer.
    reporter: tokio::sync::Mutex<ScoreReporter>,
    /// Published state and wakes so far, for callers waiting on either.
    state: watch::Sender<(WorkerState, u64)>,
    /// Where pipelines run (worker/compute.rs).
    compute: Arc<Compute>,
    /// Labels this worker took lately: one delivered twice runs once.
    recent: Mutex<labios_label::id::RecentIds>,
}

impl Shared {
    fn state(&self) -> WorkerState {
        if self.decommissioned.load(Ordering::Acquire) {
            WorkerState::Decommissioned
        } else if self.suspended.load(Ordering::Acquire) {
            WorkerState::Suspended
        } else {
            WorkerState::Active
        }
    }

    fn status(&self) -> WorkerStatus {
        let mut status = WorkerStatus {
            state: self.state(),
            used: self.storage.used(),
            queued: self
                .depth
                .load(Ordering::Relaxed)
                .saturating_add(self.executing.load(Ordering::Relaxed)),
            labels_done: self.labels_done.load(Ordering::Relaxed),
            bytes_done: self.bytes_done.load(Ordering::Relaxed),
            stack: self.storage.spec().into(),
            layers: self.storage.layers(),
            host: self.host.clone(),
            ..WorkerStatus::new(self.spec.clone())
        };
        status.score = self.weights.score(&status);
        status
    }

    /// Publishes the status to the inventory if the score reporter says it
    /// is due, or always with `force` (state changes).
    async fn publish(&self, force: bool) {
        let mut reporter = self.reporter.lock().await;
        let status = self.status();
        let now = Instant::now();
        if !force && !reporter.due(status.score, now) {
            return;
        }
        reporter.published(status.score, now);
        let state = status.state;
        if let Err(e) = self.stores.inventory.put_worker(status).await {
            tracing::warn!(worker = self.spec.id, "cannot publish worker status: {e}");
        }
        // After the inventory write, so whoever waits on the state finds the
        // inventory agreeing.
        self.state.send_modify(|s| s.0 = state);
    }

    /// Runs the stack an administrator asked for (`labios stack set`),
    /// if one was, and says so at once.
    async fn take_stack(&self) {
        let id = self.spec.id;
        let asked = match self.stores.inventory.take_stack(id).await {
            Ok(Some(asked)) => asked,
            Ok(None) => return,
            Err(e) => return tracing::warn!(worker = id, "cannot look for a stack asked: {e}"),
        };
        let storage = self.storage.clone();
        let set = tokio::task::spawn_blocking(move || storage.set(Spec::try_from(asked)?)).await;
        match set {
            Ok(Ok(())) => {
                tracing::info!(worker = id, stack = %self.storage.spec(), "stack changed");
                self.publish(true).await;
            }
            Ok(Err(e)) => tracing::warn!(worker = id, "refused the stack asked: {e}"),
            Err(e) => tracing::warn!(worker = id, "changing the stack failed: {e}"),
        }
    }

    async fn refresh_depth(&self) {
        match self.stores.tasks.depth(&self.queue).await {
            Ok(depth) => self
                .depth
                .store(u32::try_from(depth).unwrap_or(u32::MAX), Ordering::Relaxed),
            Err(e) => tracing::warn!(worker = self.spec.id, "cannot read queue depth: {e}"),
        }
    }

    fn touch(&self) {
        let since = self.epoch.elapsed().as_nanos() as u64;
        self.activity.fetch_max(since, Ordering::AcqRel);
    }

    fn last_activity(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.activity.load(Ordering::Acquire))
    }

    fn record_wake(&self, latency: Duration) {
        *self.last_wake_latency.lock() = Some(latency);
        let wakes = self.wakes.fetch_add(1, Ordering::AcqRel) + 1;
        self.state.send_modify(|s| s.1 = wakes);
        tracing::debug!(worker = self.spec.id, ?latency, "worker woke up");
    }
}

/// Entry point: starts workers.
pub struct Worker;

impl Worker {
    /// Starts a worker storing its data under `dir` (created if missing; the
    /// bytes an earlier run left there count as used) and serving its own
    /// queue `worker_queue(spec.id)` on `stores.tasks`. Publishes its status
    /// before returning.
    pub async fn spawn(
        mut spec: WorkerSpec,
        place: impl Into<Place>,
        stores: Stores,
        config: WorkerConfig,
        weights: Weights,
    ) -> Result<WorkerHandle> {
        config.validate()?;
        weights.validate().map_err(Error::InvalidArgument)?;
        if spec.max_queue == 0 {
            spec.max_queue = config.max_queue;
        }
        let place = place.into();
        let capacity = spec.capacity;
        let externals = labios_bridge::WorkerMounts {
            mounts: labios_bridge::Mounts::shared(&config.mounts)?,
            worker: spec.id,
        };
        let storage = tokio::task::spawn_blocking(move || {
            Live::open_with(&place, capacity, Some(&externals)).map(Arc::new)
        })
        .await
        .map_err(|e| Error::Storage(format!("opening worker storage: {e}")))??;
        let shared = Arc::new(Shared {
            host: config.host.clone(),
            queue: worker_queue(spec.id),
            weights,
            stores: stores.clone(),
            storage: storage.clone(),
            suspended: AtomicBool::new(false),
            decommissioned: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            wake_requested: Mutex::new(None),
            signal: Notify::new(),
            depth: AtomicU32::new(0),
            executing: AtomicU32::new(0),
            labels_done: AtomicU64::new(0),
            bytes_done: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            last_wake_latency: Mutex::new(None),
            recent: Mutex::new(labios_label::id::RecentIds::new(RECENT_LABELS)),
            activity: AtomicU64::new(0),
            epoch: Instant::now(),
            reporter: tokio::sync::Mutex::new(ScoreReporter::new(Duration::from_millis(
                config.score_interval_ms,
            ))),
            state: watch::channel((WorkerState::Active, 0)).0,
            compute: Arc::new(Compute::new(spec.id, config.compute_threads)?),
            spec,
        });
        shared.refresh_depth().await;
        shared.publish(true).await;
        let executor = Arc::new(Executor::new(
            shared.spec.id,
            shared.spec.capacity,
            shared.spec.functions,
            &config,
            storage,
            stores,
            shared.compute.clone(),
        )?);
        // Before any label: the device holds nothing the inventory does
        // not give this worker. Failing costs only space.
        if let Err(e) = executor.reconcile().await {
            tracing::warn!(
                worker = shared.spec.id,
                "cannot reclaim space at start: {e}"
            );
        }
        let task = tokio::spawn(serve(shared.clone(), executor, config));
        Ok(WorkerHandle {
            shared,
            task: Arc::new(Mutex::new(Some(task))),
        })
    }
}

/// Controls a running worker. Cheap to clone.
#[derive(Clone)]
pub struct WorkerHandle {
    shared: Arc<Shared>,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl WorkerHandle {
    pub fn id(&self) -> WorkerId {
        self.shared.spec.id
    }

    /// The current status (queue depth as of the last look).
    pub fn status(&self) -> WorkerStatus {
        self.shared.status()
    }

    /// The status with a fresh look at the queue depth.
    pub async fn refresh(&self) -> WorkerStatus {
        self.shared.refresh_depth().await;
        self.shared.status()
    }

    /// The stack the worker runs now.
    pub fn stack(&self) -> Spec {
        self.shared.storage.spec()
    }

    /// Changes the worker's stack while labels run (LabStor's live
    /// upgrade): labels at the storage finish on the old stack, the next
    /// ones run on the new. Refuses a different backend.
    pub async fn set_stack(&self, spec: Spec) -> Result<()> {
        let storage = self.shared.storage.clone();
        tokio::task::spawn_blocking(move || storage.set(spec))
            .await
            .map_err(|e| Error::Storage(format!("changing the stack: {e}")))??;
        self.shared.publish(true).await;
        Ok(())
    }

    /// Activation message (article 3.3.3b): a suspended worker becomes
    /// active; the time it takes is recorded in [`WorkerStats`]. Returns
    /// false if the worker was not suspended (nothing to do).
    pub fn wake(&self) -> bool {
        if !self.shared.suspended.load(Ordering::Acquire) {
            return false;
        }
        self.shared
            .wake_requested
            .lock()
            .get_or_insert_with(Instant::now);
        self.shared.signal.notify_one();
        true
    }

    /// Suspends the worker (manager-initiated). A task arriving in its
    /// queue still wakes it.
    pub fn suspend(&self) {
        self.shared.suspended.store(true, Ordering::Release);
        self.shared.signal.notify_one();
    }

    /// Marks the worker decommissioned: schedulers stop sending it new
    /// work, but it keeps serving its queue (reads and deletes of the data
    /// it still holds are pinned to it).
    pub fn decommission(&self) {
        self.shared.decommissioned.store(true, Ordering::Release);
        self.shared.signal.notify_one();
    }

    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            labels_done: self.shared.labels_done.load(Ordering::Relaxed),
            bytes_done: self.shared.bytes_done.load(Ordering::Relaxed),
            last_wake_latency: *self.shared.last_wake_latency.lock(),
            wakes: self.shared.wakes.load(Ordering::Relaxed),
            compute_peak: self.shared.compute.peak(),
            compute_threads_now: self.shared.compute.threads(),
        }
    }

    /// Waits until the worker has published `state`; false on timeout.
    pub async fn wait_for(&self, state: WorkerState, timeout: Duration) -> bool {
        self.wait(|(s, _)| *s == state, timeout).await
    }

    /// Waits until the worker has woken more than `wakes` times (see
    /// [`WorkerStats::wakes`]); false on timeout.
    pub async fn wait_woken(&self, wakes: u64, timeout: Duration) -> bool {
        self.wait(|(_, w)| *w > wakes, timeout).await
    }

    async fn wait(&self, done: impl FnMut(&(WorkerState, u64)) -> bool, timeout: Duration) -> bool {
        let mut rx = self.shared.state.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(done))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Runs every task queued for the worker, then stops as
    /// [`Self::shutdown`] does: for a queue that lives in memory (the
    /// embedded runtime), where a task left in it at the stop is lost
    /// although its client was told its labels were published. Call it
    /// once nothing dispatches to the worker any more.
    pub async fn drain_and_shutdown(&self) {
        self.shared.draining.store(true, Ordering::Release);
        self.shutdown().await;
    }

    /// Stops pulling, finishes the tasks already taken (their labels reach
    /// a final status and are acknowledged) and publishes a final status:
    /// Suspended, since tasks queued for it wait for its restart. Later
    /// calls return at once.
    pub async fn shutdown(&self) {
        let task = self.task.lock().take();
        if let Some(task) = task {
            self.shared.stopping.store(true, Ordering::Release);
            self.shared.signal.notify_one();
            if let Err(e) = task.await {
                tracing::error!(worker = self.id(), "worker loop ended abnormally: {e}");
            }
        }
    }
}

type Pull = JoinHandle<Result<Vec<Delivery<Task>>>>;

/// The worker's loop: pull, route to lanes, score, suspend and wake.
async fn serve(shared: Arc<Shared>, executor: Arc<Executor>, config: WorkerConfig) {
    let (lanes, lane_tasks): (Vec<_>, Vec<_>) = (0..config.threads)
        .map(|_| {
            let (tx, rx) = mpsc::channel(config.pull_batch);
            (tx, tokio::spawn(lane(shared.clone(), executor.clone(), rx)))
        })
        .unzip();
    let (stop_reclaims, reclaims_stop) = watch::channel(false);
    let reclaims = executor.reclaims();
    let reclaimer = tokio::spawn(async move { reclaims.run(reclaims_stop).await });
    let idle = (config.idle_suspend_ms > 0).then(|| Duration::from_millis(config.idle_suspend_ms));
    let score_interval = Duration::from_millis(config.score_interval_ms);
    let mut ticker = tokio::time::interval(score_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    shared.touch();
    let mut pending: Option<Pull> = None;
    while !shared.stopping.load(Ordering::Acquire) {
        let suspended = shared.suspended.load(Ordering::Acquire);
        let pull = pending.get_or_insert_with(|| {
            let (shared, max) = (shared.clone(), config.pull_batch);
            let wait = if suspended {
                SUSPENDED_PULL_WAIT
            } else {
                PULL_WAIT
            };
            tokio::spawn(async move { shared.stores.tasks.pull(&shared.queue, max, wait).await })
        });
        let idle_deadline = idle.map(|idle| shared.last_activity() + idle);
        tokio::select! {
            pulled = pull => {
                pending = None;
                match pulled {
                    Ok(Ok(deliveries)) if deliveries.is_empty() => {}
                    Ok(Ok(deliveries)) => {
                        let arrived = Instant::now();
                        shared.touch();
                        let woke = shared.suspended.swap(false, Ordering::AcqRel);
                        if woke {
                            shared.publish(true).await;
                        }
                        dispatch(&shared, &lanes, deliveries, config.threads).await;
                        if woke {
                            shared.record_wake(arrived.elapsed());
                            shared.wake_requested.lock().take();
                        }
                        shared.publish(false).await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(worker = shared.spec.id, "pull failed: {e}");
                        tokio::time::sleep(PULL_ERROR_PAUSE).await;
                    }
                    Err(e) => tracing::error!(worker = shared.spec.id, "pull task failed: {e}"),
                }
            }
            _ = shared.signal.notified() => {
                let requested = shared.wake_requested.lock().take();
                if let Some(requested) = requested {
                    if shared.suspended.swap(false, Ordering::AcqRel) {
                        shared.touch();
                        shared.publish(true).await;
                        shared.record_wake(requested.elapsed());
                        continue;
                    }
                }
                shared.publish(true).await;
            }
            _ = sleep_until(idle_deadline), if idle_deadline.is_some() && !suspended => {
                let quiet = shared.executing.load(Ordering::Acquire) == 0
                    && idle.is_some_and(|idle| shared.last_activity().elapsed() >= idle);
                if quiet {
                    shared.suspended.store(true, Ordering::Release);
                    shared.publish(true).await;
                } else if shared.executing.load(Ordering::Acquire) > 0 {
                    shared.touch();
                }
            }
            // A suspended worker still publishes its status (the heartbeat a
            // worker manager in another process tells the living by), but
            // skips the queue-depth query: its pending pull already waits on
            // the queue, so the tick costs one inventory write.
            //
            // The heartbeat goes first, and the depth query is bounded by
            // the interval: a queue slow to answer (NATS coming back after
            // a restart answers in seconds) must not silence the heartbeat
            // until the manager declares a live worker down. A late depth
            // is left for the next tick.
            //
            // Every tick publishes, whatever was published since the last:
            // a publication a little after the previous tick (one after a
            // batch of labels, or the tick's own behind a slow call) made
            // this one not yet due an interval later, and the heartbeat
            // came every other tick.
            _ = ticker.tick() => {
                shared.publish(true).await;
                shared.take_stack().await;
                if !suspended {
                    let _ = tokio::time::timeout(score_interval, shared.refresh_depth()).await;
                }
            }
        }
    }
    // A pull that already took tasks must hand them over: abort only stops
    // one still waiting, and awaiting it returns whatever it completed with.
    if let Some(pull) = pending {
        pull.abort();
        if let Ok(Ok(deliveries)) = pull.await {
            dispatch(&shared, &lanes, deliveries, config.threads).await;
        }
    }
    if shared.draining.load(Ordering::Acquire) {
        drain(&shared, &lanes, &config).await;
    }
    drop(lanes);
    for task in lane_tasks {
        if let Err(e) = task.await {
            tracing::error!(worker = shared.spec.id, "lane ended abnormally: {e}");
        }
    }
    // After the lanes: the labels they finished may have added reclaims.
    stop_reclaims.send_replace(true);
    if let Err(e) = reclaimer.await {
        tracing::error!(
            worker = shared.spec.id,
            "reclaim sender ended abnormally: {e}"
        );
    }
    // What external mounts acknowledged from memory (merged writes,
    // relaxed metadata) reaches their store before the process's last
    // worker says it stopped: the next process would not see it.
    if let Err(e) = executor.settle_mounts().await {
        tracing::error!(
            worker = shared.spec.id,
            "writes held back by external mounts were not stored: {e}"
        );
    }
    // What the stack acknowledged from memory (a `tier`) reaches the
    // device before the worker says it stopped.
    let storage = shared.storage.clone();
    match tokio::task::spawn_blocking(move || storage.settle()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(
            worker = shared.spec.id,
            "writes held in the stack's memory were not written back: {e}"
        ),
        Err(e) => tracing::error!(worker = shared.spec.id, "write-back ended abnormally: {e}"),
    }
    shared.suspended.store(true, Ordering::Release);
    shared.refresh_depth().await;
    shared.publish(true).await;
}

/// The longest a draining worker ([`WorkerHandle::drain_and_shutdown`])
/// goes on taking queued tasks: a stop must end even if a lane is stuck
/// (an external store that times out every call).
pub const DRAIN_MAX: Duration = Duration::from_secs(60);

/// Hands every task still queued for the worker to its lanes, for at most
/// [`DRAIN_MAX`]; see [`WorkerHandle::drain_and_shutdown`].
async fn drain(shared: &Shared, lanes: &[mpsc::Sender<Delivery<Task>>], config: &WorkerConfig) {
    let mut ran = 0;
    let deadline = Instant::now() + DRAIN_MAX;
    loop {
        if Instant::now() >= deadline {
            let left = shared.stores.tasks.depth(&shared.queue).await.unwrap_or(0);
            tracing::error!(
                worker = shared.spec.id,
                "stopping with {left} tasks still queued after {DRAIN_MAX:?}; they are lost"
            );
            return;
        }
        match shared
            .stores
            .tasks
            .pull(&shared.queue, config.pull_batch, Duration::ZERO)
            .await
        {
            Ok(deliveries) if deliveries.is_empty() => {
                if ran > 0 {
                    tracing::info!(
                        worker = shared.spec.id,
                        "ran {ran} tasks still queued at the stop"
                    );
                }
                return;
            }
            Ok(deliveries) => {
                ran += deliveries.len();
                dispatch(shared, lanes, deliveries, config.threads).await
            }
            Err(e) => {
                tracing::error!(
                    worker = shared.spec.id,
                    "tasks queued at the stop are not run: {e}"
                );
                return;
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// Routes each task to the lane of its file, keeping queue order per file
/// for anything that changes data. A task of reads only changes nothing and
/// depends on nothing still queued here (the shuffler puts a read that
/// depends on a write of the same batch into that write's supertask, and a
/// client waits for its writes before reading), so it may run on any lane.
async fn dispatch(
    shared: &Shared,
    lanes: &[mpsc::Sender<Delivery<Task>>],
    deliveries: Vec<Delivery<Task>>,
    threads: usize,
) {
    for delivery in deliveries {
        if delivery.item.is_wake_up() {
            // An activation message: pulling it already woke the worker.
            if let Err(e) = shared
                .stores
                .tasks
                .ack(&shared.queue, &[delivery.token])
                .await
            {
                tracing::warn!(worker = shared.spec.id, "cannot acknowledge wake-up: {e}");
            }
            continue;
        }
        let labels_of = &delivery.item.labels;
        let key = if labels_of.iter().all(|l| !l.mutates()) {
            labels_of.first().map_or(0, |l| l.id.nanos)
        } else {
            labels_of
                .iter()
                .find_map(|l| l.file_range())
                .map_or(0, |(file, _, _)| file)
        };
        let labels = u32::try_from(delivery.item.labels.len()).unwrap_or(u32::MAX);
        shared.executing.fetch_add(labels, Ordering::AcqRel);
        if lanes[lane_of(key, threads)].send(delivery).await.is_err() {
            // Lanes only stop after the loop drops them: unreachable in practice,
            // but never lose count of work.
            shared.executing.fetch_sub(labels, Ordering::AcqRel);
            tracing::error!(
                worker = shared.spec.id,
                "lane closed, task left unacknowledged"
            );
        }
    }
}

/// Lane for a file id (or a read's label time): a multiplicative hash
/// spreads consecutive values.
fn lane_of(key: u64, threads: usize) -> usize {
    ((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % threads as u64) as usize
}

/// Tasks one lane runs side by side (see [`Footprint`]): a lane serves
/// every task of its files, and a task mostly waits on round trips to the
/// stores, so running only one at a time would leave the worker idle.
const LANE_DEPTH: usize = 8;

/// What a task may change, so that a lane runs tasks side by side only
/// when neither can see the other's effects.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Footprint {
    /// Reads only: it changes nothing (see [`dispatch`]).
    Nothing,
    /// Writes to these `(file, start, end)` byte ranges only.
    Ranges(Vec<(u64, u64, u64)>),
    /// Anything else (delete, flush, rename, writes without a range): it
    /// runs alone.
    Everything,
}

impl Footprint {
    fn of(task: &Task) -> Footprint {
        if task.labels.iter().all(|l| !l.mutates()) {
            return Footprint::Nothing;
        }
        let mut ranges = Vec::with_capacity(task.labels.len());
        for l in &task.labels {
            match l.file_range() {
                Some((file, offset, len)) if l.kind == LabelKind::Write && len > 0 => {
                    ranges.push((file, offset, offset.saturating_add(len)))
                }
                _ => return Footprint::Everything,
            }
        }
        Footprint::Ranges(ranges)
    }

    fn conflicts(&self, other: &Footprint) -> bool {
        match (self, other) {
            (Footprint::Everything, _) | (_, Footprint::Everything) => true,
            (Footprint::Ranges(a), Footprint::Ranges(b)) => a
                .iter()
                .any(|(fa, sa, ea)| b.iter().any(|(fb, sb, eb)| fa == fb && sa < eb && sb < ea)),
            _ => false,
        }
    }
}

/// One executor lane: takes tasks in arrival order and starts each once it
/// conflicts with none still running (up to [`LANE_DEPTH`] at once), so
/// tasks that touch the same bytes still run in queue order and never
/// overlap. Labels run in task order; each task is acknowledged once all
/// its labels are final.
async fn lane(
    shared: Arc<Shared>,
    executor: Arc<Executor>,
    mut tasks: mpsc::Receiver<Delivery<Task>>,
) {
    let mut running = FuturesUnordered::new();
    let mut busy: HashMap<u64, Footprint> = HashMap::new();
    let mut next: Option<(Delivery<Task>, Footprint)> = None;
    let mut open = true;
    loop {
        let admit = next.as_ref().is_some_and(|(_, fp)| {
            running.len() < LANE_DEPTH && busy.values().all(|b| !b.conflicts(fp))
        });
        if admit {
            if let Some((delivery, fp)) = next.take() {
                busy.insert(delivery.token, fp);
                running.push(run_task(shared.clone(), executor.clone(), delivery));
            }
            continue;
        }
        tokio::select! {
            Some(token) = running.next(), if !running.is_empty() => {
                busy.remove(&token);
            }
            got = tasks.recv(), if open && next.is_none() => match got {
                Some(delivery) => {
                    let fp = Footprint::of(&delivery.item);
                    next = Some((delivery, fp));
                }
                None => open = false,
            },
            else => break,
        }
    }
}

/// Label ids a worker remembers to run a label delivered twice once:
/// more than its queue and lanes hold at once many times over.
const RECENT_LABELS: usize = 1 << 16;

/// Runs one task's labels in order, reports each label's final status,
/// then acknowledges the task; returns its delivery token. A label this
/// worker took already (still running, or done and reported) is skipped.
/// An aggregated task's writes go to the stack in one call.
async fn run_task(shared: Arc<Shared>, executor: Arc<Executor>, delivery: Delivery<Task>) -> u64 {
    let fresh: Vec<&Label> = delivery
        .item
        .labels
        .iter()
        .filter(|label| {
            let first = shared.recent.lock().insert(label.id);
            if !first {
                tracing::info!(worker = shared.spec.id, label = %label.id, "label delivered twice, run once");
                shared.executing.fetch_sub(1, Ordering::AcqRel);
            }
            first
        })
        .collect();
    if delivery.item.aggregated {
        let outcomes = executor.execute_writes(&fresh).await;
        for (label, outcome) in fresh.into_iter().zip(outcomes) {
            finish(&shared, label, outcome).await;
        }
    } else {
        for label in fresh {
            let outcome = executor.execute(label).await;
            finish(&shared, label, outcome).await;
        }
    }
    if let Err(e) = shared
        .stores
        .tasks
        .ack(&shared.queue, &[delivery.token])
        .await
    {
        tracing::warn!(worker = shared.spec.id, "cannot acknowledge task: {e}");
    }
    shared.touch();
    shared.publish(false).await;
    delivery.token
}

/// Reports a label's final status and counts it done. A failed label
/// that a redelivered copy had already run keeps its success.
async fn finish(shared: &Shared, label: &Label, mut outcome: Outcome) {
    if let Some(error) = &outcome.status.error {
        tracing::debug!(worker = shared.spec.id, label = %label.id, "label failed: {error}");
        // A redelivered label that already ran keeps its success.
        match took_effect(&shared.stores, label).await {
            Ok(Some(done)) if done.state == LabelState::Complete => {
                tracing::info!(worker = shared.spec.id, label = %label.id, "label had already run");
                outcome.status = done;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                worker = shared.spec.id,
                label = %label.id,
                "cannot tell whether a failed label had already run: {e}"
            ),
        }
    }
    if label.id.from_worker() {
        // A worker's own delete: nobody waits for its status, which
        // would only sit in the inventory until swept.
        if let Some(error) = &outcome.status.error {
            tracing::warn!(worker = shared.spec.id, label = %label.id, "reclaim failed: {error}");
        }
    } else {
        report(shared, outcome.status).await;
    }
    shared.executing.fetch_sub(1, Ordering::AcqRel);
    shared.labels_done.fetch_add(1, Ordering::Relaxed);
    shared
        .bytes_done
        .fetch_add(outcome.bytes, Ordering::Relaxed);
}

/// Records a label's final status; a few attempts, since a client waits on it.
async fn report(shared: &Shared, status: LabelStatus) {
    let t = anatomy::start();
    let set =
        labios_store::inventory::record_status(shared.stores.inventory.as_ref(), &status).await;
    anatomy::record(Phase::WorkerInventory, t);
    if let Err(e) = set {
        tracing::error!(worker = shared.spec.id, label = %status.id, "cannot record label status: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_unknown_fields() {
        let parsed: WorkerConfig = serde_json::from_str(r#"{"threads": 4}"#).unwrap();
        assert_eq!(parsed.threads, 4);
        assert_eq!(parsed.pull_batch, 32);
        let err = serde_json::from_str::<WorkerConfig>(r#"{"thread": 4}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let c = WorkerConfig::default();
        assert_eq!((c.threads, c.pull_batch, c.retries), (2, 32, 3));
        assert_eq!(
            (c.idle_suspend_ms, c.score_interval_ms, c.max_queue),
            (30_000, 1000, 1024)
        );
        c.validate().unwrap();
        assert!(WorkerConfig {
            threads: 0,
            ..c.clone()
        }
        .validate()
        .is_err());
        // A host is one word, never an option.
        for bad in ["", "two words", "-oProxyCommand=x", "a/b"] {
            let c = WorkerConfig {
                host: bad.into(),
                ..c.clone()
            };
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("worker host"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_lane_overlaps_only_tasks_that_touch_different_bytes() {
        use labios_label::{Label, LabelId, Pointer};
        let label = |kind, file, offset, len| {
            let mut l = Label::new(
                LabelId {
                    nanos: offset + 1,
                    origin: 1,
                },
                kind,
                1,
            );
            let at = Pointer::File {
                path: "/f".into(),
                file,
                offset,
                len,
            };
            match kind {
                LabelKind::Write => l.destination = at,
                _ => l.source = at,
            }
            l
        };
        let of = |labels: Vec<Label>| {
            Footprint::of(&Task {
                labels,
                aggregated: false,
                supertask: false,
            })
        };
        let a = of(vec![label(LabelKind::Write, 1, 0, 100)]);
        let b = of(vec![label(LabelKind::Write, 1, 100, 100)]);
        let c = of(vec![label(LabelKind::Write, 1, 50, 100)]);
        let other = of(vec![label(LabelKind::Write, 2, 0, 100)]);
        let read = of(vec![label(LabelKind::Read, 1, 0, 100)]);
        let delete = of(vec![label(LabelKind::Delete, 1, 0, 0)]);
        let mixed = of(vec![
            label(LabelKind::Write, 1, 200, 10),
            label(LabelKind::Read, 1, 0, 10),
        ]);
        assert!(!a.conflicts(&b) && !b.conflicts(&a), "adjacent ranges");
        assert!(a.conflicts(&c) && c.conflicts(&b), "overlapping ranges");
        assert!(!a.conflicts(&other), "another file");
        assert_eq!(read, Footprint::Nothing);
        assert!(!read.conflicts(&a));
        assert_eq!(delete, Footprint::Everything);
        assert!(delete.conflicts(&other) && delete.conflicts(&read));
        assert_eq!(
            mixed,
            Footprint::Everything,
            "a supertask with a read runs alone"
        );
    }

    #[test]
    fn one_file_always_maps_to_one_lane_and_files_spread() {
        let lanes: std::collections::HashSet<usize> = (0..64).map(|f| lane_of(f, 4)).collect();
        assert_eq!(lanes.len(), 4);
        for f in 0..64 {
            assert_eq!(lane_of(f, 4), lane_of(f, 4));
            assert_eq!(lane_of(f, 1), 0);
        }
    }
}
