//! The write-optimized mapping (IRIS 3.4.1b): every write is one new
//! object and nothing else (no read-modify-write), named after its log
//! entry: `PATH/.labios/log/<seq>-<offset>-<len>-<writer>`. The names are
//! the range index: listing them rebuilds it, and the newest entry wins
//! where writes overlap. A read assembles the visible pieces
//! with one ranged GET each.
//!
//! Objects a newer write covers entirely are deleted after it, so a file
//! rewritten in place does not grow without bound; partly covered ones
//! stay until the file is removed.

use crate::mapping::storage_error;
use crate::virtual_file::{internal_dir, Layout, Meta, PARALLEL};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use labios_label::{Error, Result};
use opendal::{ErrorKind, Operator};
use std::sync::atomic::{AtomicU64, Ordering};

/// One write: bytes `offset..offset+len` of the file are object `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub seq: u64,
    pub offset: u64,
    pub len: u64,
    pub name: String,
}

impl Extent {
    fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A file's writes, oldest first.
pub type RangeIndex = Vec<Extent>;

/// Files as logs of writes.
#[derive(Debug)]
pub struct WriteLog {
    /// Tells this process's objects from another's with the same sequence
    /// number (two writers of one file are not supported, but must not
    /// destroy each other's objects either).
    writer: String,
}

impl Default for WriteLog {
    fn default() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let mix = crate::containers::fnv1a(
            format!(
                "{}-{}-{n}",
                std::process::id(),
                crate::virtual_file::now_ns()
            )
            .as_bytes(),
        );
        WriteLog {
            writer: format!("{:08x}", mix as u32),
        }
    }
}

fn log_dir(path: &str) -> String {
    format!("{}log/", internal_dir(path))
}

/// The `(seq, offset, len)` a log object's name records; `None` for a name
/// that is not a log entry. Public only for the fuzz targets of
/// `labios-fuzz`: object names come from the external store.
#[doc(hidden)]
pub fn parse(name: &str) -> Option<(u64, u64, u64)> {
    let base = name.rsplit('/').next()?;
    let mut it = base.split('-');
    let seq = it.next()?.parse().ok()?;
    let offset: u64 = it.next()?.parse().ok()?;
    let len = it.next()?.parse().ok()?;
    // Reads compute the extent's end.
    offset.checked_add(len)?;
    Some((seq, offset, len))
}

/// The parts of `offset..end` each extent still shows, newest first:
/// (extent, file offset, length).
fn visible(index: &[Extent], offset: u64, end: u64) -> Vec<(&Extent, u64, u64)> {
    let mut uncovered = vec![(offset, end)];
    let mut out = Vec::new();
    for e in index.iter().rev() {
        if uncovered.is_empty() {
            break;
        }
        let mut rest = Vec::with_capacity(uncovered.len() + 1);
        for (s, t) in uncovered {
            let (a, b) = (s.max(e.offset), t.min(e.end()));
            if a >= b {
                rest.push((s, t));
                continue;
            }
            out.push((e, a, b - a));
            if s < a {
                rest.push((s, a));
            }
            if b < t {
                rest.push((b, t));
            }
        }
        uncovered = rest;
    }
    out
}

#[async_trait]
impl Layout for WriteLog {
    type Index = RangeIndex;

    fn name(&self) -> &'static str {
        "write-optimized"
    }

    fn new_meta(&self) -> Meta {
        Meta::new(self.name(), 0, 0)
    }

    async fn load_index(&self, op: &Operator, path: &str, meta: &mut Meta) -> Result<RangeIndex> {
        let dir = log_dir(path);
        let listed = match op.list(&dir).await {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(storage_error(path, e)),
        };
        let mut index: RangeIndex = listed
            .iter()
            .filter_map(|e| {
                let (seq, offset, len) = parse(e.path())?;
                Some(Extent {
                    seq,
                    offset,
                    len,
                    name: e.path().to_string(),
                })
            })
            .collect();
        index.sort_by(|a, b| (a.seq, &a.name).cmp(&(b.seq, &b.name)));
        // Relaxed metadata lost in a crash may lag the log: never reuse a
        // name. (The size is the metadata's, as in every mapping.)
        if let Some(last) = index.last() {
            meta.seq = meta.seq.max(last.seq);
        }
        Ok(index)
    }

    async fn write(
        &self,
        op: &Operator,
        path: &str,
        meta: &Meta,
        index: &mut RangeIndex,
        offset: u64,
        data: Bytes,
    ) -> Result<()> {
        let e = Extent {
            seq: meta.seq + 1,
            offset,
            len: data.len() as u64,
            name: format!(
                "{}{:020}-{offset}-{}-{}",
                log_dir(path),
                meta.seq + 1,
                data.len(),
                self.writer
            ),
        };
        crate::mapping::put_object(op, path, &e.name, data).await?;
        let (covered, kept): (Vec<_>, Vec<_>) = std::mem::take(index)
            .into_iter()
            .partition(|old| e.offset <= old.offset && old.end() <= e.end());
        *index = kept;
        index.push(e);
        futures::stream::iter(covered)
            .map(|old| async move {
                match op.delete(&old.name).await {
                    Err(err) if err.kind() != ErrorKind::NotFound => Err(storage_error(path, err)),
                    _ => Ok(()),
                }
            })
            .buffer_unordered(PARALLEL)
            .try_collect::<()>()
            .await
    }

    async fn read(
        &self,
        op: &Operator,
        path: &str,
        _: &Meta,
        index: &RangeIndex,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        let pieces: Vec<(String, u64, u64, u64)> = visible(index, offset, offset + len)
            .into_iter()
            .map(|(e, at, n)| (e.name.clone(), at - e.offset, at, n))
            .collect();
        let got: Vec<(u64, Bytes)> = futures::stream::iter(pieces)
            .map(|(name, rel, at, n)| async move {
                let b = op
                    .read_with(&name)
                    .range(rel..rel + n)
                    .await
                    .map_err(|err| storage_error(path, err))?;
                Ok::<_, Error>((at, b.to_bytes()))
            })
            .buffer_unordered(PARALLEL)
            .try_collect()
            .await?;
        if let [(at, b)] = got.as_slice() {
            if *at == offset && b.len() as u64 == len {
                return Ok(b.clone());
            }
        }
        let mut buf = BytesMut::zeroed(len as usize);
        for (at, b) in got {
            let s = (at - offset) as usize;
            buf[s..s + b.len()].copy_from_slice(&b);
        }
        Ok(buf.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(seq: u64, offset: u64, len: u64) -> Extent {
        Extent {
            seq,
            offset,
            len,
            name: seq.to_string(),
        }
    }

    #[test]
    fn the_newest_write_wins() {
        let index = vec![ext(1, 0, 100), ext(2, 10, 10), ext(3, 15, 20)];
        let mut v: Vec<_> = visible(&index, 0, 50)
            .into_iter()
            .map(|(e, a, n)| (e.seq, a, n))
            .collect();
        v.sort_by_key(|p| p.1);
        assert_eq!(v, [(1, 0, 10), (2, 10, 5), (3, 15, 20), (1, 35, 15)]);
        // A hole past every write stays uncovered (zeros).
        assert!(visible(&index, 100, 120).is_empty());
    }

    #[test]
    fn names_carry_the_entry() {
        assert_eq!(
            parse("f/.labios/log/00000000000000000007-4096-10-ab12cd34"),
            Some((7, 4096, 10))
        );
        assert_eq!(parse("f/.labios/log/junk"), None);
    }

    #[test]
    fn names_of_extents_past_the_largest_offset_are_not_entries() {
        // Found by labios-fuzz (target bridge): reads computed the end of
        // this extent, which overflowed.
        assert_eq!(
            parse("00000000000000000001-18446744073709551615-1048576-0f0f0f0f"),
            None
        );
        assert_eq!(
            parse("1-18446744073709551614-1-w"),
            Some((1, u64::MAX - 1, 1))
        );
    }
}
