//! The prefetcher of IRIS (3.4.2). A read mapped to objects loses the
//! store's own read-ahead (the next bucket is another key), so the bridge
//! guesses the next reads itself from each file's last ones: sequential
//! (each starts where the previous ended) or strided (the same distance
//! between starts twice in a row), and names `depth` reads ahead.

use std::collections::HashMap;
use std::ops::Range;

/// Files whose history is kept; beyond, the histories start over.
const TRACKED: usize = 4096;

/// What a file's reads look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Sequential,
    /// Starts `n` bytes apart (negative: backwards).
    Strided(i64),
    Random,
}

#[derive(Debug, Clone, Copy)]
struct History {
    offset: u64,
    len: u64,
    delta: Option<i64>,
}

#[derive(Debug)]
pub struct Prefetcher {
    depth: u32,
    files: HashMap<String, History>,
}

impl Prefetcher {
    /// `depth`: reads fetched ahead once a pattern shows (0: none).
    pub fn new(depth: u32) -> Prefetcher {
        Prefetcher {
            depth,
            files: HashMap::new(),
        }
    }

    /// Records a read and returns the pattern and the byte ranges worth
    /// fetching ahead, nearest first.
    pub fn on_read(&mut self, path: &str, offset: u64, len: u64) -> (Pattern, Vec<Range<u64>>) {
        if self.files.len() >= TRACKED && !self.files.contains_key(path) {
            self.files.clear();
        }
        let now = History {
            offset,
            len,
            delta: None,
        };
        let Some(prev) = self.files.insert(path.to_string(), now) else {
            return (Pattern::Random, Vec::new());
        };
        let delta = offset as i128 - prev.offset as i128;
        let delta = i64::try_from(delta).ok();
        self.files.get_mut(path).expect("just inserted").delta = delta;
        let depth = u64::from(self.depth);
        let end = offset.saturating_add(len);
        if offset == prev.offset.saturating_add(prev.len) && len > 0 {
            return (
                Pattern::Sequential,
                std::iter::once(end..end.saturating_add(depth * len)).collect(),
            );
        }
        match (delta, prev.delta) {
            (Some(d), Some(p)) if d == p && d != 0 => {
                let ahead = (1..=depth as i64)
                    .filter_map(|k| {
                        let start =
                            u64::try_from(offset as i128 + (k as i128) * (d as i128)).ok()?;
                        Some(start..start.saturating_add(len))
                    })
                    .collect();
                (Pattern::Strided(d), ahead)
            }
            _ => (Pattern::Random, Vec::new()),
        }
    }

    /// Forgets a removed file.
    pub fn forget(&mut self, path: &str) {
        self.files.remove(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_and_strided_reads_are_recognized() {
        let mut p = Prefetcher::new(2);
        assert_eq!(p.on_read("f", 0, 10), (Pattern::Random, vec![]));
        let (pattern, ahead) = p.on_read("f", 10, 10);
        assert_eq!(
            (pattern, ahead.len(), ahead[0].clone()),
            (Pattern::Sequential, 1, 20..40)
        );
        // Strided: needs the same distance twice.
        let mut p = Prefetcher::new(2);
        p.on_read("g", 0, 4);
        assert_eq!(p.on_read("g", 100, 4).0, Pattern::Random);
        assert_eq!(
            p.on_read("g", 200, 4),
            (Pattern::Strided(100), vec![300..304, 400..404])
        );
        // Backwards, stopping at the start of the file.
        let mut p = Prefetcher::new(3);
        p.on_read("h", 300, 4);
        p.on_read("h", 200, 4);
        let (pattern, ahead) = p.on_read("h", 100, 4);
        assert_eq!(
            (pattern, ahead.len(), ahead[0].clone()),
            (Pattern::Strided(-100), 1, 0..4)
        );
        // Files are tracked apart.
        assert_eq!(p.on_read("i", 104, 4).0, Pattern::Random);
    }
}
