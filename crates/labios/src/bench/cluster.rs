//! A throwaway distributed deployment for benchmarks (`--cluster`): real
//! nats-server and redis-server on free loopback ports, `labios dispatcher`
//! and `labios worker` processes, all under one temporary directory and all
//! stopped when it is dropped.

use crate::config::{Config, Deployment};
use anyhow::Context;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct LocalCluster {
    pub config: Config,
    pub dir: tempfile::TempDir,
    servers: Vec<Child>,
    dispatchers: Vec<Child>,
    workers: Vec<Child>,
}

impl LocalCluster {
    pub fn start(base: &Config, workers: usize) -> anyhow::Result<LocalCluster> {
        let dir = tempfile::tempdir()?;
        let nats_dir = dir.path().join("nats");
        let redis_dir = dir.path().join("redis");
        std::fs::create_dir_all(&redis_dir)?;
        let (nats_log, redis_log) = (dir.path().join("nats.log"), dir.path().join("redis.log"));
        let mut config = base.clone();
        config.deployment = Deployment::Distributed;
        config.data_dir = dir.path().join("data");
        // Built first, so that its drop stops whatever started if a later
        // start fails.
        let mut cluster = LocalCluster {
            config,
            dir,
            servers: Vec::new(),
            dispatchers: Vec::new(),
            workers: Vec::new(),
        };
        let (nats_server, nats) = labios_ports::start_service("nats-server", &nats_log, |port| {
            let mut c = Command::new("nats-server");
            c.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                .arg(&nats_dir);
            c
        })?;
        cluster.servers.push(nats_server);
        let (redis_server, redis) =
            labios_ports::start_service("redis-server", &redis_log, |port| {
                let mut c = Command::new("redis-server");
                c.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
                    .arg(&redis_dir)
                    .args(["--appendonly", "yes", "--save", ""]);
                c
            })?;
        cluster.servers.push(redis_server);
        labios_ports::await_redis(redis)?;
        cluster.config.nats.url = format!("nats://127.0.0.1:{nats}");
        cluster.config.redis.urls = vec![format!("redis://127.0.0.1:{redis}")];
        for i in 0..workers {
            let child = cluster.labios(&["worker", &i.to_string()])?;
            cluster.workers.push(child);
        }
        cluster.set_dispatchers(1)?;
        Ok(cluster)
    }

    /// A `labios` child process with this cluster's configuration.
    fn labios(&self, args: &[&str]) -> anyhow::Result<Child> {
        let c = &self.config;
        Command::new(std::env::current_exe()?)
            .args(args)
            .env("LABIOS_DEPLOYMENT", "distributed")
            .env("LABIOS_NATS__URL", &c.nats.url)
            .env("LABIOS_REDIS__URLS", format!("[\"{}\"]", c.redis.urls[0]))
            .env("LABIOS_DATA_DIR", &c.data_dir)
            .stdout(Stdio::null())
            .spawn()
            .context("cannot start a labios process")
    }

    /// Runs exactly `n` dispatcher processes.
    pub fn set_dispatchers(&mut self, n: usize) -> anyhow::Result<()> {
        for mut d in self.dispatchers.drain(..) {
            stop(&mut d);
        }
        for _ in 0..n {
            let child = self.labios(&["dispatcher"])?;
            self.dispatchers.push(child);
        }
        Ok(())
    }

    /// Waits until `n` workers have registered in the inventory.
    pub async fn wait_workers(
        &self,
        inventory: &dyn labios_store::Inventory,
        n: usize,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while inventory.workers().await?.len() < n {
            anyhow::ensure!(
                Instant::now() < deadline,
                "workers did not register within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

/// SIGTERM, so LABIOS processes stop cleanly, then reap.
fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for c in self
            .dispatchers
            .iter_mut()
            .chain(self.workers.iter_mut())
            .chain(self.servers.iter_mut())
        {
            stop(c);
        }
    }
}
