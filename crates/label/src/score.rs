//! The worker score (article 3.3.3a, Table 2): five variables in [0, 1] times
//! weights that express the scheduling priority. The score is what the
//! constraint-based scheduler ranks workers by.

use crate::worker::{WorkerState, WorkerStatus};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    pub availability: f64,
    pub capacity: f64,
    pub load: f64,
    pub speed: f64,
    pub energy: f64,
}

impl Weights {
    pub const LOW_LATENCY: Weights = Weights {
        availability: 0.5,
        capacity: 0.0,
        load: 0.35,
        speed: 0.15,
        energy: 0.0,
    };
    pub const ENERGY_SAVINGS: Weights = Weights {
        availability: 0.0,
        capacity: 0.15,
        load: 0.2,
        speed: 0.15,
        energy: 0.5,
    };
    pub const HIGH_BANDWIDTH: Weights = Weights {
        availability: 0.0,
        capacity: 0.15,
        load: 0.15,
        speed: 0.70,
        energy: 0.0,
    };

    /// A Table 2 profile by name, as used in configuration.
    pub fn profile(name: &str) -> Option<Weights> {
        match name {
            "low-latency" => Some(Self::LOW_LATENCY),
            "energy-savings" => Some(Self::ENERGY_SAVINGS),
            "high-bandwidth" => Some(Self::HIGH_BANDWIDTH),
            _ => None,
        }
    }

    /// Weights must be non-negative and sum to 1 so scores stay in [0, 1].
    pub fn validate(&self) -> Result<(), String> {
        let all = [
            self.availability,
            self.capacity,
            self.load,
            self.speed,
            self.energy,
        ];
        if all.iter().any(|w| !w.is_finite() || *w < 0.0) {
            return Err("weights must be finite and >= 0".into());
        }
        let sum: f64 = all.iter().sum();
        if (sum - 1.0).abs() > 1e-6 {
            return Err(format!("weights must sum to 1, they sum to {sum}"));
        }
        Ok(())
    }

    /// Score = sum of weight_i * variable_i. Variables: availability 1 when
    /// active; remaining/total capacity; 1 - queue/max_queue (an idle worker
    /// scores high); speed/5; (6 - energy)/5 (the frugal worker scores high).
    pub fn score(&self, w: &WorkerStatus) -> f64 {
        let availability = if w.state == WorkerState::Active {
            1.0
        } else {
            0.0
        };
        let capacity = if w.spec.capacity == 0 {
            0.0
        } else {
            w.remaining() as f64 / w.spec.capacity as f64
        };
        let load = 1.0 - (w.queued as f64 / w.spec.max_queue.max(1) as f64).min(1.0);
        let speed = w.spec.speed.clamp(1, 5) as f64 / 5.0;
        let energy = (6 - w.spec.energy.clamp(1, 5)) as f64 / 5.0;
        let s = self.availability * availability
            + self.capacity * capacity
            + self.load * load
            + self.speed * speed
            + self.energy * energy;
        s.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::WorkerSpec;

    fn worker(speed: u8, energy: u8, used: u64, queued: u32, state: WorkerState) -> WorkerStatus {
        let spec = WorkerSpec {
            id: 0,
            tier: "t".into(),
            speed,
            energy,
            capacity: 100,
            max_queue: 10,
            functions: true,
        };
        WorkerStatus {
            state,
            used,
            queued,
            ..WorkerStatus::new(spec)
        }
    }

    #[test]
    fn table2_profiles_sum_to_one() {
        for w in [
            Weights::LOW_LATENCY,
            Weights::ENERGY_SAVINGS,
            Weights::HIGH_BANDWIDTH,
        ] {
            w.validate().unwrap();
        }
    }

    #[test]
    fn score_matches_formula() {
        let w = worker(5, 1, 25, 5, WorkerState::Active);
        // low latency: 0.5*1 + 0*0.75 + 0.35*0.5 + 0.15*1 + 0*1
        assert!((Weights::LOW_LATENCY.score(&w) - (0.5 + 0.175 + 0.15)).abs() < 1e-9);
        // high bandwidth: 0.15*0.75 + 0.15*0.5 + 0.7*1
        assert!((Weights::HIGH_BANDWIDTH.score(&w) - (0.1125 + 0.075 + 0.7)).abs() < 1e-9);
        // energy savings: 0.15*0.75 + 0.2*0.5 + 0.15*1 + 0.5*1
        assert!((Weights::ENERGY_SAVINGS.score(&w) - (0.1125 + 0.1 + 0.15 + 0.5)).abs() < 1e-9);
    }

    #[test]
    fn profiles_prefer_what_they_promise() {
        let fast_hungry = worker(5, 5, 0, 0, WorkerState::Active);
        let slow_frugal = worker(1, 1, 0, 0, WorkerState::Active);
        assert!(
            Weights::HIGH_BANDWIDTH.score(&fast_hungry)
                > Weights::HIGH_BANDWIDTH.score(&slow_frugal)
        );
        assert!(
            Weights::ENERGY_SAVINGS.score(&slow_frugal)
                > Weights::ENERGY_SAVINGS.score(&fast_hungry)
        );
        let suspended = worker(5, 1, 0, 0, WorkerState::Suspended);
        assert!(Weights::LOW_LATENCY.score(&suspended) < Weights::LOW_LATENCY.score(&slow_frugal));
    }

    #[test]
    fn bad_weights_are_refused() {
        let w = Weights {
            availability: 0.5,
            capacity: 0.5,
            load: 0.5,
            speed: 0.0,
            energy: 0.0,
        };
        assert!(w.validate().unwrap_err().contains("sum to 1"));
    }
}
