//! A worker's capacity: bytes promised to writes in flight, on top of what
//! its stack holds, so that concurrent lanes cannot together overshoot the
//! capacity the worker declares (whatever the backend).

use labios_stack::Backend;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct Space {
    capacity: u64,
    reserved: AtomicU64,
}

impl Space {
    pub fn new(capacity: u64) -> Space {
        Space {
            capacity,
            reserved: AtomicU64::new(0),
        }
    }

    /// Reserves room for `len` more bytes beside what `storage` holds;
    /// false if that would pass the capacity. Release with
    /// [`Space::release`] once the write is done.
    pub fn try_reserve(&self, storage: &dyn Backend, len: u64) -> bool {
        let mut reserved = self.reserved.load(Ordering::Relaxed);
        loop {
            let total = storage.used().saturating_add(reserved).saturating_add(len);
            if total > self.capacity {
                return false;
            }
            match self.reserved.compare_exchange_weak(
                reserved,
                reserved + len,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => reserved = seen,
            }
        }
    }

    /// Whether `len` more bytes would fit now (a reservation may still
    /// find otherwise a moment later).
    pub fn has_room(&self, storage: &dyn Backend, len: u64) -> bool {
        let reserved = self.reserved.load(Ordering::Relaxed);
        storage.used().saturating_add(reserved).saturating_add(len) <= self.capacity
    }

    pub fn release(&self, len: u64) {
        let was = self.reserved.fetch_sub(len, Ordering::AcqRel);
        assert!(was >= len, "released {len} bytes of {was} reserved");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_stack::backends::memory::MemoryBackend;

    #[test]
    fn reservations_stop_at_capacity() {
        let held = MemoryBackend::new(1 << 20);
        let s = Space::new(100);
        assert!(s.try_reserve(&held, 60));
        assert!(s.has_room(&held, 40) && !s.has_room(&held, 41));
        assert!(!s.try_reserve(&held, 41));
        assert!(s.try_reserve(&held, 40));
        s.release(100);
        assert!(s.try_reserve(&held, 100));
    }
}
