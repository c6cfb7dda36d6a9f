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
//! thread (`holds`, `len`, `used`) send no request. A change writes its
//! blocks, then the length, then deletes what it frees: a crash leaves
//! the old bytes or the new ones where the change wrote, and at worst
//! blocks nobody reads, which the next open deletes when their file has no
//! length object. A write is as durable as the service makes a completed
//! PUT (S3: durable; a `fs` mount: in the host's page cache until it
//! writes it back).
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
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;
use tokio::runtime::Handle;

/// One object per block: large enough that a 1 MiB label is 16 requests,
/// small enough that a freed range gives its space back.
pub const BLOCK: u64 = 64 << 10;

/// Requests of one change sent at once.
const IN_FLIGHT: usize = 16;

/// What is known of one file without asking the store.
#[derive(Debug, Default)]
struct Held {
    len: u64,
    blocks: BTreeSet<u64>,
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
}

impl ObjectBlocks {
    /// The blocks under `prefix` of the mount `name` reaches through `op`,
    /// listed; blocks of a file with no length object (a crash between a
    /// change's requests) are deleted. Must be called in a tokio runtime,
    /// outside an async task.
    pub fn open(name: &str, op: Operator, prefix: String) -> Result<ObjectBlocks> {
        let rt = Handle::try_current().map_err(|_| {
            Error::Storage(format!(
                "external backend in {name}: opened outside a tokio runtime"
            ))
        })?;
        let name = format!("external mount {name}");
        let listed = rt
            .block_on(async { op.list_with(&prefix).recursive(true).await })
            .map_err(|e| storage_error(&prefix, e))?;
        let mut files: HashMap<FileId, Held> = HashMap::new();
        let mut lengths = Vec::new();
        for entry in listed.iter().filter(|e| e.metadata().is_file()) {
            let Some((file, leaf)) = entry
                .path()
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split_once('/'))
            else {
                continue;
            };
            let Ok(file) = FileId::from_str_radix(file, 16) else {
                continue;
            };
            if leaf == "len" {
                lengths.push(file);
            } else if let Ok(index) = u64::from_str_radix(leaf, 16) {
                files.entry(file).or_default().blocks.insert(index);
            }
        }
        let this = ObjectBlocks {
            name,
            op,
            prefix,
            rt,
            files: Mutex::new(HashMap::new()),
        };
        for &file in &lengths {
            let bytes = this
                .rt
                .block_on(this.op.read(&this.len_key(file)))
                .map_err(|e| storage_error(&this.len_key(file), e))?
                .to_vec();
            let len = <[u8; 8]>::try_from(bytes.as_slice()).map_err(|_| {
                Error::Storage(format!(
                    "{}: {} holds {} bytes, not a length",
                    this.name,
                    this.len_key(file),
                    bytes.len()
                ))
            })?;
            files.entry(file).or_default().len = u64::from_le_bytes(len);
        }
        let orphans: Vec<FileId> = files
            .keys()
            .filter(|file| !lengths.contains(file))
            .copied()
            .collect();
        let keys = orphans
            .iter()
            .flat_map(|file| files[file].blocks.iter().map(|&i| this.block_key(*file, i)))
            .collect();
        this.rt.block_on(this.delete_all(keys))?;
        for file in orphans {
            files.remove(&file);
        }
        *this.files.lock() = files;
        Ok(this)
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
        let Change { put, drop, len } = change;
        let added: Vec<u64> = put.keys().copied().collect();
        let puts = put
            .into_iter()
            .map(|(i, block)| (self.block_key(file, i), Bytes::from(block)))
            .collect();
        self.rt.block_on(async {
            self.put_all(puts).await?;
            let was = self.files.lock().get(&file).map(|h| h.len);
            match len {
                Some(len) if was != Some(len) => {
                    let key = self.len_key(file);
                    self.op
                        .write(&key, len.to_le_bytes().to_vec())
                        .await
                        .map_err(|e| storage_error(&key, e))?;
                }
                Some(_) => {}
                // The length goes first: blocks left by a crash after it
                // belong to no file, and the next open deletes them.
                None => self.delete_all(vec![self.len_key(file)]).await?,
            }
            let dropped = drop.iter().map(|&i| self.block_key(file, i)).collect();
            self.delete_all(dropped).await
        })?;
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
        let m = self.mounts.get(mount)?;
        let prefix = format!("labios/workers/{}/", self.worker);
        let blocks = ObjectBlocks::open(mount, m.op.clone(), prefix)?;
        Ok(Arc::new(Blocked::over(blocks, capacity)?))
    }
}
