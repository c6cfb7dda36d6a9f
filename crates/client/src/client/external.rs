//! Data in external storage (article 3.3.3a, 3.6.1), named `NAME:/path` or
//! `s3://bucket/key` for a declared mount. Reads and writes are labels that
//! workers execute against the external system, so a data set there is read
//! in place, without an ingestion step (the K-means case of 4.2.7).
//! Metadata is asked of the external system each time: LABIOS keeps no copy.

use super::Client;
use bytes::{Bytes, BytesMut};
use labios_bridge::{External, Mounts, Stat};
use labios_label::{Error, LabelState, LabelStatus, Result};
use labios_store::{FileKind, FileMeta};
use std::time::UNIX_EPOCH;

impl Client {
    /// The external storage this client may name.
    pub fn mounts(&self) -> &Mounts {
        &self.inner.mounts
    }

    /// Resolves an external path to its mount.
    pub fn external(&self, path: &str) -> Result<External> {
        self.inner.mounts.resolve(path)
    }

    pub(super) async fn read_external(&self, path: &str, offset: u64, len: u64) -> Result<Bytes> {
        let size = self.stat_external(path).await?.size;
        if offset >= size || len == 0 {
            return Ok(Bytes::new());
        }
        let len = len.min(size - offset);
        let max = self.config().max_label_size;
        let mut labels = Vec::new();
        let mut wanted = Vec::new();
        let mut at = offset;
        while at < offset + len {
            let n = (offset + len - at).min(max);
            labels.push(self.inner.labels.external_read(path, at, n));
            wanted.push(n);
            at += n;
        }
        let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
        self.inner.labels.publish(labels).await?;
        let statuses = self.inner.labels.wait_taking(&ids).await?;
        let mut buf = BytesMut::with_capacity(len as usize);
        for (status, n) in statuses.iter().zip(wanted) {
            failed(status)?;
            let key = status
                .result_key
                .clone()
                .unwrap_or_else(|| crate::content_manager::read_key(self.inner.app, status.id));
            let data = self.inner.content.take(&key).await?.ok_or_else(|| {
                Error::Storage(format!(
                    "result of read label {} is missing from the warehouse",
                    status.id
                ))
            })?;
            buf.extend_from_slice(&data);
            // The file shrank between the stat and the read.
            if (data.len() as u64) < n {
                break;
            }
        }
        Ok(buf.freeze())
    }

    /// Writes through workers, one label at a time: objects cannot be
    /// patched in place, so two labels of one file must never race.
    pub(super) async fn write_external(&self, path: &str, offset: u64, data: Bytes) -> Result<()> {
        self.external(path)?;
        offset.checked_add(data.len() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!("offset {offset} + {} bytes overflows", data.len()))
        })?;
        let max = self.config().max_label_size as usize;
        // At least one label: an empty write creates a missing file, as it
        // does for a LABIOS file, and changes no size (it is sent at offset
        // 0, since a mapping pads a file to the offset it writes at: found
        // by the model checker).
        let offset = if data.is_empty() { 0 } else { offset };
        let mut done = 0;
        while done < data.len() || (done == 0 && data.is_empty()) {
            let n = (data.len() - done).min(max);
            let (label, key) =
                self.inner
                    .labels
                    .external_write(path, offset + done as u64, n as u64);
            let id = label.id;
            self.inner
                .content
                .put(&key, data.slice(done..done + n))
                .await?;
            self.inner.labels.publish(vec![label]).await?;
            for status in self.inner.labels.wait(&[id]).await? {
                failed(&status)?;
            }
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(())
    }

    /// Every worker stores what its mount holds back of `path`.
    pub(super) async fn flush_external(&self, path: &str) -> Result<()> {
        self.external(path)?;
        let workers = self.inner.catalog.inventory().workers().await?;
        let labels: Vec<_> = workers
            .iter()
            .map(|w| self.inner.labels.external_flush(path, w.spec.id))
            .collect();
        let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
        self.inner.labels.publish(labels).await?;
        super::first_failure(&self.inner.labels.wait(&ids).await?)?;
        // As fsync of a path must open it first: a missing file is an error.
        self.stat_external(path).await.map(|_| ())
    }

    pub(super) async fn stat_external(&self, path: &str) -> Result<FileMeta> {
        let target = self.external(path)?;
        let stat = target
            .mapper()
            .stat(&target.path)
            .await?
            .ok_or_else(|| Error::NotFound(path.to_string()))?;
        Ok(meta(path.to_string(), &stat))
    }

    pub(super) async fn list_external(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        let target = self.external(prefix)?;
        let base = prefix.trim_end_matches('/');
        let cut = target.path.len();
        let entries = target.mapper().list(&target.path).await?;
        Ok(entries
            .iter()
            .map(|e| {
                let name = e.path[cut..].trim_start_matches('/');
                meta(format!("{base}/{name}"), &e.stat)
            })
            .collect())
    }

    pub(super) async fn remove_external(&self, path: &str) -> Result<()> {
        let target = self.external(path)?;
        target.mapper().remove(&target.path).await
    }
}

fn failed(status: &LabelStatus) -> Result<()> {
    if status.state == LabelState::Complete {
        return Ok(());
    }
    Err(Error::LabelFailed {
        label: status.id.to_string(),
        reason: status
            .error
            .clone()
            .unwrap_or_else(|| "unknown error".into()),
    })
}

fn meta(path: String, stat: &Stat) -> FileMeta {
    let nanos = stat
        .mtime
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    FileMeta {
        id: 0,
        path,
        kind: if stat.dir {
            FileKind::Dir
        } else {
            FileKind::File
        },
        size: stat.size,
        mode: if stat.dir { 0o755 } else { 0o644 },
        owner: 0,
        uid: 0,
        gid: 0,
        ctime: nanos,
        mtime: nanos,
        atime: nanos,
        nlink: 1,
    }
}
