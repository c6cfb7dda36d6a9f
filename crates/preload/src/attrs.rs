//! Attributes of LABIOS entries this process looked up, kept for a short
//! lease when the user asks for one (`client.attr_cache_ms`, default 0:
//! off, every stat asks the inventory), so that
//! the `stat` calls programs make by the thousand (`ls -l`, `find`, `make`,
//! a stat after each create) do not each cost a round trip.
//!
//! What this process changes is dropped at once (its writes, truncates,
//! creates, renames, removals): it always sees its own changes. Another
//! process's or client's change shows after at most the lease, as with
//! NFS's attribute cache and the FUSE mount's `--cache-timeout`. Reads
//! never use it: the bytes and the end of file come from the inventory.

use labios_store::FileMeta;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Entries kept at most; past it the cache starts afresh.
const MAX_ENTRIES: usize = 65_536;
static CACHE: Mutex<Option<HashMap<String, (FileMeta, Instant)>>> = parking_lot::const_mutex(None);

/// Paths this process found to be directories, for the parent check of
/// every create: a directory stays one until it is removed or moved,
/// which this process sees ([`changed_tree`]) or, done elsewhere, within
/// the lease.
static DIRS: Mutex<Option<HashMap<String, Instant>>> = parking_lot::const_mutex(None);

/// The lease, known once the session is connected (the first entry put
/// comes from it); nothing is answered from the cache before.
static LEASE: OnceLock<Duration> = OnceLock::new();

fn lease() -> Option<Duration> {
    LEASE.get().copied().filter(|l| !l.is_zero())
}

/// Sets the lease from the session's configuration.
pub fn configure(lease_ms: u64) {
    let _ = LEASE.set(Duration::from_millis(lease_ms));
}

/// The entry at namespace path `ns`, if looked up within the lease.
pub fn get(ns: &str) -> Option<FileMeta> {
    let mut guard = CACHE.lock();
    let map = guard.as_mut()?;
    let lease = lease()?;
    match map.get(ns) {
        Some((m, at)) if at.elapsed() < lease => Some(m.clone()),
        Some(_) => {
            map.remove(ns);
            None
        }
        None => None,
    }
}

/// Remembers entries just looked up (by their namespace path).
pub fn put<'a>(metas: impl IntoIterator<Item = &'a FileMeta>) {
    if lease().is_none() {
        return;
    }
    let now = Instant::now();
    let mut guard = CACHE.lock();
    let map = guard.get_or_insert_with(HashMap::new);
    for m in metas {
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(m.path.clone(), (m.clone(), now));
    }
}

/// Whether `ns` was seen to be a directory within the lease.
pub fn known_dir(ns: &str) -> bool {
    let Some(lease) = lease() else { return false };
    DIRS.lock()
        .as_ref()
        .and_then(|d| d.get(ns))
        .is_some_and(|at| at.elapsed() < lease)
}

/// `ns` is a directory.
pub fn dir_seen(ns: &str) {
    if lease().is_none() {
        return;
    }
    let mut guard = DIRS.lock();
    let dirs = guard.get_or_insert_with(HashMap::new);
    if dirs.len() >= MAX_ENTRIES {
        dirs.clear();
    }
    dirs.insert(ns.to_string(), Instant::now());
}

fn parent(ns: &str) -> &str {
    match ns.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &ns[..i],
    }
}

/// This process changed the entry at `ns` (and so its directory's times).
pub fn changed(ns: &str) {
    if let Some(map) = CACHE.lock().as_mut() {
        map.remove(ns);
        map.remove(parent(ns));
    }
}

/// This process moved or removed `ns` and whatever is under it.
pub fn changed_tree(ns: &str) {
    let inside = format!("{}/", ns.trim_end_matches('/'));
    if let Some(map) = CACHE.lock().as_mut() {
        map.retain(|p, _| p != ns && !p.starts_with(&inside));
        map.remove(parent(ns));
    }
    if let Some(dirs) = DIRS.lock().as_mut() {
        dirs.retain(|p, _| p != ns && !p.starts_with(&inside));
    }
}
