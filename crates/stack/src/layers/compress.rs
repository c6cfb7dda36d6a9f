//! The codec layers, `zstd` and `lz4`: a file's bytes compressed in units
//! of [`UNIT`] bytes, transparently to readers, and every unit recording
//! the codec that wrote it. Every stack has this layer: where a stack names
//! no codec it runs passive (writes stay as they are; reads follow each
//! unit's record), so a worker whose stack changes, live or across a
//! restart, reads every byte an earlier stack wrote (ARCHITECTURE.md "The
//! worker's stack").
//!
//! A file F with no record file is laid out as the backend below keeps it,
//! byte for byte (what a stack without a codec always wrote). Once a unit
//! of F is stored compressed, F gets a record file `F | RECORDS`: a header
//! (F's length, which the backend's own length no longer tells) and 8
//! bytes per unit (codec, slot, bytes stored). An all-zero entry is a unit
//! stored as is, in place. Each unit has two slots, F itself and
//! `F | SLOTS`, at the unit's own offset: a rewritten unit goes to the slot
//! its record does not name, then the record switches, then the old slot
//! is freed. A crash at any point leaves the record naming a whole unit,
//! old or new, never a mix.
//!
//! A unit stored as it is gets compressed when a write reaches its end
//! (a whole-unit write, or the last of sequential ones), so small writes
//! inside a unit cost no read; units that do not shrink by at least a file
//! system block stay as they are. A compressed unit is rewritten whole. A payload that does not decode fails the read with an error
//! naming the file and the unit's offset.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::RwLock;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Bytes compressed together. Large enough that a unit saves whole file
/// system blocks; small enough that a small overwrite rewrites little.
pub const UNIT: u64 = 64 * 1024;
/// The bit of a file id that names a file's unit records (bit 63 is the
/// checksum layer's sums).
const RECORDS: FileId = 1 << 62;
/// The bit of a file id that names the second slot of a file's units.
const SLOTS: FileId = 1 << 61;
/// Ids with any of these bits are another layer's companions, or this
/// one's: passed to the backend untouched.
const COMPANIONS: FileId = 0b111 << 61;
/// The record file's header: the file's length, then [`MARK`].
const HEADER: u64 = 16;
const MARK: [u8; 8] = *b"LBunits1";
/// Bytes of one unit's record entry.
const ENTRY: u64 = 8;
/// What a compressed unit must save to be stored compressed.
const WORTH: usize = 4096;
/// zstd's level: its fastest standard one, so that a worker keeps up.
const ZSTD_LEVEL: i32 = 1;
const STRIPES: usize = 64;

/// How a unit's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// As they are.
    Raw,
    Zstd,
    Lz4,
}

impl Codec {
    fn id(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 1,
            Codec::Lz4 => 2,
        }
    }

    fn from_id(id: u8) -> Option<Codec> {
        [Codec::Raw, Codec::Zstd, Codec::Lz4]
            .into_iter()
            .find(|c| c.id() == id)
    }

    /// Decodes `payload` into the front of `out`, which is zeros after.
    fn decode(self, payload: &[u8], out: &mut [u8]) -> std::result::Result<(), String> {
        let n = match self {
            Codec::Raw => {
                let n = payload.len().min(out.len());
                out[..n].copy_from_slice(&payload[..n]);
                n
            }
            Codec::Zstd => {
                zstd::bulk::decompress_to_buffer(payload, out).map_err(|e| e.to_string())?
            }
            Codec::Lz4 => {
                lz4_flex::block::decompress_into(payload, out).map_err(|e| e.to_string())?
            }
        };
        out[n..].fill(0);
        Ok(())
    }
}

/// One unit's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    codec: Codec,
    /// 0: the file itself; 1: `F | SLOTS`.
    slot: u8,
    /// Bytes of the payload.
    stored: u32,
}

impl Entry {
    /// Stored as is, in place: what a file without records holds.
    const IN_PLACE: Entry = Entry {
        codec: Codec::Raw,
        slot: 0,
        stored: 0,
    };

    fn in_place(&self) -> bool {
        *self == Entry::IN_PLACE
    }

    fn encode(&self) -> [u8; ENTRY as usize] {
        if self.in_place() {
            return [0; ENTRY as usize];
        }
        let mut e = [0; ENTRY as usize];
        e[0] = self.codec.id();
        e[1] = self.slot;
        e[2] = b'U';
        e[4..].copy_from_slice(&self.stored.to_le_bytes());
        e
    }

    fn decode(e: &[u8]) -> Option<Entry> {
        if e.iter().all(|&b| b == 0) {
            return Some(Entry::IN_PLACE);
        }
        (e[2] == b'U' && e[1] <= 1 && e[3] == 0).then_some(())?;
        Some(Entry {
            codec: Codec::from_id(e[0])?,
            slot: e[1],
            stored: u32::from_le_bytes(e[4..8].try_into().ok()?),
        })
    }
}

/// What a unit becomes.
enum Next {
    /// These logical bytes (the unit's, up to the file's end), and their
    /// compressed form where the layer's codec shrinks them enough.
    Stored {
        bytes: Vec<u8>,
        packed: Option<(Codec, Vec<u8>)>,
    },
    /// Nothing: the unit lies past the file's new end.
    Gone,
}

#[derive(Debug)]
pub struct Compress {
    inner: Arc<dyn Backend>,
    /// What new units are stored with; `Raw` is the passive layer.
    codec: Codec,
    /// Writers of a file alone, readers together; striped by file id.
    stripes: Vec<RwLock<()>>,
}

/// Bytes of unit `u` in a file `len` bytes long.
fn unit_size(u: u64, len: u64) -> usize {
    len.saturating_sub(u * UNIT).min(UNIT) as usize
}

fn slot_file(file: FileId, slot: u8) -> FileId {
    if slot == 0 {
        file
    } else {
        file | SLOTS
    }
}

impl Compress {
    /// The layer storing new units with `codec`; with [`Codec::Raw`] it
    /// only reads what records say.
    pub fn new(inner: Arc<dyn Backend>, codec: Codec) -> Compress {
        Compress {
            inner,
            codec,
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }

    fn stripe(&self, file: FileId) -> &RwLock<()> {
        &self.stripes[(file % STRIPES as u64) as usize]
    }

    fn malformed(&self, file: FileId, what: &str) -> Error {
        Error::Storage(format!(
            "the unit records of file {file:016x} are malformed ({what})"
        ))
    }

    /// The file's length as its records give it; `None` without records.
    /// A record file shorter than its header was never committed: a
    /// backend creates a file before it writes it, and a crash between the
    /// two (a `kill -9` of a worker in the middle of the file's first
    /// compressed unit) leaves it empty. The first commit writes the header
    /// with the first entries, and until it does every unit is in place, so
    /// such a file reads as none (it once failed the worker's next start).
    fn header(&self, file: FileId) -> Result<Option<u64>> {
        match self.inner.len(file | RECORDS)? {
            None => Ok(None),
            Some(n) if n < HEADER => Ok(None),
            Some(_) => {
                let mut h = [0u8; HEADER as usize];
                self.inner.read(file | RECORDS, 0, &mut h)?;
                if h[8..] != MARK {
                    return Err(self.malformed(file, "bad mark"));
                }
                Ok(Some(u64::from_le_bytes(
                    h[..8].try_into().expect("8 bytes"),
                )))
            }
        }
    }

    /// The records of units `first..=last` (in place where none is kept).
    fn entries(&self, file: FileId, first: u64, last: u64) -> Result<Vec<Entry>> {
        let mut raw = vec![0u8; ((last - first + 1) * ENTRY) as usize];
        self.lenient_read(file | RECORDS, HEADER + first * ENTRY, &mut raw)?;
        raw.chunks(ENTRY as usize)
            .map(|e| Entry::decode(e).ok_or_else(|| self.malformed(file, "bad entry")))
            .collect()
    }

    /// Fills `buf` from what the backend holds of `file` at `offset`,
    /// zeros past its end: a hole at a file's end within its recorded
    /// length is still a hole.
    fn lenient_read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let held = self.inner.len(file)?.unwrap_or(0);
        let n = held.saturating_sub(offset).min(buf.len() as u64) as usize;
        buf[n..].fill(0);
        if n > 0 {
            self.inner.read(file, offset, &mut buf[..n])?;
        }
        Ok(())
    }

    /// The logical bytes of unit `u` of a file `len` bytes long.
    fn unit(&self, file: FileId, u: u64, entry: Entry, len: u64) -> Result<Vec<u8>> {
        let mut out = vec![0u8; unit_size(u, len)];
        let at = slot_file(file, entry.slot);
        if entry.codec == Codec::Raw {
            self.lenient_read(at, u * UNIT, &mut out)?;
            return Ok(out);
        }
        let mut payload = vec![0u8; entry.stored as usize];
        self.inner.read(at, u * UNIT, &mut payload)?;
        entry.codec.decode(&payload, &mut out).map_err(|e| {
            Error::Storage(format!(
                "{:?} unit of file {file:016x} at offset {} ({UNIT} bytes) does not decode: {e}",
                entry.codec,
                u * UNIT
            ))
        })?;
        Ok(out)
    }

    /// `bytes` compressed with the layer's codec, where that saves a file
    /// system block at least.
    fn pack(&self, bytes: &[u8]) -> Result<Option<(Codec, Vec<u8>)>> {
        let packed = match self.codec {
            Codec::Raw => return Ok(None),
            Codec::Zstd => zstd::bulk::compress(bytes, ZSTD_LEVEL)
                .map_err(|e| Error::Storage(format!("zstd: {e}")))?,
            Codec::Lz4 => lz4_flex::block::compress(bytes),
        };
        Ok((packed.len() + WORTH <= bytes.len()).then_some((self.codec, packed)))
    }

    /// The records of `units` (sorted), read a contiguous run at a time.
    fn entries_of(&self, file: FileId, units: &BTreeSet<u64>) -> Result<Vec<(u64, Entry)>> {
        let mut out = Vec::with_capacity(units.len());
        let mut run: Vec<u64> = Vec::new();
        for &u in units.iter().chain(std::iter::once(&u64::MAX)) {
            if run.last().is_some_and(|&l| l + 1 != u) || u == u64::MAX {
                if let (Some(&a), Some(&b)) = (run.first(), run.last()) {
                    out.extend((a..=b).zip(self.entries(file, a, b)?));
                }
                run.clear();
            }
            run.push(u);
        }
        Ok(out)
    }

    /// Stores each changed unit in the slot its record does not name (or
    /// in place, where it stays as is and in place), then writes the
    /// records with the file's length `len`, then frees the slots left.
    /// `in_place` are pieces of units written in place as they are.
    fn commit(
        &self,
        file: FileId,
        changes: Vec<(u64, Entry, Next)>,
        in_place: Vec<(u64, &[u8])>,
        len: u64,
        had_records: bool,
        sync: bool,
    ) -> Result<()> {
        let mut slots: [Vec<(u64, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
        let mut records: Vec<(u64, Entry)> = Vec::new();
        let mut freed: [Vec<(u64, u64)>; 2] = [Vec::new(), Vec::new()];
        for (u, old, next) in changes {
            let start = u * UNIT;
            let old_slot = if old.in_place() { 0 } else { old.slot };
            let new = match next {
                Next::Gone => Entry::IN_PLACE,
                Next::Stored { bytes, packed } => {
                    let slot = 1 - old_slot;
                    let (entry, payload) = match packed {
                        Some((codec, p)) => (
                            Entry {
                                codec,
                                slot,
                                stored: p.len() as u32,
                            },
                            p,
                        ),
                        None if slot == 0 => (Entry::IN_PLACE, bytes),
                        None => (
                            Entry {
                                codec: Codec::Raw,
                                slot,
                                stored: bytes.len() as u32,
                            },
                            bytes,
                        ),
                    };
                    let end = start + payload.len() as u64;
                    freed[slot as usize].push((end, start + UNIT));
                    slots[slot as usize].push((start, payload));
                    entry
                }
            };
            // The new bytes, if any, went to the other slot.
            freed[old_slot as usize].push((start, start + UNIT));
            records.push((u, new));
        }
        for (slot, pieces) in slots.iter().enumerate() {
            let mut all: Vec<(u64, &[u8])> = pieces.iter().map(|(o, p)| (*o, &p[..])).collect();
            if slot == 0 {
                all.extend(in_place.iter().copied());
            }
            if !all.is_empty() {
                self.inner.write(slot_file(file, slot as u8), &all, sync)?;
            }
        }
        if had_records || records.iter().any(|(_, e)| !e.in_place()) {
            self.write_records(file, len, &records, sync)?;
        }
        for (slot, ranges) in freed.iter_mut().enumerate() {
            free(self.inner.as_ref(), slot_file(file, slot as u8), ranges)?;
        }
        Ok(())
    }

    fn write_records(
        &self,
        file: FileId,
        len: u64,
        records: &[(u64, Entry)],
        sync: bool,
    ) -> Result<()> {
        let mut header = len.to_le_bytes().to_vec();
        header.extend_from_slice(&MARK);
        let mut runs: Vec<(u64, Vec<u8>)> = vec![(0, header)];
        for (u, e) in records {
            let at = HEADER + u * ENTRY;
            match runs.last_mut() {
                Some((o, run)) if *o + run.len() as u64 == at => run.extend_from_slice(&e.encode()),
                _ => runs.push((at, e.encode().to_vec())),
            }
        }
        let pieces: Vec<(u64, &[u8])> = runs.iter().map(|(o, r)| (*o, &r[..])).collect();
        self.inner.write(file | RECORDS, &pieces, sync)
    }
}

/// Frees `ranges` of `file` (any order, may touch), keeping the rest.
fn free(inner: &dyn Backend, file: FileId, ranges: &mut Vec<(u64, u64)>) -> Result<()> {
    ranges.retain(|r| r.0 < r.1);
    if ranges.is_empty() {
        return Ok(());
    }
    ranges.sort_unstable();
    let (lo, hi) = (ranges[0].0, ranges.iter().map(|r| r.1).max().expect("some"));
    let mut held = Vec::new();
    let mut at = lo;
    for &(s, e) in ranges.iter() {
        if s > at {
            held.push((at, s));
        }
        at = at.max(e);
    }
    inner.keep_only(file, lo, hi, &held)
}

/// The parts of `pieces` within unit `u`, at their own offsets.
fn clip<'p, 'a>(
    pieces: &'p [(u64, &'a [u8])],
    u: u64,
) -> impl Iterator<Item = (u64, &'a [u8])> + 'p {
    let (start, stop) = (u * UNIT, (u + 1) * UNIT);
    pieces.iter().filter_map(move |&(o, d)| {
        let (a, b) = (o.max(start), (o + d.len() as u64).min(stop));
        (a < b).then(|| (a, &d[(a - o) as usize..(b - o) as usize]))
    })
}

impl Backend for Compress {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        if file & COMPANIONS != 0 {
            return self.inner.write(file, pieces, sync);
        }
        let _turn = self.stripe(file).write();
        let header = self.header(file)?;
        if header.is_none() && self.codec == Codec::Raw {
            return self.inner.write(file, pieces, sync);
        }
        let old_len = match header {
            Some(len) => len,
            None => self.inner.len(file)?.unwrap_or(0),
        };
        let mut len = old_len;
        let mut units = BTreeSet::new();
        for (offset, data) in pieces.iter().filter(|(_, d)| !d.is_empty()) {
            let end = offset
                .checked_add(data.len() as u64)
                .ok_or_else(|| Error::InvalidArgument(format!("offset {offset} overflows")))?;
            len = len.max(end);
            units.extend(offset / UNIT..=(end - 1) / UNIT);
        }
        let entries = match header {
            Some(_) => self.entries_of(file, &units)?,
            None => units.iter().map(|&u| (u, Entry::IN_PLACE)).collect(),
        };
        let (mut changes, mut in_place) = (Vec::new(), Vec::new());
        for (u, old) in entries {
            // A unit stored as it is gets compressed when a write reaches
            // its end (written whole, or the last of sequential writes):
            // small writes inside it stay in place and read nothing.
            let (start, size) = (u * UNIT, unit_size(u, len));
            let reaches_end = clip(pieces, u).any(|(at, d)| at + d.len() as u64 == start + UNIT);
            if old.in_place() && (self.codec == Codec::Raw || !reaches_end) {
                in_place.extend(clip(pieces, u));
                continue;
            }
            let mut parts = clip(pieces, u);
            let bytes = match (parts.next(), parts.next()) {
                (Some((at, d)), None) if at == start && d.len() == size => d.to_vec(),
                _ => {
                    let mut bytes = self.unit(file, u, old, old_len)?;
                    bytes.resize(size, 0);
                    for (at, d) in clip(pieces, u) {
                        bytes[(at - start) as usize..][..d.len()].copy_from_slice(d);
                    }
                    bytes
                }
            };
            let packed = self.pack(&bytes)?;
            if old.in_place() && packed.is_none() {
                in_place.extend(clip(pieces, u));
            } else {
                changes.push((u, old, Next::Stored { bytes, packed }));
            }
        }
        self.commit(file, changes, in_place, len, header.is_some(), sync)
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        if file & COMPANIONS != 0 {
            return self.inner.read(file, offset, buf);
        }
        let _turn = self.stripe(file).read();
        let Some(len) = self.header(file)? else {
            return self.inner.read(file, offset, buf);
        };
        let end = offset + buf.len() as u64;
        if end > len {
            return Err(Error::Storage(format!(
                "file {file:016x} is {len} bytes long, shorter than the {} bytes at offset \
                 {offset} it should hold",
                buf.len()
            )));
        }
        if buf.is_empty() {
            return Ok(());
        }
        let (first, last) = (offset / UNIT, (end - 1) / UNIT);
        for (u, entry) in (first..=last).zip(self.entries(file, first, last)?) {
            let (a, b) = (offset.max(u * UNIT), end.min((u + 1) * UNIT));
            let dst = &mut buf[(a - offset) as usize..(b - offset) as usize];
            if entry.in_place() {
                self.lenient_read(file, a, dst)?;
            } else {
                let bytes = self.unit(file, u, entry, len)?;
                dst.copy_from_slice(&bytes[(a - u * UNIT) as usize..(b - u * UNIT) as usize]);
            }
        }
        Ok(())
    }

    fn remove(&self, file: FileId) -> Result<()> {
        if file & COMPANIONS != 0 {
            return self.inner.remove(file);
        }
        let _turn = self.stripe(file).write();
        self.inner.remove(file)?;
        self.inner.remove(file | SLOTS)?;
        self.inner.remove(file | RECORDS)
    }

    /// Units stored compressed or in their second slot are rewritten
    /// whole with what the range keeps (zeros elsewhere, nothing past the
    /// new end); the rest, stored as they are, the backend frees itself.
    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        if file & COMPANIONS != 0 {
            return self.inner.keep_only(file, start, end, held);
        }
        let _turn = self.stripe(file).write();
        let Some(len) = self.header(file)? else {
            if crate::keeps_nothing(end, held) {
                // With what a crash left of a first commit.
                self.inner.remove(file | SLOTS)?;
                self.inner.remove(file | RECORDS)?;
            }
            return self.inner.keep_only(file, start, end, held);
        };
        if crate::keeps_nothing(end, held) {
            self.inner.remove(file)?;
            self.inner.remove(file | SLOTS)?;
            return self.inner.remove(file | RECORDS);
        }
        let new_len = match held.last() {
            Some(&(_, last)) if end == u64::MAX => last.min(len),
            _ => len,
        };
        // A cut below `start` drops the units after it too.
        let lo = if end == u64::MAX {
            start.min(new_len)
        } else {
            start
        };
        let hi = end.min(len);
        let recorded = self
            .inner
            .len(file | RECORDS)?
            .unwrap_or(HEADER)
            .saturating_sub(HEADER)
            / ENTRY;
        let units: BTreeSet<u64> = if lo < hi {
            (lo / UNIT..((hi - 1) / UNIT + 1).min(recorded)).collect()
        } else {
            BTreeSet::new()
        };
        let mut changes = Vec::new();
        let mut keep: Vec<(u64, u64)> = held.to_vec();
        for (u, old) in self.entries_of(file, &units)? {
            if old.in_place() {
                continue;
            }
            let unit_start = u * UNIT;
            let mut bytes = self.unit(file, u, old, len)?;
            // Zero what `start..end` frees, outside `held`.
            let a = start.max(unit_start);
            let b = hi.min(unit_start + bytes.len() as u64).max(a);
            let mut at = a;
            for &(s, e) in held.iter().chain(std::iter::once(&(b, b))) {
                let (s, e) = (s.clamp(a, b), e.clamp(a, b));
                if s > at {
                    bytes[(at - unit_start) as usize..(s - unit_start) as usize].fill(0);
                }
                at = at.max(e);
            }
            bytes.truncate(unit_size(u, new_len));
            let next = if bytes.is_empty() {
                Next::Gone
            } else {
                let packed = self.pack(&bytes)?;
                // A payload the backend keeps in the file itself stays.
                if old.slot == 1 {
                    let stored = packed.as_ref().map_or(bytes.len(), |(_, p)| p.len());
                    keep.push((unit_start, unit_start + stored as u64));
                }
                Next::Stored { bytes, packed }
            };
            changes.push((u, old, next));
        }
        self.commit(file, changes, Vec::new(), new_len, true, false)?;
        keep.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(keep.len());
        for (s, e) in keep {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.inner.keep_only(file, start, end, &merged)
    }

    fn files(&self) -> Result<Vec<FileId>> {
        let files: BTreeSet<FileId> = self
            .inner
            .files()?
            .into_iter()
            .map(|f| match f & (1 << 63) {
                0 => f & !(RECORDS | SLOTS),
                _ => f,
            })
            .collect();
        Ok(files.into_iter().collect())
    }

    fn flush(&self, file: FileId) -> Result<()> {
        self.inner.flush(file)?;
        if file & COMPANIONS == 0 {
            self.inner.flush(file | SLOTS)?;
            self.inner.flush(file | RECORDS)?;
        }
        Ok(())
    }

    fn holds(&self, file: FileId) -> bool {
        self.inner.holds(file) || (file & COMPANIONS == 0 && self.inner.holds(file | RECORDS))
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        if file & COMPANIONS != 0 {
            return self.inner.len(file);
        }
        let _turn = self.stripe(file).read();
        match self.header(file)? {
            Some(len) => Ok(Some(len)),
            None => self.inner.len(file),
        }
    }

    crate::pass_through!(inner: used);
}
