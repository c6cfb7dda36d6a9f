//! Labels whose source or destination is external storage (article
//! 3.3.3a): the worker moves bytes between the warehouse and the external
//! system through the mount's mapper. No extent is recorded: the external
//! system stays the only authority on what it holds.

use super::{answered_in, bad_pointer, Done, Executor, Failure};
use bytes::Bytes;
use labios_bridge::{External, Stat};
use labios_label::{Codec, Label, LabelKind, Pointer};
use labios_store::{FileKind, FileMeta};
use std::time::UNIX_EPOCH;

/// Largest encoded listing a [`LabelKind::List`] label returns: it reaches
/// a client of `labios serve` in one frame, with room for the frame's own
/// envelope.
const MAX_LISTING: usize = labios_store::remote::MAX_FRAME - (1 << 20);

impl Executor {
    pub(super) async fn write_external(&self, label: &Label) -> Result<Done, Failure> {
        let Pointer::Warehouse { key, len } = &label.source else {
            return Err(bad_pointer(label, "source", "a warehouse entry"));
        };
        let Pointer::Uri { uri, offset, .. } = &label.destination else {
            return Err(bad_pointer(label, "destination", "external storage"));
        };
        let target = self.mounts.resolve(uri).map_err(|e| e.to_string())?;
        let data = self.staged(label, key, *len).await?;
        target
            .mapper()
            .write(&target.path, *offset, data)
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        Ok(Done::bytes(*len))
    }

    pub(super) async fn flush_external(&self, label: &Label) -> Result<Done, Failure> {
        let Pointer::Uri { uri, .. } = &label.source else {
            return Err(bad_pointer(label, "source", "external storage"));
        };
        let target = self.mounts.resolve(uri).map_err(|e| e.to_string())?;
        target
            .mapper()
            .flush(&target.path)
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        Ok(Done::bytes(0))
    }

    /// A [`LabelKind::Stat`] or [`LabelKind::List`] label: the entries of
    /// its path as `FileMeta`s (none for a missing path's stat), encoded in
    /// the destination warehouse entry. The answer comes from this worker's
    /// mount, which counts what it holds back (merged writes, relaxed
    /// metadata) that the external system does not show yet.
    pub(super) async fn metadata_external(&self, label: &Label) -> Result<Done, Failure> {
        let (uri, target) = self.target(label)?;
        let Pointer::Warehouse { key, .. } = &label.destination else {
            return Err(bad_pointer(label, "destination", "a warehouse entry"));
        };
        let fail = |e: labios_label::Error| format!("{uri}: {e}");
        let entries = match label.kind {
            LabelKind::Stat => target
                .mapper()
                .stat(&target.path)
                .await
                .map_err(fail)?
                .map(|stat| vec![meta(uri.to_string(), &stat)])
                .unwrap_or_default(),
            _ => {
                let base = uri.trim_end_matches('/');
                let cut = target.path.len();
                let entries = target.mapper().list(&target.path).await.map_err(fail)?;
                entries
                    .iter()
                    .map(|e| {
                        let name = e.path[cut..].trim_start_matches('/');
                        meta(format!("{base}/{name}"), &e.stat)
                    })
                    .collect()
            }
        };
        let encoded = Bytes::from(entries.to_bytes());
        if encoded.len() > MAX_LISTING {
            return Err(format!(
                "{uri}: the listing takes {} bytes, more than the {MAX_LISTING} bytes one label \
                 may return (list a directory further down)",
                encoded.len()
            ));
        }
        let n = encoded.len() as u64;
        self.answer(key, encoded, n).await
    }

    /// A delete label of an external path: run here, where the mount's
    /// merged writes and relaxed metadata of the file live and go with it.
    pub(super) async fn remove_external(&self, label: &Label) -> Result<Done, Failure> {
        let (uri, target) = self.target(label)?;
        target
            .mapper()
            .remove(&target.path)
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        Ok(Done::bytes(0))
    }

    /// The external path a label's source names, resolved to its mount.
    fn target<'a>(&self, label: &'a Label) -> Result<(&'a str, External), Failure> {
        let Pointer::Uri { uri, .. } = &label.source else {
            return Err(bad_pointer(label, "source", "external storage"));
        };
        let target = self.mounts.resolve(uri).map_err(|e| e.to_string())?;
        Ok((uri, target))
    }

    pub(super) async fn read_external(&self, label: &Label) -> Result<Done, Failure> {
        let Pointer::Uri { uri, offset, len } = &label.source else {
            return Err(bad_pointer(label, "source", "external storage"));
        };
        let key = answered_in(label, *len, "read of")?;
        let target = self.mounts.resolve(uri).map_err(|e| e.to_string())?;
        let data = target
            .mapper()
            .read(&target.path, *offset, *len)
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        let n = data.len() as u64;
        self.answer(key, data, n).await
    }
}

/// What LABIOS shows of an external entry: a file or directory of its size
/// and modification time; the rest (owner, mode) the external system does
/// not tell, so they are the defaults of a file any application may read.
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
