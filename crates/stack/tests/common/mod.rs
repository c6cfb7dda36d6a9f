//! A device for tests of what layers do with the calls they make.

use labios_label::{Error, FileId, Result};
use labios_stack::Backend;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A device that applies `left` more changes, then fails every change
/// as a stopped process would never make it (reads still answer, as
/// they would from what was kept); it counts the reads that reach it.
#[derive(Debug)]
pub struct Stopping {
    inner: Arc<dyn Backend>,
    pub left: AtomicU64,
    pub reads: AtomicU64,
}

impl Stopping {
    /// `inner`, with no limit on its changes yet.
    pub fn over(inner: Arc<dyn Backend>) -> Arc<Stopping> {
        Arc::new(Stopping {
            inner,
            left: AtomicU64::new(u64::MAX),
            reads: AtomicU64::new(0),
        })
    }

    fn change(&self) -> Result<()> {
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(drop)
            .map_err(|_| Error::Storage("the device stopped (a crash)".into()))
    }
}

impl Backend for Stopping {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        self.change()?;
        self.inner.write(file, pieces, sync)
    }
    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read(file, offset, buf)
    }
    fn remove(&self, file: FileId) -> Result<()> {
        self.change()?;
        self.inner.remove(file)
    }
    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        self.change()?;
        self.inner.keep_only(file, start, end, held)
    }
    labios_stack::pass_through!(inner: files, flush, holds, len, used);
}
