//! Files over objects (IRIS 3.4.1): how the bytes of a POSIX-style file are
//! kept in an external store. Every mapping answers the same calls, so a
//! worker executes a label the same way whatever the mount's mapping.

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use labios_label::{Error, Result};
pub use labios_mounts::Mapping;
use opendal::{EntryMode, ErrorKind, Operator};
use std::sync::Arc;
use std::time::SystemTime;

/// What a mapped file looks like from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub size: u64,
    pub dir: bool,
    pub mtime: Option<SystemTime>,
}

/// One name directly under a listed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the mount, without a trailing slash.
    pub path: String,
    pub stat: Stat,
}

/// A layout of files in an external store. Paths are relative to the
/// mount's root, `a/b/c`, never with a leading slash.
#[async_trait]
pub trait FileMapper: Send + Sync + std::fmt::Debug {
    /// Writes `data` at `offset`; a gap before it reads as zeros.
    async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<()>;
    /// Up to `len` bytes at `offset`: fewer at the end of the file, none
    /// past it; NotFound when the file does not exist.
    async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes>;
    async fn stat(&self, path: &str) -> Result<Option<Stat>>;
    /// The names directly under directory `dir` (`""`: the root).
    async fn list(&self, dir: &str) -> Result<Vec<Entry>>;
    /// Removes the file; NotFound when it does not exist.
    async fn remove(&self, path: &str) -> Result<()>;
    /// Stores what was acknowledged but held back (merged small writes,
    /// relaxed metadata). Mappings that hold nothing back do nothing.
    async fn flush(&self, _path: &str) -> Result<()> {
        Ok(())
    }
    /// [`FileMapper::flush`] of every file.
    async fn flush_all(&self) -> Result<()> {
        Ok(())
    }
}

/// The mapper of `mapping` over `op`.
pub fn mapper(mapping: Mapping, op: Operator) -> Arc<dyn FileMapper> {
    match mapping {
        Mapping::Direct => Arc::new(Direct { op }),
        Mapping::Balanced | Mapping::WriteOptimized | Mapping::ReadOptimized => {
            crate::options::MapperOptions::default()
                .mapper(mapping, op)
                .expect("the default mapper options are valid")
        }
    }
}

/// How often a PUT refused as [`RACED_WITH_DELETE`] is sent again, and the
/// first pause before it (doubled each time).
const PUT_RETRIES: u32 = 5;
const PUT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(5);
/// The S3 code of a PUT that raced with a DELETE on a server over a file
/// system (see [`put_object`]).
const RACED_WITH_DELETE: &str = "ExistingObjectIsDirectory";

/// Stores `data` as the whole object `key` (of file `file`, for errors).
///
/// An S3 server over a file system (versitygw's posix backend, 1.8: see
/// `PutObject` in its `backend/posix/posix.go`) makes a new object's
/// parent directories, then links the object into them, and a DELETE
/// removes the directories it leaves empty. A DELETE of the last other
/// object under the same prefix that lands in between removes the
/// directory the PUT just made; the link fails, and the server answers 409
/// `ExistingObjectIsDirectory`, the code it gives any failure of those two
/// steps. The model checker found this (a write beside a removal in one
/// directory of the `direct` mapping). A whole-object PUT is idempotent,
/// so it is sent again while nothing lives under `key/`, which is what the
/// code means when it is true; a conflict that persists is reported.
pub async fn put_object(op: &Operator, file: &str, key: &str, data: Bytes) -> Result<()> {
    let mut pause = PUT_BACKOFF;
    for _ in 0..PUT_RETRIES {
        match op.write(key, data.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.to_string().contains(RACED_WITH_DELETE) => {
                let under = op.list_with(&format!("{key}/")).limit(1).await;
                if under.is_ok_and(|entries| !entries.is_empty()) {
                    return Err(storage_error(file, e));
                }
                tracing::debug!("{key}: PUT raced with a DELETE ({e}); sending it again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => return Err(storage_error(file, e)),
        }
    }
    op.write(key, data)
        .await
        .map(|_| ())
        .map_err(|e| storage_error(file, e))
}

/// An OpenDAL error as a LABIOS one, naming the path.
pub fn storage_error(path: &str, e: opendal::Error) -> Error {
    match e.kind() {
        ErrorKind::NotFound => Error::NotFound(path.to_string()),
        ErrorKind::PermissionDenied => Error::PermissionDenied(format!("{path}: {e}")),
        ErrorKind::AlreadyExists => Error::AlreadyExists(path.to_string()),
        ErrorKind::IsADirectory => Error::InvalidArgument(format!("{path} is a directory")),
        _ => Error::Storage(format!("{path}: {e}")),
    }
}

fn stat_of(meta: &opendal::Metadata) -> Stat {
    Stat {
        size: meta.content_length(),
        dir: meta.mode() == EntryMode::DIR,
        mtime: meta.last_modified().map(SystemTime::from),
    }
}

/// One file is one object. Objects cannot be patched in place, so a write
/// that neither replaces the whole object nor appends (where the store can
/// append) rewrites it: right for whole-file transfers, costly for small
/// updates of large files, which other mappings are for.
#[derive(Debug)]
pub struct Direct {
    op: Operator,
}

impl Direct {
    pub fn new(op: Operator) -> Self {
        Direct { op }
    }
}

#[async_trait]
impl FileMapper for Direct {
    async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<()> {
        let old = match self.op.stat(path).await {
            Ok(m) => Some(m.content_length()),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(storage_error(path, e)),
        };
        let end = offset + data.len() as u64;
        let whole = match old {
            None if offset == 0 => data,
            Some(size) if offset == 0 && end >= size => data,
            Some(size) if offset == size && self.op.info().full_capability().write_can_append => {
                return self
                    .op
                    .write_with(path, data)
                    .append(true)
                    .await
                    .map(|_| ())
                    .map_err(|e| storage_error(path, e));
            }
            _ => {
                let current = match old {
                    Some(_) => self.read(path, 0, u64::MAX).await?,
                    None => Bytes::new(),
                };
                let mut buf = BytesMut::zeroed(current.len().max(end as usize));
                buf[..current.len()].copy_from_slice(&current);
                buf[offset as usize..end as usize].copy_from_slice(&data);
                buf.freeze()
            }
        };
        put_object(&self.op, path, path, whole).await
    }

    async fn read(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        let size = self
            .op
            .stat(path)
            .await
            .map_err(|e| storage_error(path, e))?
            .content_length();
        if offset >= size || len == 0 {
            return Ok(Bytes::new());
        }
        let end = offset.saturating_add(len).min(size);
        let buf = self
            .op
            .read_with(path)
            .range(offset..end)
            .await
            .map_err(|e| storage_error(path, e))?;
        Ok(buf.to_bytes())
    }

    async fn stat(&self, path: &str) -> Result<Option<Stat>> {
        match self.op.stat(path).await {
            Ok(m) => Ok(Some(stat_of(&m))),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Object stores have no directories, only common prefixes.
                let dir = format!("{}/", path.trim_end_matches('/'));
                match self.op.list_with(&dir).limit(1).await {
                    Ok(entries) if entries.iter().any(|e| e.path() != dir) => Ok(Some(Stat {
                        size: 0,
                        dir: true,
                        mtime: None,
                    })),
                    Ok(_) | Err(_) => Ok(None),
                }
            }
            Err(e) => Err(storage_error(path, e)),
        }
    }

    async fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        let dir = match dir.trim_matches('/') {
            "" => String::new(),
            d => format!("{d}/"),
        };
        let entries = self
            .op
            .list(&dir)
            .await
            .map_err(|e| storage_error(&dir, e))?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let path = e.path().trim_matches('/').to_string();
            if path == dir.trim_end_matches('/') {
                continue;
            }
            let stat = if e.metadata().mode() == EntryMode::DIR {
                Stat {
                    size: 0,
                    dir: true,
                    mtime: None,
                }
            } else if e.metadata().content_length() > 0 || e.metadata().last_modified().is_some() {
                stat_of(e.metadata())
            } else {
                // Some services list names only; ask for the rest.
                self.stat(&path).await?.unwrap_or(stat_of(e.metadata()))
            };
            out.push(Entry { path, stat });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    async fn remove(&self, path: &str) -> Result<()> {
        if self.stat(path).await?.is_none() {
            return Err(Error::NotFound(path.to_string()));
        }
        self.op
            .delete(path)
            .await
            .map_err(|e| storage_error(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs() -> (tempfile::TempDir, Arc<dyn FileMapper>) {
        let dir = tempfile::tempdir().unwrap();
        let op = Operator::new(opendal::services::Fs::default().root(dir.path().to_str().unwrap()))
            .unwrap()
            .finish();
        (dir, mapper(Mapping::Direct, op))
    }

    #[tokio::test]
    async fn direct_writes_are_posix_writes() {
        let (dir, m) = fs();
        m.write("d/f", 0, Bytes::from_static(b"hello world"))
            .await
            .unwrap();
        m.write("d/f", 11, Bytes::from_static(b"!")).await.unwrap();
        m.write("d/f", 0, Bytes::from_static(b"J")).await.unwrap();
        m.write("d/f", 14, Bytes::from_static(b"x")).await.unwrap();
        let on_disk = std::fs::read(dir.path().join("d/f")).unwrap();
        assert_eq!(on_disk, b"Jello world!\0\0x");
        assert_eq!(m.read("d/f", 1, 4).await.unwrap(), &b"ello"[..]);
        assert_eq!(m.read("d/f", 13, 100).await.unwrap(), &b"\0x"[..]);
        assert!(m.read("d/f", 99, 1).await.unwrap().is_empty());
        let s = m.stat("d/f").await.unwrap().unwrap();
        assert_eq!((s.size, s.dir), (15, false));
        assert!(m.stat("d").await.unwrap().unwrap().dir);
        let names: Vec<_> = m
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(names, ["d"]);
        let listed = m.list("d").await.unwrap();
        assert_eq!(listed[0].path, "d/f");
        assert_eq!(listed[0].stat.size, 15);
        m.remove("d/f").await.unwrap();
        assert!(matches!(m.remove("d/f").await, Err(Error::NotFound(_))));
        assert!(matches!(m.read("d/f", 0, 1).await, Err(Error::NotFound(_))));
    }
}
