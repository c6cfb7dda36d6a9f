//! Data in external storage (article 3.3.3a, 3.6.1), named `NAME:/path` or
//! `s3://bucket/key` for a declared mount. Reads and writes are labels that
//! workers execute against the external system, so a data set there is read
//! in place, without an ingestion step (the K-means case of 4.2.7).
//! Metadata, listings and removals are labels too: the workers' mount holds
//! what the external system does not show yet (merged writes, relaxed
//! metadata), and this client reaches no external system itself.

use super::Client;
use bytes::{Bytes, BytesMut};
use labios_label::{Codec, Error, LabelKind, LabelState, LabelStatus, Result};
use labios_mounts::{MountTable, Named};
use labios_store::FileMeta;

impl Client {
    /// The external storage this client may name.
    pub fn mounts(&self) -> &MountTable {
        &self.inner.mounts
    }

    /// Resolves an external path to its mount.
    pub fn external(&self, path: &str) -> Result<Named<'_>> {
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
        // Every result is taken before any is looked at, so none is left
        // holding warehouse room (or the connection's inline budget) when
        // one label failed or the file shrank.
        let mut results = Vec::with_capacity(statuses.len());
        for status in &statuses {
            results.push(match failed(status) {
                Ok(()) => self.take_external(status).await,
                Err(e) => Err(e),
            });
        }
        let mut buf = BytesMut::with_capacity(len as usize);
        for (data, n) in results.into_iter().zip(wanted) {
            let data = data?;
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
        self.metadata_external(LabelKind::Stat, path)
            .await?
            .pop()
            .ok_or_else(|| Error::NotFound(path.to_string()))
    }

    pub(super) async fn list_external(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        self.metadata_external(LabelKind::List, prefix).await
    }

    /// A worker removes the path: the mount's merged writes and relaxed
    /// metadata of the file are kept there, in `labios serve`'s process,
    /// not in this client's. A worker's failure comes back as text, so a
    /// missing file is found by asking first, for `rm` to say ENOENT; a
    /// failure of the removal itself is reported as it came.
    pub(super) async fn remove_external(&self, path: &str) -> Result<()> {
        self.stat_external(path).await?;
        let label = self.inner.labels.external_remove(path);
        let id = label.id;
        self.inner.labels.publish(vec![label]).await?;
        self.inner
            .labels
            .wait(&[id])
            .await?
            .iter()
            .try_for_each(failed)
    }

    /// Metadata of external storage, asked of a worker ([`LabelKind::Stat`]
    /// or [`LabelKind::List`]): its mount counts the writes it merged and
    /// the sizes it keeps (relaxed metadata) that the external system does
    /// not show yet, so a client sees what was acknowledged to it.
    async fn metadata_external(&self, kind: LabelKind, path: &str) -> Result<Vec<FileMeta>> {
        self.external(path)?;
        let label = self.inner.labels.external_metadata(kind, path);
        let id = label.id;
        self.inner.labels.publish(vec![label]).await?;
        let statuses = self.inner.labels.wait_taking(&[id]).await?;
        let status = statuses
            .first()
            .ok_or_else(|| Error::Storage(format!("no status for label {id}")))?;
        failed(status)?;
        Vec::<FileMeta>::from_bytes(&self.take_external(status).await?)
    }

    /// The result of a complete external label, taken from the warehouse.
    async fn take_external(&self, status: &LabelStatus) -> Result<Bytes> {
        let key = self.result_key(status);
        self.inner.content.take(&key).await?.ok_or_else(|| {
            Error::Storage(format!(
                "result of label {} is missing from the warehouse",
                status.id
            ))
        })
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
