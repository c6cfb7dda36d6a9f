//! Dispatcher settings: the batching window and size (article 3.3.2c), the
//! shuffler's aggregation switch, and the scheduling policy with its worker
//! score weights (article 3.5.2, Table 2).

use super::scheduler::Policy;
use labios_label::{Error, Result, Weights};
use serde::{Deserialize, Serialize};

pub const MAX_BATCH: usize = 1 << 20;
pub const MAX_WINDOW_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatcherConfig {
    /// Most labels taken from a queue per scheduling round.
    pub batch_size: usize,
    /// Under load, how long to wait for a batch to fill; also the stagnation
    /// timer. A lone label on an idle queue never waits for it.
    pub batch_window_ms: u64,
    /// Merge consecutive independent writes into one task.
    pub aggregation: bool,
    /// "round-robin", "random", "constraint" or "minmax".
    pub policy: String,
    /// Table 2 profile: "low-latency", "energy-savings", "high-bandwidth" or
    /// "custom" (then `custom_weights` applies).
    pub weights: String,
    pub custom_weights: Option<Weights>,
    /// Constraint policy: one more worker per this many bytes in a batch.
    pub bytes_per_worker: u64,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            batch_size: 1024,
            batch_window_ms: 5,
            aggregation: true,
            policy: "round-robin".into(),
            weights: "low-latency".into(),
            custom_weights: None,
            bytes_per_worker: 16 << 20,
        }
    }
}

fn invalid(field: &str, why: String) -> Error {
    Error::InvalidArgument(format!("dispatcher.{field}: {why}"))
}

impl DispatcherConfig {
    /// Checks every field; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_BATCH).contains(&self.batch_size) {
            return Err(invalid(
                "batch_size",
                format!("must be 1..={MAX_BATCH}, got {}", self.batch_size),
            ));
        }
        if self.batch_window_ms > MAX_WINDOW_MS {
            return Err(invalid(
                "batch_window_ms",
                format!(
                    "must be at most {MAX_WINDOW_MS}, got {}",
                    self.batch_window_ms
                ),
            ));
        }
        if self.bytes_per_worker == 0 {
            return Err(invalid("bytes_per_worker", "must be > 0".into()));
        }
        self.policy().map(|_| ())
    }

    /// The configured score weights.
    pub fn weights(&self) -> Result<Weights> {
        match (self.weights.as_str(), &self.custom_weights) {
            ("custom", Some(w)) => {
                w.validate().map_err(|e| invalid("custom_weights", e))?;
                Ok(*w)
            }
            ("custom", None) => Err(invalid(
                "custom_weights",
                "required when weights = \"custom\"".into(),
            )),
            (name, Some(_)) => Err(invalid(
                "custom_weights",
                format!("only used when weights = \"custom\", but weights = {name:?}"),
            )),
            (name, None) => Weights::profile(name).ok_or_else(|| {
                invalid(
                    "weights",
                    format!(
                        "unknown profile {name:?} (low-latency, energy-savings, high-bandwidth, custom)"
                    ),
                )
            }),
        }
    }

    /// The configured scheduling policy.
    pub fn policy(&self) -> Result<Policy> {
        let weights = self.weights()?;
        match self.policy.as_str() {
            "round-robin" => Ok(Policy::RoundRobin),
            "random" => Ok(Policy::Random),
            "constraint" => Ok(Policy::Constraint {
                weights,
                bytes_per_worker: self.bytes_per_worker,
            }),
            "minmax" => Ok(Policy::MinMax { weights }),
            other => Err(invalid(
                "policy",
                format!("unknown policy {other:?} (round-robin, random, constraint, minmax)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip() {
        let c = DispatcherConfig::default();
        c.validate().unwrap();
        assert_eq!(c.policy().unwrap(), Policy::RoundRobin);
        let back: DispatcherConfig =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let partial: DispatcherConfig = serde_json::from_str(r#"{"policy":"minmax"}"#).unwrap();
        assert_eq!(partial.batch_size, 1024);
        assert!(serde_json::from_str::<DispatcherConfig>(r#"{"batch_sise":1}"#).is_err());
    }

    #[test]
    fn errors_name_the_bad_field() {
        let bad = [
            (
                "batch_size",
                DispatcherConfig {
                    batch_size: 0,
                    ..Default::default()
                },
            ),
            (
                "batch_window_ms",
                DispatcherConfig {
                    batch_window_ms: 1 << 40,
                    ..Default::default()
                },
            ),
            (
                "bytes_per_worker",
                DispatcherConfig {
                    bytes_per_worker: 0,
                    ..Default::default()
                },
            ),
            (
                "policy",
                DispatcherConfig {
                    policy: "fastest".into(),
                    ..Default::default()
                },
            ),
            (
                "weights",
                DispatcherConfig {
                    weights: "cheap".into(),
                    ..Default::default()
                },
            ),
            (
                "custom_weights",
                DispatcherConfig {
                    weights: "custom".into(),
                    ..Default::default()
                },
            ),
            (
                "custom_weights",
                DispatcherConfig {
                    custom_weights: Some(Weights::HIGH_BANDWIDTH),
                    ..Default::default()
                },
            ),
            (
                "custom_weights",
                DispatcherConfig {
                    weights: "custom".into(),
                    custom_weights: Some(Weights {
                        speed: 2.0,
                        ..Weights::HIGH_BANDWIDTH
                    }),
                    ..Default::default()
                },
            ),
        ];
        for (field, c) in bad {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(&format!("dispatcher.{field}:")), "{field}: {e}");
        }
        let custom = DispatcherConfig {
            policy: "constraint".into(),
            weights: "custom".into(),
            custom_weights: Some(Weights::ENERGY_SAVINGS),
            ..Default::default()
        };
        custom.validate().unwrap();
    }
}
