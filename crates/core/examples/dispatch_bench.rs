//! Shuffle + schedule throughput per policy, one thread:
//! `cargo run --release -p labios-core --example dispatch_bench [labels] [workers] [batch] [runs]`
//! Each policy runs `runs` times; the best and the median run are printed
//! (the best is the least disturbed by other processes on the machine).

use labios_core::{bench_dispatch, BenchReport, Policy};
use labios_label::Weights;

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (labels, workers, batch, runs) = (arg(1, 100_000), arg(2, 8), arg(3, 1024), arg(4, 5));
    let weights = Weights::LOW_LATENCY;
    let policies = [
        ("round-robin", Policy::RoundRobin),
        ("random", Policy::Random),
        (
            "constraint",
            Policy::Constraint {
                weights,
                bytes_per_worker: 16 << 20,
            },
        ),
        ("minmax", Policy::MinMax { weights }),
    ];
    println!("{labels} labels, {workers} workers, batches of {batch}, {runs} runs each");
    for (name, policy) in policies {
        let mut reports: Vec<BenchReport> = Vec::new();
        for _ in 0..runs.max(1) {
            match bench_dispatch(labels, workers, batch, policy.clone()) {
                Ok(r) => reports.push(r),
                Err(e) => {
                    println!("{name:>12}: failed: {e}");
                    break;
                }
            }
        }
        reports.sort_by(|a, b| b.labels_per_sec.total_cmp(&a.labels_per_sec));
        let (Some(best), Some(median)) = (reports.first(), reports.get(reports.len() / 2)) else {
            continue;
        };
        println!(
            "{name:>12}: best {:>9.0} labels/s, median {:>9.0}  ({} tasks, {} supertasks, {} aggregated, labels/worker {}..{})",
            best.labels_per_sec,
            median.labels_per_sec,
            best.tasks,
            best.supertasks,
            best.aggregated,
            best.min_per_worker,
            best.max_per_worker
        );
    }
}
