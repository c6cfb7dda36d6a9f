//! The read-optimized mapping (IRIS 3.4.1c): the file is kept whole at
//! several bucket granularities, level `k` in buckets of `B * 2^k` bytes
//! named `PATH/.labios/g<k>/<i>`. With the defaults (B = 512 KiB, four
//! levels) the granularities are 512 KiB, 1 MiB, 2 MiB and 4 MiB: a 2 MiB
//! write at 0 makes one 2 MiB object, two of 1 MiB, four of 512 KiB and
//! half of a 4 MiB one, as in the paper's example.
//!
//! A read fetches whole objects, the fewest aligned ones that cover it
//! rounded out to B (a buddy decomposition): an aligned read of `n`
//! buckets costs O(log n) GETs instead of `n`, and never fetches more than
//! one B-bucket of excess at each end. Whole objects suit stores without
//! ranged reads (IRIS's key-value stores) and caches that keep objects.
//!
//! The price is paid by writes: each byte is written once per level
//! (write amplification = the number of levels in bytes and PUTs, 4x by
//! default, 4x the storage), and a partial write rewrites its buckets at
//! every level, up to `B * 2^(levels-1)` bytes each. For read-mostly data.

use crate::balanced::{check_bucket, concat, Level};
use crate::virtual_file::{internal_dir, Layout, Meta, PARALLEL};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use labios_label::{Error, Result};
use opendal::{ErrorKind, Operator};

/// Default number of granularities.
pub const DEFAULT_LEVELS: u32 = 4;

/// Files kept at several bucket sizes.
#[derive(Debug, Clone)]
pub struct Granularities {
    bucket: u64,
    levels: u32,
}

impl Granularities {
    pub fn new(bucket: u64, levels: u32) -> Result<Granularities> {
        check(bucket, levels)?;
        Ok(Granularities { bucket, levels })
    }
}

fn check(bucket: u64, levels: u32) -> Result<()> {
    check_bucket(bucket)?;
    if !(1..=16).contains(&levels) || bucket.checked_shl(levels - 1).is_none_or(|g| g > 1 << 40) {
        return Err(Error::InvalidArgument(format!(
            "read-optimized levels {levels}: use 1 to 16, with the largest bucket at most 1 TiB"
        )));
    }
    Ok(())
}

fn level<'a>(op: &'a Operator, path: &'a str, meta: &Meta, k: u32) -> Level<'a> {
    Level {
        op,
        path,
        prefix: format!("g{k}/"),
        size: meta.bucket << k,
    }
}

/// The whole objects a read of `offset..end` fetches: (level, start).
pub(crate) fn plan(bucket: u64, levels: u32, size: u64, offset: u64, end: u64) -> Vec<(u32, u64)> {
    let limit = end.div_ceil(bucket) * bucket;
    let mut out = Vec::new();
    let mut p = offset / bucket * bucket;
    while p < end {
        let k = (0..levels)
            .rev()
            .find(|&k| {
                let g = bucket << k;
                p.is_multiple_of(g) && (p + g).min(size) <= limit
            })
            .unwrap_or(0);
        out.push((k, p));
        p += bucket << k;
    }
    out
}

#[async_trait]
impl Layout for Granularities {
    type Index = ();

    fn name(&self) -> &'static str {
        "read-optimized"
    }

    fn new_meta(&self) -> Meta {
        Meta::new(self.name(), self.bucket, self.levels)
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
        check(meta.bucket, meta.levels)?;
        futures::future::try_join_all((0..meta.levels).map(|k| {
            let data = &data;
            async move {
                level(op, path, meta, k)
                    .write(meta.size, offset, data)
                    .await
            }
        }))
        .await
        .map(|_| ())
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
        check(meta.bucket, meta.levels)?;
        let end = offset + len;
        let dir = internal_dir(path);
        let parts: Vec<Bytes> =
            futures::stream::iter(plan(meta.bucket, meta.levels, meta.size, offset, end))
                .map(|(k, p)| {
                    let name = format!("{dir}g{k}/{}", p / (meta.bucket << k));
                    let stop = (p + (meta.bucket << k)).min(meta.size);
                    async move {
                        let whole = match op.read(&name).await {
                            Ok(b) => b.to_bytes(),
                            Err(e) if e.kind() == ErrorKind::NotFound => Bytes::new(),
                            Err(e) => return Err(crate::mapping::storage_error(path, e)),
                        };
                        let (rs, re) = ((offset.max(p) - p) as usize, (end.min(stop) - p) as usize);
                        if whole.len() >= re {
                            return Ok(whole.slice(rs..re));
                        }
                        // A hole, or a bucket shorter than the file says.
                        let mut buf = BytesMut::zeroed(re - rs);
                        if whole.len() > rs {
                            buf[..whole.len() - rs].copy_from_slice(&whole[rs..]);
                        }
                        Ok(buf.freeze())
                    }
                })
                .buffered(PARALLEL)
                .try_collect()
                .await?;
        Ok(concat(parts, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_take_the_fewest_aligned_objects() {
        const B: u64 = 512;
        let big = 1 << 20;
        // The paper's example: 2 MiB (here 4 buckets) at 0 is one object.
        assert_eq!(plan(B, 4, big, 0, 4 * B), [(2, 0)]);
        // 8 buckets from 0: the largest level.
        assert_eq!(plan(B, 4, big, 0, 8 * B), [(3, 0)]);
        // Unaligned: B-buckets at the ends, larger ones in the middle.
        assert_eq!(
            plan(B, 4, big, B + 1, 7 * B - 1),
            [(0, B), (1, 2 * B), (1, 4 * B), (0, 6 * B)]
        );
        // Near the end of a file, a large object is only as long as the file.
        assert_eq!(plan(B, 4, 100, 0, 100), [(3, 0)]);
        assert_eq!(plan(B, 1, big, 10, 3 * B), [(0, 0), (0, B), (0, 2 * B)]);
    }

    #[test]
    fn bad_granularities_are_refused() {
        assert!(Granularities::new(0, 4).is_err());
        assert!(Granularities::new(512, 0).is_err());
        assert!(Granularities::new(1 << 32, 16).is_err());
        assert!(Granularities::new(512, 4).is_ok());
    }
}
