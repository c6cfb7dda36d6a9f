//! fallocate(2) on a LABIOS file. LABIOS keeps no blocks ahead of their
//! bytes, so reserving space is setting the size (or nothing, with
//! `FALLOC_FL_KEEP_SIZE`); punching a hole or zeroing a range is writing
//! zeros with labels that carry no data: each worker makes the zeros it
//! writes, the inventory gives the range to those labels (the newest label
//! wins, as for any write), and the workers that held the older bytes free
//! them.

use super::{Client, FileRef};
use labios_label::{Error, LabelId, Result};

/// Suffix of the error of a mode LABIOS does not implement (EOPNOTSUPP).
pub const NOT_SUPPORTED: &str = "is not supported";

/// What a fallocate(2) mode asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allocation {
    /// Mode 0: the file covers the range afterwards.
    Extend,
    /// `FALLOC_FL_KEEP_SIZE`: space past the end, which LABIOS does not
    /// reserve; nothing visible changes.
    Reserve,
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: the range inside the
    /// file reads as zeros.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE`: the range reads as zeros; without
    /// `FALLOC_FL_KEEP_SIZE` the file grows to cover it.
    ZeroRange { keep_size: bool },
}

impl Allocation {
    /// Decodes a mode as Linux's `vfs_fallocate` checks it.
    fn of(mode: i32) -> Result<Allocation> {
        const KNOWN: i32 =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let unsupported = |what: &str| {
            Err(Error::InvalidArgument(format!(
                "fallocate mode {mode:#x}: {what} {NOT_SUPPORTED}"
            )))
        };
        if mode & !KNOWN != 0 {
            return unsupported("collapsing, inserting or unsharing ranges");
        }
        match (
            mode & libc::FALLOC_FL_PUNCH_HOLE != 0,
            mode & libc::FALLOC_FL_ZERO_RANGE != 0,
        ) {
            (true, true) => unsupported("punching a hole and zeroing at once"),
            (true, false) if !keep_size => unsupported("a hole that changes the size"),
            (true, false) => Ok(Allocation::PunchHole),
            (false, true) => Ok(Allocation::ZeroRange { keep_size }),
            (false, false) if keep_size => Ok(Allocation::Reserve),
            (false, false) => Ok(Allocation::Extend),
        }
    }
}

impl Client {
    /// fallocate(2) of `len` bytes at `offset` of the file at `path`, with
    /// Linux's mode bits: 0, `FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE |
    /// FALLOC_FL_KEEP_SIZE` and `FALLOC_FL_ZERO_RANGE` (with or without
    /// `FALLOC_FL_KEEP_SIZE`); other modes are refused ([`NOT_SUPPORTED`]).
    /// This client's earlier writes to the file land first.
    pub async fn fallocate<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let file = file.into();
        if len == 0 {
            return Err(Error::InvalidArgument(format!(
                "fallocate of {file}: the length must be positive"
            )));
        }
        let how = Allocation::of(mode)?;
        let end = offset
            .checked_add(len)
            .filter(|&e| i64::try_from(e).is_ok())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "fallocate of {file}: offset {offset} + {len} bytes is past the largest file"
                ))
            })?;
        if let Some(path) = file.external() {
            return Err(Error::InvalidArgument(format!(
                "fallocate of {path}: external storage {NOT_SUPPORTED}"
            )));
        }
        // Current size, and cached writes published: their labels must be
        // older than the zeros' labels, which win over them otherwise.
        let meta = self.file_to_read(file).await?;
        let zeros_end = match how {
            Allocation::Reserve => return Ok(()),
            Allocation::Extend if end > meta.size => return self.truncate(file, end).await,
            Allocation::Extend => return Ok(()),
            Allocation::PunchHole | Allocation::ZeroRange { keep_size: true } => end.min(meta.size),
            Allocation::ZeroRange { keep_size: false } => end,
        };
        if zeros_end <= offset {
            return Ok(());
        }
        let labels = self
            .inner
            .labels
            .zero_pieces(&meta.path, meta.id, offset, zeros_end - offset);
        let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
        if zeros_end > meta.size {
            self.inner.positional.lock().insert(meta.id);
        }
        self.publish_tracked(meta.id, labels).await?;
        self.wait_ids(&ids).await
    }
}

#[cfg(test)]
mod tests {
    use super::Allocation;
    use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH};

    #[test]
    fn modes_decode_as_linux_checks_them() {
        assert_eq!(Allocation::of(0).unwrap(), Allocation::Extend);
        assert_eq!(Allocation::of(KEEP).unwrap(), Allocation::Reserve);
        assert_eq!(Allocation::of(PUNCH | KEEP).unwrap(), Allocation::PunchHole);
        assert_eq!(
            Allocation::of(libc::FALLOC_FL_ZERO_RANGE).unwrap(),
            Allocation::ZeroRange { keep_size: false }
        );
        assert_eq!(
            Allocation::of(libc::FALLOC_FL_ZERO_RANGE | KEEP).unwrap(),
            Allocation::ZeroRange { keep_size: true }
        );
        for refused in [
            PUNCH,
            PUNCH | libc::FALLOC_FL_ZERO_RANGE | KEEP,
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
            0x40,
        ] {
            let err = Allocation::of(refused).unwrap_err();
            assert_eq!(
                crate::errno_of(&err),
                libc::EOPNOTSUPP,
                "{refused:#x}: {err}"
            );
        }
    }
}
