//! Objects over files (IRIS 3.4.1, objects-to-files): buckets the operator
//! declares in `[s3.buckets.NAME]`, kept in a directory of a file system
//! (typically the parallel file system HPC programs use) by one of IRIS's
//! mappings: `one-to-one` (an object is a file, so an existing collection of
//! files is a bucket as it is), `n-to-one`, `n-to-m` (containers of up to
//! 128 MiB) or `hashed-n-to-m` (keys hashed to a fixed set of containers,
//! compacted in the background). Millions of small objects then cost the
//! file system a few large files and sequential writes.
//!
//! The gateway process executes these buckets' I/O itself, as IRIS's
//! middleware does, and holds an exclusive lock on each directory: a
//! container store's index lives in the memory of the one process that
//! writes it. Each object's S3 metadata (ETag, headers, user metadata) is a
//! small sidecar object under [`SIDECAR`], stored after the object; a
//! sidecar that no longer matches its object (the object changed without
//! the gateway) is ignored.

use crate::errors;
use crate::listing::{self, Page, Query};
use crate::metadata::{derived_etag, md5_etag, ObjectMeta};
use crate::objects::{put_conditions, Claimed, Found};
use crate::settings::Setting;
use crate::streams::{self, Source, Written};
use crate::tenants::Tenant;
use crate::time::timestamp;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use labios_bridge::{object_mapper, ContainerOptions, ObjectInfo, ObjectMapper, ObjectMapping};
use labios_label::{Error, Result};
use labios_store::{FileKind, FileMeta};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3ErrorCode, S3Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Keys under this prefix hold the sidecars; clients cannot use them.
pub const SIDECAR: &str = ".labios-meta/";
/// The lock file in each bucket's directory, in the folder no mapping lists.
const LOCK: &str = ".labios/s3.lock";
/// Objects of these buckets pass through the gateway's memory whole when
/// stored, so they have a size limit (default: IRIS's container size).
const MAX_OBJECT: u64 = 128 << 20;

/// One `[s3.buckets.NAME]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectBucketConfig {
    /// The directory holding the bucket (created if missing).
    pub dir: PathBuf,
    /// The application (its name in the registry) the bucket belongs to.
    pub owner: String,
    /// `one-to-one` (default), `n-to-one`, `n-to-m` or `hashed-n-to-m`.
    #[serde(default)]
    pub mapping: ObjectMapping,
    /// N-to-M: bytes per container (default 128 MiB).
    #[serde(default)]
    pub container_size: Option<u64>,
    /// Hashed N-to-M: the number of containers (default 16).
    #[serde(default)]
    pub containers: Option<u32>,
    /// Every PUT made durable (fsync) before it returns (default true).
    #[serde(default)]
    pub sync: Option<bool>,
    /// How often containers are compacted, in ms (default 60000; 0: never).
    #[serde(default)]
    pub compact_every_ms: Option<u64>,
    /// The largest object, in bytes (default 128 MiB).
    #[serde(default)]
    pub max_object_size: Option<u64>,
}

/// An opened object bucket.
pub struct ObjectBucket {
    pub name: String,
    pub owner: String,
    store: Arc<dyn ObjectMapper>,
    max: u64,
    created: u64,
    /// The folder no mapping lists, holding the lock and the bucket's
    /// settings.
    own: PathBuf,
    /// Held for the gateway's lifetime.
    _lock: File,
}

/// The configured object buckets, by name.
#[derive(Default)]
pub struct ObjectBuckets(HashMap<String, Arc<ObjectBucket>>);

impl ObjectBuckets {
    /// Opens every declared bucket; a bad declaration, or a directory
    /// another gateway holds, is an error naming the bucket.
    pub fn open(declared: &BTreeMap<String, ObjectBucketConfig>) -> Result<ObjectBuckets> {
        let mut out = HashMap::new();
        for (name, c) in declared {
            let bad = |why: String| Error::InvalidArgument(format!("s3.buckets.{name}: {why}"));
            if !crate::names::is_bucket_name(name) {
                return Err(bad("not a valid S3 bucket name".into()));
            }
            if !c.dir.is_absolute() {
                return Err(bad(format!(
                    "dir {} is not an absolute path",
                    c.dir.display()
                )));
            }
            let lock_path = c.dir.join(LOCK);
            std::fs::create_dir_all(lock_path.parent().expect("LOCK is in a folder"))
                .map_err(|e| bad(format!("cannot create {}: {e}", c.dir.display())))?;
            let lock = File::create(&lock_path)
                .map_err(|e| bad(format!("cannot open {}: {e}", lock_path.display())))?;
            lock.try_lock().map_err(|_| {
                bad(format!(
                    "{} is served by another labios s3 process (one process must own a bucket's directory)",
                    c.dir.display()
                ))
            })?;
            let defaults = ContainerOptions::default();
            let options = ContainerOptions {
                container_size: c.container_size.unwrap_or(defaults.container_size),
                containers: c.containers.unwrap_or(defaults.containers),
                sync: c.sync.unwrap_or(defaults.sync),
                compact_every: match c.compact_every_ms {
                    Some(0) => None,
                    Some(ms) => Some(Duration::from_millis(ms)),
                    None => defaults.compact_every,
                },
                ..defaults
            };
            let store =
                object_mapper(c.mapping, &c.dir, &options).map_err(|e| bad(e.to_string()))?;
            let created = std::fs::metadata(&c.dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            out.insert(
                name.clone(),
                Arc::new(ObjectBucket {
                    name: name.clone(),
                    owner: c.owner.clone(),
                    store,
                    max: c.max_object_size.unwrap_or(MAX_OBJECT),
                    created,
                    own: lock_path
                        .parent()
                        .expect("LOCK is in a folder")
                        .to_path_buf(),
                    _lock: lock,
                }),
            );
        }
        Ok(ObjectBuckets(out))
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ObjectBucket>> {
        self.0.get(name)
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ObjectBucket>> {
        self.0.values()
    }
}

/// What a sidecar records.
#[derive(Debug, Serialize, Deserialize)]
struct Sidecar {
    size: u64,
    /// When the gateway stored the object.
    stored: u64,
    /// The store's own mtime of the object right after it was stored, where
    /// the store keeps one: a later change of the object shows as another.
    stamp: Option<u64>,
    meta: ObjectMeta,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl ObjectBucket {
    /// The bucket, if `t` owns it.
    pub fn check(&self, t: &Tenant) -> S3Result<()> {
        if t.name == self.owner {
            Ok(())
        } else {
            Err(s3_error!(
                AccessDenied,
                "bucket {} belongs to another application",
                self.name
            ))
        }
    }

    fn fail(&self, e: Error) -> s3s::S3Error {
        errors::s3(e, S3ErrorCode::NoSuchKey)
    }

    pub fn check_key(&self, key: &str) -> S3Result<()> {
        if key.starts_with(SIDECAR) || key.ends_with('/') {
            return Err(s3_error!(
                InvalidArgument,
                "key {key:?}: keys of bucket {} may not end in / or start with {SIDECAR}",
                self.name
            ));
        }
        Ok(())
    }

    /// The object's stat and metadata, if it exists.
    async fn describe(&self, info: ObjectInfo) -> Result<(u64, ObjectMeta)> {
        let sidecar = match self
            .store
            .get(&format!("{SIDECAR}{}", info.key), None)
            .await
        {
            Ok(b) => serde_json::from_slice::<Sidecar>(&b).ok(),
            Err(Error::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let mtime = info.mtime.unwrap_or(self.created);
        match sidecar.filter(|s| s.size == info.size && s.stamp == info.mtime) {
            Some(s) => Ok((s.stored, s.meta)),
            None => {
                let etag = derived_etag(&format!("{}:{}:{mtime}", info.key, info.size), info.size);
                Ok((
                    mtime,
                    ObjectMeta {
                        etag,
                        ..ObjectMeta::default()
                    },
                ))
            }
        }
    }

    /// The object `key` as [`Found`], for conditions and descriptions.
    pub async fn find(&self, key: &str) -> S3Result<Found> {
        self.check_key(key)?;
        let info = self
            .store
            .head(key)
            .await
            .map_err(|e| self.fail(e))?
            .ok_or_else(|| {
                s3_error!(
                    NoSuchKey,
                    "there is no object {key:?} in bucket {}",
                    self.name
                )
            })?;
        let size = info.size;
        let (mtime, meta) = self.describe(info).await.map_err(|e| self.fail(e))?;
        Ok(Found {
            path: key.to_string(),
            file: FileMeta {
                id: 0,
                path: key.to_string(),
                kind: FileKind::File,
                size,
                mode: 0o644,
                owner: 0,
                uid: 0,
                gid: 0,
                ctime: mtime,
                mtime,
                atime: mtime,
                nlink: 1,
            },
            meta,
        })
    }

    /// Stores `data` as `key` with `meta`; returns the ETag.
    pub async fn store(&self, key: &str, data: Bytes, meta: ObjectMeta) -> S3Result<String> {
        self.check_key(key)?;
        let size = data.len() as u64;
        self.store.put(key, data).await.map_err(|e| self.fail(e))?;
        let stamp = self
            .store
            .head(key)
            .await
            .map_err(|e| self.fail(e))?
            .and_then(|i| i.mtime);
        let etag = meta.etag.clone();
        let sidecar = Sidecar {
            size,
            stored: now(),
            stamp,
            meta,
        };
        let text = serde_json::to_vec(&sidecar).expect("a sidecar serializes");
        self.store
            .put(&format!("{SIDECAR}{key}"), Bytes::from(text))
            .await
            .map_err(|e| self.fail(e))?;
        Ok(etag)
    }

    /// Replaces the tags of object `key`, keeping the rest of its metadata.
    pub async fn retag(&self, key: &str, tags: crate::tagging::Tags) -> S3Result<()> {
        let found = self.find(key).await?;
        let info = self
            .store
            .head(key)
            .await
            .map_err(|e| self.fail(e))?
            .ok_or_else(|| s3_error!(NoSuchKey, "object {key:?} was removed meanwhile"))?;
        let sidecar = Sidecar {
            size: found.file.size,
            stored: found.file.mtime,
            stamp: info.mtime,
            meta: ObjectMeta { tags, ..found.meta },
        };
        let text = serde_json::to_vec(&sidecar).expect("a sidecar serializes");
        self.store
            .put(&format!("{SIDECAR}{key}"), Bytes::from(text))
            .await
            .map_err(|e| self.fail(e))
    }

    /// A setting of the bucket, if it has one.
    pub async fn setting(&self, s: Setting) -> S3Result<Option<Bytes>> {
        match tokio::fs::read(self.own.join(s.name())).await {
            Ok(v) => Ok(Some(Bytes::from(v))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.fail(Error::Storage(format!(
                "bucket {}: reading {}: {e}",
                self.name,
                s.name()
            )))),
        }
    }

    /// Stores (`Some`) or removes (`None`) a setting of the bucket, durably
    /// and whole: a crash leaves the old value or the new one.
    pub async fn set_setting(&self, s: Setting, value: Option<Bytes>) -> S3Result<()> {
        let path = self.own.join(s.name());
        let own = self.own.clone();
        let written = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            match value {
                Some(v) => {
                    let staged = path.with_extension("new");
                    let mut f = File::create(&staged)?;
                    std::io::Write::write_all(&mut f, &v)?;
                    f.sync_all()?;
                    std::fs::rename(&staged, &path)?;
                }
                None => match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
            File::open(&own)?.sync_all()
        })
        .await
        .expect("a settings write does not panic");
        written.map_err(|e| {
            self.fail(Error::Storage(format!(
                "bucket {}: writing {}: {e}",
                self.name,
                s.name()
            )))
        })
    }

    /// Collects a request body, refusing more than the bucket's limit.
    pub async fn collect(
        &self,
        mut body: StreamingBlob,
        mut hasher: ChecksumHasher,
    ) -> S3Result<(Bytes, Written)> {
        let mut buf = BytesMut::new();
        let mut md5 = Md5::new();
        while let Some(piece) = body.next().await {
            let piece = piece
                .map_err(|e| s3_error!(IncompleteBody, "the request body ended early: {e}"))?;
            if (buf.len() + piece.len()) as u64 > self.max {
                return Err(s3_error!(
                    EntityTooLarge,
                    "objects of bucket {} are limited to {} bytes (max_object_size)",
                    self.name,
                    self.max
                ));
            }
            md5.update(&piece);
            hasher.update(&piece);
            buf.extend_from_slice(&piece);
        }
        let written = Written {
            size: buf.len() as u64,
            md5: md5.finalize(),
            checksum: hasher.finalize(),
        };
        Ok((buf.freeze(), written))
    }

    /// The whole object, for a copy (bounded by the limit of `into`).
    pub async fn read_all(&self, key: &str, limit: u64) -> S3Result<(Bytes, ObjectMeta)> {
        let found = self.find(key).await?;
        if found.file.size > limit {
            return Err(s3_error!(
                EntityTooLarge,
                "{key} has {} bytes, more than the destination takes",
                found.file.size
            ));
        }
        let data = self.store.get(key, None).await.map_err(|e| self.fail(e))?;
        Ok((data, found.meta))
    }

    pub fn limit(&self) -> u64 {
        self.max
    }

    pub async fn put(
        &self,
        mut input: PutObjectInput,
        trailers: Option<&s3s::TrailingHeaders>,
    ) -> S3Result<PutObjectOutput> {
        self.check_key(&input.key)?;
        put_conditions(&input, self.find(&input.key)).await?;
        let body = input
            .body
            .take()
            .ok_or_else(|| s3_error!(IncompleteBody, "PUT without a body"))?;
        let (mut claimed, hasher) = Claimed::of_put(&mut input)?;
        let (data, written) = self.collect(body, hasher).await?;
        claimed.take_trailers(trailers)?;
        claimed.verify(&written)?;
        let mut meta = ObjectMeta {
            etag: md5_etag(&written.md5),
            ..headers_of!(input)
        };
        meta.set_checksums(&written.checksum);
        let etag = self.store(&input.key, data, meta).await?;
        let c = written.checksum;
        Ok(PutObjectOutput {
            e_tag: Some(ETag::Strong(etag)),
            size: Some(written.size as i64),
            checksum_crc32: c.checksum_crc32,
            checksum_crc32c: c.checksum_crc32c,
            checksum_sha1: c.checksum_sha1,
            checksum_sha256: c.checksum_sha256,
            checksum_crc64nvme: c.checksum_crc64nvme,
            ..Default::default()
        })
    }

    pub async fn get(&self, input: GetObjectInput) -> S3Result<GetObjectOutput> {
        let found = self.find(&input.key).await?;
        conditions!(found, input)?;
        let s = crate::objects::select(input.range.as_ref(), input.part_number, &found)?;
        let range = s.range;
        let body = self.read_range(&input.key, range.start, range.end).await?;
        let tag_count = found.meta.tag_count();
        Ok(
            described!(GetObjectOutput, found, range.end - range.start, wants_checksums!(input), {
                body: Some(body),
                content_range: s.content_range,
                parts_count: s.parts_count,
                tag_count: tag_count,
            }),
        )
    }

    /// Bytes `start..end` of object `key`, streamed.
    pub async fn read_range(&self, key: &str, start: u64, end: u64) -> S3Result<StreamingBlob> {
        let source = Arc::new(Stored {
            store: self.store.clone(),
            key: key.to_string(),
        });
        streams::stream(source, start, end)
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn head(&self, input: HeadObjectInput) -> S3Result<HeadObjectOutput> {
        let found = self.find(&input.key).await?;
        conditions!(found, input)?;
        let s = crate::objects::select(None, input.part_number, &found)?;
        Ok(
            described!(HeadObjectOutput, found, s.range.end - s.range.start, wants_checksums!(input), {
                content_range: s.content_range,
                parts_count: s.parts_count,
            }),
        )
    }

    pub async fn delete(&self, key: &str) -> S3Result<()> {
        self.check_key(key)?;
        for k in [key.to_string(), format!("{SIDECAR}{key}")] {
            match self.store.delete(&k).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
        Ok(())
    }

    pub async fn list(&self, q: &Query<'_>) -> S3Result<Page> {
        let all = self.store.list(q.prefix).await.map_err(|e| self.fail(e))?;
        let keys: Vec<(String, ObjectInfo)> = all
            .into_iter()
            .filter(|i| !i.key.starts_with(SIDECAR))
            .map(|i| (i.key.clone(), i))
            .collect();
        let paged = listing::paginate(keys, q)?;
        let mut contents = Vec::with_capacity(paged.objects.len());
        for (key, info) in paged.objects {
            let size = info.size;
            let (mtime, meta) = self.describe(info).await.map_err(|e| self.fail(e))?;
            contents.push(listing::object(
                q,
                &key,
                size,
                mtime,
                meta.etag,
                &self.owner,
            ));
        }
        Ok(Page {
            contents,
            prefixes: paged.prefixes,
            truncated: paged.truncated,
            last: paged.last,
        })
    }

    pub fn bucket(&self) -> Bucket {
        Bucket {
            name: Some(self.name.clone()),
            creation_date: Some(timestamp(self.created)),
            bucket_region: None,
        }
    }
}

/// A stored object, read range by range.
struct Stored {
    store: Arc<dyn ObjectMapper>,
    key: String,
}

#[async_trait]
impl Source for Stored {
    async fn read(&self, start: u64, end: u64) -> Result<Bytes> {
        let data = self.store.get(&self.key, Some(start..end)).await?;
        if (data.len() as u64) < end - start {
            return Err(Error::Storage(format!(
                "{} shrank while it was being read",
                self.key
            )));
        }
        Ok(data)
    }
}
