//! The cache manager of IRIS (3.4.4): fixed-size blocks of bridged files
//! kept in memory up to a byte bound, evicted least recently used (LRU)
//! or least frequently used (LFU, ties to the least recent).

use bytes::Bytes;
pub use labios_mounts::Policy;
use std::collections::BTreeMap;

/// Counters of a cache's effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

type Key = (String, u64);

#[derive(Debug)]
struct Block {
    data: Bytes,
    uses: u64,
    rank: (u64, u64),
}

/// Blocks by (file, block index), bounded by bytes.
#[derive(Debug)]
pub struct BlockCache {
    policy: Policy,
    capacity: u64,
    used: u64,
    clock: u64,
    blocks: BTreeMap<Key, Block>,
    /// Eviction order: the first entry goes first.
    order: BTreeMap<(u64, u64), Key>,
    stats: CacheStats,
}

impl BlockCache {
    pub fn new(policy: Policy, capacity: u64) -> BlockCache {
        BlockCache {
            policy,
            capacity,
            used: 0,
            clock: 0,
            blocks: BTreeMap::new(),
            order: BTreeMap::new(),
            stats: CacheStats::default(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    fn rank(&mut self, uses: u64) -> (u64, u64) {
        self.clock += 1;
        match self.policy {
            Policy::Lru => (0, self.clock),
            Policy::Lfu => (uses, self.clock),
        }
    }

    /// Block `index` of `path`, counted as a hit or a miss.
    pub fn get(&mut self, path: &str, index: u64) -> Option<Bytes> {
        let key = (path.to_string(), index);
        let Some(uses) = self.blocks.get(&key).map(|b| b.uses + 1) else {
            self.stats.misses += 1;
            return None;
        };
        self.stats.hits += 1;
        let rank = self.rank(uses);
        let b = self.blocks.get_mut(&key).expect("present");
        self.order.remove(&b.rank);
        b.uses = uses;
        b.rank = rank;
        self.order.insert(rank, key);
        Some(b.data.clone())
    }

    /// Whether the block is held, without counting or reordering.
    pub fn contains(&self, path: &str, index: u64) -> bool {
        self.blocks.contains_key(&(path.to_string(), index))
    }

    pub fn insert(&mut self, path: &str, index: u64, data: Bytes) {
        let key = (path.to_string(), index);
        self.remove(&key);
        if data.len() as u64 > self.capacity {
            return;
        }
        let rank = self.rank(1);
        self.used += data.len() as u64;
        self.order.insert(rank, key.clone());
        self.blocks.insert(
            key,
            Block {
                data,
                uses: 1,
                rank,
            },
        );
        while self.used > self.capacity {
            let Some((_, victim)) = self.order.pop_first() else {
                break;
            };
            if let Some(b) = self.blocks.remove(&victim) {
                self.used -= b.data.len() as u64;
                self.stats.evictions += 1;
            }
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(b) = self.blocks.remove(key) {
            self.order.remove(&b.rank);
            self.used -= b.data.len() as u64;
        }
    }

    /// Drops blocks `first..=last` of `path`, and any of its blocks shorter
    /// than `block` (they marked an end of file a write may have moved).
    pub fn invalidate(&mut self, path: &str, first: u64, last: u64, block: u64) {
        let stale: Vec<Key> = self
            .blocks
            .range((path.to_string(), 0)..=(path.to_string(), u64::MAX))
            .filter(|((_, i), b)| (first..=last).contains(i) || (b.data.len() as u64) < block)
            .map(|(k, _)| k.clone())
            .collect();
        for k in stale {
            self.remove(&k);
        }
    }

    /// Drops every block of `path`.
    pub fn forget(&mut self, path: &str) {
        self.invalidate(path, 0, u64::MAX, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: usize) -> Bytes {
        Bytes::from(vec![0; n])
    }

    #[test]
    fn lru_evicts_the_least_recent() {
        let mut c = BlockCache::new(Policy::Lru, 30);
        for i in 0..3 {
            c.insert("f", i, block(10));
        }
        c.get("f", 0);
        c.insert("f", 3, block(10));
        assert!(c.contains("f", 0) && !c.contains("f", 1));
        assert_eq!(c.used(), 30);
        assert_eq!(
            c.stats(),
            CacheStats {
                hits: 1,
                misses: 0,
                evictions: 1
            }
        );
    }

    #[test]
    fn lfu_keeps_the_popular_through_a_scan() {
        let mut c = BlockCache::new(Policy::Lfu, 30);
        c.insert("hot", 0, block(10));
        for _ in 0..3 {
            c.get("hot", 0);
        }
        for i in 0..5 {
            c.insert("scan", i, block(10));
        }
        assert!(c.contains("hot", 0));
        let mut lru = BlockCache::new(Policy::Lru, 30);
        lru.insert("hot", 0, block(10));
        lru.get("hot", 0);
        for i in 0..5 {
            lru.insert("scan", i, block(10));
        }
        assert!(!lru.contains("hot", 0));
    }

    #[test]
    fn invalidation_is_per_file_and_range() {
        let mut c = BlockCache::new(Policy::Lru, 100);
        for i in 0..4 {
            c.insert("f", i, block(10));
            c.insert("g", i, block(10));
        }
        c.insert("f", 4, block(3));
        c.invalidate("f", 1, 2, 10);
        assert!(
            c.contains("f", 0) && !c.contains("f", 1) && !c.contains("f", 2) && c.contains("f", 3)
        );
        assert!(!c.contains("f", 4), "the short end-of-file block goes too");
        c.forget("g");
        assert!((0..4).all(|i| !c.contains("g", i)));
        assert_eq!(c.used(), 20);
        // A block larger than the whole cache is not kept.
        c.insert("big", 0, block(101));
        assert!(!c.contains("big", 0));
    }
}
