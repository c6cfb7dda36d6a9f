//! Components as their own processes (distributed deployment, article 3.4):
//! `labios dispatcher`, `labios worker INDEX` and `labios manager`,
//! configured from the same TOML file as everything else and meeting
//! through NATS and Redis.

use crate::config::Config;
use crate::deployment::distributed_stores;
use labios_core::dispatcher::{Dispatcher, InventoryDirectory, Queues};
use labios_label::WorkerDirectory;
use labios_server::{ClusterManager, Launcher, LocalProcessLauncher, Worker};
use labios_store::CLIENT_QUEUE_PREFIX;
use std::path::PathBuf;
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
    let directory: Arc<dyn WorkerDirectory> = Arc::new(
        InventoryDirectory::start(
            stores.inventory.clone(),
            DIRECTORY_REFRESH,
            config.manager.elastic(),
        )
        .await?,
    );
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
/// its directory and serving its own queue. `suspended`: start in reserve
/// (elastic allocation); a task in its queue wakes it.
pub async fn worker(config: Config, index: usize, suspended: bool) -> anyhow::Result<()> {
    let spec = config.worker_spec(index)?;
    let dir = config.worker_dir(index);
    let stores = distributed_stores(&config).await?;
    let handle = Worker::spawn(
        spec.clone(),
        dir.clone(),
        stores,
        config.worker_settings(),
        config.dispatcher.weights()?,
    )
    .await?;
    if suspended {
        handle.suspend();
    }
    println!(
        "labios worker {index}: tier {} storing in {}",
        spec.tier,
        dir.display()
    );
    stop_signal().await?;
    handle.shutdown().await;
    Ok(())
}

/// `labios manager`: the worker manager of a distributed deployment (see
/// `labios_server::cluster_manager`). With `manager.launch` it starts the
/// configured workers as child processes of this binary, passing on the
/// same configuration file (the environment is inherited), and stops them
/// when it stops.
pub async fn manager(config: Config, config_file: Option<PathBuf>) -> anyhow::Result<()> {
    let stores = distributed_stores(&config).await?;
    let launcher: Option<Arc<dyn Launcher>> = if config.manager.launch {
        let mut args = Vec::new();
        if let Some(file) = config_file {
            args.push("--config".into());
            args.push(std::fs::canonicalize(&file)?.into_os_string());
        }
        Some(Arc::new(LocalProcessLauncher::new(
            std::env::current_exe()?,
            args,
            Some(config.data_dir.join("logs")),
        )))
    } else {
        None
    };
    let manager = ClusterManager::start(
        stores,
        config.manager.clone(),
        config.workers.len(),
        launcher,
    )
    .await?;
    println!(
        "labios manager: watching {} workers (dead after {} ms{})",
        config.workers.len(),
        config.manager.dead_after_ms,
        if config.manager.launch {
            ", launched here"
        } else {
            ""
        }
    );
    stop_signal().await?;
    manager.shutdown().await;
    let stats = manager.stats();
    println!(
        "labios manager: {} deaths, {} returns, {} tasks re-dispatched, {} pinned labels failed, {} relaunches",
        stats.deaths, stats.returns, stats.redispatched, stats.failed_pinned, stats.relaunched
    );
    let latencies = manager.wake_latencies();
    if !latencies.is_empty() {
        let ms: Vec<String> = latencies
            .iter()
            .map(|l| format!("{:.2}", l.as_secs_f64() * 1e3))
            .collect();
        println!("labios manager: wake-up latencies (ms): {}", ms.join(" "));
    }
    Ok(())
}
