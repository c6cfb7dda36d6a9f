//! The inventory on redb: namespace, extents, workers, applications and
//! counters in tables; label statuses in memory.

use crate::inventory::{AppRecord, Extent, FileKind, FileMeta, Inventory};
use async_trait::async_trait;
use labios_label::id::now_nanos;
use labios_label::{
    decode, encode, normalize_path, AppId, Error, FileId, LabelId, LabelState, LabelStatus, Result,
    WorkerId, WorkerStatus,
};
use parking_lot::Mutex;
use redb::{
    backends::InMemoryBackend, Database, Durability, ReadableTable, Table, TableDefinition,
    WriteTransaction,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const PATHS: TableDefinition<&str, u64> = TableDefinition::new("paths");
const FILES: TableDefinition<u64, &[u8]> = TableDefinition::new("files");
/// Keyed by (file, offset); the extents of one file never overlap.
const EXTENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("extents");
const WORKERS: TableDefinition<u32, &[u8]> = TableDefinition::new("workers");
const APPS: TableDefinition<u32, &[u8]> = TableDefinition::new("apps");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

/// Non-durable commits only free pages when a durable one follows, so every
/// this many commits one is made `Eventual` (written, not fsynced) to keep
/// the file from growing without bound between syncs. A power of two.
const EVENTUAL_EVERY: u64 = 64;

#[derive(Debug, Clone)]
pub struct InventoryConfig {
    /// How long a final label status nobody waited for is kept.
    pub reclaim_after: Duration,
}

impl Default for InventoryConfig {
    fn default() -> Self {
        InventoryConfig {
            reclaim_after: Duration::from_secs(60),
        }
    }
}

/// The embedded inventory.
///
/// Namespace, extent, worker, application and counter changes are committed
/// to redb with `Durability::None`: they are visible at once but reach the
/// disk only with the next [`Inventory::sync`], which commits with
/// `Durability::Immediate`. **A crash loses every change made since the last
/// `sync`**, nothing before it; reopening the file recovers that synced state.
/// Label statuses are never persisted: they matter only to live clients
/// waiting on them, and would otherwise cost a disk write per label.
pub struct RedbInventory {
    db: Arc<Database>,
    commits: AtomicU64,
    labels: Mutex<Labels>,
    reclaim_after: Duration,
}

struct Labels {
    statuses: HashMap<LabelId, (LabelStatus, Instant)>,
    /// Waiters to wake when a label becomes final.
    watchers: HashMap<LabelId, Vec<Arc<Notify>>>,
    /// Updates since the last sweep of expired statuses.
    since_sweep: usize,
    /// Updates due before the next sweep: the map size at the last one.
    sweep_every: usize,
}

fn storage<E: std::fmt::Display>(e: E) -> Error {
    Error::Storage(format!("inventory: {e}"))
}

/// Refuses paths that did not go through `normalize_path`.
fn check_path(path: &str) -> Result<()> {
    if normalize_path(path)? == path {
        Ok(())
    } else {
        Err(Error::InvalidPath {
            path: path.to_string(),
            reason: "not normalized".into(),
        })
    }
}

/// The tables a namespace change touches, opened in one write transaction.
struct Ns<'t> {
    paths: Table<'t, &'static str, u64>,
    files: Table<'t, u64, &'static [u8]>,
    extents: Table<'t, (u64, u64), &'static [u8]>,
    counters: Table<'t, &'static str, u64>,
}

impl<'t> Ns<'t> {
    fn open(tx: &'t WriteTransaction) -> Result<Self> {
        Ok(Ns {
            paths: tx.open_table(PATHS).map_err(storage)?,
            files: tx.open_table(FILES).map_err(storage)?,
            extents: tx.open_table(EXTENTS).map_err(storage)?,
            counters: tx.open_table(COUNTERS).map_err(storage)?,
        })
    }

    fn by_path(&self, path: &str) -> Result<Option<FileMeta>> {
        match self.paths.get(path).map_err(storage)? {
            Some(id) => self.by_id(id.value()),
            None => Ok(None),
        }
    }

    fn by_id(&self, id: FileId) -> Result<Option<FileMeta>> {
        match self.files.get(id).map_err(storage)? {
            Some(v) => decode(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn file(&self, id: FileId) -> Result<FileMeta> {
        let meta = self
            .by_id(id)?
            .ok_or_else(|| Error::NotFound(format!("file id {id}")))?;
        if meta.kind == FileKind::Dir {
            return Err(Error::InvalidArgument(format!(
                "{} is a directory, it has no data",
                meta.path
            )));
        }
        Ok(meta)
    }

    fn save(&mut self, meta: &FileMeta) -> Result<()> {
        self.paths
            .insert(meta.path.as_str(), meta.id)
            .map_err(storage)?;
        self.files
            .insert(meta.id, encode(meta).as_slice())
            .map_err(storage)?;
        Ok(())
    }

    fn forget(&mut self, meta: &FileMeta) -> Result<()> {
        self.paths.remove(meta.path.as_str()).map_err(storage)?;
        self.files.remove(meta.id).map_err(storage)?;
        Ok(())
    }

    fn new_entry(
        &mut self,
        path: &str,
        kind: FileKind,
        mode: u32,
        owner: AppId,
    ) -> Result<FileMeta> {
        let now = now_nanos();
        let meta = FileMeta {
            id: next_counter(&mut self.counters, "file")?,
            path: path.to_string(),
            kind,
            size: 0,
            mode,
            owner,
            ctime: now,
            mtime: now,
            atime: now,
        };
        self.save(&meta)?;
        Ok(meta)
    }

    /// Creates the missing ancestors of `path` as directories.
    fn make_parents(&mut self, path: &str, owner: AppId) -> Result<()> {
        for (i, _) in path.match_indices('/').skip(1) {
            let dir = &path[..i];
            match self.by_path(dir)? {
                None => {
                    self.new_entry(dir, FileKind::Dir, 0o755, owner)?;
                }
                Some(m) if m.kind == FileKind::File => {
                    return Err(Error::InvalidPath {
                        path: path.to_string(),
                        reason: format!("parent {dir} is a file"),
                    })
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn has_children(&self, dir: &str) -> Result<bool> {
        let prefix = child_prefix(dir);
        let mut range = self.paths.range(prefix.as_str()..).map_err(storage)?;
        Ok(match range.next() {
            Some(e) => e.map_err(storage)?.0.value().starts_with(&prefix),
            None => false,
        })
    }

    /// Extents of `file` overlapping `[off, end)`, unclipped, by offset.
    fn overlapping(&self, file: FileId, off: u64, end: u64) -> Result<Vec<Extent>> {
        overlapping(&self.extents, file, off, end)
    }

    fn put_extent(&mut self, file: FileId, e: &Extent) -> Result<()> {
        self.extents
            .insert((file, e.offset), encode(e).as_slice())
            .map_err(storage)?;
        Ok(())
    }

    fn del_extent(&mut self, file: FileId, offset: u64) -> Result<()> {
        self.extents.remove((file, offset)).map_err(storage)?;
        Ok(())
    }

    /// Deletes and returns every extent of `file`.
    fn drop_extents(&mut self, file: FileId) -> Result<Vec<Extent>> {
        let all = self.overlapping(file, 0, u64::MAX)?;
        for e in &all {
            self.del_extent(file, e.offset)?;
        }
        Ok(all)
    }

    /// Cuts every extent at `size`.
    fn truncate_extents(&mut self, file: FileId, size: u64) -> Result<()> {
        for e in self.overlapping(file, size, u64::MAX)? {
            self.del_extent(file, e.offset)?;
            if e.offset < size {
                self.put_extent(
                    file,
                    &Extent {
                        len: size - e.offset,
                        ..e
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Newest label wins: `new` takes only what no larger label covers, and
    /// the older extents it overlaps are trimmed around it.
    fn merge_extent(&mut self, file: FileId, new: Extent, end: u64) -> Result<()> {
        let existing = self.overlapping(file, new.offset, end)?;
        let mut pieces = Vec::new();
        let mut cursor = new.offset;
        for e in existing.iter().filter(|e| e.label > new.label) {
            let (s, t) = (e.offset.max(new.offset), (e.offset + e.len).min(end));
            if s > cursor {
                pieces.push((cursor, s));
            }
            cursor = cursor.max(t);
        }
        if cursor < end {
            pieces.push((cursor, end));
        }
        let older: Vec<&Extent> = existing.iter().filter(|e| e.label <= new.label).collect();
        for e in &older {
            self.del_extent(file, e.offset)?;
        }
        for e in older {
            let e_end = e.offset + e.len;
            if e.offset < new.offset {
                let head = Extent {
                    len: new.offset - e.offset,
                    ..*e
                };
                self.put_extent(file, &head)?;
            }
            if e_end > end {
                let tail = Extent {
                    offset: end,
                    len: e_end - end,
                    ..*e
                };
                self.put_extent(file, &tail)?;
            }
        }
        for (s, t) in pieces {
            let piece = Extent {
                offset: s,
                len: t - s,
                ..new
            };
            self.put_extent(file, &piece)?;
        }
        Ok(())
    }
}

/// An empty `Immediate` commit: makes every earlier commit durable.
fn commit_durable(db: &Database) -> Result<()> {
    let mut tx = db.begin_write().map_err(storage)?;
    tx.set_durability(Durability::Immediate);
    tx.commit().map_err(storage)
}

fn child_prefix(dir: &str) -> String {
    if dir == "/" {
        "/".to_string()
    } else {
        format!("{dir}/")
    }
}

fn next_counter(counters: &mut Table<&'static str, u64>, name: &str) -> Result<u64> {
    let next = counters
        .get(name)
        .map_err(storage)?
        .map_or(0, |v| v.value())
        + 1;
    counters.insert(name, next).map_err(storage)?;
    Ok(next)
}

fn overlapping<T: ReadableTable<(u64, u64), &'static [u8]>>(
    table: &T,
    file: FileId,
    off: u64,
    end: u64,
) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    // The one extent starting before `off` may reach into the range.
    if let Some(e) = table
        .range((file, 0)..(file, off))
        .map_err(storage)?
        .next_back()
    {
        let e: Extent = decode(e.map_err(storage)?.1.value())?;
        if e.offset + e.len > off {
            out.push(e);
        }
    }
    for e in table.range((file, off)..(file, end)).map_err(storage)? {
        out.push(decode(e.map_err(storage)?.1.value())?);
    }
    Ok(out)
}

impl RedbInventory {
    /// Opens (or creates) the inventory file at `path`, recovering whatever
    /// was synced before.
    pub fn open(path: &Path, cfg: InventoryConfig) -> Result<Self> {
        let db = Database::create(path)
            .map_err(|e| Error::Storage(format!("inventory {}: {e}", path.display())))?;
        Self::with_db(db, cfg)
    }

    /// An inventory that lives in memory only (tests, benchmarks, tools).
    pub fn in_memory() -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .map_err(storage)?;
        Self::with_db(db, InventoryConfig::default())
    }

    fn with_db(db: Database, cfg: InventoryConfig) -> Result<Self> {
        let inv = RedbInventory {
            db: Arc::new(db),
            commits: AtomicU64::new(0),
            labels: Mutex::new(Labels {
                statuses: HashMap::new(),
                watchers: HashMap::new(),
                since_sweep: 0,
                sweep_every: 1024,
            }),
            reclaim_after: cfg.reclaim_after,
        };
        // Create every table and the root directory so that reads never meet
        // a missing table.
        inv.write(|tx| {
            tx.open_table(WORKERS).map_err(storage)?;
            tx.open_table(APPS).map_err(storage)?;
            let mut ns = Ns::open(tx)?;
            if ns.by_path("/")?.is_none() {
                ns.new_entry("/", FileKind::Dir, 0o755, 0)?;
            }
            Ok(())
        })?;
        commit_durable(&inv.db)?;
        Ok(inv)
    }

    /// Runs `f` in one write transaction, committed fast (see the type doc).
    fn write<R>(&self, f: impl FnOnce(&WriteTransaction) -> Result<R>) -> Result<R> {
        let mut tx = self.db.begin_write().map_err(storage)?;
        let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        tx.set_durability(if n & (EVENTUAL_EVERY - 1) == 0 {
            Durability::Eventual
        } else {
            Durability::None
        });
        match f(&tx) {
            Ok(r) => {
                tx.commit().map_err(storage)?;
                Ok(r)
            }
            Err(e) => {
                tx.abort().map_err(storage)?;
                Err(e)
            }
        }
    }

    fn read<R>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<R>) -> Result<R> {
        let tx = self.db.begin_read().map_err(storage)?;
        f(&tx)
    }

    fn meta_by_path(&self, path: &str) -> Result<Option<FileMeta>> {
        self.read(|tx| {
            let paths = tx.open_table(PATHS).map_err(storage)?;
            let Some(id) = paths.get(path).map_err(storage)? else {
                return Ok(None);
            };
            let files = tx.open_table(FILES).map_err(storage)?;
            match files.get(id.value()).map_err(storage)? {
                Some(v) => decode(v.value()).map(Some),
                None => Ok(None),
            }
        })
    }

    fn put_record<K: redb::Key + 'static>(
        &self,
        table: TableDefinition<K, &[u8]>,
        key: K::SelfType<'_>,
        bytes: Vec<u8>,
    ) -> Result<()> {
        self.write(|tx| {
            let mut t = tx.open_table(table).map_err(storage)?;
            t.insert(key, bytes.as_slice()).map_err(storage)?;
            Ok(())
        })
    }

    fn all_records<K: redb::Key + 'static, V: serde::de::DeserializeOwned>(
        &self,
        table: TableDefinition<K, &[u8]>,
    ) -> Result<Vec<V>> {
        self.read(|tx| {
            let t = tx.open_table(table).map_err(storage)?;
            let mut out = Vec::new();
            for e in t.iter().map_err(storage)? {
                out.push(decode(e.map_err(storage)?.1.value())?);
            }
            Ok(out)
        })
    }
}

impl Labels {
    /// Drops final statuses older than `age`, at most once per as many
    /// updates as there are statuses, which keeps the cost amortized O(1).
    fn sweep(&mut self, age: Duration) {
        self.since_sweep += 1;
        if self.since_sweep < self.sweep_every {
            return;
        }
        self.since_sweep = 0;
        let now = Instant::now();
        self.statuses
            .retain(|_, (s, at)| !s.state.is_final() || now.duration_since(*at) < age);
        self.sweep_every = self.statuses.len().max(1024);
    }
}

/// Unregisters a waiter however its `wait` ends (done, timeout, cancelled).
struct WatchGuard<'a> {
    labels: &'a Mutex<Labels>,
    ids: &'a [LabelId],
    notify: Arc<Notify>,
}

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        let mut l = self.labels.lock();
        for id in self.ids {
            if let Some(list) = l.watchers.get_mut(id) {
                list.retain(|n| !Arc::ptr_eq(n, &self.notify));
                if list.is_empty() {
                    l.watchers.remove(id);
                }
            }
        }
    }
}

#[async_trait]
impl Inventory for RedbInventory {
    async fn create(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        owner: AppId,
    ) -> Result<FileMeta> {
        check_path(path)?;
        self.write(|tx| {
            let mut ns = Ns::open(tx)?;
            if let Some(m) = ns.by_path(path)? {
                return if m.kind == kind {
                    Ok(m)
                } else {
                    Err(Error::AlreadyExists(format!(
                        "{path} exists as a {:?}",
                        m.kind
                    )))
                };
            }
            ns.make_parents(path, owner)?;
            ns.new_entry(path, kind, mode, owner)
        })
    }

    async fn lookup(&self, path: &str) -> Result<Option<FileMeta>> {
        check_path(path)?;
        self.meta_by_path(path)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        self.read(|tx| {
            let paths = tx.open_table(PATHS).map_err(storage)?;
            let files = tx.open_table(FILES).map_err(storage)?;
            let mut out = Vec::new();
            for e in paths.range(prefix..).map_err(storage)? {
                let (p, id) = e.map_err(storage)?;
                if !p.value().starts_with(prefix) {
                    break;
                }
                if let Some(v) = files.get(id.value()).map_err(storage)? {
                    out.push(decode(v.value())?);
                }
            }
            Ok(out)
        })
    }

    async fn remove(&self, path: &str) -> Result<(FileMeta, Vec<Extent>)> {
        check_path(path)?;
        if path == "/" {
            return Err(Error::InvalidArgument("cannot remove the root /".into()));
        }
        self.write(|tx| {
            let mut ns = Ns::open(tx)?;
            let meta = ns
                .by_path(path)?
                .ok_or_else(|| Error::NotFound(path.to_string()))?;
            if meta.kind == FileKind::Dir && ns.has_children(path)? {
                return Err(Error::InvalidArgument(format!(
                    "directory {path} is not empty"
                )));
            }
            let extents = ns.drop_extents(meta.id)?;
            ns.forget(&meta)?;
            Ok((meta, extents))
        })
    }

    async fn rename(&self, from: &str, to: &str) -> Result<Option<(FileMeta, Vec<Extent>)>> {
        check_path(from)?;
        check_path(to)?;
        if from == "/" || to == "/" {
            return Err(Error::InvalidArgument("cannot rename the root /".into()));
        }
        if to.starts_with(&child_prefix(from)) {
            return Err(Error::InvalidArgument(format!(
                "cannot move {from} into itself ({to})"
            )));
        }
        self.write(|tx| {
            let mut ns = Ns::open(tx)?;
            let mut meta = ns
                .by_path(from)?
                .ok_or_else(|| Error::NotFound(from.to_string()))?;
            if from == to {
                return Ok(None);
            }
            let replaced = match ns.by_path(to)? {
                None => None,
                Some(old) if old.kind == FileKind::File && meta.kind == FileKind::File => {
                    let extents = ns.drop_extents(old.id)?;
                    ns.forget(&old)?;
                    Some((old, extents))
                }
                Some(old) => {
                    return Err(Error::AlreadyExists(format!(
                        "{to} exists as a {:?}; only a file replaces a file",
                        old.kind
                    )))
                }
            };
            ns.make_parents(to, meta.owner)?;
            if meta.kind == FileKind::Dir {
                let prefix = child_prefix(from);
                let mut children = Vec::new();
                for e in ns.paths.range(prefix.as_str()..).map_err(storage)? {
                    let (p, id) = e.map_err(storage)?;
                    if !p.value().starts_with(&prefix) {
                        break;
                    }
                    children.push(id.value());
                }
                for id in children {
                    if let Some(mut child) = ns.by_id(id)? {
                        ns.paths.remove(child.path.as_str()).map_err(storage)?;
                        child.path = format!("{to}{}", &child.path[from.len()..]);
                        ns.save(&child)?;
                    }
                }
            }
            ns.paths.remove(from).map_err(storage)?;
            meta.path = to.to_string();
            meta.ctime = now_nanos();
            ns.save(&meta)?;
            Ok(replaced)
        })
    }

    async fn set_size(&self, file: FileId, size: u64) -> Result<()> {
        self.write(|tx| {
            let mut ns = Ns::open(tx)?;
            let mut meta = ns.file(file)?;
            ns.truncate_extents(file, size)?;
            meta.size = size;
            meta.mtime = now_nanos();
            ns.save(&meta)
        })
    }

    async fn commit_extent(&self, file: FileId, extent: Extent) -> Result<()> {
        let end = extent.offset.checked_add(extent.len).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "extent at {} of {} bytes runs past the largest offset",
                extent.offset, extent.len
            ))
        })?;
        self.write(|tx| {
            let mut ns = Ns::open(tx)?;
            let mut meta = ns.file(file)?;
            if extent.len > 0 {
                ns.merge_extent(file, extent, end)?;
            }
            meta.size = meta.size.max(end);
            meta.mtime = now_nanos();
            ns.save(&meta)
        })
    }

    async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let end = offset.saturating_add(len);
        self.read(|tx| {
            let files = tx.open_table(FILES).map_err(storage)?;
            if files.get(file).map_err(storage)?.is_none() {
                return Err(Error::NotFound(format!("file id {file}")));
            }
            if len == 0 {
                return Ok(Vec::new());
            }
            let table = tx.open_table(EXTENTS).map_err(storage)?;
            let mut out = overlapping(&table, file, offset, end)?;
            for e in &mut out {
                let e_end = e.offset + e.len;
                e.offset = e.offset.max(offset);
                e.len = e_end.min(end) - e.offset;
            }
            Ok(out)
        })
    }

    async fn file(&self, file: FileId) -> Result<Option<FileMeta>> {
        self.read(|tx| {
            let files = tx.open_table(FILES).map_err(storage)?;
            match files.get(file).map_err(storage)? {
                Some(v) => decode(v.value()).map(Some),
                None => Ok(None),
            }
        })
    }

    async fn set_status(&self, status: LabelStatus) -> Result<()> {
        let mut l = self.labels.lock();
        let id = status.id;
        let is_final = status.state.is_final();
        l.statuses.insert(id, (status, Instant::now()));
        if is_final {
            if let Some(list) = l.watchers.remove(&id) {
                for n in list {
                    n.notify_one();
                }
            }
        }
        l.sweep(self.reclaim_after);
        Ok(())
    }

    async fn status(&self, id: LabelId) -> Result<Option<LabelStatus>> {
        Ok(self.labels.lock().statuses.get(&id).map(|(s, _)| s.clone()))
    }

    async fn wait(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let guard = WatchGuard {
            labels: &self.labels,
            ids,
            notify: Arc::new(Notify::new()),
        };
        loop {
            {
                let mut l = self.labels.lock();
                let mut pending = false;
                for id in ids {
                    let done = l.statuses.get(id).is_some_and(|(s, _)| s.state.is_final());
                    if !done {
                        pending = true;
                        let list = l.watchers.entry(*id).or_default();
                        if !list.iter().any(|n| Arc::ptr_eq(n, &guard.notify)) {
                            list.push(guard.notify.clone());
                        }
                    }
                }
                if !pending || tokio::time::Instant::now() >= deadline {
                    let out: Vec<LabelStatus> = ids
                        .iter()
                        .map(|id| {
                            l.statuses.get(id).map_or_else(
                                || LabelStatus::new(*id, LabelState::Queued),
                                |(s, _)| s.clone(),
                            )
                        })
                        .collect();
                    for s in out.iter().filter(|s| s.state.is_final()) {
                        l.statuses.remove(&s.id);
                    }
                    return Ok(out);
                }
            }
            // A timeout just loops once more to collect the current statuses.
            let _ = tokio::time::timeout_at(deadline, guard.notify.notified()).await;
        }
    }

    async fn label_count(&self) -> Result<usize> {
        Ok(self.labels.lock().statuses.len())
    }

    async fn put_worker(&self, status: WorkerStatus) -> Result<()> {
        self.put_record(WORKERS, status.spec.id, encode(&status))
    }

    async fn workers(&self) -> Result<Vec<WorkerStatus>> {
        self.all_records(WORKERS)
    }

    /// Removing an unknown worker is not an error: decommissioning twice
    /// leaves the same state.
    async fn remove_worker(&self, id: WorkerId) -> Result<()> {
        self.write(|tx| {
            let mut t = tx.open_table(WORKERS).map_err(storage)?;
            t.remove(id).map_err(storage)?;
            Ok(())
        })
    }

    async fn put_app(&self, app: AppRecord) -> Result<()> {
        self.put_record(APPS, app.id, encode(&app))
    }

    async fn app(&self, id: AppId) -> Result<Option<AppRecord>> {
        self.read(|tx| {
            let t = tx.open_table(APPS).map_err(storage)?;
            match t.get(id).map_err(storage)? {
                Some(v) => decode(v.value()).map(Some),
                None => Ok(None),
            }
        })
    }

    async fn apps(&self) -> Result<Vec<AppRecord>> {
        self.all_records(APPS)
    }

    async fn next_id(&self, counter: &str) -> Result<u64> {
        self.write(|tx| {
            let mut t = tx.open_table(COUNTERS).map_err(storage)?;
            next_counter(&mut t, counter)
        })
    }

    /// Runs the durable commit off the async threads: it waits for fsync.
    async fn sync(&self) -> Result<()> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || commit_durable(&db))
            .await
            .map_err(|e| Error::Storage(format!("inventory sync task: {e}")))?
    }
}
