//! The worker manager of a distributed deployment (article 3.3.3b), run as
//! `labios manager`: workers are other processes, so everything it knows
//! comes from the inventory (the statuses workers publish) and everything it
//! does goes through the stores (their queues) or a [`Launcher`].
//!
//! - **Score order**: the published statuses, bucket-sorted by score
//!   ([`ScoreBuckets`]).
//! - **Dead workers**: a worker publishes its status at least every
//!   `worker.score_interval_ms`, even when suspended. One silent for
//!   `manager.dead_after_ms` is declared down (silence while the inventory
//!   itself failed or stalled does not count, see [`Watch`]): its status is
//!   republished as
//!   Decommissioned (schedulers stop giving it unpinned work) and the manager
//!   keeps pulling its queue `worker.<id>` while it is down (JetStream hands
//!   the dead worker's unacknowledged tasks out again after `ack_wait`),
//!   pushing each task to a live worker, round robin, then acknowledging it.
//!   Re-executing a label elsewhere is safe: a worker deletes the warehouse
//!   copy of a write only after its extent is committed, and extents are
//!   newest-label-wins with an equal label replacing, so a second execution
//!   of a write is idempotent.
//! - **Pinned labels** (a read, or a flush or delete addressed to the dead
//!   worker's local copy) need data only that worker holds. For a grace of
//!   another `dead_after_ms` they stay in its queue (not acknowledged, so
//!   handed out again after `ack_wait`): a worker that was only starved, or
//!   restarts at once, serves them. After that, if its status is still
//!   stale, they fail with "worker N is down": the application gets a clear
//!   error rather than a wait bounded only by its own (long) timeout, and
//!   can retry once the worker is back (its data is on its disk).
//! - **Files dead clients left open**: a file removed while open lives
//!   until its last holder lets go; a client killed holding one never
//!   does, and once its lease lapsed the manager (every second) drops the
//!   file and frees its bytes with delete labels signed as its owner
//!   application ([`labios_store::Inventory::drop_unheld`]).
//! - **Restarts**: a restarted worker publishes its status on start; a
//!   heartbeat newer than the one it died with puts it back in the pool and
//!   the manager stops taking from its queue.
//! - **Elasticity**: with `manager.launch` the manager starts the configured
//!   workers through its launcher (workers beyond `min_active` suspended in
//!   elastic allocation), restarts a launched worker whose process died, and
//!   stops them all when it stops. In elastic allocation it wakes the best
//!   suspended worker when the active ones fall behind by pushing an empty
//!   task ([`Task::wake_up`]) to its queue, and records the latency from that
//!   push until the inventory shows the worker Active.

use crate::launcher::{LaunchedWorker, Launcher};
use crate::replay::took_effect;
use crate::worker_manager::{worker_to_wake, ManagerConfig, ScoreBuckets};
use labios_label::id::now_nanos;
use labios_label::{
    Error, Label, LabelState, LabelStatus, Pointer, Result, Task, WorkerId, WorkerState,
    WorkerStatus,
};
use labios_store::{worker_queue, Delivery, Stores};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Tasks taken from a dead worker's queue per manager tick.
const DRAIN_BATCH: usize = 64;
/// How long a drain pull waits for a first task: short, the loop comes back.
const DRAIN_WAIT: Duration = Duration::from_millis(20);
/// How often the manager looks for files dead clients left open.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long a woken worker has to show up Active in the inventory.
const WAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a pending wake-up looks at the inventory.
const WAKE_POLL: Duration = Duration::from_millis(2);
/// Wake-up latencies kept.
const LATENCIES_KEPT: usize = 1024;

/// What the manager has done, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Workers declared down so far.
    pub deaths: u64,
    /// Down workers seen back (fresh heartbeat).
    pub returns: u64,
    /// Tasks moved from a dead worker's queue to a live one.
    pub redispatched: u64,
    /// Pinned labels failed because their worker was down.
    pub failed_pinned: u64,
    /// Launched worker processes restarted after they died.
    pub relaunched: u64,
}

struct Inner {
    stores: Stores,
    config: ManagerConfig,
    launcher: Option<Arc<dyn Launcher>>,
    statuses: Mutex<(HashMap<WorkerId, WorkerStatus>, ScoreBuckets)>,
    /// Down workers: the heartbeat they went silent with, and when they
    /// were declared down.
    down: Mutex<HashMap<WorkerId, (u64, Instant)>>,
    launched: Mutex<Vec<LaunchedWorker>>,
    waking: Mutex<HashSet<WorkerId>>,
    wake_latencies: Mutex<VecDeque<Duration>>,
    cursor: AtomicUsize,
    deaths: AtomicU64,
    returns: AtomicU64,
    redispatched: AtomicU64,
    failed_pinned: AtomicU64,
    relaunched: AtomicU64,
    /// The origin of the labels the manager makes (ids no client has).
    origin: u64,
}

/// A running cluster worker manager.
pub struct ClusterManager {
    inner: Arc<Inner>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl ClusterManager {
    /// Starts managing the workers published in `stores.inventory`. With
    /// `config.launch`, first launches workers `0..pool` through `launcher`
    /// (required then).
    pub async fn start(
        stores: Stores,
        config: ManagerConfig,
        pool: usize,
        launcher: Option<Arc<dyn Launcher>>,
    ) -> Result<ClusterManager> {
        config.validate()?;
        if config.launch && launcher.is_none() {
            return Err(Error::InvalidArgument(
                "manager.launch is set but no launcher was given".into(),
            ));
        }
        let origin = stores.inventory.next_id("origin").await?;
        let inner = Arc::new(Inner {
            origin,
            stores,
            statuses: Mutex::new((HashMap::new(), ScoreBuckets::new(config.buckets))),
            launcher,
            down: Mutex::new(HashMap::new()),
            launched: Mutex::new(Vec::new()),
            waking: Mutex::new(HashSet::new()),
            wake_latencies: Mutex::new(VecDeque::new()),
            cursor: AtomicUsize::new(0),
            deaths: AtomicU64::new(0),
            returns: AtomicU64::new(0),
            redispatched: AtomicU64::new(0),
            failed_pinned: AtomicU64::new(0),
            relaunched: AtomicU64::new(0),
            config,
        });
        if inner.config.launch {
            if let Some(launcher) = &inner.launcher {
                for index in 0..pool {
                    let suspended =
                        inner.config.elastic() && index >= inner.config.min_active.max(1);
                    let w = launcher.launch(index, suspended).await?;
                    tracing::info!(worker = index, locator = %w.locator, suspended, "launched worker");
                    inner.launched.lock().push(w);
                }
            }
        }
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(inner.clone(), stopped));
        Ok(ClusterManager {
            inner,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// Latest statuses as published (down workers as Decommissioned), best
    /// score first.
    pub fn workers(&self) -> Vec<WorkerStatus> {
        let guard = self.inner.statuses.lock();
        let (statuses, buckets) = &*guard;
        buckets
            .sorted()
            .iter()
            .filter_map(|(id, _)| statuses.get(id).cloned())
            .collect()
    }

    /// Workers currently declared down.
    pub fn down(&self) -> Vec<WorkerId> {
        let mut ids: Vec<WorkerId> = self.inner.down.lock().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Latencies of the wake-ups this manager sent (push of the activation
    /// message until the inventory shows the worker Active), oldest first.
    pub fn wake_latencies(&self) -> Vec<Duration> {
        self.inner.wake_latencies.lock().iter().copied().collect()
    }

    pub fn stats(&self) -> ClusterStats {
        let i = &self.inner;
        ClusterStats {
            deaths: i.deaths.load(Ordering::Relaxed),
            returns: i.returns.load(Ordering::Relaxed),
            redispatched: i.redispatched.load(Ordering::Relaxed),
            failed_pinned: i.failed_pinned.load(Ordering::Relaxed),
            relaunched: i.relaunched.load(Ordering::Relaxed),
        }
    }

    /// Wakes a suspended worker now (whatever the load) and returns the
    /// latency, or None if it did not become Active within the timeout.
    pub async fn wake(&self, id: WorkerId) -> Result<Option<Duration>> {
        wake(&self.inner, id).await
    }

    /// Decommissions a launched worker: stops its process (it finishes what
    /// it took first). Its queued tasks move on once it is declared down.
    pub async fn decommission(&self, index: usize) -> Result<()> {
        let Some(launcher) = &self.inner.launcher else {
            return Err(Error::InvalidArgument(
                "this manager has no launcher to stop workers with".into(),
            ));
        };
        let worker = {
            let mut launched = self.inner.launched.lock();
            let Some(at) = launched.iter().position(|w| w.index == index) else {
                return Err(Error::NotFound(format!("launched worker {index}")));
            };
            launched.remove(at)
        };
        launcher.stop(&worker).await
    }

    /// Stops managing and stops every launched worker.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                tracing::error!("cluster manager loop ended abnormally: {e}");
            }
        }
        let launched: Vec<LaunchedWorker> = std::mem::take(&mut *self.inner.launched.lock());
        if let Some(launcher) = &self.inner.launcher {
            for w in &launched {
                if let Err(e) = launcher.stop(w).await {
                    tracing::warn!(worker = w.index, "stopping worker: {e}");
                }
            }
        }
    }
}

async fn run(inner: Arc<Inner>, mut stopped: watch::Receiver<bool>) {
    // Workers starting with the manager register within `dead_after_ms`;
    // before that, a missing active worker is not yet a reason to wake the
    // elastic reserve.
    let settled = tokio::time::Instant::now() + Duration::from_millis(inner.config.dead_after_ms);
    let mut ticker = tokio::time::interval(Duration::from_millis(inner.config.interval_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let dead_after = inner.config.dead_after_ms.saturating_mul(1_000_000);
    let mut watch = Watch::new(now_nanos(), dead_after / 2);
    let mut swept = Instant::now();
    while !*stopped.borrow() {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.changed() => break,
        }
        let asked = now_nanos();
        let statuses = match inner.stores.inventory.workers().await {
            Ok(statuses) => statuses,
            Err(e) => {
                watch.failed();
                tracing::warn!("cannot read worker statuses: {e}");
                continue;
            }
        };
        watch.answered(asked, now_nanos());
        let statuses = detect(&inner, statuses, &watch, asked).await;
        {
            // A worker removed from the inventory (retired) is forgotten.
            let known = |id: &WorkerId| statuses.iter().any(|s| s.spec.id == *id);
            inner.down.lock().retain(|id, _| known(id));
            let mut guard = inner.statuses.lock();
            let (map, buckets) = &mut *guard;
            let gone: Vec<WorkerId> = map.keys().filter(|id| !known(id)).copied().collect();
            for id in gone {
                map.remove(&id);
                buckets.remove(id);
            }
            for s in &statuses {
                buckets.update(s.spec.id, s.score);
                map.insert(s.spec.id, s.clone());
            }
        }
        let down: Vec<WorkerId> = inner.down.lock().keys().copied().collect();
        for id in &down {
            if let Err(e) = drain(&inner, *id, &statuses).await {
                tracing::warn!(
                    worker = id,
                    "cannot re-dispatch the tasks of a down worker: {e}"
                );
            }
        }
        relaunch_dead(&inner, &down).await;
        if swept.elapsed() >= SWEEP_EVERY {
            swept = Instant::now();
            free_unheld(&inner).await;
        }
        if inner.config.elastic() && tokio::time::Instant::now() >= settled {
            let live: Vec<WorkerStatus> = statuses
                .iter()
                .filter(|s| !down.contains(&s.spec.id))
                .cloned()
                .collect();
            if let Some(id) = worker_to_wake(&live, &inner.config) {
                if inner.waking.lock().insert(id) {
                    let inner = inner.clone();
                    tokio::spawn(async move {
                        if let Err(e) = wake(&inner, id).await {
                            tracing::warn!(worker = id, "cannot wake worker: {e}");
                        }
                        inner.waking.lock().remove(&id);
                    });
                }
            }
        }
    }
}

/// When the silence of a worker is evidence that it is dead. Two things
/// are not:
///
/// - The time a read of the statuses took: it shows no heartbeat written
///   after it was asked, so silence is measured up to the asking.
/// - An inventory outage: while the inventory failed or stalled the
///   manager's read, it likely failed or stalled the workers' heartbeats
///   too (a Redis restart blocks both for a second or more). Silence is
///   measured only from the moment the inventory answered again, so every
///   worker gets a whole `dead_after` to be heard after it comes back.
///   Without this, the first read after a restart showed every worker's
///   last heartbeat from before the outage and declared live workers down;
///   reads of their data then failed with "worker N is down".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Watch {
    /// Nanoseconds since the epoch from which silence counts.
    since: u64,
    /// A read failed: the next answer restarts the watch.
    blind: bool,
    /// A read slower than this (nanoseconds) was a stall.
    stall: u64,
}

impl Watch {
    fn new(now: u64, stall: u64) -> Watch {
        Watch {
            since: now,
            blind: false,
            stall,
        }
    }

    fn failed(&mut self) {
        self.blind = true;
    }

    /// A read asked at `asked` answered at `answered`.
    fn answered(&mut self, asked: u64, answered: u64) {
        if self.blind || answered.saturating_sub(asked) > self.stall {
            self.since = answered;
            self.blind = false;
        }
    }

    /// How long a worker with this last `heartbeat` has been silent for
    /// certain, as of a read asked at `asked`.
    fn silence(&self, heartbeat: u64, asked: u64) -> u64 {
        asked.saturating_sub(heartbeat.max(self.since))
    }
}

/// Declares silent workers down and down workers with a fresh heartbeat
/// back; returns the statuses as they now stand. `asked`: when the read of
/// `statuses` was asked.
async fn detect(
    inner: &Inner,
    mut statuses: Vec<WorkerStatus>,
    watch: &Watch,
    asked: u64,
) -> Vec<WorkerStatus> {
    let dead_after = inner.config.dead_after_ms.saturating_mul(1_000_000);
    for s in &mut statuses {
        let id = s.spec.id;
        let newly_down = {
            let mut down = inner.down.lock();
            match down.get(&id).copied() {
                Some((silent_since, _)) if s.heartbeat > silent_since => {
                    down.remove(&id);
                    inner.returns.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(worker = id, "worker is back");
                    false
                }
                Some(_) => {
                    s.state = WorkerState::Decommissioned;
                    false
                }
                None if watch.silence(s.heartbeat, asked) > dead_after => {
                    down.insert(id, (s.heartbeat, Instant::now()));
                    true
                }
                None => false,
            }
        };
        if newly_down {
            inner.deaths.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                worker = id,
                "worker is down: no heartbeat for {} ms",
                asked.saturating_sub(s.heartbeat) / 1_000_000
            );
            s.state = WorkerState::Decommissioned;
            // Keeps the old heartbeat: the worker's next publication (a
            // restart) overwrites this and tells the manager it is back.
            if let Err(e) = inner.stores.inventory.put_worker(s.clone()).await {
                tracing::warn!(worker = id, "cannot publish the worker as down: {e}");
            }
        }
    }
    statuses
}

/// Frees the files kept open past their last name for clients that died
/// holding them (their lease lapsed): dropped from the inventory, their
/// bytes freed by delete labels signed as their application. A failure
/// leaves the bytes to the worker's reconciliation at its next start.
async fn free_unheld(inner: &Inner) {
    let gone = match inner.stores.inventory.drop_unheld().await {
        Ok(gone) => gone,
        Err(e) => {
            tracing::warn!("cannot look for files their clients left open: {e}");
            return;
        }
    };
    for file in &gone {
        let secret = match inner.stores.inventory.app(file.owner).await {
            Ok(Some(app)) => app.secret,
            _ => String::new(),
        };
        let one = std::slice::from_ref(file);
        if let Err(e) =
            labios_store::free_files(&inner.stores, one, file.owner, &secret, inner.origin).await
        {
            tracing::warn!(
                file = file.id,
                "cannot free a file its client left open: {e}"
            );
        } else {
            tracing::info!(file = file.id, "freed a file its dead client left open");
        }
    }
}

/// Whether a task needs one worker's local data (see the module docs): a
/// read of a LABIOS file, or a label addressed to a worker. What external
/// storage holds any live worker reaches.
fn pinned(task: &Task) -> bool {
    task.labels.iter().any(|l: &Label| {
        matches!(l.destination, Pointer::Worker(_))
            || (!l.mutates() && !matches!(l.source, Pointer::Uri { .. }))
    })
}

/// Moves one batch of a down worker's queue to live workers.
async fn drain(inner: &Inner, id: WorkerId, statuses: &[WorkerStatus]) -> Result<()> {
    let queue = worker_queue(id);
    let deliveries = inner
        .stores
        .tasks
        .pull(&queue, DRAIN_BATCH, DRAIN_WAIT)
        .await?;
    if deliveries.is_empty() {
        return Ok(());
    }
    let down: HashSet<WorkerId> = inner.down.lock().keys().copied().collect();
    let live: Vec<WorkerId> = {
        let usable = |state: WorkerState| {
            statuses
                .iter()
                .filter(|s| s.state == state && !down.contains(&s.spec.id))
                .map(|s| s.spec.id)
                .collect::<Vec<_>>()
        };
        let active = usable(WorkerState::Active);
        // Pushing to a suspended worker wakes it; better than nothing.
        if active.is_empty() {
            usable(WorkerState::Suspended)
        } else {
            active
        }
    };
    let mut done = Vec::with_capacity(deliveries.len());
    for Delivery { item: task, token } in deliveries {
        let task = unsettled(inner, task).await;
        if task.is_wake_up() {
            done.push(token);
        } else if pinned(&task) {
            // Held (not acknowledged) unless the worker stays gone; see the
            // module docs.
            if still_down_after_grace(inner, id).await {
                fail_pinned(inner, id, &task).await;
                done.push(token);
            }
        } else if live.is_empty() {
            // Not acknowledged: handed out again after ack_wait, by then
            // some worker may be back.
            tracing::warn!(
                worker = id,
                "no live worker to take the tasks of a down worker"
            );
        } else {
            let target = live[inner.cursor.fetch_add(1, Ordering::Relaxed) % live.len()];
            let task_len = task.labels.len();
            match inner
                .stores
                .tasks
                .push(&worker_queue(target), vec![task])
                .await
            {
                Ok(()) => {
                    inner.redispatched.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        from = id,
                        to = target,
                        labels = task_len,
                        "task of a down worker re-dispatched"
                    );
                    done.push(token);
                }
                Err(e) => {
                    tracing::warn!(worker = target, "cannot re-dispatch a task: {e}");
                }
            }
        }
    }
    inner.stores.tasks.ack(&queue, &done).await
}

/// The task without the labels that already took effect (see
/// [`crate::replay`]): the dead worker may have executed them and died
/// before acknowledging the task. An empty result is acknowledged like an
/// activation message.
async fn unsettled(inner: &Inner, mut task: Task) -> Task {
    let mut keep = Vec::with_capacity(task.labels.len());
    for label in std::mem::take(&mut task.labels) {
        match settled(inner, &label).await {
            Ok(true) => tracing::info!(label = %label.id, "label of a down worker had already run"),
            Ok(false) => keep.push(label),
            Err(e) => {
                tracing::warn!(label = %label.id, "cannot tell whether a label already ran: {e}");
                keep.push(label);
            }
        }
    }
    task.labels = keep;
    task
}

/// Whether the label already ran; records Complete for a write whose first
/// execution died before recording it.
async fn settled(inner: &Inner, label: &Label) -> Result<bool> {
    let Some(status) = took_effect(&inner.stores, label).await? else {
        return Ok(false);
    };
    if status.state == LabelState::Complete {
        inner.stores.inventory.set_status(status).await?;
    }
    Ok(true)
}

/// Whether worker `id` has been down for a further `dead_after_ms` and a
/// fresh look at the inventory still finds it silent.
async fn still_down_after_grace(inner: &Inner, id: WorkerId) -> bool {
    let grace = Duration::from_millis(inner.config.dead_after_ms);
    let Some((silent_since, declared)) = inner.down.lock().get(&id).copied() else {
        return false;
    };
    if declared.elapsed() < grace {
        return false;
    }
    match inner.stores.inventory.workers().await {
        Ok(workers) => !workers
            .iter()
            .any(|w| w.spec.id == id && w.heartbeat > silent_since),
        Err(e) => {
            tracing::warn!(worker = id, "cannot re-check a down worker: {e}");
            false
        }
    }
}

async fn fail_pinned(inner: &Inner, id: WorkerId, task: &Task) {
    for label in &task.labels {
        let status = LabelStatus {
            worker: Some(id),
            error: Some(format!(
                "worker {id} is down: its data is unavailable until it restarts"
            )),
            ..LabelStatus::new(label.id, LabelState::Failed)
        };
        if let Err(e) = inner.stores.inventory.set_status(status).await {
            tracing::warn!(worker = id, label = %label.id, "cannot record label status: {e}");
        }
        inner.failed_pinned.fetch_add(1, Ordering::Relaxed);
    }
}

/// Restarts launched workers that are down because their process exited.
async fn relaunch_dead(inner: &Inner, down: &[WorkerId]) {
    let Some(launcher) = &inner.launcher else {
        return;
    };
    let candidates: Vec<LaunchedWorker> = inner
        .launched
        .lock()
        .iter()
        .filter(|w| down.contains(&(w.index as WorkerId)))
        .cloned()
        .collect();
    for w in candidates {
        if launcher.running(&w).await {
            continue;
        }
        match launcher.launch(w.index, false).await {
            Ok(fresh) => {
                inner.relaunched.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(worker = w.index, locator = %fresh.locator, "relaunched a dead worker");
                let mut launched = inner.launched.lock();
                if let Some(slot) = launched.iter_mut().find(|l| l.index == w.index) {
                    *slot = fresh;
                }
            }
            Err(e) => tracing::warn!(worker = w.index, "cannot relaunch worker: {e}"),
        }
    }
}

/// Pushes an activation message to a suspended worker's queue and waits
/// until the inventory shows it Active.
async fn wake(inner: &Inner, id: WorkerId) -> Result<Option<Duration>> {
    let start = Instant::now();
    inner
        .stores
        .tasks
        .push(&worker_queue(id), vec![Task::wake_up()])
        .await?;
    while start.elapsed() < WAKE_TIMEOUT {
        let workers = inner.stores.inventory.workers().await?;
        if workers
            .iter()
            .any(|w| w.spec.id == id && w.state == WorkerState::Active)
        {
            let latency = start.elapsed();
            let mut latencies = inner.wake_latencies.lock();
            if latencies.len() == LATENCIES_KEPT {
                latencies.pop_front();
            }
            latencies.push_back(latency);
            tracing::info!(worker = id, ?latency, "worker woke up");
            return Ok(Some(latency));
        }
        tokio::time::sleep(WAKE_POLL).await;
    }
    tracing::warn!(worker = id, "worker did not wake within {WAKE_TIMEOUT:?}");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_label::{LabelId, LabelKind};

    const MS: u64 = 1_000_000;

    #[test]
    fn silence_counts_up_to_the_asking_of_the_read() {
        let mut watch = Watch::new(0, 500 * MS);
        // A read asked at 1,000 ms that answered 400 ms later shows the
        // heartbeat of 900 ms: silent 100 ms, not 500.
        watch.answered(1_000 * MS, 1_400 * MS);
        assert_eq!(watch.silence(900 * MS, 1_000 * MS), 100 * MS);
        assert_eq!(watch.since, 0, "a read of 400 ms is no stall");
    }

    #[test]
    fn after_an_inventory_outage_silence_counts_from_its_end() {
        let mut watch = Watch::new(0, 500 * MS);
        watch.answered(1_000 * MS, 1_001 * MS);
        watch.failed();
        watch.failed();
        // Back at 3,000 ms: a heartbeat of 900 ms is not 2 s of silence.
        watch.answered(3_000 * MS, 3_001 * MS);
        assert_eq!(watch.silence(900 * MS, 3_000 * MS), 0);
        assert_eq!(watch.silence(900 * MS, 4_101 * MS), 1_100 * MS);
        // Later prompt answers leave the watch where it was.
        watch.answered(4_000 * MS, 4_002 * MS);
        assert_eq!(watch.since, 3_001 * MS);
    }

    #[test]
    fn a_stalled_read_restarts_the_watch() {
        let mut watch = Watch::new(0, 500 * MS);
        // Redis stopped for 1.6 s: the read asked at 1,000 ms answers at
        // 2,600 ms, and the workers' heartbeats were held up as long.
        watch.answered(1_000 * MS, 2_600 * MS);
        assert_eq!(watch.since, 2_600 * MS);
        assert_eq!(watch.silence(950 * MS, 3_000 * MS), 400 * MS);
        assert_eq!(watch.silence(2_900 * MS, 3_000 * MS), 100 * MS);
    }

    #[test]
    fn reads_and_labels_addressed_to_a_worker_are_pinned() {
        let label = |kind, dest| {
            let mut l = Label::new(
                LabelId {
                    nanos: 1,
                    origin: 1,
                },
                kind,
                1,
            );
            l.destination = dest;
            l
        };
        assert!(!pinned(&Task::single(label(
            LabelKind::Write,
            Pointer::None
        ))));
        assert!(pinned(&Task::single(label(LabelKind::Read, Pointer::None))));
        assert!(pinned(&Task::single(label(
            LabelKind::Flush,
            Pointer::Worker(2)
        ))));
        let mut mixed = Task::single(label(LabelKind::Write, Pointer::None));
        mixed.labels.push(label(LabelKind::Read, Pointer::None));
        assert!(pinned(&mixed));
        assert!(!pinned(&Task::wake_up()));
    }
}
