//! The balanced mapping (IRIS 3.4.1a): a file is cut into fixed-size
//! buckets, bucket `i` (bytes `i*B .. (i+1)*B`) being the object
//! `PATH/.labios/<i>`. Reads and writes map to the same objects, so
//! neither is favoured; IRIS found a bucket of the median request size
//! best and suggests 512 KiB without a trace.
//!
//! Invariant that lets every read be one ranged GET per bucket without
//! asking for object sizes first (stores refuse ranges past an object's
//! end): every stored bucket holds at least the file's bytes that fall in
//! it, so all but the last are full. A write that extends the file past a
//! partial last bucket pads that bucket first; buckets never written are
//! holes and read as zeros.

use crate::virtual_file::{internal_dir, or_zeros, Layout, Meta, PARALLEL};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use labios_label::{Error, Result};
use opendal::Operator;

/// IRIS's default bucket size.
pub const DEFAULT_BUCKET: u64 = 512 << 10;

/// Files in fixed-size buckets.
#[derive(Debug, Clone)]
pub struct Buckets {
    bucket: u64,
}

impl Buckets {
    pub fn new(bucket: u64) -> Result<Buckets> {
        check_bucket(bucket)?;
        Ok(Buckets { bucket })
    }
}

pub(crate) fn check_bucket(bucket: u64) -> Result<()> {
    if bucket == 0 || bucket > 1 << 32 {
        return Err(Error::InvalidArgument(format!(
            "bucket size {bucket}: use 1 byte to 4 GiB"
        )));
    }
    Ok(())
}

/// One level of buckets of one file: `<dir><prefix><index>`.
pub(crate) struct Level<'a> {
    pub op: &'a Operator,
    pub path: &'a str,
    pub prefix: String,
    pub size: u64,
}

impl Level<'_> {
    pub fn name(&self, index: u64) -> String {
        format!("{}{}{index}", internal_dir(self.path), self.prefix)
    }

    /// Stores `data` at `offset` in a file of `old_size` bytes.
    pub async fn write(&self, old_size: u64, offset: u64, data: &Bytes) -> Result<()> {
        let bs = self.size;
        let end = offset + data.len() as u64;
        let new_size = old_size.max(end);
        let first = offset / bs;
        let last = (end - 1) / bs;
        let mut jobs = Vec::new();
        // The old last bucket, partial, now below the end: pad it.
        if !old_size.is_multiple_of(bs) {
            let j = old_size / bs;
            if j < first && new_size > (j + 1) * bs {
                jobs.push((j, 0, 0, Bytes::new()));
            }
        }
        for i in first..=last {
            let start = i * bs;
            let ws = offset.max(start) - start;
            let we = end.min(start + bs) - start;
            let slice = data.slice((start + ws - offset) as usize..(start + we - offset) as usize);
            jobs.push((i, ws, we, slice));
        }
        futures::stream::iter(jobs)
            .map(|(i, ws, we, slice)| self.write_bucket(i, old_size, new_size, ws, we, slice))
            .buffer_unordered(PARALLEL)
            .try_collect::<()>()
            .await
    }

    /// Bucket `i` gets `slice` at `ws..we` (relative), and is made as long
    /// as the file's bytes in it.
    async fn write_bucket(
        &self,
        i: u64,
        old_size: u64,
        new_size: u64,
        ws: u64,
        we: u64,
        slice: Bytes,
    ) -> Result<()> {
        let bs = self.size;
        let start = i * bs;
        let stored = old_size.saturating_sub(start).min(bs);
        let target = new_size.saturating_sub(start).min(bs);
        let name = self.name(i);
        let keep_old = stored > 0 && !(ws == 0 && we >= stored);
        let body = if !keep_old && ws == 0 && we == target {
            slice
        } else {
            let mut buf = BytesMut::zeroed(target as usize);
            if keep_old {
                let old = or_zeros(
                    self.op.read_with(&name).range(0..stored).await,
                    self.path,
                    stored,
                )?;
                buf[..old.len()].copy_from_slice(&old);
            }
            buf[ws as usize..we as usize].copy_from_slice(&slice);
            buf.freeze()
        };
        crate::mapping::put_object(self.op, self.path, &name, body).await
    }

    /// `len` bytes at `offset`, one ranged GET per bucket.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        let bs = self.size;
        let end = offset + len;
        let parts: Vec<Bytes> = futures::stream::iter(offset / bs..=(end - 1) / bs)
            .map(|i| {
                let start = i * bs;
                let rs = offset.max(start) - start;
                let re = end.min(start + bs) - start;
                let name = self.name(i);
                async move {
                    or_zeros(
                        self.op.read_with(&name).range(rs..re).await,
                        self.path,
                        re - rs,
                    )
                }
            })
            .buffered(PARALLEL)
            .try_collect()
            .await?;
        Ok(concat(parts, len))
    }
}

pub(crate) fn concat(parts: Vec<Bytes>, len: u64) -> Bytes {
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    let mut out = BytesMut::with_capacity(len as usize);
    for p in parts {
        out.extend_from_slice(&p);
    }
    out.freeze()
}

#[async_trait]
impl Layout for Buckets {
    type Index = ();

    fn name(&self) -> &'static str {
        "balanced"
    }

    fn new_meta(&self) -> Meta {
        Meta::new(self.name(), self.bucket, 1)
    }

    async fn write(
        &self,
        op: &Operator,
        path: &str,
        meta: &Meta,
        _: &mut (),
        offset: u64,
        data: Bytes,
    ) -> Result<()> {
        check_bucket(meta.bucket)?;
        let level = Level {
            op,
            path,
            prefix: String::new(),
            size: meta.bucket,
        };
        level.write(meta.size, offset, &data).await
    }

    async fn read(
        &self,
        op: &Operator,
        path: &str,
        meta: &Meta,
        _: &(),
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        check_bucket(meta.bucket)?;
        let level = Level {
            op,
            path,
            prefix: String::new(),
            size: meta.bucket,
        };
        level.read(offset, len).await
    }
}
