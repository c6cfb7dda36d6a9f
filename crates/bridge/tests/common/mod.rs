//! Checks every files-over-objects mapping must pass on every backend, and
//! helpers shared by the memory/fs and S3 suites.
#![allow(dead_code)] // each suite uses its own share of the helpers

use async_trait::async_trait;
use bytes::Bytes;
use labios_bridge::{Entry, FileMapper, MapperOptions, Mapping, MetadataMode, Relaxed, Stat};
use labios_label::{Error, Result};
use opendal::Operator;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Small buckets, so that short test files cross many boundaries.
pub fn options(metadata: MetadataMode) -> MapperOptions {
    MapperOptions {
        bucket_size: 16,
        levels: 3,
        metadata,
        relaxed: Relaxed {
            every: 3,
            delay: Duration::from_secs(3600),
        },
    }
}

/// Every mapping in every metadata mode over `op`, each named.
pub fn all_mappers(op: &Operator) -> Vec<(String, Arc<dyn FileMapper>)> {
    let mut out = vec![(
        "direct".to_string(),
        labios_bridge::mapping::mapper(Mapping::Direct, op.clone()),
    )];
    for mapping in [
        Mapping::Balanced,
        Mapping::WriteOptimized,
        Mapping::ReadOptimized,
    ] {
        for mode in [MetadataMode::Strict, MetadataMode::Relaxed] {
            let m = options(mode).mapper(mapping, op.clone()).unwrap();
            out.push((format!("{mapping:?}/{mode:?}"), m));
        }
    }
    out
}

/// A tiny deterministic generator: the suites need no random crate.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if n == 0 {
            0
        } else {
            (self.0 >> 33) % n
        }
    }

    pub fn bytes(&mut self, n: u64) -> Bytes {
        (0..n)
            .map(|_| self.below(256) as u8)
            .collect::<Vec<_>>()
            .into()
    }
}

fn names(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|e| e.path.as_str()).collect()
}

/// POSIX semantics of one mapper, in the folder `base` (empty for a
/// fresh store).
pub async fn conformance(name: &str, m: &dyn FileMapper, base: &str) {
    let p = |s: &str| format!("{base}{s}");
    let f = p("d/f");
    let ctx = |what: &str| format!("{name}: {what}");

    // Overwrites at the start and in the middle, an append.
    m.write(&f, 0, Bytes::from_static(b"hello world"))
        .await
        .unwrap();
    m.write(&f, 11, Bytes::from_static(b"!")).await.unwrap();
    m.write(&f, 0, Bytes::from_static(b"J")).await.unwrap();
    m.write(&f, 4, Bytes::from_static(b"XYZ")).await.unwrap();
    assert_eq!(
        m.read(&f, 0, 100).await.unwrap(),
        &b"JellXYZorld!"[..],
        "{}",
        ctx("overwrite")
    );

    // Sparse extension: the gap reads as zeros, across bucket boundaries.
    m.write(&f, 40, Bytes::from_static(b"x")).await.unwrap();
    let mut want = b"JellXYZorld!".to_vec();
    want.resize(40, 0);
    want.push(b'x');
    assert_eq!(
        m.read(&f, 0, 1000).await.unwrap(),
        want,
        "{}",
        ctx("sparse")
    );
    assert_eq!(
        m.read(&f, 10, 25).await.unwrap(),
        want[10..35],
        "{}",
        ctx("read across buckets")
    );

    // Truncated reads at and past the end.
    assert_eq!(
        m.read(&f, 38, 100).await.unwrap(),
        &want[38..],
        "{}",
        ctx("read at EOF")
    );
    assert!(
        m.read(&f, 41, 5).await.unwrap().is_empty(),
        "{}",
        ctx("read past EOF")
    );
    assert!(
        m.read(&f, 5, 0).await.unwrap().is_empty(),
        "{}",
        ctx("empty read")
    );

    // Stat shows a plain file of its logical size, and its folder.
    let s = m.stat(&f).await.unwrap().unwrap();
    assert_eq!((s.size, s.dir), (41, false), "{}", ctx("stat"));
    assert!(
        m.stat(&p("d")).await.unwrap().unwrap().dir,
        "{}",
        ctx("stat dir")
    );
    assert_eq!(
        m.stat(&p("d/none")).await.unwrap(),
        None,
        "{}",
        ctx("stat missing")
    );

    // Listing hides every internal object.
    m.write(&p("d/sub/g"), 0, Bytes::from_static(b"g"))
        .await
        .unwrap();
    m.write(&p("d/e"), 0, Bytes::from_static(b"0123456789abcdefXYZ"))
        .await
        .unwrap();
    let listed = m.list(&p("d")).await.unwrap();
    assert_eq!(
        names(&listed),
        [p("d/e"), p("d/f"), p("d/sub")],
        "{}",
        ctx("list")
    );
    let sizes: Vec<(u64, bool)> = listed.iter().map(|e| (e.stat.size, e.stat.dir)).collect();
    assert_eq!(
        sizes,
        [(19, false), (41, false), (0, true)],
        "{}",
        ctx("list sizes")
    );
    assert_eq!(
        names(&m.list(&p("d/sub")).await.unwrap()),
        [p("d/sub/g")],
        "{}",
        ctx("list sub")
    );
    if !base.is_empty() {
        assert_eq!(
            names(&m.list(base).await.unwrap()),
            [p("d")],
            "{}",
            ctx("list base")
        );
    }
    assert!(
        m.list(&f).await.unwrap().is_empty(),
        "{}",
        ctx("a file lists nothing")
    );

    // Model check: random writes and reads against a plain byte vector.
    let r = p("d/random");
    let mut model: Vec<u8> = Vec::new();
    let mut rng = Lcg(name.len() as u64);
    for step in 0..30 {
        let off = rng.below(model.len() as u64 + 40);
        let n = 1 + rng.below(50);
        let data = rng.bytes(n);
        m.write(&r, off, data.clone()).await.unwrap();
        let end = off as usize + data.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&data);
        let ro = rng.below(model.len() as u64 + 10) as usize;
        let rl = rng.below(90) as usize;
        let want = &model[ro.min(model.len())..(ro + rl).min(model.len())];
        let got = m.read(&r, ro as u64, rl as u64).await.unwrap();
        assert_eq!(
            got,
            want,
            "{}",
            ctx(&format!("random step {step}: read {ro}+{rl}"))
        );
    }
    assert_eq!(
        m.read(&r, 0, u64::MAX).await.unwrap(),
        model,
        "{}",
        ctx("random whole")
    );
    assert_eq!(
        m.stat(&r).await.unwrap().unwrap().size,
        model.len() as u64,
        "{}",
        ctx("random size")
    );

    // Remove deletes the file and all its objects.
    for file in [&f, &r, &p("d/e"), &p("d/sub/g")] {
        m.remove(file).await.unwrap();
    }
    assert!(
        matches!(m.remove(&f).await, Err(Error::NotFound(_))),
        "{}",
        ctx("remove twice")
    );
    assert!(
        matches!(m.read(&f, 0, 1).await, Err(Error::NotFound(_))),
        "{}",
        ctx("read removed")
    );
    assert_eq!(m.stat(&f).await.unwrap(), None, "{}", ctx("stat removed"));
    // (File systems may keep emptied folders.)
    let left = m.list(&p("d")).await.unwrap();
    assert!(
        left.iter().all(|e| e.stat.dir),
        "{}: {left:?}",
        ctx("list after remove")
    );
}

/// Counts the calls that reach a real mapper underneath.
#[derive(Debug)]
pub struct Counting {
    pub inner: Arc<dyn FileMapper>,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub bytes_read: AtomicU64,
}

impl Counting {
    pub fn new(inner: Arc<dyn FileMapper>) -> Arc<Counting> {
        Arc::new(Counting {
            inner,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
        })
    }

    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl FileMapper for Counting {
    async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.write(path, offset, data).await
    }

    async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let b = self.inner.read(path, offset, len).await?;
        self.bytes_read.fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(b)
    }

    async fn stat(&self, path: &str) -> Result<Option<Stat>> {
        self.inner.stat(path).await
    }

    async fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        self.inner.list(dir).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        self.inner.remove(path).await
    }
}

/// Strict metadata is exact for another process at once; relaxed shows
/// growth only once stored (every `every` writes, or at flush).
pub async fn metadata_modes(op: &Operator, base: &str) {
    let seen_by_other = |path: String| {
        // Another process: its own mapper, strict so it caches nothing.
        let other = options(MetadataMode::Strict).balanced(op.clone()).unwrap();
        async move { other.stat(&path).await.unwrap().map(|s| s.size) }
    };
    let f = format!("{base}strict");
    let strict = options(MetadataMode::Strict).balanced(op.clone()).unwrap();
    strict
        .write(&f, 0, Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    strict
        .write(&f, 10, Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    assert_eq!(seen_by_other(f.clone()).await, Some(20));

    let f = format!("{base}relaxed");
    let relaxed = options(MetadataMode::Relaxed).balanced(op.clone()).unwrap();
    // Creation is stored at once, so the file exists for others...
    relaxed
        .write(&f, 0, Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    assert_eq!(seen_by_other(f.clone()).await, Some(10));
    // ...its growth only later: the writer knows, others do not yet.
    relaxed
        .write(&f, 10, Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    relaxed
        .write(&f, 20, Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    assert_eq!(relaxed.stat(&f).await.unwrap().unwrap().size, 30);
    assert_eq!(seen_by_other(f.clone()).await, Some(10));
    // The third unstored write (every = 3) stores it.
    relaxed
        .write(&f, 30, Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    assert_eq!(seen_by_other(f.clone()).await, Some(40));
    relaxed
        .write(&f, 40, Bytes::from_static(b"01234"))
        .await
        .unwrap();
    assert_eq!(seen_by_other(f.clone()).await, Some(40));
    relaxed.flush(&f).await.unwrap();
    assert_eq!(seen_by_other(f.clone()).await, Some(45));
    // The data was stored all along: after the flush, all of it reads back.
    let other = options(MetadataMode::Strict).balanced(op.clone()).unwrap();
    assert_eq!(other.read(&f, 38, 10).await.unwrap(), &b"8901234"[..]);
}

/// Holds calls to a real mapper at a chosen step, so that a test can put
/// another call exactly in the window a race needs: writes wait before
/// they reach the mapper, reads after they got its bytes.
#[derive(Debug)]
pub struct Gate {
    pub inner: Arc<dyn FileMapper>,
    /// Calls held now: a test waits for one to arrive.
    pub held: tokio::sync::watch::Sender<u32>,
    closed: parking_lot::Mutex<Option<(Hold, Arc<tokio::sync::Semaphore>)>>,
}

/// Which calls a closed [`Gate`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    Writes,
    Reads,
}

impl Gate {
    pub fn new(inner: Arc<dyn FileMapper>) -> Arc<Gate> {
        Arc::new(Gate {
            inner,
            held: tokio::sync::watch::channel(0).0,
            closed: Default::default(),
        })
    }

    /// From now on every call of kind `hold` waits at the gate.
    pub fn close(&self, hold: Hold) {
        *self.closed.lock() = Some((hold, Arc::new(tokio::sync::Semaphore::new(0))));
    }

    /// Lets every held call and all later ones through.
    pub fn open(&self) {
        if let Some((_, s)) = self.closed.lock().take() {
            s.close();
        }
    }

    /// Waits until `n` calls are held.
    pub async fn until_held(&self, n: u32) {
        let mut rx = self.held.subscribe();
        rx.wait_for(|&h| h >= n).await.unwrap();
    }

    async fn pass(&self, call: Hold) {
        let s = match self.closed.lock().clone() {
            Some((hold, s)) if hold == call => s,
            _ => return,
        };
        self.held.send_modify(|h| *h += 1);
        // Closed (opened) is the only way out.
        let _ = s.acquire().await;
        self.held.send_modify(|h| *h -= 1);
    }
}

#[async_trait]
impl FileMapper for Gate {
    async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<()> {
        self.pass(Hold::Writes).await;
        self.inner.write(path, offset, data).await
    }

    async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        let b = self.inner.read(path, offset, len).await;
        self.pass(Hold::Reads).await;
        b
    }

    async fn stat(&self, path: &str) -> Result<Option<Stat>> {
        self.inner.stat(path).await
    }

    async fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        self.inner.list(dir).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        self.inner.remove(path).await
    }
}
