//! The `file` backend, a worker's storage as the article describes it
//! (3.3.3a): the bytes of LABIOS file F live in one sparse local file
//! `DIR/files/<id as 16 hex digits>`, at the same offsets as in F.
//!
//! Why this layout: a label names a byte range of F, so keeping F's offsets
//! makes every label one positional read or write with no local index to keep
//! consistent, and a worker restart needs nothing but the directory. Local
//! names are derived only from numeric file ids, never from user paths, so no
//! label can make a worker write outside its directory.
//!
//! All methods block; callers run them off the async executor.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Open handles kept per worker: enough for the files a burst works on,
/// small enough never to approach the process's descriptor limit.
const OPEN_FILES: usize = 64;
/// Stripes of the per-file write lock.
const WRITE_STRIPES: usize = 64;

/// The local files of one worker and the bytes they occupy.
#[derive(Debug)]
pub struct FileBackend {
    files: PathBuf,
    cache: Mutex<HandleCache>,
    /// Bytes allocated on the device (st_blocks), not logical sizes: a
    /// worker holding the last stripe of a huge file stores only that stripe.
    used: AtomicU64,
    /// Writes and removals of one file take turns (a lane runs writes of
    /// disjoint ranges side by side): each measures the file's allocation
    /// before and after to keep `used` exact, which two at once would count
    /// twice. Striped by file id, so the locks never need evicting.
    stripes: Vec<Mutex<()>>,
}

#[derive(Debug, Default)]
struct HandleCache {
    open: HashMap<FileId, (Arc<File>, u64)>,
    clock: u64,
}

impl FileBackend {
    /// Opens (creating if needed) the storage under `dir` and measures what
    /// an earlier run left there.
    pub fn open(dir: &Path) -> Result<FileBackend> {
        let files = dir.join("files");
        std::fs::create_dir_all(&files).map_err(|e| io_error(&files, e))?;
        let mut used = 0;
        for entry in std::fs::read_dir(&files).map_err(|e| io_error(&files, e))? {
            let entry = entry.map_err(|e| io_error(&files, e))?;
            let meta = entry.metadata().map_err(|e| io_error(&entry.path(), e))?;
            if meta.is_file() {
                used += allocated(&meta);
            }
        }
        Ok(FileBackend {
            files,
            cache: Mutex::new(HandleCache::default()),
            used: AtomicU64::new(used),
            stripes: (0..WRITE_STRIPES).map(|_| Mutex::new(())).collect(),
        })
    }

    /// Local path of a LABIOS file's bytes.
    pub fn path(&self, file: FileId) -> PathBuf {
        self.files.join(format!("{file:016x}"))
    }

    fn stripe(&self, file: FileId) -> &Mutex<()> {
        &self.stripes[(file % WRITE_STRIPES as u64) as usize]
    }

    fn account(&self, before: u64, after: u64) {
        if after >= before {
            self.used.fetch_add(after - before, Ordering::AcqRel);
        } else {
            let less = before - after;
            let _ = self
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |u| {
                    Some(u.saturating_sub(less))
                });
        }
    }

    /// A cached handle, opened read-write; `create` makes a missing file.
    fn handle(&self, file: FileId, create: bool) -> Result<Arc<File>> {
        let mut cache = self.cache.lock();
        cache.clock += 1;
        let now = cache.clock;
        if let Some((handle, used)) = cache.open.get_mut(&file) {
            *used = now;
            return Ok(handle.clone());
        }
        let path = self.path(file);
        let handle = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error(&path, e))?;
        let handle = Arc::new(handle);
        if cache.open.len() >= OPEN_FILES {
            if let Some(oldest) = cache
                .open
                .iter()
                .min_by_key(|(_, (_, u))| *u)
                .map(|(f, _)| *f)
            {
                cache.open.remove(&oldest);
            }
        }
        cache.open.insert(file, (handle.clone(), now));
        Ok(handle)
    }
}

impl Backend for FileBackend {
    fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Writes each `(offset, bytes)` piece at its offset of the local file,
    /// creating it if needed. Positional writes never truncate and never
    /// touch bytes outside the pieces. With `sync`, the data is on the device
    /// (fdatasync) before this returns.
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        let path = self.path(file);
        let handle = self.handle(file, true)?;
        let turn = self.stripe(file).lock();
        let before = handle.metadata().map_err(|e| io_error(&path, e))?;
        let written = pieces.iter().try_for_each(|(offset, data)| {
            offset
                .checked_add(data.len() as u64)
                .ok_or_else(|| Error::InvalidArgument(format!("offset {offset} overflows")))?;
            handle
                .write_all_at(data, *offset)
                .map_err(|e| io_error(&path, e))
        });
        // Account for whatever reached the device, even after a failure.
        let after = handle.metadata().map_err(|e| io_error(&path, e))?;
        self.account(allocated(&before), allocated(&after));
        drop(turn);
        written?;
        if sync {
            handle.sync_data().map_err(|e| io_error(&path, e))?;
        }
        Ok(())
    }

    /// Fills `buf` from `offset` of the local file. A file that is missing
    /// or shorter than the range is an error, never a silent short read: the
    /// inventory said these bytes are here.
    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let path = self.path(file);
        let handle = self.handle(file, false).map_err(|e| match e {
            Error::NotFound(_) => Error::Storage(format!(
                "{} is missing but holds {} bytes at offset {offset}",
                path.display(),
                buf.len()
            )),
            e => e,
        })?;
        handle.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == ErrorKind::UnexpectedEof {
                let size = handle.metadata().map(|m| m.len()).unwrap_or(0);
                Error::Storage(format!(
                    "{} is {size} bytes long, shorter than the {} bytes at offset {offset} it should hold",
                    path.display(),
                    buf.len()
                ))
            } else {
                io_error(&path, e)
            }
        })
    }

    /// Removes the local file; a file that was never written is fine.
    fn remove(&self, file: FileId) -> Result<()> {
        let path = self.path(file);
        let _turn = self.stripe(file).lock();
        self.cache.lock().open.remove(&file);
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&path, e)),
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {
                self.account(allocated(&meta), 0);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(&path, e)),
        }
    }

    /// Frees every byte of `file` in `start..end` that lies outside `held`
    /// (the ranges the inventory gives this worker, sorted and disjoint):
    /// bytes an overwrite on another worker or a truncation left behind.
    /// With `end == u64::MAX` the local file also ends with its last held
    /// byte, and goes if it holds none. Holes read as zeros, so nothing the
    /// inventory points at changes.
    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        if crate::keeps_nothing(end, held) {
            return self.remove(file);
        }
        let path = self.path(file);
        let handle = match self.handle(file, false) {
            Err(Error::NotFound(_)) => return Ok(()),
            r => r?,
        };
        let _turn = self.stripe(file).lock();
        let before = handle.metadata().map_err(|e| io_error(&path, e))?;
        // Nothing to free past the end (a range may start there).
        let stop = end.min(before.len()).max(start);
        let mut at = start;
        let freed = held
            .iter()
            .map(|&(s, e)| (s.clamp(start, stop), e.clamp(start, stop)))
            .chain(std::iter::once((stop, stop)))
            .try_for_each(|(s, e)| {
                let gap = if s > at {
                    punch(&handle, at, s - at)
                } else {
                    Ok(())
                };
                at = at.max(e);
                gap
            });
        let cut = match held.last() {
            Some(&(_, last)) if end == u64::MAX && last < before.len() => handle.set_len(last),
            _ => Ok(()),
        };
        let after = handle.metadata().map_err(|e| io_error(&path, e))?;
        self.account(allocated(&before), allocated(&after));
        freed.map_err(|e| io_error(&path, e))?;
        cut.map_err(|e| io_error(&path, e))
    }

    /// The files this worker holds bytes of.
    fn files(&self) -> Result<Vec<FileId>> {
        let mut ids = Vec::new();
        for entry in std::fs::read_dir(&self.files).map_err(|e| io_error(&self.files, e))? {
            let entry = entry.map_err(|e| io_error(&self.files, e))?;
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .filter(|n| n.len() == 16)
                .and_then(|n| u64::from_str_radix(n, 16).ok())
            {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// Makes everything written to the local file durable; a file that was
    /// never written is fine.
    fn flush(&self, file: FileId) -> Result<()> {
        match self.handle(file, false) {
            Ok(handle) => handle
                .sync_data()
                .map_err(|e| io_error(&self.path(file), e)),
            Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether the worker holds any bytes of the file.
    fn holds(&self, file: FileId) -> bool {
        self.path(file).exists()
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        let path = self.path(file);
        match std::fs::metadata(&path) {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(&path, e)),
        }
    }
}

/// Deallocates `len` bytes at `offset` (they read as zeros after). A file
/// system that cannot punch holes keeps the bytes: nothing is lost, only
/// space stays taken.
fn punch(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: fallocate reads no memory of ours; the descriptor is open
    // for as long as `file` lives.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
    match std::io::Error::last_os_error() {
        _ if rc == 0 => Ok(()),
        e if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
        e => Err(e),
    }
}

/// Bytes the file occupies on the device.
fn allocated(meta: &std::fs::Metadata) -> u64 {
    meta.blocks() * 512
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    let text = format!("{}: {e}", path.display());
    match e.kind() {
        ErrorKind::NotFound => Error::NotFound(text),
        _ => Error::Storage(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_name_is_the_hex_file_id_inside_the_dir() {
        let dir = tempfile::tempdir().unwrap();
        let s = FileBackend::open(dir.path()).unwrap();
        assert_eq!(s.path(0xab), dir.path().join("files/00000000000000ab"));
        assert_eq!(s.path(u64::MAX), dir.path().join("files/ffffffffffffffff"));
        s.write(1, &[(0, &[1; 10_000]), (0, &[2; 100])], false)
            .unwrap();
        assert_eq!(std::fs::metadata(s.path(1)).unwrap().len(), 10_000);
        // The whole file kept up to its last held byte: cut there.
        s.keep_only(1, 0, u64::MAX, &[(0, 4096)]).unwrap();
        assert_eq!(std::fs::metadata(s.path(1)).unwrap().len(), 4096);
    }
}
