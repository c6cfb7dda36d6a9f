//! Objects over files (IRIS 3.4.1, objects-to-files): an object store's
//! calls answered from a directory of a file system, so that programs
//! written for objects (HPDA, S3 clients) reach data kept in a PFS.

use crate::containers::{ContainerOptions, Containers};
use crate::one_to_one::OneToOne;
use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{Error, Result};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// One stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    /// Last modification, nanoseconds since the epoch, where the store
    /// keeps one (one-to-one: the file's mtime; containers keep none).
    pub mtime: Option<u64>,
}

/// An object store kept in files. Keys are strings of 1 to 1024 bytes
/// without NUL; a put replaces the whole object atomically: a get sees
/// the old or the new bytes, never a mix, even after a crash.
#[async_trait]
pub trait ObjectMapper: Send + Sync + std::fmt::Debug {
    async fn put(&self, key: &str, data: Bytes) -> Result<()>;
    /// The object, or the part of it in `range` (cut at its end);
    /// NotFound when there is no such object.
    async fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Bytes>;
    async fn head(&self, key: &str) -> Result<Option<ObjectInfo>>;
    /// NotFound when there is no such object.
    async fn delete(&self, key: &str) -> Result<()>;
    /// Every object whose key starts with `prefix`, in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>>;
}

/// The objects-to-files mappings of IRIS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectMapping {
    /// An object is a file (`a/b` is the file `DIR/a/b`): existing
    /// collections of files become objects as they are.
    #[default]
    OneToOne,
    /// Every object appended to one container file, with an index.
    NToOne,
    /// Objects appended to containers of at most `container_size` bytes.
    NToM,
    /// Keys hashed to one of `containers` containers, so each container
    /// holds a fixed share of the key space and compacts on its own.
    HashedNToM,
}

/// Opens the mapping's store in `dir` (reading its index: blocking I/O).
/// Container mappings compact in the background when called inside a
/// Tokio runtime and `options.compact_every` is set.
pub fn object_mapper(
    mapping: ObjectMapping,
    dir: &Path,
    options: &ContainerOptions,
) -> Result<Arc<dyn ObjectMapper>> {
    if mapping == ObjectMapping::OneToOne {
        return Ok(Arc::new(OneToOne::open(dir, options.sync)?));
    }
    let store = Containers::open(dir, mapping, options)?;
    if let (Some(every), Ok(_)) = (options.compact_every, tokio::runtime::Handle::try_current()) {
        store.spawn_compactor(every);
    }
    Ok(Arc::new(store))
}

/// Refuses keys no store here can hold.
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > 1024 || key.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "object key {key:?}: use 1 to 1024 bytes without NUL"
        )));
    }
    Ok(())
}

/// `range` cut to an object of `size` bytes.
pub(crate) fn clamp(range: Option<Range<u64>>, size: u64) -> Range<u64> {
    match range {
        None => 0..size,
        Some(r) => r.start.min(size)..r.end.min(size).max(r.start.min(size)),
    }
}

/// Runs blocking file I/O off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Storage(format!("file I/O task: {e}")))?
}
