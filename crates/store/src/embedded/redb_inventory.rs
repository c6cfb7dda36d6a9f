//! The inventory on redb: namespace, extents, workers, applications and
//! counters live in memory and are persisted to redb behind the callers'
//! backs (write-behind); label statuses live in memory only.

mod write_behind;

#[cfg(test)]
mod tests;

use crate::inventory::{
    check_link_target, check_xattr, clip_to, read_len, AppRecord, Extent, FileKind, FileMeta,
    Inventory, Named, Owner, ReadPlan, RenameHow, SetAttr, XattrCond, LINK_MAX, LINK_TARGET,
};
use async_trait::async_trait;
use bytes::Bytes;
use labios_label::hints;
use labios_label::id::now_nanos;
use labios_label::{
    decode, normalize_path, path::parent, AppId, Error, FileId, LabelId, LabelState, LabelStatus,
    Result, WorkerId, WorkerStatus,
};
use parking_lot::{Mutex, MutexGuard, RwLock};
use redb::{backends::InMemoryBackend, Database, Durability, ReadableTable, TableDefinition};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use write_behind::{Log, Op, StoredFile, Wal};

const PATHS: TableDefinition<&str, u64> = TableDefinition::new("paths");
const FILES: TableDefinition<u64, &[u8]> = TableDefinition::new("files");
/// Keyed by (file, offset); the extents of one file never overlap.
const EXTENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("extents");
/// File id -> its extended attributes, a codec-encoded name -> value map;
/// absent when it has none. One row per file: at most `XATTR_TOTAL_MAX`
/// bytes, rewritten whole on a change.
const XATTRS: TableDefinition<u64, &[u8]> = TableDefinition::new("xattrs");
const WORKERS: TableDefinition<u32, &[u8]> = TableDefinition::new("workers");
const APPS: TableDefinition<u32, &[u8]> = TableDefinition::new("apps");
/// The program repository: (application, function name) -> wasm module.
const FUNCTIONS: TableDefinition<(u32, &str), &[u8]> = TableDefinition::new("functions");
/// Per counter, the largest value that may have been handed out.
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

/// Counter values reserved (durably) at a time and then handed out from
/// memory.
const COUNTER_BLOCK: u64 = 1024;

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
/// The namespace, the extents and extended attributes of every file,
/// workers, applications and counters are held in memory, which is
/// authoritative: it is loaded from the redb file at open, every call reads
/// and changes it directly, and every change also appends a record to a
/// bounded write-behind log. A background thread drains that log every few
/// milliseconds (or as soon as a couple of thousand records wait) into one
/// redb write transaction, so many changes cost one commit. When the thread
/// falls behind and the log is full, mutations wait for room
/// (backpressure).
///
/// Durability (what a crash can lose):
/// - [`Inventory::sync`] writes everything logged before it into redb and
///   commits with `Durability::Immediate`; it returns once that is on disk.
///   **Everything changed before a `sync` that returned survives a crash.**
/// - A crash may lose any namespace, extent, attribute, worker or application
///   change made after the last completed `sync` **to a machine crash**
///   (power loss). A process crash (`kill -9`) loses nothing that returned:
///   every change is written to the write-ahead file (page cache, no fsync)
///   before its call returns, and opening replays what redb had not
///   committed. What survives is always the state after some prefix of the
///   changes, each change whole: never half a rename, never an extent
///   without the size change that came with it.
/// - Counters ([`Inventory::next_id`], which also numbers files) are
///   reserved in blocks of 1024, each reservation committed `Immediate`
///   before any of its values is handed out: a crash may skip values, it
///   never hands out one twice.
/// - Dropping the inventory is a clean shutdown: it flushes the log and
///   commits `Immediate`, so everything survives.
/// - If a background commit or a write-ahead write fails (disk full, I/O
///   error) the inventory refuses further changes and `sync` with that
///   error.
///
/// Label statuses are never persisted: they matter only to live clients
/// waiting on them, and would otherwise cost a disk write per label.
pub struct RedbInventory {
    db: Arc<Database>,
    ns: RwLock<Namespace>,
    workers: RwLock<BTreeMap<WorkerId, WorkerStatus>>,
    /// Stacks asked of workers and not yet taken. Kept in memory: a
    /// worker restarts on the stack of its configuration.
    stacks_asked: parking_lot::Mutex<BTreeMap<WorkerId, Vec<String>>>,
    apps: RwLock<BTreeMap<AppId, AppRecord>>,
    functions: RwLock<BTreeMap<(AppId, String), Bytes>>,
    counters: Mutex<HashMap<String, Counter>>,
    log: Arc<Log>,
    writer: Option<JoinHandle<()>>,
    labels: Mutex<Labels>,
    reclaim_after: Duration,
    /// The sessions holding each file open ([`Inventory::hold`]). In memory
    /// only: a restart ends every session, and loading drops the files
    /// that were kept for one alone (see [`Namespace::unname_held`]).
    /// Taken after a file's lock, never before.
    holds: Mutex<HashMap<FileId, HashSet<u64>>>,
}

/// Hands out `next..=limit` from memory; `limit` is durable.
struct Counter {
    next: u64,
    limit: u64,
}

/// Paths and files. A file's own lock guards its metadata and extents, so
/// that data placement on one file neither waits for nor blocks another.
/// Lock order: namespace, then file; whoever holds several file locks holds
/// the namespace write lock, and nobody waits for the namespace while
/// holding a file lock.
#[derive(Default)]
struct Namespace {
    paths: BTreeMap<String, FileId>,
    nodes: HashMap<FileId, Arc<Node>>,
}

type Node = Mutex<FileState>;

struct FileState {
    /// `meta.path` is its first name, `meta.nlink` counts it and `links`.
    meta: FileMeta,
    /// Its other names (hard links), sorted: when the first name goes,
    /// the smallest other one takes its place, in memory as after a reload
    /// (and as on Redis).
    links: Vec<String>,
    /// By offset; never overlapping.
    extents: BTreeMap<u64, Extent>,
    xattrs: BTreeMap<String, Bytes>,
    /// False once removed (a caller may still hold the node).
    live: bool,
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

fn child_prefix(dir: &str) -> String {
    if dir == "/" {
        "/".to_string()
    } else {
        format!("{dir}/")
    }
}

/// Keys of a `BTreeMap<String, _>` from `prefix` on.
fn from_prefix(prefix: &str) -> (Bound<&str>, Bound<&str>) {
    (Bound::Included(prefix), Bound::Unbounded)
}

impl Namespace {
    /// The hints (`user.labios.*` attributes) of the nearest directory
    /// above `path` that has any, root included: what a new file there
    /// starts with (WOSS: a workflow stage hints its output directory
    /// once, not every file a program creates in it).
    fn inherited_hints(&self, path: &str) -> BTreeMap<String, Bytes> {
        let mut at = parent(path);
        while let Some(dir) = at {
            if let Some(node) = self.node(dir) {
                let hints: BTreeMap<String, Bytes> = node
                    .lock()
                    .xattrs
                    .iter()
                    .filter(|(name, _)| name.starts_with(hints::PREFIX))
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect();
                if !hints.is_empty() {
                    return hints;
                }
            }
            at = parent(dir);
        }
        BTreeMap::new()
    }

    fn node(&self, path: &str) -> Option<&Arc<Node>> {
        self.paths.get(path).and_then(|id| self.nodes.get(id))
    }

    fn meta(&self, path: &str) -> Option<FileMeta> {
        self.node(path).map(|n| n.lock().meta_at(path))
    }

    fn has_children(&self, dir: &str) -> bool {
        let prefix = child_prefix(dir);
        self.paths
            .range::<str, _>(from_prefix(&prefix))
            .next()
            .is_some_and(|(p, _)| p.starts_with(&prefix))
    }

    /// The directory holding `path` changed: its mtime and ctime are `now`,
    /// and it gained (`subdirs` 1) or lost (-1) a subdirectory, whose `..`
    /// is one of its links.
    /// The names a move of `from` (of kind `kind`, file `id`) to `to`
    /// changes: `from` and, for a directory, every name under it, each as
    /// (old name, new name, file).
    fn moves(
        &self,
        from: &str,
        to: &str,
        kind: FileKind,
        id: FileId,
    ) -> Vec<(String, String, FileId)> {
        let mut names = vec![(from.to_string(), id)];
        if kind == FileKind::Dir {
            let prefix = child_prefix(from);
            names.extend(
                self.paths
                    .range::<str, _>(from_prefix(&prefix))
                    .take_while(|(p, _)| p.starts_with(&prefix))
                    .map(|(p, id)| (p.clone(), *id)),
            );
        }
        names
            .into_iter()
            .map(|(old, id)| {
                let new = format!("{to}{}", &old[from.len()..]);
                (old, new, id)
            })
            .collect()
    }

    /// Makes `moves` in one step (every old name goes before any new one
    /// is made, so that two trees may swap), with the ctime of `touched`
    /// now. Each file whose names change stays locked (once, however many
    /// of its names move) until its records are logged, so that no later
    /// commit_extent logs its metadata first.
    fn apply_moves(
        &mut self,
        moves: Vec<(String, String, FileId)>,
        touched: &[FileId],
        now: u64,
        ops: &mut Vec<Op>,
    ) {
        let nodes: BTreeMap<FileId, Arc<Node>> = moves
            .iter()
            .filter_map(|(_, _, id)| self.nodes.get(id).map(|n| (*id, n.clone())))
            .collect();
        let mut guards: BTreeMap<FileId, MutexGuard<'_, FileState>> =
            nodes.iter().map(|(id, n)| (*id, n.lock())).collect();
        for (old, _, id) in &moves {
            if guards.contains_key(id) {
                self.paths.remove(old);
                ops.push(Op::DelPath(old.clone()));
            }
        }
        for (old, new, id) in moves {
            let Some(st) = guards.get_mut(&id) else {
                continue;
            };
            self.paths.insert(new.clone(), id);
            st.rename(&old, &new);
            ops.push(Op::PutPath(new, id));
        }
        for id in touched {
            if let Some(st) = guards.get_mut(id) {
                st.meta.ctime = now;
            }
        }
        for st in guards.values() {
            ops.push(Op::file(&st.meta));
        }
    }

    fn touch_parent(&self, path: &str, now: u64, subdirs: i32, ops: &mut Vec<Op>) {
        if let Some(dir) = parent(path).and_then(|p| self.node(p)) {
            let mut d = dir.lock();
            d.meta.mtime = now;
            d.meta.ctime = now;
            d.meta.nlink = d
                .meta
                .nlink
                .checked_add_signed(subdirs)
                .filter(|&n| n >= 2)
                .unwrap_or_else(|| {
                    panic!(
                        "directory {} with {} links gains {subdirs} subdirectories",
                        d.meta.path, d.meta.nlink
                    )
                });
            ops.push(Op::file(&d.meta));
        }
    }

    /// Fails if an existing ancestor of `path` is a file (the missing ones
    /// are created by `RedbInventory::make_parents`).
    fn check_parents(&self, path: &str) -> Result<()> {
        for (i, _) in path.match_indices('/').skip(1) {
            let dir = &path[..i];
            if let Some(n) = self.node(dir) {
                let kind = n.lock().meta.kind;
                if kind != FileKind::Dir {
                    return Err(Error::parent_not_dir(path, dir, kind.word()));
                }
            }
        }
        Ok(())
    }

    /// Unlinks a locked file's only name, drops its attributes and takes
    /// its extents.
    fn forget(&mut self, st: &mut FileState, ops: &mut Vec<Op>) -> Vec<Extent> {
        assert!(
            st.links.is_empty(),
            "forgetting a file that has other names"
        );
        self.paths.remove(&st.meta.path);
        ops.push(Op::DelPath(st.meta.path.clone()));
        st.meta.nlink = 0;
        self.drop_nameless(st, ops)
    }

    /// Drops a locked file that has no name left: its record, attributes
    /// and extents (taken).
    fn drop_nameless(&mut self, st: &mut FileState, ops: &mut Vec<Op>) -> Vec<Extent> {
        assert!(
            st.meta.nlink == 0 && st.links.is_empty(),
            "dropping file {} with {} names",
            st.meta.id,
            st.meta.nlink
        );
        let id = st.meta.id;
        st.live = false;
        self.nodes.remove(&id);
        let extents: Vec<Extent> = std::mem::take(&mut st.extents).into_values().collect();
        if st.meta.kind == FileKind::File {
            ops.push(Op::CutExtents(id, 0));
        }
        if !std::mem::take(&mut st.xattrs).is_empty() {
            ops.push(Op::PutXattrs(id, BTreeMap::new()));
        }
        ops.push(Op::DelFile(id));
        extents
    }

    /// Drops the last name `path` of a locked regular file some session
    /// holds open: it stays, reachable by id with its data and `nlink` 0,
    /// until the last holder lets go ([`RedbInventory::let_go`]). Its record
    /// on disk keeps a name no path gives it any more; loading drops such a
    /// file (holds live in memory, a restart ends every session).
    fn unname_held(
        &mut self,
        st: &mut FileState,
        path: &str,
        ops: &mut Vec<Op>,
    ) -> (FileMeta, Vec<Extent>) {
        assert_eq!(
            self.paths.remove(path),
            Some(st.meta.id),
            "{path} names the file"
        );
        st.meta.nlink = 0;
        st.meta.ctime = now_nanos();
        ops.push(Op::DelPath(path.to_string()));
        ops.push(Op::file(&st.meta));
        (st.meta_at(path), Vec::new())
    }

    /// Drops the name `path` of a locked file, forgetting the file with its
    /// last name unless it is `held` open ([`Namespace::unname_held`]);
    /// returns it as `path` named it, and the extents to reclaim.
    fn unname(
        &mut self,
        st: &mut FileState,
        path: &str,
        held: bool,
        ops: &mut Vec<Op>,
    ) -> (FileMeta, Vec<Extent>) {
        if st.links.is_empty() {
            if held && st.meta.kind == FileKind::File {
                return self.unname_held(st, path, ops);
            }
            let extents = self.forget(st, ops);
            return (st.meta_at(path), extents);
        }
        self.paths.remove(path);
        if st.meta.path == path {
            st.meta.path = st.links.remove(0);
        } else {
            st.links.retain(|l| l != path);
        }
        st.meta.nlink -= 1;
        st.meta.ctime = now_nanos();
        st.check_links();
        ops.push(Op::DelPath(path.to_string()));
        ops.push(Op::file(&st.meta));
        (st.meta_at(path), Vec::new())
    }
}

impl FileState {
    /// Its attributes as `Inventory::xattrs` returns them, sorted by name.
    fn listed_xattrs(&self) -> Vec<(String, Bytes)> {
        self.xattrs
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    }

    fn new(meta: FileMeta) -> FileState {
        FileState {
            meta,
            links: Vec::new(),
            extents: BTreeMap::new(),
            xattrs: BTreeMap::new(),
            live: true,
        }
    }

    /// Its metadata as its name `path` shows it.
    fn meta_at(&self, path: &str) -> FileMeta {
        let mut m = self.meta.clone();
        m.path = path.to_string();
        m
    }

    /// Its name `from` is now `to`.
    fn rename(&mut self, from: &str, to: &str) {
        if self.meta.path == from {
            self.meta.path = to.to_string();
        } else if let Some(l) = self.links.iter_mut().find(|l| *l == from) {
            *l = to.to_string();
            self.links.sort();
        } else {
            panic!("{from} is not a name of file {}", self.meta.id);
        }
    }

    fn check_links(&self) {
        assert_eq!(
            self.meta.nlink as usize,
            1 + self.links.len(),
            "link count of file {}",
            self.meta.id
        );
    }

    /// Refuses removed files and directories.
    fn check_data(&self) -> Result<()> {
        if !self.live {
            return Err(Error::NotFound(format!("file id {}", self.meta.id)));
        }
        if self.meta.kind == FileKind::Dir {
            return Err(Error::InvalidArgument(format!(
                "{} is a directory, it has no data",
                self.meta.path
            )));
        }
        if self.meta.kind.is_special() {
            return Err(Error::InvalidArgument(format!(
                "{} is a {}, it holds no data",
                self.meta.path,
                self.meta.kind.word()
            )));
        }
        Ok(())
    }

    /// Extents overlapping `[offset, offset + len)`, clipped to it, by
    /// offset.
    fn clipped(&self, offset: u64, len: u64) -> Vec<Extent> {
        if len == 0 {
            return Vec::new();
        }
        let end = offset.saturating_add(len);
        let mut out = self.overlapping(offset, end);
        clip_to(&mut out, offset, end);
        out
    }

    /// Extents overlapping `[off, end)`, unclipped, by offset.
    fn overlapping(&self, off: u64, end: u64) -> Vec<Extent> {
        let mut out = Vec::new();
        // The one extent starting before `off` may reach into the range.
        if let Some((_, e)) = self.extents.range(..off).next_back() {
            if e.offset + e.len > off {
                out.push(*e);
            }
        }
        out.extend(self.extents.range(off..end).map(|(_, e)| *e));
        out
    }

    fn put(&mut self, e: Extent, ops: &mut Vec<Op>) {
        self.extents.insert(e.offset, e);
        ops.push(Op::PutExtent(self.meta.id, e));
    }

    fn del(&mut self, offset: u64, ops: &mut Vec<Op>) {
        self.extents.remove(&offset);
        ops.push(Op::DelExtent(self.meta.id, offset));
    }

    /// Cuts every extent at `size`.
    fn truncate(&mut self, size: u64, ops: &mut Vec<Op>) {
        if let Some((_, e)) = self.extents.range_mut(..size).next_back() {
            if e.offset + e.len > size {
                e.len = size - e.offset;
                ops.push(Op::PutExtent(self.meta.id, *e));
            }
        }
        if self.extents.range(size..).next().is_some() {
            drop(self.extents.split_off(&size));
            ops.push(Op::CutExtents(self.meta.id, size));
        }
    }

    /// Newest label wins: `new` takes only what no larger label covers, and
    /// the older extents it overlaps are trimmed around it.
    fn merge(&mut self, new: Extent, end: u64, ops: &mut Vec<Op>) {
        let existing = self.overlapping(new.offset, end);
        if existing.is_empty() {
            self.put(new, ops);
            return;
        }
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
            self.del(e.offset, ops);
        }
        for e in older {
            let e_end = e.offset + e.len;
            if e.offset < new.offset {
                let head = Extent {
                    len: new.offset - e.offset,
                    ..*e
                };
                self.put(head, ops);
            }
            if e_end > end {
                let tail = Extent {
                    offset: end,
                    len: e_end - end,
                    ..*e
                };
                self.put(tail, ops);
            }
        }
        for (s, t) in pieces {
            let piece = Extent {
                offset: s,
                len: t - s,
                ..new
            };
            self.put(piece, ops);
        }
    }
}

/// Everything persisted, as loaded at open.
struct Loaded {
    ns: Namespace,
    workers: BTreeMap<WorkerId, WorkerStatus>,
    apps: BTreeMap<AppId, AppRecord>,
    functions: BTreeMap<(AppId, String), Bytes>,
    counters: HashMap<String, Counter>,
    /// Records of files no path names: kept open past their last name
    /// before a restart, to be dropped now.
    nameless: Vec<FileId>,
}

/// Links of a new entry: a directory's name and its `.`; anything else's
/// one name.
fn dir_links(kind: FileKind) -> u32 {
    if kind == FileKind::Dir {
        2
    } else {
        1
    }
}

/// Sets each directory's link count to 2 plus its subdirectories (whose
/// `..` link it), whatever a version that did not count them stored.
fn count_subdirs(ns: &Namespace) {
    for n in ns.nodes.values() {
        let mut st = n.lock();
        if st.meta.kind == FileKind::Dir {
            st.meta.nlink = 2;
        }
    }
    for p in ns.paths.keys() {
        let is_dir = ns
            .node(p)
            .is_some_and(|n| n.lock().meta.kind == FileKind::Dir);
        if let Some(dir) = parent(p).filter(|_| is_dir).and_then(|d| ns.node(d)) {
            dir.lock().meta.nlink += 1;
        }
    }
}

/// Creates the tables and the root directory, then reads everything.
fn load(db: &Database) -> Result<Loaded> {
    let tx = db.begin_write().map_err(storage)?;
    {
        tx.open_table(WORKERS).map_err(storage)?;
        tx.open_table(APPS).map_err(storage)?;
        tx.open_table(FUNCTIONS).map_err(storage)?;
        tx.open_table(EXTENTS).map_err(storage)?;
        tx.open_table(XATTRS).map_err(storage)?;
        let mut paths = tx.open_table(PATHS).map_err(storage)?;
        let mut files = tx.open_table(FILES).map_err(storage)?;
        let mut counters = tx.open_table(COUNTERS).map_err(storage)?;
        if paths.get("/").map_err(storage)?.is_none() {
            let id = counters
                .get("file")
                .map_err(storage)?
                .map_or(0, |v| v.value())
                + 1;
            counters.insert("file", id).map_err(storage)?;
            let now = now_nanos();
            let root = FileMeta {
                id,
                path: "/".into(),
                kind: FileKind::Dir,
                size: 0,
                mode: 0o755,
                owner: 0,
                uid: 0,
                gid: 0,
                ctime: now,
                mtime: now,
                atime: now,
                nlink: 1,
            };
            paths.insert("/", id).map_err(storage)?;
            files
                .insert(id, labios_label::encode(&StoredFile::of(&root)).as_slice())
                .map_err(storage)?;
        }
    }
    tx.commit().map_err(storage)?;

    let tx = db.begin_read().map_err(storage)?;
    let mut ns = Namespace::default();
    for e in tx
        .open_table(FILES)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (id, v) = e.map_err(storage)?;
        let stored = StoredFile::decode(v.value())?;
        let state = FileState::new(stored.into_meta());
        ns.nodes.insert(id.value(), Arc::new(Mutex::new(state)));
    }
    let mut named = HashSet::new();
    for e in tx
        .open_table(PATHS)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (p, id) = e.map_err(storage)?;
        if let Some(n) = ns.nodes.get(&id.value()) {
            let p = p.value().to_string();
            let mut st = n.lock();
            if st.meta.path != p {
                st.links.push(p.clone());
                st.meta.nlink += 1;
            }
            named.insert(id.value());
            ns.paths.insert(p, id.value());
        }
    }
    let nameless: Vec<FileId> = ns
        .nodes
        .keys()
        .copied()
        .filter(|id| !named.contains(id))
        .collect();
    count_subdirs(&ns);
    let mut current: Option<(FileId, &Arc<Node>)> = None;
    for e in tx
        .open_table(EXTENTS)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (k, v) = e.map_err(storage)?;
        let (file, offset) = k.value();
        if current.is_none_or(|(f, _)| f != file) {
            current = ns.nodes.get(&file).map(|n| (file, n));
        }
        if let Some((_, n)) = current {
            let e: Extent = decode(v.value())?;
            n.lock().extents.insert(offset, e);
        }
    }
    for e in tx
        .open_table(XATTRS)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (id, v) = e.map_err(storage)?;
        if let Some(n) = ns.nodes.get(&id.value()) {
            n.lock().xattrs = decode(v.value())?;
        }
    }
    let mut workers = BTreeMap::new();
    for e in tx
        .open_table(WORKERS)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (id, v) = e.map_err(storage)?;
        // Worker records are re-registered by each worker at start; one in
        // an older format is dropped rather than blocking the inventory.
        match decode(v.value()) {
            Ok(w) => {
                workers.insert(id.value(), w);
            }
            Err(e) => tracing::warn!("dropping worker {} record: {e}", id.value()),
        }
    }
    let mut apps = BTreeMap::new();
    for e in tx
        .open_table(APPS)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (id, v) = e.map_err(storage)?;
        apps.insert(id.value(), decode(v.value())?);
    }
    let mut functions = BTreeMap::new();
    for e in tx
        .open_table(FUNCTIONS)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (k, v) = e.map_err(storage)?;
        let (app, name) = k.value();
        functions.insert((app, name.to_string()), Bytes::copy_from_slice(v.value()));
    }
    let mut counters = HashMap::new();
    for e in tx
        .open_table(COUNTERS)
        .map_err(storage)?
        .iter()
        .map_err(storage)?
    {
        let (name, v) = e.map_err(storage)?;
        let limit = v.value();
        counters.insert(
            name.value().to_string(),
            Counter {
                next: limit + 1,
                limit,
            },
        );
    }
    Ok(Loaded {
        ns,
        workers,
        apps,
        functions,
        counters,
        nameless,
    })
}

impl RedbInventory {
    /// Swaps names `a` and `b` (of the nodes given, which differ) and,
    /// for directories, every name under them.
    fn exchange(
        &self,
        ns: &mut Namespace,
        (a, na): (&str, &Arc<Node>),
        (b, nb): (&str, &Arc<Node>),
    ) -> Result<()> {
        let (ka, ia) = {
            let st = na.lock();
            (st.meta.kind, st.meta.id)
        };
        let (kb, ib) = {
            let st = nb.lock();
            (st.meta.kind, st.meta.id)
        };
        let mut moves = ns.moves(a, b, ka, ia);
        moves.extend(ns.moves(b, a, kb, ib));
        let (now, mut ops) = (now_nanos(), Vec::new());
        ns.apply_moves(moves, &[ia, ib], now, &mut ops);
        let delta = i32::from(kb == FileKind::Dir) - i32::from(ka == FileKind::Dir);
        ns.touch_parent(a, now, delta, &mut ops);
        ns.touch_parent(b, now, -delta, &mut ops);
        self.log.append(&mut ops)
    }

    /// Opens (or creates) the inventory file at `path`, recovering whatever
    /// was synced before.
    pub fn open(path: &Path, cfg: InventoryConfig) -> Result<Self> {
        let db = Database::create(path)
            .map_err(|e| Error::Storage(format!("inventory {}: {e}", path.display())))?;
        let (mut wal, logged) = Wal::open(path)?;
        write_behind::replay(&db, logged)?;
        wal.empty(0)?;
        wal.empty(1)?;
        Self::with_db(db, Some(wal), cfg)
    }

    /// An inventory that lives in memory only (tests, benchmarks, tools).
    pub fn in_memory() -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .map_err(storage)?;
        Self::with_db(db, None, InventoryConfig::default())
    }

    fn with_db(db: Database, wal: Option<Wal>, cfg: InventoryConfig) -> Result<Self> {
        let mut loaded = load(&db)?;
        let db = Arc::new(db);
        let log = Arc::new(Log::new(wal));
        let writer = write_behind::spawn(db.clone(), log.clone())?;
        // Their bytes on the workers go with the workers' reconciliation
        // at start, which frees what no file of the inventory gives.
        let mut ops = Vec::new();
        for id in std::mem::take(&mut loaded.nameless) {
            let node = loaded.ns.nodes.get(&id).expect("listed above").clone();
            let mut st = node.lock();
            st.meta.nlink = 0;
            loaded.ns.drop_nameless(&mut st, &mut ops);
        }
        log.append(&mut ops)?;
        Ok(RedbInventory {
            db,
            ns: RwLock::new(loaded.ns),
            workers: RwLock::new(loaded.workers),
            stacks_asked: parking_lot::Mutex::new(BTreeMap::new()),
            apps: RwLock::new(loaded.apps),
            functions: RwLock::new(loaded.functions),
            counters: Mutex::new(loaded.counters),
            log,
            writer: Some(writer),
            labels: Mutex::new(Labels {
                statuses: HashMap::new(),
                watchers: HashMap::new(),
                since_sweep: 0,
                sweep_every: 1024,
            }),
            reclaim_after: cfg.reclaim_after,
            holds: Mutex::new(HashMap::new()),
        })
    }

    /// Whether a session holds `file` open (its lock is held).
    fn held(&self, file: FileId) -> bool {
        self.holds.lock().contains_key(&file)
    }

    /// The next value of a counter; reserves a block durably when the
    /// current one is used up.
    fn next_counter(&self, name: &str) -> Result<u64> {
        let mut counters = self.counters.lock();
        if !counters.contains_key(name) {
            counters.insert(name.to_string(), Counter { next: 1, limit: 0 });
        }
        let c = counters.get_mut(name).expect("just inserted");
        if c.next > c.limit {
            let limit = c.next + COUNTER_BLOCK - 1;
            let mut tx = self.db.begin_write().map_err(storage)?;
            tx.set_durability(Durability::Immediate);
            tx.open_table(COUNTERS)
                .map_err(storage)?
                .insert(name, limit)
                .map_err(storage)?;
            tx.commit().map_err(storage)?;
            c.limit = limit;
        }
        let v = c.next;
        c.next += 1;
        Ok(v)
    }

    /// Adds a new entry to the namespace.
    fn new_entry(
        &self,
        ns: &mut Namespace,
        path: &str,
        kind: FileKind,
        mode: u32,
        owner: Owner,
        ops: &mut Vec<Op>,
    ) -> Result<FileMeta> {
        let now = now_nanos();
        let meta = FileMeta {
            id: self.next_counter("file")?,
            path: path.to_string(),
            kind,
            size: 0,
            mode,
            owner: owner.app,
            uid: owner.uid,
            gid: owner.gid,
            ctime: now,
            mtime: now,
            atime: now,
            nlink: dir_links(kind),
        };
        ns.paths.insert(meta.path.clone(), meta.id);
        ns.nodes
            .insert(meta.id, Arc::new(Mutex::new(FileState::new(meta.clone()))));
        ops.push(Op::PutPath(meta.path.clone(), meta.id));
        ops.push(Op::file(&meta));
        ns.touch_parent(path, now, i32::from(kind == FileKind::Dir), ops);
        Ok(meta)
    }

    /// Creates the missing ancestors of `path` as directories (after
    /// `Namespace::check_parents` passed).
    fn make_parents(
        &self,
        ns: &mut Namespace,
        path: &str,
        owner: Owner,
        ops: &mut Vec<Op>,
    ) -> Result<()> {
        for (i, _) in path.match_indices('/').skip(1) {
            let dir = &path[..i];
            if !ns.paths.contains_key(dir) {
                self.new_entry(ns, dir, FileKind::Dir, 0o755, owner, ops)?;
            }
        }
        Ok(())
    }

    /// The node of a file, looked up without holding the namespace lock
    /// afterwards; check `live` once locked.
    fn data_node(&self, file: FileId) -> Result<Arc<Node>> {
        self.ns
            .read()
            .nodes
            .get(&file)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("file id {file}")))
    }

    /// Holds the writer between batches (tests): records logged meanwhile
    /// stay in the log, where a crash would lose them.
    #[cfg(test)]
    fn writer_gate(&self) -> MutexGuard<'_, ()> {
        self.log.gate.lock()
    }
}

impl Drop for RedbInventory {
    /// Clean shutdown: flushes the log and commits durably.
    fn drop(&mut self) {
        self.log.close();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
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
        owner: Owner,
    ) -> Result<FileMeta> {
        check_path(path)?;
        self.log.check()?;
        let mut ns = self.ns.write();
        if let Some(m) = ns.meta(path) {
            return if m.kind == kind {
                Ok(m)
            } else {
                Err(Error::AlreadyExists(format!(
                    "{path} exists as a {:?}",
                    m.kind
                )))
            };
        }
        ns.check_parents(path)?;
        let mut ops = Vec::new();
        let made = self
            .make_parents(&mut ns, path, owner, &mut ops)
            .and_then(|()| self.new_entry(&mut ns, path, kind, mode, owner, &mut ops))
            .inspect(|meta| {
                let hints = match kind {
                    FileKind::File => ns.inherited_hints(path),
                    _ => BTreeMap::new(),
                };
                if !hints.is_empty() {
                    let node = ns.nodes.get(&meta.id).expect("made above");
                    node.lock().xattrs = hints.clone();
                    // In the entry's log append: never a file without them.
                    ops.push(Op::PutXattrs(meta.id, hints));
                }
            });
        // Whatever was made is in memory: log it even on a late failure.
        self.log.append(&mut ops)?;
        made
    }

    async fn symlink(&self, path: &str, target: &str, owner: Owner) -> Result<FileMeta> {
        check_path(path)?;
        check_link_target(target)?;
        self.log.check()?;
        let mut ns = self.ns.write();
        if let Some(m) = ns.meta(path) {
            return Err(Error::AlreadyExists(format!(
                "{path} exists as a {:?}",
                m.kind
            )));
        }
        ns.check_parents(path)?;
        let mut ops = Vec::new();
        let made = self
            .make_parents(&mut ns, path, owner, &mut ops)
            .and_then(|()| self.new_entry(&mut ns, path, FileKind::Symlink, 0o777, owner, &mut ops))
            .map(|meta| {
                let node = ns.nodes.get(&meta.id).expect("made above").clone();
                let mut st = node.lock();
                st.meta.size = target.len() as u64;
                st.xattrs.insert(
                    LINK_TARGET.to_string(),
                    Bytes::copy_from_slice(target.as_bytes()),
                );
                // One log append with the entry: never a link without target.
                ops.push(Op::PutXattrs(meta.id, st.xattrs.clone()));
                ops.push(Op::file(&st.meta));
                st.meta.clone()
            });
        self.log.append(&mut ops)?;
        made
    }

    async fn lookup(&self, path: &str) -> Result<Option<FileMeta>> {
        check_path(path)?;
        Ok(self.ns.read().meta(path))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        let ns = self.ns.read();
        Ok(ns
            .paths
            .range::<str, _>(from_prefix(prefix))
            .take_while(|(p, _)| p.starts_with(prefix))
            .filter_map(|(p, id)| ns.nodes.get(id).map(|n| n.lock().meta_at(p)))
            .collect())
    }

    async fn remove(&self, path: &str) -> Result<(FileMeta, Vec<Extent>)> {
        check_path(path)?;
        if path == "/" {
            return Err(Error::InvalidArgument("cannot remove the root /".into()));
        }
        self.log.check()?;
        let mut ns = self.ns.write();
        let node = ns
            .node(path)
            .cloned()
            .ok_or_else(|| Error::NotFound(path.to_string()))?;
        let mut st = node.lock();
        if st.meta.kind == FileKind::Dir && ns.has_children(path) {
            return Err(Error::InvalidArgument(format!(
                "directory {path} is not empty"
            )));
        }
        let mut ops = Vec::new();
        let held = self.held(st.meta.id);
        let removed = ns.unname(&mut st, path, held, &mut ops);
        let subdirs = if removed.0.kind == FileKind::Dir {
            -1
        } else {
            0
        };
        ns.touch_parent(path, now_nanos(), subdirs, &mut ops);
        self.log.append(&mut ops)?;
        Ok(removed)
    }

    async fn link(&self, from: &str, to: &str) -> Result<FileMeta> {
        check_path(from)?;
        check_path(to)?;
        self.log.check()?;
        let mut ns = self.ns.write();
        let node = ns
            .node(from)
            .cloned()
            .ok_or_else(|| Error::NotFound(from.to_string()))?;
        if let Some(m) = ns.meta(to) {
            return Err(Error::AlreadyExists(format!(
                "{to} exists as a {:?}",
                m.kind
            )));
        }
        let mut st = node.lock();
        check_linkable(&st.meta, from)?;
        ns.check_parents(to)?;
        let mut ops = Vec::new();
        if let Err(e) = self.make_parents(&mut ns, to, st.meta.as_owner(), &mut ops) {
            self.log.append(&mut ops)?;
            return Err(e);
        }
        ns.paths.insert(to.to_string(), st.meta.id);
        let at = st
            .links
            .binary_search_by(|l| l.as_str().cmp(to))
            .unwrap_err();
        st.links.insert(at, to.to_string());
        st.meta.nlink += 1;
        let now = now_nanos();
        st.meta.ctime = now;
        st.check_links();
        ops.push(Op::PutPath(to.to_string(), st.meta.id));
        ops.push(Op::file(&st.meta));
        ns.touch_parent(to, now, 0, &mut ops);
        self.log.append(&mut ops)?;
        Ok(st.meta_at(to))
    }

    async fn rename_as(
        &self,
        from: &str,
        to: &str,
        how: RenameHow,
    ) -> Result<Option<(FileMeta, Vec<Extent>)>> {
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
        if how == RenameHow::Exchange && from.starts_with(&child_prefix(to)) {
            return Err(Error::InvalidArgument(format!(
                "cannot exchange {from} with a directory holding it ({to})"
            )));
        }
        self.log.check()?;
        let mut ns = self.ns.write();
        let src = ns
            .node(from)
            .cloned()
            .ok_or_else(|| Error::NotFound(from.to_string()))?;
        let dest = ns.node(to).cloned();
        match (how, &dest) {
            (RenameHow::NoReplace, Some(_)) => {
                return Err(Error::AlreadyExists(format!("{to} exists")))
            }
            (RenameHow::Exchange, None) => return Err(Error::NotFound(to.to_string())),
            (RenameHow::Exchange, Some(d)) => {
                if !Arc::ptr_eq(d, &src) {
                    self.exchange(&mut ns, (from, &src), (to, d))?;
                }
                return Ok(None);
            }
            _ => {}
        }
        if from == to {
            return Ok(None);
        }
        let kind = src.lock().meta.kind;
        if let Some(d) = &dest {
            if Arc::ptr_eq(d, &src) {
                // Two names of one file: POSIX leaves both in place.
                return Ok(None);
            }
            let dest_kind = d.lock().meta.kind;
            if dest_kind == FileKind::Dir || kind == FileKind::Dir {
                return Err(Error::AlreadyExists(format!(
                    "{to} exists as a {dest_kind:?}; only a file or symbolic link replaces one"
                )));
            }
        }
        ns.check_parents(to)?;

        // Checks done: only creating the parents can still fail (reserving
        // file ids), and it goes first so that a failure changes nothing
        // else.
        let mut ops = Vec::new();
        let owner = src.lock().meta.as_owner();
        if let Err(e) = self.make_parents(&mut ns, to, owner, &mut ops) {
            self.log.append(&mut ops)?;
            return Err(e);
        }
        let replaced = dest.and_then(|d| {
            let mut st = d.lock();
            // A file that keeps other names is not logged for here, so
            // its lock need not be held until the records are appended.
            let held = self.held(st.meta.id);
            let (meta, extents) = ns.unname(&mut st, to, held, &mut ops);
            (meta.nlink == 0).then_some((meta, extents))
        });
        let src_id = src.lock().meta.id;
        let moves = ns.moves(from, to, kind, src_id);
        let now = now_nanos();
        ns.apply_moves(moves, &[src_id], now, &mut ops);
        if parent(from) == parent(to) {
            ns.touch_parent(from, now, 0, &mut ops);
        } else {
            let moved = i32::from(kind == FileKind::Dir);
            ns.touch_parent(from, now, -moved, &mut ops);
            ns.touch_parent(to, now, moved, &mut ops);
        }
        self.log.append(&mut ops)?;
        Ok(replaced)
    }

    async fn set_size(&self, file: FileId, size: u64) -> Result<()> {
        self.log.check()?;
        let node = self.data_node(file)?;
        let mut st = node.lock();
        st.check_data()?;
        let mut ops = Vec::with_capacity(3);
        st.truncate(size, &mut ops);
        st.meta.size = size;
        st.meta.mtime = now_nanos();
        st.meta.ctime = st.meta.mtime;
        ops.push(Op::file(&st.meta));
        self.log.append(&mut ops)?;
        Ok(())
    }

    async fn set_attr(&self, file: FileId, attr: SetAttr) -> Result<FileMeta> {
        attr.check()?;
        self.log.check()?;
        let node = self.data_node(file)?;
        let mut st = node.lock();
        if !st.live {
            return Err(Error::NotFound(format!("file id {file}")));
        }
        attr.apply(&mut st.meta, now_nanos());
        let mut ops = vec![Op::file(&st.meta)];
        self.log.append(&mut ops)?;
        Ok(st.meta.clone())
    }

    async fn commit_extent(&self, file: FileId, extent: Extent) -> Result<()> {
        let end = extent.offset.checked_add(extent.len).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "extent at {} of {} bytes runs past the largest offset",
                extent.offset, extent.len
            ))
        })?;
        self.log.check()?;
        let node = self.data_node(file)?;
        let mut st = node.lock();
        st.check_data()?;
        let mut ops = Vec::with_capacity(4);
        if extent.len > 0 {
            st.merge(extent, end, &mut ops);
        }
        st.meta.size = st.meta.size.max(end);
        st.meta.mtime = now_nanos();
        st.meta.ctime = st.meta.mtime;
        ops.push(Op::file(&st.meta));
        self.log.append(&mut ops)?;
        Ok(())
    }

    async fn reserve_append(&self, file: FileId, len: u64) -> Result<u64> {
        self.log.check()?;
        let node = self.data_node(file)?;
        let mut st = node.lock();
        st.check_data()?;
        let offset = st.meta.size;
        let end = offset.checked_add(len).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "appending {len} bytes to {} bytes runs past the largest offset",
                offset
            ))
        })?;
        st.meta.size = end;
        st.meta.mtime = now_nanos();
        st.meta.ctime = st.meta.mtime;
        let mut ops = vec![Op::file(&st.meta)];
        self.log.append(&mut ops)?;
        Ok(offset)
    }

    async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let ns = self.ns.read();
        let node = ns
            .nodes
            .get(&file)
            .ok_or_else(|| Error::NotFound(format!("file id {file}")))?;
        let extents = node.lock().clipped(offset, len);
        Ok(extents)
    }

    /// Entry and extents under one hold of the namespace: a consistent
    /// pair, as no commit or truncation falls between them.
    async fn read_plan(&self, named: &Named, offset: u64, len: u64) -> Result<Option<ReadPlan>> {
        let ns = self.ns.read();
        let node = match named {
            Named::Path(path) => {
                check_path(path)?;
                ns.node(path).map(|n| (n, Some(path.as_str())))
            }
            Named::Id(id) => ns.nodes.get(id).map(|n| (n, None)),
        };
        let Some((node, path)) = node else {
            return Ok(None);
        };
        let st = node.lock();
        let meta = match path {
            Some(path) => st.meta_at(path),
            None => st.meta.clone(),
        };
        let extents = match read_len(&meta, offset, len) {
            Some(len) => st.clipped(offset, len),
            None => Vec::new(),
        };
        Ok(Some((meta, extents)))
    }

    async fn file(&self, file: FileId) -> Result<Option<FileMeta>> {
        Ok(self
            .ns
            .read()
            .nodes
            .get(&file)
            .map(|n| n.lock().meta.clone()))
    }

    async fn hold(&self, file: FileId, session: u64) -> Result<bool> {
        let node = self.data_node(file)?;
        let st = node.lock();
        if !st.live {
            return Err(Error::NotFound(format!("file id {file}")));
        }
        self.holds.lock().entry(file).or_default().insert(session);
        Ok(true)
    }

    async fn let_go(&self, file: FileId, session: u64) -> Result<Option<FileMeta>> {
        let Ok(node) = self.data_node(file) else {
            self.holds.lock().remove(&file);
            return Ok(None);
        };
        {
            // Most files keep their names: only the namespace's read lock.
            let st = node.lock();
            let mut holds = self.holds.lock();
            let last = match holds.get_mut(&file) {
                Some(sessions) => {
                    sessions.remove(&session);
                    sessions.is_empty()
                }
                None => true,
            };
            if last {
                holds.remove(&file);
            }
            if !(last && st.live && st.meta.nlink == 0) {
                return Ok(None);
            }
        }
        self.log.check()?;
        let mut ns = self.ns.write();
        let mut st = node.lock();
        // Held again (by id) meanwhile, or dropped by another let_go.
        if !st.live || self.held(file) {
            return Ok(None);
        }
        let mut ops = Vec::new();
        ns.drop_nameless(&mut st, &mut ops);
        self.log.append(&mut ops)?;
        Ok(Some(st.meta.clone()))
    }

    async fn let_go_session(&self, session: u64) -> Result<Vec<FileMeta>> {
        let files: Vec<FileId> = self
            .holds
            .lock()
            .iter()
            .filter(|(_, sessions)| sessions.contains(&session))
            .map(|(file, _)| *file)
            .collect();
        let mut gone = Vec::new();
        for file in files {
            gone.extend(self.let_go(file, session).await?);
        }
        Ok(gone)
    }

    async fn set_xattr_if(
        &self,
        file: FileId,
        name: &str,
        value: Option<Bytes>,
        cond: XattrCond,
    ) -> Result<()> {
        self.log.check()?;
        let node = self.data_node(file)?;
        let mut st = node.lock();
        if !st.live {
            return Err(Error::NotFound(format!("file id {file}")));
        }
        let others: usize = st
            .xattrs
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .map(|(n, v)| n.len() + v.len())
            .sum();
        check_xattr(file, name, value.as_deref(), others)?;
        cond.check(file, name, st.xattrs.contains_key(name), st.meta.size)?;
        let changed = match value {
            Some(v) => {
                st.xattrs.insert(name.to_string(), v);
                true
            }
            None => st.xattrs.remove(name).is_some(),
        };
        if changed {
            st.meta.ctime = now_nanos();
            let mut ops = vec![Op::PutXattrs(file, st.xattrs.clone()), Op::file(&st.meta)];
            self.log.append(&mut ops)?;
        }
        Ok(())
    }

    async fn xattrs(&self, file: FileId) -> Result<Vec<(String, Bytes)>> {
        let ns = self.ns.read();
        let node = ns
            .nodes
            .get(&file)
            .ok_or_else(|| Error::NotFound(format!("file id {file}")))?;
        let listed = node.lock().listed_xattrs();
        Ok(listed)
    }

    async fn xattrs_of(&self, files: &[FileId]) -> Result<Vec<Option<Vec<(String, Bytes)>>>> {
        crate::inventory::check_xattrs_batch(files)?;
        let ns = self.ns.read();
        Ok(files
            .iter()
            .map(|f| ns.nodes.get(f).map(|node| node.lock().listed_xattrs()))
            .collect())
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
        self.log.check()?;
        let mut workers = self.workers.write();
        workers.insert(status.spec.id, status.clone());
        self.log.append(&mut vec![Op::PutWorker(status)])?;
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerStatus>> {
        Ok(self.workers.read().values().cloned().collect())
    }

    /// Removing an unknown worker is not an error: decommissioning twice
    /// leaves the same state.
    async fn remove_worker(&self, id: WorkerId) -> Result<()> {
        self.log.check()?;
        let mut workers = self.workers.write();
        if workers.remove(&id).is_some() {
            self.log.append(&mut vec![Op::DelWorker(id)])?;
        }
        Ok(())
    }

    async fn ask_stack(&self, id: WorkerId, stack: Vec<String>) -> Result<()> {
        self.stacks_asked.lock().insert(id, stack);
        Ok(())
    }

    async fn take_stack(&self, id: WorkerId) -> Result<Option<Vec<String>>> {
        Ok(self.stacks_asked.lock().remove(&id))
    }

    async fn put_app(&self, app: AppRecord) -> Result<()> {
        self.log.check()?;
        let mut apps = self.apps.write();
        apps.insert(app.id, app.clone());
        self.log.append(&mut vec![Op::PutApp(app)])?;
        Ok(())
    }

    async fn app(&self, id: AppId) -> Result<Option<AppRecord>> {
        Ok(self.apps.read().get(&id).cloned())
    }

    async fn apps(&self) -> Result<Vec<AppRecord>> {
        Ok(self.apps.read().values().cloned().collect())
    }

    async fn put_function(&self, app: AppId, name: &str, module: Option<Bytes>) -> Result<()> {
        self.log.check()?;
        let mut functions = self.functions.write();
        let key = (app, name.to_string());
        match &module {
            Some(m) => functions.insert(key, m.clone()),
            None => functions.remove(&key),
        };
        self.log
            .append(&mut vec![Op::PutFunction(app, name.to_string(), module)])?;
        Ok(())
    }

    async fn function(&self, app: AppId, name: &str) -> Result<Option<Bytes>> {
        Ok(self.functions.read().get(&(app, name.to_string())).cloned())
    }

    async fn functions(&self, app: AppId) -> Result<Vec<String>> {
        Ok(self
            .functions
            .read()
            .range((app, String::new())..)
            .take_while(|((a, _), _)| *a == app)
            .map(|((_, n), _)| n.clone())
            .collect())
    }

    /// Served from memory; once per `COUNTER_BLOCK` values it waits for a
    /// durable commit reserving the next block.
    async fn next_id(&self, counter: &str) -> Result<u64> {
        self.next_counter(counter)
    }

    /// Waits (without blocking the async thread) for the writer to commit
    /// everything logged so far with `Durability::Immediate`.
    async fn sync(&self) -> Result<()> {
        let done = self.log.request_sync()?;
        done.await
            .map_err(|_| Error::Storage("inventory: writer thread gone".into()))?
    }
}

/// Refuses a hard link to a directory, or one past [`LINK_MAX`].
fn check_linkable(meta: &FileMeta, from: &str) -> Result<()> {
    if meta.kind == FileKind::Dir {
        return Err(Error::InvalidArgument(format!(
            "{from} is a directory: no hard link to a directory"
        )));
    }
    if meta.nlink >= LINK_MAX {
        return Err(Error::InvalidArgument(format!(
            "{from} has {} names: too many links",
            meta.nlink
        )));
    }
    Ok(())
}
