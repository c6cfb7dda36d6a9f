//! The `external` backend of a worker's stack (README "Worker I/O stacks"):
//! a worker whose own bytes live in a declared mount (a shared directory,
//! an S3 bucket), so that the layers of any stack (`checksum`, a codec,
//! `cache`, a write-back `tier` as a burst buffer) wrap object storage as
//! they wrap a local disk.
//!
//! Objects cannot be patched, so a LABIOS file is kept as blocks of
//! [`BLOCK`] bytes, one object each, written whole (the logic of ranges,
//! holes, overwrites and reclamation is `labios_stack`'s `Blocked`, shared
//! with `memory` and `kv`). Under the worker's prefix in the mount:
//!
//! - `{file:016x}/{index:016x}`: block `index` of `file`;
//! - `{file:016x}/len`: the file's local length, 8 bytes little-endian.
//!
//! Which blocks exist, and each file's length, are kept in memory (listed
//! once at open), so that the calls a worker makes outside a blocking
//! thread (`holds`, `len`, `used`) send no request. Every object is
//! written whole (S3 PUTs are; an `fs` mount writes to a file under
//! `labios/workers/ID/.writing` and renames it into place), so a crash
//! never tears one. A change is one request per block, not one atomic batch: it writes
//! its blocks, then deletes what it frees, then writes the file's length
//! (or, for a removal, deletes the length first). A crash or a failed
//! request part way leaves each block old or new, never a freed block
//! still counted; blocks past a file's length, or of a file with no length
//! object, are what a cut-short change leaves, and the next open deletes
//! them. After a failed request the file's blocks and length are listed
//! again, so what the worker counts is what the store holds. A write is as
//! durable as the service makes a finished PUT (S3: durable; a directory:
//! OpenDAL syncs each object before renaming it into place, the rename
//! itself is not synced).
//!
//! The blocks are under `labios/workers/ID/` of the mount, which no label
//! may name ([`crate::external::RESERVED`]): applications reach them only
//! through the inventory's checks. One mount must not serve the worker
//! stacks of two deployments, whose worker ids would meet.
//!
//! Calls block on the runtime the backend was opened in: a worker calls
//! its stack from blocking threads, never from an async task.

use crate::external::Mounts;
use crate::mapping::storage_error;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use labios_label::{Error, FileId, Result, WorkerId};
use labios_stack::backends::blocks::{Blocked, Blocks, Change};
use labios_stack::{Backend, Externals};
use opendal::Operator;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use tokio::runtime::Handle;

/// One object per block: large enough that a 1 MiB label is 16 requests,
/// small enough that a freed range gives its space back.
pub const BLOCK: u64 = 64 << 10;

/// Where, under a worker's prefix, a directory mount writes an object
/// before renaming it into place; what a crash leaves there goes at the
/// next open (its name is no file's, so listings pass it by).
const WRITING: &str = ".writing";

/// Requests of one change sent at once.
const IN_FLIGHT: usize = 16;

/// What is known of one file without asking the store.
#[derive(Debug, Default)]
struct Held {
    len: u64,
    blocks: BTreeSet<u64>,
}

/// One file as a listing finds it: its length object may be missing.
#[derive(Debug, Default)]
struct Listed {
    len: Option<u64>,
    blocks: BTreeSet<u64>,
}

impl From<Listed> for Held {
    fn from(l: Listed) -> Held {
        Held {
            len: l.len.unwrap_or(0),
            blocks: l.blocks,
        }
    }
}

/// A worker's blocks in one mount.
#[derive(Debug)]
pub struct ObjectBlocks {
    name: String,
    op: Operator,
    /// The worker's directory in the mount, ending in `/`.
    prefix: String,
    rt: Handle,
    files: Mutex<HashMap<FileId, Held>>,
    /// Files a failed change left in a state the index may not match,
    /// whose listing failed as well (see [`Self::known`]).
    unsure: Mutex<HashSet<FileId>>,
}

impl ObjectBlocks {
    /// The blocks under `prefix` of the mount `name` reaches through `op`,
    /// listed; blocks a cut-short change left (of a file with no length
    /// object, or past its length) are deleted. Must be called in a tokio
    /// runtime, outside an async task.
    pub fn open(name: &str, op: Operator, prefix: String) -> Result<ObjectBlocks> {
        let rt = Handle::try_current().map_err(|_| {
            Error::Storage(format!(
                "external backend in {name}: opened outside a tokio runtime"
            ))
        })?;
        let name = format!("external mount {name}");
        let this = ObjectBlocks {
            name,
            op,
            prefix,
            rt,
            files: Mutex::new(HashMap::new()),
            unsure: Mutex::new(HashSet::new()),
        };
        let writing = format!("{}{WRITING}/", this.prefix);
        let partial: Vec<String> = match this.rt.block_on(async { this.op.list(&writing).await }) {
            Ok(entries) => entries
                .iter()
                .filter(|e| e.metadata().is_file())
                .map(|e| e.path().to_string())
                .collect(),
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(storage_error(&writing, e)),
        };
        this.rt.block_on(this.delete_all(partial))?;
        let mut files = this.rt.block_on(this.list(&this.prefix))?;
        let mut stray = Vec::new();
        files.retain(|&file, listed| {
            stray.extend(this.strays(file, listed));
            listed.len.is_some()
        });
        this.rt.block_on(this.delete_all(stray))?;
        *this.files.lock() = files
            .into_iter()
            .map(|(file, held)| (file, held.into()))
            .collect();
        Ok(this)
    }

    /// The files under `dir` (the worker's prefix, or one file's
    /// directory) as the store holds them: each one's blocks, and its
    /// length when it has a length object.
    async fn list(&self, dir: &str) -> Result<HashMap<FileId, Listed>> {
        let listed = self
            .op
            .list_with(dir)
            .recursive(true)
            .await
            .map_err(|e| storage_error(dir, e))?;
        let mut files: HashMap<FileId, Listed> = HashMap::new();
        let mut lengths = Vec::new();
        for entry in listed.iter().filter(|e| e.metadata().is_file()) {
            let Some((file, leaf)) = entry
                .path()
                .strip_prefix(&self.prefix)
                .and_then(|rest| rest.split_once('/'))
            else {
                continue;
            };
            let Ok(file) = FileId::from_str_radix(file, 16) else {
                continue;
            };
            let held = files.entry(file).or_default();
            if leaf == "len" {
                lengths.push(file);
            } else if let Ok(index) = u64::from_str_radix(leaf, 16) {
                held.blocks.insert(index);
            }
        }
        let read: Vec<(FileId, u64)> = futures::stream::iter(lengths)
            .map(|file| async move { Ok::<_, Error>((file, self.read_len(file).await?)) })
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await?;
        for (file, len) in read {
            files.entry(file).or_default().len = Some(len);
        }
        Ok(files)
    }

    async fn read_len(&self, file: FileId) -> Result<u64> {
        let key = self.len_key(file);
        let bytes = self
            .op
            .read(&key)
            .await
            .map_err(|e| storage_error(&key, e))?
            .to_vec();
        let len = <[u8; 8]>::try_from(bytes.as_slice()).map_err(|_| {
            Error::Storage(format!(
                "{}: {key} holds {} bytes, not a length",
                self.name,
                bytes.len()
            ))
        })?;
        Ok(u64::from_le_bytes(len))
    }

    /// Takes out of `listed` (file `file`) what cut-short changes left:
    /// every block of a file with no length, or blocks past its length;
    /// their keys, to delete.
    fn strays(&self, file: FileId, listed: &mut Listed) -> Vec<String> {
        let end = listed.len;
        let past: Vec<u64> = listed
            .blocks
            .iter()
            .copied()
            .filter(|&i| end.is_none_or(|end| i * BLOCK >= end))
            .collect();
        past.into_iter()
            .map(|i| {
                listed.blocks.remove(&i);
                self.block_key(file, i)
            })
            .collect()
    }

    /// Lists `file` again after a change that failed part way, so that the
    /// index says what the store holds; what the change left past the
    /// file's length (or of a file it created) goes now, or at the next
    /// open if it cannot.
    /// If this listing fails too, the file is marked unsure, and
    /// [`Self::known`] lists it before its next read or change.
    fn reload(&self, file: FileId) -> Result<()> {
        let dir = format!("{}{file:016x}/", self.prefix);
        let mut listed = match self.rt.block_on(self.list(&dir)) {
            Ok(mut listed) => listed.remove(&file).unwrap_or_default(),
            Err(e) => {
                self.unsure.lock().insert(file);
                return Err(e);
            }
        };
        let stray = self.strays(file, &mut listed);
        {
            let mut files = self.files.lock();
            match listed.len {
                Some(_) => files.insert(file, listed.into()),
                None => files.remove(&file),
            };
        }
        self.unsure.lock().remove(&file);
        if let Err(e) = self.rt.block_on(self.delete_all(stray)) {
            tracing::warn!("{}: stray blocks of file {file:016x}: {e}", self.name);
        }
        Ok(())
    }

    /// Lists `file` first if a failed change left it unsure: what the
    /// index says of it is then what the store holds, or the call fails.
    /// Called only where a worker's blocking call is (read, a change).
    fn known(&self, file: FileId) -> Result<()> {
        if self.unsure.lock().contains(&file) {
            self.reload(file)?;
        }
        Ok(())
    }

    fn block_key(&self, file: FileId, index: u64) -> String {
        format!("{}{file:016x}/{index:016x}", self.prefix)
    }

    fn len_key(&self, file: FileId) -> String {
        format!("{}{file:016x}/len", self.prefix)
    }

    async fn delete_all(&self, keys: Vec<String>) -> Result<()> {
        futures::stream::iter(keys)
            .map(|key| async move {
                match self.op.delete(&key).await {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == opendal::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(storage_error(&key, e)),
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await
    }

    async fn put_all(&self, puts: Vec<(String, Bytes)>) -> Result<()> {
        futures::stream::iter(puts)
            .map(|(key, data)| async move {
                self.op
                    .write(&key, data)
                    .await
                    .map(drop)
                    .map_err(|e| storage_error(&key, e))
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await
    }
}

impl Blocks for ObjectBlocks {
    fn name(&self) -> &str {
        &self.name
    }

    fn read(&self, file: FileId, index: u64, within: usize, dst: &mut [u8]) -> Result<bool> {
        self.known(file)?;
        let held = self
            .files
            .lock()
            .get(&file)
            .is_some_and(|h| h.blocks.contains(&index));
        if !held {
            return Ok(false);
        }
        let key = self.block_key(file, index);
        let range = within as u64..(within + dst.len()) as u64;
        let mut data = self
            .rt
            .block_on(async { self.op.read_with(&key).range(range).await })
            .map_err(|e| match e.kind() {
                opendal::ErrorKind::NotFound => Error::Storage(format!(
                    "{}: block {key} of file {file:016x} is missing",
                    self.name
                )),
                _ => storage_error(&key, e),
            })?;
        if data.len() != dst.len() {
            return Err(Error::Storage(format!(
                "{}: block {key} gave {} bytes at {within}, not {}",
                self.name,
                data.len(),
                dst.len()
            )));
        }
        bytes::Buf::copy_to_slice(&mut data, dst);
        Ok(true)
    }

    fn held(&self, file: FileId, range: Range<u64>) -> Result<Vec<u64>> {
        self.known(file)?;
        Ok(self
            .files
            .lock()
            .get(&file)
            .map(|h| h.blocks.range(range).copied().collect())
            .unwrap_or_default())
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        Ok(self.files.lock().get(&file).map(|h| h.len))
    }

    fn apply(&self, file: FileId, change: Change, _sync: bool) -> Result<()> {
        self.known(file)?;
        let Change { put, drop, len } = change;
        let added: Vec<u64> = put.keys().copied().collect();
        let puts = put
            .into_iter()
            .map(|(i, block)| (self.block_key(file, i), Bytes::from(block)))
            .collect();
        let dropped: Vec<String> = drop.iter().map(|&i| self.block_key(file, i)).collect();
        let was = self.files.lock().get(&file).map(|h| h.len);
        let sent = self.rt.block_on(async {
            self.put_all(puts).await?;
            match len {
                // Freed blocks go before the length that no longer covers
                // them: a crash between leaves zeros, never a stray block.
                Some(len) => {
                    self.delete_all(dropped).await?;
                    if was != Some(len) {
                        let key = self.len_key(file);
                        self.op
                            .write(&key, len.to_le_bytes().to_vec())
                            .await
                            .map_err(|e| storage_error(&key, e))?;
                    }
                    Ok(())
                }
                // The length goes first: blocks left by a crash after it
                // belong to no file, and the next open deletes them.
                None => {
                    self.delete_all(vec![self.len_key(file)]).await?;
                    self.delete_all(dropped).await
                }
            }
        });
        if let Err(e) = sent {
            if let Err(listing) = self.reload(file) {
                tracing::warn!(
                    "{}: file {file:016x} could not be listed again after a failed change: {listing}",
                    self.name
                );
            }
            return Err(e);
        }
        let mut files = self.files.lock();
        match len {
            Some(len) => {
                let held = files.entry(file).or_default();
                held.len = len;
                held.blocks.extend(added);
                for i in &drop {
                    held.blocks.remove(i);
                }
            }
            None => {
                files.remove(&file);
            }
        }
        Ok(())
    }

    fn files(&self) -> Result<Vec<FileId>> {
        Ok(self.files.lock().keys().copied().collect())
    }

    /// Every change is stored when `apply` returns.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn count(&self) -> Result<u64> {
        Ok(self
            .files
            .lock()
            .values()
            .map(|h| h.blocks.len() as u64)
            .sum())
    }

    fn block_size(&self) -> u64 {
        BLOCK
    }

    /// One request per block: a failed change may have changed some.
    fn atomic(&self) -> bool {
        false
    }

    fn count_of(&self, file: FileId) -> Result<u64> {
        Ok(self
            .files
            .lock()
            .get(&file)
            .map_or(0, |h| h.blocks.len() as u64))
    }
}

/// A worker's mounts, as the stack's registry opens an `external:MOUNT`
/// backend: each worker keeps its blocks under its own prefix,
/// `labios/workers/ID/`, so workers sharing a mount never meet.
pub struct WorkerMounts {
    pub mounts: Mounts,
    pub worker: WorkerId,
}

impl Externals for WorkerMounts {
    fn open(&self, mount: &str, capacity: u64) -> Result<Arc<dyn Backend>> {
        let config = &self.mounts.get(mount)?.config;
        let prefix = format!("{}/workers/{}/", crate::external::RESERVED, self.worker);
        let op = crate::external::atomic_operator(config, &format!("{prefix}{WRITING}"))?;
        let blocks = ObjectBlocks::open(mount, op, prefix)?;
        Ok(Arc::new(Blocked::over(blocks, capacity)?))
    }
}
