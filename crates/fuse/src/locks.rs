//! `fcntl` locks on the mount (the kernel sends them with
//! `FUSE_POSIX_LOCKS`): held by the deployment's lock service, so they hold
//! against every process of every host, not only this kernel's.
//!
//! The kernel keeps no record of locks a FUSE file system holds, so it
//! never releases them itself: as libfuse asks of a file system, a `flush`
//! (every `close`) releases its lock owner's locks on the file, and the
//! `release` of an open file releases the open-file-description locks
//! taken through it. `flock` stays the kernel's (local to this mount):
//! fuser does not say which requests are `flock`s.

use labios_label::FileId;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// Lock owners that took locks, per file and per open handle, so that a
/// close that releases nothing costs no round trip.
#[derive(Default)]
pub struct Owners {
    by_file: Mutex<HashMap<FileId, HashSet<u64>>>,
    by_handle: Mutex<HashMap<u64, (FileId, HashSet<u64>)>>,
}

impl Owners {
    /// `owner` took a lock on `file` through handle `fh`.
    pub fn took(&self, file: FileId, fh: u64, owner: u64) {
        self.by_file.lock().entry(file).or_default().insert(owner);
        self.by_handle
            .lock()
            .entry(fh)
            .or_insert_with(|| (file, HashSet::new()))
            .1
            .insert(owner);
    }

    /// A close by `owner`: true if it holds locks on `file` to release.
    pub fn closed(&self, file: FileId, fh: u64, owner: u64) -> bool {
        if let Some((_, owners)) = self.by_handle.lock().get_mut(&fh) {
            owners.remove(&owner);
        }
        let mut by_file = self.by_file.lock();
        let Some(owners) = by_file.get_mut(&file) else {
            return false;
        };
        let held = owners.remove(&owner);
        if owners.is_empty() {
            by_file.remove(&file);
        }
        held
    }

    /// The last close of handle `fh`: the owners whose locks go with it.
    pub fn released(&self, fh: u64) -> Option<(FileId, Vec<u64>)> {
        let (file, owners) = self.by_handle.lock().remove(&fh)?;
        let mut by_file = self.by_file.lock();
        if let Some(all) = by_file.get_mut(&file) {
            for o in &owners {
                all.remove(o);
            }
            if all.is_empty() {
                by_file.remove(&file);
            }
        }
        Some((file, owners.into_iter().collect()))
    }
}
