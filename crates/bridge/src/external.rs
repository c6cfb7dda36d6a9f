//! External storage named by mounts (article 3.3.3a, 3.6.1): the
//! configuration declares each system once, with its credentials, and
//! labels name data in it as `NAME:/path` or, for a declared bucket, as
//! `s3://bucket/key`. Nothing undeclared is reachable: a tenant cannot make
//! a worker touch a bucket or directory the administrator did not mount.

use crate::mapping::{storage_error, FileMapper, Mapping};
use labios_label::{Error, Result};
use opendal::Operator;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One `[mounts.NAME]` table of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    /// `fs:///absolute/dir` (a shared directory, e.g. a parallel file
    /// system), `s3://bucket[/prefix]` or `memory://` (tests).
    pub uri: String,
    /// S3: the service's address, e.g. `http://127.0.0.1:7070`
    /// (default: AWS).
    pub endpoint: Option<String>,
    /// S3: signing region (default `us-east-1`).
    pub region: Option<String>,
    /// S3 credentials (default: the AWS_* environment of the process).
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    /// How files are laid out in the store (IRIS 3.4.1).
    #[serde(default)]
    pub mapping: Mapping,
    /// Balanced and read-optimized mappings: bucket size in bytes
    /// (default 512 KiB).
    #[serde(default)]
    pub bucket_size: Option<u64>,
    /// Mappings other than direct: `strict` or `relaxed` file metadata
    /// (IRIS 3.4.3).
    #[serde(default)]
    pub metadata: crate::virtual_file::MetadataMode,
    /// Bytes of bridged reads a process keeps in memory (IRIS 3.4.4);
    /// 0, the default, caches nothing. Only for data no other process
    /// changes meanwhile: another writer's changes are seen once the
    /// cached blocks are evicted.
    #[serde(default)]
    pub cache_bytes: u64,
    /// `lru` (default) or `lfu`.
    #[serde(default)]
    pub cache_policy: crate::cache::Policy,
    /// Cache block size (default 1 MiB).
    #[serde(default)]
    pub cache_block: Option<u64>,
    /// Reads fetched ahead of a sequential or strided pattern (default 4).
    #[serde(default)]
    pub prefetch_depth: Option<u32>,
    /// Merge small writes of a file into runs of up to this many bytes
    /// (IRIS aggregator); 0, the default, writes each as it comes. Merged
    /// writes are stored at a flush, before a read, when the run is full,
    /// and at most about a second after they were acknowledged.
    #[serde(default)]
    pub aggregate_bytes: u64,
}

/// Cache blocks unless a mount says otherwise.
const CACHE_BLOCK: u64 = 1 << 20;
const PREFETCH_DEPTH: u32 = 4;
/// How often merged writes of every aggregating mount are stored.
const AGGREGATE_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

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

/// True for a path that names external storage: LABIOS paths are
/// absolute, external ones start with a mount name or a scheme.
pub fn is_external(path: &str) -> bool {
    !path.starts_with('/') && path.contains(':')
}

/// The mounts of one configuration.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    mounts: BTreeMap<String, Mount>,
}

impl Mounts {
    /// Opens every declared mount; a bad declaration is an error naming it.
    pub fn new(declared: &BTreeMap<String, MountConfig>) -> Result<Mounts> {
        let mut mounts = BTreeMap::new();
        for (name, config) in declared {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(Error::InvalidArgument(format!(
                    "mount name {name:?}: use letters, digits, '-' and '_'"
                )));
            }
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
        Ok(Mounts { mounts })
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
        let aggregating: Vec<Arc<dyn FileMapper>> = mounts
            .mounts
            .values()
            .filter(|m| m.config.aggregate_bytes > 0)
            .map(|m| m.mapper.clone())
            .collect();
        if !aggregating.is_empty() && tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(AGGREGATE_FLUSH);
                loop {
                    tick.tick().await;
                    for m in &aggregating {
                        if let Err(e) = m.flush_all().await {
                            tracing::warn!("storing merged writes: {e}");
                        }
                    }
                }
            });
        }
        Ok(SHARED.lock().entry(key).or_insert(mounts).clone())
    }

    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
    }

    /// The mount declared as `name`; an unknown one is an error naming the
    /// declared ones.
    pub fn get(&self, name: &str) -> Result<&Mount> {
        self.mounts
            .get(name)
            .ok_or_else(|| self.undeclared(&format!("{name:?}")))
    }

    /// The error for a mount `what` names that is not declared.
    fn undeclared(&self, what: &str) -> Error {
        Error::NotFound(format!(
            "mount {what} (declared mounts: {})",
            self.declared()
        ))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.mounts.keys().map(String::as_str)
    }

    /// The mount and path `path` names: `NAME:/a/b`, `NAME:a/b` or
    /// `s3://bucket/a/b` for a bucket some mount declares.
    pub fn resolve(&self, path: &str) -> Result<External> {
        if let Some(rest) = path.strip_prefix("s3://") {
            return self.resolve_s3(path, rest);
        }
        let Some((name, rest)) = path.split_once(':') else {
            return Err(Error::InvalidArgument(format!(
                "{path:?} names no external storage (expected NAME:/path or s3://bucket/key)"
            )));
        };
        let mount = self
            .mounts
            .get(name)
            .ok_or_else(|| self.undeclared(&format!("{name:?} of {path:?}")))?;
        self.unreserved(
            path,
            External {
                mount: mount.clone(),
                path: relative(path, rest)?,
            },
        )
    }

    fn resolve_s3(&self, path: &str, rest: &str) -> Result<External> {
        // The longest declared `s3://bucket/prefix` that contains the path.
        let best = self
            .mounts
            .values()
            .filter_map(|m| {
                let root = m.config.uri.strip_prefix("s3://")?.trim_end_matches('/');
                let tail = rest.strip_prefix(root)?;
                (tail.is_empty() || tail.starts_with('/')).then_some((root.len(), m, tail))
            })
            .max_by_key(|(len, _, _)| *len);
        match best {
            Some((_, m, tail)) => self.unreserved(
                path,
                External {
                    mount: m.clone(),
                    path: relative(path, tail)?,
                },
            ),
            None => Err(Error::NotFound(format!(
                "no mount declares the bucket of {path:?}: add [mounts.NAME] with uri = \"s3://{}\" (declared mounts: {})",
                rest.split('/').next().unwrap_or(""),
                self.declared()
            ))),
        }
    }

    fn declared(&self) -> String {
        if self.mounts.is_empty() {
            return "none".into();
        }
        self.mounts
            .values()
            .map(|m| format!("{}: {}", m.name, m.config.uri))
            .collect::<Vec<_>>()
            .join(", ")
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

/// The directory of every mount where LABIOS keeps its own objects (the
/// blocks of workers whose stacks end in `external:MOUNT`,
/// worker_blocks.rs); no label may name it, so that an application
/// reaches those bytes only through the inventory's checks.
pub const RESERVED: &str = "labios";

/// Where a mount's root is, so that paths of mounts declared one inside
/// another compare: `fs:///dir`, `s3://bucket/prefix`; a `memory://`
/// mount shares its root with no other.
fn root_of(m: &Mount) -> String {
    let uri = m.config.uri.trim_end_matches('/');
    match uri {
        "memory:" => format!("memory://{}", m.name),
        _ => uri.to_string(),
    }
}

impl Mounts {
    /// `ext` (`full` resolved), refused when it is inside the [`RESERVED`]
    /// directory of any mount: its own, or one declared inside the mount
    /// it names. Compared ignoring ASCII case, for case-insensitive stores.
    fn unreserved(&self, full: &str, ext: External) -> Result<External> {
        let at = format!("{}/{}", root_of(&ext.mount), ext.path).to_ascii_lowercase();
        let inside = self.mounts.values().any(|m| {
            let reserved = format!("{}/{RESERVED}", root_of(m)).to_ascii_lowercase();
            at == reserved || at.starts_with(&format!("{reserved}/"))
        });
        if inside {
            return Err(Error::PermissionDenied(format!(
                "{full}: {RESERVED}/ of a mount holds LABIOS's own objects (workers' blocks); \
                 labels cannot name it"
            )));
        }
        Ok(ext)
    }
}

/// A path inside a mount, with `.` and `..` refused so that nothing
/// outside the mount's root can be named.
fn relative(full: &str, rest: &str) -> Result<String> {
    let mut parts = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(Error::InvalidPath {
                    path: full.to_string(),
                    reason: "'..' may not leave or walk a mount".into(),
                })
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
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
    let uri = config.uri.as_str();
    let op = if let Some(dir) = uri.strip_prefix("fs://") {
        if !dir.starts_with('/') {
            return Err(format!(
                "{uri}: an fs mount needs an absolute directory, fs:///dir"
            ));
        }
        let mut fs = opendal::services::Fs::default().root(dir);
        if let Some(atomic) = atomic {
            fs = fs.atomic_write_dir(&format!("{}/{atomic}", dir.trim_end_matches('/')));
        }
        Operator::new(fs).map_err(|e| e.to_string())?.finish()
    } else if let Some(rest) = uri.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{uri}: no bucket"));
        }
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
    } else if uri == "memory://" {
        Operator::new(opendal::services::Memory::default())
            .map_err(|e| e.to_string())?
            .finish()
    } else {
        return Err(format!(
            "{uri}: unsupported storage (use fs:///dir, s3://bucket[/prefix] or memory://)"
        ));
    };
    Ok(op.layer(opendal::layers::RetryLayer::new()))
}

/// Copies bytes into `target` as one stream (a multipart upload on S3), for
/// staging whole files, which replace what was there. Only for the direct
/// mapping: a mapped file is written by the workers, whose mount holds its
/// merged writes and relaxed metadata.
pub async fn stream_into(
    target: &External,
    chunks: impl futures::Stream<Item = Result<bytes::Bytes>>,
) -> Result<u64> {
    use futures::StreamExt;
    futures::pin_mut!(chunks);
    if target.mount.config.mapping != Mapping::Direct {
        return Err(Error::InvalidArgument(format!(
            "{}: a file of the {:?} mapping is written through workers, not streamed",
            target.path, target.mount.config.mapping
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

    fn mounts() -> Mounts {
        let mut declared = BTreeMap::new();
        declared.insert(
            "pfs".to_string(),
            MountConfig {
                uri: "fs:///tmp".into(),
                ..Default::default()
            },
        );
        for (name, uri) in [("lake", "s3://data"), ("deep", "s3://data/deep")] {
            declared.insert(
                name.to_string(),
                MountConfig {
                    uri: uri.into(),
                    endpoint: Some("http://127.0.0.1:1".into()),
                    ..Default::default()
                },
            );
        }
        Mounts::new(&declared).unwrap()
    }

    #[test]
    fn paths_resolve_to_the_declared_mount() {
        let m = mounts();
        let e = m.resolve("pfs:/a/./b").unwrap();
        assert_eq!((e.mount.name.as_str(), e.path.as_str()), ("pfs", "a/b"));
        let e = m.resolve("s3://data/x/y").unwrap();
        assert_eq!((e.mount.name.as_str(), e.path.as_str()), ("lake", "x/y"));
        let e = m.resolve("s3://data/deep/z").unwrap();
        assert_eq!((e.mount.name.as_str(), e.path.as_str()), ("deep", "z"));
        let e = m.resolve("s3://data/deeper").unwrap();
        assert_eq!(e.mount.name, "lake");
    }

    #[test]
    fn undeclared_or_escaping_paths_are_refused() {
        let m = mounts();
        let err = m.resolve("s3://other/k").unwrap_err().to_string();
        assert!(err.contains("no mount declares the bucket"), "{err}");
        assert!(err.contains("lake: s3://data"), "{err}");
        let err = m.resolve("nfs:/x").unwrap_err().to_string();
        assert!(err.contains("mount \"nfs\""), "{err}");
        assert!(matches!(
            m.resolve("pfs:/a/../../etc"),
            Err(Error::InvalidPath { .. })
        ));
        assert!(is_external("pfs:/a") && is_external("s3://b/k"));
        assert!(!is_external("/labios/a:b") && !is_external("relative"));
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
