//! Data staged in the warehouse for a write that then fails before any
//! label can read it is released: an entry left behind would hold its
//! room for good, and a full warehouse stops every write (found by the
//! model checker under injected faults: the warehouse filled, and every
//! write hung).

use bytes::Bytes;
use labios_client::{Client, ClientConfig};
use labios_label::{Error, Label, Result};
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
