//! The `memory` backend: a RAM tier that is one. A worker's bytes live in
//! this process's memory in blocks of [`BLOCK`] bytes, allocated as they
//! are first written (holes take nothing and read as zeros), and never more
//! than the worker's capacity.
//!
//! Nothing here survives the process: a crash or a restart of the worker
//! loses every byte it held, acknowledged or not, and `flush` cannot make
//! them durable. A worker on `memory` alone is a cache tier; its restart
//! finds no file (`files` is empty), and the inventory's extents on it read
//! as errors until they are overwritten.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

/// Allocation unit: a page, as a file system allocates.
pub const BLOCK: u64 = 4096;

/// The bytes of one LABIOS file held here.
#[derive(Debug, Default)]
struct MemFile {
    /// Written blocks by index; a missing block is a hole.
    blocks: BTreeMap<u64, Box<[u8]>>,
    /// One past the last byte written (the length a local file would have).
    len: u64,
}

#[derive(Debug)]
pub struct MemoryBackend {
    capacity: u64,
    files: Mutex<Files>,
}

#[derive(Debug, Default)]
struct Files {
    by_id: HashMap<FileId, MemFile>,
    /// Blocks allocated over every file, in bytes.
    used: u64,
}

impl MemoryBackend {
    /// An empty RAM tier holding at most `capacity` bytes.
    pub fn new(capacity: u64) -> MemoryBackend {
        MemoryBackend {
            capacity,
            files: Mutex::new(Files::default()),
        }
    }
}

impl Files {
    fn check(&self) {
        debug_assert_eq!(
            self.used,
            self.by_id
                .values()
                .map(|f| f.blocks.len() as u64 * BLOCK)
                .sum::<u64>(),
            "memory backend: used does not count the blocks held"
        );
    }
}

impl MemFile {
    /// Zeros `[from, to)` (within the written length), freeing whole blocks;
    /// returns the bytes freed.
    fn clear(&mut self, from: u64, to: u64) -> u64 {
        let to = to.min(self.len);
        if from >= to {
            return 0;
        }
        let (first, last) = (from / BLOCK, (to - 1) / BLOCK);
        let mut freed = 0;
        let indexes: Vec<u64> = self.blocks.range(first..=last).map(|(i, _)| *i).collect();
        for i in indexes {
            let (start, end) = (i * BLOCK, (i + 1) * BLOCK);
            if from <= start && to >= end {
                self.blocks.remove(&i);
                freed += BLOCK;
            } else if let Some(block) = self.blocks.get_mut(&i) {
                let s = from.max(start) - start;
                let e = to.min(end) - start;
                block[s as usize..e as usize].fill(0);
            }
        }
        freed
    }
}

impl Backend for MemoryBackend {
    fn used(&self) -> u64 {
        self.files.lock().used
    }

    /// All or nothing: a write that would pass the capacity changes no
    /// byte.
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], _sync: bool) -> Result<()> {
        let mut files = self.files.lock();
        let mut new_blocks = std::collections::BTreeSet::new();
        let held = files.by_id.get(&file);
        for (offset, data) in pieces {
            let end = offset
                .checked_add(data.len() as u64)
                .ok_or_else(|| Error::InvalidArgument(format!("offset {offset} overflows")))?;
            if data.is_empty() {
                continue;
            }
            for i in offset / BLOCK..=(end - 1) / BLOCK {
                if !held.is_some_and(|f| f.blocks.contains_key(&i)) {
                    new_blocks.insert(i);
                }
            }
        }
        let more = new_blocks.len() as u64 * BLOCK;
        if files.used + more > self.capacity {
            return Err(Error::Storage(format!(
                "memory backend full: {} bytes held, {more} more asked, capacity {}",
                files.used, self.capacity
            )));
        }
        files.used += more;
        let f = files.by_id.entry(file).or_default();
        for (offset, data) in pieces {
            let mut at = *offset;
            let mut rest: &[u8] = data;
            while !rest.is_empty() {
                let (i, within) = (at / BLOCK, (at % BLOCK) as usize);
                let n = rest.len().min(BLOCK as usize - within);
                let block = f
                    .blocks
                    .entry(i)
                    .or_insert_with(|| vec![0; BLOCK as usize].into_boxed_slice());
                block[within..within + n].copy_from_slice(&rest[..n]);
                at += n as u64;
                rest = &rest[n..];
            }
            f.len = f.len.max(at);
        }
        files.check();
        Ok(())
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let files = self.files.lock();
        let Some(f) = files.by_id.get(&file) else {
            return Err(Error::Storage(format!(
                "file {file:016x} is missing from memory but holds {} bytes at offset {offset}",
                buf.len()
            )));
        };
        let end = offset.saturating_add(buf.len() as u64);
        if end > f.len {
            return Err(Error::Storage(format!(
                "file {file:016x} in memory is {} bytes long, shorter than the {} bytes at offset {offset} it should hold",
                f.len,
                buf.len()
            )));
        }
        let mut at = offset;
        for chunk in buf.chunks_mut(BLOCK as usize) {
            // A chunk may straddle two blocks: copy block by block.
            let mut done = 0;
            while done < chunk.len() {
                let (i, within) = (at / BLOCK, (at % BLOCK) as usize);
                let n = (chunk.len() - done).min(BLOCK as usize - within);
                match f.blocks.get(&i) {
                    Some(block) => {
                        chunk[done..done + n].copy_from_slice(&block[within..within + n])
                    }
                    None => chunk[done..done + n].fill(0),
                }
                done += n;
                at += n as u64;
            }
        }
        Ok(())
    }

    fn remove(&self, file: FileId) -> Result<()> {
        let mut files = self.files.lock();
        if let Some(f) = files.by_id.remove(&file) {
            files.used -= f.blocks.len() as u64 * BLOCK;
        }
        files.check();
        Ok(())
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        if crate::keeps_nothing(end, held) {
            return self.remove(file);
        }
        let mut files = self.files.lock();
        let Some(f) = files.by_id.get_mut(&file) else {
            return Ok(());
        };
        let stop = end.min(f.len);
        let mut at = start;
        let mut freed = 0;
        for (s, e) in held
            .iter()
            .map(|&(s, e)| (s.clamp(start, stop), e.clamp(start, stop)))
            .chain(std::iter::once((stop, stop)))
        {
            if s > at {
                freed += f.clear(at, s);
            }
            at = at.max(e);
        }
        if let Some(&(_, last)) = held.last() {
            if end == u64::MAX && last < f.len {
                freed += f.clear(last, u64::MAX);
                // Blocks wholly past the new end go; a partial last block
                // keeps its zeroed tail.
                let keep = last.div_ceil(BLOCK);
                let gone: Vec<u64> = f.blocks.range(keep..).map(|(i, _)| *i).collect();
                for i in gone {
                    f.blocks.remove(&i);
                    freed += BLOCK;
                }
                f.len = last;
            }
        }
        files.used -= freed;
        files.check();
        Ok(())
    }

    fn files(&self) -> Result<Vec<FileId>> {
        Ok(self.files.lock().by_id.keys().copied().collect())
    }

    /// Nothing to make durable: memory is lost with the process whatever
    /// is done (see the module's text).
    fn flush(&self, _file: FileId) -> Result<()> {
        Ok(())
    }

    fn holds(&self, file: FileId) -> bool {
        self.files.lock().by_id.contains_key(&file)
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        Ok(self.files.lock().by_id.get(&file).map(|f| f.len))
    }
}
