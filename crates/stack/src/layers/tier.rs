//! The `tier` layer: a burst buffer inside a worker. Writes are kept in
//! memory, bounded in bytes (`tier:256MiB`), and acknowledged from there;
//! a background thread writes them back to the stack below (the durable
//! tier: a file or key-value backend, under any other layers) every
//! [`EVERY`], or sooner once half the bound is dirty. A write that would
//! pass the bound first writes everything back itself (backpressure), and
//! one larger than the bound goes straight below, after everything else.
//!
//! Every change is also appended to a journal on the backend itself,
//! under the other layers (two files, [`JOURNAL`] and the one after it,
//! alternating: a journal goes once everything in it is written back),
//! without waiting for the device: one sequential append, whose large
//! writes (over 16 KiB) go to it from the bytes kept in memory. A
//! `kill -9` of the worker's process therefore loses nothing (the
//! operating system keeps what was written, as it keeps a
//! `file` backend's bytes), and the next start of any stack on that
//! backend replays the journal below before it takes a call. A power
//! loss loses what was not yet on the device, `sync` labels included: on
//! a tier a synchronous label waits for memory, not for the disk. `flush`
//! (a Flush label, `fsync` under `labios run`) returns once the file's
//! writes are written back and flushed below. A write-back that fails
//! keeps its bytes here and is tried again; `flush` answers its error. A
//! clean stop, and a change of the worker's stack, write everything back
//! first ([`Backend::settle`]).
//!
//! Reads see the newest bytes: the durable tier's, with the bytes being
//! written back over them, and the dirty ones over those. Reclamation and
//! removal of a file first write back (or drop) what is here of it, then
//! pass below, so that the order of a file's changes is the order they
//! reach the device; each is journaled in the same step as it takes those
//! bytes, so that the journal keeps that order too, and the journal
//! holding one stays until it is done below (a replay finishes one a
//! crash cut short, and skips the file's changes it undoes). A stack that
//! does not name `tier` has none.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// How long a write may stay only in memory while the layer is idle.
pub const EVERY: Duration = Duration::from_millis(200);
/// The bytes a bare `tier` keeps in memory.
pub const DEFAULT_BYTES: u64 = 256 << 20;
const STRIPES: usize = 64;
/// The first of the tier's two journal files on the backend (bit 60: the
/// ids above [`crate::LAST_FILE`] the other layers leave alone).
pub const JOURNAL: FileId = 1 << 60;

/// A journal record: its length and CRC-32C, then its body.
const RECORD_HEAD: usize = 8;
const WRITE: u8 = 1;
const REMOVE: u8 = 2;
const KEEP_ONLY: u8 = 3;

/// One change as the journal keeps it.
#[derive(Debug, PartialEq)]
enum Change {
    Write(u64, Vec<u8>),
    Remove,
    KeepOnly(u64, u64, Vec<(u64, u64)>),
}

/// Written bytes up to this size are copied into their record's buffer,
/// so that the append is one write call; larger ones are a piece of
/// their own after it, which spares two copies of them for one more call.
const INLINE: usize = 16 << 10;

/// Appends the record of `change` of `file`, number `seq`, to the journal
/// pieces: its head (length, CRC-32C and all of the body but a large
/// write's bytes) to `out`. Returns a large write's bytes, the piece that
/// follows `out` in the journal.
fn record<'a>(out: &mut Vec<u8>, seq: u64, file: FileId, change: &'a Change) -> Option<&'a [u8]> {
    let head = out.len();
    out.extend_from_slice(&[0; RECORD_HEAD]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&file.to_le_bytes());
    let mut data: &[u8] = &[];
    match change {
        Change::Write(offset, d) => {
            out.push(WRITE);
            out.extend_from_slice(&offset.to_le_bytes());
            if d.len() <= INLINE {
                out.extend_from_slice(d);
            } else {
                data = d;
            }
        }
        Change::Remove => out.push(REMOVE),
        Change::KeepOnly(start, end, held) => {
            out.push(KEEP_ONLY);
            for v in [*start, *end]
                .iter()
                .chain(held.iter().flat_map(|(a, b)| [a, b]))
            {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    let body = &out[head + RECORD_HEAD..];
    let len = (body.len() + data.len()) as u32;
    let crc = crc32c::crc32c_append(crc32c::crc32c(body), data);
    out[head..head + 4].copy_from_slice(&len.to_le_bytes());
    out[head + 4..head + RECORD_HEAD].copy_from_slice(&crc.to_le_bytes());
    (!data.is_empty()).then_some(data)
}

/// The records of a journal, in order, up to the first that is not whole
/// (a crash in the middle of its append: never acknowledged).
fn records(journal: &[u8]) -> Vec<(u64, FileId, Change)> {
    let mut out = Vec::new();
    let mut rest = journal;
    while rest.len() >= RECORD_HEAD {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap());
        let Some(body) = rest.get(RECORD_HEAD..RECORD_HEAD + len) else {
            break;
        };
        if len < 17 || crc32c::crc32c(body) != crc {
            break;
        }
        let word = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().unwrap());
        let (seq, file) = (word(0), word(8));
        let change = match body[16] {
            WRITE if len >= 25 => Change::Write(word(17), body[25..].to_vec()),
            REMOVE => Change::Remove,
            KEEP_ONLY if len >= 33 && (len - 33).is_multiple_of(16) => Change::KeepOnly(
                word(17),
                word(25),
                (33..len)
                    .step_by(16)
                    .map(|at| (word(at), word(at + 8)))
                    .collect(),
            ),
            _ => break,
        };
        out.push((seq, file, change));
        rest = &rest[RECORD_HEAD + len..];
    }
    out
}

impl Change {
    /// Whether the change leaves its file nothing: a removal, or a
    /// reclamation that keeps no byte (the file goes, as after a removal).
    fn removes_all(&self) -> bool {
        match self {
            Change::Remove => true,
            Change::KeepOnly(_, end, held) => crate::keeps_nothing(*end, held),
            Change::Write(..) => false,
        }
    }
}

/// Replays through `stack` the changes the journals on `raw` keep (a
/// worker's process that stopped without writing them back), in the order
/// they were made, then drops the journals. Every start of a stack on a
/// backend does this first, whether or not the stack names a tier.
pub fn replay(stack: &dyn Backend, raw: &dyn Backend) -> Result<()> {
    let mut changes = Vec::new();
    for journal in [JOURNAL, JOURNAL + 1] {
        if let Some(len) = tried("a journal's length", || raw.len(journal))? {
            let mut bytes = vec![0; len as usize];
            tried("reading a journal", || raw.read(journal, 0, &mut bytes))?;
            changes.extend(records(&bytes));
        }
    }
    changes.sort_by_key(|(seq, _, _)| *seq);
    // A removal undoes every earlier change of its file, and it is
    // journaled before it goes below, where a crash may leave it half
    // done (a codec's records without the data they describe): an earlier
    // write replayed over that would fail on the missing data, and the
    // worker's start with it. Only the file's last removal and what came
    // after it are replayed.
    let mut removed = HashMap::new();
    for (seq, file, change) in &changes {
        if change.removes_all() {
            removed.insert(*file, *seq);
        }
    }
    changes.retain(|(seq, file, _)| removed.get(file).is_none_or(|last| seq >= last));
    if !changes.is_empty() {
        tracing::warn!(
            "tier: replaying {} changes a stopped worker had not written back",
            changes.len()
        );
    }
    for (_, file, change) in changes {
        tried("replaying a change", || match &change {
            Change::Write(offset, data) => stack.write(file, &[(*offset, data)], false),
            Change::Remove => stack.remove(file),
            Change::KeepOnly(start, end, held) => stack.keep_only(file, *start, *end, held),
        })?;
    }
    for journal in [JOURNAL, JOURNAL + 1] {
        tried("removing a journal", || raw.remove(journal))?;
    }
    Ok(())
}

/// How many times a stack's start tries each device call of the replay.
/// A label's I/O is retried so that a transient device error does not fail
/// it; this does the same for a worker's start, which a model-checker run
/// with injected device faults found failing on one error in removing an
/// empty journal.
///
/// Fixed here rather than the worker's `retries` (3 retries, 4 tries by
/// default): a failed label is reported to its client, who may try again,
/// so an administrator may trade its retries for latency; a failed replay
/// fails the worker's start, which nobody retries, and costs nothing when
/// the device works. The two agree by default.
const REPLAY_TRIES: u32 = 4;

/// `call` until it succeeds, fails other than as a device, or has been
/// tried [`REPLAY_TRIES`] times. Every call of the replay may be repeated:
/// reads, and changes that leave the same state whether or not an earlier
/// try took effect (the same bytes at the same place, a removal, the same
/// ranges kept).
fn tried<T>(what: &str, mut call: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempt = 1;
    loop {
        match call() {
            Err(Error::Storage(e)) if attempt < REPLAY_TRIES => {
                tracing::warn!("tier: {what} failed (try {attempt} of {REPLAY_TRIES}): {e}");
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// A file's bytes held here: disjoint pieces by offset.
type Pieces = BTreeMap<u64, Vec<u8>>;

fn size(pieces: &Pieces) -> u64 {
    pieces.values().map(|d| d.len() as u64).sum()
}

/// Puts `data` at `offset` of `pieces`, over what it overlaps; the bytes
/// `pieces` holds after, less before.
fn put(pieces: &mut Pieces, offset: u64, data: Vec<u8>) -> i64 {
    let end = offset + data.len() as u64;
    let mut delta = data.len() as i64;
    let over: Vec<u64> = pieces
        .range(..end)
        .rev()
        .take_while(|(o, d)| *o + d.len() as u64 > offset)
        .map(|(o, _)| *o)
        .collect();
    for at in over {
        let old = pieces.remove(&at).expect("a piece just seen");
        delta -= old.len() as i64;
        let old_end = at + old.len() as u64;
        if at < offset {
            let left = old[..(offset - at) as usize].to_vec();
            delta += left.len() as i64;
            pieces.insert(at, left);
        }
        if old_end > end {
            let right = old[(end - at) as usize..].to_vec();
            delta += right.len() as i64;
            pieces.insert(end, right);
        }
    }
    pieces.insert(offset, data);
    delta
}

/// One past the last byte `pieces` holds.
fn end_of(pieces: &Pieces) -> Option<u64> {
    pieces.last_key_value().map(|(o, d)| o + d.len() as u64)
}

/// Where changes are appended: the journal in use, its length, the next
/// record's number, and the other journal while it still holds changes
/// not written back.
#[derive(Default)]
struct Journal {
    now: FileId,
    at: u64,
    seq: u64,
    sealed: Option<FileId>,
}

#[derive(Default)]
struct State {
    journal: Journal,
    /// Writes not yet written back, by file.
    dirty: HashMap<FileId, Pieces>,
    /// Writes being written back, by file: older than its dirty ones.
    flight: HashMap<FileId, Arc<Pieces>>,
    /// Files whose removal or reclamation, journaled, runs below now: the
    /// journal holding it must stay until it is done there, or a crash
    /// could leave it half done with no record to finish it.
    changing: BTreeSet<FileId>,
    /// Bytes of both.
    bytes: u64,
    stop: bool,
}

impl State {
    /// The bytes of `file` held here that overlap `[offset, end)`, oldest
    /// first, and one past the last byte held here.
    fn overlay(&self, file: FileId, offset: u64, end: u64) -> (Vec<(u64, Vec<u8>)>, Option<u64>) {
        let layers = [self.flight.get(&file).map(|p| &**p), self.dirty.get(&file)];
        let mut out = Vec::new();
        for pieces in layers.iter().flatten() {
            for (o, d) in pieces.range(..end) {
                let (from, to) = ((*o).max(offset), (o + d.len() as u64).min(end));
                if from < to {
                    out.push((from, d[(from - o) as usize..(to - o) as usize].to_vec()));
                }
            }
        }
        let held = layers.iter().flatten().filter_map(|p| end_of(p)).max();
        (out, held)
    }
}

struct Shared {
    inner: Arc<dyn Backend>,
    /// The backend under every layer, where the journal goes.
    raw: Arc<dyn Backend>,
    bound: u64,
    state: Mutex<State>,
    wake: Condvar,
    /// Write-backs, reclamations and removals of a file alone, reads
    /// together; striped by file id.
    stripes: Vec<RwLock<()>>,
}

impl Shared {
    fn stripe(&self, file: FileId) -> &RwLock<()> {
        &self.stripes[(file % STRIPES as u64) as usize]
    }

    /// Appends `changes` of `file` to the journal; the caller holds the
    /// state, so that the journal's order is the order of the changes.
    fn log(&self, st: &mut State, file: FileId, changes: &[Change]) -> Result<()> {
        // Heads and small writes, each run of them ended by a large write.
        let mut runs: Vec<(Vec<u8>, Option<&[u8]>)> = vec![(Vec::new(), None)];
        for change in changes {
            let (buf, big) = runs.last_mut().expect("never empty");
            *big = record(buf, st.journal.seq, file, change);
            st.journal.seq += 1;
            if big.is_some() {
                runs.push((Vec::new(), None));
            }
        }
        let mut pieces = Vec::with_capacity(2 * runs.len());
        let mut at = st.journal.at;
        for (buf, big) in &runs {
            for piece in std::iter::once(&buf[..]).chain(*big) {
                if !piece.is_empty() {
                    pieces.push((at, piece));
                    at += piece.len() as u64;
                }
            }
        }
        self.raw.write(st.journal.now, &pieces, false)?;
        st.journal.at = at;
        Ok(())
    }

    /// Writes back what is dirty of `file`; the caller holds its stripe.
    /// On failure the bytes stay here, under any written since.
    fn write_back(&self, file: FileId) -> Result<()> {
        self.write_back_before(file, None)
    }

    /// [`Self::write_back`], journaling `change` (a reclamation, which
    /// the caller then makes below) in the same step as it takes what is
    /// dirty: the writes journaled before the change reach the device
    /// before it, and those after it after it, so that a replay makes them
    /// in the order the device saw. Marks the file [`State::changing`]
    /// until [`Self::changed`].
    fn write_back_before(&self, file: FileId, change: Option<Change>) -> Result<()> {
        let pieces = {
            let mut st = self.state.lock();
            if let Some(change) = change {
                self.log(&mut st, file, &[change])?;
                st.changing.insert(file);
            }
            let Some(pieces) = st.dirty.remove(&file) else {
                return Ok(());
            };
            let pieces = Arc::new(pieces);
            st.flight.insert(file, pieces.clone());
            pieces
        };
        let list: Vec<(u64, &[u8])> = pieces.iter().map(|(o, d)| (*o, &d[..])).collect();
        let done = self.inner.write(file, &list, false);
        let mut st = self.state.lock();
        st.flight.remove(&file);
        let written = size(&pieces);
        if done.is_ok() {
            st.bytes -= written;
            return done;
        }
        // Back under the writes that came since: the file's bytes here
        // are then `back`, which starts as the `written` ones.
        let mut back = Arc::try_unwrap(pieces).unwrap_or_else(|p| (*p).clone());
        let newer = st.dirty.remove(&file).unwrap_or_default();
        let newer_bytes = size(&newer);
        let mut now = written as i64;
        for (o, d) in newer {
            now += put(&mut back, o, d);
        }
        st.bytes = (st.bytes as i64 - written as i64 - newer_bytes as i64 + now) as u64;
        // Other files' write-backs may be in flight: their bytes still
        // count (found by the model checker under device faults, where
        // this check once left them out and took a failed write-back for
        // lost bytes).
        debug_assert_eq!(
            st.bytes,
            st.dirty.values().map(size).sum::<u64>()
                + st.flight.values().map(|p| size(p)).sum::<u64>()
                + size(&back)
        );
        st.dirty.insert(file, back);
        done
    }

    /// Ends what [`State::changing`] says of `file`.
    fn changed(&self, file: FileId) {
        self.state.lock().changing.remove(&file);
    }

    /// Writes back every dirty file: the first error, after trying all.
    /// The journal in use is sealed first, and goes once every file dirty
    /// then is written back: all its changes are then below.
    fn write_back_all(&self) -> Result<()> {
        let (files, sealed) = {
            let mut st = self.state.lock();
            let j = &mut st.journal;
            if j.sealed.is_none() && j.at > 0 {
                j.sealed = Some(j.now);
                j.now ^= 1;
                j.at = 0;
            }
            let sealed = j.sealed;
            // A file being written back by another call counts too: its
            // stripe waits for that call, whose bytes come back here if it
            // fails; so does one whose removal or reclamation runs below.
            let files: BTreeSet<FileId> = st
                .dirty
                .keys()
                .chain(st.flight.keys())
                .chain(st.changing.iter())
                .copied()
                .collect();
            (files, sealed)
        };
        let mut first = Ok(());
        for file in files {
            let _turn = self.stripe(file).write();
            if let Err(e) = self.write_back(file) {
                first = first.and(Err(e));
            }
        }
        first?;
        if let Some(sealed) = sealed {
            self.raw.remove(sealed)?;
            self.state.lock().journal.sealed = None;
        }
        Ok(())
    }

    /// Writes everything back, and drops every journal holding a change
    /// made before the call: two rounds, since the first may only drop
    /// the journal an earlier failed round left sealed.
    fn settle(&self) -> Result<()> {
        self.write_back_all()?;
        self.write_back_all()
    }

    /// The background write-back: every [`EVERY`], sooner when half the
    /// bound is dirty, and everything once the layer stops. A failed
    /// write-back is tried again next round.
    fn run(&self) {
        loop {
            let stop = {
                let mut st = self.state.lock();
                if !st.stop && st.bytes < self.bound / 2 {
                    self.wake.wait_for(&mut st, EVERY);
                }
                st.stop
            };
            let done = if stop {
                self.settle()
            } else {
                self.write_back_all()
            };
            if stop {
                if let Err(e) = done {
                    tracing::error!("tier: writes lost at the stop, not written back: {e}");
                }
                return;
            }
        }
    }
}

pub struct Tier {
    shared: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tier")
            .field("bound", &self.shared.bound)
            .field("inner", &self.shared.inner)
            .finish()
    }
}

impl Tier {
    /// The layer over `inner`, keeping at most `bound` bytes in memory
    /// and its journal on `raw`, the backend under `inner`'s layers; what
    /// an earlier journal there keeps is replayed first.
    pub fn new(inner: Arc<dyn Backend>, raw: Arc<dyn Backend>, bound: u64) -> Result<Tier> {
        replay(inner.as_ref(), raw.as_ref())?;
        let state = State {
            journal: Journal {
                now: JOURNAL,
                ..Journal::default()
            },
            ..State::default()
        };
        let shared = Arc::new(Shared {
            inner,
            raw,
            bound,
            state: Mutex::new(state),
            wake: Condvar::new(),
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        });
        let run = shared.clone();
        let writer = std::thread::Builder::new()
            .name("labios-tier".into())
            .spawn(move || run.run())
            .expect("the tier's write-back thread starts");
        Ok(Tier {
            shared,
            writer: Some(writer),
        })
    }

    /// Bytes held here, not yet written back.
    pub fn dirty(&self) -> u64 {
        self.shared.state.lock().bytes
    }
}

impl Drop for Tier {
    /// Writes everything back before the layer goes.
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Backend for Tier {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        let s = &self.shared;
        let n: u64 = pieces.iter().map(|(_, d)| d.len() as u64).sum();
        if n > s.bound {
            // Larger than the memory: straight below, after everything
            // here, and with no journal left that a replay could put
            // under it.
            s.settle()?;
            return s.inner.write(file, pieces, sync);
        }
        loop {
            let mut st = s.state.lock();
            if st.bytes + n <= s.bound {
                let changes: Vec<Change> = pieces
                    .iter()
                    .map(|(o, d)| Change::Write(*o, d.to_vec()))
                    .collect();
                s.log(&mut st, file, &changes)?;
                let dirty = st.dirty.entry(file).or_default();
                let mut delta = 0;
                for change in changes {
                    if let Change::Write(o, d) = change {
                        delta += put(dirty, o, d);
                    }
                }
                st.bytes = (st.bytes as i64 + delta) as u64;
                assert!(
                    st.bytes <= s.bound,
                    "the tier holds {} bytes, over its bound {}",
                    st.bytes,
                    s.bound
                );
                if st.bytes >= s.bound / 2 {
                    s.wake.notify_one();
                }
                return Ok(());
            }
            drop(st);
            s.write_back_all()?;
        }
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let s = &self.shared;
        let _turn = s.stripe(file).read();
        let end = offset + buf.len() as u64;
        let (overlay, held) = s.state.lock().overlay(file, offset, end);
        let below = s.inner.len(file)?;
        let len = below.unwrap_or(0).max(held.unwrap_or(0));
        if held.is_none() && (below.is_none() || end > len) {
            // Missing, or shorter than the range: below names which.
            return s.inner.read(file, offset, buf);
        }
        if end > len {
            return Err(Error::Storage(format!(
                "file {file:016x} in the tier is {len} bytes long, shorter than the {} bytes \
                 at offset {offset} it should hold",
                buf.len()
            )));
        }
        let from_below = below.unwrap_or(0).clamp(offset, end);
        buf[(from_below - offset) as usize..].fill(0);
        if from_below > offset {
            s.inner
                .read(file, offset, &mut buf[..(from_below - offset) as usize])?;
        }
        for (o, d) in overlay {
            buf[(o - offset) as usize..][..d.len()].copy_from_slice(&d);
        }
        Ok(())
    }

    fn remove(&self, file: FileId) -> Result<()> {
        let s = &self.shared;
        let _turn = s.stripe(file).write();
        {
            let mut st = s.state.lock();
            s.log(&mut st, file, &[Change::Remove])?;
            st.changing.insert(file);
            if let Some(pieces) = st.dirty.remove(&file) {
                st.bytes -= size(&pieces);
            }
        }
        let done = s.inner.remove(file);
        s.changed(file);
        done
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        let s = &self.shared;
        let _turn = s.stripe(file).write();
        let change = Change::KeepOnly(start, end, held.to_vec());
        let done = s
            .write_back_before(file, Some(change))
            .and_then(|()| s.inner.keep_only(file, start, end, held));
        s.changed(file);
        done
    }

    /// Not the journals: they are this layer's.
    fn files(&self) -> Result<Vec<FileId>> {
        let mut files = self.shared.inner.files()?;
        files.retain(|f| ![JOURNAL, JOURNAL + 1].contains(f));
        {
            let st = self.shared.state.lock();
            files.extend(st.dirty.keys().chain(st.flight.keys()));
        }
        files.sort_unstable();
        files.dedup();
        Ok(files)
    }

    fn flush(&self, file: FileId) -> Result<()> {
        let s = &self.shared;
        let _turn = s.stripe(file).write();
        s.write_back(file)?;
        s.inner.flush(file)
    }

    fn settle(&self) -> Result<()> {
        self.shared.settle()?;
        self.shared.inner.settle()
    }

    fn holds(&self, file: FileId) -> bool {
        let held = {
            let st = self.shared.state.lock();
            st.dirty.contains_key(&file) || st.flight.contains_key(&file)
        };
        held || self.shared.inner.holds(file)
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        let s = &self.shared;
        let (_, held) = s.state.lock().overlay(file, 0, 0);
        let below = s.inner.len(file)?;
        Ok(below.max(held))
    }

    /// The device's bytes and those held here, which will reach it.
    fn used(&self) -> u64 {
        self.shared.inner.used() + self.dirty()
    }
}
