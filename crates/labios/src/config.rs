//! All settings of a LABIOS deployment in one TOML file (see
//! `labios.example.toml`), overridable from the environment:
//! `LABIOS_<SECTION>__<FIELD>` (e.g. `LABIOS_DISPATCHER__POLICY=random`).
//! Unknown or mistyped fields are errors that name the field.

use labios_bridge::MountConfig;
use labios_client::ClientConfig;
pub use labios_connect::Deployment;
use labios_connect::Settings;
use labios_core::dispatcher::DispatcherConfig;
use labios_distributed::nats_queue::NatsConfig;
use labios_distributed::redis_store::RedisConfig;
use labios_gateway::ObjectBucketConfig;
use labios_label::WorkerSpec;
use labios_server::{ManagerConfig, WorkerConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `embedded`: every component in one process (`labios serve`);
    /// `distributed`: label queues on NATS JetStream, warehouse and
    /// inventory on Redis, each component its own process.
    pub deployment: Deployment,
    /// Where workers, the inventory database and the default socket live.
    pub data_dir: PathBuf,
    /// Unix socket path or HOST:PORT clients use; default `DATA_DIR/labios.sock`.
    pub endpoint: Option<String>,
    /// Lets every local user connect to the Unix socket (mode 0666), not
    /// only its owner and root; what each may do is then decided by the
    /// permission rules (README "Permissions").
    pub all_local_users: bool,
    pub client: ClientConfig,
    pub dispatcher: DispatcherConfig,
    /// Number of dispatcher tasks serving the client queues.
    pub dispatchers: usize,
    pub manager: ManagerConfig,
    pub worker: WorkerConfig,
    pub workers: Vec<WorkerDecl>,
    pub queue: QueueConfig,
    pub warehouse: WarehouseConfig,
    pub inventory: InventorySettings,
    /// Distributed deployment: the NATS JetStream server(s) of the label queues.
    pub nats: NatsConfig,
    /// Distributed deployment: the Redis server(s) of warehouse and inventory.
    pub redis: RedisConfig,
    /// External storage (article 3.3.3a), `[mounts.NAME]`: what workers
    /// may read and write and clients may name as `NAME:/path`.
    pub mounts: BTreeMap<String, MountConfig>,
    /// The S3 gateway (`labios s3`).
    pub s3: S3Settings,
    /// `labios run` beyond its command line.
    pub run: RunSettings,
    /// Injected faults, for tests only (`labios_store::faults`); off
    /// unless `seed` is set.
    pub faults: labios_store::faults::FaultConfig,
}

/// `[s3]`: settings of `labios s3` beyond its command line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Settings {
    /// `[s3.buckets.NAME]`: buckets kept in a directory of a file system
    /// by an objects-to-files mapping (IRIS 3.4.1) instead of in the
    /// LABIOS namespace.
    pub buckets: BTreeMap<String, ObjectBucketConfig>,
}

/// `[run]`: how `labios run --near PATH` starts a program on another host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSettings {
    /// The command that runs `labios run -- PROGRAM` on host `{host}` (as
    /// workers name their hosts, `[worker] host`): `{command}` is where
    /// the command goes as one shell line (`cd` to this directory first),
    /// for launchers that hand a line to a shell, as `ssh` does; without
    /// it the command's words follow (`ip netns exec {host}`). Default:
    /// `ssh -o SendEnv=LABIOS_* {host} {command}`, which forwards the
    /// key, secret and `LABIOS_*` settings where the server accepts them
    /// (`AcceptEnv LABIOS_*`).
    pub launcher: Vec<String>,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            launcher: ["ssh", "-o", "SendEnv=LABIOS_*", "{host}", "{command}"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// One worker of the pool: its tier and what it declares about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerDecl {
    pub tier: String,
    /// 1 (<= 200 MB/s) .. 5 (>= 3500 MB/s).
    pub speed: u8,
    /// 1 (frugal) .. 5 (power hungry).
    pub energy: u8,
    /// Bytes the worker may store.
    pub capacity: u64,
    /// Storage directory; default `DATA_DIR/workers/<index>-<tier>`. Point a
    /// RAM tier at a tmpfs mount to make it RAM-backed.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Runs pipelines of functions (software-defined storage); a worker on a
    /// weak or shared node may decline them.
    #[serde(default = "yes")]
    pub functions: bool,
    /// The worker's I/O stack, layers first and its backend last: `["file"]`
    /// (a sparse file per LABIOS file, the default), `["tier", "file"]`
    /// (the default pool's `ram` worker), `["memory"]` (RAM, lost with the
    /// process) and the rest of README "Worker I/O stacks". A name the
    /// registry does not know is refused at start.
    #[serde(default)]
    pub stack: labios_stack::Spec,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// Labels a queue holds before producers wait (backpressure).
    pub bound: usize,
    pub push_timeout_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WarehouseConfig {
    /// Bytes of data in transit the warehouse holds before puts wait.
    pub max_bytes: u64,
    pub put_timeout_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InventorySettings {
    /// How often metadata is made crash-safe (fsync of the database).
    pub sync_interval_ms: u64,
    /// Completed label statuses nobody waited for are dropped after this.
    pub reclaim_after_ms: u64,
}

const GIB: u64 = 1 << 30;

impl Default for Config {
    fn default() -> Self {
        let decl = |tier: &str, speed, energy| WorkerDecl {
            tier: tier.into(),
            speed,
            energy,
            capacity: 64 * GIB,
            dir: None,
            functions: true,
            // The `ram` worker is a burst buffer: writes acknowledged from
            // memory and journaled, written back to its files (README
            // "Worker I/O stacks", `tier`), so that its speed class holds.
            stack: match tier {
                "ram" => labios_stack::Spec::try_from(vec!["tier".to_string(), "file".to_string()])
                    .expect("a valid stack"),
                _ => labios_stack::Spec::default(),
            },
        };
        let client = Settings::default();
        Config {
            deployment: client.deployment,
            data_dir: client.data_dir,
            endpoint: client.endpoint,
            client: client.client,
            dispatcher: DispatcherConfig::default(),
            dispatchers: 1,
            all_local_users: false,
            manager: ManagerConfig::default(),
            worker: WorkerConfig::default(),
            workers: vec![
                decl("ram", 5, 2),
                decl("nvme", 4, 2),
                decl("ssd", 3, 3),
                decl("hdd", 1, 4),
            ],
            queue: QueueConfig::default(),
            warehouse: WarehouseConfig::default(),
            inventory: InventorySettings::default(),
            nats: client.nats,
            redis: client.redis,
            mounts: client.mounts,
            s3: S3Settings::default(),
            run: RunSettings::default(),
            faults: client.faults,
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            bound: 65_536,
            push_timeout_ms: 60_000,
        }
    }
}

impl Default for WarehouseConfig {
    fn default() -> Self {
        WarehouseConfig {
            max_bytes: GIB,
            put_timeout_ms: 60_000,
        }
    }
}

impl Default for InventorySettings {
    fn default() -> Self {
        InventorySettings {
            sync_interval_ms: 1000,
            reclaim_after_ms: 60_000,
        }
    }
}

impl Config {
    /// Defaults, then the TOML file (if any), then `LABIOS_*` variables.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Config> {
        let config = labios_connect::settings::load(Config::default(), file)?;
        config.validate()?;
        Ok(config)
    }

    /// What a client reads of this configuration: the same view the C,
    /// preload and Python libraries load from the same file.
    pub fn connection(&self) -> Settings {
        let mut view = Settings::default();
        view.deployment = self.deployment;
        view.data_dir = self.data_dir.clone();
        view.endpoint = self.endpoint.clone();
        view.client = self.client.clone();
        view.nats = self.nats.clone();
        view.redis = self.redis.clone();
        view.mounts = self.mounts.clone();
        view.faults = self.faults.clone();
        view
    }

    /// The client settings, with the deployment's mounts.
    pub fn client_settings(&self) -> ClientConfig {
        ClientConfig {
            mounts: self.mounts.clone(),
            ..self.client.clone()
        }
    }

    /// The worker settings, with the deployment's mounts.
    pub fn worker_settings(&self) -> WorkerConfig {
        WorkerConfig {
            mounts: self.mounts.clone(),
            ..self.worker.clone()
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.connection().validate()?;
        self.dispatcher.validate()?;
        self.manager
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: [manager]: {e}"))?;
        self.worker
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: [worker]: {e}"))?;
        if self.workers.is_empty() {
            anyhow::bail!(
                "invalid configuration: field `workers` must declare at least one worker"
            );
        }
        for (i, w) in self.workers.iter().enumerate() {
            if !(1..=5).contains(&w.speed) {
                anyhow::bail!(
                    "invalid configuration: field `workers[{i}].speed` must be 1-5, got {}",
                    w.speed
                );
            }
            if !(1..=5).contains(&w.energy) {
                anyhow::bail!(
                    "invalid configuration: field `workers[{i}].energy` must be 1-5, got {}",
                    w.energy
                );
            }
            if w.capacity == 0 {
                anyhow::bail!("invalid configuration: field `workers[{i}].capacity` must be > 0");
            }
        }
        if self.dispatchers == 0 {
            anyhow::bail!("invalid configuration: field `dispatchers` must be at least 1");
        }
        if !self.run.launcher.iter().any(|a| a.contains("{host}")) {
            anyhow::bail!(
                "invalid configuration: field `run.launcher` must name the host as {{host}} \
                 (like [\"ssh\", \"{{host}}\"]), got {:?}",
                self.run.launcher
            );
        }
        if self.queue.bound == 0 {
            anyhow::bail!("invalid configuration: field `queue.bound` must be at least 1");
        }
        let staged = labios_store::warehouse::staged_bound(self.warehouse.max_bytes);
        if staged < self.client.max_label_size {
            anyhow::bail!(
                "invalid configuration: field `warehouse.max_bytes` ({}) leaves {staged} bytes for staged data \
                 (an eighth is kept for read results), less than client.max_label_size ({})",
                self.warehouse.max_bytes,
                self.client.max_label_size
            );
        }
        Ok(())
    }

    pub fn endpoint(&self) -> String {
        labios_connect::settings::endpoint(&self.data_dir, self.endpoint.as_deref())
    }

    /// What worker `index` of the pool declares about itself; its id is its index.
    pub fn worker_spec(&self, index: usize) -> anyhow::Result<WorkerSpec> {
        let Some(w) = self.workers.get(index) else {
            anyhow::bail!(
                "no worker {index}: the configuration declares {} workers",
                self.workers.len()
            );
        };
        Ok(WorkerSpec {
            id: index as u32,
            tier: w.tier.clone(),
            speed: w.speed,
            energy: w.energy,
            capacity: w.capacity,
            max_queue: self.worker.max_queue,
            functions: w.functions,
        })
    }

    pub fn worker_dir(&self, index: usize) -> PathBuf {
        let w = &self.workers[index];
        w.dir.clone().unwrap_or_else(|| {
            self.data_dir
                .join("workers")
                .join(format!("{index}-{}", w.tier))
        })
    }

    /// Where worker `index` keeps its bytes, on what stack, and the faults
    /// `[faults]` injects into its device (each worker its own sequence).
    pub fn worker_place(&self, index: usize) -> labios_stack::Place {
        let f = &self.faults;
        labios_stack::Place {
            dir: self.worker_dir(index),
            stack: self.workers[index].stack.clone(),
            faults: labios_stack::faults::DeviceFaults {
                seed: match f.seed {
                    0 => 0,
                    seed => (seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)).max(1),
                },
                error_ppm: f.error_ppm,
                lost_reply_ppm: f.lost_reply_ppm,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[run] launcher` must say where the host goes.
    #[test]
    fn a_launcher_names_the_host() {
        let mut c = Config::default();
        c.validate().unwrap();
        c.run.launcher = vec!["ssh".into()];
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("run.launcher") && err.contains("{host}"),
            "{err}"
        );
    }
}
