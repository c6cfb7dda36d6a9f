use labios_label::{Label, LabelIdGen, LabelKind};
use labios_store::conformance::*;
use labios_store::embedded::{InventoryConfig, MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::{Extent, FileKind, Inventory, LabelQueue};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test]
async fn queue_conformance() {
    let q = Arc::new(MemoryQueue::new(4096, Duration::from_secs(1)));
    queue_suite(q.clone()).await;
    let small = Arc::new(MemoryQueue::new(8, Duration::from_millis(200)));
    queue_backpressure_suite(small, 8, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn warehouse_conformance() {
    warehouse_suite(Arc::new(MemoryWarehouse::new(
        8 << 20,
        Duration::from_secs(1),
    )))
    .await;
    let small = Arc::new(MemoryWarehouse::new(1000, Duration::from_millis(200)));
    warehouse_backpressure_suite(small, 1000, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn inventory_conformance() {
    inventory_suite(Arc::new(RedbInventory::in_memory().unwrap())).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = InventoryConfig {
        reclaim_after: Duration::from_millis(100),
    };
    let inv = Arc::new(RedbInventory::open(&dir.path().join("inv.redb"), cfg).unwrap());
    inventory_suite(inv.clone()).await;
    inventory_reclaim_suite(inv, Duration::from_millis(100)).await;
}

#[tokio::test]
async fn queue_larger_batch_than_bound_flows_through() {
    let q = Arc::new(MemoryQueue::new(16, Duration::from_secs(5)));
    let g = LabelIdGen::new(1);
    let items: Vec<Label> = (0..100)
        .map(|_| Label::new(g.next(), LabelKind::Read, 1))
        .collect();
    let pusher = {
        let (q, items) = (q.clone(), items.clone());
        tokio::spawn(async move { q.push("big", items).await })
    };
    let mut out = Vec::new();
    while out.len() < 100 {
        let got = q.pull("big", 7, Duration::from_secs(5)).await.unwrap();
        assert!(got.len() <= 16);
        out.extend(got.into_iter().map(|d| d.item));
    }
    pusher.await.unwrap().unwrap();
    assert_eq!(out, items);
}

#[tokio::test]
async fn inventory_recovers_synced_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inv.redb");
    let g = LabelIdGen::new(1);
    let id = {
        let inv = RedbInventory::open(&path, InventoryConfig::default()).unwrap();
        let f = inv
            .create("/d/f", FileKind::File, 0o644, labios_store::Owner::root(1))
            .await
            .unwrap();
        let e = Extent {
            offset: 3,
            len: 5,
            worker: 2,
            label: g.next(),
        };
        inv.commit_extent(f.id, e).await.unwrap();
        inv.sync().await.unwrap();
        f.id
    };
    let inv = RedbInventory::open(&path, InventoryConfig::default()).unwrap();
    let f = inv.lookup("/d/f").await.unwrap().unwrap();
    assert_eq!((f.id, f.size), (id, 8));
    assert_eq!(inv.extents(id, 0, 100).await.unwrap().len(), 1);
    let next = inv
        .create("/d/g", FileKind::File, 0o644, labios_store::Owner::root(1))
        .await
        .unwrap();
    assert!(next.id > id, "counters survive");
    let d = inv.lookup("/d").await.unwrap().unwrap();
    assert_eq!(d.nlink, 2, "a directory's links are counted again on open");
    inv.create("/d/e/f", FileKind::Dir, 0o755, labios_store::Owner::root(1))
        .await
        .unwrap();
    inv.sync().await.unwrap();
    drop(inv);
    let inv = RedbInventory::open(&path, InventoryConfig::default()).unwrap();
    assert_eq!(inv.lookup("/d").await.unwrap().unwrap().nlink, 3);
    assert_eq!(inv.lookup("/d/e").await.unwrap().unwrap().nlink, 3);
    let err = inv.lookup("d//x").await.unwrap_err();
    assert!(err.to_string().contains("not normalized"), "{err}");
}

/// Throughput printouts (run with --nocapture); not timed assertions.
#[tokio::test(flavor = "current_thread")]
async fn measure_queue_and_inventory() {
    let q = MemoryQueue::new(1 << 16, Duration::from_secs(1));
    let g = LabelIdGen::new(1);
    let batch: Vec<Label> = (0..256)
        .map(|_| Label::new(g.next(), LabelKind::Write, 1))
        .collect();
    let rounds = 4000;
    let t = Instant::now();
    for _ in 0..rounds {
        q.push("m", batch.clone()).await.unwrap();
        let got = q.pull("m", 256, Duration::ZERO).await.unwrap();
        assert_eq!(got.len(), 256);
    }
    let n = rounds * 256;
    println!(
        "memory queue: {:.2} M items/s push+pull (batches of 256, incl. clone)",
        n as f64 / t.elapsed().as_secs_f64() / 1e6
    );

    let dir = tempfile::tempdir().unwrap();
    let inv = RedbInventory::open(&dir.path().join("m.redb"), InventoryConfig::default()).unwrap();
    let f = inv
        .create(
            "/bench",
            FileKind::File,
            0o644,
            labios_store::Owner::root(1),
        )
        .await
        .unwrap();
    let n = 20_000u64;
    let t = Instant::now();
    for k in 0..n {
        let e = Extent {
            offset: k * 4096,
            len: 4096,
            worker: 1,
            label: g.next(),
        };
        inv.commit_extent(f.id, e).await.unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    inv.sync().await.unwrap();
    println!(
        "redb inventory: {:.0} commit_extent/s ({n} appends), sync {:?}, file {} KiB",
        n as f64 / secs,
        t.elapsed(),
        std::fs::metadata(dir.path().join("m.redb")).unwrap().len() / 1024
    );
    let t = Instant::now();
    for k in 0..n {
        let e = Extent {
            offset: (k * 7919) % (n * 4096),
            len: 8192,
            worker: 2,
            label: g.next(),
        };
        inv.commit_extent(f.id, e).await.unwrap();
    }
    println!(
        "redb inventory: {:.0} commit_extent/s (random overlapping)",
        n as f64 / t.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn locks_conformance() {
    let l: Arc<dyn labios_store::locks::Locks> =
        Arc::new(labios_store::locks::MemoryLocks::default());
    let ended = l.clone();
    locks_suite(l.clone(), (1, 2), l, async move {
        ended.release(2, None, None).await.unwrap();
    })
    .await;
}
