//! Write-behind persistence: recovery after sync, crash images, counters,
//! a byte-level model of newest-label-wins, and throughput printouts.

use super::*;
use labios_label::{LabelIdGen, WorkerSpec};
use std::path::PathBuf;

fn ext(offset: u64, len: u64, worker: u32, label: LabelId) -> Extent {
    Extent {
        offset,
        len,
        worker,
        label,
    }
}

/// Everything an inventory persists, as its public API shows it.
#[derive(Debug, PartialEq)]
struct Snapshot {
    entries: Vec<FileMeta>,
    extents: Vec<(FileId, Vec<Extent>)>,
    xattrs: Vec<(FileId, Vec<(String, Bytes)>)>,
    workers: Vec<WorkerStatus>,
    apps: Vec<AppRecord>,
}

async fn snapshot(inv: &RedbInventory) -> Snapshot {
    let entries = inv.list("/").await.unwrap();
    let mut extents = Vec::new();
    let mut xattrs = Vec::new();
    for m in &entries {
        extents.push((m.id, inv.extents(m.id, 0, u64::MAX).await.unwrap()));
        xattrs.push((m.id, inv.xattrs(m.id).await.unwrap()));
    }
    Snapshot {
        entries,
        extents,
        xattrs,
        workers: inv.workers().await.unwrap(),
        apps: inv.apps().await.unwrap(),
    }
}

/// What a process crash (`kill -9`) would leave right now: the inventory's
/// files as the kernel has them (redb and the write-ahead files), taken
/// while the writer is held between batches.
fn crash_image(inv: &RedbInventory, path: &Path, to: &Path) {
    let _gate = inv.writer_gate();
    copy_with_wal(path, to);
}

/// Copies the redb file and its write-ahead files.
fn copy_with_wal(path: &Path, to: &Path) {
    std::fs::copy(path, to).unwrap();
    for i in 0..2 {
        let wal = |p: &Path| PathBuf::from(format!("{}.wal{i}", p.display()));
        std::fs::copy(wal(path), wal(to)).unwrap();
    }
}

fn open(path: &Path) -> RedbInventory {
    RedbInventory::open(path, InventoryConfig::default()).unwrap()
}

fn worker(id: WorkerId, capacity: u64) -> WorkerStatus {
    WorkerStatus::new(WorkerSpec {
        id,
        tier: "ram".into(),
        speed: 3,
        energy: 2,
        capacity,
        max_queue: 16,
        functions: true,
    })
}

/// A random mix of every kind of mutation (errors are part of the mix).
async fn churn(inv: &RedbInventory, rng: &mut fastrand::Rng, labels: &[LabelId], n: usize) {
    let path = |rng: &mut fastrand::Rng| {
        format!("/d{}/s{}/f{}", rng.u8(0..3), rng.u8(0..3), rng.u8(0..12))
    };
    for _ in 0..n {
        match rng.u8(0..100) {
            0..=9 => {
                let _ = inv
                    .create(
                        &path(rng),
                        FileKind::File,
                        0o644,
                        Owner::root(rng.u32(0..4)),
                    )
                    .await;
            }
            10..=79 => {
                let files = inv.list("/d").await.unwrap();
                let files: Vec<_> = files.iter().filter(|m| m.kind == FileKind::File).collect();
                if files.is_empty() {
                    continue;
                }
                let f = files[rng.usize(0..files.len())].id;
                let e = ext(
                    rng.u64(0..20_000),
                    rng.u64(0..3000),
                    rng.u32(1..5),
                    labels[rng.usize(0..labels.len())],
                );
                // Another task may have removed it meanwhile.
                match inv.commit_extent(f, e).await {
                    Ok(()) | Err(Error::NotFound(_)) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            80..=82 => {
                if let Some(m) = inv.lookup(&path(rng)).await.unwrap() {
                    match inv.set_size(m.id, rng.u64(0..25_000)).await {
                        Ok(()) | Err(Error::NotFound(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            83..=84 => {
                if let Some(m) = inv.lookup(&path(rng)).await.unwrap() {
                    let name = format!("user.{}", rng.u8(0..4));
                    let value = rng.bool().then(|| Bytes::from(rng.u64(..).to_string()));
                    match inv.set_xattr(m.id, &name, value).await {
                        Ok(()) | Err(Error::NotFound(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            85..=87 => {
                let how = [
                    RenameHow::Replace,
                    RenameHow::NoReplace,
                    RenameHow::Exchange,
                ];
                let how = how[rng.usize(0..3)];
                let _ = inv.rename_as(&path(rng), &path(rng), how).await;
            }
            88..=89 => {
                let _ = inv.link(&path(rng), &path(rng)).await;
            }
            90..=91 => {
                let (a, b) = (rng.u8(0..3), rng.u8(0..3));
                let how = if rng.bool() {
                    RenameHow::Replace
                } else {
                    RenameHow::Exchange
                };
                let _ = inv
                    .rename_as(&format!("/d{a}/s{b}"), &format!("/d{b}/s{a}x"), how)
                    .await;
            }
            92..=95 => {
                let _ = inv.remove(&path(rng)).await;
            }
            96..=97 => {
                let id = rng.u32(0..8);
                if rng.bool() {
                    inv.put_worker(worker(id, rng.u64(1..1 << 40)))
                        .await
                        .unwrap();
                } else {
                    inv.remove_worker(id).await.unwrap();
                }
            }
            _ => {
                let id = rng.u32(0..8);
                let app = AppRecord {
                    id,
                    name: format!("app{id}"),
                    key: "k".into(),
                    secret: rng.u64(..).to_string(),
                    settings: vec![("sync".into(), rng.bool().to_string())],
                };
                inv.put_app(app).await.unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_behind_state_survives_sync_crash_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inv.redb");
    let image = dir.path().join("crash.redb");
    let g = LabelIdGen::new(1);
    let labels: Vec<LabelId> = (0..5000).map(|_| g.next()).collect();
    let mut rng = fastrand::Rng::with_seed(7);

    let inv = open(&path);
    // More records than the log holds: exercises backpressure too.
    churn(&inv, &mut rng, &labels, 15_000).await;
    inv.sync().await.unwrap();
    let at_sync = snapshot(&inv).await;
    crash_image(&inv, &path, &image);
    assert!(at_sync.entries.len() > 20, "the churn built a namespace");
    churn(&inv, &mut rng, &labels, 15_000).await;
    inv.sync().await.unwrap();
    let at_end = snapshot(&inv).await;
    assert_ne!(at_sync, at_end);
    drop(inv);

    let reopened = open(&path);
    assert_eq!(snapshot(&reopened).await, at_end, "clean reopen");
    drop(reopened);
    let crashed = open(&image);
    assert_eq!(
        snapshot(&crashed).await,
        at_sync,
        "a crash right after sync keeps everything synced"
    );
}

/// Concurrent mutations of every kind (and syncs) neither deadlock nor lose
/// anything a clean reopen should see.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_churn_reopens_identically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inv.redb");
    let g = LabelIdGen::new(1);
    let labels: Arc<Vec<LabelId>> = Arc::new((0..5000).map(|_| g.next()).collect());
    let inv = Arc::new(open(&path));
    let mut tasks = Vec::new();
    for seed in 0..4 {
        let (inv, labels) = (inv.clone(), labels.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(seed);
            churn(&inv, &mut rng, &labels, 6000).await;
        }));
    }
    let syncer = {
        let inv = inv.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                inv.sync().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    syncer.await.unwrap();
    let before = snapshot(&inv).await;
    drop(Arc::into_inner(inv).expect("tasks done"));
    assert_eq!(snapshot(&open(&path)).await, before);
}

// The writer is held across awaits on purpose: nothing it waits for runs on
// the test's task.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_crash_loses_nothing_a_machine_crash_only_unsynced_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inv.redb");
    // A machine crash before the page cache reached the disk: redb's
    // synced state only (no write-ahead file).
    let image = dir.path().join("crash.redb");
    // A process crash: the write-ahead files too.
    let process = dir.path().join("process.redb");
    let g = LabelIdGen::new(1);

    let inv = open(&path);
    let kept = inv
        .create("/kept", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    inv.commit_extent(kept.id, ext(0, 100, 1, g.next()))
        .await
        .unwrap();
    let mut counted: Vec<u64> = Vec::new();
    for _ in 0..1500 {
        counted.push(inv.next_id("c").await.unwrap());
    }
    inv.sync().await.unwrap();
    let synced = snapshot(&inv).await;

    let mut file_ids = vec![kept.id];
    {
        // Committed but not synced: the writer is held, so these stay in
        // the log (counter reservations still commit durably).
        let _gate = inv.writer_gate();
        inv.commit_extent(kept.id, ext(100, 50, 2, g.next()))
            .await
            .unwrap();
        for k in 0..1100 {
            let m = inv
                .create(
                    &format!("/lost/f{k}"),
                    FileKind::File,
                    0o644,
                    Owner::root(1),
                )
                .await
                .unwrap();
            file_ids.push(m.id);
        }
        inv.put_worker(worker(9, 1)).await.unwrap();
        for _ in 0..700 {
            counted.push(inv.next_id("c").await.unwrap());
        }
        std::fs::copy(&path, &image).unwrap();
        copy_with_wal(&path, &process);
    }
    let unsynced = snapshot(&inv).await;
    drop(inv);

    let killed = open(&process);
    assert_eq!(snapshot(&killed).await, unsynced, "every change returned");
    let c = killed.next_id("c").await.unwrap();
    assert!(c > *counted.iter().max().unwrap(), "counter {c} repeats");
    drop(killed);
    let again = open(&process);
    assert_eq!(snapshot(&again).await, unsynced, "replayed once, kept");
    drop(again);

    let crashed = open(&image);
    assert_eq!(snapshot(&crashed).await, synced, "exactly the synced state");
    assert!(crashed.lookup("/lost").await.unwrap().is_none());
    assert_eq!(crashed.file(kept.id).await.unwrap().unwrap().size, 100);
    let c = crashed.next_id("c").await.unwrap();
    assert!(c > *counted.iter().max().unwrap(), "counter {c} repeats");
    let f = crashed
        .create("/new", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    assert!(
        f.id > *file_ids.iter().max().unwrap(),
        "file id {} repeats",
        f.id
    );
    drop(crashed);

    // A clean shutdown (drop) flushes the log.
    let clean = open(&path);
    assert_eq!(snapshot(&clean).await, unsynced);
    assert_eq!(clean.file(kept.id).await.unwrap().unwrap().size, 150);
    let c = clean.next_id("c").await.unwrap();
    assert!(c > *counted.iter().max().unwrap());
    assert!(counted.windows(2).all(|w| w[0] < w[1]));
}

/// Extended attributes come back after a clean reopen and after a crash
/// right after `sync`; removed or replaced files' attributes stay gone.
#[tokio::test]
async fn xattrs_survive_reopen_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inv.redb");
    let image = dir.path().join("crash.redb");
    let v = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));

    let inv = open(&path);
    let f = inv
        .create("/o/f", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    let d = inv.lookup("/o").await.unwrap().unwrap();
    let g = inv
        .create("/o/g", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    let h = inv
        .create("/o/h", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    inv.set_xattr(f.id, "etag", v("\"e1\"")).await.unwrap();
    inv.set_xattr(f.id, "content-type", v("text/plain"))
        .await
        .unwrap();
    inv.set_xattr(f.id, "gone", v("x")).await.unwrap();
    inv.set_xattr(f.id, "gone", None).await.unwrap();
    inv.set_xattr(d.id, "user.dir", v("d")).await.unwrap();
    inv.set_xattr(g.id, "user.g", v("g")).await.unwrap();
    inv.set_xattr(h.id, "user.h", v("h")).await.unwrap();
    inv.remove("/o/g").await.unwrap();
    // h replaced by f: f keeps its own, h's are gone.
    inv.rename("/o/f", "/o/h").await.unwrap();
    let meta = inv.file(f.id).await.unwrap().unwrap();
    inv.sync().await.unwrap();
    crash_image(&inv, &path, &image);
    // After the image: not in it, kept by the clean shutdown.
    inv.set_xattr(f.id, "etag", v("\"e2\"")).await.unwrap();
    drop(inv);

    let expect = |etag: &'static str| {
        vec![
            (
                "content-type".to_string(),
                Bytes::from_static(b"text/plain"),
            ),
            ("etag".to_string(), Bytes::from_static(etag.as_bytes())),
        ]
    };
    for (file, etag) in [(&path, "\"e2\""), (&image, "\"e1\"")] {
        let inv = open(file);
        assert_eq!(inv.xattrs(f.id).await.unwrap(), expect(etag), "{file:?}");
        assert_eq!(
            inv.xattrs(d.id).await.unwrap(),
            vec![("user.dir".to_string(), Bytes::from_static(b"d"))]
        );
        for gone in [g.id, h.id] {
            assert!(matches!(inv.xattrs(gone).await, Err(Error::NotFound(_))));
        }
        if file == &image {
            assert_eq!(inv.file(f.id).await.unwrap().unwrap(), meta, "ctime too");
        }
    }
}

/// A file held by two sessions goes when the second lets go, whichever
/// way it lost its last name.
#[tokio::test]
async fn a_file_held_by_two_sessions_goes_with_the_last() {
    let inv = RedbInventory::in_memory().unwrap();
    let f = inv
        .create("/t/f", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    inv.hold(f.id, 1).await.unwrap();
    inv.hold(f.id, 2).await.unwrap();
    inv.remove("/t/f").await.unwrap();
    assert!(inv.let_go(f.id, 1).await.unwrap().is_none(), "2 holds it");
    assert_eq!(inv.file(f.id).await.unwrap().unwrap().nlink, 0);
    assert!(inv.let_go_session(3).await.unwrap().is_empty());
    assert_eq!(inv.let_go_session(2).await.unwrap()[0].id, f.id);
    assert!(inv.file(f.id).await.unwrap().is_none());
}

/// A file kept open past its last name is gone after a restart (which
/// ended the session holding it), with its extents and attributes, in a
/// clean reopen and in a crash image alike; the file made at its old path
/// meanwhile, and what the kept file's later writes logged, harm nothing.
#[tokio::test]
async fn files_kept_open_past_their_last_name_go_with_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inv.redb");
    let image = dir.path().join("crash.redb");
    let label = LabelIdGen::new(3);
    let inv = open(&path);
    let f = inv
        .create("/k/f", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    inv.commit_extent(f.id, ext(0, 8, 0, label.next()))
        .await
        .unwrap();
    inv.set_xattr(f.id, "user.k", Some(Bytes::from_static(b"v")))
        .await
        .unwrap();
    assert!(inv.hold(f.id, 11).await.unwrap());
    inv.remove("/k/f").await.unwrap();
    inv.commit_extent(f.id, ext(8, 8, 0, label.next()))
        .await
        .unwrap();
    inv.set_size(f.id, 16).await.unwrap();
    let g = inv
        .create("/k/f", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    inv.commit_extent(g.id, ext(0, 4, 0, label.next()))
        .await
        .unwrap();
    assert_eq!(inv.file(f.id).await.unwrap().unwrap().nlink, 0);
    inv.sync().await.unwrap();
    crash_image(&inv, &path, &image);
    let expected = snapshot(&inv).await;
    drop(inv);
    for file in [&path, &image] {
        let inv = open(file);
        assert!(inv.file(f.id).await.unwrap().is_none(), "{file:?}");
        assert!(matches!(inv.xattrs(f.id).await, Err(Error::NotFound(_))));
        assert_eq!(snapshot(&inv).await, expected, "{file:?}");
        assert_eq!(inv.extents(g.id, 0, 100).await.unwrap().len(), 1);
        drop(inv);
        // Dropped for good, not only hidden at load.
        let inv = open(file);
        assert!(inv.file(f.id).await.unwrap().is_none(), "{file:?}");
    }
}

/// Newest label wins byte by byte, whatever the commit order; truncation
/// cuts; and the persisted extents equal the in-memory ones.
#[tokio::test]
async fn extents_follow_newest_label_per_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("model.redb");
    let inv = open(&path);
    let g = LabelIdGen::new(1);
    let labels: Vec<LabelId> = (0..400).map(|_| g.next()).collect();
    let mut rng = fastrand::Rng::with_seed(11);
    let f = inv
        .create("/m", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    const N: usize = 600;
    let mut model: Vec<Option<(LabelId, u32)>> = vec![None; N];
    let mut size = 0u64;
    for step in 0..4000 {
        if rng.u8(0..20) == 0 {
            let s = rng.u64(0..N as u64);
            inv.set_size(f.id, s).await.unwrap();
            for b in model.iter_mut().skip(s as usize) {
                *b = None;
            }
            size = s;
        } else {
            let off = rng.u64(0..N as u64 - 1);
            let len = rng.u64(0..(N as u64 - off).min(90));
            let (label, w) = (labels[rng.usize(0..labels.len())], rng.u32(0..9));
            inv.commit_extent(f.id, ext(off, len, w, label))
                .await
                .unwrap();
            for b in &mut model[off as usize..(off + len) as usize] {
                if b.is_none_or(|(l, _)| l <= label) {
                    *b = Some((label, w));
                }
            }
            size = size.max(off + len);
        }
        let got = inv.extents(f.id, 0, u64::MAX).await.unwrap();
        let mut bytes: Vec<Option<(LabelId, u32)>> = vec![None; N];
        let mut last_end = 0;
        for e in &got {
            assert!(e.len > 0 && e.offset >= last_end, "step {step}: {got:?}");
            last_end = e.offset + e.len;
            for b in &mut bytes[e.offset as usize..last_end as usize] {
                *b = Some((e.label, e.worker));
            }
        }
        assert_eq!(bytes, model, "step {step}");
        assert_eq!(inv.file(f.id).await.unwrap().unwrap().size, size);
        let (o, l) = (rng.u64(0..N as u64), rng.u64(0..N as u64));
        for e in inv.extents(f.id, o, l).await.unwrap() {
            assert!(e.offset >= o && e.offset + e.len <= o + l);
        }
    }
    let before = inv.extents(f.id, 0, u64::MAX).await.unwrap();
    inv.sync().await.unwrap();
    drop(inv);
    let inv = open(&path);
    assert_eq!(inv.extents(f.id, 0, u64::MAX).await.unwrap(), before);
}

/// Throughput printouts (run with --nocapture); not timed assertions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure_write_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.redb");
    let inv = open(&path);
    let g = LabelIdGen::new(1);
    let f = inv
        .create("/bench", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    let n = 300_000u64;
    let t = Instant::now();
    for k in 0..n {
        let e = ext(k * 4096, 4096, 1, g.next());
        inv.commit_extent(f.id, e).await.unwrap();
    }
    let calls = t.elapsed();
    let s = Instant::now();
    inv.sync().await.unwrap();
    let synced = t.elapsed();
    println!(
        "write-behind inventory: {:.0} commit_extent/s appending ({n} calls; {:.0}/s including \
         the final sync of {:?}), file {} KiB",
        n as f64 / calls.as_secs_f64(),
        n as f64 / synced.as_secs_f64(),
        s.elapsed(),
        std::fs::metadata(&path).unwrap().len() / 1024
    );

    let n = 150_000u64;
    let span = 20_000 * 4096;
    let t = Instant::now();
    for k in 0..n {
        let e = ext((k * 7919 * 13) % span, 8192, 2, g.next());
        inv.commit_extent(f.id, e).await.unwrap();
    }
    let calls = t.elapsed();
    inv.sync().await.unwrap();
    let synced = t.elapsed();
    println!(
        "write-behind inventory: {:.0} commit_extent/s random overlapping ({n} calls; {:.0}/s \
         including the final sync), file {} KiB",
        n as f64 / calls.as_secs_f64(),
        n as f64 / synced.as_secs_f64(),
        std::fs::metadata(&path).unwrap().len() / 1024
    );

    let t = Instant::now();
    for _ in 0..1000 {
        inv.sync().await.unwrap();
    }
    println!(
        "write-behind inventory: empty sync {:?}",
        t.elapsed() / 1000
    );

    let h = inv
        .create("/thousand", FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    for k in 0..1000u64 {
        let e = ext(k * 8192, 4096, 1, g.next());
        inv.commit_extent(h.id, e).await.unwrap();
    }
    let mut rng = fastrand::Rng::with_seed(3);
    let rounds = 200_000u32;
    let t = Instant::now();
    let mut found = 0;
    for _ in 0..rounds {
        let off = rng.u64(0..1000 * 8192);
        found += inv.extents(h.id, off, 64 << 10).await.unwrap().len();
    }
    let per = t.elapsed() / rounds;
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(inv.file(h.id).await.unwrap());
    }
    let file = t.elapsed() / rounds;
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(inv.lookup("/thousand").await.unwrap());
    }
    let lookup = t.elapsed() / rounds;
    let t = Instant::now();
    for _ in 0..1000 {
        assert_eq!(inv.extents(h.id, 0, u64::MAX).await.unwrap().len(), 1000);
    }
    let whole = t.elapsed() / 1000;
    println!(
        "write-behind inventory, file of 1000 extents: extents(64 KiB) {per:?} ({:.1} found), \
         extents(all) {whole:?}, file() {file:?}, lookup() {lookup:?}",
        found as f64 / rounds as f64
    );
}
