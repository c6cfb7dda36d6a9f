//! The `memory` backend: a RAM tier that is one. A worker's bytes live in
//! this process's memory in blocks (see [`super::blocks`]), and never more
//! than the worker's capacity.
//!
//! Nothing here survives the process: a crash or a restart of the worker
//! loses every byte it held, acknowledged or not, and `flush` cannot make
//! them durable. A worker on `memory` alone is a cache tier; its restart
//! finds no file (`files` is empty), and the inventory's extents on it read
//! as errors until they are overwritten.

use super::blocks::{Blocked, Blocks, Change};
use labios_label::{FileId, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

pub use super::blocks::BLOCK;

/// The bytes of one LABIOS file held here.
#[derive(Debug, Default)]
struct MemFile {
    /// Written blocks by index; a missing block is a hole.
    blocks: BTreeMap<u64, Box<[u8]>>,
    /// One past the last byte written (the length a local file would have).
    len: u64,
}

/// Every file's blocks, in this process.
#[derive(Debug, Default)]
pub struct Memory(Mutex<HashMap<FileId, MemFile>>);

/// The `memory` backend.
pub type MemoryBackend = Blocked<Memory>;

impl MemoryBackend {
    /// An empty RAM tier holding at most `capacity` bytes.
    pub fn new(capacity: u64) -> MemoryBackend {
        Blocked::over(Memory::default(), capacity).expect("counting memory blocks cannot fail")
    }
}

impl Blocks for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    fn read(&self, file: FileId, index: u64, within: usize, dst: &mut [u8]) -> Result<bool> {
        let files = self.0.lock();
        let block = files.get(&file).and_then(|f| f.blocks.get(&index));
        if let Some(block) = block {
            dst.copy_from_slice(&block[within..within + dst.len()]);
        }
        Ok(block.is_some())
    }

    fn held(&self, file: FileId, range: Range<u64>) -> Result<Vec<u64>> {
        let files = self.0.lock();
        Ok(files
            .get(&file)
            .map(|f| f.blocks.range(range).map(|(i, _)| *i).collect())
            .unwrap_or_default())
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        Ok(self.0.lock().get(&file).map(|f| f.len))
    }

    fn apply(&self, file: FileId, change: Change, _sync: bool) -> Result<()> {
        let mut files = self.0.lock();
        let Some(len) = change.len else {
            files.remove(&file);
            return Ok(());
        };
        let f = files.entry(file).or_default();
        for i in change.drop {
            f.blocks.remove(&i);
        }
        f.blocks.extend(change.put);
        f.len = len;
        Ok(())
    }

    fn files(&self) -> Result<Vec<FileId>> {
        Ok(self.0.lock().keys().copied().collect())
    }

    /// Nothing to make durable: memory is lost with the process whatever
    /// is done (see the module's text).
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn count(&self) -> Result<u64> {
        Ok(self.0.lock().values().map(|f| f.blocks.len() as u64).sum())
    }
}
