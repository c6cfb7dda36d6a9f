//! The container mappings of IRIS 3.4.1 (N-to-1, N-to-M, hashed N-to-M):
//! objects are appended to a few large files, so a file system holding
//! millions of objects sees a few files and sequential writes.
//!
//! On disk, in the store's directory:
//! - `containers/<id>.dat`: object bytes, appended;
//! - `index.log`: one line per change, replayed at open:
//!   `C <slot> <id>` (container `id` now takes the appends of `slot`),
//!   `P <id> <offset> <len> <key>` (a put), `D <key>` (a delete); keys
//!   escape `\` and newline with `\`.
//!
//! A put appends its bytes, then (durable first, with `sync`) its index
//! line: a crash leaves either the old object or the new one, plus at most
//! some unreferenced bytes. Updates and deletes never touch old bytes (an
//! in-place update could tear on a crash); the compactor (IRIS's
//! defragmenter) copies a container's live objects to a new container,
//! rewrites the index as a snapshot and deletes the old container.
//!
//! Where a put goes: N-to-1 has one slot and one container; N-to-M has one
//! slot whose container is replaced by a new one when the next object
//! would take it past `container_size`; hashed N-to-M has `containers`
//! slots and a key goes to slot `fnv1a(key) % containers`. Gets go by the
//! index alone, so reopening with other options loses nothing.

use crate::object_mapping::{blocking, check_key, clamp, ObjectInfo, ObjectMapper, ObjectMapping};
use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Tunables of the container mappings.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerOptions {
    /// N-to-M: the size past which appends go to a new container (IRIS's
    /// default: 128 MiB). An object larger than this gets a container of
    /// its own.
    pub container_size: u64,
    /// Hashed N-to-M: the number of containers.
    pub containers: u32,
    /// Make every put durable (fsync of data and index) before it returns.
    pub sync: bool,
    /// Compact a container once this share of its bytes is dead.
    pub compact_ratio: f64,
    /// How often the background compactor looks ([`object_mapper`]).
    ///
    /// [`object_mapper`]: crate::object_mapping::object_mapper
    pub compact_every: Option<Duration>,
}

impl Default for ContainerOptions {
    fn default() -> Self {
        ContainerOptions {
            container_size: 128 << 20,
            containers: 16,
            sync: true,
            compact_ratio: 0.5,
            compact_every: Some(Duration::from_secs(60)),
        }
    }
}

/// 64-bit FNV-1a: stable across builds and platforms, unlike std's
/// hasher, which matters for anything that names where data lives.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    id: u64,
    offset: u64,
    len: u64,
}

#[derive(Debug)]
struct Container {
    file: Arc<File>,
    /// Bytes appended or reserved.
    end: u64,
    /// Bytes of objects the index points to.
    live: u64,
    /// Puts that reserved space and have not committed: the compactor
    /// leaves the container alone meanwhile.
    pending: u32,
}

#[derive(Debug)]
struct State {
    index: BTreeMap<String, Loc>,
    containers: HashMap<u64, Container>,
    active: Vec<Option<u64>>,
    next_id: u64,
    log: File,
    log_lines: u64,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compaction {
    pub containers: usize,
    /// Container bytes freed.
    pub reclaimed: u64,
}

/// An object store in container files.
#[derive(Debug)]
pub struct Containers {
    dir: PathBuf,
    /// None: unbounded containers.
    max: Option<u64>,
    options: ContainerOptions,
    state: parking_lot::Mutex<State>,
}

fn escape(key: &str) -> String {
    key.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => {}
            },
            (c, false) => out.push(c),
        }
    }
    out
}

fn storage(what: &str, e: std::io::Error) -> Error {
    Error::Storage(format!("{what}: {e}"))
}

impl Containers {
    /// Opens (or creates) the store in `dir`, replaying its index.
    pub fn open(
        dir: &Path,
        mapping: ObjectMapping,
        options: &ContainerOptions,
    ) -> Result<Arc<Containers>> {
        let (slots, max) = match mapping {
            ObjectMapping::OneToOne => {
                return Err(Error::InvalidArgument("1-to-1 keeps no containers".into()))
            }
            ObjectMapping::NToOne => (1, None),
            ObjectMapping::NToM => (1, Some(options.container_size)),
            ObjectMapping::HashedNToM => (options.containers as usize, None),
        };
        if slots == 0 || max == Some(0) {
            return Err(Error::InvalidArgument(
                "container mappings need at least one container of at least one byte".into(),
            ));
        }
        if !(0.0..=1.0).contains(&options.compact_ratio) {
            return Err(Error::InvalidArgument(format!(
                "compact_ratio {}: use 0 to 1",
                options.compact_ratio
            )));
        }
        let cdir = dir.join("containers");
        fs::create_dir_all(&cdir).map_err(|e| storage(&cdir.display().to_string(), e))?;
        let log_path = dir.join("index.log");
        let (index, active_ids, log_lines) = replay(&log_path)?;
        let mut active = vec![None; slots];
        for (slot, id) in active_ids {
            // A slot beyond a smaller count of containers stops taking appends.
            if let Some(a) = active.get_mut(slot) {
                *a = Some(id);
            }
        }
        let mut containers = HashMap::new();
        let mut next_id = 0;
        let referenced: Vec<u64> = index
            .values()
            .map(|l| l.id)
            .chain(active.iter().flatten().copied())
            .collect();
        for id in referenced {
            next_id = next_id.max(id + 1);
            if containers.contains_key(&id) {
                continue;
            }
            let path = cdir.join(format!("{id}.dat"));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(active.contains(&Some(id)))
                .truncate(false)
                .open(&path)
                .map_err(|e| {
                    Error::Malformed(format!("container {} of the index: {e}", path.display()))
                })?;
            let end = file.metadata()?.len();
            containers.insert(
                id,
                Container {
                    file: Arc::new(file),
                    end,
                    live: 0,
                    pending: 0,
                },
            );
        }
        for loc in index.values() {
            let c = containers.get_mut(&loc.id).expect("opened above");
            if loc.offset + loc.len > c.end {
                return Err(Error::Malformed(format!(
                    "index of {} points past the end of container {}",
                    dir.display(),
                    loc.id
                )));
            }
            c.live += loc.len;
        }
        // Containers no index line names: an interrupted compaction's.
        for entry in fs::read_dir(&cdir)? {
            let entry = entry?;
            let name = entry.file_name();
            let id = name
                .to_str()
                .and_then(|n| n.strip_suffix(".dat"))
                .and_then(|n| n.parse::<u64>().ok());
            if id.is_none_or(|id| !containers.contains_key(&id)) {
                fs::remove_file(entry.path())?;
            }
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        Ok(Arc::new(Containers {
            dir: dir.to_path_buf(),
            max,
            options: options.clone(),
            state: parking_lot::Mutex::new(State {
                index,
                containers,
                active,
                next_id,
                log,
                log_lines,
            }),
        }))
    }

    fn container_path(&self, id: u64) -> PathBuf {
        self.dir.join("containers").join(format!("{id}.dat"))
    }

    fn slot(&self, key: &str, slots: usize) -> usize {
        (fnv1a(key.as_bytes()) % slots as u64) as usize
    }

    /// Appends index lines, durable when the store syncs.
    fn log(&self, state: &mut State, lines: &str) -> Result<()> {
        state
            .log
            .write_all(lines.as_bytes())
            .map_err(|e| storage("index.log", e))?;
        if self.options.sync {
            state.log.sync_data().map_err(|e| storage("index.log", e))?;
        }
        state.log_lines += lines.matches('\n').count() as u64;
        Ok(())
    }

    /// A new, empty container.
    fn create(&self, state: &mut State) -> Result<u64> {
        let id = state.next_id;
        state.next_id += 1;
        let path = self.container_path(id);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| storage(&path.display().to_string(), e))?;
        state.containers.insert(
            id,
            Container {
                file: Arc::new(file),
                end: 0,
                live: 0,
                pending: 0,
            },
        );
        Ok(id)
    }

    fn put_blocking(&self, key: &str, data: &[u8]) -> Result<()> {
        check_key(key)?;
        let len = data.len() as u64;
        let (file, loc) = {
            let mut st = self.state.lock();
            let slot = self.slot(key, st.active.len());
            let full = |c: &Container| self.max.is_some_and(|m| c.end > 0 && c.end + len > m);
            let id = match st.active[slot] {
                Some(id) if !full(&st.containers[&id]) => id,
                _ => {
                    let id = self.create(&mut st)?;
                    self.log(&mut st, &format!("C {slot} {id}\n"))?;
                    st.active[slot] = Some(id);
                    id
                }
            };
            let c = st
                .containers
                .get_mut(&id)
                .expect("active containers are open");
            c.pending += 1;
            let loc = Loc {
                id,
                offset: c.end,
                len,
            };
            c.end += len;
            (c.file.clone(), loc)
        };
        let written = file.write_all_at(data, loc.offset).and_then(|_| {
            if self.options.sync {
                file.sync_data()
            } else {
                Ok(())
            }
        });
        let mut st = self.state.lock();
        st.containers
            .get_mut(&loc.id)
            .expect("pending containers stay")
            .pending -= 1;
        written.map_err(|e| storage(key, e))?;
        self.log(
            &mut st,
            &format!("P {} {} {} {}\n", loc.id, loc.offset, len, escape(key)),
        )?;
        if let Some(old) = st.index.insert(key.to_string(), loc) {
            st.containers
                .get_mut(&old.id)
                .expect("indexed containers are open")
                .live -= old.len;
        }
        st.containers.get_mut(&loc.id).expect("just written").live += len;
        Ok(())
    }

    fn get_blocking(&self, key: &str, range: Option<Range<u64>>) -> Result<Bytes> {
        let (file, loc) = {
            let st = self.state.lock();
            let loc = *st
                .index
                .get(key)
                .ok_or_else(|| Error::NotFound(key.to_string()))?;
            (st.containers[&loc.id].file.clone(), loc)
        };
        // The file handle stays valid even if a compaction removes it now.
        let r = clamp(range, loc.len);
        let mut buf = vec![0; (r.end - r.start) as usize];
        file.read_exact_at(&mut buf, loc.offset + r.start)
            .map_err(|e| storage(key, e))?;
        Ok(buf.into())
    }

    fn delete_blocking(&self, key: &str) -> Result<()> {
        let mut st = self.state.lock();
        if !st.index.contains_key(key) {
            return Err(Error::NotFound(key.to_string()));
        }
        self.log(&mut st, &format!("D {}\n", escape(key)))?;
        let old = st.index.remove(key).expect("checked above");
        st.containers
            .get_mut(&old.id)
            .expect("indexed containers are open")
            .live -= old.len;
        Ok(())
    }

    /// Bytes the containers take on disk.
    pub fn disk_usage(&self) -> u64 {
        self.state.lock().containers.values().map(|c| c.end).sum()
    }

    /// Compacts every container whose dead share is at least `ratio`
    /// (0: any dead byte), and rewrites an index log grown long with
    /// replaced lines. Puts and gets go on meanwhile; a container with a
    /// put in flight is left for the next round.
    pub fn compact(&self, ratio: f64) -> Result<Compaction> {
        let candidates: Vec<u64> = {
            let st = self.state.lock();
            st.containers
                .iter()
                .filter(|(_, c)| {
                    c.pending == 0
                        && c.end > c.live
                        && (c.end - c.live) as f64 >= ratio * c.end as f64
                })
                .map(|(id, _)| *id)
                .collect()
        };
        let mut done = Compaction::default();
        for id in candidates {
            if let Some(freed) = self.compact_one(id)? {
                done.containers += 1;
                done.reclaimed += freed;
            }
        }
        let mut st = self.state.lock();
        if st.log_lines > 2 * st.index.len() as u64 + 1024 {
            self.snapshot(&mut st)?;
        }
        Ok(done)
    }

    /// Copies container `x`'s live objects to a new container; None when
    /// a put got in the way.
    fn compact_one(&self, x: u64) -> Result<Option<u64>> {
        let (live, old_file, old_end) = {
            let st = self.state.lock();
            let Some(c) = st.containers.get(&x) else {
                return Ok(None);
            };
            let mut live: Vec<(String, Loc)> = st
                .index
                .iter()
                .filter(|(_, l)| l.id == x)
                .map(|(k, l)| (k.clone(), *l))
                .collect();
            live.sort_by_key(|(_, l)| l.offset);
            (live, c.file.clone(), c.end)
        };
        let (y, new_file) = {
            let mut st = self.state.lock();
            let y = self.create(&mut st)?;
            let f = st.containers[&y].file.clone();
            st.containers.get_mut(&y).expect("just created").pending += 1;
            (y, f)
        };
        // Copy without the lock: puts and gets go on.
        let mut moved = Vec::with_capacity(live.len());
        let mut at = 0;
        let mut buf = Vec::new();
        for (key, l) in live {
            buf.resize(l.len as usize, 0);
            old_file
                .read_exact_at(&mut buf, l.offset)
                .map_err(|e| storage(&key, e))?;
            new_file
                .write_all_at(&buf, at)
                .map_err(|e| storage(&key, e))?;
            moved.push((key, l, at));
            at += l.len;
        }
        let mut st = self.state.lock();
        if st.containers.get(&x).is_none_or(|c| c.pending > 0) {
            st.containers.remove(&y);
            drop(st);
            let _ = fs::remove_file(self.container_path(y));
            return Ok(None);
        }
        let mut live_bytes = 0;
        for (key, l, new_offset) in moved {
            if let Some(cur) = st.index.get_mut(&key).filter(|cur| **cur == l) {
                *cur = Loc {
                    id: y,
                    offset: new_offset,
                    len: l.len,
                };
                live_bytes += l.len;
            }
        }
        // Objects put into `x` while we copied: few, copied under the lock.
        let late: Vec<(String, Loc)> = st
            .index
            .iter()
            .filter(|(_, l)| l.id == x)
            .map(|(k, l)| (k.clone(), *l))
            .collect();
        for (key, l) in late {
            buf.resize(l.len as usize, 0);
            old_file
                .read_exact_at(&mut buf, l.offset)
                .map_err(|e| storage(&key, e))?;
            new_file
                .write_all_at(&buf, at)
                .map_err(|e| storage(&key, e))?;
            st.index.insert(
                key,
                Loc {
                    id: y,
                    offset: at,
                    len: l.len,
                },
            );
            live_bytes += l.len;
            at += l.len;
        }
        new_file
            .sync_data()
            .map_err(|e| storage("compacted container", e))?;
        let c = st.containers.get_mut(&y).expect("created above");
        (c.end, c.live, c.pending) = (at, live_bytes, 0);
        for a in st.active.iter_mut().filter(|a| **a == Some(x)) {
            *a = Some(y);
        }
        let old_end = st.containers.remove(&x).map_or(old_end, |c| c.end);
        self.snapshot(&mut st)?;
        drop(st);
        // The index no longer names `x`: a crash before this line only
        // leaves an orphan, which open() deletes.
        fs::remove_file(self.container_path(x)).map_err(|e| storage("old container", e))?;
        Ok(Some(old_end.saturating_sub(at)))
    }

    /// Replaces the index log with the current index, atomically.
    fn snapshot(&self, st: &mut State) -> Result<()> {
        let mut text = String::new();
        for (slot, id) in st.active.iter().enumerate() {
            if let Some(id) = id {
                text.push_str(&format!("C {slot} {id}\n"));
            }
        }
        for (key, l) in &st.index {
            text.push_str(&format!(
                "P {} {} {} {}\n",
                l.id,
                l.offset,
                l.len,
                escape(key)
            ));
        }
        let tmp = self.dir.join("index.tmp");
        let path = self.dir.join("index.log");
        let mut f = File::create(&tmp).map_err(|e| storage("index.tmp", e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| storage("index.tmp", e))?;
        fs::rename(&tmp, &path).map_err(|e| storage("index.log", e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| storage("store directory", e))?;
        st.log = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| storage("index.log", e))?;
        st.log_lines = text.matches('\n').count() as u64;
        Ok(())
    }

    /// Compacts every `every` in the background (IRIS's defragmenter),
    /// until the store is dropped.
    pub fn spawn_compactor(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Containers> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(store) = weak.upgrade() else { return };
                let ratio = store.options.compact_ratio;
                match blocking(move || store.compact(ratio)).await {
                    Ok(c) if c.containers > 0 => tracing::debug!("compacted {c:?}"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!("container compaction: {e}"),
                }
            }
        })
    }
}

type Replayed = (BTreeMap<String, Loc>, Vec<(usize, u64)>, u64);

/// A container id of an index line: below `u64::MAX`, since opening the
/// store numbers the next container after the largest id.
fn container_id(text: &str) -> Option<u64> {
    text.parse().ok().filter(|&id| id < u64::MAX)
}

/// Reads an index log; a last line without its newline is a put a crash
/// interrupted, dropped (and cut from the file).
fn replay(path: &Path) -> Result<Replayed> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_string(&mut text)
                .map_err(|e| Error::Malformed(format!("{}: {e}", path.display())))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    if complete < text.len() {
        OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(complete as u64)?;
    }
    let mut index = BTreeMap::new();
    let mut active = Vec::new();
    let mut lines = 0;
    for (n, line) in text[..complete].lines().enumerate() {
        lines += 1;
        let bad = || Error::Malformed(format!("{} line {}: {line:?}", path.display(), n + 1));
        let mut f = line.splitn(5, ' ');
        match f.next() {
            Some("C") => {
                let slot = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                let id = f.next().and_then(container_id).ok_or_else(bad)?;
                active.retain(|(s, _)| *s != slot);
                active.push((slot, id));
            }
            Some("P") => {
                let id = f.next().and_then(container_id).ok_or_else(bad)?;
                let mut num = || f.next().and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
                let loc = Loc {
                    id,
                    offset: num()?,
                    len: num()?,
                };
                // Opening the store checks that the object ends inside
                // its container.
                if loc.offset.checked_add(loc.len).is_none() {
                    return Err(bad());
                }
                let key = f.next().ok_or_else(bad)?;
                index.insert(unescape(key), loc);
            }
            Some("D") => {
                let key = line.get(2..).ok_or_else(bad)?;
                index.remove(&unescape(key));
            }
            _ => return Err(bad()),
        }
    }
    Ok((index, active, lines))
}

#[async_trait]
impl ObjectMapper for Arc<Containers> {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let (s, key) = (self.clone(), key.to_string());
        blocking(move || s.put_blocking(&key, &data)).await
    }

    async fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Bytes> {
        let (s, key) = (self.clone(), key.to_string());
        blocking(move || s.get_blocking(&key, range)).await
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let st = self.state.lock();
        Ok(st.index.get(key).map(|l| ObjectInfo {
            key: key.to_string(),
            size: l.len,
            mtime: None,
        }))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let (s, key) = (self.clone(), key.to_string());
        blocking(move || s.delete_blocking(&key)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let st = self.state.lock();
        Ok(st
            .index
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, l)| ObjectInfo {
                key: k.clone(),
                size: l.len,
                mtime: None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_escaping() {
        for k in ["a b", "back\\slash", "new\nline", "\\n", "tail\\"] {
            assert_eq!(unescape(&escape(k)), k);
        }
    }

    #[test]
    fn index_lines_out_of_range_are_malformed() {
        // Found by labios-fuzz (target bridge): opening the store computed
        // the next container id and each object's end from these lines,
        // which overflowed.
        for log in [
            "C 2147483648 0\nP 0 0 10 a\nP 18446744073709551615 10 20 b\n",
            "C 0 18446744073709551615\n",
            "C 3 1\nP 1 18446744073709551615 4 tail\n",
            "C 3 1\nP 1 60 18446744073709551615 tail\n",
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("index.log"), log).unwrap();
            let e = Containers::open(
                dir.path(),
                ObjectMapping::HashedNToM,
                &ContainerOptions::default(),
            )
            .unwrap_err();
            assert!(
                matches!(&e, Error::Malformed(m) if m.contains("index.log line")),
                "{log:?}: {e}"
            );
        }
    }

    #[test]
    fn the_hash_is_fixed() {
        // Published FNV-1a test vectors: where data lives must not change.
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
