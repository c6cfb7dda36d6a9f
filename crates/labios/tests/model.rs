//! The model checker against every data path reached through the client
//! API (see `common/model.rs` for the checker): the embedded runtime, the
//! cluster (NATS + Redis + processes), and files over objects through each
//! IRIS mapping of an S3 mount, with strict and relaxed metadata, the
//! cache and prefetcher, and merged writes.
//!
//! CI runs a bounded number of cases per target; `LABIOS_MODEL_CASES=N`
//! runs more, `LABIOS_MODEL_SEED` replays a run, `LABIOS_MODEL_REPLAY`
//! replays one shrunk case (the failure message prints both commands).

mod common;

use async_trait::async_trait;
use bytes::Bytes;
use common::deploy::{Deployed, Kind};
use common::model::{check_target, Abilities, Run, Target, CLIENTS};
use labios_bridge::{Mapping, MetadataMode, MountConfig};
use labios_client::Client;
use labios_label::Error;
use labios_store::AppRecord;
use std::os::unix::fs::MetadataExt;
use tokio::sync::RwLock;

/// LABIOS through the client API: clients 0 and 1 of application A,
/// client 2 of application B; paths under `/model` or, with `mount`, in
/// that external mount.
struct Labios {
    deployed: RwLock<Deployed>,
    clients: RwLock<Vec<Client>>,
    apps: [AppRecord; 2],
    mount: Option<String>,
    abilities: Abilities,
}

impl Labios {
    async fn new(deployed: Deployed, mount: Option<String>) -> Labios {
        let apps = [
            deployed.create_app("model-a").await,
            deployed.create_app("model-b").await,
        ];
        let external = mount.is_some();
        let labios = Labios {
            abilities: Abilities {
                asynchronous: true,
                truncate: !external,
                rename: !external,
                xattrs: !external,
                // External storage keeps no owners.
                tenants: !external,
                restart: true,
                faults: false,
            },
            clients: RwLock::new(Vec::new()),
            deployed: RwLock::new(deployed),
            apps,
            mount,
        };
        labios.connect().await;
        labios
    }

    async fn connect(&self) {
        let d = self.deployed.read().await;
        let mut clients = Vec::with_capacity(CLIENTS);
        for c in 0..CLIENTS {
            let app = &self.apps[usize::from(c == common::model::OTHER_APP)];
            clients.push(d.client_of(app).await);
        }
        *self.clients.write().await = clients;
    }

    async fn client(&self, c: usize) -> Client {
        self.clients.read().await[c].clone()
    }

    /// Bytes allocated on every worker's device.
    async fn allocated(&self) -> u64 {
        let d = self.deployed.read().await;
        d.worker_dirs()
            .iter()
            .flat_map(|w| common::files_under(&w.join("files")))
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.blocks() * 512)
            .sum()
    }
}

#[async_trait]
impl Target for Labios {
    fn abilities(&self) -> Abilities {
        self.abilities
    }

    fn path(&self, case: u64, b: bool, file: usize) -> String {
        let app = if b { "b" } else { "a" };
        match &self.mount {
            Some(m) => format!("{m}:/model/c{case}/{app}/f{file}"),
            None => format!("/model/c{case}/{app}/f{file}"),
        }
    }

    async fn write(
        &self,
        client: usize,
        path: &str,
        offset: u64,
        data: Bytes,
        asynchronous: bool,
    ) -> Result<(), Error> {
        let c = self.client(client).await;
        if asynchronous {
            c.write_at_async(path, offset, data).await.map(|_| ())
        } else {
            c.write_at_sync(path, offset, data).await
        }
    }

    async fn wait_all(&self, client: usize) -> Result<(), Error> {
        self.client(client).await.wait_all().await
    }

    async fn read(&self, client: usize, path: &str, offset: u64, len: u64) -> Result<Bytes, Error> {
        self.client(client).await.read_at(path, offset, len).await
    }

    async fn stat(&self, client: usize, path: &str) -> Result<u64, Error> {
        self.client(client).await.stat(path).await.map(|m| m.size)
    }

    async fn truncate(&self, client: usize, path: &str, size: u64) -> Result<(), Error> {
        self.client(client).await.truncate(path, size).await
    }

    async fn rename(&self, client: usize, from: &str, to: &str) -> Result<(), Error> {
        self.client(client).await.rename(from, to).await
    }

    async fn remove(&self, client: usize, path: &str) -> Result<(), Error> {
        self.client(client).await.remove(path).await
    }

    async fn flush(&self, client: usize, path: &str) -> Result<(), Error> {
        self.client(client).await.flush(path).await
    }

    async fn set_xattr(
        &self,
        client: usize,
        path: &str,
        name: &str,
        value: Option<Bytes>,
    ) -> Result<(), Error> {
        self.client(client).await.set_xattr(path, name, value).await
    }

    async fn xattrs(&self, client: usize, path: &str) -> Result<Vec<(String, Bytes)>, Error> {
        self.client(client).await.xattrs(path).await
    }

    async fn restart(&self) {
        self.clients.write().await.clear();
        self.deployed.write().await.restart().await;
        self.connect().await;
    }

    async fn settled(&self) -> Result<(), String> {
        // External data is not on the workers. Under injected faults a
        // label that wrote its bytes and then failed may leave them behind
        // until the worker's next start reconciles its device.
        if self.mount.is_some() || self.abilities.faults {
            return Ok(());
        }
        common::model::space_given_back(|| self.allocated()).await
    }
}

async fn labios_target(kind: Kind, default_cases: u64) {
    let name = match kind {
        Kind::Embedded => "embedded",
        Kind::Cluster => "cluster",
    };
    let run = Run::from_env(default_cases);
    let d = Deployed::start(kind, |_| {}).await;
    let target = Labios::new(d, None).await;
    check_target(name, &target, &run).await;
    target.deployed.into_inner().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded() {
    labios_target(Kind::Embedded, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster() {
    labios_target(Kind::Cluster, 10).await;
}

/// The IRIS file mappings over a real S3 server (versitygw), each mount
/// a target of its own on one embedded deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn iris_mappings() {
    let s3 = common::s3::S3Server::start();
    s3.bucket("model");
    let mounts: Vec<(&str, MountConfig)> = vec![
        ("direct", s3.mount("s3://model/direct")),
        (
            "balanced",
            MountConfig {
                mapping: Mapping::Balanced,
                bucket_size: Some(64 << 10),
                ..s3.mount("s3://model/balanced")
            },
        ),
        (
            "balanced_relaxed_cached",
            MountConfig {
                mapping: Mapping::Balanced,
                bucket_size: Some(64 << 10),
                metadata: MetadataMode::Relaxed,
                cache_bytes: 2 << 20,
                cache_block: Some(32 << 10),
                ..s3.mount("s3://model/brc")
            },
        ),
        (
            "write_optimized_merged",
            MountConfig {
                mapping: Mapping::WriteOptimized,
                metadata: MetadataMode::Relaxed,
                aggregate_bytes: 256 << 10,
                ..s3.mount("s3://model/wom")
            },
        ),
        (
            "write_optimized_cached",
            MountConfig {
                mapping: Mapping::WriteOptimized,
                cache_bytes: 1 << 20,
                cache_block: Some(64 << 10),
                ..s3.mount("s3://model/woc")
            },
        ),
        (
            "read_optimized",
            MountConfig {
                mapping: Mapping::ReadOptimized,
                bucket_size: Some(64 << 10),
                ..s3.mount("s3://model/ro")
            },
        ),
        (
            "read_optimized_relaxed_merged",
            MountConfig {
                mapping: Mapping::ReadOptimized,
                bucket_size: Some(64 << 10),
                metadata: MetadataMode::Relaxed,
                aggregate_bytes: 128 << 10,
                cache_bytes: 1 << 20,
                ..s3.mount("s3://model/rorm")
            },
        ),
    ];
    let declared = mounts.clone();
    let run = Run::from_env(4);
    let d = Deployed::start(Kind::Embedded, move |c| {
        for (name, m) in declared {
            c.mounts.insert(name.to_string(), m);
        }
    })
    .await;
    let mut target = Labios::new(d, None).await;
    for (name, _) in &mounts {
        target.mount = Some(name.to_string());
        target.abilities = Abilities {
            truncate: false,
            rename: false,
            xattrs: false,
            tenants: false,
            ..target.abilities
        };
        check_target(&format!("iris_mappings/{name}"), &target, &run).await;
    }
    target.deployed.into_inner().shutdown().await;
}

/// The embedded runtime with faults injected into its warehouse,
/// inventory and queues (README "Durability: what survives what"): every
/// operation that succeeded is kept, every one that failed changed all or
/// nothing (a write: each byte old or new), and no label is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_with_faults() {
    let run = Run::from_env(20);
    let faults = labios_store::faults::FaultConfig {
        seed: run.seed | 1,
        error_ppm: 5_000,
        lost_reply_ppm: 5_000,
        delay_ppm: 5_000,
        max_delay_ms: 20,
        duplicate_ppm: 5_000,
        lost_ack_ppm: 0,
    };
    let d = Deployed::start(Kind::Embedded, move |c| c.faults = faults).await;
    let mut target = Labios::new(d, None).await;
    target.abilities = Abilities {
        asynchronous: false,
        restart: false,
        faults: true,
        ..target.abilities
    };
    check_target("embedded_with_faults", &target, &run).await;
    target.deployed.into_inner().shutdown().await;
}
