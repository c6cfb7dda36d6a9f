//! Advisory file locks: POSIX record locks (`fcntl` F_SETLK/F_SETLKW/F_GETLK
//! and Linux's open-file-description locks) and whole-file `flock` locks,
//! kept per file by the deployment's lock service so that they hold across
//! processes and, in the distributed deployment, across hosts.
//!
//! A lock belongs to a [`Holder`]: a *session* whose end releases all it
//! holds (a connection to `labios serve`, or a client process kept alive by
//! a lease in the distributed deployment) and an *owner* inside it (a
//! process for `fcntl` locks, an open file description for `flock` and OFD
//! locks, the kernel's lock owner on `labios mount`). Waiting for a lock is
//! the caller's loop over [`Locks::lock`]; a waiting call records whom it
//! waits for, and a wait that would close a cycle is refused (EDEADLK), as
//! Linux refuses it for `fcntl` locks.
//!
//! The rules live in [`FileLocks`] and [`WaitGraph`], plain values that
//! every implementation (in memory here, in Redis in `labios-distributed`)
//! applies the same way.

use async_trait::async_trait;
use labios_label::{Error, FileId, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Locks one file may carry; more is ENOLCK. A bound on what one client
/// can make every later request of the file scan.
pub const MAX_LOCKS_PER_FILE: usize = 4096;

/// Ends the message of [`Error::Locked`] for a wait that would deadlock.
pub const DEADLOCK: &str = "would deadlock";

/// Ends the message of [`Error::Locked`] when a file has too many locks.
pub const TOO_MANY: &str = "too many locks";

/// The end of a lock that reaches to the end of the file, however it grows.
pub const TO_EOF: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Holder {
    /// Its end releases every lock of its owners.
    pub session: u64,
    /// Who holds the lock within the session.
    pub owner: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    Read,
    Write,
}

/// Linux keeps `flock` and `fcntl` locks apart: neither sees the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockSpace {
    /// `fcntl` byte-range locks, process- and OFD-owned.
    Record,
    /// `flock`: always the whole file.
    Flock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRequest {
    pub file: FileId,
    pub space: LockSpace,
    pub holder: Holder,
    /// The process to report to `F_GETLK`.
    pub pid: u32,
    /// `None` unlocks the range.
    pub kind: Option<LockKind>,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive); [`TO_EOF`] for the rest of the file.
    pub end: u64,
    /// The caller waits if the lock is taken: record whom it waits for and
    /// refuse a wait that closes a cycle.
    pub waiting: bool,
}

impl LockRequest {
    fn check(&self) -> Result<()> {
        if self.start > self.end {
            return Err(Error::InvalidArgument(format!(
                "lock range {}..={} of file {} ends before it starts",
                self.start, self.end, self.file
            )));
        }
        Ok(())
    }
}

/// A lock as held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLock {
    pub holder: Holder,
    pub pid: u32,
    pub space: LockSpace,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
}

impl HeldLock {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    fn conflicts(&self, r: &LockRequest) -> bool {
        let Some(kind) = r.kind else { return false };
        self.holder != r.holder
            && self.space == r.space
            && (self.kind == LockKind::Write || kind == LockKind::Write)
            && self.overlaps(r.start, r.end)
    }
}

/// The locks of one file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLocks {
    pub locks: Vec<HeldLock>,
}

impl FileLocks {
    /// The first lock that keeps `r` from being granted.
    pub fn conflict(&self, r: &LockRequest) -> Option<HeldLock> {
        self.locks.iter().find(|l| l.conflicts(r)).copied()
    }

    /// Grants `r` (or unlocks its range): the owner's locks in the range are
    /// replaced, the parts outside it stay, and adjacent or overlapping
    /// locks of one kind merge, as POSIX has it.
    pub fn apply(&mut self, r: &LockRequest) -> Result<()> {
        r.check()?;
        if let Some(l) = self.conflict(r) {
            return Err(busy(r, &l));
        }
        self.grant(r)
    }

    /// [`FileLocks::apply`] of a checked request nothing conflicts with.
    fn grant(&mut self, r: &LockRequest) -> Result<()> {
        let mut kept = Vec::with_capacity(self.locks.len() + 2);
        for l in self.locks.drain(..) {
            if l.holder != r.holder || l.space != r.space || !l.overlaps(r.start, r.end) {
                kept.push(l);
                continue;
            }
            if l.start < r.start {
                kept.push(HeldLock {
                    end: r.start - 1,
                    ..l
                });
            }
            if l.end > r.end {
                kept.push(HeldLock {
                    start: r.end + 1,
                    ..l
                });
            }
        }
        self.locks = kept;
        if let Some(kind) = r.kind {
            let mut new = HeldLock {
                holder: r.holder,
                pid: r.pid,
                space: r.space,
                kind,
                start: r.start,
                end: r.end,
            };
            // Merge with the owner's same-kind neighbours (touching counts).
            self.locks.retain(|l| {
                let touches = l.holder == new.holder
                    && l.space == new.space
                    && l.kind == new.kind
                    && l.start <= new.end.saturating_add(1)
                    && new.start <= l.end.saturating_add(1);
                if touches {
                    new.start = new.start.min(l.start);
                    new.end = new.end.max(l.end);
                }
                !touches
            });
            if self.locks.len() >= MAX_LOCKS_PER_FILE {
                return Err(Error::Locked(format!(
                    "file {} holds {MAX_LOCKS_PER_FILE} locks: {TOO_MANY}",
                    r.file
                )));
            }
            self.locks.push(new);
            self.assert_disjoint(&new);
        }
        Ok(())
    }

    /// Drops the locks of the holders `drop` names; true if any was held.
    pub fn release(&mut self, mut drop: impl FnMut(&Holder) -> bool) -> bool {
        let before = self.locks.len();
        self.locks.retain(|l| !drop(&l.holder));
        before != self.locks.len()
    }

    /// The sessions holding locks here.
    pub fn sessions(&self) -> BTreeSet<u64> {
        self.locks.iter().map(|l| l.holder.session).collect()
    }

    /// One owner's locks of a space never overlap: every grant replaces
    /// what the owner held in its range (checked for the lock just granted,
    /// which keeps it true of all).
    fn assert_disjoint(&self, new: &HeldLock) {
        let overlapping = self
            .locks
            .iter()
            .filter(|l| l.holder == new.holder && l.space == new.space)
            .filter(|l| l.overlaps(new.start, new.end))
            .count();
        assert_eq!(
            overlapping, 1,
            "overlapping locks of one owner: {new:?} in {self:?}"
        );
    }
}

fn busy(r: &LockRequest, l: &HeldLock) -> Error {
    Error::Locked(format!(
        "bytes {}..={} of file {} are locked by process {}",
        l.start.max(r.start),
        l.end.min(r.end),
        r.file,
        l.pid
    ))
}

/// Who waits for whom, over every file: a waiter's edges point at the
/// holders of the locks it waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitGraph {
    pub waits: BTreeMap<Holder, Vec<Holder>>,
}

impl WaitGraph {
    /// Would `waiter` waiting for `blockers` close a cycle?
    pub fn would_deadlock(&self, waiter: Holder, blockers: &[Holder]) -> bool {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<Holder> = blockers.to_vec();
        while let Some(h) = todo.pop() {
            if h == waiter {
                return true;
            }
            if seen.insert(h) {
                if let Some(next) = self.waits.get(&h) {
                    todo.extend(next.iter().copied());
                }
            }
        }
        false
    }

    /// Forgets the waits of the holders `drop` names, and the edges to them.
    pub fn release(&mut self, mut drop: impl FnMut(&Holder) -> bool) -> bool {
        let before = self.clone();
        self.waits.retain(|w, _| !drop(w));
        for v in self.waits.values_mut() {
            v.retain(|h| !drop(h));
        }
        self.waits.retain(|_, v| !v.is_empty());
        before != *self
    }
}

/// What one lock call did: its outcome, and whether the wait graph changed
/// (so that a store keeping the graph elsewhere writes it back).
#[derive(Debug)]
pub struct Decision {
    pub outcome: Result<()>,
    pub graph_changed: bool,
}

/// One lock call on a file's locks and the wait graph: grants, refuses as
/// busy (recording the wait when the caller waits), or refuses a wait that
/// would deadlock.
pub fn decide(locks: &mut FileLocks, graph: &mut WaitGraph, r: &LockRequest) -> Decision {
    if let Err(e) = r.check() {
        return Decision {
            outcome: Err(e),
            graph_changed: false,
        };
    }
    let conflicting: Vec<HeldLock> = locks
        .locks
        .iter()
        .filter(|l| l.conflicts(r))
        .copied()
        .collect();
    let Some(&first) = conflicting.first() else {
        return Decision {
            graph_changed: graph.waits.remove(&r.holder).is_some(),
            outcome: locks.grant(r),
        };
    };
    let mut blockers: Vec<Holder> = conflicting.iter().map(|l| l.holder).collect();
    blockers.sort();
    blockers.dedup();
    if !r.waiting {
        return Decision {
            outcome: Err(busy(r, &first)),
            graph_changed: false,
        };
    }
    if r.space == LockSpace::Record && graph.would_deadlock(r.holder, &blockers) {
        return Decision {
            graph_changed: graph.waits.remove(&r.holder).is_some(),
            outcome: Err(Error::Locked(format!(
                "waiting for bytes {}..={} of file {} held by process {} {DEADLOCK}",
                first.start.max(r.start),
                first.end.min(r.end),
                r.file,
                first.pid
            ))),
        };
    }
    let graph_changed = graph.waits.get(&r.holder) != Some(&blockers);
    graph.waits.insert(r.holder, blockers);
    Decision {
        outcome: Err(busy(r, &first)),
        graph_changed,
    }
}

/// The lock service of a deployment.
#[async_trait]
pub trait Locks: Send + Sync {
    /// Grants, changes or (kind `None`) releases a lock at once, or fails
    /// with [`Error::Locked`] naming the holder in the way.
    async fn lock(&self, r: &LockRequest) -> Result<()>;

    /// The first lock that keeps `r` from being granted (`F_GETLK`).
    async fn conflict(&self, r: &LockRequest) -> Result<Option<HeldLock>>;

    /// Releases what `session` holds and forgets its waits: only `owner`'s
    /// when given, only on `file` when given.
    async fn release(&self, session: u64, owner: Option<u64>, file: Option<FileId>) -> Result<()>;
}

/// Whether `h` falls under a release of `session` / `owner`.
pub fn released(h: &Holder, session: u64, owner: Option<u64>) -> bool {
    h.session == session && owner.is_none_or(|o| o == h.owner)
}

/// The lock service of the embedded deployment: one table in the process
/// of `labios serve`, whose connections' ends release their sessions.
#[derive(Default)]
pub struct MemoryLocks {
    state: parking_lot::Mutex<MemoryState>,
}

#[derive(Default)]
struct MemoryState {
    files: HashMap<FileId, FileLocks>,
    graph: WaitGraph,
}

#[async_trait]
impl Locks for MemoryLocks {
    async fn lock(&self, r: &LockRequest) -> Result<()> {
        let mut s = self.state.lock();
        let MemoryState { files, graph } = &mut *s;
        let locks = files.entry(r.file).or_default();
        let out = decide(locks, graph, r).outcome;
        if locks.locks.is_empty() {
            files.remove(&r.file);
        }
        out
    }

    async fn conflict(&self, r: &LockRequest) -> Result<Option<HeldLock>> {
        r.check()?;
        Ok(self
            .state
            .lock()
            .files
            .get(&r.file)
            .and_then(|l| l.conflict(r)))
    }

    async fn release(&self, session: u64, owner: Option<u64>, file: Option<FileId>) -> Result<()> {
        let mut s = self.state.lock();
        let gone = |h: &Holder| released(h, session, owner);
        match file {
            Some(f) => {
                if let Some(l) = s.files.get_mut(&f) {
                    l.release(gone);
                    if l.locks.is_empty() {
                        s.files.remove(&f);
                    }
                }
            }
            None => {
                s.files.retain(|_, l| {
                    l.release(gone);
                    !l.locks.is_empty()
                });
            }
        }
        s.graph.release(gone);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(owner: u64, kind: Option<LockKind>, start: u64, end: u64) -> LockRequest {
        LockRequest {
            file: 1,
            space: LockSpace::Record,
            holder: Holder { session: 1, owner },
            pid: owner as u32,
            kind,
            start,
            end,
            waiting: false,
        }
    }

    fn ranges(l: &FileLocks, owner: u64) -> Vec<(u64, u64, LockKind)> {
        let mut v: Vec<_> = l
            .locks
            .iter()
            .filter(|h| h.holder.owner == owner)
            .map(|h| (h.start, h.end, h.kind))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    #[test]
    fn one_owner_replaces_splits_and_merges_its_ranges() {
        use LockKind::{Read, Write};
        let mut l = FileLocks::default();
        l.apply(&req(1, Some(Write), 0, 99)).unwrap();
        l.apply(&req(1, Some(Read), 20, 29)).unwrap();
        assert_eq!(
            ranges(&l, 1),
            [(0, 19, Write), (20, 29, Read), (30, 99, Write)]
        );
        l.apply(&req(1, Some(Write), 20, 29)).unwrap();
        assert_eq!(ranges(&l, 1), [(0, 99, Write)], "touching ranges merge");
        l.apply(&req(1, None, 50, TO_EOF)).unwrap();
        assert_eq!(ranges(&l, 1), [(0, 49, Write)]);
        l.apply(&req(1, Some(Write), 50, TO_EOF)).unwrap();
        assert_eq!(
            ranges(&l, 1),
            [(0, TO_EOF, Write)],
            "no overflow at the end"
        );
        l.apply(&req(1, None, 0, 0)).unwrap();
        assert_eq!(ranges(&l, 1), [(1, TO_EOF, Write)]);
    }

    #[test]
    fn owners_conflict_unless_both_read() {
        let mut l = FileLocks::default();
        l.apply(&req(1, Some(LockKind::Read), 0, 9)).unwrap();
        l.apply(&req(2, Some(LockKind::Read), 5, 14)).unwrap();
        let e = l.apply(&req(3, Some(LockKind::Write), 9, 9)).unwrap_err();
        assert!(e.to_string().contains("locked by process 1"), "{e}");
        l.apply(&req(3, Some(LockKind::Write), 15, 20)).unwrap();
        // Unlocking never conflicts.
        l.apply(&req(3, None, 0, TO_EOF)).unwrap();
    }

    #[test]
    fn a_cycle_of_waits_is_a_deadlock_and_a_chain_is_not() {
        let mut files: HashMap<FileId, FileLocks> = HashMap::new();
        let mut g = WaitGraph::default();
        let mut call = |file: FileId, owner: u64, start: u64, waiting: bool| {
            let r = LockRequest {
                file,
                waiting,
                ..req(owner, Some(LockKind::Write), start, start)
            };
            decide(files.entry(file).or_default(), &mut g, &r).outcome
        };
        // 1 holds a, 2 holds b, 3 holds c (on three files).
        call(1, 1, 0, false).unwrap();
        call(2, 2, 0, false).unwrap();
        call(3, 3, 0, false).unwrap();
        // 1 waits for 2, 2 waits for 3: a chain.
        assert!(call(2, 1, 0, true).is_err());
        let e = call(3, 2, 0, true).unwrap_err();
        assert!(!e.to_string().ends_with(DEADLOCK), "{e}");
        // 3 waiting for 1 closes the cycle.
        let e = call(1, 3, 0, true).unwrap_err();
        assert!(e.to_string().ends_with(DEADLOCK), "{e}");
        // Not waiting, it is merely busy.
        let e = call(1, 3, 0, false).unwrap_err();
        assert!(!e.to_string().ends_with(DEADLOCK), "{e}");
    }

    #[test]
    fn a_file_holds_a_bounded_number_of_locks() {
        let mut l = FileLocks::default();
        for i in 0..MAX_LOCKS_PER_FILE as u64 {
            l.apply(&req(i, Some(LockKind::Read), i * 2, i * 2))
                .unwrap();
        }
        let e = l.apply(&req(1, Some(LockKind::Read), 1_000_000, 1_000_000));
        assert!(e.unwrap_err().to_string().ends_with(TOO_MANY));
    }
}
