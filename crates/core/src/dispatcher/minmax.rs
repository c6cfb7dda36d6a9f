//! The MinMax policy (article 3.5.2 (4)): place tasks to get the most I/O
//! performance for the least energy, subject to each worker's remaining
//! capacity and load. That is a multidimensional knapsack (NP-hard); like the
//! article we solve it approximately with dynamic programming:
//!
//! - each worker is a knapsack with three budgets: capacity (bytes it can
//!   still store), queue slots (`max_queue - queued`) and its share of the
//!   batch's transfer time: bytes in proportion to its speed class, with
//!   [`SLACK`], so the fastest, most frugal worker takes more than its share
//!   but never the whole batch while others stand idle (load is a constraint
//!   of the problem, not only capacity);
//! - a task placed on worker `w` is worth `(bytes + overhead) * density(w)`,
//!   where `density = score(w) * speed / energy`: throughput per unit of
//!   power, scaled by the configured Table 2 score so load, capacity and
//!   availability still count;
//! - workers are filled best density first, each with a 0/1 knapsack DP over
//!   its capacity discretized into at most [`UNITS`] units (weights rounded
//!   up, so the DP never overfills); if more tasks are chosen than the worker
//!   has slots, the most valuable ones are kept;
//! - what fits nowhere by this rule goes to the least-loaded worker whose
//!   capacity still holds it; if none can, the batch is refused.

use labios_label::{Error, LabelKind, Result, Task, Weights, WorkerStatus};

/// Capacity resolution of the DP.
const UNITS: u64 = 128;
/// Fixed per-task cost in bytes, so tasks that move no data still count.
const OVERHEAD: u64 = 4096;
/// How far past its speed-proportional share of a batch a worker may go.
const SLACK: f64 = 1.5;

struct Bin {
    worker: usize,
    density: f64,
    capacity: u64,
    slots: u64,
    /// Tasks of this batch on the worker, what earlier groups put there
    /// included: the fallback's measure of load.
    placed: u64,
}

/// Bytes a task adds to a worker's storage.
fn stored(task: &Task) -> u64 {
    task.labels
        .iter()
        .filter(|l| l.kind == LabelKind::Write)
        .map(|l| l.size())
        .fold(0, u64::saturating_add)
}

pub(super) fn assign(
    tasks: Vec<Task>,
    workers: &[WorkerStatus],
    eligible: &[usize],
    weights: &Weights,
    out: &mut [Vec<Task>],
) -> Result<()> {
    let mut bins: Vec<Bin> = eligible
        .iter()
        .map(|&i| {
            let w = &workers[i];
            let perf_per_watt = w.spec.speed.clamp(1, 5) as f64 / w.spec.energy.clamp(1, 5) as f64;
            Bin {
                worker: i,
                density: weights.score(w) * perf_per_watt,
                // Less what this batch already gave the worker (pinned
                // tasks, and other groups placed apart).
                capacity: w
                    .remaining()
                    .saturating_sub(out[i].iter().map(stored).sum::<u64>()),
                slots: u64::from(w.spec.max_queue.saturating_sub(w.queued))
                    .saturating_sub(out[i].len() as u64),
                placed: out[i].len() as u64,
            }
        })
        .collect();
    bins.sort_by(|a, b| {
        b.density
            .total_cmp(&a.density)
            .then(workers[a.worker].spec.id.cmp(&workers[b.worker].spec.id))
    });

    let weight: Vec<u64> = tasks.iter().map(stored).collect();
    let value: Vec<u64> = tasks
        .iter()
        .map(|t| t.size().saturating_add(OVERHEAD))
        .collect();
    let batch: u64 = value.iter().fold(0, |a, v| a.saturating_add(*v));
    let speeds: f64 = bins
        .iter()
        .map(|b| workers[b.worker].spec.speed.clamp(1, 5) as f64)
        .sum();
    let share = |bin: &Bin| {
        let speed = workers[bin.worker].spec.speed.clamp(1, 5) as f64;
        (batch as f64 * speed / speeds * SLACK).ceil() as u64
    };
    let mut place: Vec<Option<usize>> = vec![None; tasks.len()];
    let mut open: Vec<usize> = (0..tasks.len()).collect();

    for (b, bin) in bins.iter_mut().enumerate() {
        if open.is_empty() {
            break;
        }
        // One DP dimension: a task costs its transfer bytes (never less
        // than what it stores) against the tighter of capacity and share.
        let budget = bin.capacity.min(share(bin));
        let fitting: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&t| weight[t] <= bin.capacity && value[t] <= budget)
            .collect();
        let mut chosen = knapsack(&fitting, &value, &value, budget);
        if chosen.len() as u64 > bin.slots {
            chosen.sort_unstable_by(|&x, &y| value[y].cmp(&value[x]).then(x.cmp(&y)));
            chosen.truncate(bin.slots as usize);
        }
        for &t in &chosen {
            place[t] = Some(b);
            bin.capacity -= weight[t];
            bin.slots -= 1;
            bin.placed += 1;
        }
        open.retain(|&t| place[t].is_none());
    }

    for t in open {
        let least_loaded = bins
            .iter()
            .enumerate()
            .filter(|(_, bin)| bin.capacity >= weight[t])
            .min_by_key(|(_, bin)| u64::from(workers[bin.worker].queued) + bin.placed)
            .map(|(b, _)| b)
            .ok_or_else(|| Error::Full("all workers are out of capacity".into()))?;
        let bin = &mut bins[least_loaded];
        bin.capacity -= weight[t];
        bin.placed += 1;
        place[t] = Some(least_loaded);
    }

    for (task, b) in tasks.into_iter().zip(place) {
        if let Some(b) = b {
            out[bins[b].worker].push(task);
        }
    }
    Ok(())
}

/// 0/1 knapsack over `items` (indices into `weight`/`value`) within
/// `capacity` bytes; returns the chosen items in ascending order. When
/// everything fits there is nothing to optimize.
fn knapsack(items: &[usize], weight: &[u64], value: &[u64], capacity: u64) -> Vec<usize> {
    let total: u64 = items
        .iter()
        .map(|&t| weight[t])
        .fold(0, u64::saturating_add);
    if total <= capacity {
        return items.to_vec();
    }
    let unit = capacity.div_ceil(UNITS).max(1);
    let budget = (capacity / unit) as usize;
    let cost: Vec<usize> = items
        .iter()
        .map(|&t| weight[t].div_ceil(unit) as usize)
        .collect();
    let width = budget + 1;
    let mut best = vec![0u64; width];
    let mut took = vec![false; items.len() * width];
    for (k, &t) in items.iter().enumerate() {
        let c = cost[k];
        if c > budget {
            continue;
        }
        for room in (c..=budget).rev() {
            let with = best[room - c].saturating_add(value[t]);
            if with > best[room] {
                best[room] = with;
                took[k * width + room] = true;
            }
        }
    }
    let mut chosen = Vec::new();
    let mut room = budget;
    for k in (0..items.len()).rev() {
        if took[k * width + room] {
            chosen.push(items[k]);
            room -= cost[k];
        }
    }
    chosen.reverse();
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatcher::scheduler::{Policy, Scheduler};
    use crate::dispatcher::testing::{read, routed, worker, write};
    use labios_label::WorkerId;
    use std::collections::HashMap;

    fn minmax() -> Scheduler {
        Scheduler::new(Policy::MinMax {
            weights: Weights::LOW_LATENCY,
        })
    }

    #[test]
    fn knapsack_never_overfills_and_packs_well() {
        let weight = vec![60, 50, 50, 30, 10];
        let value: Vec<u64> = weight.clone();
        let items: Vec<usize> = (0..5).collect();
        let chosen = knapsack(&items, &weight, &value, 100);
        let used: u64 = chosen.iter().map(|&i| weight[i]).sum();
        assert!(used <= 100, "{chosen:?}");
        assert!(used >= 90, "poor packing {chosen:?}");
    }

    #[test]
    fn prefers_fast_low_energy_workers() {
        let ws = vec![worker(1, 2, 4), worker(2, 5, 1), worker(3, 5, 5)];
        let plan = minmax()
            .schedule(
                routed((0..10).map(|i| write(i, 1, i * 10, 10)).collect()),
                &ws,
            )
            .unwrap();
        let got: HashMap<WorkerId, usize> = plan.iter().map(|(w, t)| (*w, t.len())).collect();
        // The fast frugal worker takes the most, up to its share of the
        // batch's transfer time; the rest goes to the next best, and the slow
        // hungry worker gets nothing.
        assert!(got[&2] > got.get(&3).copied().unwrap_or(0), "{got:?}");
        assert!(got[&2] < 10, "one worker took the whole batch: {got:?}");
        assert!(!got.contains_key(&1), "{got:?}");
        assert_eq!(got.values().sum::<usize>(), 10);
    }

    #[test]
    fn never_exceeds_remaining_capacity() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut feasible = 0;
        for round in 0..50 {
            let ws: Vec<WorkerStatus> = (1..=4)
                .map(|i| {
                    let mut w = worker(i, rng.u8(1..=5), rng.u8(1..=5));
                    w.spec.capacity = rng.u64(5_000..40_000);
                    w.used = rng.u64(0..1000);
                    w
                })
                .collect();
            let labels = (0..60)
                .map(|i| match i % 3 {
                    0 => read(i, 1, i * 5000, rng.u64(1..3000)),
                    _ => write(i, 1, i * 5000, rng.u64(1..3000)),
                })
                .collect();
            let plan = match minmax().schedule(routed(labels), &ws) {
                Ok(plan) => plan,
                Err(e) => {
                    assert!(matches!(e, Error::Full(_)), "{e}");
                    continue;
                }
            };
            let remaining: HashMap<WorkerId, u64> =
                ws.iter().map(|w| (w.spec.id, w.remaining())).collect();
            let mut placed = 0;
            for (w, tasks) in &plan {
                let bytes: u64 = tasks.iter().map(stored).sum();
                assert!(
                    bytes <= remaining[w],
                    "round {round}: worker {w} over capacity"
                );
                placed += tasks.len();
            }
            assert_eq!(placed, 60);
            feasible += 1;
        }
        assert!(feasible > 25, "only {feasible} rounds were feasible");
    }

    #[test]
    fn spills_over_when_the_best_worker_is_full() {
        let mut best = worker(1, 5, 1);
        best.spec.capacity = 25;
        let ws = vec![best, worker(2, 3, 3)];
        let plan = minmax()
            .schedule(
                routed((0..5).map(|i| write(i, 1, i * 10, 10)).collect()),
                &ws,
            )
            .unwrap();
        let per: Vec<(WorkerId, usize)> = plan.iter().map(|(w, t)| (*w, t.len())).collect();
        assert_eq!(per, vec![(1, 2), (2, 3)]);
    }

    #[test]
    fn refuses_when_nothing_has_room() {
        let mut w = worker(1, 5, 1);
        w.spec.capacity = 5;
        let e = minmax()
            .schedule(routed(vec![write(1, 1, 0, 10)]), &[w])
            .unwrap_err();
        assert_eq!(e, Error::Full("all workers are out of capacity".into()));
    }
}
