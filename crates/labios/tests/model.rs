//! The model checker against every data path reached through the client
//! API (see `common/model.rs` for the checker): the embedded runtime, the
//! cluster (NATS + Redis + processes), and files over objects through each
//! IRIS mapping of an S3 mount, with strict and relaxed metadata, the
//! cache and prefetcher, and merged writes, with the clients in the
//! runtime's process and in another (`labios serve`).
//!
//! CI runs a bounded number of cases per target; `LABIOS_MODEL_CASES=N`
//! runs more, `LABIOS_MODEL_SEED` replays a run, `LABIOS_MODEL_REPLAY`
//! replays one shrunk case (the failure message prints both commands).

mod common;

use async_trait::async_trait;
use common::deploy::{Deployed, Kind};
use common::model::{check_target, Abilities, Run};
use common::model_client::{ClientApi, Deployment};
use common::serve::Server;
use labios_bridge::{Mapping, MetadataMode, MountConfig};
use labios_client::Client;
use labios_store::AppRecord;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use tokio::sync::RwLock;

/// LABIOS through the client API (`common/model_client.rs`): paths under
/// `/model` or, with `mount`, in that external mount.
struct Labios {
    deployed: RwLock<Deployed>,
    apps: [AppRecord; 2],
    mount: Option<String>,
    abilities: Abilities,
}

impl Labios {
    /// The target on LABIOS's own namespace; iris_mappings then points it
    /// at a mount.
    async fn new(deployed: Deployed) -> ClientApi<Labios> {
        let apps = [
            deployed.create_app("model-a").await,
            deployed.create_app("model-b").await,
        ];
        ClientApi::new(Labios {
            abilities: Abilities::EVERY_OPERATION,
            deployed: RwLock::new(deployed),
            apps,
            mount: None,
        })
        .await
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
impl Deployment for Labios {
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

    async fn client(&self, b: bool) -> Client {
        let app = &self.apps[usize::from(b)];
        self.deployed.read().await.client_of(app).await
    }

    async fn restart(&self) {
        self.deployed.write().await.restart().await;
    }

    async fn settled(&self) -> Result<(), String> {
        let warehouse = self.deployed.read().await.stores().warehouse;
        let emptied = common::model::warehouse_emptied(|| async {
            warehouse.usage().await.expect("warehouse usage")
        })
        .await;
        if let Err(e) = emptied {
            let keys = warehouse.keys("").await.unwrap_or_default();
            return Err(format!("{e}: {keys:?}"));
        }
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
    labios_target_on(kind, name, default_cases, |_| {}).await;
}

async fn labios_target_on(
    kind: Kind,
    name: &str,
    default_cases: u64,
    tweak: impl FnOnce(&mut labios::Config),
) {
    let run = Run::from_env(default_cases);
    let d = Deployed::start(kind, tweak).await;
    let target = Labios::new(d).await;
    check_target(name, &target, &run).await;
    target.deployment.deployed.into_inner().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded() {
    labios_target(Kind::Embedded, 30).await;
}

/// Stacks of named layers for a pool of workers: checksums, a cache, both
/// codecs, meters, schedulers and small tiers, over files, over a
/// key-value store and over blocks in the mount `pfs` (`external`).
const LAYERED_STACKS: [&[&str]; 4] = [
    &[
        "metrics",
        "checksum",
        "cache:8MiB",
        "zstd",
        "scheduler:small:2",
        "file",
    ],
    &["tier:1MiB", "lz4", "scheduler", "external:pfs"],
    &["checksum", "kv"],
    &["tier:1MiB", "zstd", "file"],
];

/// Every worker of `c` on one of [`LAYERED_STACKS`], the mount `pfs` a
/// directory under the data directory.
fn on_layered_stacks(c: &mut labios::Config) {
    let pfs = c.data_dir.join("pfs");
    std::fs::create_dir_all(&pfs).unwrap();
    c.mounts.insert(
        "pfs".into(),
        MountConfig {
            uri: format!("fs://{}", pfs.display()),
            ..Default::default()
        },
    );
    for (w, names) in c.workers.iter_mut().zip(LAYERED_STACKS.iter().cycle()) {
        w.stack =
            labios_stack::Spec::try_from(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
    }
}

/// The embedded pool with every worker on a stack of named layers: what
/// the layers store and rewrite reads as the model says.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_on_layered_stacks() {
    labios_target_on(
        Kind::Embedded,
        "embedded_on_layered_stacks",
        30,
        on_layered_stacks,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster() {
    labios_target(Kind::Cluster, 10).await;
}

/// Every IRIS file mapping of an S3 mount at `s3`, named: strict and
/// relaxed metadata, the cache and prefetcher, and merged writes.
fn iris_mounts(s3: &common::s3::S3Server) -> Vec<(&'static str, MountConfig)> {
    vec![
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
    ]
}

/// What the checker may do on external storage: no end of file to extend
/// atomically, no owners.
fn external(abilities: Abilities) -> Abilities {
    Abilities {
        append: false,
        truncate: false,
        rename: false,
        xattrs: false,
        tenants: false,
        allocate: false,
        ..abilities
    }
}

/// The IRIS file mappings over a real S3 server (versitygw), each mount
/// a target of its own on one embedded deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn iris_mappings() {
    let s3 = common::s3::S3Server::start();
    s3.bucket("model");
    let mounts = iris_mounts(&s3);
    let declared = mounts.clone();
    let run = Run::from_env(4);
    let d = Deployed::start(Kind::Embedded, move |c| {
        for (name, m) in declared {
            c.mounts.insert(name.to_string(), m);
        }
    })
    .await;
    let mut target = Labios::new(d).await;
    for (name, _) in &mounts {
        target.deployment.mount = Some(name.to_string());
        target.deployment.abilities = external(target.deployment.abilities);
        check_target(&format!("iris_mappings/{name}"), &target, &run).await;
    }
    target.deployment.deployed.into_inner().shutdown().await;
}

/// `labios serve` in a process of its own, and the checker's clients in
/// this one, connected through its socket as every program using the C,
/// preload or Python library is: what a mount keeps in the workers'
/// process (merged writes, relaxed metadata, its cache) must be what such
/// a client sees. (A client that answered metadata from a mount instance
/// of its own once missed acknowledged writes this way.)
struct Served {
    dir: tempfile::TempDir,
    /// The configuration file the server reads.
    config: PathBuf,
    /// What the clients read of it, and the server's socket.
    settings: labios_connect::Settings,
    server: RwLock<Option<Server>>,
    /// Application A's and B's key and secret.
    apps: [(String, String); 2],
    /// The mount the checker's files are in; LABIOS's namespace if none.
    mount: Option<String>,
    abilities: Abilities,
}

impl Served {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Stops the server cleanly at the end of a target.
    fn stop(self) {
        self.server.into_inner().expect("a server runs").stop();
    }

    /// Starts `labios serve` with `mounts` declared in its configuration
    /// file (TOML written from each mount's fields), the checker's files
    /// in the first.
    async fn on_mounts(mounts: &[(&str, MountConfig)]) -> ClientApi<Served> {
        let dir = tempfile::tempdir().unwrap();
        let mut toml = String::new();
        for (name, mount) in mounts {
            toml.push_str(&mount_toml(name, mount));
        }
        let mut target = Served::start(dir, &toml, mounts, Some(mounts[0].0)).await;
        target.deployment.abilities = external(Abilities::EVERY_OPERATION);
        target
    }

    /// Starts `labios serve` with its workers on [`LAYERED_STACKS`], the
    /// checker's files in LABIOS's namespace.
    async fn on_layered_stacks() -> ClientApi<Served> {
        let dir = tempfile::tempdir().unwrap();
        let pfs = dir.path().join("pfs");
        std::fs::create_dir_all(&pfs).unwrap();
        let mounts = [(
            "pfs",
            MountConfig {
                uri: format!("fs://{}", pfs.display()),
                ..Default::default()
            },
        )];
        let mut toml = mount_toml(mounts[0].0, &mounts[0].1);
        for (stack, tier) in LAYERED_STACKS.iter().zip(["ram", "nvme", "ssd", "hdd"]) {
            toml.push_str(&format!(
                "[[workers]]\ntier = \"{tier}\"\nspeed = 3\nenergy = 3\n\
                 capacity = 68719476736\nstack = {stack:?}\n"
            ));
        }
        Served::start(dir, &toml, &mounts, None).await
    }

    /// Starts `labios serve` on the configuration `toml`, in `dir`, its
    /// clients told of `mounts`, with the checker's files in `mount`
    /// (LABIOS's namespace if none).
    async fn start(
        dir: tempfile::TempDir,
        toml: &str,
        mounts: &[(&str, MountConfig)],
        mount: Option<&str>,
    ) -> ClientApi<Served> {
        let config = dir.path().join("labios.toml");
        std::fs::write(&config, toml).unwrap();
        let data = dir.path().join("data");
        let server = Server::start_configured(&data, Some(&config));
        let apps = [server.create_app("model-a"), server.create_app("model-b")];
        let mut settings = labios_connect::Settings::default();
        settings.data_dir = data;
        settings.endpoint = Some(server.endpoint.to_string_lossy().into_owned());
        settings.mounts = mounts
            .iter()
            .map(|(n, m)| (n.to_string(), m.clone()))
            .collect();
        ClientApi::new(Served {
            abilities: Abilities::EVERY_OPERATION,
            mount: mount.map(str::to_string),
            server: RwLock::new(Some(server)),
            dir,
            config,
            settings,
            apps,
        })
        .await
    }
}

/// `[mounts.NAME]` with each field of `mount` that is set.
fn mount_toml(name: &str, mount: &MountConfig) -> String {
    let mut toml = format!("[mounts.{name}]\n");
    let serde_json::Value::Object(fields) = serde_json::to_value(mount).unwrap() else {
        panic!("a mount serializes as a table");
    };
    for (field, value) in fields.iter().filter(|(_, v)| !v.is_null()) {
        toml.push_str(&format!("{field} = {value}\n"));
    }
    toml
}

#[async_trait]
impl Deployment for Served {
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

    async fn client(&self, b: bool) -> Client {
        let (key, secret) = &self.apps[usize::from(b)];
        labios_connect::connect_client(&self.settings, Some(key.clone()), Some(secret.clone()))
            .await
            .expect("a client connects to labios serve")
    }

    /// A stop and a start on the same data directory: a crash (SIGKILL)
    /// where nothing is held back by design, which must lose nothing
    /// acknowledged (the workers' stacks' tiers included: README "Worker
    /// I/O stacks"); a clean stop (SIGTERM) where the mount holds writes
    /// back (merged writes, relaxed metadata), which must store them
    /// first. A crash may lose those by design (README: `hold_ms`).
    async fn restart(&self) {
        let holds_back = self.mount.as_ref().is_some_and(|m| {
            let mount = &self.settings.mounts[m];
            mount.metadata == MetadataMode::Relaxed || mount.aggregate_bytes > 0
        });
        let mut server = self.server.write().await;
        let running = server.take().expect("a server runs");
        if holds_back {
            running.stop();
        } else {
            running.kill();
        }
        *server = Some(Server::start_configured(&self.data(), Some(&self.config)));
    }

    /// Every warehouse entry taken, seen as the service.
    async fn settled(&self) -> Result<(), String> {
        let file = labios_connect::service_secret_file(&self.data());
        let secret =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let endpoint = labios_store::remote::Endpoint::parse(&self.settings.endpoint())
            .map_err(|e| e.to_string())?;
        let key = labios_core::administrator::SERVICE_KEY;
        let (stores, _) = labios_store::remote::connect(&endpoint, Some(key.into()), Some(secret))
            .await
            .map_err(|e| format!("the service cannot connect: {e}"))?;
        let warehouse = stores.warehouse;
        common::model::warehouse_emptied(|| async {
            warehouse.usage().await.expect("warehouse usage")
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn served_mappings() {
    let s3 = common::s3::S3Server::start();
    s3.bucket("model");
    let mounts = iris_mounts(&s3);
    let mut run = Run::from_env(2);
    // What a crash of the server keeps of acknowledged writes, and a
    // clean stop of merged writes and relaxed metadata, is this target's
    // question: a restart in about one case of 24 steps in two.
    run.restart_one_in = 48;
    let mut target = Served::on_mounts(&mounts).await;
    for (name, _) in &mounts {
        target.deployment.mount = Some(name.to_string());
        check_target(&format!("served_mappings/{name}"), &target, &run).await;
    }
    target.deployment.stop();
}

/// `labios serve` in a process of its own with its workers on layered
/// stacks (tiers journaled in memory, checksums, a cache, codecs, a
/// key-value store, blocks in a mount), crashed with `kill -9` between
/// steps: every write acknowledged before a crash reads back after it, as
/// the model says, whatever layer held it when the server died.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn served_on_layered_stacks() {
    let mut run = Run::from_env(10);
    // A crash in about one case of 24 steps.
    run.restart_one_in = 24;
    let target = Served::on_layered_stacks().await;
    check_target("served_on_layered_stacks", &target, &run).await;
    target.deployment.stop();
}

/// The embedded runtime with faults injected into its warehouse,
/// inventory and queues, and into its workers' devices under layered
/// stacks (README "Durability: what survives what"): every
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
    let d = Deployed::start(Kind::Embedded, move |c| {
        c.faults = faults;
        on_layered_stacks(c);
    })
    .await;
    let mut target = Labios::new(d).await;
    target.deployment.abilities = Abilities {
        asynchronous: false,
        restart: false,
        faults: true,
        ..target.deployment.abilities
    };
    check_target("embedded_with_faults", &target, &run).await;
    target.deployment.deployed.into_inner().shutdown().await;
}
