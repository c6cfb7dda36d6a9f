//! The `cache` layer: recently read blocks of [`BLOCK`] bytes kept in
//! memory, bounded in bytes (`cache:64MiB`), over a slower stack below (a
//! codec's decompression, a key-value store's look-ups). A read whose
//! blocks are all here touches nothing below; a miss reads the blocks its
//! range spans in one call and keeps them.
//!
//! What is kept is never newer or older than the device: every change
//! (write, reclamation, removal) drops the blocks it touches, under the
//! file's lock, which reads hold too, so no fill of old bytes can land
//! after a change. A block holds the file's bytes up to its length when
//! it was read; a read past them goes below, which answers a range past
//! the end with its error. Nothing here outlives the stack: a changed
//! stack starts an empty cache, so one stack's blocks never meet another
//! stack's writes. Stacks that do not name it have no cache at all.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::RwLock;
use quick_cache::sync::Cache as Blocks;
use std::sync::Arc;

/// Bytes one cached block holds: a codec unit, so a hit spares a whole
/// decompression.
pub const BLOCK: u64 = 64 * 1024;
/// The bytes a bare `cache` keeps.
pub const DEFAULT_BYTES: u64 = 64 << 20;
const STRIPES: usize = 64;

/// Weighs a block by its bytes, so the bound is in bytes.
#[derive(Clone)]
struct Bytes;

impl quick_cache::Weighter<(FileId, u64), Arc<[u8]>> for Bytes {
    fn weight(&self, _: &(FileId, u64), block: &Arc<[u8]>) -> u64 {
        block.len().max(1) as u64
    }
}

pub struct Cache {
    inner: Arc<dyn Backend>,
    blocks: Blocks<(FileId, u64), Arc<[u8]>, Bytes>,
    bytes: u64,
    /// Changes of a file alone, reads (and their fills) together.
    stripes: Vec<RwLock<()>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("bytes", &self.bytes)
            .field("inner", &self.inner)
            .finish()
    }
}

/// The bytes `module` (`LAYER` or `LAYER:SIZE`, SIZE in bytes or with a
/// KiB, MiB or GiB suffix) keeps, `default` for a bare `LAYER`; an error
/// naming the module otherwise. The cache and the tier are sized so.
pub fn size_of(module: &str, default: u64) -> Result<u64> {
    let (layer, size) = match module.split_once(':') {
        None => return Ok(default),
        Some(split) => split,
    };
    labios_label::hints::parse_size(size).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "stack: {module:?}: the {layer}'s size is a positive number of bytes, or of KiB, \
             MiB or GiB (e.g. {layer}:64MiB)"
        ))
    })
}

impl Cache {
    /// Keeps up to `bytes` of `inner`'s blocks.
    pub fn new(inner: Arc<dyn Backend>, bytes: u64) -> Cache {
        Cache {
            inner,
            blocks: Blocks::with_weighter((bytes / BLOCK).max(1) as usize, bytes, Bytes),
            bytes,
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }

    /// Bytes kept now.
    pub fn kept(&self) -> u64 {
        self.blocks.weight()
    }

    fn stripe(&self, file: FileId) -> &RwLock<()> {
        &self.stripes[(file % STRIPES as u64) as usize]
    }

    /// Drops the kept blocks of `file` that `[from, to)` touches.
    fn forget(&self, file: FileId, from: u64, to: u64) {
        if to > from {
            for b in from / BLOCK..to.div_ceil(BLOCK) {
                self.blocks.remove(&(file, b));
            }
        }
    }

    /// Fills `buf` from kept blocks; false if one is missing or short.
    fn hit(&self, file: FileId, offset: u64, buf: &mut [u8]) -> bool {
        let end = offset + buf.len() as u64;
        let mut at = offset;
        while at < end {
            let b = at / BLOCK;
            let Some(block) = self.blocks.get(&(file, b)) else {
                return false;
            };
            let (from, to) = (
                (at - b * BLOCK) as usize,
                end.min((b + 1) * BLOCK) - b * BLOCK,
            );
            if block.len() < to as usize {
                return false;
            }
            buf[(at - offset) as usize..][..to as usize - from]
                .copy_from_slice(&block[from..to as usize]);
            at = b * BLOCK + to;
        }
        true
    }
}

impl Backend for Cache {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        let _turn = self.stripe(file).write();
        let done = self.inner.write(file, pieces, sync);
        // Even a failed write may have changed some of its blocks.
        for (o, d) in pieces {
            self.forget(file, *o, o + d.len() as u64);
        }
        done
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let _turn = self.stripe(file).read();
        if buf.is_empty() || self.hit(file, offset, buf) {
            return Ok(());
        }
        let end = offset + buf.len() as u64;
        let len = match self.inner.len(file)? {
            Some(len) if len >= end => len,
            // Missing or short: the backend's own error.
            _ => return self.inner.read(file, offset, buf),
        };
        let (first, stop) = (offset / BLOCK * BLOCK, end.div_ceil(BLOCK) * BLOCK);
        let mut span = vec![0; (stop.min(len) - first) as usize];
        self.inner.read(file, first, &mut span)?;
        buf.copy_from_slice(&span[(offset - first) as usize..][..buf.len()]);
        for (i, block) in span.chunks(BLOCK as usize).enumerate() {
            self.blocks
                .insert((file, first / BLOCK + i as u64), Arc::from(block));
        }
        Ok(())
    }

    fn remove(&self, file: FileId) -> Result<()> {
        let _turn = self.stripe(file).write();
        let len = self.inner.len(file)?.unwrap_or(0);
        let done = self.inner.remove(file);
        self.forget(file, 0, len);
        done
    }

    /// Kept blocks lie below the file's length (a block is filled from
    /// bytes the file had), so those from the lower of `start` and the
    /// cut up to it are all that can change.
    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        let _turn = self.stripe(file).write();
        let len = self.inner.len(file)?.unwrap_or(0);
        let cut = match held.last() {
            Some(&(_, last)) if end == u64::MAX => last,
            Some(_) => start,
            None if end == u64::MAX => 0,
            None => start,
        };
        let done = self.inner.keep_only(file, start, end, held);
        self.forget(file, start.min(cut), end.min(len));
        done
    }

    // `used` is the device's: the cache is memory, not capacity.
    crate::pass_through!(inner: files, flush, holds, len, used);
}
