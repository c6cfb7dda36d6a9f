//! The worker manager's sorted worker list (article 3.3.3b): workers update
//! their scores constantly and independently, so a full sort per update
//! would cost the manager its responsiveness. Workers are kept in bins over
//! [0, 1] ("approximate bin sorting"): an update only touches the worker's
//! old and new bin, and costs time proportional to those bins' sizes.
//! Inside a bin workers stay sorted, so iteration is exactly by score.

use labios_label::WorkerId;
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct ScoreBuckets {
    /// Bin i holds scores in [i/n, (i+1)/n), best first; the top bin also
    /// holds 1.0.
    bins: Vec<Vec<(WorkerId, f64)>>,
    bin_of: HashMap<WorkerId, usize>,
}

impl ScoreBuckets {
    /// `buckets` bins (at least one).
    pub fn new(buckets: usize) -> Self {
        ScoreBuckets {
            bins: vec![Vec::new(); buckets.max(1)],
            bin_of: HashMap::new(),
        }
    }

    fn bin_for(&self, score: f64) -> usize {
        let n = self.bins.len();
        if score.is_nan() {
            return 0;
        }
        ((score.clamp(0.0, 1.0) * n as f64) as usize).min(n - 1)
    }

    /// Sets a worker's score, moving it only between its old and new bin.
    pub fn update(&mut self, worker: WorkerId, score: f64) {
        let score = if score.is_nan() { 0.0 } else { score };
        if let Some(old) = self.bin_of.get(&worker).copied() {
            self.bins[old].retain(|(w, _)| *w != worker);
        }
        let bin = self.bin_for(score);
        let entries = &mut self.bins[bin];
        let at = entries.partition_point(|(w, s)| *s > score || (*s == score && *w < worker));
        entries.insert(at, (worker, score));
        self.bin_of.insert(worker, bin);
    }

    pub fn remove(&mut self, worker: WorkerId) {
        if let Some(bin) = self.bin_of.remove(&worker) {
            self.bins[bin].retain(|(w, _)| *w != worker);
        }
    }

    /// The `k` best workers, best first.
    pub fn top(&self, k: usize) -> Vec<(WorkerId, f64)> {
        self.bins.iter().rev().flatten().take(k).copied().collect()
    }

    /// Every worker, best first.
    pub fn sorted(&self) -> Vec<(WorkerId, f64)> {
        self.top(usize::MAX)
    }

    pub fn len(&self) -> usize {
        self.bin_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bin_of.is_empty()
    }

    /// The workers of bin `i` (0 = lowest scores), best first.
    pub fn bin(&self, i: usize) -> &[(WorkerId, f64)] {
        self.bins.get(i).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_best_first_across_and_within_bins() {
        let mut b = ScoreBuckets::new(10);
        for (w, s) in [
            (1, 0.15),
            (2, 0.95),
            (3, 0.12),
            (4, 1.0),
            (5, 0.0),
            (6, 0.5),
        ] {
            b.update(w, s);
        }
        let order: Vec<WorkerId> = b.sorted().iter().map(|(w, _)| *w).collect();
        assert_eq!(order, vec![4, 2, 6, 1, 3, 5]);
        assert_eq!(b.top(2), vec![(4, 1.0), (2, 0.95)]);
        assert_eq!(b.len(), 6);
        b.remove(4);
        assert_eq!(b.top(1), vec![(2, 0.95)]);
        assert_eq!(b.bin(9), &[(2, 0.95)]);
    }

    #[test]
    fn an_update_touches_only_the_old_and_new_bins() {
        let mut b = ScoreBuckets::new(10);
        for w in 0..100u32 {
            b.update(w, w as f64 / 100.0);
        }
        let before: Vec<Vec<(WorkerId, f64)>> = (0..10).map(|i| b.bin(i).to_vec()).collect();
        // Worker 25 moves from bin 2 to bin 7.
        b.update(25, 0.77);
        for (i, bin) in before.iter().enumerate() {
            if i == 2 || i == 7 {
                assert_ne!(b.bin(i), bin.as_slice(), "bin {i} must change");
            } else {
                assert_eq!(b.bin(i), bin.as_slice(), "bin {i} must not change");
            }
        }
        assert!(!b.bin(2).iter().any(|(w, _)| *w == 25));
        let bin7: Vec<WorkerId> = b.bin(7).iter().map(|(w, _)| *w).collect();
        assert_eq!(bin7, vec![79, 78, 25, 77, 76, 75, 74, 73, 72, 71, 70]);
        // A move within one bin touches only that bin.
        let others: Vec<Vec<(WorkerId, f64)>> = (0..10).map(|i| b.bin(i).to_vec()).collect();
        b.update(25, 0.705);
        for (i, bin) in others.iter().enumerate().filter(|(i, _)| *i != 7) {
            assert_eq!(b.bin(i), bin.as_slice());
        }
        assert_eq!(b.bin(7)[9..], [(25, 0.705), (70, 0.7)]);
    }

    #[test]
    fn out_of_range_scores_are_clamped() {
        let mut b = ScoreBuckets::new(4);
        b.update(1, -3.0);
        b.update(2, 7.0);
        b.update(3, f64::NAN);
        assert_eq!(b.bin(0).len(), 2);
        assert_eq!(b.bin(3), &[(2, 7.0)]);
    }
}
