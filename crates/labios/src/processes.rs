//! Components as their own processes (distributed deployment, article 3.4):
//! `labios dispatcher` and `labios worker INDEX`, configured from the same
//! TOML file as everything else and meeting through NATS and Redis.

use crate::config::Config;
use crate::deployment::distributed_stores;
use labios_core::dispatcher::{Dispatcher, InventoryDirectory, Queues};
use labios_label::WorkerDirectory;
use labios_server::Worker;
use labios_store::CLIENT_QUEUE_PREFIX;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// How often a separate dispatcher refreshes its view of the worker pool.
const DIRECTORY_REFRESH: Duration = Duration::from_millis(100);

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// `labios dispatcher`: serves every application's label queue. Several
/// dispatcher processes share the queues (each label goes to one of them).
pub async fn dispatcher(config: Config) -> anyhow::Result<()> {
    let stores = distributed_stores(&config).await?;
    let directory: Arc<dyn WorkerDirectory> =
        Arc::new(InventoryDirectory::start(stores.inventory.clone(), DIRECTORY_REFRESH).await?);
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..config.dispatchers {
        let d = Dispatcher::new(config.dispatcher.clone(), stores.clone(), directory.clone())?;
        tasks.push(tokio::spawn(
            d.run(Queues::Prefix(CLIENT_QUEUE_PREFIX.into()), stopped.clone()),
        ));
    }
    println!(
        "labios dispatcher: serving {CLIENT_QUEUE_PREFIX}* (NATS {})",
        config.nats.url
    );
    stop_signal().await?;
    let _ = stop.send(true);
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

/// `labios worker INDEX`: worker INDEX of the configured pool, storing under
/// its directory and serving its own queue.
pub async fn worker(config: Config, index: usize) -> anyhow::Result<()> {
    let spec = config.worker_spec(index)?;
    let dir = config.worker_dir(index);
    let stores = distributed_stores(&config).await?;
    let handle = Worker::spawn(
        spec.clone(),
        dir.clone(),
        stores,
        config.worker.clone(),
        config.dispatcher.weights()?,
    )
    .await?;
    println!(
        "labios worker {index}: tier {} storing in {}",
        spec.tier,
        dir.display()
    );
    stop_signal().await?;
    handle.shutdown().await;
    Ok(())
}
