//! The embedded default (ARCHITECTURE.md "Deployments" 1): label queues, warehouse,
//! inventory, dispatchers, worker manager and workers in one process. The
//! same components run separately in the distributed deployment; only the
//! store implementations differ.

use crate::config::Config;
use anyhow::Context;
use labios_client::Client;
use labios_core::administrator::Administrator;
use labios_core::dispatcher::{Dispatcher, DispatcherStats, Queues};
use labios_label::{AppId, WorkerDirectory};
use labios_server::WorkerManager;
use labios_store::embedded::{InventoryConfig, MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::{Inventory, Stores, CLIENT_QUEUE_PREFIX};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Runtime {
    pub config: Config,
    pub stores: Stores,
    pub admin: Arc<Administrator>,
    pub manager: Arc<WorkerManager>,
    pub dispatch_stats: Vec<Arc<DispatcherStats>>,
    shutdown: watch::Sender<bool>,
    /// The dispatchers.
    tasks: Vec<JoinHandle<()>>,
    /// The periodic inventory sync, stopped last: a draining stop may take
    /// a while, and its changes keep the usual bound on what a machine
    /// crash loses.
    sync: (watch::Sender<bool>, JoinHandle<()>),
}

impl Runtime {
    /// Opens (or creates) the data directory and starts every component.
    pub async fn start(config: Config) -> anyhow::Result<Runtime> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir).with_context(|| {
            format!("cannot create data directory {}", config.data_dir.display())
        })?;
        let inventory = RedbInventory::open(
            &config.data_dir.join("inventory.redb"),
            InventoryConfig {
                reclaim_after: Duration::from_millis(config.inventory.reclaim_after_ms),
            },
        )
        .with_context(|| format!("cannot open the inventory in {}", config.data_dir.display()))?;
        let inventory: Arc<dyn Inventory> = Arc::new(inventory);
        let push_timeout = Duration::from_millis(config.queue.push_timeout_ms);
        let stores = Stores {
            labels: Arc::new(MemoryQueue::new(config.queue.bound, push_timeout)),
            tasks: Arc::new(MemoryQueue::new(config.queue.bound, push_timeout)),
            warehouse: Arc::new(MemoryWarehouse::new(
                config.warehouse.max_bytes,
                Duration::from_millis(config.warehouse.put_timeout_ms),
            )),
            inventory: inventory.clone(),
            locks: Arc::new(labios_store::locks::MemoryLocks::default()),
        };
        let (stores, _) = labios_store::faults::wrap(stores, &config.faults);
        let admin = Arc::new(Administrator::new(stores.inventory.clone()));
        admin.ensure_default_app().await?;
        let weights = config.dispatcher.weights()?;
        let manager = Arc::new(WorkerManager::new(
            stores.clone(),
            config.manager.clone(),
            config.worker_settings(),
            weights,
        ));
        for i in 0..config.workers.len() {
            manager
                .commission(config.worker_spec(i)?, config.worker_place(i))
                .await?;
        }
        let (shutdown, _) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut dispatch_stats = Vec::new();
        let directory: Arc<dyn WorkerDirectory> = manager.clone();
        for _ in 0..config.dispatchers {
            // The queues live in this process: a stop dispatches what they
            // hold first.
            let dispatcher =
                Dispatcher::new(config.dispatcher.clone(), stores.clone(), directory.clone())?
                    .draining();
            dispatch_stats.push(dispatcher.stats());
            tasks.push(tokio::spawn(dispatcher.run(
                Queues::Prefix(CLIENT_QUEUE_PREFIX.into()),
                shutdown.subscribe(),
            )));
        }
        let (sync_stop, sync_stopped) = watch::channel(false);
        let sync = tokio::spawn(sync_inventory(
            inventory,
            Duration::from_millis(config.inventory.sync_interval_ms),
            sync_stopped,
        ));
        Ok(Runtime {
            config,
            stores,
            admin,
            manager,
            dispatch_stats,
            shutdown,
            tasks,
            sync: (sync_stop, sync),
        })
    }

    /// A client of application `app` inside this process.
    pub async fn client(&self, app: AppId) -> anyhow::Result<Client> {
        let origin = self.stores.inventory.next_id("origin").await?;
        let secret = self.admin.app(app).await?.secret;
        Ok(Client::with_secret(
            self.stores.clone(),
            app,
            &secret,
            origin,
            self.config.client_settings(),
        )?)
    }

    /// Labels dispatched so far by all dispatchers.
    pub fn labels_dispatched(&self) -> u64 {
        self.dispatch_stats
            .iter()
            .map(|s| s.snapshot().labels)
            .sum()
    }

    /// Stops dispatchers and workers after every label published (the
    /// queues, in this process's memory, would lose the rest although
    /// their clients were told they were published) and makes the
    /// inventory durable.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.manager.drain_and_shutdown().await;
        let (stop, sync) = self.sync;
        let _ = stop.send(true);
        let _ = sync.await;
        self.stores.inventory.sync().await?;
        Ok(())
    }
}

async fn sync_inventory(
    inventory: Arc<dyn Inventory>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = inventory.sync().await {
            tracing::warn!("inventory sync failed: {e}");
        }
    }
}
