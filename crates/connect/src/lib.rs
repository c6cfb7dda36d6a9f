//! How a client reaches LABIOS, shared by the `labios` command, the C
//! library, the preload library and the Python package: the client's view
//! of the configuration ([`Settings`]), a client of `labios serve` or of
//! NATS and Redis ([`connect_client`]), and the service's own access for
//! administration ([`service_inventory`], [`set_worker_stack`]), and the
//! blocking [`Session`] the C API, the preload library and the Python
//! package wrap.
//!
//! It is its own crate so that a library a program loads links only this
//! and the client, never the server, the gateway or the function sandbox.

pub mod session;
pub mod settings;

pub use session::{ConnectOptions, Session, Ticket};
pub use settings::{Deployment, Settings};

use anyhow::Context;
use labios_client::Client;
use labios_core::administrator::{Administrator, DEFAULT_APP};
use labios_distributed::nats_queue::JetStreamQueue;
use labios_distributed::redis_store::{RedisInventory, RedisLocks, RedisWarehouse};
use labios_label::{Label, Task, WorkerStatus};
use labios_store::remote::{connect, connect_sharing, Endpoint};
use labios_store::{Inventory, Stores};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client: of the `labios serve` at the configured endpoint (the embedded
/// deployment's, or a node gateway of the distributed deployment when the
/// configuration names an endpoint), or else straight on NATS and Redis
/// with the configuration's service credentials, trusted as root is.
pub async fn connect_client(
    config: &Settings,
    key: Option<String>,
    secret: Option<String>,
) -> anyhow::Result<Client> {
    let gateway = config.endpoint.is_some();
    match config.deployment {
        Deployment::Distributed if !gateway => {
            let stores = distributed_stores(config).await?;
            let admin = Administrator::new(stores.inventory.clone());
            let app = admin
                .authenticate(key.as_deref(), secret.as_deref())
                .await?;
            // The registry holds the secret the client presented (or the
            // default application's, for a client without credentials).
            let secret = admin.app(app).await?.secret;
            let origin = stores.inventory.next_id("origin").await?;
            Ok(Client::with_secret(
                stores,
                app,
                &secret,
                origin,
                config.client_settings(),
            )?)
        }
        _ => {
            let endpoint = Endpoint::parse(&config.endpoint())?;
            let shared = config.client.shared_memory;
            let (stores, session) = connect_sharing(&endpoint, key, secret, shared).await?;
            Ok(Client::with_secret(
                stores,
                session.app,
                &session.secret,
                session.origin,
                config.client_settings(),
            )?)
        }
    }
}

/// The inventory as LABIOS itself sees it, for what only the service may
/// do: through `labios serve` with the service secret it keeps in its
/// data directory (embedded), or NATS and Redis with the configuration's
/// service credentials (distributed).
pub async fn service_inventory(
    config: &Settings,
) -> anyhow::Result<std::sync::Arc<dyn labios_store::Inventory>> {
    match config.deployment {
        Deployment::Embedded => {
            let endpoint = Endpoint::parse(&config.endpoint())?;
            let file = service_secret_file(&config.data_dir);
            let secret = std::fs::read_to_string(&file).with_context(|| {
                format!(
                    "reading the service secret that `labios serve` keeps in its data directory, {}: run as the same user with the same data directory (--config / LABIOS_DATA_DIR)",
                    file.display()
                )
            })?;
            let key = labios_core::administrator::SERVICE_KEY;
            Ok(connect(&endpoint, Some(key.into()), Some(secret))
                .await
                .with_context(|| {
                    format!(
                        "the server at {endpoint} refused the service secret in {}",
                        file.display()
                    )
                })?
                .0
                .inventory)
        }
        Deployment::Distributed => Ok(distributed_stores(config).await?.inventory),
    }
}

/// Where `labios serve` keeps the secret of its service credential (see
/// [`SERVICE_KEY`](labios_core::administrator::SERVICE_KEY)), readable by its owner only: whoever can read the data
/// directory can read every worker's bytes anyway.
pub fn service_secret_file(data_dir: &Path) -> PathBuf {
    data_dir.join("service.secret")
}

/// A stack as people write it: module names, comma-separated, the backend
/// last (`checksum,zstd,file`).
pub fn parse_stack(names: &str) -> labios_label::Result<labios_stack::Spec> {
    labios_stack::Spec::try_from(
        names
            .split(',')
            .map(|n| n.trim().to_string())
            .collect::<Vec<_>>(),
    )
}

/// Changes running worker `worker`'s stack to `spec` (LabStor's live
/// upgrade), as the service: asks the worker through the inventory, then
/// returns once its status says it runs `spec` (a worker looks at each
/// heartbeat). The command, the C library and the Python package share
/// it, so each refuses the same things with the same words.
pub async fn set_worker_stack(
    config: &Settings,
    worker: u32,
    spec: &labios_stack::Spec,
) -> labios_label::Result<()> {
    use labios_label::Error;
    let inventory = service_inventory(config)
        .await
        .map_err(|e| match e.downcast::<Error>() {
            Ok(e) => e,
            Err(e) => Error::PermissionDenied(format!("only the service changes stacks: {e:#}")),
        })?;
    let status = |workers: Vec<WorkerStatus>| workers.into_iter().find(|w| w.spec.id == worker);
    let workers = inventory.workers().await?;
    let ids: Vec<String> = workers.iter().map(|w| w.spec.id.to_string()).collect();
    let Some(now) = status(workers) else {
        return Err(Error::NotFound(format!(
            "no worker {worker} (workers: {})",
            ids.join(", ")
        )));
    };
    if let Some(backend) = now.stack.last().filter(|b| b.as_str() != spec.backend()) {
        return Err(Error::InvalidArgument(format!(
            "stack: {spec} keeps its bytes on {:?}, worker {worker} on {backend:?}; a running worker changes its layers, not its backend",
            spec.backend()
        )));
    }
    let wanted: Vec<String> = spec.clone().into();
    inventory.ask_stack(worker, wanted.clone()).await?;
    // A worker takes the request at its next heartbeat (a score interval).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if status(inventory.workers().await?).is_some_and(|w| w.stack == wanted) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "worker {worker} did not take stack {spec} within 15 s (is it running? its log says why it refused)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Connects to the NATS and Redis servers named in the configuration.
pub async fn distributed_stores(config: &Settings) -> anyhow::Result<Stores> {
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
