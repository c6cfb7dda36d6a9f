//! The dispatch loop against the embedded stores.

use super::testing::{read, worker, write};
use super::*;
use bytes::Bytes;
use labios_label::{Pointer, Task, WorkerState, WorkerStatus};
use labios_store::embedded::{MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::LabelQueue;
use labios_store::{client_queue, Extent, FileKind, Inventory};

struct Fixed(Vec<WorkerStatus>);

impl WorkerDirectory for Fixed {
    fn workers(&self) -> Vec<WorkerStatus> {
        self.0.clone()
    }
}

fn stores() -> Stores {
    Stores {
        labels: Arc::new(MemoryQueue::new(100_000, Duration::from_secs(5))),
        tasks: Arc::new(MemoryQueue::new(100_000, Duration::from_secs(5))),
        warehouse: Arc::new(MemoryWarehouse::new(1 << 20, Duration::from_secs(1))),
        inventory: Arc::new(RedbInventory::in_memory().unwrap()),
        locks: Arc::new(labios_store::locks::MemoryLocks::default()),
    }
}

fn start(
    stores: &Stores,
    workers: Vec<WorkerStatus>,
    queues: Vec<String>,
) -> (
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
    Arc<DispatcherStats>,
) {
    let config = DispatcherConfig {
        batch_window_ms: 500,
        ..Default::default()
    };
    let d = Dispatcher::new(config, stores.clone(), Arc::new(Fixed(workers)))
        .unwrap()
        .without_label_auth();
    let stats = d.stats();
    let (tx, rx) = watch::channel(false);
    (tx, tokio::spawn(d.run(Queues::Named(queues), rx)), stats)
}

/// Everything in the worker queues, by label number.
async fn drain(stores: &Stores, workers: &[u32]) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for &w in workers {
        let tasks = stores
            .tasks
            .pull(&worker_queue(w), usize::MAX, Duration::ZERO)
            .await
            .unwrap();
        for d in tasks {
            out.extend(d.item.labels.iter().map(|l| (w, l.id.nanos)));
        }
    }
    out
}

#[tokio::test]
async fn a_lone_label_is_dispatched_at_once() {
    let stores = stores();
    let (stop, handle, _) = start(&stores, vec![worker(1, 3, 3)], vec![client_queue(1)]);
    // Let the dispatcher reach its idle wait first.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for n in 1..=3 {
        let sent = Instant::now();
        stores
            .labels
            .push(&client_queue(1), vec![write(n, 1, 0, 10)])
            .await
            .unwrap();
        let got: Vec<Delivery<Task>> = stores
            .tasks
            .pull(&worker_queue(1), 10, Duration::from_secs(2))
            .await
            .unwrap();
        let took = sent.elapsed();
        assert_eq!(got.len(), 1);
        assert!(took < Duration::from_millis(50), "lone label took {took:?}");
    }
    stop.send(true).unwrap();
    handle.await.unwrap();
}

#[tokio::test]
async fn every_label_reaches_exactly_one_worker_queue() {
    let stores = stores();
    let ids = [1, 2, 3];
    let ws = ids.iter().map(|&i| worker(i, 3, 3)).collect();
    let queues = vec![client_queue(1), client_queue(2)];
    let (stop, handle, stats) = start(&stores, ws, queues.clone());
    let n = 5000u64;
    for (q, chunk) in (1..=n).collect::<Vec<_>>().chunks(250).enumerate() {
        let labels = chunk
            .iter()
            .map(|&i| match i % 3 {
                0 => read(i, i % 7, (i / 7) * 100, 50),
                _ => write(i, i % 7, (i / 7) * 100, 100),
            })
            .collect();
        stores.labels.push(&queues[q % 2], labels).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.snapshot().labels < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.send(true).unwrap();
    handle.await.unwrap();
    let mut seen: Vec<u64> = drain(&stores, &ids)
        .await
        .into_iter()
        .map(|x| x.1)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=n).collect::<Vec<_>>());
    let counts = stats.snapshot();
    assert_eq!((counts.labels, counts.failed), (n, 0));
    assert!(counts.batches >= 5 && counts.tasks <= n, "{counts:?}");
}

/// A label the queue delivers twice, in one batch or long after the first
/// copy was dispatched (a repeated push, a redelivery after a lost
/// acknowledgement), reaches a worker queue once.
#[tokio::test]
async fn a_label_delivered_twice_is_dispatched_once() {
    let stores = stores();
    let ws = vec![worker(1, 3, 3), worker(2, 3, 3)];
    let (stop, handle, stats) = start(&stores, ws, vec![client_queue(1)]);
    let twice = vec![read(1, 1, 0, 10), read(1, 1, 0, 10), write(2, 1, 0, 10)];
    stores.labels.push(&client_queue(1), twice).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.snapshot().labels < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stores
        .labels
        .push(
            &client_queue(1),
            vec![read(1, 1, 0, 10), write(3, 1, 0, 10)],
        )
        .await
        .unwrap();
    while stats.snapshot().labels < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.send(true).unwrap();
    handle.await.unwrap();
    let mut seen: Vec<u64> = drain(&stores, &[1, 2])
        .await
        .into_iter()
        .map(|x| x.1)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, vec![1, 2, 3]);
    assert_eq!(stats.snapshot().labels, 3);
    assert_eq!(stores.labels.depth(&client_queue(1)).await.unwrap(), 0);
}

/// A file whose first 1000 bytes the inventory places on worker 2.
async fn held_by_worker_2(stores: &Stores) -> u64 {
    let file = stores
        .inventory
        .create("/data", FileKind::File, 0o644, labios_store::Owner::root(1))
        .await
        .unwrap()
        .id;
    let extent = Extent {
        offset: 0,
        len: 1000,
        worker: 2,
        label: LabelId::default(),
    };
    stores.inventory.commit_extent(file, extent).await.unwrap();
    file
}

#[tokio::test]
async fn reads_go_to_the_worker_holding_their_data() {
    let stores = stores();
    let file = held_by_worker_2(&stores).await;
    let ws = vec![worker(1, 3, 3), worker(2, 3, 3), worker(3, 3, 3)];
    let (stop, handle, stats) = start(&stores, ws, vec![client_queue(1)]);
    let labels = (1..=6).map(|i| read(i, file, i * 100, 50)).collect();
    stores.labels.push(&client_queue(1), labels).await.unwrap();
    while stats.snapshot().labels < 6 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).unwrap();
    handle.await.unwrap();
    let placed = drain(&stores, &[1, 2, 3]).await;
    assert_eq!(placed.len(), 6);
    assert!(placed.iter().all(|&(w, _)| w == 2), "{placed:?}");
}

/// A read whose client already found its holder (the read plan) goes
/// there without a second look-up: here the hint names worker 3 while the
/// inventory says 2, and the hint wins (the worker would answer "moved:"
/// if it were stale). A hint naming no worker of the pool is not taken:
/// the inventory is asked, as for a read without one.
#[tokio::test]
async fn reads_go_to_the_holder_their_client_named() {
    let stores = stores();
    let file = held_by_worker_2(&stores).await;
    let ws = vec![worker(1, 3, 3), worker(2, 3, 3), worker(3, 3, 3)];
    let (stop, handle, stats) = start(&stores, ws, vec![client_queue(1)]);
    let hinted = |i: u64, holder: u32| Label {
        holder: Some(holder),
        ..read(i, file, i * 100, 50)
    };
    let labels = vec![hinted(1, 3), hinted(2, 3), hinted(3, 3), hinted(4, 99)];
    stores.labels.push(&client_queue(1), labels).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stats.snapshot().labels < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "4 labels not dispatched in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).unwrap();
    handle.await.unwrap();
    let mut placed = drain(&stores, &[1, 2, 3]).await;
    placed.sort_unstable_by_key(|&(_, id)| id);
    let workers: Vec<u32> = placed.iter().map(|&(w, _)| w).collect();
    assert_eq!(workers, vec![3, 3, 3, 2], "{placed:?}");
}

/// Write labels whose data is staged in the warehouse, as a client
/// stages it.
async fn staged_writes(stores: &Stores, n: u64) -> Vec<Label> {
    let mut labels = Vec::new();
    for i in 1..=n {
        let key = format!("a1/w{i}");
        stores
            .warehouse
            .put(&key, Bytes::from(vec![7u8; 10]))
            .await
            .unwrap();
        labels.push(Label {
            source: Pointer::Warehouse { key, len: 10 },
            ..write(i, 1, i * 10, 10)
        });
    }
    labels
}

#[tokio::test]
async fn labels_fail_visibly_when_there_are_no_workers() {
    let stores = stores();
    let (stop, handle, stats) = start(&stores, Vec::new(), vec![client_queue(1)]);
    let labels = staged_writes(&stores, 4).await;
    let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
    stores.labels.push(&client_queue(1), labels).await.unwrap();
    while stats.snapshot().failed < 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    stop.send(true).unwrap();
    handle.await.unwrap();
    for id in ids {
        let s = stores.inventory.status(id).await.unwrap().unwrap();
        assert_eq!(s.state, LabelState::Failed);
        assert_eq!(s.error.as_deref(), Some("unavailable: no workers"));
    }
    assert_eq!(stores.labels.depth(&client_queue(1)).await.unwrap(), 0);
    // One batch, not a retry loop.
    assert_eq!(stats.snapshot().batches, 1);
    // Nobody reads a failed label's staged data: released.
    assert_eq!(stores.warehouse.usage().await.unwrap(), 0);
}

/// A worker queue that refuses every push.
struct Refusing;

#[async_trait::async_trait]
impl LabelQueue<Task> for Refusing {
    async fn push(&self, queue: &str, _: Vec<Task>) -> labios_label::Result<()> {
        Err(labios_label::Error::Full(format!("queue {queue}")))
    }
    async fn pull(
        &self,
        _: &str,
        _: usize,
        _: Duration,
    ) -> labios_label::Result<Vec<Delivery<Task>>> {
        Ok(Vec::new())
    }
    async fn ack(&self, _: &str, _: &[u64]) -> labios_label::Result<()> {
        Ok(())
    }
    async fn depth(&self, _: &str) -> labios_label::Result<usize> {
        Ok(0)
    }
    async fn queues(&self, _: &str) -> labios_label::Result<Vec<String>> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn labels_a_worker_queue_refuses_fail_and_release_their_data() {
    let stores = Stores {
        tasks: Arc::new(Refusing),
        ..stores()
    };
    let (stop, handle, stats) = start(&stores, vec![worker(1, 3, 3)], vec![client_queue(1)]);
    let labels = staged_writes(&stores, 3).await;
    let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
    stores.labels.push(&client_queue(1), labels).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.snapshot().failed < 3 {
        assert!(Instant::now() < deadline, "{:?}", stats.snapshot());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).unwrap();
    handle.await.unwrap();
    for id in ids {
        let s = stores.inventory.status(id).await.unwrap().unwrap();
        assert_eq!(s.state, LabelState::Failed);
        assert!(s.error.unwrap().contains("could not queue on worker 1"));
    }
    assert_eq!(stores.warehouse.usage().await.unwrap(), 0);
}

#[tokio::test]
async fn inventory_directory_follows_the_inventory() {
    let inventory: Arc<dyn Inventory> = Arc::new(RedbInventory::in_memory().unwrap());
    inventory.put_worker(worker(1, 3, 3)).await.unwrap();
    let dir = InventoryDirectory::start(inventory.clone(), Duration::from_millis(10), false)
        .await
        .unwrap();
    assert_eq!(dir.workers().len(), 1);
    dir.assigned(1, 5, 500);
    assert_eq!(dir.workers()[0].queued, 5);
    let mut best = worker(2, 5, 1);
    best.score = 0.9;
    inventory.put_worker(best).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while dir.workers().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ids: Vec<u32> = dir.workers().iter().map(|w| w.spec.id).collect();
    assert_eq!(ids, vec![2, 1], "best score first");
}

#[tokio::test]
async fn inventory_directory_holds_the_elastic_reserve_back() {
    let inventory: Arc<dyn Inventory> = Arc::new(RedbInventory::in_memory().unwrap());
    let mut reserve = worker(2, 5, 1);
    reserve.state = WorkerState::Suspended;
    inventory.put_worker(worker(1, 3, 3)).await.unwrap();
    inventory.put_worker(reserve.clone()).await.unwrap();
    let ids = |dir: &InventoryDirectory| -> Vec<u32> {
        let mut ids: Vec<u32> = dir.workers().iter().map(|w| w.spec.id).collect();
        ids.sort_unstable();
        ids
    };
    let refresh = Duration::from_millis(10);
    let fixed = InventoryDirectory::start(inventory.clone(), refresh, false)
        .await
        .unwrap();
    assert_eq!(
        ids(&fixed),
        vec![1, 2],
        "static: an idle-suspended worker wakes on work"
    );
    let elastic = InventoryDirectory::start(inventory.clone(), refresh, true)
        .await
        .unwrap();
    assert_eq!(
        ids(&elastic),
        vec![1],
        "elastic: the reserve waits to be woken"
    );
    // With no active worker at all, the reserve is all there is.
    let mut asleep = worker(1, 3, 3);
    asleep.state = WorkerState::Suspended;
    inventory.put_worker(asleep).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while ids(&elastic) != vec![1, 2] && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(ids(&elastic), vec![1, 2]);
}

/// An elastic directory lists only active workers, but a read still goes to
/// the suspended worker that holds its data (work in its queue wakes it);
/// a read of data on a decommissioned worker is left to the scheduler.
#[tokio::test]
async fn reads_reach_their_worker_even_when_the_directory_holds_it_back() {
    let stores = stores();
    let file = stores
        .inventory
        .create("/held", FileKind::File, 0o644, labios_store::Owner::root(1))
        .await
        .unwrap()
        .id;
    for (worker, offset) in [(2, 0), (3, 1000)] {
        let extent = Extent {
            offset,
            len: 1000,
            worker,
            label: LabelId::default(),
        };
        stores.inventory.commit_extent(file, extent).await.unwrap();
    }
    let mut reserve = worker(2, 3, 3);
    reserve.state = WorkerState::Suspended;
    let mut gone = worker(3, 3, 3);
    gone.state = WorkerState::Decommissioned;
    for w in [worker(1, 3, 3), reserve, gone] {
        stores.inventory.put_worker(w).await.unwrap();
    }
    let (stop, handle, stats) = start(&stores, vec![worker(1, 3, 3)], vec![client_queue(1)]);
    let labels = (1..=6)
        .map(|i| read(i, file, if i <= 3 { i * 100 } else { 1000 + i * 100 }, 50))
        .collect();
    stores.labels.push(&client_queue(1), labels).await.unwrap();
    while stats.snapshot().labels < 6 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).unwrap();
    handle.await.unwrap();
    let mut placed = drain(&stores, &[1, 2, 3]).await;
    placed.sort_unstable();
    assert_eq!(placed, vec![(1, 4), (1, 5), (1, 6), (2, 1), (2, 2), (2, 3)]);
}
