//! Which stores the components use (DESIGN "Deployments"): the embedded
//! default keeps them in one process; the distributed deployment puts label
//! queues on NATS JetStream and warehouse and inventory on Redis, so that
//! dispatchers, workers and clients can each run as their own process on any
//! host. Everything above the three traits is the same code either way.

use crate::config::Config;
use labios_distributed::nats_queue::JetStreamQueue;
use labios_distributed::redis_store::{RedisInventory, RedisWarehouse};
use labios_label::{Label, Task};
use labios_store::Stores;
use std::sync::Arc;

/// Connects to the NATS and Redis servers named in the configuration.
pub async fn distributed_stores(config: &Config) -> anyhow::Result<Stores> {
    let labels = JetStreamQueue::<Label>::connect(config.nats.clone()).await?;
    let tasks = JetStreamQueue::<Task>::connect(config.nats.clone()).await?;
    let warehouse = RedisWarehouse::connect(&config.redis).await?;
    let inventory = RedisInventory::connect(&config.redis).await?;
    Ok(Stores {
        labels: Arc::new(labels),
        tasks: Arc::new(tasks),
        warehouse: Arc::new(warehouse),
        inventory: Arc::new(inventory),
    })
}
