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

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::RwLock;
use std::collections::BTreeSet;
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

    /// Sums blocks `blocks` of `file` as they now are and keeps the sums.
    /// A block that one of `written` (the pieces just written) covers
    /// whole, and no other touches, is summed from those bytes; any other
    /// is read back, so a large write reads back only its edges.
    fn resum(
        &self,
        file: FileId,
        blocks: &BTreeSet<u64>,
        written: &[(u64, &[u8])],
        sync: bool,
    ) -> Result<()> {
        let len = self.inner.len(file)?.unwrap_or(0);
        // Runs of neighbouring blocks' entries: one piece each, so a
        // 1 MiB write keeps its 256 sums with one call, not 256.
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        for &b in blocks {
            let (start, stop) = (b * BLOCK, (b + 1) * BLOCK);
            let mut touching = written
                .iter()
                .filter(|(o, d)| *o < stop && o + d.len() as u64 > start);
            let whole = match (touching.next(), touching.next()) {
                (Some((o, d)), None) if *o <= start && o + d.len() as u64 >= stop => {
                    Some(&d[(start - o) as usize..][..BLOCK as usize])
                }
                _ => None,
            };
            let entry = match whole {
                Some(bytes) => entry_of(bytes),
                None if start < len => entry_of(&self.bytes(file, start, stop)?),
                None => [0; ENTRY as usize],
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

fn entry_of(block: &[u8]) -> [u8; ENTRY as usize] {
    let mut e = [0; ENTRY as usize];
    e[..4].copy_from_slice(&crc32c::crc32c(block).to_le_bytes());
    e[4..].copy_from_slice(&MARK);
    e
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
        self.unsum(file, len, &touched, sync)?;
        self.inner.write(file, pieces, sync)?;
        self.resum(file, &touched, pieces, sync)
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
                return Err(Error::Storage(format!(
                    "checksum mismatch in file {file:016x} at offset {start} ({BLOCK} bytes): \
                     the stored bytes are not those written"
                )));
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
        let summed = self.active || self.inner.holds(file | COMPANION);
        // Freed ranges will read as zeros, and a cut file is shorter: the
        // blocks from the lower of `start` and the cut lose their sums
        // first, and those the file still has are summed again after.
        let cut = match held.last() {
            Some(&(_, last)) if end == u64::MAX => last,
            _ => start,
        };
        let touched: BTreeSet<u64> = blocks(start.min(cut), end.min(len)).collect();
        if summed {
            self.unsum(file, len, &touched, false)?;
        }
        self.inner.keep_only(file, start, end, held)?;
        if !self.inner.holds(file) {
            return self.inner.remove(file | COMPANION);
        }
        if !summed {
            return Ok(());
        }
        let now = self.inner.len(file)?.unwrap_or(0);
        let touched: BTreeSet<u64> = touched
            .into_iter()
            .take_while(|b| b * BLOCK < now)
            .collect();
        self.resum(file, &touched, &[], false)?;
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

    fn holds(&self, file: FileId) -> bool {
        self.inner.holds(file)
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        self.inner.len(file)
    }

    /// The sums' space counts too: the worker's capacity is its device's.
    fn used(&self) -> u64 {
        self.inner.used()
    }
}
