//! Files over objects on OpenDAL's memory and fs services, and the
//! prefetching cache and the aggregator over real mappers.

mod common;

use bytes::Bytes;
use common::{all_mappers, conformance, metadata_modes, options, Counting, Gate, Hold, Lcg};
use labios_bridge::cache::Policy;
use labios_bridge::{Aggregator, Cached, FileMapper, Mapping, MetadataMode, Relaxed};
use opendal::Operator;
use std::sync::Arc;
use std::time::Duration;

fn memory() -> Operator {
    Operator::new(opendal::services::Memory::default())
        .unwrap()
        .finish()
}

fn fs(dir: &tempfile::TempDir) -> Operator {
    Operator::new(opendal::services::Fs::default().root(dir.path().to_str().unwrap()))
        .unwrap()
        .finish()
}

#[tokio::test]
async fn every_mapping_is_posix_on_memory() {
    for (name, m) in all_mappers(&memory()) {
        conformance(&name, m.as_ref(), "").await;
    }
}

#[tokio::test]
async fn every_mapping_is_posix_on_fs() {
    let dir = tempfile::tempdir().unwrap();
    for (name, m) in all_mappers(&fs(&dir)) {
        conformance(&name, m.as_ref(), "").await;
    }
    // Removing every file left no object behind (folders may stay).
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            assert!(
                e.file_type().unwrap().is_dir(),
                "left behind: {:?}",
                e.path()
            );
            stack.push(e.path());
        }
    }
}

#[tokio::test]
async fn strict_and_relaxed_metadata_differ_as_documented() {
    metadata_modes(&memory(), "").await;
    let dir = tempfile::tempdir().unwrap();
    metadata_modes(&fs(&dir), "m/").await;
}

#[tokio::test]
async fn relaxed_metadata_is_stored_after_the_delay() {
    let op = memory();
    let mut o = options(MetadataMode::Relaxed);
    o.relaxed = Relaxed {
        every: 1000,
        delay: Duration::from_millis(50),
    };
    let writer = o.write_optimized(op.clone()).unwrap();
    writer
        .write("f", 0, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    writer
        .write("f", 3, Bytes::from_static(b"def"))
        .await
        .unwrap();
    let other = options(MetadataMode::Strict)
        .write_optimized(op.clone())
        .unwrap();
    assert_eq!(other.read("f", 0, 10).await.unwrap(), &b"abc"[..]);
    assert_eq!(other.stat("f").await.unwrap().unwrap().size, 3);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(other.stat("f").await.unwrap().unwrap().size, 6);
}

#[tokio::test]
async fn the_layouts_are_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let op = fs(&dir);
    let o = options(MetadataMode::Strict);
    let data = Bytes::from(vec![7u8; 40]);
    o.mapper(Mapping::Balanced, op.clone())
        .unwrap()
        .write("b", 0, data.clone())
        .await
        .unwrap();
    o.mapper(Mapping::ReadOptimized, op.clone())
        .unwrap()
        .write("r", 0, data.clone())
        .await
        .unwrap();
    let w = o.mapper(Mapping::WriteOptimized, op.clone()).unwrap();
    w.write("w", 0, data.clone()).await.unwrap();
    w.write("w", 5, Bytes::from_static(b"zz")).await.unwrap();
    // An overwrite that covers an older object entirely deletes it.
    w.write("w", 0, data.clone()).await.unwrap();
    let mut found: Vec<String> = op
        .list_with("")
        .recursive(true)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| !e.path().ends_with('/'))
        .map(|e| e.path().to_string())
        .collect();
    found.sort();
    let log: Vec<&str> = found
        .iter()
        .filter(|p| p.starts_with("w/.labios/log/"))
        .map(String::as_str)
        .collect();
    assert_eq!(log.len(), 1, "{found:?}");
    assert!(
        log[0].starts_with("w/.labios/log/00000000000000000003-0-40-"),
        "{log:?}"
    );
    let bucketed: Vec<&str> = found
        .iter()
        .filter(|p| !p.starts_with("w/"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        bucketed,
        [
            "b/.labios/0",
            "b/.labios/1",
            "b/.labios/2",
            "b/.labios/meta",
            "r/.labios/g0/0",
            "r/.labios/g0/1",
            "r/.labios/g0/2",
            "r/.labios/g1/0",
            "r/.labios/g1/1",
            "r/.labios/g2/0",
            "r/.labios/meta",
        ]
    );
    // Bucket objects hold the file's bytes: full below the last.
    assert_eq!(
        std::fs::metadata(dir.path().join("b/.labios/1"))
            .unwrap()
            .len(),
        16
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("b/.labios/2"))
            .unwrap()
            .len(),
        8
    );
    let meta = std::fs::read_to_string(dir.path().join("b/.labios/meta")).unwrap();
    assert!(
        meta.contains("mapping balanced\nsize 40\n") && meta.contains("bucket 16\n"),
        "{meta}"
    );
    // A file keeps the bucket size it was written with.
    let mut bigger = options(MetadataMode::Strict);
    bigger.bucket_size = 1024;
    let m = bigger.mapper(Mapping::Balanced, op.clone()).unwrap();
    assert_eq!(m.read("b", 0, 100).await.unwrap(), data);
    // Another mapping refuses the file rather than misreading it.
    let err = w.read("b", 0, 1).await.unwrap_err().to_string();
    assert!(err.contains("written by the balanced mapping"), "{err}");
}

#[tokio::test]
async fn reserved_names_and_bad_options_are_refused() {
    let m = options(MetadataMode::Strict)
        .mapper(Mapping::Balanced, memory())
        .unwrap();
    let err = m
        .write("a/.labios/x", 0, Bytes::from_static(b"x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("reserved"), "{err}");
    assert!(m.write("", 0, Bytes::from_static(b"x")).await.is_err());
    let mut o = options(MetadataMode::Strict);
    o.bucket_size = 0;
    assert!(o
        .mapper(Mapping::Balanced, memory())
        .unwrap_err()
        .to_string()
        .contains("bucket size 0"));
    assert!(o.mapper(Mapping::ReadOptimized, memory()).is_err());
    o.bucket_size = 16;
    o.relaxed.every = 0;
    assert!(o.mapper(Mapping::WriteOptimized, memory()).is_err());
}

#[tokio::test]
async fn large_files_read_back_whole_and_in_parts() {
    // Many buckets at every level (the read plan itself is unit-tested).
    let op = memory();
    let o = options(MetadataMode::Strict);
    let mut rng = Lcg(7);
    let data = rng.bytes(16 * 8 * 3 + 5);
    for mapping in [Mapping::Balanced, Mapping::ReadOptimized] {
        let m = o.mapper(mapping, op.clone()).unwrap();
        let path = format!("{mapping:?}");
        m.write(&path, 0, data.clone()).await.unwrap();
        assert_eq!(m.read(&path, 0, u64::MAX).await.unwrap(), data);
        assert_eq!(m.read(&path, 17, 200).await.unwrap(), data.slice(17..217));
    }
}

#[tokio::test]
async fn sequential_reads_are_prefetched() {
    let dir = tempfile::tempdir().unwrap();
    let base = Counting::new(labios_bridge::mapping::mapper(Mapping::Direct, fs(&dir)));
    let data = Lcg(1).bytes(64 * 1024);
    base.write("f", 0, data.clone()).await.unwrap();
    let cached = Cached::new(base.clone(), Policy::Lru, 4096, 1 << 20, 4).unwrap();
    let mut got = Vec::new();
    for i in 0..16u64 {
        got.extend_from_slice(&cached.read("f", i * 4096, 4096).await.unwrap());
    }
    assert_eq!(got, data);
    // The first read learns nothing; the second starts the pattern and
    // fetches 4 blocks ahead with itself; each read reaching the end of
    // the fetched window fetches the next 4: reads 1, 5, 9 and 13.
    assert_eq!(base.reads(), 5);
    assert_eq!(cached.stats().hits, 14);
    let reads = base.reads();
    // Reading again is served from the cache entirely.
    assert_eq!(cached.read("f", 0, 64 * 1024).await.unwrap(), data);
    assert_eq!(base.reads(), reads);
}

#[tokio::test]
async fn strided_reads_are_prefetched() {
    let base = Counting::new(
        options(MetadataMode::Strict)
            .mapper(Mapping::Balanced, memory())
            .unwrap(),
    );
    let data = Lcg(2).bytes(100 * 1000);
    base.write("f", 0, data.clone()).await.unwrap();
    let cached = Cached::new(base.clone(), Policy::Lfu, 100, 1 << 20, 3).unwrap();
    // One 100-byte record every 1000 bytes.
    for i in 0..100u64 {
        let at = i * 1000;
        let got = cached.read("f", at, 100).await.unwrap();
        assert_eq!(got, data[at as usize..at as usize + 100]);
    }
    // Records 0, 1 and 2 are fetched on demand; from then on each read
    // finds its record fetched ahead, and fetches only the next ones.
    assert!(cached.stats().hits >= 90, "{:?}", cached.stats());
    // Unpredictable reads are not: each is one request.
    let before = base.reads();
    for at in [55_555u64, 12_345, 77_777] {
        cached.read("f", at, 10).await.unwrap();
    }
    assert_eq!(base.reads() - before, 3);
}

#[tokio::test]
async fn writes_and_removes_invalidate_the_cache() {
    let base = Counting::new(
        options(MetadataMode::Relaxed)
            .mapper(Mapping::WriteOptimized, memory())
            .unwrap(),
    );
    let cached = Cached::new(base.clone(), Policy::Lru, 8, 1 << 10, 2).unwrap();
    cached
        .write("f", 0, Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    assert_eq!(cached.read("f", 0, 100).await.unwrap(), &b"0123456789"[..]);
    cached
        .write("f", 4, Bytes::from_static(b"ab"))
        .await
        .unwrap();
    assert_eq!(cached.read("f", 0, 100).await.unwrap(), &b"0123ab6789"[..]);
    // Growing the file past a cached end of file.
    cached
        .write("f", 20, Bytes::from_static(b"z"))
        .await
        .unwrap();
    assert_eq!(
        cached.read("f", 8, 100).await.unwrap(),
        &b"89\0\0\0\0\0\0\0\0\0\0z"[..]
    );
    cached.remove("f").await.unwrap();
    assert!(cached.read("f", 0, 1).await.is_err());
    // A tiny cache stays within its bound.
    let tiny = Cached::new(base.clone(), Policy::Lru, 8, 16, 0).unwrap();
    tiny.write("g", 0, Lcg(3).bytes(100)).await.unwrap();
    assert_eq!(tiny.read("g", 0, 100).await.unwrap().len(), 100);
    assert!(tiny.stats().evictions > 0);
}

#[tokio::test]
async fn small_writes_are_aggregated() {
    let dir = tempfile::tempdir().unwrap();
    let base = Counting::new(
        options(MetadataMode::Strict)
            .mapper(Mapping::Balanced, fs(&dir))
            .unwrap(),
    );
    let agg = Aggregator::new(base.clone(), 1024, 4096).unwrap();
    let mut rng = Lcg(4);
    let mut model = Vec::new();
    // 100 appends of 1 to 32 bytes, and an overwrite inside the run.
    for _ in 0..100 {
        let n = 1 + rng.below(32);
        let d = rng.bytes(n);
        agg.write("f", model.len() as u64, d.clone()).await.unwrap();
        model.extend_from_slice(&d);
    }
    agg.write("f", 10, Bytes::from_static(b"OVER"))
        .await
        .unwrap();
    model[10..14].copy_from_slice(b"OVER");
    agg.flush("f").await.unwrap();
    let writes = base.writes();
    let expected = (model.len() as u64).div_ceil(1024);
    assert!(
        writes <= expected + 1,
        "{writes} writes for {} bytes",
        model.len()
    );
    assert_eq!(agg.buffered(), 0);
    assert_eq!(base.read("f", 0, u64::MAX).await.unwrap(), model);
    // A write elsewhere stores the run first; a read sees buffered data.
    agg.write("f", 5000, Bytes::from_static(b"far"))
        .await
        .unwrap();
    agg.write("f", 0, Bytes::from_static(b"near"))
        .await
        .unwrap();
    assert_eq!(agg.read("f", 0, 4).await.unwrap(), &b"near"[..]);
    assert_eq!(agg.read("f", 5000, 3).await.unwrap(), &b"far"[..]);
    assert_eq!(agg.stat("f").await.unwrap().unwrap().size, 5003);
    // A file only ever buffered can be removed.
    agg.write("g", 0, Bytes::from_static(b"g")).await.unwrap();
    agg.remove("g").await.unwrap();
    assert!(agg.stat("g").await.unwrap().is_none());
    assert!(Aggregator::new(base.clone(), 0, 1).is_err());
}

/// Refuses writes of one path while `refusing`: a store that fails for
/// one file.
#[derive(Debug)]
struct Refusing {
    inner: Arc<dyn FileMapper>,
    path: &'static str,
    refusing: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl FileMapper for Refusing {
    async fn write(&self, path: &str, offset: u64, data: Bytes) -> labios_label::Result<()> {
        if path == self.path && self.refusing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(labios_label::Error::Storage(format!("{path}: refused")));
        }
        self.inner.write(path, offset, data).await
    }

    async fn read(&self, path: &str, offset: u64, len: u64) -> labios_label::Result<Bytes> {
        self.inner.read(path, offset, len).await
    }

    async fn stat(&self, path: &str) -> labios_label::Result<Option<labios_bridge::Stat>> {
        self.inner.stat(path).await
    }

    async fn list(&self, dir: &str) -> labios_label::Result<Vec<labios_bridge::Entry>> {
        self.inner.list(dir).await
    }

    async fn remove(&self, path: &str) -> labios_label::Result<()> {
        self.inner.remove(path).await
    }
}

/// Storing every run (the periodic store, and a clean stop's) tries each
/// file: one file whose store fails keeps its run and does not keep the
/// others in memory, where the next crash would lose them. Stored runs are
/// forgotten: the aggregator once kept an entry for every file it ever
/// merged writes of, since storing all runs held every entry while it
/// retired each.
#[tokio::test]
async fn storing_every_run_tries_each_file_and_forgets_the_stored() {
    let dir = tempfile::tempdir().unwrap();
    let base = options(MetadataMode::Strict)
        .mapper(Mapping::Balanced, fs(&dir))
        .unwrap();
    let refusing = Arc::new(Refusing {
        inner: base.clone(),
        path: "b",
        refusing: true.into(),
    });
    let agg = Aggregator::new(refusing.clone(), 1 << 20, 16 << 20).unwrap();
    for path in ["a", "b", "c"] {
        agg.write(path, 0, Bytes::from(path.repeat(10)))
            .await
            .unwrap();
    }
    assert_eq!(agg.files(), 3);
    let err = agg.flush_all().await.unwrap_err().to_string();
    assert!(err.contains("b: refused"), "{err}");
    for path in ["a", "c"] {
        assert_eq!(base.read(path, 0, 100).await.unwrap(), path.repeat(10));
    }
    assert!(base.stat("b").await.unwrap().is_none());
    assert_eq!((agg.files(), agg.buffered()), (1, 10), "b's run is kept");
    refusing
        .refusing
        .store(false, std::sync::atomic::Ordering::Release);
    agg.flush_all().await.unwrap();
    assert_eq!(base.read("b", 0, 100).await.unwrap(), "b".repeat(10));
    assert_eq!((agg.files(), agg.buffered()), (0, 0));
}

/// The silent loss of an acknowledged append (issue 11, finding 1): the
/// periodic store of merged writes took a file's run and, once stored,
/// dropped the file's slot from the map. An append that had fetched the
/// slot meanwhile and was waiting for its lock then buffered its bytes in
/// that orphan, was acknowledged, and was never stored: the file read back
/// with zeros in its place. Here the gate holds the store exactly in that
/// window, every time.
#[tokio::test]
async fn an_append_racing_the_store_of_its_run_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let base = options(MetadataMode::Relaxed)
        .mapper(Mapping::WriteOptimized, fs(&dir))
        .unwrap();
    let gate = Gate::new(base.clone());
    let agg = Arc::new(Aggregator::new(gate.clone(), 1 << 20, 16 << 20).unwrap());
    agg.write("log", 0, Bytes::from_static(b"event 0006\n"))
        .await
        .unwrap();
    gate.close(Hold::Writes);
    let store = tokio::spawn({
        let agg = agg.clone();
        async move { agg.flush_all().await }
    });
    gate.until_held(1).await;
    // The append takes the slot, then waits for the run's lock.
    let append = tokio::spawn({
        let agg = agg.clone();
        async move {
            agg.write("log", 11, Bytes::from_static(b"event 0007\n"))
                .await
        }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    gate.open();
    store.await.unwrap().unwrap();
    append.await.unwrap().unwrap();
    assert_eq!(
        agg.read("log", 0, 100).await.unwrap(),
        &b"event 0006\nevent 0007\n"[..]
    );
    assert_eq!(agg.buffered(), 0);
}

/// A cache fill that read a block before a write and finished after it
/// must not cache the replaced bytes: the next read would be served them
/// after the write was acknowledged.
#[tokio::test]
async fn a_read_racing_a_write_does_not_cache_the_old_bytes() {
    let base = options(MetadataMode::Strict)
        .mapper(Mapping::Balanced, memory())
        .unwrap();
    let gate = Gate::new(base.clone());
    let cached = Arc::new(Cached::new(gate.clone(), Policy::Lru, 64, 1 << 20, 0).unwrap());
    cached
        .write("f", 0, Bytes::from(vec![b'o'; 64]))
        .await
        .unwrap();
    gate.close(Hold::Reads);
    let read = tokio::spawn({
        let cached = cached.clone();
        async move { cached.read("f", 0, 64).await }
    });
    // The read holds the old bytes; the write goes by it and is done.
    gate.until_held(1).await;
    cached
        .write("f", 0, Bytes::from(vec![b'n'; 64]))
        .await
        .unwrap();
    gate.open();
    assert_eq!(read.await.unwrap().unwrap(), vec![b'o'; 64]);
    assert_eq!(cached.read("f", 0, 64).await.unwrap(), vec![b'n'; 64]);
}

#[tokio::test]
async fn mapped_files_are_reachable_through_a_mount() {
    use labios_bridge::{MountConfig, Mounts};
    let dir = tempfile::tempdir().unwrap();
    let mut declared = std::collections::BTreeMap::new();
    declared.insert(
        "pfs".to_string(),
        MountConfig {
            uri: format!("fs://{}", dir.path().display()),
            mapping: Mapping::ReadOptimized,
            ..Default::default()
        },
    );
    let mounts = Mounts::new(&declared).unwrap();
    let e = mounts.resolve("pfs:/data/x").unwrap();
    e.mapper()
        .write(&e.path, 0, Bytes::from_static(b"bridged"))
        .await
        .unwrap();
    assert_eq!(
        e.mapper().read(&e.path, 0, 100).await.unwrap(),
        &b"bridged"[..]
    );
    assert!(dir.path().join("data/x/.labios/g3/0").exists());
    let m: Arc<dyn FileMapper> = labios_bridge::mapper_for(&declared["pfs"], fs(&dir)).unwrap();
    assert_eq!(m.stat("data/x").await.unwrap().unwrap().size, 7);
}

/// Several workers of one process share its mounts: what the mounts hold
/// back is stored once, when the last of them stops, and not before.
#[tokio::test]
async fn the_last_worker_to_stop_stores_what_the_mounts_held_back() {
    use labios_bridge::{MountConfig, Mounts};
    let dir = tempfile::tempdir().unwrap();
    let declared = std::collections::BTreeMap::from([(
        "wlog".to_string(),
        MountConfig {
            uri: format!("fs://{}", dir.path().display()),
            mapping: Mapping::WriteOptimized,
            aggregate_bytes: 1 << 20,
            hold_ms: Some(labios_bridge::MAX_HOLD_MS),
            ..Default::default()
        },
    )]);
    let mounts = Mounts::new(&declared).unwrap();
    let (first, last) = (mounts.serving(), mounts.serving());
    let e = mounts.resolve("wlog:/events.log").unwrap();
    e.mapper()
        .write(&e.path, 0, Bytes::from_static(b"held back"))
        .await
        .unwrap();
    // What the store holds is what a fresh process would read.
    let stored = || async {
        let fresh = Mounts::new(&declared).unwrap();
        let e = fresh.resolve("wlog:/events.log").unwrap();
        match e.mapper().stat(&e.path).await.unwrap() {
            Some(_) => Some(e.mapper().read(&e.path, 0, 100).await.unwrap()),
            None => None,
        }
    };
    first.stop().await.unwrap();
    assert_eq!(stored().await, None, "stored while a worker still served");
    last.stop().await.unwrap();
    assert_eq!(stored().await.unwrap(), &b"held back"[..]);
    // A worker stopped twice is counted once.
    last.stop().await.unwrap();
    let again = mounts.serving();
    e.mapper()
        .write(&e.path, 9, Bytes::from_static(b", again"))
        .await
        .unwrap();
    again.stop().await.unwrap();
    assert_eq!(stored().await.unwrap(), &b"held back, again"[..]);
}

/// Requests that reach the store, by kind.
#[derive(Debug, Clone, Default)]
struct Requests(Arc<parking_lot::Mutex<std::collections::HashMap<&'static str, u64>>>);

impl opendal::layers::LoggingInterceptor for Requests {
    fn log(
        &self,
        _: &opendal::raw::AccessorInfo,
        op: opendal::raw::Operation,
        _: &[(&str, &str)],
        message: &str,
        _: Option<&opendal::Error>,
    ) {
        if message == "started" {
            *self.0.lock().entry(op.into_static()).or_default() += 1;
        }
    }
}

impl Requests {
    fn take(&self, kind: &str) -> u64 {
        self.0.lock().remove(kind).unwrap_or(0)
    }
}

fn counted() -> (Operator, Requests) {
    let requests = Requests::default();
    let op = memory().layer(opendal::layers::LoggingLayer::new(requests.clone()));
    (op, requests)
}

#[tokio::test]
async fn relaxed_writes_cost_fewer_requests() {
    let mut per_mode = Vec::new();
    for mode in [MetadataMode::Strict, MetadataMode::Relaxed] {
        let (op, requests) = counted();
        let mut o = options(mode);
        o.relaxed.every = 1000;
        let m = o.balanced(op).unwrap();
        for i in 0..10u64 {
            m.write("f", i * 4, Bytes::from_static(b"abcd"))
                .await
                .unwrap();
        }
        per_mode.push((requests.take("write"), requests.take("read")));
    }
    // Strict: each write puts its bucket and the metadata, and reads the
    // metadata first. Relaxed: the metadata once, at creation.
    let (strict, relaxed) = (per_mode[0], per_mode[1]);
    assert_eq!((strict.0, relaxed.0), (20, 11));
    assert_eq!(strict.1 - relaxed.1, 9, "{per_mode:?}");
}

#[tokio::test]
async fn read_optimized_reads_fewer_objects() {
    let mut gets = Vec::new();
    for mapping in [Mapping::Balanced, Mapping::ReadOptimized] {
        let (op, requests) = counted();
        let mut o = options(MetadataMode::Strict);
        o.levels = 4;
        let m = o.mapper(mapping, op).unwrap();
        m.write("f", 0, Lcg(5).bytes(16 * 8 * 4)).await.unwrap();
        requests.take("read");
        m.read("f", 0, 16 * 8).await.unwrap();
        m.read("f", 16 * 8 + 16, 16 * 6).await.unwrap();
        gets.push(requests.take("read"));
    }
    // Metadata + 8 buckets, and metadata + 6 buckets; against metadata +
    // one 128-byte object, and metadata + 16 + 32 + 32 + 16.
    assert_eq!(gets, [1 + 8 + 1 + 6, 1 + 1 + 1 + 4]);
}
