//! When a worker publishes its score (article 3.3.3a (c)): "at an interval or
//! if substantial change of status occurs". Publishing on every label would
//! flood the inventory; publishing only on the interval would let a
//! scheduler keep piling work on a worker whose queue just filled up.

use std::time::{Duration, Instant};

/// A score change larger than this is published at once.
pub const SIGNIFICANT_CHANGE: f64 = 0.1;

#[derive(Debug, Clone)]
pub struct ScoreReporter {
    interval: Duration,
    last: Option<(f64, Instant)>,
}

impl ScoreReporter {
    pub fn new(interval: Duration) -> Self {
        ScoreReporter {
            interval,
            last: None,
        }
    }

    /// Whether `score` should be published now: never published yet, the
    /// interval has passed, or the score moved by more than
    /// [`SIGNIFICANT_CHANGE`].
    pub fn due(&self, score: f64, now: Instant) -> bool {
        match self.last {
            None => true,
            Some((last, at)) => {
                now.saturating_duration_since(at) >= self.interval
                    || (score - last).abs() > SIGNIFICANT_CHANGE
            }
        }
    }

    pub fn published(&mut self, score: f64, now: Instant) {
        self.last = Some((score, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_first_then_on_interval_or_significant_change() {
        let t0 = Instant::now();
        let mut r = ScoreReporter::new(Duration::from_millis(1000));
        assert!(r.due(0.5, t0));
        r.published(0.5, t0);
        let soon = t0 + Duration::from_millis(10);
        assert!(!r.due(0.5, soon));
        assert!(!r.due(0.59, soon));
        assert!(!r.due(0.41, soon));
        assert!(r.due(0.61, soon));
        assert!(r.due(0.39, soon));
        assert!(r.due(0.5, t0 + Duration::from_millis(1000)));
        r.published(0.61, soon);
        assert!(!r.due(0.65, soon + Duration::from_millis(999)));
    }
}
