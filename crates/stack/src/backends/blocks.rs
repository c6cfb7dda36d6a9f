//! What the block-addressed backends (`memory`, `kv`, `external`) share: a
//! LABIOS file as blocks (of [`BLOCK`] bytes unless the map says) keyed by
//! their index, allocated as
//! they are first written (holes take nothing and read as zeros), plus the
//! file's local length. Where the blocks live is a [`Blocks`] map; the
//! logic of ranges, holes, overwrites, reclamation and accounting is
//! written once here, in [`Blocked`].
//!
//! Every change of a file is one [`Change`], applied by the map at once:
//! the `kv` backend makes it one write batch, so a label is one call to
//! the store and a crash keeps all of it or none. (`external` cannot: one
//! request per block; see [`Blocks::atomic`].)

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Allocation unit: a page, as a file system allocates.
pub const BLOCK: u64 = 4096;
const STRIPES: usize = 64;

/// One change of a file, applied as a whole.
#[derive(Debug, Default)]
pub struct Change {
    /// Blocks written, whole, by index.
    pub put: BTreeMap<u64, Box<[u8]>>,
    /// Blocks freed.
    pub drop: Vec<u64>,
    /// The file's length after the change; `None`: the file goes.
    pub len: Option<u64>,
}

/// Where a block-addressed backend keeps its blocks.
pub trait Blocks: Send + Sync + std::fmt::Debug {
    /// What the errors call this store ("memory", "kv at DIR").
    fn name(&self) -> &str;
    /// Copies block `index` of `file`, from byte `within`, into `dst`;
    /// `false` when the block is a hole.
    fn read(&self, file: FileId, index: u64, within: usize, dst: &mut [u8]) -> Result<bool>;
    /// The indexes of the blocks of `file` held in `range`, ascending.
    fn held(&self, file: FileId, range: Range<u64>) -> Result<Vec<u64>>;
    /// The file's length, when it is held.
    fn len(&self, file: FileId) -> Result<Option<u64>>;
    /// Applies `change` to `file` as a whole; with `sync`, durably where
    /// the map can.
    fn apply(&self, file: FileId, change: Change, sync: bool) -> Result<()>;
    /// The files held.
    fn files(&self) -> Result<Vec<FileId>>;
    /// Makes every applied change durable, where the map can.
    fn flush(&self) -> Result<()>;
    /// Blocks held over every file (counted once, at open).
    fn count(&self) -> Result<u64>;
    /// The map's block size: a page for maps in memory or on a local
    /// device; larger where each block costs a request (objects).
    fn block_size(&self) -> u64 {
        BLOCK
    }
    /// Whether a failed [`Blocks::apply`] changed nothing (one batch:
    /// `memory`, `kv`). A map that cannot promise it (`external`: one
    /// request per block) lists the file again after a failure, and
    /// [`Blocked`] counts what it holds then.
    fn atomic(&self) -> bool {
        true
    }
    /// How many blocks of `file` are held.
    fn count_of(&self, file: FileId) -> Result<u64> {
        Ok(self.held(file, 0..u64::MAX)?.len() as u64)
    }
}

/// A [`Backend`] over a [`Blocks`] map, holding at most `capacity` bytes.
#[derive(Debug)]
pub struct Blocked<B> {
    blocks: B,
    /// The map's block size ([`Blocks::block_size`]).
    bs: u64,
    capacity: u64,
    /// Bytes of the blocks held.
    used: AtomicU64,
    /// Changes of one file take turns: each reads the blocks it changes
    /// part of and counts the blocks it adds, which two at once would get
    /// wrong. Striped by file id.
    stripes: Vec<Mutex<()>>,
}

impl<B: Blocks> Blocked<B> {
    pub fn over(blocks: B, capacity: u64) -> Result<Blocked<B>> {
        let bs = blocks.block_size();
        assert!(bs.is_power_of_two() && bs >= 512, "block size {bs}");
        let used = blocks.count()? * bs;
        Ok(Blocked {
            bs,
            blocks,
            capacity,
            used: AtomicU64::new(used),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        })
    }

    fn stripe(&self, file: FileId) -> &Mutex<()> {
        &self.stripes[(file % STRIPES as u64) as usize]
    }

    /// Block `index` of `file` as it is now (zeros for a hole).
    fn block(&self, file: FileId, index: u64) -> Result<Box<[u8]>> {
        let mut block = vec![0; self.bs as usize].into_boxed_slice();
        self.blocks.read(file, index, 0, &mut block)?;
        Ok(block)
    }

    /// Takes `more` bytes of the capacity, or refuses naming what is held.
    fn reserve(&self, more: u64) -> Result<()> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u + more <= self.capacity).then_some(u + more)
            })
            .map(|_| ())
            .map_err(|used| {
                Error::Storage(format!(
                    "{} backend full: {used} bytes held, {more} more asked, capacity {}",
                    self.blocks.name(),
                    self.capacity
                ))
            })
    }

    /// Applies `change`, keeping `used` in line with the blocks it adds
    /// (`added`) and frees; the capacity was reserved for `added`.
    fn apply(&self, file: FileId, change: Change, added: u64, sync: bool) -> Result<()> {
        let freed = change.drop.len() as u64 * self.bs;
        let before = match self.blocks.atomic() {
            true => 0,
            false => self.blocks.count_of(file).inspect_err(|_| {
                self.used.fetch_sub(added, Ordering::AcqRel);
            })?,
        };
        match self.blocks.apply(file, change, sync) {
            Ok(()) => {
                self.used.fetch_sub(freed, Ordering::AcqRel);
                Ok(())
            }
            Err(e) if self.blocks.atomic() => {
                self.used.fetch_sub(added, Ordering::AcqRel);
                Err(e)
            }
            Err(e) => {
                // Part of the change may be stored: count the file's blocks
                // as the map now holds them instead of the reservation.
                let after = self.blocks.count_of(file).unwrap_or(before);
                let (gone, now) = (added + before * self.bs, after * self.bs);
                // One update, so that no other file's reservation sees the
                // count overstated in between.
                let _ = self
                    .used
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                        Some((u + now).saturating_sub(gone))
                    });
                Err(e)
            }
        }
    }

    /// Adds to `change` the zeroing of `[from, to)` (below `len`): held
    /// blocks wholly inside go, partly covered ones are zeroed there.
    fn clear(
        &self,
        file: FileId,
        change: &mut Change,
        held: &BTreeSet<u64>,
        (from, to): (u64, u64),
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        for &i in held.range(from / self.bs..=(to - 1) / self.bs) {
            let (start, end) = (i * self.bs, (i + 1) * self.bs);
            if from <= start && to >= end {
                change.drop.push(i);
                change.put.remove(&i);
            } else {
                let block = match change.put.entry(i) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::btree_map::Entry::Vacant(v) => v.insert(self.block(file, i)?),
                };
                let s = from.max(start) - start;
                let e = to.min(end) - start;
                block[s as usize..e as usize].fill(0);
            }
        }
        Ok(())
    }
}

impl<B: Blocks> Backend for Blocked<B> {
    fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// All or nothing: the pieces become one change, and a write that
    /// would pass the capacity changes no byte.
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        let mut span: Option<std::ops::Range<u64>> = None;
        for (offset, data) in pieces.iter().filter(|(_, d)| !d.is_empty()) {
            let end = offset
                .checked_add(data.len() as u64)
                .ok_or_else(|| Error::InvalidArgument(format!("offset {offset} overflows")))?;
            span = Some(match span {
                Some(s) => s.start.min(*offset)..s.end.max(end),
                None => *offset..end,
            });
        }
        let Some(span) = span else {
            return Ok(());
        };
        let _turn = self.stripe(file).lock();
        let held: BTreeSet<u64> = self
            .blocks
            .held(file, span.start / self.bs..(span.end - 1) / self.bs + 1)?
            .into_iter()
            .collect();
        let mut change = Change {
            len: Some(self.blocks.len(file)?.unwrap_or(0).max(span.end)),
            ..Change::default()
        };
        for (offset, data) in pieces {
            let mut at = *offset;
            let mut rest: &[u8] = data;
            while !rest.is_empty() {
                let (i, within) = (at / self.bs, (at % self.bs) as usize);
                let n = rest.len().min(self.bs as usize - within);
                let block = match change.put.entry(i) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    // A whole block needs nothing of what was there.
                    std::collections::btree_map::Entry::Vacant(v) if n == self.bs as usize => {
                        v.insert(vec![0; self.bs as usize].into_boxed_slice())
                    }
                    std::collections::btree_map::Entry::Vacant(v) => v.insert(self.block(file, i)?),
                };
                block[within..within + n].copy_from_slice(&rest[..n]);
                at += n as u64;
                rest = &rest[n..];
            }
        }
        let added = change.put.keys().filter(|i| !held.contains(i)).count() as u64 * self.bs;
        self.reserve(added)?;
        self.apply(file, change, added, sync)
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let name = self.blocks.name();
        let Some(len) = self.blocks.len(file)? else {
            return Err(Error::Storage(format!(
                "file {file:016x} is missing from {name} but holds {} bytes at offset {offset}",
                buf.len()
            )));
        };
        let end = offset.saturating_add(buf.len() as u64);
        if end > len {
            return Err(Error::Storage(format!(
                "file {file:016x} in {name} is {len} bytes long, shorter than the {} bytes at offset {offset} it should hold",
                buf.len()
            )));
        }
        let mut at = offset;
        let mut done = 0;
        while done < buf.len() {
            let (i, within) = (at / self.bs, (at % self.bs) as usize);
            let n = (buf.len() - done).min(self.bs as usize - within);
            let chunk = &mut buf[done..done + n];
            if !self.blocks.read(file, i, within, chunk)? {
                chunk.fill(0);
            }
            done += n;
            at += n as u64;
        }
        Ok(())
    }

    fn remove(&self, file: FileId) -> Result<()> {
        let _turn = self.stripe(file).lock();
        if self.blocks.len(file)?.is_none() {
            return Ok(());
        }
        let change = Change {
            drop: self.blocks.held(file, 0..u64::MAX)?,
            ..Change::default()
        };
        self.apply(file, change, 0, false)
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        if crate::keeps_nothing(end, held) {
            return self.remove(file);
        }
        let _turn = self.stripe(file).lock();
        let Some(len) = self.blocks.len(file)? else {
            return Ok(());
        };
        // Nothing to free past the end (a range may start there).
        let stop = end.min(len).max(start);
        // A cut below `start` zeroes the tail of the block it falls in.
        let from = match held.last() {
            Some(&(_, last)) if end == u64::MAX => start.min(last),
            _ => start,
        };
        let blocks: BTreeSet<u64> = self
            .blocks
            .held(file, from.min(len) / self.bs..len.div_ceil(self.bs))?
            .into_iter()
            .collect();
        let mut change = Change {
            len: Some(len),
            ..Change::default()
        };
        let mut at = start;
        for (s, e) in held
            .iter()
            .map(|&(s, e)| (s.clamp(start, stop), e.clamp(start, stop)))
            .chain(std::iter::once((stop, stop)))
        {
            self.clear(file, &mut change, &blocks, (at, s))?;
            at = at.max(e);
        }
        if let Some(&(_, last)) = held.last() {
            if end == u64::MAX && last < len {
                // Blocks wholly past the new end go; a partial last block
                // keeps its zeroed tail.
                self.clear(file, &mut change, &blocks, (last, u64::MAX))?;
                change.len = Some(last);
            }
        }
        change.drop.sort_unstable();
        change.drop.dedup();
        self.apply(file, change, 0, false)
    }

    fn files(&self) -> Result<Vec<FileId>> {
        self.blocks.files()
    }

    fn flush(&self, _file: FileId) -> Result<()> {
        self.blocks.flush()
    }

    fn holds(&self, file: FileId) -> bool {
        matches!(self.blocks.len(file), Ok(Some(_)))
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        self.blocks.len(file)
    }
}
