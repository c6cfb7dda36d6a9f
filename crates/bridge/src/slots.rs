//! Per-file state behind one async lock per file, as the aggregator and
//! the virtual files keep it.
//!
//! The hazard this module exists for: a caller fetches a file's slot, then
//! waits for its lock. If the slot is dropped from the map meanwhile, that
//! caller changes an orphan that nobody will ever look at again, and what
//! it acknowledged is lost (an acknowledged append read back as zeros).
//! So a slot leaves the map only through [`Slots::retire`], which checks
//! under the map's lock that no one else holds it: every holder got its
//! handle under that same lock, so none can appear while it is held.

use std::collections::HashMap;
use std::sync::Arc;

/// The lock of one file's state.
pub type Slot<T> = Arc<tokio::sync::Mutex<T>>;

#[derive(Debug)]
pub struct Slots<T> {
    map: parking_lot::Mutex<HashMap<String, Slot<T>>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            map: Default::default(),
        }
    }
}

impl<T: Default> Slots<T> {
    /// The slot of `path`, made if missing. `idle` may drop slots nobody
    /// else holds whose state it calls idle (it sees a slot only when its
    /// lock is free), once more than `bound` files are kept.
    pub fn get_or_insert(&self, path: &str, bound: usize, idle: impl Fn(&T) -> bool) -> Slot<T> {
        let mut map = self.map.lock();
        if map.len() > bound {
            map.retain(|_, slot| {
                Arc::strong_count(slot) > 1 || slot.try_lock().map_or(true, |g| !idle(&g))
            });
        }
        map.entry(path.to_string()).or_default().clone()
    }
}

impl<T> Slots<T> {
    /// The slot of `path`, if one exists.
    pub fn get(&self, path: &str) -> Option<Slot<T>> {
        self.map.lock().get(path).cloned()
    }

    /// Every file with a slot. Its handles are not kept, so that
    /// [`Slots::retire`] can drop a slot the caller empties meanwhile.
    pub fn paths(&self) -> Vec<String> {
        self.map.lock().keys().cloned().collect()
    }

    /// Drops `slot` (the caller's handle of `path`'s slot, whose state the
    /// caller has emptied under its lock) from the map, unless another
    /// caller holds it too: that one may be about to change it, and must
    /// find it again afterwards.
    pub fn retire(&self, path: &str, slot: &Slot<T>) {
        let mut map = self.map.lock();
        // The map's handle and the caller's.
        if Arc::strong_count(slot) == 2 && map.get(path).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            map.remove(path);
        }
    }

    /// Files with a slot.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_someone_holds_is_not_retired() {
        let slots: Slots<Option<u32>> = Slots::default();
        let mine = slots.get_or_insert("f", 16, |_| true);
        let theirs = slots.get_or_insert("f", 16, |_| true);
        slots.retire("f", &mine);
        assert_eq!(slots.len(), 1, "another caller still holds the slot");
        assert!(Arc::ptr_eq(&slots.get("f").unwrap(), &theirs));
        drop(theirs);
        slots.retire("f", &mine);
        assert!(slots.is_empty());
    }

    #[test]
    fn only_idle_unheld_slots_are_evicted_past_the_bound() {
        let slots: Slots<Option<u32>> = Slots::default();
        let held = slots.get_or_insert("held", 0, |s| s.is_none());
        *slots
            .get_or_insert("busy", 0, |s| s.is_none())
            .try_lock()
            .unwrap() = Some(1);
        slots.get_or_insert("idle", 0, |s| s.is_none());
        slots.get_or_insert("new", 0, |s| s.is_none());
        let mut kept = slots.paths();
        kept.sort();
        assert_eq!(kept, ["busy", "held", "new"]);
        drop(held);
    }
}
