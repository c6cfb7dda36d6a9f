//! Giving back space that a worker's labels leave as garbage on other
//! workers: a write displaces older bytes of its range held elsewhere, and
//! a rename over a file leaves the replaced file's bytes wherever they
//! were. Each such worker gets a delete label in its own queue, which frees
//! there whatever of the range the inventory no longer gives it
//! (`Executor::keep_held`).
//!
//! The deletes are sent from here, off the lanes. A lane that waited for
//! room in another worker's full queue could wait for ever: that worker's
//! lanes may all be waiting for room in this worker's queue, which nobody
//! pulls while this worker's lanes wait (the soak in BENCHMARKS.md found
//! exactly this). Nothing waits for a reclaim, so nothing needs to: the
//! bytes are unreachable already and their extents committed elsewhere.
//! Requests for one file on one worker merge into one span (a delete keeps
//! what the inventory gives its worker, so a wider span frees nothing
//! live), which bounds the backlog by files, not labels. A reclaim that
//! never gets sent (the outbox full, the service stopped) costs only space,
//! which the holder's reconciliation at its next start gives back.

use labios_label::{
    worker_origin, AppId, FileId, Label, LabelIdGen, LabelKind, Pointer, Task, WorkerId,
};
use labios_store::{worker_queue, LabelVerifier, Stores};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Files at most waiting to be reclaimed on other workers. Beyond it a
/// request is dropped (and counted): the outbox must not grow without
/// bound while a worker it sends to is gone.
pub const MAX_PENDING: usize = 1 << 16;

/// Deletes pushed to one queue at once: under any queue bound, so that a
/// push is all or nothing.
const PUSH_CHUNK: usize = 64;

/// Pause after a failed push before trying that worker again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How long a stopping worker still tries to send what is pending.
const LAST_SEND: Duration = Duration::from_secs(2);

/// Bytes of one file to free on one other worker.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    path: String,
    owner: AppId,
    start: u64,
    /// Exclusive; `u64::MAX` for "to the end".
    end: u64,
}

/// One worker's outbox of reclaims. Shared by its lanes (which add) and
/// its sender task (which takes).
pub struct Reclaims {
    stores: Stores,
    /// Signs each delete for the file's owner: the receiving worker checks
    /// signatures like any other label's.
    verifier: LabelVerifier,
    /// Ids of this worker's own labels (see [`worker_origin`]).
    ids: LabelIdGen,
    pending: Mutex<HashMap<(WorkerId, FileId), Span>>,
    ready: Notify,
    dropped: AtomicU64,
}

impl Reclaims {
    pub fn new(worker: WorkerId, stores: Stores) -> Self {
        Reclaims {
            verifier: LabelVerifier::new(stores.inventory.clone()),
            stores,
            ids: LabelIdGen::new(worker_origin(worker)),
            pending: Mutex::new(HashMap::new()),
            ready: Notify::new(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Asks `worker` to free what it holds of `file` in `start..end`
    /// beyond what the inventory gives it. Never waits.
    pub fn add(
        &self,
        worker: WorkerId,
        file: FileId,
        path: &str,
        owner: AppId,
        start: u64,
        end: u64,
    ) {
        assert!(start <= end, "reclaim span {start}..{end} is reversed");
        if start == end {
            return;
        }
        let mut pending = self.pending.lock();
        let full = pending.len() >= MAX_PENDING;
        match pending.get_mut(&(worker, file)) {
            Some(span) => {
                span.start = span.start.min(start);
                span.end = span.end.max(end);
            }
            None if full => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(
                    worker,
                    file,
                    dropped,
                    "reclaim outbox full ({MAX_PENDING} files): the space of {path} \
                     there waits for that worker's next start"
                );
            }
            None => {
                let span = Span {
                    path: path.to_string(),
                    owner,
                    start,
                    end,
                };
                pending.insert((worker, file), span);
            }
        }
        drop(pending);
        self.ready.notify_one();
    }

    /// Sends reclaims as they come until `stop` turns true, then tries
    /// for [`LAST_SEND`] to send what is left.
    pub async fn run(&self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let batch = self.take();
            if batch.is_empty() {
                tokio::select! {
                    _ = ready => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            tokio::select! {
                _ = self.send(batch) => {}
                _ = stop.changed() => {}
            }
        }
        let left = self.take();
        if !left.is_empty() {
            let files = left.values().map(Vec::len).sum::<usize>();
            if tokio::time::timeout(LAST_SEND, self.send(left))
                .await
                .is_err()
            {
                tracing::warn!(
                    "stopping with reclaims of up to {files} files unsent: \
                     their workers free that space at their next start"
                );
            }
        }
    }

    /// Everything pending, by worker.
    fn take(&self) -> BTreeMap<WorkerId, Vec<(FileId, Span)>> {
        let mut by_worker: BTreeMap<WorkerId, Vec<(FileId, Span)>> = BTreeMap::new();
        for ((worker, file), span) in self.pending.lock().drain() {
            by_worker.entry(worker).or_default().push((file, span));
        }
        by_worker
    }

    /// Pushes each worker's deletes to its queue. A worker whose queue
    /// refuses them gets them back in the outbox (merged with newer ones)
    /// and is tried again after [`RETRY_PAUSE`].
    async fn send(&self, batch: BTreeMap<WorkerId, Vec<(FileId, Span)>>) {
        let mut failed = false;
        for (worker, spans) in batch {
            for chunk in spans.chunks(PUSH_CHUNK) {
                if let Err(e) = self.push(worker, chunk).await {
                    tracing::warn!(worker, "cannot send reclaims yet: {e}");
                    let mut pending = self.pending.lock();
                    for (file, span) in chunk {
                        let merged = pending.entry((worker, *file)).or_insert(span.clone());
                        merged.start = merged.start.min(span.start);
                        merged.end = merged.end.max(span.end);
                    }
                    failed = true;
                }
            }
        }
        if failed {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// One task per file: a worker runs a task's labels in the lane of its
    /// first file, and a delete must run in the lane of the file it frees,
    /// where it cannot overlap a write of that file.
    async fn push(&self, worker: WorkerId, spans: &[(FileId, Span)]) -> labios_label::Result<()> {
        let mut tasks = Vec::with_capacity(spans.len());
        for (file, span) in spans {
            let mut delete = Label::new(self.ids.next(), LabelKind::Delete, span.owner);
            delete.source = Pointer::File {
                path: span.path.clone(),
                file: *file,
                offset: span.start,
                // 0: to the end of the file (see `Executor::delete`).
                len: if span.end == u64::MAX {
                    0
                } else {
                    span.end - span.start
                },
            };
            delete.destination = Pointer::Worker(worker);
            self.verifier.sign(&mut delete).await?;
            tasks.push(Task::single(delete));
        }
        self.stores.tasks.push(&worker_queue(worker), tasks).await
    }
}
