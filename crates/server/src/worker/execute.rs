//! Label execution (article 3.3.3a (b)): turns one label into local I/O plus
//! the inventory and warehouse updates that make its effect visible, and
//! reports exactly one final [`LabelStatus`] for it.
//!
//! Order of effects for a write: bytes on disk, then the extent in the
//! inventory, then the warehouse copy is dropped, then Complete. A crash at
//! any point leaves either the old data visible or the new data readable,
//! never an extent pointing at bytes that were not written.

use super::space::Space;
use bytes::Bytes;
use labios_functions::{Sandbox, SandboxLimits};
use labios_label::anatomy::{self, Phase};
use labios_label::{
    Error, FileId, Label, LabelKind, LabelState, LabelStatus, Pointer, Result, WorkerId,
    WorkerState, LABEL_SIZE_LIMIT,
};
use labios_stack::live::Live;
use labios_stack::Backend;
use labios_store::warehouse::release;
use labios_store::{Extent, Stores};

mod external;
mod pipeline;
use super::auth::Guard;
use super::reclaim::Reclaims;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Largest read a single label may ask for: the buffer is allocated up
/// front, so an absurd length must not take the worker's memory with it.
/// Label managers split far below this.
pub const MAX_READ: u64 = 1 << 30;

const COMPOSITE: &str =
    "composite labels are not supported: put the functions in a read or write label's operations";

/// What a finished label did, for the worker's statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: LabelStatus,
    pub bytes: u64,
}

/// Executes labels for one worker. Shared by all its lanes.
pub struct Executor {
    id: WorkerId,
    space: Space,
    retries: u32,
    /// Every live worker publishes its status at least this often; a
    /// status older than twice this belongs to a worker that is gone.
    heartbeat: Duration,
    storage: Arc<dyn Backend>,
    stores: Stores,
    /// Space this worker's labels leave on other workers, sent from there
    /// off the lanes.
    reclaims: Arc<Reclaims>,
    /// Who may run labels here (worker/auth.rs).
    admission: Guard,
    /// Runs applications' own functions; `None` on a worker that declines
    /// pipelines (`functions = false`).
    sandbox: Option<Arc<Sandbox>>,
    /// Where pipelines run: bounded, elastic, behind the rest.
    compute: Arc<super::Compute>,
    /// External storage this worker reaches.
    mounts: labios_bridge::Mounts,
    /// This worker among those of the process serving `mounts`.
    serving: labios_bridge::Serving,
}

/// A label-level failure: the label is Failed with this text, the worker
/// carries on.
type Failure = String;

impl Executor {
    /// An executor for worker `id` with `config`'s retries, heartbeat,
    /// function limits (when the worker takes pipelines) and mounts.
    pub fn new(
        id: WorkerId,
        capacity: u64,
        functions: bool,
        config: &super::WorkerConfig,
        storage: Arc<Live>,
        stores: Stores,
        compute: Arc<super::Compute>,
    ) -> Result<Self> {
        let limits = functions.then(|| SandboxLimits {
            fuel: config.function_fuel,
            memory_bytes: usize::try_from(config.function_memory_bytes).unwrap_or(usize::MAX),
            timeout_ms: config.function_timeout_ms,
        });
        let sandbox = limits.map(Sandbox::new).transpose()?.map(Arc::new);
        let mounts = labios_bridge::Mounts::shared(&config.mounts)?;
        Ok(Executor {
            id,
            space: Space::new(capacity),
            retries: config.retries,
            heartbeat: Duration::from_millis(config.score_interval_ms),
            admission: Guard::new(id, stores.clone(), storage.clone()),
            storage,
            reclaims: Arc::new(Reclaims::new(id, stores.clone())),
            stores,
            sandbox,
            compute,
            serving: mounts.serving(),
            mounts,
        })
    }

    /// Once the process's last worker stops, stores what the external
    /// mounts acknowledged but hold in memory
    /// ([`labios_bridge::Serving::stop`]), before the worker says it stopped.
    pub async fn settle_mounts(&self) -> Result<()> {
        self.serving.stop().await
    }

    /// The outbox of space to give back on other workers, whose sender the
    /// worker runs.
    pub fn reclaims(&self) -> Arc<Reclaims> {
        self.reclaims.clone()
    }

    /// Runs one label to a final status. Never returns an error: every
    /// failure becomes a Failed status naming the cause.
    pub async fn execute(&self, label: &Label) -> Outcome {
        let result = match self.admission.signed(label).await {
            // A label not signed by the owner of its warehouse entries may
            // name another application's: they are left alone.
            Err(reason) => Err(reason),
            Ok(()) => {
                let done = match self.admission.may_run(label).await {
                    Ok(()) => self.run(label).await,
                    Err(reason) => Err(reason),
                };
                self.release(&[(label, done.is_err())]).await;
                done
            }
        };
        self.outcome(label, result)
    }

    /// Runs the labels of an aggregated task (consecutive writes of one
    /// file, article 3.3.2c) with one vectored call to the stack, so that
    /// the device sees one write (and one sync) for them all, and their
    /// warehouse entries go in one call. Each label still gets its own
    /// outcome, checks, newest-label-wins guard and extent commit. Labels
    /// that cannot share a call (see [`writable_at_once`]) run one by one.
    pub async fn execute_writes(&self, labels: &[&Label]) -> Vec<Outcome> {
        if !writable_at_once(labels) {
            let mut outcomes = Vec::with_capacity(labels.len());
            for label in labels {
                outcomes.push(self.execute(label).await);
            }
            return outcomes;
        }
        let prepared = futures::future::join_all(labels.iter().map(|label| async move {
            self.admission.signed(label).await?;
            Ok::<_, Failure>(match self.admission.may_run(label).await {
                Ok(()) => self.prepare(label).await,
                Err(reason) => Err(reason),
            })
        }))
        .await;
        let ready: Vec<(usize, (&Label, &Staged))> = labels
            .iter()
            .zip(&prepared)
            .enumerate()
            .filter_map(|(i, (label, p))| match p {
                Ok(Ok(staged)) => Some((i, (*label, staged))),
                _ => None,
            })
            .collect();
        let puts = self.put_all(labels.len(), &ready).await;
        let results: Vec<Result<Result<Done, Failure>, Failure>> =
            futures::future::join_all(labels.iter().zip(prepared).zip(puts).map(
                |((label, p), put)| async move {
                    let staged = p?;
                    Ok(match (staged, put) {
                        (Ok(staged), Some(Ok(()))) => {
                            self.commit(label, staged).await.map(Done::bytes)
                        }
                        (Err(reason), _) | (_, Some(Err(reason))) => Err(reason),
                        (Ok(_), None) => unreachable!("every staged write was put"),
                    })
                },
            ))
            .await;
        let ended: Vec<(&Label, bool)> = labels
            .iter()
            .zip(&results)
            .filter_map(|(label, r)| r.as_ref().ok().map(|done| (*label, done.is_err())))
            .collect();
        self.release(&ended).await;
        labels
            .iter()
            .zip(results)
            .map(|(label, r)| self.outcome(label, r.and_then(|done| done)))
            .collect()
    }

    /// Puts the staged writes of an aggregated task (`ready`, by index of
    /// its `n` labels) with one call, or one call each when the worker has
    /// no room for all of them, so that those that fit still land as they
    /// would alone. What each label's put gave, by index.
    async fn put_all(
        &self,
        n: usize,
        ready: &[(usize, (&Label, &Staged))],
    ) -> Vec<Option<Result<(), Failure>>> {
        let mut puts = vec![None; n];
        let size = ready.iter().map(|(_, (_, s))| s.data.len() as u64).sum();
        let whole = self.space.has_room(self.storage.as_ref(), size);
        let per_call = if whole { ready.len().max(1) } else { 1 };
        for group in ready.chunks(per_call) {
            let writes: Vec<(&Label, &Staged)> = group.iter().map(|(_, w)| *w).collect();
            let put = self.put(&writes).await;
            for (i, _) in group {
                puts[*i] = Some(put.clone());
            }
        }
        puts
    }

    /// Drops the warehouse entries of labels that ended (`true`: failed),
    /// in one call: their staged bytes are not read again (a redelivered
    /// copy finds the label ran), and the result of a failed one is not
    /// taken.
    async fn release(&self, ended: &[(&Label, bool)]) {
        let t = anatomy::start();
        let keys: Vec<&str> = ended
            .iter()
            .flat_map(|(label, failed)| {
                let unread = failed.then(|| label.result_key()).flatten();
                label.staged_key().into_iter().chain(unread)
            })
            .collect();
        release(self.stores.warehouse.as_ref(), &keys).await;
        anatomy::record(Phase::WorkerWarehouse, t);
    }

    /// The final status of `label` after `result`.
    fn outcome(&self, label: &Label, result: Result<Done, Failure>) -> Outcome {
        let mut status = LabelStatus::new(label.id, LabelState::Complete);
        status.worker = Some(self.id);
        match result {
            Ok(Done { bytes, result }) => {
                if let Some((key, len)) = result {
                    status.result_key = Some(key);
                    status.result_len = len;
                }
                Outcome { status, bytes }
            }
            Err(reason) => {
                status.state = LabelState::Failed;
                status.error = Some(reason);
                Outcome { status, bytes: 0 }
            }
        }
    }

    async fn run(&self, label: &Label) -> Result<Done, Failure> {
        match label.kind {
            LabelKind::Composite => Err(COMPOSITE.to_string()),
            LabelKind::Write if !label.operations.is_empty() => self.write_through(label).await,
            LabelKind::Read if !label.operations.is_empty() => self.query(label).await,
            _ if !label.operations.is_empty() => Err(format!(
                "{:?} labels take no functions; pipelines run on reads and writes",
                label.kind
            )),
            LabelKind::Write if matches!(label.destination, Pointer::Uri { .. }) => {
                self.write_external(label).await
            }
            LabelKind::Read if matches!(label.source, Pointer::Uri { .. }) => {
                self.read_external(label).await
            }
            LabelKind::Flush if matches!(label.source, Pointer::Uri { .. }) => {
                self.flush_external(label).await
            }
            LabelKind::Delete if matches!(label.source, Pointer::Uri { .. }) => {
                self.remove_external(label).await
            }
            LabelKind::Stat | LabelKind::List => self.metadata_external(label).await,
            LabelKind::Write => self.write(label).await,
            LabelKind::Read => self.read(label).await,
            LabelKind::Delete => self.delete(label).await,
            LabelKind::Flush => self.flush(label).await,
            LabelKind::Rename => self.rename(label).await,
        }
    }

    async fn write(&self, label: &Label) -> Result<Done, Failure> {
        let staged = self.prepare(label).await?;
        let size = self.store(label, staged).await?;
        Ok(Done::bytes(size))
    }

    /// A plain write label's bytes and where they go, with the inventory's
    /// word on which of its ranges no newer label holds.
    async fn prepare(&self, label: &Label) -> Result<Staged, Failure> {
        let len = plain_write_len(label)?;
        let (file, offset, dest_len) = file_of(label, &label.destination, "destination")?;
        let ranges = ranges(label, offset, dest_len, len)?;
        // Two independent look-ups, one round trip.
        let t = anatomy::start();
        let (data, guard) = tokio::join!(
            self.source_bytes(label, len),
            self.not_yet_overwritten(label, file, &ranges)
        );
        anatomy::record(Phase::WorkerWarehouse, t);
        Ok(Staged {
            file,
            ranges,
            data: data?,
            guard: guard?,
        })
    }

    /// The bytes a write label puts in its file: staged in the warehouse,
    /// or zeros made here.
    async fn source_bytes(&self, label: &Label, len: u64) -> Result<Bytes, Failure> {
        match &label.source {
            Pointer::Warehouse { key, .. } => self.staged(label, key, len).await,
            _ => zeros(label, len),
        }
    }

    /// The data a write label staged in the warehouse, checked against
    /// the length the label gives.
    async fn staged(&self, label: &Label, key: &str, len: u64) -> Result<Bytes, Failure> {
        let data = self
            .stores
            .warehouse
            .get(key)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("data for label {} is missing from the warehouse", label.id))?;
        if data.len() as u64 != len {
            return Err(format!(
                "label {} says {len} bytes but the warehouse holds {} bytes",
                label.id,
                data.len()
            ));
        }
        Ok(data)
    }

    /// The one sequence every write into a LABIOS file runs, whatever made
    /// its bytes (plain or pipeline labels, alone or aggregated): the bytes
    /// no newer label holds go to the device ([`Self::put`]), then every
    /// range's extent to the inventory, where the newest label wins, and
    /// the workers whose older bytes the write replaced are told to free
    /// them ([`Self::commit`]).
    async fn store(&self, label: &Label, staged: Staged) -> Result<u64, Failure> {
        self.put(&[(label, &staged)]).await?;
        self.commit(label, staged).await
    }

    /// Puts the pieces of `writes` (all into one file, disjoint) on the
    /// device with one call to the stack, synced if any label asks.
    async fn put(&self, writes: &[(&Label, &Staged)]) -> Result<(), Failure> {
        let file = writes[0].1.file;
        assert!(
            writes.iter().all(|(_, s)| s.file == file),
            "one stack call writes one file"
        );
        let size: u64 = writes.iter().map(|(_, s)| s.data.len() as u64).sum();
        if !self.space.try_reserve(self.storage.as_ref(), size) {
            return Err(format!("worker {} is full", self.id));
        }
        let sync = writes.iter().any(|(label, _)| label.sync);
        let parts: Vec<(Bytes, Vec<Range>)> = writes
            .iter()
            .filter(|(_, s)| !s.guard.pieces.is_empty())
            .map(|(_, s)| (s.data.clone(), s.guard.pieces.clone()))
            .collect();
        let written = self
            .blocking(move |storage| {
                if parts.is_empty() {
                    return Ok(());
                }
                let pieces: Vec<(u64, &[u8])> = parts
                    .iter()
                    .flat_map(|(data, ranges)| {
                        ranges.iter().map(move |r| {
                            (
                                r.file_offset,
                                &data[r.buf_offset as usize..][..r.len as usize],
                            )
                        })
                    })
                    .collect();
                storage.write(file, &pieces, sync)
            })
            .await;
        self.space.release(size);
        written
    }

    /// The extents of a write whose bytes are on the device, and the space
    /// it displaced on other workers; see [`Self::store`].
    async fn commit(&self, label: &Label, staged: Staged) -> Result<u64, Failure> {
        let size = staged.data.len() as u64;
        let t = anatomy::start();
        for r in &staged.ranges {
            let extent = Extent {
                offset: r.file_offset,
                len: r.len,
                worker: self.id,
                label: label.id,
            };
            match self
                .stores
                .inventory
                .commit_extent(staged.file, extent)
                .await
            {
                Ok(()) => {}
                // The file was removed (or replaced by a rename) after this
                // label named it: the write took place just before, and its
                // bytes went with the file. Nothing points at them here.
                Err(Error::NotFound(_)) => {
                    self.keep_held(staged.file, 0, u64::MAX).await?;
                    return Ok(size);
                }
                // The label fails: the bytes just written are garbage
                // unless the commit took effect after all (a lost reply),
                // which the inventory knows. At worst they wait for the
                // next reconciliation.
                Err(e) => {
                    let (_, start, end) = span(label, &staged.ranges);
                    if let Err(again) = self.keep_held(staged.file, start, end).await {
                        tracing::warn!(
                            worker = self.id,
                            "cannot free the bytes of failed label {}: {again}",
                            label.id
                        );
                    }
                    return Err(e.to_string());
                }
            }
        }
        anatomy::record(Phase::WorkerInventory, t);
        if !staged.guard.displaced.is_empty() {
            let (path, start, end) = span(label, &staged.ranges);
            for &worker in &staged.guard.displaced {
                self.reclaims
                    .add(worker, staged.file, &path, label.owner, start, end);
            }
        }
        Ok(size)
    }

    /// What of `ranges` to put on this worker's device: the parts no newer
    /// label holds on any worker. Labels of one file reach a worker in id
    /// order when a single dispatcher serves their queue, but several
    /// dispatchers (or a retry) can deliver an older write after a newer
    /// one; writing it anyway would put stale bytes under an extent the
    /// inventory gives to the newer label, or bytes nobody points at.
    /// Also the other workers holding older bytes of these ranges, which
    /// the write makes garbage there.
    async fn not_yet_overwritten(
        &self,
        label: &Label,
        file: FileId,
        ranges: &[Range],
    ) -> Result<Guarded, Failure> {
        let mut guard = Guarded {
            pieces: Vec::with_capacity(ranges.len()),
            displaced: BTreeSet::new(),
        };
        for r in ranges {
            let extents = match self
                .stores
                .inventory
                .extents(file, r.file_offset, r.len)
                .await
            {
                Ok(extents) => extents,
                // Removed since the label named it: nothing to write (see
                // `store`, whose commit then finds it gone).
                Err(Error::NotFound(_)) => {
                    guard.pieces.clear();
                    return Ok(guard);
                }
                Err(e) => return Err(e.to_string()),
            };
            let (newer, older): (Vec<Extent>, Vec<Extent>) =
                extents.into_iter().partition(|e| e.label > label.id);
            guard.displaced.extend(
                older
                    .iter()
                    .filter(|e| e.worker != self.id && e.len > 0)
                    .map(|e| e.worker),
            );
            let mut at = r.file_offset;
            let end = r.file_offset + r.len;
            let stop = Extent {
                offset: end,
                len: 0,
                worker: self.id,
                label: label.id,
            };
            for e in newer.iter().chain(std::iter::once(&stop)) {
                if e.offset > at {
                    guard.pieces.push(Range {
                        file_offset: at,
                        buf_offset: r.buf_offset + (at - r.file_offset),
                        len: e.offset - at,
                    });
                }
                at = at.max(e.offset + e.len);
            }
        }
        Ok(guard)
    }

    async fn read(&self, label: &Label) -> Result<Done, Failure> {
        let (file, offset, len) = file_of(label, &label.source, "source")?;
        let key = answered_in(label, len, "read of")?;
        let data = self.read_local(file, offset, len).await?;
        self.answer(key, Bytes::from(data), len).await
    }

    /// Puts a label's result in the warehouse entry its client takes it
    /// from; the status names it, so that `labios serve` can bring a small
    /// one back with the status. `moved` is what the label processed.
    async fn answer(&self, key: &str, data: Bytes, moved: u64) -> Result<Done, Failure> {
        let n = data.len() as u64;
        let t = anatomy::start();
        self.stores
            .warehouse
            .put_result(key, data)
            .await
            .map_err(|e| e.to_string())?;
        anatomy::record(Phase::WorkerWarehouse, t);
        Ok(Done {
            bytes: moved,
            result: Some((key.to_string(), n)),
        })
    }

    /// `len` bytes of `file` at `offset` from this worker's device, holes
    /// as zeros; bytes held by another worker are a failure.
    async fn read_local(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<u8>, Failure> {
        let t = anatomy::start();
        let extents = self
            .stores
            .inventory
            .extents(file, offset, len)
            .await
            .map_err(|e| e.to_string())?;
        anatomy::record(Phase::WorkerInventory, t);
        if let Some(e) = extents.iter().find(|e| e.worker != self.id && e.len > 0) {
            return Err(self.held_elsewhere(file, e).await);
        }
        let data = self
            .blocking(move |storage| {
                // Holes (no extent) read as zeros.
                let mut buf = vec![0u8; len as usize];
                for e in &extents {
                    let start = e
                        .offset
                        .checked_sub(offset)
                        .filter(|s| s + e.len <= len)
                        .ok_or_else(|| {
                            Error::Protocol(format!("inventory extent {e:?} is outside the read"))
                        })?;
                    storage.read(file, e.offset, &mut buf[start as usize..][..e.len as usize])?;
                }
                Ok(buf)
            })
            .await?;
        Ok(data)
    }

    /// Why bytes of another worker cannot be read here. Either that worker
    /// is down (a manager publishes a worker it lost as Decommissioned, and
    /// the worker itself publishes nothing more): no worker can serve the
    /// read until it is back, so the failure names it and is final. Or the
    /// bytes moved between the client's lookup and now: "moved:", which the
    /// client retries.
    async fn held_elsewhere(&self, file: FileId, e: &Extent) -> Failure {
        let holder = match self.stores.inventory.workers().await {
            Ok(workers) => workers.into_iter().find(|w| w.spec.id == e.worker),
            Err(err) => {
                tracing::warn!(
                    worker = self.id,
                    "cannot look up worker {}: {err}",
                    e.worker
                );
                None
            }
        };
        let silent = |heartbeat: u64| {
            let age = labios_label::id::now_nanos().saturating_sub(heartbeat);
            age > (2 * self.heartbeat).as_nanos() as u64
        };
        let range = format!("bytes {}..{} of file {file}", e.offset, e.offset + e.len);
        match holder {
            Some(w) if w.state == WorkerState::Decommissioned && silent(w.heartbeat) => format!(
                "worker {} is down: {range} are unavailable until it restarts",
                e.worker
            ),
            _ => format!(
                "moved: {range} are on worker {}, not worker {}",
                e.worker, self.id
            ),
        }
    }

    /// Frees what this worker holds of a file and the inventory no longer
    /// gives it, in the label's range (`len` 0: the whole file): all of it
    /// once the file is removed; after a truncation or an overwrite on
    /// another worker, the bytes that went out of use. A worker runs a
    /// delete alone among the tasks of its file, so no write of it is
    /// between its bytes and its extent meanwhile.
    async fn delete(&self, label: &Label) -> Result<Done, Failure> {
        let (file, offset, len) = file_of(label, &label.source, "source")?;
        let end = if len == 0 {
            u64::MAX
        } else {
            offset.saturating_add(len)
        };
        self.keep_held(file, offset, end).await?;
        Ok(Done::bytes(0))
    }

    /// [`Backend::keep_only`] what the inventory gives this worker of
    /// `file` in `start..end`.
    async fn keep_held(&self, file: FileId, start: u64, end: u64) -> Result<(), Failure> {
        let exists = self.stores.inventory.file(file).await;
        let held: Vec<(u64, u64)> = match exists.map_err(|e| e.to_string())? {
            None => Vec::new(),
            Some(_) => self
                .stores
                .inventory
                .extents(file, start, end - start)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|e| e.worker == self.id && e.len > 0)
                .map(|e| (e.offset, e.offset + e.len))
                .collect(),
        };
        self.blocking(move |storage| storage.keep_only(file, start, end, &held))
            .await
    }

    /// Brings this worker's device in line with the inventory after a
    /// restart: files removed, truncated or overwritten elsewhere while it
    /// was down (or whose deletes failed) give their space back.
    pub async fn reconcile(&self) -> Result<(), Failure> {
        let files = self.blocking(|storage| storage.files()).await?;
        for file in files {
            self.keep_held(file, 0, u64::MAX).await?;
        }
        Ok(())
    }

    async fn flush(&self, label: &Label) -> Result<Done, Failure> {
        let (file, _, _) = file_of(label, &label.source, "source")?;
        self.blocking(move |storage| storage.flush(file)).await?;
        Ok(Done::bytes(0))
    }

    /// Renames in the inventory; if that replaced a file, its bytes are
    /// reclaimed here and on every other worker that held some of them.
    async fn rename(&self, label: &Label) -> Result<Done, Failure> {
        let (
            Pointer::File {
                path: from,
                file: source,
                ..
            },
            Pointer::File { path: to, .. },
        ) = (&label.source, &label.destination)
        else {
            return Err(format!(
                "rename label {} needs file source and destination",
                label.id
            ));
        };
        // The label moves the file it names, not whatever `from` names
        // now: a copy delivered twice (to another worker, which has not
        // seen it) must not move a new file made at the old name since.
        let current = self
            .stores
            .inventory
            .lookup(from)
            .await
            .map_err(|e| e.to_string())?;
        match current {
            Some(m) if m.id == *source => {}
            _ => {
                return Err(format!(
                    "{from} no longer names file {source}: rename label {} already ran or \
                     came too late",
                    label.id
                ))
            }
        }
        let replaced = self
            .stores
            .inventory
            .rename(from, to)
            .await
            .map_err(|e| e.to_string())?;
        let Some((meta, extents)) = replaced else {
            return Ok(Done::bytes(0));
        };
        let holders: BTreeSet<WorkerId> = extents.iter().map(|e| e.worker).collect();
        if holders.contains(&self.id) || self.storage.holds(meta.id) {
            let replaced = meta.id;
            self.blocking(move |storage| storage.remove(replaced))
                .await?;
        }
        for worker in holders.into_iter().filter(|w| *w != self.id) {
            self.reclaims
                .add(worker, meta.id, &meta.path, label.owner, 0, u64::MAX);
        }
        Ok(Done::bytes(0))
    }

    /// Runs local I/O on a blocking thread, retrying I/O errors up to
    /// `retries` times: a transient device error should not fail a label.
    async fn blocking<T, F>(&self, mut op: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnMut(&dyn Backend) -> Result<T> + Send + 'static,
    {
        let storage = self.storage.clone();
        let (worker, retries) = (self.id, self.retries);
        let attempts = tokio::task::spawn_blocking(move || {
            let mut attempt = 0;
            loop {
                match op(storage.as_ref()) {
                    Err(e @ Error::Storage(_)) if attempt < retries => {
                        attempt += 1;
                        tracing::warn!(worker, attempt, "local I/O failed, retrying: {e}");
                    }
                    done => return done,
                }
            }
        });
        match attempts.await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(format!("local I/O task failed: {e}")),
        }
    }
}

/// Successful execution: bytes moved and, for reads, where the result is.
struct Done {
    bytes: u64,
    result: Option<(String, u64)>,
}

impl Done {
    fn bytes(bytes: u64) -> Self {
        Done {
            bytes,
            result: None,
        }
    }
}

/// One contiguous piece of a write: `len` bytes at `buf_offset` of the data
/// go to `file_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    file_offset: u64,
    buf_offset: u64,
    len: u64,
}

/// What [`Executor::not_yet_overwritten`] found: the pieces to write, and
/// the other workers whose older bytes the write replaces.
struct Guarded {
    pieces: Vec<Range>,
    displaced: BTreeSet<WorkerId>,
}

/// A write's bytes and where they go on this worker's device.
struct Staged {
    file: FileId,
    ranges: Vec<Range>,
    data: Bytes,
    guard: Guarded,
}

/// The length of a plain write label's bytes (staged, or zeros).
fn plain_write_len(label: &Label) -> Result<u64, Failure> {
    match &label.source {
        Pointer::Warehouse { len, .. } | Pointer::Zeros { len } => Ok(*len),
        _ => Err(bad_pointer(label, "source", "a warehouse entry or zeros")),
    }
}

/// Whether `labels` can be written with one call to the stack: two or
/// more plain writes (no functions, no external destination) into one
/// file, no two of which touch the same byte, so that the order of their
/// pieces on the device cannot matter. The shuffler aggregates only such
/// labels; a task from elsewhere that is not runs label by label.
fn writable_at_once(labels: &[&Label]) -> bool {
    let mut spans = Vec::new();
    let mut files = BTreeSet::new();
    for label in labels {
        if label.kind != LabelKind::Write || !label.operations.is_empty() {
            return false;
        }
        let (Ok(len), Ok((file, offset, dest_len))) = (
            plain_write_len(label),
            file_of(label, &label.destination, "destination"),
        ) else {
            return false;
        };
        let Ok(ranges) = ranges(label, offset, dest_len, len) else {
            return false;
        };
        files.insert(file);
        spans.extend(
            ranges
                .iter()
                .map(|r| (r.file_offset, r.file_offset + r.len)),
        );
    }
    spans.sort_unstable();
    labels.len() > 1 && files.len() == 1 && spans.windows(2).all(|w| w[0].1 <= w[1].0)
}

/// The label's path and the file range its `ranges` cover.
fn span(label: &Label, ranges: &[Range]) -> (String, u64, u64) {
    let path = match &label.destination {
        Pointer::File { path, .. } => path.clone(),
        _ => String::new(),
    };
    let start = ranges.iter().map(|r| r.file_offset).min().unwrap_or(0);
    let end = ranges
        .iter()
        .map(|r| r.file_offset + r.len)
        .max()
        .unwrap_or(start);
    (path, start, end)
}

/// The pieces a write label puts on disk, validated against its data.
fn ranges(label: &Label, offset: u64, dest_len: u64, data_len: u64) -> Result<Vec<Range>, Failure> {
    if label.index.is_empty() {
        if dest_len != data_len {
            return Err(format!(
                "label {} writes {data_len} bytes into a destination of {dest_len} bytes",
                label.id
            ));
        }
        return Ok(vec![Range {
            file_offset: offset,
            buf_offset: 0,
            len: data_len,
        }]);
    }
    label
        .index
        .iter()
        .map(|s| {
            let in_data = s
                .buf_offset
                .checked_add(s.len)
                .is_some_and(|end| end <= data_len);
            let in_file = s.file_offset.checked_add(s.len).is_some();
            if in_data && in_file {
                Ok(Range {
                    file_offset: s.file_offset,
                    buf_offset: s.buf_offset,
                    len: s.len,
                })
            } else {
                Err(format!(
                    "label {} segment {s:?} is outside its {data_len} bytes of data",
                    label.id
                ))
            }
        })
        .collect()
}

/// The zeros a write label without data asks for, within the limit of one
/// label (a larger request is a malformed label, not an allocation).
fn zeros(label: &Label, len: u64) -> Result<Bytes, Failure> {
    if len > LABEL_SIZE_LIMIT {
        return Err(format!(
            "label {} asks for {len} zero bytes, more than one label makes ({LABEL_SIZE_LIMIT})",
            label.id
        ));
    }
    Ok(Bytes::from(vec![0; len as usize]))
}

fn file_of(label: &Label, pointer: &Pointer, which: &str) -> Result<(FileId, u64, u64), Failure> {
    let (file, offset, len) = pointer
        .file()
        .ok_or_else(|| bad_pointer(label, which, "a file range"))?;
    if file > labios_stack::LAST_FILE {
        return Err(format!(
            "{:?} label {} names file id {file:#x} as {which}, beyond the last a worker stores ({:#x})",
            label.kind,
            label.id,
            labios_stack::LAST_FILE
        ));
    }
    Ok((file, offset, len))
}

/// The warehouse entry a label that reads `len` bytes answers into; a
/// read over [`MAX_READ`] is refused, `what` naming it.
fn answered_in<'a>(label: &'a Label, len: u64, what: &str) -> Result<&'a str, Failure> {
    let Pointer::Warehouse { key, .. } = &label.destination else {
        return Err(bad_pointer(label, "destination", "a warehouse entry"));
    };
    if len > MAX_READ {
        return Err(format!(
            "{what} {len} bytes is larger than the {MAX_READ} bytes one label may read"
        ));
    }
    Ok(key)
}

fn bad_pointer(label: &Label, which: &str, wanted: &str) -> Failure {
    format!(
        "{:?} label {} needs {wanted} as {which}, got {:?}",
        label.kind,
        label.id,
        match which {
            "source" => &label.source,
            _ => &label.destination,
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_label::{LabelId, Segment};

    fn write_label(index: Vec<Segment>) -> Label {
        let mut l = Label::new(LabelId::default(), LabelKind::Write, 1);
        l.index = index;
        l
    }

    #[test]
    fn plain_write_is_one_range_of_the_destination() {
        let r = ranges(&write_label(vec![]), 10, 5, 5).unwrap();
        assert_eq!(
            r,
            vec![Range {
                file_offset: 10,
                buf_offset: 0,
                len: 5
            }]
        );
        let err = ranges(&write_label(vec![]), 10, 6, 5).unwrap_err();
        assert!(err.contains("5 bytes") && err.contains("6 bytes"), "{err}");
    }

    #[test]
    fn zeros_are_made_up_to_one_label() {
        let l = write_label(vec![]);
        assert_eq!(zeros(&l, 3).unwrap(), Bytes::from_static(&[0, 0, 0]));
        assert_eq!(
            zeros(&l, LABEL_SIZE_LIMIT).unwrap().len() as u64,
            LABEL_SIZE_LIMIT
        );
        let err = zeros(&l, LABEL_SIZE_LIMIT + 1).unwrap_err();
        assert!(
            err.contains("zero bytes, more than one label makes"),
            "{err}"
        );
    }

    #[test]
    fn segments_must_stay_inside_the_data() {
        let seg = |file_offset, buf_offset, len| Segment {
            file_offset,
            buf_offset,
            len,
        };
        let ok = ranges(&write_label(vec![seg(100, 0, 4), seg(0, 4, 6)]), 0, 10, 10).unwrap();
        assert_eq!(ok.len(), 2);
        assert!(ranges(&write_label(vec![seg(0, 8, 4)]), 0, 10, 10).is_err());
        assert!(ranges(&write_label(vec![seg(0, u64::MAX, 2)]), 0, 10, 10).is_err());
        assert!(ranges(&write_label(vec![seg(u64::MAX, 0, 2)]), 0, 10, 10).is_err());
    }
}
