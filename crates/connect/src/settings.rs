//! The client's view of the configuration: the file and `LABIOS_*`
//! variables the `labios` command reads, of which a client uses only how to
//! reach the deployment and its own settings.
//!
//! The sections only servers use (`[dispatcher]`, `[[workers]]`, `[s3]` ...)
//! are accepted and not read, so that a C program or Python session never
//! links the server to parse them; `labios serve` refuses their mistakes.
//! Top-level names stay checked: a misspelled section is refused by a client
//! as by the command.

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use labios_client::ClientConfig;
use labios_distributed::nats_queue::NatsConfig;
use labios_distributed::redis_store::RedisConfig;
use labios_mounts::{MetadataMode, MountConfig, MountTable};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Deployment {
    Embedded,
    Distributed,
}

/// What a client reads of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// `embedded`: every component in one process (`labios serve`);
    /// `distributed`: label queues on NATS JetStream, warehouse and
    /// inventory on Redis, each component its own process.
    pub deployment: Deployment,
    /// Where workers, the inventory database and the default socket live.
    pub data_dir: PathBuf,
    /// Unix socket path or HOST:PORT clients use; default `DATA_DIR/labios.sock`.
    pub endpoint: Option<String>,
    pub client: ClientConfig,
    /// Distributed deployment: the NATS JetStream server(s) of the label queues.
    pub nats: NatsConfig,
    /// Distributed deployment: the Redis server(s) of warehouse and inventory.
    pub redis: RedisConfig,
    /// External storage, `[mounts.NAME]`: what clients may name as `NAME:/path`.
    pub mounts: BTreeMap<String, MountConfig>,
    /// Injected faults, for tests only; off unless `seed` is set.
    pub faults: labios_store::faults::FaultConfig,
    #[serde(skip_serializing)]
    all_local_users: IgnoredAny,
    #[serde(skip_serializing)]
    dispatcher: IgnoredAny,
    #[serde(skip_serializing)]
    dispatchers: IgnoredAny,
    #[serde(skip_serializing)]
    manager: IgnoredAny,
    #[serde(skip_serializing)]
    worker: IgnoredAny,
    #[serde(skip_serializing)]
    workers: IgnoredAny,
    #[serde(skip_serializing)]
    queue: IgnoredAny,
    #[serde(skip_serializing)]
    warehouse: IgnoredAny,
    #[serde(skip_serializing)]
    inventory: IgnoredAny,
    #[serde(skip_serializing)]
    s3: IgnoredAny,
    #[serde(skip_serializing)]
    run: IgnoredAny,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            deployment: Deployment::Embedded,
            data_dir: PathBuf::from("labios-data"),
            endpoint: None,
            client: ClientConfig::default(),
            nats: NatsConfig::default(),
            redis: RedisConfig::default(),
            mounts: BTreeMap::new(),
            faults: Default::default(),
            all_local_users: IgnoredAny,
            dispatcher: IgnoredAny,
            dispatchers: IgnoredAny,
            manager: IgnoredAny,
            worker: IgnoredAny,
            workers: IgnoredAny,
            queue: IgnoredAny,
            warehouse: IgnoredAny,
            inventory: IgnoredAny,
            s3: IgnoredAny,
            run: IgnoredAny,
        }
    }
}

impl Settings {
    /// Defaults, then the TOML file (if any), then `LABIOS_*` variables.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Settings> {
        let settings = load(Settings::default(), file)?;
        settings.validate()?;
        Ok(settings)
    }

    /// What a client can check of its configuration before it connects;
    /// `labios` checks these too, then the servers' sections.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.client.validate()?;
        // Names and URIs only: the workers open the mounts (and refuse bad
        // mapping options, naming the mount); a client reaches no external
        // system.
        MountTable::new(&self.mounts).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        if self.deployment == Deployment::Distributed {
            // Merged writes and relaxed metadata live in one worker
            // process's memory, where another process cannot see them.
            if let Some((name, _)) = self
                .mounts
                .iter()
                .find(|(_, m)| m.aggregate_bytes > 0 || m.metadata == MetadataMode::Relaxed)
            {
                anyhow::bail!(
                    "invalid configuration: mounts.{name}: aggregate_bytes and metadata = \"relaxed\" keep state in one process; the distributed deployment runs workers in several (use them with the embedded deployment)"
                );
            }
        }
        // The Redis store can place keys made by `local_key` on a node's own
        // server, but LABIOS's label data is always hashed over `urls`: a
        // setting that changes nothing must not look like it works.
        if self.redis.node_local {
            anyhow::bail!(
                "invalid configuration: field `redis.node_local`: LABIOS hashes its warehouse data over every server in redis.urls; node-local placement of label data is not implemented (set it to false)"
            );
        }
        self.faults
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: [faults]: {e}"))
    }

    /// The client settings, with the deployment's mounts.
    pub fn client_settings(&self) -> ClientConfig {
        ClientConfig {
            mounts: self.mounts.clone(),
            ..self.client.clone()
        }
    }

    pub fn endpoint(&self) -> String {
        endpoint(&self.data_dir, self.endpoint.as_deref())
    }
}

/// The endpoint clients use: the configured one, else the Unix socket in
/// the data directory.
pub fn endpoint(data_dir: &Path, configured: Option<&str>) -> String {
    configured
        .map(str::to_string)
        .unwrap_or_else(|| data_dir.join("labios.sock").to_string_lossy().into_owned())
}

/// Reads a configuration of type `T` as the `labios` command does:
/// `defaults`, then the TOML file (if any), then `LABIOS_<SECTION>__<FIELD>`
/// variables. An error names each wrong field.
pub fn load<T: Serialize + DeserializeOwned>(
    defaults: T,
    file: Option<&Path>,
) -> anyhow::Result<T> {
    let mut fig = Figment::from(Serialized::defaults(defaults));
    if let Some(path) = file {
        if !path.exists() {
            anyhow::bail!("config file {} not found", path.display());
        }
        fig = fig.merge(Toml::file(path));
    }
    let fig = fig.merge(
        Env::prefixed("LABIOS_")
            // Read by the CLI, `labios run` and the preload library.
            .ignore(&[
                "ENDPOINT",
                "KEY",
                "SECRET",
                "CONFIG",
                "LOG",
                "PREFIXES",
                "CWD",
                "PRELOAD_LIB",
            ])
            .split("__"),
    );
    fig.extract().map_err(|e| {
        let mut msg = String::from("invalid configuration");
        for err in e {
            msg.push_str(&format!("\n  {err}"));
            if !err.path.is_empty() {
                msg.push_str(&format!(" (field `{}`)", err.path.join(".")));
            }
        }
        anyhow::anyhow!(msg)
    })
}
