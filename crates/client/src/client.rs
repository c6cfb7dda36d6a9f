//! The application's handle on LABIOS. Synchronous calls return when their
//! labels are complete; asynchronous calls return a [`Handle`] once labels
//! are published. Read-after-write holds within a client: a read first
//! publishes cached small writes of that file and waits for its in-flight
//! labels, so it always sees the bytes written before it.

use crate::catalog_manager::CatalogManager;
use crate::config::{ClientConfig, IoMode};
use crate::content_manager::ContentManager;
use crate::label_manager::{first_failure, LabelManager};
use crate::location::{self, Location};
use bytes::{Bytes, BytesMut};
use futures::future::{join_all, FutureExt};
use labios_label::anatomy::{self, Phase};
use labios_label::hints::{self, Hint};
use labios_label::{
    normalize_path, AppId, Error, FileId, LabelId, LabelKind, LabelState, LabelStatus, Result,
    Segment, WorkerId,
};
use labios_store::inventory::reserved_xattr;
use labios_store::warehouse::release;
use labios_store::{Extent, FileKind, FileMeta, Presence, RenameHow, SetAttr, Stores, XattrCond};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Outstanding asynchronous work: wait on it to learn its outcome.
#[derive(Debug, Clone, Default)]
pub struct Handle {
    labels: Vec<LabelId>,
    /// Small writes still in the client cache of this file.
    cached: Option<FileId>,
}

impl Handle {
    pub fn labels(&self) -> &[LabelId] {
        &self.labels
    }
}

mod allocate;
mod copy;
mod external;
mod file_ref;
mod locks;
mod open_files;

pub use allocate::NOT_SUPPORTED;
pub use file_ref::FileRef;
pub use locks::{LockCall, INTERRUPTED};
mod pipelines;

#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    stores: Stores,
    labels: LabelManager,
    content: ContentManager,
    catalog: CatalogManager,
    app: AppId,
    /// Small writes waiting to be aggregated, per file (article 3.3.1b).
    small: Mutex<HashMap<FileId, SmallWrites>>,
    /// Background flushes of full small-write caches not yet seen to end.
    /// A flush stays listed until it has ended, so that every wait or read
    /// that starts while it runs finds it (one wait joining it must not
    /// hide it from another).
    flushes: Mutex<Vec<Flush>>,
    /// Counts labels of this client seen to complete (left the in-flight
    /// set). A lookup that raced such a completion may hold a size from
    /// before it, so it is read again ([`Client::with_own_writes`]).
    landed: AtomicU64,
    /// Held while a file's cached small writes travel from the cache to the
    /// label queue (stored, then published). A wait, read, stat or truncate
    /// that finds the cache empty takes it first, so that it also finds
    /// their label in flight instead of missing writes that already
    /// returned.
    in_transit: tokio::sync::Mutex<()>,
    /// Woken when a wait releases its [`Claim`].
    collected: tokio::sync::Notify,
    flush_slots: Arc<tokio::sync::Semaphore>,
    flight: Mutex<InFlight>,
    /// Files this client wrote at positions since they last settled: such
    /// a write may end past the size the inventory knows, so an append
    /// settles the file first. Appends need not (their ranges are already
    /// in the size), so a stream of appends is never waited on between.
    positional: Mutex<HashSet<FileId>>,
    mounts: labios_mounts::MountTable,
    /// The session this client's file locks belong to.
    origin: u64,
    /// Lock calls waiting for a lock, cancelled when their owner releases.
    lock_waiters: Mutex<Vec<Arc<locks::Waiter>>>,
    /// How often this client holds each file open ([`Client::hold`]),
    /// each count behind a lock of its own (see `open_files`).
    held: Mutex<HashMap<FileId, open_files::Slot>>,
}

/// A background flush that any number of waits can await at once.
type Flush = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;

#[derive(Default)]
struct SmallWrites {
    path: String,
    data: Vec<u8>,
    segments: Vec<Segment>,
}

/// Labels published and not yet waited for, and failures nobody has seen.
#[derive(Default)]
struct InFlight {
    by_file: HashMap<FileId, HashSet<LabelId>>,
    count: usize,
    /// Failures of labels no wait asked for yet, for the wait that does
    /// (or [`Client::wait_all`]).
    failures: Vec<(LabelId, String)>,
    /// Past [`FAILURES_KEPT`], the failures are not kept: the largest
    /// label among them. A wait for a label up to it that it did not
    /// collect itself cannot say it succeeded, until [`Client::wait_all`]
    /// reports them (a client's labels are numbered in the order issued).
    dropped: Option<LabelId>,
    /// Labels a wait of this client is collecting the statuses of.
    collecting: HashSet<LabelId>,
}

impl InFlight {
    /// Keeps the failure of label `id` for the wait that asks for it.
    fn failed(&mut self, id: LabelId, reason: String) {
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push((id, reason));
        } else {
            self.dropped = self.dropped.max(Some(id));
        }
    }

    fn tracked(&self) -> HashSet<LabelId> {
        self.by_file
            .values()
            .flat_map(|s| s.iter().copied())
            .collect()
    }
}

/// A wait's claim on the labels it collects, released however the wait
/// ends (done, failed, cancelled), waking the waits that deferred to it.
struct Claim<'a> {
    client: &'a Client,
    ids: &'a [LabelId],
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut flight = self.client.inner.flight.lock();
        for id in self.ids {
            flight.collecting.remove(id);
        }
        drop(flight);
        self.client.inner.collected.notify_waiters();
    }
}

const FAILURES_KEPT: usize = 1024;
/// Small-write caches being stored and published in the background at once.
const BACKGROUND_FLUSHES: usize = 16;

impl Client {
    /// A client of application `app`; `origin` must be unique among live
    /// clients (it orders and distinguishes their label ids). Its labels are
    /// unsigned, so a deployment that verifies labels (every one started by
    /// `labios`) fails them: use [`Client::with_secret`].
    pub fn new(stores: Stores, app: AppId, origin: u64, config: ClientConfig) -> Result<Self> {
        Self::build(stores, app, None, origin, config)
    }

    /// A client that signs its labels with `secret`, the application's
    /// secret from the registry (README "Tenants").
    pub fn with_secret(
        stores: Stores,
        app: AppId,
        secret: &str,
        origin: u64,
        config: ClientConfig,
    ) -> Result<Self> {
        Self::build(stores, app, Some(Arc::from(secret)), origin, config)
    }

    fn build(
        stores: Stores,
        app: AppId,
        secret: Option<Arc<str>>,
        origin: u64,
        config: ClientConfig,
    ) -> Result<Self> {
        config.validate()?;
        let mounts = labios_mounts::MountTable::new(&config.mounts)?;
        Ok(Client {
            inner: Arc::new(Inner {
                labels: LabelManager::new(
                    stores.labels.clone(),
                    stores.inventory.clone(),
                    app,
                    origin,
                    config,
                    secret,
                ),
                content: ContentManager::new(stores.warehouse.clone(), app),
                catalog: CatalogManager::new(stores.inventory.clone(), app),
                stores,
                app,
                small: Mutex::new(HashMap::new()),
                flushes: Mutex::new(Vec::new()),
                landed: AtomicU64::new(0),
                in_transit: tokio::sync::Mutex::new(()),
                collected: tokio::sync::Notify::new(),
                flush_slots: Arc::new(tokio::sync::Semaphore::new(BACKGROUND_FLUSHES)),
                flight: Mutex::new(InFlight::default()),
                positional: Mutex::new(HashSet::new()),
                mounts,
                origin,
                lock_waiters: Mutex::new(Vec::new()),
                held: Mutex::new(HashMap::new()),
            }),
        })
    }

    pub fn app(&self) -> AppId {
        self.inner.app
    }

    /// The queue, warehouse and inventory this client talks to.
    /// Labels this client has published: what it submitted, counted where
    /// it is submitted (worker statistics lag by a score interval).
    pub fn labels_published(&self) -> u64 {
        self.inner.labels.published()
    }

    pub fn stores(&self) -> &Stores {
        &self.inner.stores
    }

    pub fn config(&self) -> &ClientConfig {
        self.inner.labels.config()
    }

    pub fn catalog(&self) -> &CatalogManager {
        &self.inner.catalog
    }

    pub fn content(&self) -> &ContentManager {
        &self.inner.content
    }

    /// Writes `data` at `offset` in the configured mode.
    pub async fn write_at<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        offset: u64,
        data: Bytes,
    ) -> Result<()> {
        let file = file.into();
        match self.config().mode {
            IoMode::Sync => self.write_at_sync(file, offset, data).await,
            IoMode::Async => self.write_at_async(file, offset, data).await.map(|_| ()),
        }
    }

    /// Writes and waits until every byte is stored by a worker.
    pub async fn write_at_sync<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        offset: u64,
        data: Bytes,
    ) -> Result<()> {
        let file = file.into();
        if let Some(path) = file.external() {
            return self.write_external(path, offset, data).await;
        }
        let handle = self.submit_write(file, offset, data, false).await?;
        self.wait(&handle).await
    }

    /// Publishes the write and returns; small writes may first gather in the
    /// client cache until enough accumulate for one label.
    /// Writes to external storage complete before this returns (see
    /// `write_external`).
    pub async fn write_at_async<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        offset: u64,
        data: Bytes,
    ) -> Result<Handle> {
        let file = file.into();
        if let Some(path) = file.external() {
            self.write_external(path, offset, data).await?;
            return Ok(Handle::default());
        }
        self.submit_write(file, offset, data, true).await
    }

    /// Appends `data` at the end of the file (a path's is created if
    /// missing) in the configured mode and returns the offset it went to.
    pub async fn append<'a>(&self, file: impl Into<FileRef<'a>>, data: Bytes) -> Result<u64> {
        let file = file.into();
        match self.config().mode {
            IoMode::Sync => self.append_sync(file, data).await,
            IoMode::Async => self.append_async(file, data).await.map(|(at, _)| at),
        }
    }

    /// Appends and waits until every byte is stored; returns the offset.
    pub async fn append_sync<'a>(&self, file: impl Into<FileRef<'a>>, data: Bytes) -> Result<u64> {
        let (offset, handle) = self.submit_append(file.into(), data, false).await?;
        self.wait(&handle).await?;
        Ok(offset)
    }

    /// Appends and returns once published (as [`Client::write_at_async`]),
    /// with the offset the bytes go to.
    pub async fn append_async<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        data: Bytes,
    ) -> Result<(u64, Handle)> {
        self.submit_append(file.into(), data, true).await
    }

    /// An append is a write at an offset the inventory decides: it reads
    /// and extends the file's size in one atomic step
    /// ([`labios_store::Inventory::reserve_append`]), so appends of concurrent clients
    /// and processes, on either deployment, never overlap (O_APPEND). The
    /// end includes this client's own earlier writes, as O_APPEND's does:
    /// positional writes since the file last settled are settled first.
    async fn submit_append(
        &self,
        file: FileRef<'_>,
        data: Bytes,
        may_cache: bool,
    ) -> Result<(u64, Handle)> {
        if let Some(path) = file.external() {
            return Err(Error::InvalidArgument(format!(
                "{path}: external storage keeps no end of file LABIOS can extend atomically; \
                 write at an offset instead"
            )));
        }
        let meta = self
            .inner
            .catalog
            .owned(self.file_for_write(file, 0o644).await?)?;
        let positional = self.inner.positional.lock().remove(&meta.id);
        if positional {
            if let Err(e) = self.settle(meta.id).await {
                self.inner.positional.lock().insert(meta.id);
                return Err(e);
            }
        }
        let offset = self
            .inner
            .catalog
            .inventory()
            .reserve_append(meta.id, data.len() as u64)
            .await?;
        let handle = self.submit_to(&meta, offset, data, may_cache).await?;
        Ok((offset, handle))
    }

    async fn submit_write(
        &self,
        file: FileRef<'_>,
        offset: u64,
        data: Bytes,
        may_cache: bool,
    ) -> Result<Handle> {
        let meta = self.file_for_write(file, 0o644).await?;
        if data.is_empty() {
            return Ok(Handle::default());
        }
        offset.checked_add(data.len() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!("offset {offset} + {} bytes overflows", data.len()))
        })?;
        self.inner.positional.lock().insert(meta.id);
        self.submit_to(&meta, offset, data, may_cache).await
    }

    /// Stores `data` and publishes its labels (or caches it, if small and
    /// `may_cache`).
    async fn submit_to(
        &self,
        meta: &FileMeta,
        offset: u64,
        data: Bytes,
        may_cache: bool,
    ) -> Result<Handle> {
        if data.is_empty() {
            return Ok(Handle::default());
        }
        let min = self.config().min_label_size;
        if may_cache && (data.len() as u64) < min {
            return self.cache_small(meta, offset, &data).await;
        }
        self.flush_small(meta.id).await?;
        let pieces = self
            .inner
            .labels
            .write_pieces(&meta.path, meta.id, offset, data.len(), false);
        let mut staged = Vec::with_capacity(pieces.len());
        let mut labels = Vec::with_capacity(pieces.len());
        for p in pieces {
            staged.push((p.key, data.slice(p.data_offset..p.data_offset + p.len)));
            labels.push(p.label);
        }
        let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
        self.stage_and_publish(meta.id, staged, labels).await?;
        Ok(Handle {
            labels: ids,
            cached: None,
        })
    }

    async fn cache_small(&self, meta: &FileMeta, offset: u64, data: &[u8]) -> Result<Handle> {
        let full = {
            let mut small = self.inner.small.lock();
            let entry = small.entry(meta.id).or_insert_with(|| SmallWrites {
                path: meta.path.clone(),
                ..Default::default()
            });
            let buf_offset = entry.data.len() as u64;
            entry.data.extend_from_slice(data);
            let len = data.len() as u64;
            match entry.segments.last_mut() {
                Some(last) if last.file_offset + last.len == offset => last.len += len,
                _ => entry.segments.push(Segment {
                    file_offset: offset,
                    buf_offset,
                    len,
                }),
            }
            entry.data.len() as u64 >= self.config().min_label_size
        };
        let mut handle = Handle {
            labels: Vec::new(),
            cached: Some(meta.id),
        };
        if full {
            if let Some(id) = self.flush_in_background(meta.id).await? {
                handle.labels.push(id);
                handle.cached = None;
            }
        }
        Ok(handle)
    }

    /// Hands a full small-write cache to a background task that stores its
    /// data and publishes its label, so the application goes on writing
    /// while that round trip happens. At most [`BACKGROUND_FLUSHES`] run at
    /// once (backpressure); every wait first joins them.
    async fn flush_in_background(&self, file: FileId) -> Result<Option<LabelId>> {
        let permit = self
            .inner
            .flush_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Unavailable("client is shutting down".into()))?;
        // From taking the cache to registering the task: a concurrent wait
        // would otherwise see neither.
        let _transit = self.inner.in_transit.lock().await;
        let Some(pending) = self.inner.small.lock().remove(&file) else {
            return Ok(None);
        };
        let label = self.inner.labels.indexed_write(
            &pending.path,
            file,
            pending.data.len() as u64,
            pending.segments,
        );
        let id = label.id;
        let this = self.clone();
        let flush: Flush = async move {
            let key = crate::content_manager::write_key(this.inner.app, id);
            let stored = this
                .inner
                .content
                .put(&key, Bytes::from(pending.data))
                .await;
            let published = match stored {
                Ok(()) => this.publish_tracked(file, vec![label]).await,
                Err(e) => Err(e),
            };
            drop(permit);
            // Reported by the next wait that covers this label.
            if let Err(e) = published {
                this.inner.flight.lock().failed(id, e.to_string());
            }
        }
        .boxed()
        .shared();
        tokio::spawn(flush.clone());
        let mut flushes = self.inner.flushes.lock();
        flushes.retain(|f| f.peek().is_none());
        flushes.push(flush);
        Ok(Some(id))
    }

    /// Waits until every background flush running now has published (or
    /// failed). Flushes that start meanwhile are not waited for, so a
    /// steady writer cannot hold a wait of another task for ever.
    async fn join_flushes(&self) {
        let running: Vec<Flush> = self.inner.flushes.lock().clone();
        join_all(running).await;
        self.inner.flushes.lock().retain(|f| f.peek().is_none());
    }

    /// Publishes the cached small writes of a file as one indexed label.
    async fn flush_small(&self, file: FileId) -> Result<Option<LabelId>> {
        let _transit = self.inner.in_transit.lock().await;
        let Some(pending) = self.inner.small.lock().remove(&file) else {
            return Ok(None);
        };
        let label = self.inner.labels.indexed_write(
            &pending.path,
            file,
            pending.data.len() as u64,
            pending.segments,
        );
        let key = crate::content_manager::write_key(self.inner.app, label.id);
        let id = label.id;
        let staged = vec![(key, Bytes::from(pending.data))];
        self.stage_and_publish(file, staged, vec![label]).await?;
        Ok(Some(id))
    }

    /// Stores each label's bytes in the warehouse and publishes the labels
    /// behind them in one round trip where the store orders the two
    /// (`Warehouse::put_ordered`). If either step fails no label will read
    /// those entries, so they are released (a put whose reply was lost may
    /// have stored its bytes anyway): left there, they would hold warehouse
    /// room for good.
    async fn stage_and_publish(
        &self,
        file: FileId,
        staged: Vec<(String, Bytes)>,
        labels: Vec<labios_label::Label>,
    ) -> Result<()> {
        let content = &self.inner.content;
        // The labels are pushed right behind their data's puts, the puts'
        // answers taken after (put_ordered): a push waits for the puts it
        // names and fails if one failed, so a label never runs over data
        // that was not stored, and the put's own error is the one returned.
        // Over the socket the put phase is then the copy into a slot or a
        // frame; the server's part of the put shows in the publish.
        let t = anatomy::start();
        let queued = join_all(
            staged
                .iter()
                .map(|(key, data)| content.put_ordered(key, data.clone())),
        )
        .await;
        anatomy::record(Phase::WarehousePut, t);
        let mut answers = Vec::with_capacity(queued.len());
        let mut refused = None;
        for q in queued {
            match q {
                Ok(answer) => answers.push(answer),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        let published = match refused {
            None => self.publish_tracked(file, labels).await,
            Some(e) => Err(e),
        };
        // Every answer, before any entry is released below: a put still
        // running would store its entry after the release.
        let stored: Result<()> = join_all(answers).await.into_iter().collect();
        let outcome = stored.and(published);
        if outcome.is_err() {
            let keys: Vec<&str> = staged.iter().map(|(key, _)| key.as_str()).collect();
            release(self.inner.stores.warehouse.as_ref(), &keys).await;
        }
        outcome
    }

    async fn publish_tracked(&self, file: FileId, labels: Vec<labios_label::Label>) -> Result<()> {
        let over = self.inner.flight.lock().count + labels.len() > self.config().max_in_flight;
        if over {
            // Room for these labels. The failures found belong to earlier
            // calls: each is kept for the wait that asks for its label,
            // instead of failing this unrelated write. (They were once
            // kept as one failure of no label: a wait for another label
            // that had failed then found nothing and returned Ok.) A wait
            // that itself fails leaves the labels in flight.
            let ids: Vec<LabelId> = self.inner.flight.lock().tracked().into_iter().collect();
            let _ = self.collect(&ids, &HashSet::new()).await;
        }
        let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
        {
            let mut flight = self.inner.flight.lock();
            flight.count += ids.len();
            flight
                .by_file
                .entry(file)
                .or_default()
                .extend(ids.iter().copied());
        }
        let t = anatomy::start();
        let published = self.inner.labels.publish(labels).await;
        anatomy::record(Phase::QueuePublish, t);
        if let Err(e) = published {
            let mut guard = self.inner.flight.lock();
            let flight = &mut *guard;
            if let Some(set) = flight.by_file.get_mut(&file) {
                for id in &ids {
                    if set.remove(id) {
                        flight.count -= 1;
                    }
                }
            }
            return Err(e);
        }
        Ok(())
    }

    /// Waits for the labels of one handle; any failure is returned as an error.
    pub async fn wait(&self, handle: &Handle) -> Result<()> {
        self.wait_many(std::slice::from_ref(handle)).await
    }

    /// Waits for several handles at once (a barrier over them).
    pub async fn wait_many(&self, handles: &[Handle]) -> Result<()> {
        self.join_flushes().await;
        let mut ids: Vec<LabelId> = Vec::new();
        for h in handles {
            if let Some(file) = h.cached {
                self.flush_small(file).await?;
                ids.extend(self.in_flight_of(file));
            }
            ids.extend(h.labels.iter().copied());
        }
        ids.sort_unstable();
        ids.dedup();
        self.wait_ids(&ids).await
    }

    /// Publishes every cached write and waits for everything in flight.
    pub async fn wait_all(&self) -> Result<()> {
        self.settle_all().await
    }

    async fn settle_all(&self) -> Result<()> {
        self.inner.positional.lock().clear();
        self.join_flushes().await;
        // A cache another task is publishing is no longer listed below.
        drop(self.inner.in_transit.lock().await);
        // Every file's cache is published, whichever fails: one file's
        // failure must not keep the others' acknowledged writes back.
        let files: Vec<FileId> = self.inner.small.lock().keys().copied().collect();
        let mut published = Ok(());
        for f in files {
            published = published.and(self.flush_small(f).await.map(|_| ()));
        }
        // A failure of the wait itself (not of a label) leaves the kept
        // failures for the next call.
        let drained = match self.drain_in_flight().await {
            Err(e @ Error::LabelFailed { .. }) => Some(e),
            Err(e) => return Err(e),
            Ok(()) => None,
        };
        let (failures, overflowed) = {
            let mut flight = self.inner.flight.lock();
            let overflowed = flight.dropped.take().is_some();
            (std::mem::take(&mut flight.failures), overflowed)
        };
        let kept = failures
            .into_iter()
            .next()
            .map(|(id, reason)| Error::LabelFailed {
                label: id.to_string(),
                reason,
            });
        match (published.err().or(drained).or(kept), overflowed) {
            (None, false) => Ok(()),
            (Some(Error::LabelFailed { label, reason }), true) => Err(Error::LabelFailed {
                label,
                reason: format!("{reason} (and more than {FAILURES_KEPT} other labels failed)"),
            }),
            (Some(e), _) => Err(e),
            (None, true) => Err(Error::Storage(format!(
                "more than {FAILURES_KEPT} labels of this client failed"
            ))),
        }
    }

    /// Waits for every published label.
    async fn drain_in_flight(&self) -> Result<()> {
        let ids: Vec<LabelId> = self.inner.flight.lock().tracked().into_iter().collect();
        self.wait_ids(&ids).await
    }

    /// Flushes cached writes of one file and waits for its labels in flight.
    async fn settle(&self, file: FileId) -> Result<()> {
        self.inner.positional.lock().remove(&file);
        self.join_flushes().await;
        self.flush_small(file).await?;
        let ids = self.in_flight_of(file);
        self.wait_ids(&ids).await
    }

    fn in_flight_of(&self, file: FileId) -> Vec<LabelId> {
        self.inner
            .flight
            .lock()
            .by_file
            .get(&file)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Waits for `ids`; those already settled by an earlier wait are skipped
    /// (their failures, if any, are reported here once). A label another
    /// task of this client is already waiting for is left to that wait
    /// (the inventory hands a final status to one wait only), and this one
    /// goes on when it is done; a failure is reported to that wait.
    async fn wait_ids(&self, ids: &[LabelId]) -> Result<()> {
        let wanted: HashSet<&LabelId> = ids.iter().collect();
        let (result, collected) = self.collect(ids, &wanted).await;
        // Failures of the labels asked for that were kept: collected
        // before this wait, or beside it to make room (this wait's own
        // collection keeps none of them). All go: one write's several
        // labels are reported once.
        let (kept, unknown) = {
            let mut flight = self.inner.flight.lock();
            let mut kept = None;
            flight.failures.retain(|(id, reason)| {
                let asked = wanted.contains(id);
                if asked && kept.is_none() {
                    kept = Some((*id, reason.clone()));
                }
                !asked
            });
            // A label collected elsewhere whose failure may be one of
            // those not kept.
            let unknown = flight
                .dropped
                .is_some_and(|last| ids.iter().any(|id| *id <= last && !collected.contains(id)));
            (kept, unknown)
        };
        if let Some((id, reason)) = kept {
            return Err(Error::LabelFailed {
                label: id.to_string(),
                reason,
            });
        }
        if unknown && result.is_ok() {
            return Err(Error::Storage(format!(
                "more than {FAILURES_KEPT} labels of this client failed before a wait asked \
                 for them, and which they were is not known: wait_all reports them"
            )));
        }
        result
    }

    /// Collects the final statuses of `ids` still in flight (or waits for
    /// the wait of this client that collects them); the first failure among
    /// those collected here is returned, with the labels collected here;
    /// failures of labels not `wanted` are kept for the wait that asks for
    /// them.
    async fn collect(
        &self,
        ids: &[LabelId],
        wanted: &HashSet<&LabelId>,
    ) -> (Result<()>, HashSet<LabelId>) {
        let mut result = Ok(());
        let mut collected = HashSet::new();
        loop {
            let (mine, theirs) = self.claim(ids);
            if !mine.is_empty() {
                let claim = Claim {
                    client: self,
                    ids: &mine,
                };
                let statuses = match self.inner.labels.wait(&mine).await {
                    Ok(statuses) => statuses,
                    Err(e) => return (Err(e), collected),
                };
                self.settled(&statuses, wanted);
                drop(claim);
                collected.extend(mine.iter().copied());
                if result.is_ok() {
                    let asked: Vec<LabelStatus> = statuses
                        .into_iter()
                        .filter(|s| wanted.contains(&s.id))
                        .collect();
                    result = first_failure(&asked);
                }
            }
            if theirs.is_empty() {
                break;
            }
            self.until_collected(&theirs).await;
        }
        (result, collected)
    }

    /// Splits the labels of `ids` still in flight into those this wait now
    /// collects (claimed) and those another wait is collecting.
    fn claim(&self, ids: &[LabelId]) -> (Vec<LabelId>, Vec<LabelId>) {
        let mut flight = self.inner.flight.lock();
        let tracked = flight.tracked();
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for &id in ids.iter().filter(|id| tracked.contains(id)) {
            if flight.collecting.insert(id) {
                mine.push(id);
            } else {
                theirs.push(id);
            }
        }
        (mine, theirs)
    }

    /// Until no wait is collecting any of `ids`.
    async fn until_collected(&self, ids: &[LabelId]) {
        loop {
            let collected = self.inner.collected.notified();
            tokio::pin!(collected);
            collected.as_mut().enable();
            let busy = {
                let flight = self.inner.flight.lock();
                ids.iter().any(|id| flight.collecting.contains(id))
            };
            if !busy {
                return;
            }
            collected.await;
        }
    }

    /// Final statuses collected: their labels leave the in-flight set, and
    /// failures of labels this wait was not asked about are kept for the
    /// wait that is.
    fn settled(&self, statuses: &[LabelStatus], wanted: &HashSet<&LabelId>) {
        let mut flight = self.inner.flight.lock();
        let mut landed = false;
        for s in statuses {
            for set in flight.by_file.values_mut() {
                if set.remove(&s.id) {
                    landed = true;
                    break;
                }
            }
        }
        if landed {
            self.inner.landed.fetch_add(1, Ordering::SeqCst);
        }
        flight.by_file.retain(|_, s| !s.is_empty());
        flight.count = flight.by_file.values().map(|s| s.len()).sum();
        for s in statuses {
            if s.state == LabelState::Failed && !wanted.contains(&s.id) {
                flight.failed(s.id, s.error.clone().unwrap_or_default());
            }
        }
    }

    /// The application's file at `path`, once this client's own writes to
    /// it have landed (read-your-writes).
    async fn file_to_read(&self, file: FileRef<'_>) -> Result<FileMeta> {
        let landed = self.inner.landed.load(Ordering::SeqCst);
        let meta = self.readable(self.entry(file).await?)?;
        self.with_own_writes(meta, landed).await
    }

    /// `meta` if it is a file of this application's to read.
    fn readable(&self, meta: FileMeta) -> Result<FileMeta> {
        let meta = self.inner.catalog.owned(meta)?;
        match meta.kind {
            FileKind::File => {}
            FileKind::Dir => {
                return Err(Error::InvalidArgument(format!(
                    "{} is a directory",
                    meta.path
                )))
            }
            // Its size is its target's length: reading it as a file
            // would hand out zeros.
            FileKind::Symlink => {
                return Err(Error::InvalidArgument(format!(
                    "{} is a symbolic link: read its target (Client::readlink)",
                    meta.path
                )))
            }
            special => {
                return Err(Error::InvalidArgument(format!(
                    "{} is a {}, it holds no data",
                    meta.path,
                    special.word()
                )))
            }
        }
        Ok(meta)
    }

    /// `meta`, looked up when this client had seen `landed` of its labels
    /// land, made to include every write of this client that returned
    /// before: writes still cached, on their way or in flight land first,
    /// and one another task's wait saw land while `meta` was being looked
    /// up (its size may predate it) is read again.
    async fn with_own_writes(&self, meta: FileMeta, landed: u64) -> Result<FileMeta> {
        if self.still_current(meta.id, landed).await? {
            return Ok(meta);
        }
        self.inner.catalog.file(meta.id).await
    }

    /// Whether what the inventory said of `file` when this client had seen
    /// `landed` of its labels land includes every write of this client
    /// that returned before; if not, once the writes not yet landed have
    /// (it is then to be asked again).
    async fn still_current(&self, file: FileId, landed: u64) -> Result<bool> {
        if self.has_pending(file).await {
            self.settle(file).await?;
            return Ok(false);
        }
        Ok(self.inner.landed.load(Ordering::SeqCst) == landed)
    }

    /// Reads up to `len` bytes at `offset`; fewer only at end of file.
    pub async fn read_at<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        let file = file.into();
        if let Some(path) = file.external() {
            return self.read_external(path, offset, len).await;
        }
        // The entry and its extents in one call; both again only if this
        // client's own writes to the file landed meanwhile.
        let landed = self.inner.landed.load(Ordering::SeqCst);
        let (meta, extents) = self
            .inner
            .catalog
            .read_plan(file.named()?, offset, len)
            .await?;
        let meta = self.readable(meta)?;
        let (meta, mut extents) = if self.still_current(meta.id, landed).await? {
            (meta, Some(extents))
        } else {
            (self.inner.catalog.file(meta.id).await?, None)
        };
        if offset >= meta.size || len == 0 {
            return Ok(Bytes::new());
        }
        let len = len.min(meta.size - offset);
        let retries = self.config().read_retries.max(1);
        let mut last = None;
        for attempt in 0..retries {
            match self.read_once(&meta, offset, len, extents.take()).await {
                Err(Error::LabelFailed { reason, label }) if reason.starts_with("moved:") => {
                    last = Some(Error::LabelFailed { reason, label });
                    // The holder may be restarting, or the dispatcher's view
                    // of the pool not yet refreshed: back off before asking
                    // again (20 ms doubling, about 2 s over 8 attempts).
                    if attempt + 1 < retries {
                        tokio::time::sleep(Duration::from_millis(20 << attempt.min(5))).await;
                    }
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| Error::Unavailable("read retries exhausted".into())))
    }

    /// One attempt at a read of `[offset, offset + len)` (within the
    /// file's size), over `extents` when they were looked up with `meta`.
    async fn read_once(
        &self,
        meta: &FileMeta,
        offset: u64,
        len: u64,
        extents: Option<Vec<Extent>>,
    ) -> Result<Bytes> {
        let extents = match extents {
            Some(extents) => extents,
            None => self.inner.catalog.extents(meta.id, offset, len).await?,
        };
        // Runs of extents held by one worker; holes between them read as zeros.
        let mut runs: Vec<(WorkerId, u64, u64)> = Vec::new();
        for e in &extents {
            match runs.last_mut() {
                Some((w, _, end)) if *w == e.worker => *end = e.offset + e.len,
                _ => runs.push((e.worker, e.offset, e.offset + e.len)),
            }
        }
        let mut labels = Vec::new();
        let mut wanted: Vec<(LabelId, u64, u64)> = Vec::new();
        for (worker, start, end) in &runs {
            for (mut label, at, n) in
                self.inner
                    .labels
                    .read_labels(&meta.path, meta.id, *start, end - start)
            {
                label.holder = Some(*worker);
                wanted.push((label.id, at, n));
                labels.push(label);
            }
        }
        let (statuses, keys) = self.run_reads(labels, true).await?;
        let gathered = self
            .take_results(&statuses, &wanted, &keys, offset, len)
            .await;
        if gathered.is_err() {
            // Results not taken yet are nobody's once this read fails.
            release(self.inner.stores.warehouse.as_ref(), &keys).await;
        }
        gathered
    }

    /// Publishes read labels and waits for them: their statuses, in order,
    /// and the warehouse keys of the complete ones' results, which the
    /// caller takes (`taking`: this client, which may then have them
    /// already, [`LabelManager::wait_taking`]; else labels that name
    /// them) or releases.
    ///
    /// [`LabelManager::wait_taking`]: crate::label_manager::LabelManager::wait_taking
    pub(super) async fn run_reads(
        &self,
        labels: Vec<labios_label::Label>,
        taking: bool,
    ) -> Result<(Vec<LabelStatus>, Vec<String>)> {
        let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
        let t = anatomy::start();
        self.inner.labels.publish(labels).await?;
        anatomy::record(Phase::QueuePublish, t);
        let statuses = if taking {
            self.inner.labels.wait_taking(&ids).await?
        } else {
            self.inner.labels.wait(&ids).await?
        };
        let keys = statuses
            .iter()
            .filter(|s| s.state == LabelState::Complete)
            .map(|s| self.result_key(s))
            .collect();
        Ok((statuses, keys))
    }

    /// The bytes of a read from its labels' results (taken from the
    /// warehouse, `keys` in order of the complete ones).
    async fn take_results(
        &self,
        statuses: &[LabelStatus],
        wanted: &[(LabelId, u64, u64)],
        keys: &[String],
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        // One label covers the whole read (no hole, nothing to gather): its
        // result is the answer as the warehouse gave it. Zeroing a buffer
        // and copying into it were a fifth of a 1 MiB S3 GET's CPU.
        if let ([status], [(_, at, n)]) = (statuses, wanted) {
            if (*at, *n) == (offset, len) {
                return self.take_result(status, keys.first(), *at, *n).await;
            }
        }
        let mut buf = BytesMut::zeroed(len as usize);
        let mut keys = keys.iter();
        for (status, (_, at, n)) in statuses.iter().zip(wanted) {
            let data = self.take_result(status, keys.next(), *at, *n).await?;
            let start = (at - offset) as usize;
            buf[start..start + data.len()].copy_from_slice(&data);
        }
        Ok(buf.freeze())
    }

    /// The result of one read label, `n` bytes at `at`, taken from the
    /// warehouse under `key` if the label completed.
    async fn take_result(
        &self,
        status: &LabelStatus,
        key: Option<&String>,
        at: u64,
        n: u64,
    ) -> Result<Bytes> {
        if status.state != LabelState::Complete {
            return Err(Error::LabelFailed {
                label: status.id.to_string(),
                reason: status
                    .error
                    .clone()
                    .unwrap_or_else(|| "unknown error".into()),
            });
        }
        let key = key.expect("a key for each complete label");
        let t = anatomy::start();
        let data = self.inner.content.take(key).await?.ok_or_else(|| {
            Error::Storage(format!(
                "result of read label {} is missing from the warehouse",
                status.id
            ))
        })?;
        anatomy::record(Phase::ResultFetch, t);
        if data.len() as u64 != n {
            return Err(Error::Storage(format!(
                "short read from worker {:?}: expected {n} bytes at offset {at}, got {}",
                status.worker,
                data.len()
            )));
        }
        Ok(data)
    }

    /// The whole file.
    pub async fn read(&self, path: &str) -> Result<Bytes> {
        self.read_at(path, 0, u64::MAX).await
    }

    /// The entry, with this client's earlier writes to a file in its size.
    pub async fn stat<'a>(&self, file: impl Into<FileRef<'a>>) -> Result<FileMeta> {
        let file = file.into();
        if let Some(path) = file.external() {
            return self.stat_external(path).await;
        }
        let landed = self.inner.landed.load(Ordering::SeqCst);
        let meta = self.entry(file).await?;
        if meta.kind != FileKind::File {
            return Ok(meta);
        }
        self.with_own_writes(meta, landed).await
    }

    /// Extended attributes of the entry `file` names (a path, or the id a
    /// descriptor holds), sorted by name (LABIOS's own, such as a link's
    /// target, are not among them).
    pub async fn xattrs<'a>(&self, file: impl Into<FileRef<'a>>) -> Result<Vec<(String, Bytes)>> {
        let meta = self.xattr_entry(file.into()).await?;
        let mut all = self.inner.catalog.inventory().xattrs(meta.id).await?;
        // The user's own: LABIOS's and the S3 gateway's are kept apart.
        all.retain(|(name, _)| name.starts_with("user."));
        Ok(all)
    }

    /// The user's attribute `name` of the entry `file` names, `None` where
    /// it has none. [`location::ATTRIBUTE`] is computed, not stored: a
    /// file's [`Client::locate`] as lines (none for a directory).
    pub async fn xattr<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        name: &str,
    ) -> Result<Option<Bytes>> {
        let file = file.into();
        if name == location::ATTRIBUTE {
            let meta = self.xattr_entry(file).await?;
            if meta.kind != FileKind::File {
                return Ok(None);
            }
            let lines = Location::lines(&self.locate(FileRef::Id(meta.id)).await?);
            if lines.len() > crate::xattr::SIZE_MAX {
                return Err(Error::InvalidArgument(format!(
                    "{name} of {}: its {} bytes of lines are {}",
                    meta.path,
                    lines.len(),
                    crate::xattr::TOO_LARGE
                )));
            }
            return Ok(Some(Bytes::from(lines)));
        }
        Ok(self
            .xattrs(file)
            .await?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v))
    }

    /// Where the bytes of the file `file` names are: each extent, in
    /// offset order, with its worker's tier and host (after this client's
    /// own writes to it land). A workflow engine runs a task where its
    /// input lies; holes and directories have none.
    pub async fn locate<'a>(&self, file: impl Into<FileRef<'a>>) -> Result<Vec<Location>> {
        let file = file.into();
        if let Some(path) = file.external() {
            return Err(Error::InvalidArgument(format!(
                "{path} is on external storage, where LABIOS places no bytes"
            )));
        }
        let meta = self.stat(file).await?;
        if meta.kind == FileKind::Symlink {
            return Err(Error::InvalidArgument(format!(
                "{} is a symbolic link; locate its target",
                meta.path
            )));
        }
        if meta.kind != FileKind::File || meta.size == 0 {
            return Ok(Vec::new());
        }
        let inventory = self.inner.catalog.inventory();
        let (extents, workers) = futures::try_join!(
            inventory.extents(meta.id, 0, meta.size),
            inventory.workers()
        )?;
        Ok(Location::of(&extents, &workers))
    }

    /// Sets (`Some`) or removes (`None`) one of the user's extended
    /// attributes (`user.*`; hints are `user.labios.*`) of the entry `file`
    /// names, a file this application owns (directories: any). Removing
    /// one the entry does not have is not an error.
    pub async fn set_xattr<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        name: &str,
        value: Option<Bytes>,
    ) -> Result<()> {
        self.set_xattr_if(file, name, value, Presence::Any).await
    }

    /// Removes the user's attribute `name` of the entry `file` names, as
    /// `removexattr(2)`: NotFound ending with
    /// [`labios_store::NO_ATTRIBUTE`] (ENODATA) when it has none.
    pub async fn remove_xattr<'a>(&self, file: impl Into<FileRef<'a>>, name: &str) -> Result<()> {
        self.set_xattr_if(file, name, None, Presence::Present).await
    }

    /// [`Client::set_xattr`] only if the attribute is there
    /// ([`Presence::Present`], `XATTR_REPLACE`) or is not
    /// ([`Presence::Absent`], `XATTR_CREATE`), decided by the inventory
    /// with the change, so that no other client's change comes between.
    pub async fn set_xattr_if<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        name: &str,
        value: Option<Bytes>,
        presence: Presence,
    ) -> Result<()> {
        if !name.starts_with("user.") {
            return Err(Error::InvalidArgument(format!(
                "extended attribute {name}: only user. attributes are kept; {NOT_SUPPORTED}"
            )));
        }
        self.store_xattr(file.into(), name, value, presence).await
    }

    /// [`Client::set_xattr`] for the attributes the S3 gateway keeps beside
    /// the user's (`s3.*`: tags, bucket settings), which no user-facing
    /// interface sets or lists.
    pub async fn set_object_xattr(
        &self,
        path: &str,
        name: &str,
        value: Option<Bytes>,
    ) -> Result<()> {
        self.store_xattr(FileRef::Path(path), name, value, Presence::Any)
            .await
    }

    async fn store_xattr(
        &self,
        file: FileRef<'_>,
        name: &str,
        value: Option<Bytes>,
        presence: Presence,
    ) -> Result<()> {
        if reserved_xattr(name) {
            return Err(Error::PermissionDenied(format!(
                "extended attribute {name}: names starting labios. are LABIOS's own"
            )));
        }
        let meta = self.inner.catalog.owned(self.xattr_entry(file).await?)?;
        if !matches!(meta.kind, FileKind::File | FileKind::Dir) {
            return Err(Error::PermissionDenied(format!(
                "extended attribute {name} of {}: user. attributes are kept on files and \
                 directories only; {}",
                meta.path,
                labios_store::access::NOT_PERMITTED
            )));
        }
        let while_empty =
            hints::is_hint(name) && self.check_hint(&meta, name, value.as_deref()).await?;
        let cond = XattrCond {
            presence,
            while_empty,
        };
        let inventory = self.inner.catalog.inventory();
        match inventory.set_xattr_if(meta.id, name, value, cond).await {
            // The inventory knows the file by id; the caller by its path.
            Err(Error::InvalidArgument(m)) if m.ends_with(hints::REFUSED) => {
                Err(Error::InvalidArgument(format!("{}: {m}", meta.path)))
            }
            done => done,
        }
    }

    /// Whether hint attribute `name` may be set to `value` (`None`:
    /// removed) on `meta`'s entry: a hint and value LABIOS knows (a tier
    /// some worker has). Returns whether it changes only while the file is
    /// empty (all but the hints of its copies), which the inventory checks
    /// with the change, after the attribute's presence; this client's own
    /// writes to it land first.
    async fn check_hint(&self, meta: &FileMeta, name: &str, value: Option<&[u8]>) -> Result<bool> {
        let hint = match value {
            Some(v) => Some(Hint::parse(name, v)?),
            None => None,
        };
        let short = name.strip_prefix(hints::PREFIX).unwrap_or(name);
        let copies = hint.as_ref().map_or(
            matches!(short, "replicas" | "replication"),
            Hint::changes_with_data,
        );
        let while_empty = meta.kind == FileKind::File && !copies;
        if while_empty && self.has_pending(meta.id).await {
            self.settle(meta.id).await?;
        }
        if let Some(hint @ Hint::Tier(tier)) = &hint {
            let workers = self.inner.catalog.inventory().workers().await?;
            let served = workers.iter().map(|w| (w.spec.tier.as_str(), w.spec.speed));
            if !hint.tier_known(served) {
                let mut tiers: Vec<&str> = workers.iter().map(|w| w.spec.tier.as_str()).collect();
                tiers.sort_unstable();
                tiers.dedup();
                return Err(hints::refused(format!(
                    "hint tier: no worker serves {tier:?} (tiers: {}; policies: {})",
                    tiers.join(", "),
                    hints::POLICIES.join(", ")
                )));
            }
        }
        Ok(while_empty)
    }

    /// The inventory entry whose attributes `file` names.
    async fn xattr_entry(&self, file: FileRef<'_>) -> Result<FileMeta> {
        if let FileRef::Path(path) = file {
            inventory_path(path)?;
        }
        self.entry(file).await
    }

    async fn has_pending(&self, file: FileId) -> bool {
        drop(self.inner.in_transit.lock().await);
        self.inner.flushes.lock().iter().any(|f| f.peek().is_none())
            || self.inner.small.lock().contains_key(&file)
            || self.inner.flight.lock().by_file.contains_key(&file)
    }

    pub async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        if labios_mounts::is_external(prefix) {
            return self.list_external(prefix).await;
        }
        self.settle_all().await?;
        self.inner.catalog.list(prefix).await
    }

    /// A directory with the usual permission bits (0755).
    pub async fn mkdir(&self, path: &str) -> Result<FileMeta> {
        self.mkdir_mode(path, 0o755).await
    }

    /// A directory with permission bits `mode` (the caller applies its
    /// umask, as the kernel does for mkdir(2)); an existing directory is
    /// returned as it is.
    pub async fn mkdir_mode(&self, path: &str, mode: u32) -> Result<FileMeta> {
        self.inner.catalog.mkdir(path, check_mode(mode)?).await
    }

    /// Changes mode, owner, group or times of the entry at `path` (a
    /// symbolic link itself, not what it points to), as chmod, chown and
    /// utimensat do; `labios serve` decides whether the caller may.
    pub async fn set_attr<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        attr: SetAttr,
    ) -> Result<FileMeta> {
        attr.check()?;
        let meta = self.entry(file.into()).await?;
        self.inner.catalog.inventory().set_attr(meta.id, attr).await
    }

    /// A FIFO, device or socket at `path` (mknod(2)): a name that holds no
    /// data; what opening it does is the kernel's, on `labios mount`.
    /// `rdev` is a device's number. `AlreadyExists` if anything is there.
    pub async fn mknod(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<FileMeta> {
        self.inner
            .catalog
            .mknod(path, kind, check_mode(mode)?, rdev)
            .await
    }

    /// The number of the device at `path` (`st_rdev`; 0 if not a device).
    pub async fn device_number(&self, path: &str) -> Result<u64> {
        let meta = self.inner.catalog.stat(path).await?;
        self.inner.catalog.device_number(&meta).await
    }

    /// Creates a symbolic link at `path` pointing to `target`, which may
    /// be anything (a LABIOS path, a host path, a relative name) and need
    /// not exist; `AlreadyExists` if `path` does.
    pub async fn symlink(&self, target: &str, path: &str) -> Result<FileMeta> {
        namespace_only(path)?;
        self.inner.catalog.symlink(target, path).await
    }

    /// The target of the symbolic link at `path`.
    pub async fn readlink(&self, path: &str) -> Result<String> {
        namespace_only(path)?;
        self.inner.catalog.readlink(path).await
    }

    /// Creates an empty file (with parents) if absent; an existing file is
    /// returned as it is, so that `open(O_CREAT)` by many processes agrees.
    pub async fn create(&self, path: &str) -> Result<FileMeta> {
        self.file_for_write(path.into(), 0o644).await
    }

    /// [`Client::create`] giving a new file the permission bits `mode`
    /// (after the caller's umask, as open(2) with O_CREAT); an existing
    /// file keeps its own.
    pub async fn create_mode(&self, path: &str, mode: u32) -> Result<FileMeta> {
        self.file_for_write(path.into(), check_mode(mode)?).await
    }

    /// Sets the size of a file: bytes past `size` are cut, a larger size
    /// reads as zeros. Writes still in flight land first.
    pub async fn truncate<'a>(&self, file: impl Into<FileRef<'a>>, size: u64) -> Result<()> {
        let meta = self.file_for_write(file.into(), 0o644).await?;
        if self.has_pending(meta.id).await {
            self.settle(meta.id).await?;
        }
        let before = self.inner.catalog.inventory().file(meta.id).await?;
        self.inner
            .catalog
            .inventory()
            .set_size(meta.id, size)
            .await?;
        // Bytes past the new end go out of use on every worker that held
        // some: each frees what the inventory no longer gives it.
        if before.is_some_and(|b| b.size > size) {
            self.to_every_worker(LabelKind::Delete, &meta).await?;
        }
        Ok(())
    }

    /// Removes a name of a file or an empty directory; a file's data goes
    /// with its last name.
    pub async fn remove(&self, path: &str) -> Result<()> {
        if labios_mounts::is_external(path) {
            return self.remove_external(path).await;
        }
        let meta = self.inner.catalog.stat(path).await?;
        self.remove_entry(meta).await
    }

    /// Removes the entry `meta` the caller just looked up (by its
    /// `meta.path`), sparing the look-up [`Client::remove`] makes.
    ///
    /// Once the inventory dropped the last name of a file, its bytes are
    /// freed in the background: the delete labels for every worker are
    /// published (the queue holds them durably) and not waited for. No
    /// one can reach those bytes any more (file ids are never reused), so
    /// only the space comes back later, as on file systems that free
    /// blocks after unlink returns. A delete keeps what the inventory still
    /// gives the worker whenever it runs, and what a worker failed to free
    /// its reconciliation at restart gives back.
    pub async fn remove_entry(&self, meta: FileMeta) -> Result<()> {
        let meta = self.inner.catalog.owned(meta)?;
        if meta.kind == FileKind::File {
            self.settle(meta.id).await?;
        }
        let (gone, _) = self.inner.catalog.inventory().remove(&meta.path).await?;
        // A file keeps its data while another name (hard link) remains.
        if gone.kind == FileKind::File && gone.nlink == 0 {
            self.publish_to_every_worker(LabelKind::Delete, &gone)
                .await?;
        }
        Ok(())
    }

    /// Gives the file or symbolic link at `from` (not followed) the further
    /// name `to`, a hard link: both name one file, its data and attributes,
    /// until the last name is removed. `AlreadyExists` if `to` does; a
    /// directory is refused.
    pub async fn link(&self, from: &str, to: &str) -> Result<FileMeta> {
        namespace_only(from)?;
        namespace_only(to)?;
        let meta = self
            .inner
            .catalog
            .owned(self.inner.catalog.stat(from).await?)?;
        let to = normalize_path(to)?;
        self.inner.catalog.inventory().link(&meta.path, &to).await
    }

    /// Makes everything written to the file durable on the workers' devices.
    pub async fn flush<'a>(&self, file: impl Into<FileRef<'a>>) -> Result<()> {
        let file = file.into();
        if let Some(path) = file.external() {
            return self.flush_external(path).await;
        }
        let meta = self.inner.catalog.owned(self.entry(file).await?)?;
        self.settle(meta.id).await?;
        self.to_every_worker(LabelKind::Flush, &meta).await
    }

    /// Every worker, not only those holding current extents, may keep bytes
    /// of the file (overwritten ranges), so deletes and flushes go to all.
    async fn to_every_worker(&self, kind: LabelKind, meta: &FileMeta) -> Result<()> {
        let ids = self.publish_to_every_worker(kind, meta).await?;
        first_failure(&self.inner.labels.wait(&ids).await?)
    }

    async fn publish_to_every_worker(
        &self,
        kind: LabelKind,
        meta: &FileMeta,
    ) -> Result<Vec<LabelId>> {
        let workers = self.inner.catalog.inventory().workers().await?;
        let labels: Vec<_> = workers
            .iter()
            .map(|w| {
                self.inner
                    .labels
                    .pinned(kind, &meta.path, meta.id, w.spec.id)
            })
            .collect();
        let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
        self.inner.labels.publish(labels).await?;
        Ok(ids)
    }

    /// Moves `from` to `to` in the inventory, in one atomic step that
    /// replaces a file or link at `to`; the bytes of a file whose last name
    /// that was are freed in the background, as by [`Client::remove_entry`].
    ///
    /// Done here rather than by a rename label a worker runs: a label whose
    /// publication failed ambiguously (sent, but the answer lost) would
    /// still move the file later, after this call reported failure and the
    /// program went on (the model checker caught a truncate of the old
    /// name landing in the moved file so). An inventory call is done or not
    /// when it returns.
    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.rename_as(from, to, RenameHow::Replace).await
    }

    /// [`Client::rename`] with `how` deciding about an entry at `to`
    /// (`renameat2`'s flags): kept, with `AlreadyExists`, or swapped with
    /// `from` in one atomic step, whatever the kinds of the two.
    pub async fn rename_as(&self, from: &str, to: &str, how: RenameHow) -> Result<()> {
        let meta = self
            .inner
            .catalog
            .owned(self.inner.catalog.stat(from).await?)?;
        let to = normalize_path(to)?;
        let inventory = self.inner.catalog.inventory();
        if to.starts_with(&format!("{}/", meta.path)) {
            return Err(Error::InvalidArgument(format!(
                "cannot move {} into itself ({to})",
                meta.path
            )));
        }
        if let Some(dest) = inventory.lookup(&to).await? {
            let dest = self.inner.catalog.owned(dest)?;
            match how {
                RenameHow::Replace => {
                    replaceable(&meta, &dest)?;
                    if dest.kind == FileKind::Dir && dest.id != meta.id {
                        // POSIX lets a directory replace an empty one;
                        // removing a non-empty one fails (ENOTEMPTY) and
                        // changes nothing.
                        inventory.remove(&to).await?;
                    }
                }
                RenameHow::Exchange if dest.kind == FileKind::File => {
                    self.settle(dest.id).await?;
                }
                _ => {}
            }
        }
        if meta.kind == FileKind::File {
            self.settle(meta.id).await?;
        }
        let replaced = inventory.rename_as(&meta.path, &to, how).await?;
        if let Some((gone, _)) = replaced.filter(|(m, _)| m.kind == FileKind::File) {
            self.publish_to_every_worker(LabelKind::Delete, &gone)
                .await?;
        }
        Ok(())
    }

    /// Hands `data` to application `to` through the warehouse (no storage).
    pub async fn share(&self, to: AppId, name: &str, data: Bytes) -> Result<()> {
        self.inner.content.share(to, name, data).await
    }

    pub async fn receive(&self, name: &str, timeout: Duration) -> Result<Bytes> {
        self.inner.content.receive(name, timeout).await
    }
}

/// `mode` if it holds only permission bits.
fn check_mode(mode: u32) -> Result<u32> {
    SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    }
    .check()
    .map(|()| mode)
}

/// Whether `src` may replace `dest` in a rename, as POSIX says: a
/// directory only an (empty) directory, anything else only a non-directory.
fn replaceable(src: &FileMeta, dest: &FileMeta) -> Result<()> {
    match (src.kind == FileKind::Dir, dest.kind == FileKind::Dir) {
        (true, false) => Err(Error::InvalidArgument(format!(
            "{} is not a directory",
            dest.path
        ))),
        (false, true) => Err(Error::InvalidArgument(format!(
            "{} is a directory",
            dest.path
        ))),
        _ => Ok(()),
    }
}

/// Symbolic links live in LABIOS's namespace, not in external storage.
fn namespace_only(path: &str) -> Result<()> {
    if labios_mounts::is_external(path) {
        return Err(Error::InvalidArgument(format!(
            "{path} is external storage: symbolic links live in the LABIOS namespace only"
        )));
    }
    Ok(())
}

/// Extended attributes live in the inventory, which has no entry for an
/// external path.
fn inventory_path(path: &str) -> Result<()> {
    if labios_mounts::is_external(path) {
        return Err(Error::InvalidArgument(format!(
            "{path} has no extended attributes in LABIOS: external storage keeps its own metadata"
        )));
    }
    Ok(())
}
