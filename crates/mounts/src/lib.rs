//! The external storage a configuration declares (article 3.3.3a, 3.6.1),
//! as names: the `[mounts.NAME]` tables, and which mount and path a label's
//! `NAME:/path` or `s3://bucket/key` means. Every process needs this to
//! name external storage; only workers connect to it, through the mounts
//! `labios-bridge` opens from these declarations. A client depends on this
//! crate alone, so a program that loads the client library loads no
//! storage service SDK.

use labios_label::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    pub metadata: MetadataMode,
    /// Bytes of bridged reads a process keeps in memory (IRIS 3.4.4);
    /// 0, the default, caches nothing. Only for data no other process
    /// changes meanwhile: another writer's changes are seen once the
    /// cached blocks are evicted.
    #[serde(default)]
    pub cache_bytes: u64,
    /// `lru` (default) or `lfu`.
    #[serde(default)]
    pub cache_policy: Policy,
    /// Cache block size (default 1 MiB).
    #[serde(default)]
    pub cache_block: Option<u64>,
    /// Reads fetched ahead of a sequential or strided pattern (default 4).
    #[serde(default)]
    pub prefetch_depth: Option<u32>,
    /// Merge small writes of a file into runs of up to this many bytes
    /// (IRIS aggregator); 0, the default, writes each as it comes. Merged
    /// writes are stored at a flush, before a read, when the run is full,
    /// and at most about [`MountConfig::hold_ms`] after they were
    /// acknowledged.
    #[serde(default)]
    pub aggregate_bytes: u64,
    /// Relaxed metadata and merged writes: how long, in milliseconds, the
    /// workers' process may keep them in memory before storing them
    /// (default [`DEFAULT_HOLD_MS`]). What a crash of that process can
    /// lose; a clean stop stores everything first. With relaxed metadata
    /// it is also how long the workers trust a file's metadata they read
    /// before reading it again, so how late they see another writer's
    /// changes.
    #[serde(default)]
    pub hold_ms: Option<u64>,
}

/// How long relaxed metadata and merged writes stay in memory by default.
pub const DEFAULT_HOLD_MS: u64 = 1000;
/// The longest [`MountConfig::hold_ms`]: an hour of acknowledged writes a
/// crash could lose is beyond what any user means to risk.
pub const MAX_HOLD_MS: u64 = 3_600_000;

impl MountConfig {
    /// Checks the form of [`MountConfig::uri`]: `fs:///absolute/dir`,
    /// `s3://bucket[/prefix]` or `memory://`. Whether the system is there
    /// is for the workers that open the mount to find out.
    pub fn check_uri(&self) -> std::result::Result<(), String> {
        let uri = self.uri.as_str();
        if let Some(dir) = uri.strip_prefix("fs://") {
            if !dir.starts_with('/') {
                return Err(format!(
                    "{uri}: an fs mount needs an absolute directory, fs:///dir"
                ));
            }
        } else if let Some(rest) = uri.strip_prefix("s3://") {
            if rest.split('/').next().unwrap_or("").is_empty() {
                return Err(format!("{uri}: no bucket"));
            }
        } else if uri != "memory://" {
            return Err(format!(
                "{uri}: unsupported storage (use fs:///dir, s3://bucket[/prefix] or memory://)"
            ));
        }
        Ok(())
    }

    /// How long relaxed metadata and merged writes may stay in memory.
    pub fn hold(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.hold_ms.unwrap_or(DEFAULT_HOLD_MS))
    }

    /// Checks [`MountConfig::hold_ms`]: within 1 ms..=[`MAX_HOLD_MS`], and
    /// only where something is held (relaxed metadata or merged writes).
    pub fn check_hold(&self) -> std::result::Result<(), String> {
        let Some(ms) = self.hold_ms else {
            return Ok(());
        };
        if !(1..=MAX_HOLD_MS).contains(&ms) {
            return Err(format!(
                "hold_ms = {ms}: use 1 to {MAX_HOLD_MS} milliseconds"
            ));
        }
        if self.metadata == MetadataMode::Strict && self.aggregate_bytes == 0 {
            return Err(
                "hold_ms applies to relaxed metadata or merged writes (aggregate_bytes), \
                 and this mount holds neither"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether a whole file may be written into this mount from any
    /// process as one stream (`labios cp`'s multipart upload): only for
    /// the direct mapping with neither a cache nor merged writes, which
    /// would otherwise live on in the workers' process, stale.
    pub fn streams_whole_files(&self) -> bool {
        self.mapping == Mapping::Direct && self.cache_bytes == 0 && self.aggregate_bytes == 0
    }
}

/// The mappings a mount may declare (`mapping = "..."`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// One file is one object, as other programs of the store expect: the
    /// mapping for reading data sets written by others and for staging.
    #[default]
    Direct,
    /// Fixed-size buckets (IRIS 3.4.1a): reads and writes alike.
    Balanced,
    /// One object per write plus a range index (IRIS 3.4.1b).
    WriteOptimized,
    /// The file at several bucket sizes, read with few objects (IRIS 3.4.1c).
    ReadOptimized,
}

/// How a file's size and mtime reach the store (IRIS 3.4.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetadataMode {
    /// Every call reads the metadata object and every write rewrites it
    /// after its data: a stat or read from any process is exact, at one
    /// more round trip per call and two per write.
    #[default]
    Strict,
    /// The writing process keeps metadata in memory and stores it every
    /// a number of writes or a delay after the first
    /// unstored write (and at flush); other processes see a file's growth
    /// that late, and a crash loses the unstored size changes (the data is
    /// stored). A write costs only its data requests.
    Relaxed,
}

/// Which block goes when the cache is full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    #[default]
    /// Recency: right for scans and working sets that move.
    Lru,
    /// Popularity: keeps hot blocks through a scan of cold ones.
    Lfu,
}

/// True for a path that names external storage: LABIOS paths are
/// absolute, external ones start with a mount name or a scheme.
pub fn is_external(path: &str) -> bool {
    !path.starts_with('/') && path.contains(':')
}

/// The directory of every mount where LABIOS keeps its own objects (the
/// blocks of workers whose stacks end in `external:MOUNT`,
/// worker_blocks.rs); no label may name it, so that an application
/// reaches those bytes only through the inventory's checks.
pub const RESERVED: &str = "labios";

/// The declared mounts by name, checked: what resolves a path to its mount
/// without connecting to any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountTable {
    mounts: BTreeMap<String, MountConfig>,
}

/// A path resolved to its mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named<'a> {
    /// The mount's name in the configuration.
    pub name: &'a str,
    pub config: &'a MountConfig,
    /// Relative to the mount's root, without a leading slash.
    pub path: String,
}

impl Named<'_> {
    /// Where the path is in its system (`s3://bucket/prefix/a/b`,
    /// `fs:///dir/a/b`), whichever mount names it: two mounts declared one
    /// inside the other name some paths twice.
    pub fn location(&self) -> String {
        format!("{}/{}", root_of(self.name, self.config), self.path)
    }
}

impl MountTable {
    /// The declared mounts; a name that is not letters, digits, `-` and
    /// `_`, or a URI of another form than [`MountConfig::check_uri`] takes,
    /// is an error naming the mount.
    pub fn new(declared: &BTreeMap<String, MountConfig>) -> Result<MountTable> {
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
            config
                .check_uri()
                .and_then(|()| config.check_hold())
                .map_err(|e| Error::InvalidArgument(format!("mounts.{name}: {e}")))?;
        }
        Ok(MountTable {
            mounts: declared.clone(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.mounts.keys().map(String::as_str)
    }

    /// The mount declared as `name`; an unknown one is an error naming the
    /// declared ones.
    pub fn get(&self, name: &str) -> Result<&MountConfig> {
        self.mounts
            .get(name)
            .ok_or_else(|| self.undeclared(&format!("{name:?}")))
    }

    /// The mount and path `path` names: `NAME:/a/b`, `NAME:a/b` or
    /// `s3://bucket/a/b` for a bucket some mount declares.
    pub fn resolve(&self, path: &str) -> Result<Named<'_>> {
        if let Some(rest) = path.strip_prefix("s3://") {
            return self.resolve_s3(path, rest);
        }
        let Some((name, rest)) = path.split_once(':') else {
            return Err(Error::InvalidArgument(format!(
                "{path:?} names no external storage (expected NAME:/path or s3://bucket/key)"
            )));
        };
        let (name, config) = self
            .mounts
            .get_key_value(name)
            .ok_or_else(|| self.undeclared(&format!("{name:?} of {path:?}")))?;
        self.unreserved(
            path,
            Named {
                name,
                config,
                path: relative(path, rest)?,
            },
        )
    }

    fn resolve_s3<'a>(&'a self, path: &str, rest: &str) -> Result<Named<'a>> {
        // The longest declared `s3://bucket/prefix` that contains the path.
        let best = self
            .mounts
            .iter()
            .filter_map(|(name, config)| {
                let root = config.uri.strip_prefix("s3://")?.trim_end_matches('/');
                let tail = rest.strip_prefix(root)?;
                (tail.is_empty() || tail.starts_with('/')).then_some((
                    root.len(),
                    name,
                    config,
                    tail,
                ))
            })
            .max_by_key(|(len, ..)| *len);
        match best {
            Some((_, name, config, tail)) => self.unreserved(
                path,
                Named {
                    name,
                    config,
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

    /// The error for a mount `what` names that is not declared.
    fn undeclared(&self, what: &str) -> Error {
        Error::NotFound(format!(
            "mount {what} (declared mounts: {})",
            self.declared()
        ))
    }

    fn declared(&self) -> String {
        if self.mounts.is_empty() {
            return "none".into();
        }
        self.mounts
            .iter()
            .map(|(name, config)| format!("{name}: {}", config.uri))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `named` (`full` resolved), refused when it is inside the [`RESERVED`]
    /// directory of any mount: its own, or one declared inside the mount
    /// it names. Compared ignoring ASCII case, for case-insensitive stores.
    fn unreserved<'a>(&self, full: &str, named: Named<'a>) -> Result<Named<'a>> {
        let at = named.location().to_ascii_lowercase();
        let inside = self.mounts.iter().any(|(name, config)| {
            let reserved = format!("{}/{RESERVED}", root_of(name, config)).to_ascii_lowercase();
            at == reserved || at.starts_with(&format!("{reserved}/"))
        });
        if inside {
            return Err(Error::PermissionDenied(format!(
                "{full}: {RESERVED}/ of a mount holds LABIOS's own objects (workers' blocks); \
                 labels cannot name it"
            )));
        }
        Ok(named)
    }
}

/// Where a mount's root is, so that paths of mounts declared one inside
/// another compare: `fs:///dir`, `s3://bucket/prefix`; a `memory://`
/// mount shares its root with no other.
fn root_of(name: &str, config: &MountConfig) -> String {
    let uri = config.uri.trim_end_matches('/');
    match uri {
        "memory:" => format!("memory://{name}"),
        _ => uri.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts() -> MountTable {
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
        MountTable::new(&declared).unwrap()
    }

    #[test]
    fn paths_resolve_to_the_declared_mount() {
        let m = mounts();
        let e = m.resolve("pfs:/a/./b").unwrap();
        assert_eq!((e.name, e.path.as_str()), ("pfs", "a/b"));
        let e = m.resolve("s3://data/x/y").unwrap();
        assert_eq!((e.name, e.path.as_str()), ("lake", "x/y"));
        let e = m.resolve("s3://data/deep/z").unwrap();
        assert_eq!((e.name, e.path.as_str()), ("deep", "z"));
        let e = m.resolve("s3://data/deeper").unwrap();
        assert_eq!(e.name, "lake");
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
    fn reserved_directories_and_bad_names_are_refused() {
        let m = mounts();
        for path in [
            "pfs:/labios/x",
            "pfs:/LABIOS",
            "s3://data/labios/y",
            "s3://data/deep/labios",
        ] {
            assert!(
                matches!(m.resolve(path), Err(Error::PermissionDenied(_))),
                "{path}"
            );
        }
        assert!(m.resolve("pfs:/labiosx").is_ok());
        let declared = BTreeMap::from([("a b".to_string(), MountConfig::default())]);
        let err = MountTable::new(&declared).unwrap_err().to_string();
        assert!(err.contains("mount name \"a b\""), "{err}");
    }

    #[test]
    fn a_hold_is_refused_where_nothing_is_held_or_out_of_range() {
        let table = |config: MountConfig| {
            MountTable::new(&BTreeMap::from([("m".to_string(), config)])).map(|_| ())
        };
        let relaxed = MountConfig {
            uri: "memory://".into(),
            mapping: Mapping::Balanced,
            metadata: MetadataMode::Relaxed,
            hold_ms: Some(250),
            ..Default::default()
        };
        table(relaxed.clone()).unwrap();
        assert_eq!(relaxed.hold(), std::time::Duration::from_millis(250));
        let merged = MountConfig {
            metadata: MetadataMode::Strict,
            aggregate_bytes: 1 << 20,
            ..relaxed.clone()
        };
        table(merged.clone()).unwrap();
        let nothing = MountConfig {
            aggregate_bytes: 0,
            ..merged
        };
        let err = table(nothing).unwrap_err().to_string();
        assert!(
            err.contains("mounts.m") && err.contains("holds neither"),
            "{err}"
        );
        for ms in [0, MAX_HOLD_MS + 1] {
            let err = table(MountConfig {
                hold_ms: Some(ms),
                ..relaxed.clone()
            })
            .unwrap_err()
            .to_string();
            assert!(err.contains(&format!("hold_ms = {ms}")), "{err}");
        }
        assert_eq!(
            MountConfig::default().hold(),
            std::time::Duration::from_millis(DEFAULT_HOLD_MS)
        );
    }
}
