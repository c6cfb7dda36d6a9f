//! The aggregator of IRIS (3.3): small writes that continue or overlap
//! one another are merged in memory into one run per file and stored as
//! one write, the way collective I/O merges requests, since every request
//! to an object store costs a round trip and, for most mappings, a whole
//! object.
//!
//! A run is stored when it reaches `max_run` bytes, when a write does not
//! continue it, when all runs together pass `max_buffered`, before any
//! read, stat or list that could see it, and at [`Aggregator::flush`].
//! Until then a write is acknowledged but only in memory: a crash loses
//! it, so flush before reporting data durable.

use crate::mapping::{Entry, FileMapper, Stat};
use crate::slots::Slots;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use labios_label::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Contiguous bytes of one file waiting to be written.
#[derive(Debug)]
struct Run {
    start: u64,
    data: BytesMut,
}

#[derive(Debug)]
pub struct Aggregator {
    inner: Arc<dyn FileMapper>,
    max_run: u64,
    max_buffered: u64,
    buffered: AtomicU64,
    runs: Slots<Option<Run>>,
}

impl Aggregator {
    /// Merges writes to `inner` into runs of up to `max_run` bytes,
    /// holding at most about `max_buffered` bytes in all.
    pub fn new(inner: Arc<dyn FileMapper>, max_run: u64, max_buffered: u64) -> Result<Aggregator> {
        if max_run == 0 || max_buffered < max_run {
            return Err(Error::InvalidArgument(format!(
                "aggregator bounds {max_run}/{max_buffered}: need 0 < max_run <= max_buffered"
            )));
        }
        Ok(Aggregator {
            inner,
            max_run,
            max_buffered,
            buffered: AtomicU64::new(0),
            runs: Default::default(),
        })
    }

    /// Bytes written but not yet passed on.
    pub fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Acquire)
    }

    /// Files with a run in memory: what the aggregator keeps per file is
    /// dropped once stored, so this stays within the files being written.
    pub fn files(&self) -> usize {
        self.runs.len()
    }

    /// Stores the run of `path`; on failure it stays buffered.
    async fn store(&self, path: &str, run: &mut Option<Run>) -> Result<()> {
        let Some(r) = run.take() else { return Ok(()) };
        let len = r.data.len() as u64;
        let data = r.data.freeze();
        if let Err(e) = self.inner.write(path, r.start, data.clone()).await {
            *run = Some(Run {
                start: r.start,
                data: BytesMut::from(&data[..]),
            });
            return Err(e);
        }
        self.buffered.fetch_sub(len, Ordering::AcqRel);
        Ok(())
    }

    /// Writes the buffered run of `path` through.
    pub async fn flush(&self, path: &str) -> Result<()> {
        let Some(slot) = self.runs.get(path) else {
            return Ok(());
        };
        let mut run = slot.lock().await;
        self.store(path, &mut run).await?;
        self.runs.retire(path, &slot);
        Ok(())
    }

    /// Writes every buffered run through: each is tried, and the first
    /// failure is returned (the failed runs stay buffered).
    pub async fn flush_all(&self) -> Result<()> {
        let mut first = Ok(());
        for path in self.runs.paths() {
            first = first.and(self.flush(&path).await);
        }
        first
    }
}

#[async_trait]
impl FileMapper for Aggregator {
    async fn flush(&self, path: &str) -> Result<()> {
        Aggregator::flush(self, path).await?;
        self.inner.flush(path).await
    }

    async fn flush_all(&self) -> Result<()> {
        let runs = Aggregator::flush_all(self).await;
        runs.and(self.inner.flush_all().await)
    }

    async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<()> {
        let len = data.len() as u64;
        if len == 0 || len >= self.max_run {
            self.flush(path).await?;
            return self.inner.write(path, offset, data).await;
        }
        // Slots are retired when emptied, never evicted while they hold a run.
        let slot = self.runs.get_or_insert(path, usize::MAX, Option::is_none);
        let mut run = slot.lock().await;
        let fits = run.as_ref().is_some_and(|r| {
            let end = r.start + r.data.len() as u64;
            offset >= r.start
                && offset <= end
                && offset.saturating_add(len).max(end) - r.start <= self.max_run
        });
        if !fits {
            self.store(path, &mut run).await?;
        }
        let r = run.get_or_insert_with(|| Run {
            start: offset,
            data: BytesMut::new(),
        });
        let at = (offset - r.start) as usize;
        let grow = (at + data.len()).saturating_sub(r.data.len());
        if grow > 0 {
            r.data.resize(at + data.len(), 0);
            self.buffered.fetch_add(grow as u64, Ordering::AcqRel);
        }
        r.data[at..at + data.len()].copy_from_slice(&data);
        if r.data.len() as u64 >= self.max_run {
            self.store(path, &mut run).await?;
        }
        drop(run);
        if self.buffered() > self.max_buffered {
            self.flush_all().await?;
        }
        Ok(())
    }

    async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        self.flush(path).await?;
        self.inner.read(path, offset, len).await
    }

    async fn stat(&self, path: &str) -> Result<Option<Stat>> {
        self.flush(path).await?;
        self.inner.stat(path).await
    }

    async fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        self.flush_all().await?;
        self.inner.list(dir).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        let mut dropped = false;
        if let Some(slot) = self.runs.get(path) {
            let mut run = slot.lock().await;
            if let Some(r) = run.take() {
                self.buffered
                    .fetch_sub(r.data.len() as u64, Ordering::AcqRel);
                dropped = true;
            }
            self.runs.retire(path, &slot);
        }
        match self.inner.remove(path).await {
            // The file existed only in our buffer.
            Err(Error::NotFound(_)) if dropped => Ok(()),
            r => r,
        }
    }
}
