//! A caching, prefetching [`FileMapper`] over any other (IRIS 3.4.2,
//! 3.4.4): reads are served in blocks from a [`BlockCache`], and the
//! [`Prefetcher`]'s guesses are fetched with them (read-ahead, IRIS's
//! synchronous mode): a sequential guess extends the read's own request,
//! strided guesses go out beside it. Writes and removes through the
//! wrapper invalidate what they change; changes made by other processes
//! are seen once their blocks are evicted, so cache files that one
//! process writes, or that nobody changes.

use crate::cache::{BlockCache, CacheStats, Policy};
use crate::mapping::{Entry, FileMapper, Stat};
use crate::prefetch::Prefetcher;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use labios_label::{Error, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Stripes of the change counters; files sharing one only cache less.
const EPOCHS: usize = 64;

#[derive(Debug)]
pub struct Cached {
    inner: Arc<dyn FileMapper>,
    block: u64,
    cache: parking_lot::Mutex<BlockCache>,
    prefetcher: parking_lot::Mutex<Prefetcher>,
    /// Changes through this wrapper, by stripe of the file's name. A fetch
    /// that began before a change ended may hold the old bytes: it caches
    /// nothing if its stripe's count moved meanwhile, else a read after an
    /// acknowledged write could be served the bytes it replaced.
    epochs: [AtomicU64; EPOCHS],
}

impl Cached {
    /// Caches `inner` in blocks of `block` bytes, at most `capacity` bytes,
    /// fetching `depth` reads ahead of recognized patterns.
    pub fn new(
        inner: Arc<dyn FileMapper>,
        policy: Policy,
        block: u64,
        capacity: u64,
        depth: u32,
    ) -> Result<Cached> {
        if block == 0 {
            return Err(Error::InvalidArgument(
                "cache block size must be at least 1 byte".into(),
            ));
        }
        Ok(Cached {
            inner,
            block,
            cache: parking_lot::Mutex::new(BlockCache::new(policy, capacity)),
            prefetcher: parking_lot::Mutex::new(Prefetcher::new(depth)),
            epochs: std::array::from_fn(|_| AtomicU64::new(0)),
        })
    }

    fn epoch(&self, path: &str) -> &AtomicU64 {
        &self.epochs[(crate::containers::fnv1a(path.as_bytes()) % EPOCHS as u64) as usize]
    }

    /// Forgets cached blocks `first..=last` of `path` after a change, so
    /// that no fetch still in flight caches what the change replaced.
    fn changed(&self, path: &str, blocks: Option<(u64, u64)>) {
        let mut cache = self.cache.lock();
        self.epoch(path).fetch_add(1, Ordering::AcqRel);
        match blocks {
            Some((first, last)) => cache.invalidate(path, first, last, self.block),
            None => cache.forget(path),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.cache.lock().stats()
    }

    /// Fetches blocks `first..=last` in one request and caches them;
    /// returns those that exist (the file may end before `last`).
    async fn fetch(&self, path: &str, first: u64, last: u64) -> Result<Vec<(u64, Bytes)>> {
        let bs = self.block;
        let epoch = self.epoch(path).load(Ordering::Acquire);
        let data = self
            .inner
            .read(path, first * bs, (last - first + 1) * bs)
            .await?;
        let mut out = Vec::new();
        for (n, chunk) in data.chunks(bs as usize).enumerate() {
            out.push((first + n as u64, data.slice_ref(chunk)));
        }
        // A file ending on a block boundary: the empty block after it says so.
        if (data.len() as u64) < (last - first + 1) * bs && (data.len() as u64).is_multiple_of(bs) {
            out.push((first + data.len() as u64 / bs, Bytes::new()));
        }
        let mut cache = self.cache.lock();
        if self.epoch(path).load(Ordering::Acquire) == epoch {
            for (i, b) in &out {
                cache.insert(path, *i, b.clone());
            }
        }
        Ok(out)
    }
}

/// Runs of consecutive blocks of `first..=last` for which `lacks` holds.
fn runs(first: u64, last: u64, lacks: impl Fn(u64) -> bool) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for i in (first..=last).filter(|&i| lacks(i)) {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => runs.push((i, i)),
        }
    }
    runs
}

#[async_trait]
impl FileMapper for Cached {
    async fn flush(&self, path: &str) -> Result<()> {
        self.inner.flush(path).await
    }

    async fn flush_all(&self) -> Result<()> {
        self.inner.flush_all().await
    }

    async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<()> {
        let end = offset.saturating_add(data.len() as u64);
        let r = self.inner.write(path, offset, data).await;
        let bs = self.block;
        self.changed(
            path,
            Some((offset / bs, end.saturating_sub(1).max(offset) / bs)),
        );
        r
    }

    async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        if len == 0 {
            return self.inner.read(path, offset, 0).await;
        }
        let bs = self.block;
        let end = offset.saturating_add(len);
        let (first, last) = (offset / bs, (end - 1) / bs);
        let (_, ahead) = self.prefetcher.lock().on_read(path, offset, len);
        // Cached blocks first: counted as hits, and safe from eviction by
        // this read's own fetches.
        let mut have = BTreeMap::new();
        {
            let mut cache = self.cache.lock();
            for i in first..=last {
                if let Some(b) = cache.get(path, i) {
                    have.insert(i, b);
                }
            }
        }
        let mut demand = runs(first, last, |i| !have.contains_key(&i));
        let mut extra = Vec::new();
        for r in ahead {
            let (a, b) = (r.start / bs, (r.end.max(r.start + 1) - 1) / bs);
            let cache = self.cache.lock();
            // Still inside what an earlier guess fetched: wait until the
            // reads reach its end, then fetch the next window in one go.
            if have.contains_key(&a) || cache.contains(path, a) {
                continue;
            }
            let guess = runs(a, b, |i| !have.contains_key(&i) && !cache.contains(path, i));
            drop(cache);
            for run in guess {
                match demand.last_mut() {
                    // Read-ahead right after the read: one request.
                    Some((_, e)) if *e + 1 == run.0 && *e == last => *e = run.1,
                    _ if run.0 > last || run.1 < first => extra.push(run),
                    _ => {}
                }
            }
        }
        let demand =
            futures::future::try_join_all(demand.iter().map(|&(a, b)| self.fetch(path, a, b)));
        // Guesses may point past the end of the file: their errors do not matter.
        let guesses = futures::future::join_all(extra.iter().map(|&(a, b)| self.fetch(path, a, b)));
        let (fetched, _) = futures::join!(demand, guesses);
        for (i, b) in fetched?.into_iter().flatten() {
            have.entry(i).or_insert(b);
        }
        let mut out = BytesMut::with_capacity(len as usize);
        for i in first..=last {
            let Some(b) = have.get(&i) else { break };
            let from = if i == first {
                (offset - i * bs) as usize
            } else {
                0
            };
            let to = ((end - i * bs) as usize).min(b.len());
            if from < to {
                out.extend_from_slice(&b[from..to]);
            }
            if (b.len() as u64) < bs {
                break;
            }
        }
        Ok(out.freeze())
    }

    async fn stat(&self, path: &str) -> Result<Option<Stat>> {
        self.inner.stat(path).await
    }

    async fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        self.inner.list(dir).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        let r = self.inner.remove(path).await;
        self.changed(path, None);
        self.prefetcher.lock().forget(path);
        r
    }
}
