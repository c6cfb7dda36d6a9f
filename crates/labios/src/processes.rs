//! Components as their own processes (distributed deployment, article 3.4):
//! `labios dispatcher`, `labios worker INDEX` and `labios manager`,
//! configured from the same TOML file as everything else and meeting
//! through NATS and Redis.

use crate::config::Config;
use labios_connect::distributed_stores;
use labios_core::dispatcher::{Dispatcher, InventoryDirectory, Queues};
use labios_label::WorkerDirectory;
use labios_server::{ClusterManager, Launcher, LocalProcessLauncher, Worker};
use labios_store::CLIENT_QUEUE_PREFIX;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// How often a separate dispatcher refreshes its view of the worker pool.
const DIRECTORY_REFRESH: Duration = Duration::from_millis(100);

/// SIGINT and SIGTERM, caught from the moment this is made. A process
/// makes it before it announces itself, so that a signal sent as soon as
/// the announcement is seen stops it cleanly instead of killing it.
pub struct StopSignal {
    term: Signal,
    int: Signal,
}

impl StopSignal {
    pub fn install() -> anyhow::Result<StopSignal> {
        Ok(StopSignal {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves on the next SIGINT or SIGTERM.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }

    /// Runs `stopping` (a clean stop begun by the first signal) unless a
    /// second signal comes first: then `what` stops at once with an error
    /// saying so. Work already acknowledged is safe either way (README
    /// "Durability"); a clean stop also finishes the labels in progress.
    pub async fn or_again<T>(
        &mut self,
        what: &str,
        stopping: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        eprintln!("{what}: stopping (a second signal stops at once)");
        self.until_signal(what, "a second signal", stopping).await
    }

    /// `stopping`, unless a signal comes first: then at once, with an
    /// error saying what was not finished.
    pub async fn interruptible<T>(
        &mut self,
        what: &str,
        stopping: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        self.until_signal(what, "a signal", stopping).await
    }

    async fn until_signal<T>(
        &mut self,
        what: &str,
        signal: &str,
        stopping: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        tokio::select! {
            done = stopping => done,
            _ = self.recv() => anyhow::bail!(
                "{what}: stopped at once by {signal}; labels in progress were not finished"
            ),
        }
    }
}

/// `labios dispatcher`: serves every application's label queue. Several
/// dispatcher processes share the queues (each label goes to one of them).
pub async fn dispatcher(config: Config) -> anyhow::Result<()> {
    let mut signals = StopSignal::install()?;
    let stores = distributed_stores(&config.connection()).await?;
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
    signals.recv().await;
    let _ = stop.send(true);
    signals
        .or_again("labios dispatcher", async {
            for t in tasks {
                let _ = t.await;
            }
            Ok(())
        })
        .await
}

/// `labios worker INDEX`: worker INDEX of the configured pool, storing under
/// its directory and serving its own queue. `suspended`: start in reserve
/// (elastic allocation); a task in its queue wakes it.
pub async fn worker(config: Config, index: usize, suspended: bool) -> anyhow::Result<()> {
    let mut signals = StopSignal::install()?;
    let spec = config.worker_spec(index)?;
    let place = config.worker_place(index);
    let stores = distributed_stores(&config.connection()).await?;
    let handle = Worker::spawn(
        spec.clone(),
        place.clone(),
        stores,
        config.worker_settings(),
        config.dispatcher.weights()?,
    )
    .await?;
    if suspended {
        handle.suspend();
    }
    println!(
        "labios worker {index}: tier {} storing in {} (stack {})",
        spec.tier,
        place.dir.display(),
        place.stack
    );
    signals.recv().await;
    signals
        .or_again(&format!("labios worker {index}"), async {
            handle.shutdown().await;
            Ok(())
        })
        .await
}

/// `labios manager`: the worker manager of a distributed deployment (see
/// `labios_server::cluster_manager`). With `manager.launch` it starts the
/// configured workers as child processes of this binary, passing on the
/// same configuration file (the environment is inherited), and stops them
/// when it stops.
pub async fn manager(config: Config, config_file: Option<PathBuf>) -> anyhow::Result<()> {
    let mut signals = StopSignal::install()?;
    let stores = distributed_stores(&config.connection()).await?;
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
    signals.recv().await;
    signals
        .or_again("labios manager", async {
            manager.shutdown().await;
            Ok(())
        })
        .await?;
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

#[cfg(test)]
mod tests {
    use super::StopSignal;

    fn raise(signal: libc::c_int) {
        // SAFETY: kill(2) on this process with a signal StopSignal catches.
        assert_eq!(unsafe { libc::kill(libc::getpid(), signal) }, 0);
    }

    /// A clean stop runs to its end; a second signal during it ends it at
    /// once with an error that says so. Signals sent before anyone waits
    /// are not lost: they were caught from `install`.
    #[tokio::test]
    async fn a_second_signal_stops_at_once() {
        let mut signals = StopSignal::install().unwrap();
        raise(libc::SIGTERM);
        signals.recv().await;
        let clean = signals.or_again("test", async { Ok(7) }).await.unwrap();
        assert_eq!(clean, 7);
        raise(libc::SIGINT);
        let err = signals
            .or_again("test", std::future::pending::<anyhow::Result<()>>())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("second signal"), "{err}");
    }
}
