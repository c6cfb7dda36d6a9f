//! Identifiers. A label id orders labels by time and origin (article 3.3.1a):
//! the dispatcher and the inventory rely on that order to decide which of two
//! overlapping writes is the newer one, whatever order they complete in.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub type AppId = u32;
pub type WorkerId = u32;
pub type FileId = u64;

/// Unique, totally ordered label identifier: nanosecond time first, then origin.
/// One origin never issues the same nanosecond twice (see [`LabelIdGen`]), so
/// ids are unique system-wide as long as origins are.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct LabelId {
    pub nanos: u64,
    pub origin: u64,
}

/// The origin of the labels worker `worker` issues itself (deletes that
/// give back space). Worker origins count down from `u64::MAX` while client
/// origins count up from zero, so the two never meet, and a label's id
/// tells whether a client waits for it.
pub const fn worker_origin(worker: WorkerId) -> u64 {
    u64::MAX - worker as u64
}

impl LabelId {
    /// Issued by a worker for itself ([`worker_origin`]): no client waits
    /// for its status.
    pub fn from_worker(self) -> bool {
        self.origin >= worker_origin(WorkerId::MAX)
    }

    pub fn as_u128(self) -> u128 {
        ((self.nanos as u128) << 64) | self.origin as u128
    }
    pub fn from_u128(v: u128) -> Self {
        LabelId {
            nanos: (v >> 64) as u64,
            origin: v as u64,
        }
    }
}

impl fmt::Display for LabelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.as_u128())
    }
}

impl fmt::Debug for LabelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LabelId({self})")
    }
}

/// Issues strictly increasing ids for one origin, lock-free. When the clock
/// does not advance between two calls (or steps back) the previous value + 1
/// is used, so order of issue is order of ids.
#[derive(Debug)]
pub struct LabelIdGen {
    origin: u64,
    last: AtomicU64,
}

impl LabelIdGen {
    pub fn new(origin: u64) -> Self {
        LabelIdGen {
            origin,
            last: AtomicU64::new(0),
        }
    }

    pub fn origin(&self) -> u64 {
        self.origin
    }

    pub fn next(&self) -> LabelId {
        let now = now_nanos();
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let candidate = now.max(last + 1);
            match self.last.compare_exchange_weak(
                last,
                candidate,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return LabelId {
                        nanos: candidate,
                        origin: self.origin,
                    }
                }
                Err(seen) => last = seen,
            }
        }
    }
}

pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_strictly_increasing_and_unique() {
        let g = LabelIdGen::new(7);
        let mut prev = g.next();
        for _ in 0..100_000 {
            let id = g.next();
            assert!(id > prev);
            assert_eq!(id.origin, 7);
            prev = id;
        }
    }

    #[test]
    fn u128_round_trip_keeps_order() {
        let a = LabelId {
            nanos: 5,
            origin: u64::MAX,
        };
        let b = LabelId {
            nanos: 6,
            origin: 0,
        };
        assert!(a < b && a.as_u128() < b.as_u128());
        assert_eq!(LabelId::from_u128(a.as_u128()), a);
    }
}

/// The last few label ids a component took, so that a label delivered twice
/// (a queue's redelivery, a push repeated by a fault) runs once there: a
/// read run twice puts a second result nobody takes, which would hold
/// warehouse room for good. Bounded: the oldest id is forgotten first.
#[derive(Debug)]
pub struct RecentIds {
    seen: std::collections::HashSet<LabelId>,
    order: std::collections::VecDeque<LabelId>,
    capacity: usize,
}

impl RecentIds {
    pub fn new(capacity: usize) -> RecentIds {
        assert!(capacity > 0, "RecentIds holds at least one id");
        RecentIds {
            seen: std::collections::HashSet::with_capacity(capacity),
            order: std::collections::VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// Whether `id` is among the last `capacity` recorded.
    pub fn contains(&self, id: LabelId) -> bool {
        self.seen.contains(&id)
    }

    /// Records `id`; false if it is among the last `capacity` recorded.
    pub fn insert(&mut self, id: LabelId) -> bool {
        if !self.seen.insert(id) {
            return false;
        }
        if self.order.len() == self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.order.push_back(id);
        debug_assert_eq!(self.seen.len(), self.order.len());
        true
    }
}

#[cfg(test)]
mod recent_tests {
    use super::*;

    #[test]
    fn an_id_is_new_once_until_it_is_among_the_oldest_forgotten() {
        let id = |n| LabelId {
            nanos: n,
            origin: 1,
        };
        let mut r = RecentIds::new(3);
        assert!(!r.contains(id(1)));
        assert!(r.insert(id(1)));
        assert!(r.contains(id(1)) && !r.insert(id(1)));
        assert!(r.insert(id(2)) && r.insert(id(3)));
        assert!(!r.insert(id(1)), "still among the last 3");
        assert!(r.insert(id(4)), "a fourth forgets the first");
        assert!(r.insert(id(1)));
        assert!(!r.insert(id(4)));
    }
}
