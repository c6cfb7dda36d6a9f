//! The write-behind log of [`super::RedbInventory`]: mutations append change
//! records here after updating memory, and one background thread drains
//! them into redb, many records per write transaction.
//!
//! Ordering: a record is appended while its writer still holds the lock of
//! the state it describes (the file's, the namespace's, ...), so records of
//! one key reach the log in the order memory saw them. The records of one
//! mutation are appended in one critical section and the writer takes the
//! whole log at once, so a mutation is never split across transactions:
//! whatever redb holds is the state after some prefix of the log.
//!
//! Write-ahead: an inventory kept in a file also writes every mutation's
//! records to a write-ahead file ([`Wal`]) before the mutation returns
//! (write(2), no fsync). A process crash keeps the page cache, so `kill -9`
//! loses no change anyone was told about; opening replays what redb had not
//! committed yet. A machine crash may lose what was written since the last
//! `sync` (which commits `Immediate`).

use super::{storage, APPS, EXTENTS, FILES, FUNCTIONS, PATHS, WORKERS, XATTRS};
use crate::inventory::{AppRecord, Extent, FileKind, FileMeta};
use bytes::Bytes;
use labios_label::{encode, AppId, Error, FileId, Result, WorkerId, WorkerStatus};
use parking_lot::{Condvar, Mutex};
use redb::{Database, Durability, WriteTransaction};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Records the log holds at most; appends beyond wait for the writer
/// (backpressure), which bounds the memory the log takes.
pub(super) const LOG_CAPACITY: usize = 32 * 1024;
/// The writer commits as soon as this many records are waiting...
const FLUSH_AT: usize = 2048;
/// ...or this long after the first one arrived.
const FLUSH_EVERY: Duration = Duration::from_millis(5);
/// Background batches are committed `Eventual` (on Linux redb 2 then calls
/// fdatasync as for `Immediate`). Measured faster than `Durability::None`
/// with fewer, larger files (non-durable commits free no pages until a
/// durable one follows). Nothing waits for a batch: the write-ahead file
/// already holds its records.
const BATCH_DURABILITY: Durability = Durability::Eventual;

/// One change to the persisted state. Applying a log's records in order to
/// the tables gives the in-memory state of the moment; applying them again
/// changes nothing (each sets keys to values), which makes a replay of the
/// write-ahead file safe whatever redb already holds of it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Op {
    /// A record written before files had a POSIX owner: read from an older
    /// write-ahead file, never written.
    PutFileWithoutOwner(FileWithoutOwner),
    DelFile(FileId),
    PutPath(String, FileId),
    DelPath(String),
    PutExtent(FileId, Extent),
    DelExtent(FileId, u64),
    /// Deletes every extent of the file starting at or after the offset.
    CutExtents(FileId, u64),
    PutWorker(WorkerStatus),
    DelWorker(WorkerId),
    PutApp(AppRecord),
    PutFunction(AppId, String, Option<Bytes>),
    /// All the file's extended attributes; none deletes its row.
    PutXattrs(FileId, BTreeMap<String, Bytes>),
    PutFile(StoredFile),
}

/// A file's record as persisted (the files table, the write-ahead file):
/// its metadata without the link count, which loading counts from the
/// paths naming the file. Inventories written before hard links existed
/// open unchanged, and so do those written before files had a POSIX owner
/// ([`FileWithoutOwner`]).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct StoredFile {
    id: FileId,
    path: String,
    kind: FileKind,
    size: u64,
    mode: u32,
    owner: AppId,
    ctime: u64,
    mtime: u64,
    atime: u64,
    uid: u32,
    gid: u32,
}

/// The record of earlier versions, whose files all belonged to root.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct FileWithoutOwner {
    id: FileId,
    path: String,
    kind: FileKind,
    size: u64,
    mode: u32,
    owner: AppId,
    ctime: u64,
    mtime: u64,
    atime: u64,
}

impl From<FileWithoutOwner> for StoredFile {
    fn from(f: FileWithoutOwner) -> StoredFile {
        StoredFile {
            id: f.id,
            path: f.path,
            kind: f.kind,
            size: f.size,
            mode: f.mode,
            owner: f.owner,
            ctime: f.ctime,
            mtime: f.mtime,
            atime: f.atime,
            uid: 0,
            gid: 0,
        }
    }
}

impl StoredFile {
    pub(super) fn of(m: &FileMeta) -> StoredFile {
        StoredFile {
            id: m.id,
            path: m.path.clone(),
            kind: m.kind,
            size: m.size,
            mode: m.mode,
            owner: m.owner,
            ctime: m.ctime,
            mtime: m.mtime,
            atime: m.atime,
            uid: m.uid,
            gid: m.gid,
        }
    }

    /// A row of the files table, in this version's layout or the earlier
    /// one (which is shorter, so that neither decodes as the other).
    pub(super) fn decode(bytes: &[u8]) -> Result<StoredFile> {
        labios_label::decode::<StoredFile>(bytes).or_else(|e| {
            labios_label::decode::<FileWithoutOwner>(bytes)
                .map(StoredFile::from)
                .map_err(|_| e)
        })
    }

    /// The metadata of a file with one name; loading adds the others.
    pub(super) fn into_meta(self) -> FileMeta {
        FileMeta {
            id: self.id,
            path: self.path,
            kind: self.kind,
            size: self.size,
            mode: self.mode,
            owner: self.owner,
            uid: self.uid,
            gid: self.gid,
            ctime: self.ctime,
            mtime: self.mtime,
            atime: self.atime,
            nlink: 1,
        }
    }
}

impl Op {
    pub(super) fn file(m: &FileMeta) -> Op {
        Op::PutFile(StoredFile::of(m))
    }
}

type SyncReply = oneshot::Sender<Result<()>>;

struct State {
    ops: Vec<Op>,
    /// Callers of `sync` waiting for everything logged before them to be
    /// durable.
    syncs: Vec<SyncReply>,
    closed: bool,
    /// Set when a commit failed: the log then refuses new mutations.
    failed: Option<Error>,
    /// None for an inventory in memory.
    wal: Option<Wal>,
}

/// The write-ahead file: two files used in turn. Appends go to the current
/// one; when the writer takes the log it switches appends to the other,
/// and once its batch is committed it empties the one it took, which held
/// exactly that batch's records.
pub(super) struct Wal {
    files: [File; 2],
    current: usize,
    /// Orders the records of both files for a replay.
    seq: u64,
    buf: Vec<u8>,
}

/// Bytes of a record's header: payload length, then its crc32.
const HEADER: usize = 8;

fn wal_paths(db: &Path) -> [PathBuf; 2] {
    [0, 1].map(|i| {
        let mut p = db.as_os_str().to_owned();
        p.push(format!(".wal{i}"));
        PathBuf::from(p)
    })
}

impl Wal {
    /// Opens the write-ahead files of the inventory at `db` and returns
    /// their records in the order they were logged. A record that does not
    /// check out (torn by a machine crash) ends its file: nothing after it
    /// was acknowledged before it was.
    pub(super) fn open(db: &Path) -> Result<(Wal, Vec<Op>)> {
        let mut records: Vec<(u64, Vec<Op>)> = Vec::new();
        let files = wal_paths(db).map(|path| {
            std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&path)
                .map_err(|e| Error::Storage(format!("inventory log {}: {e}", path.display())))
        });
        let [a, b] = files;
        let mut files = [a?, b?];
        for f in &mut files {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).map_err(storage)?;
            let mut at = 0;
            while let Some(header) = bytes.get(at..at + HEADER) {
                let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
                let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
                let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
                    break;
                };
                if crc32fast::hash(payload) != crc {
                    break;
                }
                match labios_label::decode::<(u64, Vec<Op>)>(payload) {
                    Ok(r) => records.push(r),
                    Err(_) => break,
                }
                at += HEADER + len;
            }
        }
        records.sort_by_key(|r| r.0);
        let ops = records.into_iter().flat_map(|r| r.1).collect();
        Ok((
            Wal {
                files,
                current: 0,
                seq: 0,
                buf: Vec::new(),
            },
            ops,
        ))
    }

    /// Appends one mutation's records to the current file.
    fn write(&mut self, ops: &[Op]) -> std::io::Result<()> {
        self.seq += 1;
        let payload = encode(&(self.seq, ops));
        let len = u32::try_from(payload.len()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "record over 4 GiB")
        })?;
        self.buf.clear();
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf
            .extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        self.buf.extend_from_slice(&payload);
        self.files[self.current].write_all(&self.buf)
    }

    /// Empties file `i` (its records are committed).
    pub(super) fn empty(&mut self, i: usize) -> Result<()> {
        self.files[i].set_len(0).map_err(storage)
    }
}

pub(super) struct Log {
    state: Mutex<State>,
    /// Wakes the writer: first record, `FLUSH_AT` records, sync or close.
    wake: Condvar,
    /// Wakes appenders waiting for room.
    room: Condvar,
    /// Held by the writer while it applies a batch; tests hold it to keep
    /// records in the log only (as a crash would find them).
    pub(super) gate: Mutex<()>,
}

impl Log {
    pub(super) fn new(wal: Option<Wal>) -> Self {
        Log {
            state: Mutex::new(State {
                ops: Vec::new(),
                syncs: Vec::new(),
                closed: false,
                failed: None,
                wal,
            }),
            wake: Condvar::new(),
            room: Condvar::new(),
            gate: Mutex::new(()),
        }
    }

    /// Fails if an earlier commit failed: memory would run ahead of a disk
    /// that no longer follows.
    pub(super) fn check(&self) -> Result<()> {
        match &self.state.lock().failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Appends (and drains) the records of one mutation, waiting while the
    /// log is full. Fails if they cannot be written ahead: the change is
    /// then in memory only, and the log refuses further mutations.
    pub(super) fn append(&self, ops: &mut Vec<Op>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut s = self.state.lock();
        while s.ops.len() + ops.len() > LOG_CAPACITY
            && !s.ops.is_empty()
            && s.failed.is_none()
            && !s.closed
        {
            self.room.wait(&mut s);
        }
        if let Some(e) = &s.failed {
            ops.clear();
            return Err(e.clone());
        }
        if let Some(wal) = &mut s.wal {
            if let Err(e) = wal.write(ops) {
                let e = Error::Storage(format!("inventory log: {e}"));
                s.failed = Some(e.clone());
                ops.clear();
                return Err(e);
            }
        }
        let before = s.ops.len();
        s.ops.append(ops);
        if before == 0 || (before < FLUSH_AT && s.ops.len() >= FLUSH_AT) {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Asks the writer to make everything logged so far durable.
    pub(super) fn request_sync(&self) -> Result<oneshot::Receiver<Result<()>>> {
        let (tx, rx) = oneshot::channel();
        let mut s = self.state.lock();
        if let Some(e) = &s.failed {
            return Err(e.clone());
        }
        if s.closed {
            return Err(Error::Storage("inventory: closed".into()));
        }
        s.syncs.push(tx);
        self.wake.notify_one();
        Ok(rx)
    }

    /// Makes the writer flush what is left, commit durably and exit.
    pub(super) fn close(&self) {
        self.state.lock().closed = true;
        self.wake.notify_one();
        self.room.notify_all();
    }

    /// Waits for work and takes it: the records (swapped with `spare`, an
    /// empty buffer), the sync requests, whether the log is closed, and the
    /// write-ahead file holding the records taken (appends go to the other
    /// one from now on).
    fn take(&self, spare: &mut Vec<Op>) -> (Vec<SyncReply>, bool, usize) {
        let mut s = self.state.lock();
        let mut deadline = None;
        loop {
            if s.closed || !s.syncs.is_empty() || s.ops.len() >= FLUSH_AT {
                break;
            }
            if s.ops.is_empty() {
                deadline = None;
                self.wake.wait(&mut s);
                continue;
            }
            let d = *deadline.get_or_insert_with(|| Instant::now() + FLUSH_EVERY);
            if self.wake.wait_until(&mut s, d).timed_out() {
                break;
            }
        }
        std::mem::swap(&mut s.ops, spare);
        let syncs = std::mem::take(&mut s.syncs);
        let closed = s.closed;
        let taken = match &mut s.wal {
            Some(w) => {
                w.current ^= 1;
                w.current ^ 1
            }
            None => 0,
        };
        drop(s);
        self.room.notify_all();
        (syncs, closed, taken)
    }

    /// Empties write-ahead file `i`, whose records are all committed (both
    /// files when the log is closed: nothing is appended after).
    fn committed(&self, i: usize, closed: bool) -> Result<()> {
        let mut s = self.state.lock();
        let Some(wal) = &mut s.wal else {
            return Ok(());
        };
        wal.empty(i)?;
        if closed {
            wal.empty(i ^ 1)?;
        }
        Ok(())
    }

    fn fail(&self, e: Error) {
        let mut s = self.state.lock();
        s.failed.get_or_insert(e);
        s.ops.clear();
        drop(s);
        self.room.notify_all();
    }

    fn failure(&self) -> Option<Error> {
        self.state.lock().failed.clone()
    }
}

/// Starts the writer thread; it exits after `Log::close`, having committed
/// everything durably.
pub(super) fn spawn(db: Arc<Database>, log: Arc<Log>) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("inventory-writer".into())
        .spawn(move || {
            let run = std::panic::AssertUnwindSafe(|| writer(&db, &log));
            if std::panic::catch_unwind(run).is_err() {
                log.fail(Error::Storage("inventory: writer thread panicked".into()));
            }
        })
        .map_err(storage)
}

fn writer(db: &Database, log: &Log) {
    let mut ops = Vec::new();
    let mut pending = Pending::default();
    loop {
        let (syncs, closed, taken) = log.take(&mut ops);
        let durable = closed || !syncs.is_empty();
        let result = match log.failure() {
            Some(e) => {
                ops.clear();
                Err(e)
            }
            None if ops.is_empty() && !durable => Ok(()),
            None => {
                let _gate = log.gate.lock();
                let durability = if durable {
                    Durability::Immediate
                } else {
                    BATCH_DURABILITY
                };
                for op in ops.drain(..) {
                    pending.add(op);
                }
                let r = pending
                    .commit(db, durability)
                    .and_then(|()| log.committed(taken, closed));
                if let Err(e) = &r {
                    log.fail(e.clone());
                }
                r
            }
        };
        for s in syncs {
            let _ = s.send(result.clone());
        }
        if closed {
            return;
        }
    }
}

/// Commits `ops` (a write-ahead file's records, in order) durably: what an
/// inventory opening after a crash does before it reads the tables.
pub(super) fn replay(db: &Database, ops: Vec<Op>) -> Result<()> {
    if ops.is_empty() {
        return Ok(());
    }
    let mut pending = Pending::default();
    for op in ops {
        pending.add(op);
    }
    pending.commit(db, Durability::Immediate)
}

/// One batch of records, coalesced by key (the last change of a key wins,
/// which is what applying them in order would leave) and applied in key
/// order.
#[derive(Default)]
struct Pending {
    files: BTreeMap<FileId, Option<StoredFile>>,
    paths: BTreeMap<String, Option<FileId>>,
    /// Applied before `extents`: `add` drops the pending extents a cut
    /// covers, so what is left in `extents` came after the cut.
    cuts: Vec<(FileId, u64)>,
    extents: BTreeMap<(FileId, u64), Option<Extent>>,
    workers: BTreeMap<WorkerId, Option<WorkerStatus>>,
    apps: BTreeMap<AppId, Option<AppRecord>>,
    functions: BTreeMap<(AppId, String), Option<Bytes>>,
    xattrs: BTreeMap<FileId, BTreeMap<String, Bytes>>,
}

impl Pending {
    fn add(&mut self, op: Op) {
        match op {
            Op::PutFileWithoutOwner(m) => self.add(Op::PutFile(m.into())),
            Op::PutFile(m) => {
                self.files.insert(m.id, Some(m));
            }
            Op::DelFile(id) => {
                self.files.insert(id, None);
            }
            Op::PutPath(p, id) => {
                self.paths.insert(p, Some(id));
            }
            Op::DelPath(p) => {
                self.paths.insert(p, None);
            }
            Op::PutExtent(f, e) => {
                self.extents.insert((f, e.offset), Some(e));
            }
            Op::DelExtent(f, off) => {
                self.extents.insert((f, off), None);
            }
            Op::CutExtents(f, from) => {
                let doomed: Vec<(FileId, u64)> = self
                    .extents
                    .range((f, from)..=(f, u64::MAX))
                    .map(|(k, _)| *k)
                    .collect();
                for k in doomed {
                    self.extents.remove(&k);
                }
                self.cuts.push((f, from));
            }
            Op::PutWorker(w) => {
                self.workers.insert(w.spec.id, Some(w));
            }
            Op::DelWorker(id) => {
                self.workers.insert(id, None);
            }
            Op::PutApp(a) => {
                self.apps.insert(a.id, Some(a));
            }
            Op::PutFunction(app, name, module) => {
                self.functions.insert((app, name), module);
            }
            Op::PutXattrs(f, attrs) => {
                self.xattrs.insert(f, attrs);
            }
        }
    }

    /// Writes the batch in one transaction and empties it.
    fn commit(&mut self, db: &Database, durability: Durability) -> Result<()> {
        let mut tx = db.begin_write().map_err(storage)?;
        tx.set_durability(durability);
        let written = self.write(&tx);
        self.clear();
        match written {
            Ok(()) => tx.commit().map_err(storage),
            Err(e) => {
                let _ = tx.abort();
                Err(e)
            }
        }
    }

    fn clear(&mut self) {
        self.files.clear();
        self.paths.clear();
        self.cuts.clear();
        self.extents.clear();
        self.workers.clear();
        self.apps.clear();
        self.functions.clear();
        self.xattrs.clear();
    }

    fn write(&mut self, tx: &WriteTransaction) -> Result<()> {
        let mut t = tx.open_table(FILES).map_err(storage)?;
        for (id, m) in &self.files {
            match m {
                Some(m) => t.insert(*id, encode(m).as_slice()).map(drop),
                None => t.remove(*id).map(drop),
            }
            .map_err(storage)?;
        }
        drop(t);
        let mut t = tx.open_table(PATHS).map_err(storage)?;
        for (p, id) in &self.paths {
            match id {
                Some(id) => t.insert(p.as_str(), *id).map(drop),
                None => t.remove(p.as_str()).map(drop),
            }
            .map_err(storage)?;
        }
        drop(t);
        let mut t = tx.open_table(EXTENTS).map_err(storage)?;
        for &(f, from) in &self.cuts {
            t.retain_in((f, from)..=(f, u64::MAX), |_, _| false)
                .map_err(storage)?;
        }
        for (k, e) in &self.extents {
            match e {
                Some(e) => t.insert(*k, encode(e).as_slice()).map(drop),
                None => t.remove(*k).map(drop),
            }
            .map_err(storage)?;
        }
        drop(t);
        let mut t = tx.open_table(WORKERS).map_err(storage)?;
        for (id, w) in &self.workers {
            match w {
                Some(w) => t.insert(*id, encode(w).as_slice()).map(drop),
                None => t.remove(*id).map(drop),
            }
            .map_err(storage)?;
        }
        drop(t);
        let mut t = tx.open_table(APPS).map_err(storage)?;
        for (id, a) in &self.apps {
            match a {
                Some(a) => t.insert(*id, encode(a).as_slice()).map(drop),
                None => t.remove(*id).map(drop),
            }
            .map_err(storage)?;
        }
        drop(t);
        let mut t = tx.open_table(FUNCTIONS).map_err(storage)?;
        for ((app, name), m) in &self.functions {
            match m {
                Some(m) => t.insert((*app, name.as_str()), m.as_ref()).map(drop),
                None => t.remove((*app, name.as_str())).map(drop),
            }
            .map_err(storage)?;
        }
        drop(t);
        let mut t = tx.open_table(XATTRS).map_err(storage)?;
        for (id, attrs) in &self.xattrs {
            if attrs.is_empty() {
                t.remove(*id).map(drop)
            } else {
                t.insert(*id, encode(attrs).as_slice()).map(drop)
            }
            .map_err(storage)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod owner_tests {
    use super::*;

    #[test]
    fn a_record_from_before_owners_reads_as_roots_and_a_new_one_keeps_its_owner() {
        let old = FileWithoutOwner {
            id: 4,
            path: "/old".into(),
            kind: FileKind::File,
            size: 9,
            mode: 0o640,
            owner: 2,
            ctime: 1,
            mtime: 2,
            atime: 3,
        };
        let m = StoredFile::decode(&encode(&old)).unwrap().into_meta();
        assert_eq!((m.id, m.size, m.mode, m.owner), (4, 9, 0o640, 2));
        assert_eq!((m.uid, m.gid, m.ctime, m.mtime, m.atime), (0, 0, 1, 2, 3));
        let mut new = m.clone();
        (new.uid, new.gid) = (1000, 100);
        let back = StoredFile::decode(&encode(&StoredFile::of(&new)))
            .unwrap()
            .into_meta();
        assert_eq!(back, new);
        // A write-ahead record of the earlier layout replays as a file.
        let mut p = Pending::default();
        p.add(Op::PutFileWithoutOwner(old));
        assert_eq!(p.files[&4].as_ref().map(|f| f.uid), Some(0));
    }
}
