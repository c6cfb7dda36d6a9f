//! What a call leaves behind when the stores misbehave. Data staged in the
//! warehouse for a write that then fails before any label can read it is
//! released: an entry left behind would hold its room for good, and a full
//! warehouse stops every write (found by the model checker under injected
//! faults: the warehouse filled, and every write hung). A rename leaves no
//! label that a queue's duplicate delivery could run again.

use bytes::Bytes;
use labios_client::{Client, ClientConfig};
use labios_label::{Error, Label, LabelKind, Pointer, Result, WorkerSpec, WorkerStatus};
use labios_store::embedded::{MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::faults::{wrap, FaultConfig};
use labios_store::{Delivery, LabelQueue, Stores};
use std::sync::Arc;
use std::time::Duration;

fn stores() -> Stores {
    let t = Duration::from_millis(100);
    Stores {
        labels: Arc::new(MemoryQueue::new(64, t)),
        tasks: Arc::new(MemoryQueue::new(64, t)),
        warehouse: Arc::new(MemoryWarehouse::new(16 << 20, t)),
        inventory: Arc::new(RedbInventory::in_memory().unwrap()),
        locks: Arc::new(labios_store::locks::MemoryLocks::default()),
    }
}

/// A label queue that refuses every push.
struct Refusing;

#[async_trait::async_trait]
impl LabelQueue<Label> for Refusing {
    async fn push(&self, queue: &str, _: Vec<Label>) -> Result<()> {
        Err(Error::Unavailable(format!("queue {queue} refuses")))
    }
    async fn pull(&self, _: &str, _: usize, _: Duration) -> Result<Vec<Delivery<Label>>> {
        Ok(Vec::new())
    }
    async fn ack(&self, _: &str, _: &[u64]) -> Result<()> {
        Ok(())
    }
    async fn depth(&self, _: &str) -> Result<usize> {
        Ok(0)
    }
    async fn queues(&self, _: &str) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
}

/// A write of 2.5 labels, a small cached one, and an append.
async fn writes_fail(client: &Client) {
    let big = Bytes::from(vec![1u8; (2 << 20) + (1 << 19)]);
    let err = client.write_at_sync("/f", 0, big).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let small = Bytes::from_static(b"small write");
    client.write_at_async("/f", 0, small.clone()).await.unwrap();
    let err = client.wait_all().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let err = client.append_sync("/f", small).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
}

#[tokio::test]
async fn a_write_whose_labels_are_not_published_releases_its_data() {
    let s = Stores {
        labels: Arc::new(Refusing),
        ..stores()
    };
    let client = Client::new(s.clone(), 1, 1, ClientConfig::default()).unwrap();
    writes_fail(&client).await;
    assert_eq!(s.warehouse.usage().await.unwrap(), 0);
}

#[tokio::test]
async fn a_put_whose_reply_is_lost_is_released() {
    let plain = stores();
    let every_reply_lost = FaultConfig {
        seed: 1,
        lost_reply_ppm: 1_000_000,
        ..Default::default()
    };
    let (faulty, _) = wrap(plain.clone(), &every_reply_lost);
    let s = Stores {
        warehouse: faulty.warehouse,
        ..plain.clone()
    };
    let client = Client::new(s, 1, 1, ClientConfig::default()).unwrap();
    writes_fail(&client).await;
    assert_eq!(plain.warehouse.usage().await.unwrap(), 0);
}

/// A rename is done in the inventory by the time it returns, with no
/// worker running, and leaves no label that could move a file later: a
/// queue delivers a push twice now and then, and a rename label's second
/// copy, run by another worker after a new file was made at the old name,
/// moved that new file over the renamed one (found by the model checker
/// under injected faults). Only the replaced file's deletes are queued,
/// and run any number of times they free only bytes nobody can reach.
#[tokio::test]
async fn a_rename_is_done_when_it_returns_and_leaves_nothing_to_run_twice() {
    let plain = stores();
    let every_push_twice = FaultConfig {
        seed: 1,
        duplicate_ppm: 1_000_000,
        ..Default::default()
    };
    let (faulty, _) = wrap(plain.clone(), &every_push_twice);
    let s = Stores {
        labels: faulty.labels,
        ..plain.clone()
    };
    let worker = WorkerSpec {
        id: 1,
        tier: "ram".into(),
        speed: 3,
        energy: 2,
        capacity: 1 << 30,
        max_queue: 16,
        functions: false,
    };
    plain
        .inventory
        .put_worker(WorkerStatus::new(worker))
        .await
        .unwrap();
    let config = ClientConfig {
        wait_timeout_ms: 500,
        ..ClientConfig::default()
    };
    let client = Client::new(s, 1, 1, config).unwrap();
    let a = client.create("/a").await.unwrap();
    let b = client.create("/b").await.unwrap();
    client.rename("/a", "/b").await.unwrap();
    let inventory = &plain.inventory;
    assert_eq!(inventory.lookup("/b").await.unwrap().unwrap().id, a.id);
    assert!(inventory.lookup("/a").await.unwrap().is_none());
    let new = client.create("/a").await.unwrap();
    assert_ne!(new.id, a.id, "the old name now makes a new file");
    let mut queued = Vec::new();
    for q in plain.labels.queues("").await.unwrap() {
        for d in plain.labels.pull(&q, 64, Duration::ZERO).await.unwrap() {
            let file = match d.item.source {
                Pointer::File { file, .. } => Some(file),
                _ => None,
            };
            queued.push((d.item.kind, file));
        }
    }
    assert_eq!(queued, vec![(LabelKind::Delete, Some(b.id)); 2]);
}
