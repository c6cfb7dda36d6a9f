//! Which stores the components use (ARCHITECTURE.md "Deployments"): the embedded
//! default keeps them in one process; the distributed deployment puts label
//! queues on NATS JetStream and warehouse and inventory on Redis, so that
//! dispatchers, workers and clients can each run as their own process on any
//! host. Everything above the three traits is the same code either way.

use crate::config::Config;
use labios_core::administrator::{Administrator, DEFAULT_APP};
use labios_distributed::nats_queue::JetStreamQueue;
use labios_distributed::redis_store::{RedisInventory, RedisLocks, RedisWarehouse};
use labios_label::{Label, Task};
use labios_store::{Inventory, Stores};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connects to the NATS and Redis servers named in the configuration.
pub async fn distributed_stores(config: &Config) -> anyhow::Result<Stores> {
    let labels = JetStreamQueue::<Label>::connect(config.nats.clone()).await?;
    let tasks = JetStreamQueue::<Task>::connect(config.nats.clone()).await?;
    let warehouse = RedisWarehouse::connect(&config.redis).await?;
    let inventory: Arc<dyn Inventory> = Arc::new(RedisInventory::connect(&config.redis).await?);
    ensure_default_app(&inventory).await?;
    let stores = Stores {
        labels: Arc::new(labels),
        tasks: Arc::new(tasks),
        warehouse: Arc::new(warehouse),
        inventory,
        locks: Arc::new(RedisLocks::connect(&config.redis).await?),
    };
    Ok(labios_store::faults::wrap(stores, &config.faults).0)
}

/// Registers the default application (id 0) exactly once per deployment,
/// whichever process comes first: an atomic counter elects the one that
/// creates it (two creators would leave processes holding different secrets),
/// the others wait until it is there.
async fn ensure_default_app(inventory: &Arc<dyn Inventory>) -> anyhow::Result<()> {
    if inventory.app(DEFAULT_APP).await?.is_some() {
        return Ok(());
    }
    if inventory.next_id("default-app-claim").await? <= 1 {
        Administrator::new(inventory.clone())
            .ensure_default_app()
            .await?;
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while inventory.app(DEFAULT_APP).await?.is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the default application was not registered within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
