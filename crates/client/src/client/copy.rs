//! copy_file_range(2) between LABIOS files as labels: read labels leave
//! the source's bytes in the warehouse, and write labels take them from
//! there into the target, so the bytes go from worker to worker and never
//! through the client. Holes of the source are zero labels (no data).

use super::{Client, FileRef};
use labios_label::{Error, LabelId, Pointer, Result};
use labios_store::warehouse::release;

/// Labels one copy call moves at most: a larger request returns a short
/// count, as the kernel's does, and the caller calls again. Bounds what
/// one call holds in the warehouse.
const COPY_LABELS: u64 = 16;

impl Client {
    /// Copies up to `len` bytes at `src_offset` of `src` to `dst_offset`
    /// of `dst` and returns how many (0 at the source's end). This client's
    /// earlier writes to both land first. The ranges of one file must not
    /// overlap (EINVAL, as Linux).
    pub async fn copy_range<'a, 'b>(
        &self,
        src: impl Into<FileRef<'a>>,
        src_offset: u64,
        dst: impl Into<FileRef<'b>>,
        dst_offset: u64,
        len: u64,
    ) -> Result<u64> {
        let (src, dst) = (src.into(), dst.into());
        let from = self.file_to_read(src).await?;
        let to = self.file_to_read(dst).await?;
        if src_offset >= from.size || len == 0 {
            return Ok(0);
        }
        let most = COPY_LABELS * self.config().max_label_size;
        let len = len.min(from.size - src_offset).min(most);
        dst_offset
            .checked_add(len)
            .filter(|&e| i64::try_from(e).is_ok())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "copy to {}: offset {dst_offset} + {len} bytes is past the largest file",
                    to.path
                ))
            })?;
        if from.id == to.id && src_offset < dst_offset + len && dst_offset < src_offset + len {
            return Err(Error::InvalidArgument(format!(
                "copy within {}: the ranges at {src_offset} and {dst_offset} overlap",
                from.path
            )));
        }
        // The source's bytes into the warehouse, one read label per piece
        // of an extent run.
        let extents = self.inner.catalog.extents(from.id, src_offset, len).await?;
        let mut reads = Vec::new();
        let mut pieces: Vec<(LabelId, u64, u64)> = Vec::new();
        for e in &extents {
            let start = e.offset.max(src_offset);
            let end = (e.offset + e.len).min(src_offset + len);
            if start >= end {
                continue;
            }
            for (label, at, n) in
                self.inner
                    .labels
                    .read_labels(&from.path, from.id, start, end - start)
            {
                pieces.push((label.id, at, n));
                reads.push(label);
            }
        }
        // The results stay in the warehouse: the copy's writes take them.
        let (statuses, keys) = self.run_reads(reads, false).await?;
        let copied = self
            .write_copied(
                &to.path, to.id, &statuses, &pieces, src_offset, dst_offset, len,
            )
            .await;
        if copied.is_err() {
            // Results no write label took are nobody's once the copy fails.
            release(self.inner.stores.warehouse.as_ref(), &keys).await;
        }
        copied.map(|()| len)
    }

    /// Where a complete read label left its bytes.
    pub(super) fn result_key(&self, s: &labios_label::LabelStatus) -> String {
        s.result_key
            .clone()
            .unwrap_or_else(|| crate::content_manager::read_key(self.inner.app, s.id))
    }

    /// The write labels of a copy: each read's result key is a write's
    /// source, and the gaps between the pieces are zeros.
    #[allow(clippy::too_many_arguments)]
    async fn write_copied(
        &self,
        path: &str,
        file: labios_label::FileId,
        statuses: &[labios_label::LabelStatus],
        pieces: &[(LabelId, u64, u64)],
        src_offset: u64,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        crate::label_manager::first_failure(statuses)?;
        let mut writes = Vec::new();
        let mut at = src_offset;
        let target = |from: u64| dst_offset + (from - src_offset);
        for (status, &(_, start, n)) in statuses.iter().zip(pieces) {
            let key = self.result_key(status);
            if start > at {
                writes.extend(
                    self.inner
                        .labels
                        .zero_pieces(path, file, target(at), start - at),
                );
            }
            let mut label = self.inner.labels.new_label(labios_label::LabelKind::Write);
            label.source = Pointer::Warehouse { key, len: n };
            label.destination = Pointer::File {
                path: path.to_string(),
                file,
                offset: target(start),
                len: n,
            };
            writes.push(label);
            at = start + n;
        }
        if at < src_offset + len {
            writes.extend(self.inner.labels.zero_pieces(
                path,
                file,
                target(at),
                src_offset + len - at,
            ));
        }
        let ids: Vec<LabelId> = writes.iter().map(|l| l.id).collect();
        self.inner.positional.lock().insert(file);
        self.publish_tracked(file, writes).await?;
        self.wait_ids(&ids).await
    }
}
