//! The `checksum` layer: a CRC-32C per block of [`BLOCK`] bytes, kept
//! beside the data in the backend below and verified on every read. A
//! block whose bytes no longer match fails the read with an error naming
//! the file and the block's offset: a worker under this layer never
//! returns bytes other than those written.
//!
//! The sums of file F live in the backend below as the companion file
//! `F | COMPANION` (no LABIOS file id reaches bit 63), 8 bytes per block:
//! the CRC and a mark, so that a block never summed (a hole) reads as all
//! zeros and is not checked. A block's sum covers its bytes up to the
//! file's local length, zeros after. Writes and reclamation of a file
//! recompute the sums of the blocks they touch under the file's lock, and
//! reads verify under it, so a read never sees new bytes with an old sum.
//!
//! A change is three steps on the backend: the sums of the summed blocks
//! it touches go (their entries become zeros), the bytes change, the new
//! sums are kept. A crash (a `kill -9`, or a device that fails a step)
//! between them leaves those blocks unchecked until they are written
//! again, never checked against a sum of other bytes: the bytes a block
//! held before, written and acknowledged, stay readable.
//!
//! A change that keeps some of a summed block's old bytes (a write or a
//! cut inside it) reads the block and verifies it first, and sums the
//! block from those bytes with the change applied: a byte the device
//! corrupted is never summed as if it had been written. A mismatch fails
//! the change before anything changes, naming the file and the block.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Bytes one sum covers.
pub const BLOCK: u64 = 4096;
/// The bit of a file id that names a file's sums.
const COMPANION: FileId = 1 << 63;
/// Bytes of one block's entry: CRC-32C, then [`MARK`].
const ENTRY: u64 = 8;
const MARK: [u8; 4] = *b"LBck";
const STRIPES: usize = 64;

#[derive(Debug)]
pub struct Checksum {
    inner: Arc<dyn Backend>,
    /// Whether files without sums get them. A stack that names no
    /// `checksum` runs this layer passive: it keeps the sums of files that
    /// have them true (and verifies them) and starts none, so a stack can
    /// change under data an earlier one summed.
    active: bool,
    /// Writers of a file alone, readers together; striped by file id.
    stripes: Vec<RwLock<()>>,
}

impl Checksum {
    /// The layer over `inner`; `active` sums every file written.
    pub fn new(inner: Arc<dyn Backend>, active: bool) -> Checksum {
        Checksum {
            inner,
            active,
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }

    fn stripe(&self, file: FileId) -> &RwLock<()> {
        &self.stripes[(file % STRIPES as u64) as usize]
    }

    /// Bytes `[from, to)` of `file` as they read now: zeros past its
    /// length or where nothing is held.
    fn bytes(&self, file: FileId, from: u64, to: u64) -> Result<Vec<u8>> {
        let mut out = vec![0; (to - from) as usize];
        let len = self.inner.len(file)?.unwrap_or(0);
        if from < len {
            let upto = to.min(len);
            self.inner
                .read(file, from, &mut out[..(upto - from) as usize])?;
        }
        Ok(out)
    }

    /// The entries of blocks `first..=last` (zeros where none was kept).
    fn entries(&self, file: FileId, first: u64, last: u64) -> Result<Vec<u8>> {
        self.bytes(file | COMPANION, first * ENTRY, (last + 1) * ENTRY)
    }

    /// Drops the sums of those of `blocks` of `file` (`len` bytes long)
    /// that may have one, before their bytes change. With `sync`, that is
    /// on the device first, so that a power loss after the change cannot
    /// leave new bytes under an old sum.
    fn unsum(&self, file: FileId, len: u64, blocks: &BTreeSet<u64>, sync: bool) -> Result<()> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &b in blocks.iter().take_while(|&&b| b * BLOCK < len) {
            match runs.last_mut() {
                Some((_, last)) if *last + 1 == b => *last = b,
                _ => runs.push((b, b)),
            }
        }
        let most = runs.iter().map(|(f, l)| l - f + 1).max().unwrap_or(0);
        if most == 0 {
            return Ok(());
        }
        let zeros = vec![0; (most * ENTRY) as usize];
        let pieces: Vec<(u64, &[u8])> = runs
            .iter()
            .map(|&(f, l)| (f * ENTRY, &zeros[..((l - f + 1) * ENTRY) as usize]))
            .collect();
        self.inner.write(file | COMPANION, &pieces, sync)
    }

    /// Bytes of blocks `blocks` of `file` (`len` bytes long) as they read
    /// now, each verified against its sum where it has one: what a change
    /// that keeps some of them starts from. A mismatch is an error, and
    /// the change does not happen.
    fn verified(
        &self,
        file: FileId,
        len: u64,
        blocks: impl Iterator<Item = u64>,
    ) -> Result<BTreeMap<u64, Vec<u8>>> {
        let mut out = BTreeMap::new();
        for b in blocks {
            let (start, stop) = (b * BLOCK, (b + 1) * BLOCK);
            let bytes = self.bytes(file, start, stop)?;
            if start < len {
                let kept = self.entries(file, b, b)?;
                if kept != [0; ENTRY as usize] && entry_of(&bytes) != kept[..] {
                    return Err(mismatch(file, start));
                }
            }
            out.insert(b, bytes);
        }
        Ok(out)
    }

    /// Keeps the sums of blocks `blocks` of `file` as a change left them:
    /// a block that one of `written` (the pieces just written) covers
    /// whole is summed from those bytes, one in `after` from its bytes
    /// there, any other is a hole (no sum). Nothing is read back.
    fn resum(
        &self,
        file: FileId,
        blocks: &BTreeSet<u64>,
        written: &[(u64, &[u8])],
        after: &BTreeMap<u64, Vec<u8>>,
        sync: bool,
    ) -> Result<()> {
        // Runs of neighbouring blocks' entries: one piece each, so a
        // 1 MiB write keeps its 256 sums with one call, not 256.
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        for &b in blocks {
            let entry = match (covering(written, b), after.get(&b)) {
                (Some(bytes), _) => entry_of(bytes),
                (None, Some(bytes)) => entry_of(bytes),
                (None, None) => [0; ENTRY as usize],
            };
            match runs.last_mut() {
                Some((at, run)) if *at + run.len() as u64 == b * ENTRY => {
                    run.extend_from_slice(&entry)
                }
                _ => runs.push((b * ENTRY, entry.to_vec())),
            }
        }
        let pieces: Vec<(u64, &[u8])> = runs.iter().map(|(o, e)| (*o, &e[..])).collect();
        self.inner.write(file | COMPANION, &pieces, sync)
    }
}

/// The bytes of block `b` when one of `pieces` covers it whole and no
/// other touches it.
fn covering<'a>(pieces: &[(u64, &'a [u8])], b: u64) -> Option<&'a [u8]> {
    let (start, stop) = (b * BLOCK, (b + 1) * BLOCK);
    let mut touching = pieces
        .iter()
        .filter(|(o, d)| *o < stop && o + d.len() as u64 > start);
    match (touching.next(), touching.next()) {
        (Some((o, d)), None) if *o <= start && o + d.len() as u64 >= stop => {
            Some(&d[(start - o) as usize..][..BLOCK as usize])
        }
        _ => None,
    }
}

fn mismatch(file: FileId, start: u64) -> Error {
    Error::Storage(format!(
        "checksum mismatch in file {file:016x} at offset {start} ({BLOCK} bytes): \
         the stored bytes are not those written"
    ))
}

/// Zeros `range` of `block`, the bytes of block number `b`.
fn zero(block: &mut [u8], b: u64, (from, to): (u64, u64)) {
    let (start, stop) = (b * BLOCK, (b + 1) * BLOCK);
    let (from, to) = (from.max(start), to.min(stop));
    if from < to {
        block[(from - start) as usize..(to - start) as usize].fill(0);
    }
}

fn entry_of(block: &[u8]) -> [u8; ENTRY as usize] {
    let mut e = [0; ENTRY as usize];
    e[..4].copy_from_slice(&crc32c::crc32c(block).to_le_bytes());
    e[4..].copy_from_slice(&MARK);
    e
}

/// The ranges of a file `len` bytes long that a
/// [`Backend::keep_only`]`(start, end, held)` frees, sorted and merged:
/// `start..end` outside `held`, and with `end == u64::MAX` everything
/// past the last held byte.
fn freed(start: u64, end: u64, len: u64, held: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let stop = end.min(len);
    let mut ranges = Vec::new();
    let mut at = start;
    for &(from, to) in held {
        if to <= at {
            continue;
        }
        if from >= stop {
            break;
        }
        if from > at {
            ranges.push((at, from));
        }
        at = to;
    }
    if at < stop {
        ranges.push((at, stop));
    }
    if end == u64::MAX {
        let cut = held.last().map_or(0, |&(_, last)| last);
        if cut < len {
            ranges.push((cut, len));
        }
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (from, to) in ranges {
        match merged.last_mut() {
            Some((_, last)) if *last >= from => *last = (*last).max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// The blocks `[from, to)` touches.
fn blocks(from: u64, to: u64) -> impl Iterator<Item = u64> {
    let last = if to > from {
        (to - 1) / BLOCK + 1
    } else {
        from / BLOCK
    };
    from / BLOCK..last
}

impl Backend for Checksum {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        assert_eq!(
            file & COMPANION,
            0,
            "file id {file:#x} uses the companion bit"
        );
        let _turn = self.stripe(file).write();
        if !self.active && !self.inner.holds(file | COMPANION) {
            return self.inner.write(file, pieces, sync);
        }
        let touched: BTreeSet<u64> = pieces
            .iter()
            .flat_map(|(o, d)| blocks(*o, o + d.len() as u64))
            .collect();
        let len = self.inner.len(file)?.unwrap_or(0);
        let edges = touched
            .iter()
            .copied()
            .filter(|&b| covering(pieces, b).is_none());
        let mut after = self.verified(file, len, edges)?;
        for (&b, block) in after.iter_mut() {
            let start = b * BLOCK;
            for (o, d) in pieces {
                let (from, to) = ((*o).max(start), (o + d.len() as u64).min(start + BLOCK));
                if from < to {
                    block[(from - start) as usize..(to - start) as usize]
                        .copy_from_slice(&d[(from - o) as usize..(to - o) as usize]);
                }
            }
        }
        self.unsum(file, len, &touched, sync)?;
        self.inner.write(file, pieces, sync)?;
        self.resum(file, &touched, pieces, &after, sync)
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let _turn = self.stripe(file).read();
        let end = offset + buf.len() as u64;
        self.inner.read(file, offset, buf)?;
        if buf.is_empty() {
            return Ok(());
        }
        let (first, last) = (offset / BLOCK, (end - 1) / BLOCK);
        let entries = self.entries(file, first, last)?;
        for (i, b) in (first..=last).enumerate() {
            let kept = &entries[i * ENTRY as usize..][..ENTRY as usize];
            if kept == [0; ENTRY as usize] {
                continue;
            }
            let (start, stop) = (b * BLOCK, (b + 1) * BLOCK);
            // The block as it reads: from `buf` where the read covered it.
            let sum = if start >= offset && stop <= end {
                entry_of(&buf[(start - offset) as usize..][..BLOCK as usize])
            } else {
                entry_of(&self.bytes(file, start, stop)?)
            };
            if sum != kept {
                return Err(mismatch(file, start));
            }
        }
        Ok(())
    }

    fn remove(&self, file: FileId) -> Result<()> {
        let _turn = self.stripe(file).write();
        self.inner.remove(file)?;
        self.inner.remove(file | COMPANION)
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        let _turn = self.stripe(file).write();
        let Some(len) = self.inner.len(file)? else {
            return self.inner.remove(file | COMPANION);
        };
        if !(self.active || self.inner.holds(file | COMPANION)) {
            return self.inner.keep_only(file, start, end, held);
        }
        // Freed ranges will read as zeros, and a cut file is shorter: the
        // blocks they touch lose their sums first. Those that keep some
        // old bytes are verified before and summed again after, from
        // those bytes with the freed ones zeroed.
        let freed = freed(start, end, len, held);
        let touched: BTreeSet<u64> = freed.iter().flat_map(|&(f, t)| blocks(f, t)).collect();
        let partial = touched.iter().copied().filter(|&b| {
            let (start, stop) = (b * BLOCK, ((b + 1) * BLOCK).min(len));
            !freed.iter().any(|&(f, t)| f <= start && t >= stop)
        });
        let mut after = self.verified(file, len, partial)?;
        self.unsum(file, len, &touched, false)?;
        self.inner.keep_only(file, start, end, held)?;
        if !self.inner.holds(file) {
            return self.inner.remove(file | COMPANION);
        }
        let now = self.inner.len(file)?.unwrap_or(0);
        after.retain(|&b, _| b * BLOCK < now);
        for (&b, block) in after.iter_mut() {
            for &range in freed.iter().chain([(now, u64::MAX)].iter()) {
                zero(block, b, range);
            }
        }
        let touched: BTreeSet<u64> = after.keys().copied().collect();
        self.resum(file, &touched, &[], &after, false)?;
        let kept = now.div_ceil(BLOCK) * ENTRY;
        self.inner
            .keep_only(file | COMPANION, 0, u64::MAX, &[(0, kept)])
    }

    /// A file's sums stand for the file: sums left without their file
    /// (a crash between the two removes) name it, so that reclaiming it
    /// frees them too.
    fn files(&self) -> Result<Vec<FileId>> {
        let files: BTreeSet<FileId> = self
            .inner
            .files()?
            .into_iter()
            .map(|f| f & !COMPANION)
            .collect();
        Ok(files.into_iter().collect())
    }

    fn flush(&self, file: FileId) -> Result<()> {
        self.inner.flush(file)?;
        self.inner.flush(file | COMPANION)
    }

    // `used` counts the sums' space too: the capacity is the device's.
    crate::pass_through!(inner: holds, len, used);
}
