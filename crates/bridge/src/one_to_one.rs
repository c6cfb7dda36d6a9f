//! The 1-to-1 objects-to-files mapping (IRIS 3.4.1): object `a/b` is the
//! file `DIR/a/b`. The cheapest mapping, and the only one whose files
//! other programs can use as they are; a file system with many small
//! objects pays for it in metadata, which the container mappings avoid.
//!
//! A put writes a temporary file in `DIR/.labios/` and renames it over
//! the object, so readers never see half an object; keys under `.labios`
//! are therefore refused, as are keys a file system cannot hold (empty,
//! `.` or `..` components, a key that is also another key's folder).

use crate::object_mapping::{blocking, check_key, clamp, ObjectInfo, ObjectMapper};
use crate::virtual_file::INTERNAL;
use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{Error, Result};
use std::fs;
use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct OneToOne {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    sync: bool,
    tmp: AtomicU64,
}

impl OneToOne {
    /// Objects as the files of `root` (created if missing); `sync` makes a
    /// put durable before it returns.
    pub fn open(root: &Path, sync: bool) -> Result<OneToOne> {
        fs::create_dir_all(root.join(INTERNAL))?;
        Ok(OneToOne {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                sync,
                tmp: AtomicU64::new(0),
            }),
        })
    }
}

impl Inner {
    fn path(&self, key: &str) -> Result<PathBuf> {
        check_key(key)?;
        let bad = key.starts_with('/')
            || key
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
            || key.split('/').next() == Some(INTERNAL);
        if bad {
            return Err(Error::InvalidArgument(format!(
                "object key {key:?}: a 1-to-1 key is a relative file path without empty, `.`, `..` or leading `{INTERNAL}` parts"
            )));
        }
        Ok(self.root.join(key))
    }

    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        let path = self.path(key)?;
        let n = self.tmp.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .root
            .join(INTERNAL)
            .join(format!("put-{}-{n}", std::process::id()));
        let mut f = fs::File::create(&tmp)?;
        let written = f
            .write_all(data)
            .and_then(|_| if self.sync { f.sync_data() } else { Ok(()) });
        if let Err(e) = written.and_then(|_| rename_into(&tmp, &path)) {
            let _ = fs::remove_file(&tmp);
            return Err(Error::Storage(format!("put {key}: {e}")));
        }
        Ok(())
    }

    fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Bytes> {
        let path = self.path(key)?;
        let f = fs::File::open(&path).map_err(|e| not_found(key, e))?;
        let meta = f.metadata()?;
        if meta.is_dir() {
            return Err(Error::NotFound(key.to_string()));
        }
        let r = clamp(range, meta.len());
        let mut buf = vec![0; (r.end - r.start) as usize];
        f.read_exact_at(&mut buf, r.start)?;
        Ok(buf.into())
    }

    fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        match fs::metadata(self.path(key)?) {
            Ok(m) if m.is_file() => Ok(Some(ObjectInfo {
                key: key.to_string(),
                size: m.len(),
                mtime: mtime(&m),
            })),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        fs::remove_file(&path).map_err(|e| not_found(key, e))?;
        // Folders exist only for their objects: drop the emptied ones.
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| *d != self.root) {
            if fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        // Walk only the deepest folder the prefix names.
        let base = prefix.rsplit_once('/').map_or("", |(d, _)| d);
        let mut out = Vec::new();
        let mut stack = vec![(self.root.join(base), base.to_string())];
        while let Some((dir, key)) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            for entry in entries {
                let entry = entry?;
                let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let k = if key.is_empty() {
                    name
                } else {
                    format!("{key}/{name}")
                };
                if k == INTERNAL {
                    continue;
                }
                let ft = entry.file_type()?;
                if ft.is_dir() {
                    if k.starts_with(prefix) || prefix.starts_with(&format!("{k}/")) {
                        stack.push((entry.path(), k));
                    }
                } else if ft.is_file() && k.starts_with(prefix) {
                    let m = entry.metadata()?;
                    out.push(ObjectInfo {
                        key: k,
                        size: m.len(),
                        mtime: mtime(&m),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

fn mtime(m: &fs::Metadata) -> Option<u64> {
    let since = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    u64::try_from(since.as_nanos()).ok()
}

fn not_found(key: &str, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound(key.to_string()),
        _ => Error::Storage(format!("{key}: {e}")),
    }
}

#[async_trait]
impl ObjectMapper for OneToOne {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let (inner, key) = (self.inner.clone(), key.to_string());
        blocking(move || inner.put(&key, &data)).await
    }

    async fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Bytes> {
        let (inner, key) = (self.inner.clone(), key.to_string());
        blocking(move || inner.get(&key, range)).await
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let (inner, key) = (self.inner.clone(), key.to_string());
        blocking(move || inner.head(&key)).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let (inner, key) = (self.inner.clone(), key.to_string());
        blocking(move || inner.delete(&key)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let (inner, prefix) = (self.inner.clone(), prefix.to_string());
        blocking(move || inner.list(&prefix)).await
    }
}

/// Times a put makes its object's folder again: a delete of the folder's
/// last other object removes it (folders exist only for their objects)
/// between the put's making it and its rename, as often as deletes race.
const RENAME_ATTEMPTS: usize = 32;

/// Renames the written `tmp` to the object's `path`, making `path`'s
/// folders first, and again when a concurrent delete removed the emptied
/// folder meanwhile: a put once failed with `No such file or directory`
/// (HTTP 500) beside the delete of another object of its folder (found by
/// the model checker, object_buckets/one-to-one).
/// Making the folder can fail the same way: `create_dir_all` reports
/// `File exists` when the folder it found is removed before it looks again.
fn rename_into(tmp: &Path, path: &Path) -> std::io::Result<()> {
    use std::io::ErrorKind::{AlreadyExists, NotFound};
    let mut attempts = 0;
    loop {
        attempts += 1;
        let made = path.parent().map_or(Ok(()), fs::create_dir_all);
        match made.and_then(|()| fs::rename(tmp, path)) {
            Err(e)
                if matches!(e.kind(), NotFound | AlreadyExists) && attempts < RENAME_ATTEMPTS => {}
            done => return done,
        }
    }
}
