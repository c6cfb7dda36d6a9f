//! External storage named by mounts (article 3.3.3a, 3.6.1): the
//! configuration declares each system once, with its credentials, and
//! labels name data in it as `NAME:/path` or, for a declared bucket, as
//! `s3://bucket/key`. Nothing undeclared is reachable: a tenant cannot make
//! a worker touch a bucket or directory the administrator did not mount.

use crate::mapping::{storage_error, FileMapper};
use labios_label::{Error, Result};
pub use labios_mounts::{
    is_external, Mapping, MountConfig, MountTable, DEFAULT_HOLD_MS, MAX_HOLD_MS, RESERVED,
};
use opendal::Operator;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Cache blocks unless a mount says otherwise.
const CACHE_BLOCK: u64 = 1 << 20;
const PREFETCH_DEPTH: u32 = 4;

/// A declared external system.
#[derive(Debug, Clone)]
pub struct Mount {
    pub name: String,
    pub config: MountConfig,
    pub op: Operator,
    pub mapper: Arc<dyn FileMapper>,
}

/// A path resolved to its mount.
#[derive(Debug, Clone)]
pub struct External {
    pub mount: Mount,
    /// Relative to the mount's root, without a leading slash.
    pub path: String,
}

impl External {
    pub fn mapper(&self) -> &dyn FileMapper {
        self.mount.mapper.as_ref()
    }
}

/// The mounts of one configuration, opened: a worker's way to external
/// storage.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    table: MountTable,
    mounts: BTreeMap<String, Mount>,
    /// Workers of this process serving these mounts ([`Mounts::serving`]).
    serving: Arc<AtomicUsize>,
}

/// One worker's use of a process's mounts. The last of them to stop
/// stores what the mounts held back, once for the process
/// ([`Serving::stop`]); one dropped without stopping only leaves the count.
#[derive(Debug)]
pub struct Serving {
    mounts: Mounts,
    stopped: AtomicBool,
}

impl Serving {
    /// Leaves the count of serving workers; the last to leave stores what
    /// the mounts held back ([`Mounts::settle`]). Later calls do nothing.
    pub async fn stop(&self) -> Result<()> {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match self.mounts.serving.fetch_sub(1, Ordering::AcqRel) {
            0 => unreachable!("more workers stopped than served these mounts"),
            1 => self.mounts.settle().await,
            _ => Ok(()),
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if !self.stopped.swap(true, Ordering::AcqRel) {
            self.mounts.serving.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Mounts {
    /// Opens every declared mount; a bad declaration is an error naming it.
    pub fn new(declared: &BTreeMap<String, MountConfig>) -> Result<Mounts> {
        let table = MountTable::new(declared)?;
        let mut mounts = BTreeMap::new();
        for (name, config) in declared {
            let op = operator(config)
                .map_err(|e| Error::InvalidArgument(format!("mounts.{name}: {e}")))?;
            let mapper = layered(config, op.clone())
                .map_err(|e| Error::InvalidArgument(format!("mounts.{name}: {e}")))?;
            mounts.insert(
                name.clone(),
                Mount {
                    name: name.clone(),
                    config: config.clone(),
                    op,
                    mapper,
                },
            );
        }
        Ok(Mounts {
            table,
            mounts,
            serving: Arc::default(),
        })
    }

    /// Counts a worker of this process among those serving these mounts,
    /// until its [`Serving::stop`].
    pub fn serving(&self) -> Serving {
        self.serving.fetch_add(1, Ordering::AcqRel);
        Serving {
            mounts: self.clone(),
            stopped: AtomicBool::new(false),
        }
    }

    /// The process's one instance of these mounts: every worker and
    /// client of a process shares each mount's cache, merged writes and
    /// relaxed metadata, which separate instances would contradict. Starts
    /// the task that stores merged writes when called in a tokio runtime.
    pub fn shared(declared: &BTreeMap<String, MountConfig>) -> Result<Mounts> {
        static SHARED: parking_lot::Mutex<BTreeMap<String, Mounts>> =
            parking_lot::const_mutex(BTreeMap::new());
        let key = format!("{declared:?}");
        if let Some(m) = SHARED.lock().get(&key) {
            return Ok(m.clone());
        }
        let mounts = Mounts::new(declared)?;
        if tokio::runtime::Handle::try_current().is_ok() {
            for m in mounts
                .mounts
                .values()
                .filter(|m| m.config.aggregate_bytes > 0)
            {
                let (name, mapper) = (m.name.clone(), m.mapper.clone());
                let mut tick = tokio::time::interval(m.config.hold());
                // A slow store is followed by the next in one period, not
                // by the ticks it missed.
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tokio::spawn(async move {
                    loop {
                        tick.tick().await;
                        if let Err(e) = mapper.flush_all().await {
                            tracing::warn!("mounts.{name}: storing merged writes: {e}");
                        }
                    }
                });
            }
        }
        Ok(SHARED.lock().entry(key).or_insert(mounts).clone())
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Stores what every mount acknowledged but holds only in this
    /// process's memory (merged writes, relaxed metadata), as a clean stop
    /// must: the next process starts from the store and would not see it.
    /// Every file of every mount is tried, a mount that failed once more
    /// (a transient error of its store); the first error is returned.
    pub async fn settle(&self) -> Result<()> {
        let mut first = Ok(());
        for m in self.mounts.values() {
            let settled = match m.mapper.flush_all().await {
                Err(e) => {
                    tracing::warn!("mounts.{}: storing what was held back: {e}; again", m.name);
                    m.mapper.flush_all().await
                }
                done => done,
            };
            if let Err(e) = settled {
                tracing::error!("mounts.{}: what was held back is not stored: {e}", m.name);
                first = first.and(Err(e));
            }
        }
        first
    }

    /// The declared names these mounts were opened from.
    pub fn table(&self) -> &MountTable {
        &self.table
    }

    /// The mount declared as `name`; an unknown one is an error naming the
    /// declared ones.
    pub fn get(&self, name: &str) -> Result<&Mount> {
        self.table.get(name)?;
        Ok(&self.mounts[name])
    }

    /// The mount and path `path` names ([`MountTable::resolve`]).
    pub fn resolve(&self, path: &str) -> Result<External> {
        let named = self.table.resolve(path)?;
        Ok(External {
            mount: self.mounts[named.name].clone(),
            path: named.path,
        })
    }
}

/// The mount's mapping with its options, under its cache and aggregator.
fn layered(config: &MountConfig, op: Operator) -> Result<Arc<dyn FileMapper>> {
    let mut mapper = crate::options::mapper_for(config, op)?;
    if config.cache_bytes > 0 {
        mapper = Arc::new(crate::Cached::new(
            mapper,
            config.cache_policy,
            config.cache_block.unwrap_or(CACHE_BLOCK),
            config.cache_bytes,
            config.prefetch_depth.unwrap_or(PREFETCH_DEPTH),
        )?);
    }
    if config.aggregate_bytes > 0 {
        mapper = Arc::new(crate::Aggregator::new(
            mapper,
            config.aggregate_bytes,
            config.aggregate_bytes.saturating_mul(16),
        )?);
    }
    Ok(mapper)
}

fn operator(config: &MountConfig) -> std::result::Result<Operator, String> {
    operator_writing(config, None)
}

/// The operator of a mount whose every write of an `fs` mount goes to a
/// file in `atomic` (under the mount's root) and is renamed into place, so
/// that a crash never leaves a torn object: what a worker's own blocks
/// need (worker_blocks.rs). S3 PUTs are whole already.
pub(crate) fn atomic_operator(config: &MountConfig, atomic: &str) -> Result<Operator> {
    operator_writing(config, Some(atomic)).map_err(Error::InvalidArgument)
}

fn operator_writing(
    config: &MountConfig,
    atomic: Option<&str>,
) -> std::result::Result<Operator, String> {
    config.check_uri()?;
    let uri = config.uri.as_str();
    let op = if let Some(dir) = uri.strip_prefix("fs://") {
        let mut fs = opendal::services::Fs::default().root(dir);
        if let Some(atomic) = atomic {
            fs = fs.atomic_write_dir(&format!("{}/{atomic}", dir.trim_end_matches('/')));
        }
        Operator::new(fs).map_err(|e| e.to_string())?.finish()
    } else if let Some(rest) = uri.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let mut b = opendal::services::S3::default()
            .bucket(bucket)
            .root(&format!("/{prefix}"))
            .region(config.region.as_deref().unwrap_or("us-east-1"));
        if let Some(endpoint) = &config.endpoint {
            b = b.endpoint(endpoint);
        }
        if let (Some(key), Some(secret)) = (&config.access_key, &config.secret_key) {
            b = b.access_key_id(key).secret_access_key(secret);
        }
        Operator::new(b).map_err(|e| e.to_string())?.finish()
    } else {
        Operator::new(opendal::services::Memory::default())
            .map_err(|e| e.to_string())?
            .finish()
    };
    Ok(op.layer(opendal::layers::RetryLayer::new()))
}

/// Copies bytes into `target` as one stream (a multipart upload on S3), for
/// staging whole files, which replace what was there. Only for mounts that
/// [`MountConfig::streams_whole_files`]: any other is written by the
/// workers, whose mount holds its cache, merged writes and relaxed
/// metadata.
pub async fn stream_into(
    target: &External,
    chunks: impl futures::Stream<Item = Result<bytes::Bytes>>,
) -> Result<u64> {
    use futures::StreamExt;
    futures::pin_mut!(chunks);
    if !target.mount.config.streams_whole_files() {
        return Err(Error::InvalidArgument(format!(
            "{}: mount {} keeps state in its workers (a mapping other than direct, a cache \
             or merged writes); its files are written through workers, not streamed",
            target.path, target.mount.name
        )));
    }
    let mut w = target
        .mount
        .op
        .writer_with(&target.path)
        .chunk(8 << 20)
        .await
        .map_err(|e| storage_error(&target.path, e))?;
    let mut total = 0;
    while let Some(chunk) = chunks.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = w.abort().await;
                return Err(e);
            }
        };
        total += chunk.len() as u64;
        if let Err(e) = w.write(chunk).await {
            let _ = w.abort().await;
            return Err(storage_error(&target.path, e));
        }
    }
    w.close()
        .await
        .map_err(|e| storage_error(&target.path, e))?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_to_the_opened_mount() {
        let declared = BTreeMap::from([
            (
                "pfs".to_string(),
                MountConfig {
                    uri: "fs:///tmp".into(),
                    ..Default::default()
                },
            ),
            (
                "mem".to_string(),
                MountConfig {
                    uri: "memory://".into(),
                    ..Default::default()
                },
            ),
        ]);
        let m = Mounts::new(&declared).unwrap();
        let e = m.resolve("mem:/a/./z").unwrap();
        assert_eq!((e.mount.name.as_str(), e.path.as_str()), ("mem", "a/z"));
        assert_eq!(m.get("pfs").unwrap().config.uri, "fs:///tmp");
        let err = m.resolve("nfs:/x").unwrap_err().to_string();
        assert!(err.contains("declared mounts: mem"), "{err}");
    }

    #[test]
    fn bad_declarations_name_the_mount() {
        let mut declared = BTreeMap::new();
        declared.insert(
            "x".to_string(),
            MountConfig {
                uri: "fs://relative".into(),
                ..Default::default()
            },
        );
        let err = Mounts::new(&declared).unwrap_err().to_string();
        assert!(
            err.contains("mounts.x") && err.contains("absolute"),
            "{err}"
        );
        declared.get_mut("x").unwrap().uri = "ftp://h".into();
        let err = Mounts::new(&declared).unwrap_err().to_string();
        assert!(err.contains("unsupported storage"), "{err}");
    }
}
