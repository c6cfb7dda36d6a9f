//! The virtual file of IRIS (3.3): what a files-over-objects mapping knows
//! about one file, and the parts every such mapping shares.
//!
//! A mapped file `PATH` is kept as objects under `PATH/.labios/`: a
//! metadata object `PATH/.labios/meta` (its presence is the file's
//! existence) and the data objects of its layout ([`Layout`]). Listing and
//! stat show `PATH` as a plain file of its logical size and hide the rest;
//! plain objects that no mapping wrote are not part of a mapped mount's
//! namespace and are not shown.
//!
//! Metadata follows one of two modes (IRIS 3.4.3, [`MetadataMode`]).
//! Either way one process at a time writes a given file: the store offers
//! no conditional writes to arbitrate two writers.

use crate::mapping::{storage_error, Entry, FileMapper, Stat};
use crate::slots::{Slot, Slots};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use labios_label::{Error, Result};
pub use labios_mounts::MetadataMode;
use opendal::{ErrorKind, Operator};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The reserved name of the folder holding a file's objects.
pub const INTERNAL: &str = ".labios";

/// Requests a mapper keeps in flight at once for one call.
pub(crate) const PARALLEL: usize = 8;

/// Beyond this many files, idle and clean cached states are dropped.
const CACHED_FILES: usize = 1024;

/// When relaxed metadata is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relaxed {
    /// Store after this many unstored writes of a file.
    pub every: u32,
    /// Store at the latest this long after a file's first unstored write;
    /// also how long a clean cached state is trusted before it is re-read.
    pub delay: Duration,
}

impl Default for Relaxed {
    fn default() -> Self {
        Relaxed {
            every: 64,
            delay: Duration::from_secs(1),
        }
    }
}

/// A file's metadata object. Text, one `key value` per line, so that an
/// operator can read it with any S3 client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The layout that wrote the file: another one refuses to read it.
    pub mapping: String,
    pub size: u64,
    pub mtime_ns: u64,
    /// Writes so far; orders the write-optimized log and tells a strict
    /// reader whether its cached index is current.
    pub seq: u64,
    /// Bucket size the file was written with (0: none); kept per file so
    /// that changing the mount's option does not garble existing files.
    pub bucket: u64,
    /// Bucket granularities (read-optimized).
    pub levels: u32,
}

impl Meta {
    pub fn new(mapping: &str, bucket: u64, levels: u32) -> Meta {
        Meta {
            mapping: mapping.to_string(),
            size: 0,
            mtime_ns: now_ns(),
            seq: 0,
            bucket,
            levels,
        }
    }

    pub fn encode(&self) -> String {
        format!(
            "labios-file 1\nmapping {}\nsize {}\nmtime_ns {}\nseq {}\nbucket {}\nlevels {}\n",
            self.mapping, self.size, self.mtime_ns, self.seq, self.bucket, self.levels
        )
    }

    pub fn decode(path: &str, text: &[u8]) -> Result<Meta> {
        let bad = |why: &str| Error::Malformed(format!("metadata of {path}: {why}"));
        let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8"))?;
        let mut fields = HashMap::new();
        for line in text.lines() {
            let (k, v) = line.split_once(' ').ok_or_else(|| bad(line))?;
            fields.insert(k, v);
        }
        if fields.get("labios-file") != Some(&"1") {
            return Err(bad("not a version 1 labios-file"));
        }
        let num = |k: &str| -> Result<u64> {
            fields
                .get(k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(&format!("no numeric {k}")))
        };
        Ok(Meta {
            mapping: fields
                .get("mapping")
                .ok_or_else(|| bad("no mapping"))?
                .to_string(),
            size: num("size")?,
            mtime_ns: num("mtime_ns")?,
            seq: num("seq")?,
            bucket: num("bucket")?,
            levels: num("levels")? as u32,
        })
    }

    fn stat(&self) -> Stat {
        Stat {
            size: self.size,
            dir: false,
            mtime: Some(UNIX_EPOCH + Duration::from_nanos(self.mtime_ns)),
        }
    }
}

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `PATH/.labios/`: the prefix of every object of file `path`.
pub fn internal_dir(path: &str) -> String {
    format!("{path}/{INTERNAL}/")
}

/// Where a mapping puts a file's bytes.
#[async_trait]
pub trait Layout: Send + Sync + std::fmt::Debug + 'static {
    /// What a layout keeps in memory per file beside its metadata.
    type Index: Default + Clone + Send + Sync + std::fmt::Debug;

    /// The name recorded in each file's metadata.
    fn name(&self) -> &'static str;

    /// The metadata of a new, empty file.
    fn new_meta(&self) -> Meta;

    /// Rebuilds the index of a file that exists in the store; may correct
    /// `meta` from what the objects show.
    async fn load_index(
        &self,
        _op: &Operator,
        _path: &str,
        _meta: &mut Meta,
    ) -> Result<Self::Index> {
        Ok(Self::Index::default())
    }

    /// Stores `data` (not empty) at `offset`; `meta` describes the file
    /// before the write. The caller then updates size and sequence.
    async fn write(
        &self,
        op: &Operator,
        path: &str,
        meta: &Meta,
        index: &mut Self::Index,
        offset: u64,
        data: Bytes,
    ) -> Result<()>;

    /// Exactly `len` (> 0) bytes at `offset`, inside the file's size.
    async fn read(
        &self,
        op: &Operator,
        path: &str,
        meta: &Meta,
        index: &Self::Index,
        offset: u64,
        len: u64,
    ) -> Result<Bytes>;
}

/// A file's state as this process knows it.
#[derive(Debug)]
struct State<I> {
    meta: Meta,
    index: Arc<I>,
    /// When the metadata was last read from the store.
    loaded: Instant,
    /// Relaxed: the first write the store's metadata does not show yet.
    dirty_since: Option<Instant>,
    unstored: u32,
}

/// Files over objects with layout `L`: the [`FileMapper`] of the
/// balanced, write-optimized and read-optimized mappings.
#[derive(Debug)]
pub struct VirtualFiles<L: Layout> {
    inner: Arc<Inner<L>>,
}

#[derive(Debug)]
struct Inner<L: Layout> {
    op: Operator,
    layout: L,
    mode: MetadataMode,
    relaxed: Relaxed,
    /// One lock per file: writes of a file are serialized in the process
    /// (read-modify-write of buckets), reads only take it to load state.
    files: Slots<Option<State<L::Index>>>,
    flusher: AtomicBool,
}

impl<L: Layout> VirtualFiles<L> {
    pub fn new(op: Operator, layout: L, mode: MetadataMode, relaxed: Relaxed) -> Result<Self> {
        if relaxed.every == 0 {
            return Err(Error::InvalidArgument(
                "relaxed metadata: `every` must be at least 1 write".into(),
            ));
        }
        Ok(VirtualFiles {
            inner: Arc::new(Inner {
                op,
                layout,
                mode,
                relaxed,
                files: Default::default(),
                flusher: AtomicBool::new(false),
            }),
        })
    }

    pub fn layout(&self) -> &L {
        &self.inner.layout
    }

    /// Stores the relaxed metadata of `path` now (IRIS stores it at
    /// `fclose()`); nothing to do in strict mode.
    pub async fn flush(&self, path: &str) -> Result<()> {
        if let Some(slot) = self.inner.files.get(path) {
            let mut g = slot.lock().await;
            self.inner.store_meta(path, &mut g).await?;
        }
        Ok(())
    }

    /// Stores the relaxed metadata of every file.
    pub async fn flush_all(&self) -> Result<()> {
        flush_dirty(&self.inner, Duration::ZERO).await
    }
}

impl<L: Layout> Inner<L> {
    /// The slot of `path`; past [`CACHED_FILES`], clean states nobody
    /// holds are dropped (unstored relaxed metadata never is).
    fn slot(&self, path: &str) -> Slot<Option<State<L::Index>>> {
        self.files.get_or_insert(path, CACHED_FILES, |state| {
            state.as_ref().is_none_or(|s| s.dirty_since.is_none())
        })
    }

    async fn read_meta(&self, path: &str) -> Result<Option<Meta>> {
        let key = format!("{}meta", internal_dir(path));
        match self.op.read(&key).await {
            Ok(buf) => {
                let meta = Meta::decode(path, &buf.to_bytes())?;
                if meta.mapping != self.layout.name() {
                    return Err(Error::InvalidArgument(format!(
                        "{path} was written by the {} mapping, this mount uses {}",
                        meta.mapping,
                        self.layout.name()
                    )));
                }
                Ok(Some(meta))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(storage_error(path, e)),
        }
    }

    /// Brings `state` up to date with the store as the mode requires;
    /// `force` re-reads even a relaxed state (an object it named vanished).
    async fn load(
        &self,
        path: &str,
        state: &mut Option<State<L::Index>>,
        force: bool,
    ) -> Result<()> {
        if let (MetadataMode::Relaxed, Some(s)) = (self.mode, state.as_ref()) {
            if !force && (s.dirty_since.is_some() || s.loaded.elapsed() < self.relaxed.delay) {
                return Ok(());
            }
        }
        let Some(mut meta) = self.read_meta(path).await? else {
            *state = None;
            return Ok(());
        };
        if let Some(s) = state.as_mut() {
            if !force && s.meta.seq == meta.seq {
                s.meta = meta;
                s.loaded = Instant::now();
                return Ok(());
            }
        }
        let index = self.layout.load_index(&self.op, path, &mut meta).await?;
        *state = Some(State {
            meta,
            index: Arc::new(index),
            loaded: Instant::now(),
            dirty_since: None,
            unstored: 0,
        });
        Ok(())
    }

    async fn store_meta(&self, path: &str, state: &mut Option<State<L::Index>>) -> Result<()> {
        let Some(s) = state.as_mut() else {
            return Ok(());
        };
        if s.dirty_since.is_none() && s.unstored == 0 {
            return Ok(());
        }
        self.put_meta(path, &s.meta).await?;
        s.dirty_since = None;
        s.unstored = 0;
        Ok(())
    }

    async fn put_meta(&self, path: &str, meta: &Meta) -> Result<()> {
        let key = format!("{}meta", internal_dir(path));
        crate::mapping::put_object(&self.op, path, &key, Bytes::from(meta.encode())).await
    }

    /// True when `path` is a directory: something other than a file's own
    /// objects lies under it.
    async fn is_dir(&self, path: &str) -> Result<bool> {
        if path.is_empty() {
            return Ok(true);
        }
        let dir = format!("{path}/");
        let mut lister = match self.op.lister(&dir).await {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(storage_error(path, e)),
        };
        while let Some(e) = lister
            .try_next()
            .await
            .map_err(|e| storage_error(path, e))?
        {
            let p = e.path();
            if p != dir && p.trim_start_matches(&dir).trim_end_matches('/') != INTERNAL {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Stores the metadata of files unstored for at least `age`: each is
/// tried, and the first failure is returned (the failed ones stay dirty).
async fn flush_dirty<L: Layout>(inner: &Inner<L>, age: Duration) -> Result<()> {
    let mut first = Ok(());
    for path in inner.files.paths() {
        let Some(slot) = inner.files.get(&path) else {
            continue;
        };
        let mut g = slot.lock().await;
        if g.as_ref()
            .and_then(|s| s.dirty_since)
            .is_some_and(|t| t.elapsed() >= age)
        {
            first = first.and(inner.store_meta(&path, &mut g).await);
        }
    }
    first
}

/// The background task that bounds how late relaxed metadata is stored.
/// It holds the mapper weakly and ends with it.
fn start_flusher<L: Layout>(inner: &Arc<Inner<L>>) {
    if inner.flusher.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        inner.flusher.store(false, Ordering::Release);
        return;
    };
    let weak: Weak<Inner<L>> = Arc::downgrade(inner);
    let period = (inner.relaxed.delay / 2).max(Duration::from_millis(10));
    // Stored once `delay - period` old, so at most `delay` after the write.
    let age = inner.relaxed.delay.saturating_sub(period);
    rt.spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            let Some(inner) = weak.upgrade() else { return };
            if let Err(e) = flush_dirty(&inner, age).await {
                tracing::warn!("storing relaxed file metadata: {e}");
            }
        }
    });
}

/// Refuses paths a mapping cannot hold: the root and its own folders.
pub(crate) fn check_path(path: &str) -> Result<()> {
    let reason = if path.is_empty() {
        "a file needs a name"
    } else if path.split('/').any(|p| p == INTERNAL) {
        "`.labios` is reserved for the objects of mapped files"
    } else {
        return Ok(());
    };
    Err(Error::InvalidPath {
        path: path.to_string(),
        reason: reason.into(),
    })
}

#[async_trait]
impl<L: Layout> FileMapper for VirtualFiles<L> {
    async fn flush(&self, path: &str) -> Result<()> {
        VirtualFiles::flush(self, path).await
    }

    async fn flush_all(&self) -> Result<()> {
        VirtualFiles::flush_all(self).await
    }

    async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<()> {
        check_path(path)?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| Error::InvalidArgument(format!("{path}: write past 2^64 bytes")))?;
        let inner = &self.inner;
        let slot = inner.slot(path);
        let mut g = slot.lock().await;
        inner.load(path, &mut g, false).await?;
        let created = g.is_none();
        let s = g.get_or_insert_with(|| State {
            meta: inner.layout.new_meta(),
            index: Default::default(),
            loaded: Instant::now(),
            dirty_since: None,
            unstored: 0,
        });
        if !data.is_empty() {
            let index = Arc::make_mut(&mut s.index);
            let written = inner
                .layout
                .write(&inner.op, path, &s.meta, index, offset, data)
                .await;
            if let Err(e) = written {
                if created {
                    *g = None;
                }
                return Err(e);
            }
            s.meta.size = s.meta.size.max(end);
            s.meta.seq += 1;
            s.meta.mtime_ns = now_ns();
        } else if !created {
            return Ok(());
        }
        s.unstored += 1;
        s.dirty_since.get_or_insert_with(Instant::now);
        // A new file is stored at once in either mode, so that other
        // processes see that it exists.
        if created || inner.mode == MetadataMode::Strict || s.unstored >= inner.relaxed.every {
            inner.store_meta(path, &mut g).await
        } else {
            start_flusher(inner);
            Ok(())
        }
    }

    async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        let inner = &self.inner;
        let slot = inner.slot(path);
        for attempt in 0..2 {
            let (meta, index) = {
                let mut g = slot.lock().await;
                inner.load(path, &mut g, attempt > 0).await?;
                let s = g
                    .as_ref()
                    .ok_or_else(|| Error::NotFound(path.to_string()))?;
                (s.meta.clone(), s.index.clone())
            };
            if offset >= meta.size || len == 0 {
                return Ok(Bytes::new());
            }
            let len = len.min(meta.size - offset);
            match inner
                .layout
                .read(&inner.op, path, &meta, &index, offset, len)
                .await
            {
                // Another process replaced objects our state names.
                Err(Error::NotFound(_)) if attempt == 0 => continue,
                r => return r,
            }
        }
        Err(Error::NotFound(path.to_string()))
    }

    async fn stat(&self, path: &str) -> Result<Option<Stat>> {
        let inner = &self.inner;
        if path.split('/').any(|p| p == INTERNAL) {
            return Ok(None);
        }
        if !path.is_empty() {
            let slot = inner.slot(path);
            let mut g = slot.lock().await;
            inner.load(path, &mut g, false).await?;
            if let Some(s) = g.as_ref() {
                return Ok(Some(s.meta.stat()));
            }
        }
        Ok(inner.is_dir(path).await?.then_some(Stat {
            size: 0,
            dir: true,
            mtime: None,
        }))
    }

    async fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        let dir = match dir.trim_matches('/') {
            "" => String::new(),
            d if d.split('/').any(|p| p == INTERNAL) => return Ok(Vec::new()),
            d => format!("{d}/"),
        };
        let listed = match self.inner.op.list(&dir).await {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(storage_error(&dir, e)),
        };
        // Files and directories are both prefixes (`NAME/`); plain objects
        // are not ours. The listed directory itself is no entry of it (a
        // file system lists its root as `/`).
        let names: Vec<String> = listed
            .iter()
            .map(|e| e.path())
            .filter(|p| p.ends_with('/') && p.trim_matches('/') != dir.trim_end_matches('/'))
            .map(|p| p.trim_end_matches('/').to_string())
            .filter(|p| p.rsplit('/').next() != Some(INTERNAL))
            .collect();
        let mut out: Vec<Entry> = futures::stream::iter(names)
            .map(|path| async move {
                let stat = self.stat(&path).await?;
                Ok::<_, Error>(stat.map(|stat| Entry { path, stat }))
            })
            .buffer_unordered(PARALLEL * 2)
            .try_filter_map(|e| async move { Ok(e) })
            .try_collect()
            .await?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    async fn remove(&self, path: &str) -> Result<()> {
        check_path(path)?;
        let inner = &self.inner;
        let slot = inner.slot(path);
        let mut g = slot.lock().await;
        inner.load(path, &mut g, true).await?;
        if g.take().is_none() {
            return Err(Error::NotFound(path.to_string()));
        }
        // The metadata first: once it is gone the file is, for everyone.
        let objects = internal_dir(path);
        inner
            .op
            .delete(&format!("{objects}meta"))
            .await
            .map_err(|e| storage_error(path, e))?;
        inner
            .op
            .remove_all(&objects)
            .await
            .map_err(|e| storage_error(path, e))?;
        // A file system keeps the file's emptied folder; if a directory
        // appeared under the name meanwhile, it stays.
        let _ = inner.op.delete(&format!("{path}/")).await;
        inner.files.retire(path, &slot);
        Ok(())
    }
}

/// The zeros a missing object (a hole in a sparse file) stands for.
pub(crate) fn or_zeros(r: opendal::Result<opendal::Buffer>, path: &str, len: u64) -> Result<Bytes> {
    match r {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Bytes::from(vec![0; len as usize])),
        Err(e) => Err(storage_error(path, e)),
    }
}
