//! `scheduler`: how calls reach the device (LabStor's I/O scheduler
//! LabMod). A worker calls its stack from many threads at once (every
//! lane runs several labels); a device with one queue, like a disk, serves
//! them one at a time anyway, in whatever order they arrive. This layer
//! admits at most DEPTH calls below it at once and chooses which waiting
//! call goes next:
//!
//! - `scheduler` or `scheduler:fifo`: in arrival order;
//! - `scheduler:small`: the call moving the fewest bytes first, so that a
//!   4 KiB label is not queued behind megabytes; a call passed over
//!   [`MAX_PASSED`] times goes next whatever its size, so large calls are
//!   delayed, never starved.
//!
//! DEPTH (`scheduler:small:4`) is 1 when not given. Calls that move no
//! bytes of their own (flush, removal, reclamation) count as the largest.
//! Sits just above the backend, so it orders what the device is asked,
//! companion data included; unnamed, it is not there.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

/// The most times a waiting call is passed over by later, smaller ones.
pub const MAX_PASSED: u32 = 8;

/// Which waiting call goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Fifo,
    SmallFirst,
}

/// Reads `scheduler[:POLICY[:DEPTH]]`, naming the module when it cannot.
pub fn parse(module: &str) -> Result<(Policy, usize)> {
    let bad = || {
        Error::InvalidArgument(format!(
            "stack: {module:?}: the scheduler takes a policy, fifo or small, and a depth of at \
             least 1 (e.g. scheduler:small:4)"
        ))
    };
    let mut parts = module.split(':').skip(1);
    let policy = match parts.next() {
        None | Some("fifo") => Policy::Fifo,
        Some("small") => Policy::SmallFirst,
        Some(_) => return Err(bad()),
    };
    let depth = match parts.next() {
        None => 1,
        Some(d) => d.parse::<usize>().ok().filter(|d| *d > 0).ok_or_else(bad)?,
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((policy, depth))
}

/// The scheduler over `inner`; see the module docs.
#[derive(Debug)]
pub struct Scheduler {
    inner: Arc<dyn Backend>,
    policy: Policy,
    depth: usize,
    queue: Mutex<Queue>,
    turn: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    /// Calls below now.
    running: usize,
    /// Calls waiting, in arrival order.
    waiting: Vec<Waiter>,
    /// Tickets admitted and not yet gone below.
    admitted: Vec<u64>,
    next_ticket: u64,
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    bytes: u64,
    passed: u32,
}

impl Scheduler {
    pub fn new(inner: Arc<dyn Backend>, policy: Policy, depth: usize) -> Scheduler {
        assert!(depth > 0, "a scheduler admits at least one call");
        Scheduler {
            inner,
            policy,
            depth,
            queue: Mutex::default(),
            turn: Condvar::new(),
        }
    }

    /// Calls waiting to go below now.
    pub fn waiting(&self) -> usize {
        self.queue.lock().waiting.len()
    }

    /// Runs `call`, moving `bytes`, once the policy admits it.
    fn admitted<T>(&self, bytes: u64, call: impl FnOnce() -> T) -> T {
        let mut q = self.queue.lock();
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.waiting.push(Waiter {
            ticket,
            bytes,
            passed: 0,
        });
        self.admit(&mut q);
        while !q.admitted.contains(&ticket) {
            self.turn.wait(&mut q);
        }
        q.admitted.retain(|t| *t != ticket);
        drop(q);
        let _done = Done(self);
        call()
    }

    /// Admits waiting calls while there is room below, in policy order.
    fn admit(&self, q: &mut Queue) {
        let mut any = false;
        while q.running < self.depth && !q.waiting.is_empty() {
            let at = match self.policy {
                Policy::Fifo => 0,
                Policy::SmallFirst => q
                    .waiting
                    .iter()
                    .position(|w| w.passed >= MAX_PASSED)
                    .unwrap_or_else(|| {
                        (0..q.waiting.len())
                            .min_by_key(|&i| q.waiting[i].bytes)
                            .expect("a call waits")
                    }),
            };
            let next = q.waiting.remove(at);
            // Those that came before it were passed over.
            for w in &mut q.waiting[..at] {
                w.passed += 1;
            }
            debug_assert!(q.waiting[..at].iter().all(|w| w.ticket < next.ticket));
            q.running += 1;
            q.admitted.push(next.ticket);
            any = true;
        }
        assert!(q.running <= self.depth, "more calls below than the depth");
        if any {
            self.turn.notify_all();
        }
    }
}

/// A call gone below ends: its room goes to the next.
struct Done<'a>(&'a Scheduler);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        let mut q = self.0.queue.lock();
        q.running -= 1;
        self.0.admit(&mut q);
    }
}

/// The bytes of a call that moves none of its own: it waits like the
/// largest.
const NO_BYTES: u64 = u64::MAX;

impl Backend for Scheduler {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        let bytes = pieces.iter().map(|(_, d)| d.len() as u64).sum();
        self.admitted(bytes, || self.inner.write(file, pieces, sync))
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.admitted(buf.len() as u64, || self.inner.read(file, offset, buf))
    }

    fn remove(&self, file: FileId) -> Result<()> {
        self.admitted(NO_BYTES, || self.inner.remove(file))
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        self.admitted(NO_BYTES, || self.inner.keep_only(file, start, end, held))
    }

    fn flush(&self, file: FileId) -> Result<()> {
        self.admitted(NO_BYTES, || self.inner.flush(file))
    }

    crate::pass_through!(inner: files, holds, len, used);
}
