//! `labios bench dispatch`: how many labels per second the shuffler and
//! scheduler sustain on one core (the article's Figure 12 measures the same
//! thing on 100K mixed labels). Only shuffle + schedule (and freeing the
//! plans, as a dispatcher does once they are queued) are timed, not label
//! generation.

use super::scheduler::{Policy, Scheduler};
use super::shuffler::shuffle;
use labios_label::{
    Error, FileId, Label, LabelId, LabelKind, Pointer, Result, WorkerId, WorkerSpec, WorkerStatus,
};
use std::collections::HashMap;
use std::time::Instant;

const FILES: u64 = 8;
const RANDOM_SPAN: u64 = 1 << 30;
const BLOCK: u64 = 4096;

#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    pub labels: usize,
    pub batches: usize,
    pub seconds: f64,
    pub labels_per_sec: f64,
    pub tasks: usize,
    pub supertasks: usize,
    pub aggregated: usize,
    /// Labels given to the least and the most loaded worker.
    pub min_per_worker: usize,
    pub max_per_worker: usize,
}

/// Dispatches `n` generated labels (half writes, half reads over 8 files,
/// 4 KiB-1 MiB, half the writes appending so aggregation has work, the
/// rest at random offsets so some overlap) to `workers` synthetic workers in
/// batches of `batch_size`.
pub fn bench_dispatch(
    n: usize,
    workers: usize,
    batch_size: usize,
    policy: Policy,
) -> Result<BenchReport> {
    if workers == 0 || batch_size == 0 {
        return Err(Error::InvalidArgument(
            "bench needs at least one worker and a batch size > 0".into(),
        ));
    }
    let pool = bench_workers(workers);
    let mut rest = bench_labels(n, 42);
    let mut batches = Vec::with_capacity(n.div_ceil(batch_size));
    while !rest.is_empty() {
        let tail = rest.split_off(rest.len().min(batch_size));
        batches.push(std::mem::replace(&mut rest, tail));
    }
    let batch_count = batches.len();
    let located = HashMap::new();
    // One untimed batch first, so the allocator's first growth is not counted.
    if let Some(first) = batches.first() {
        Scheduler::new(policy.clone()).schedule(shuffle(first.clone(), true, &located), &pool)?;
    }
    let mut scheduler = Scheduler::new(policy);
    let mut per_worker: HashMap<WorkerId, usize> = pool.iter().map(|w| (w.spec.id, 0)).collect();
    let (mut tasks, mut supertasks, mut aggregated) = (0, 0, 0);

    // Plans are tallied and freed inside the loop, as a dispatcher hands them
    // off: memory is recycled instead of every batch faulting in fresh pages.
    let start = Instant::now();
    for batch in batches {
        let plan = scheduler.schedule(shuffle(batch, true, &located), &pool)?;
        for (w, list) in &plan {
            tasks += list.len();
            for t in list {
                supertasks += usize::from(t.supertask);
                aggregated += usize::from(t.aggregated);
                *per_worker.entry(*w).or_default() += t.labels.len();
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();

    Ok(BenchReport {
        labels: n,
        batches: batch_count,
        seconds,
        labels_per_sec: n as f64 / seconds.max(1e-9),
        tasks,
        supertasks,
        aggregated,
        min_per_worker: per_worker.values().copied().min().unwrap_or(0),
        max_per_worker: per_worker.values().copied().max().unwrap_or(0),
    })
}

/// Mixed tiers; 128 MiB free and 256 queue slots each, so that MinMax's
/// knapsack actually has to choose.
fn bench_workers(n: usize) -> Vec<WorkerStatus> {
    (1..=n as u32)
        .map(|id| {
            WorkerStatus::new(WorkerSpec {
                id,
                tier: "bench".into(),
                speed: (id % 5 + 1) as u8,
                energy: ((id * 3) % 5 + 1) as u8,
                capacity: 128 << 20,
                max_queue: 256,
                functions: true,
            })
        })
        .collect()
}

fn bench_labels(n: usize, seed: u64) -> Vec<Label> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut append = [0u64; FILES as usize];
    (0..n as u64)
        .map(|i| {
            let file = rng.u64(0..FILES);
            let len = rng.u64(1..=256) * BLOCK;
            if i % 2 == 0 {
                let cursor = &mut append[file as usize];
                let offset = if rng.bool() {
                    *cursor
                } else {
                    rng.u64(0..RANDOM_SPAN / BLOCK) * BLOCK
                };
                *cursor = (*cursor).max(offset + len);
                write_label(i + 1, file, offset, len)
            } else {
                read_label(i + 1, file, rng.u64(0..RANDOM_SPAN / BLOCK) * BLOCK, len)
            }
        })
        .collect()
}

fn file_pointer(file: FileId, offset: u64, len: u64) -> Pointer {
    Pointer::File {
        path: format!("/bench/{file}"),
        file,
        offset,
        len,
    }
}

fn id(n: u64) -> LabelId {
    LabelId {
        nanos: n,
        origin: 1,
    }
}

/// A write of `len` bytes from the caller's buffer to `file` at `offset`.
pub(crate) fn write_label(n: u64, file: FileId, offset: u64, len: u64) -> Label {
    Label {
        source: Pointer::Buffer { len },
        destination: file_pointer(file, offset, len),
        ..Label::new(id(n), LabelKind::Write, 1)
    }
}

/// A read of `len` bytes of `file` at `offset` into the caller's buffer.
pub(crate) fn read_label(n: u64, file: FileId, offset: u64, len: u64) -> Label {
    Label {
        source: file_pointer(file, offset, len),
        destination: Pointer::Buffer { len },
        ..Label::new(id(n), LabelKind::Read, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_label::Weights;

    #[test]
    fn bench_runs_every_policy() {
        let policies = [
            Policy::RoundRobin,
            Policy::Random,
            Policy::Constraint {
                weights: Weights::LOW_LATENCY,
                bytes_per_worker: 16 << 20,
            },
            Policy::MinMax {
                weights: Weights::LOW_LATENCY,
            },
        ];
        for policy in policies {
            let r = bench_dispatch(5000, 8, 1024, policy.clone()).unwrap();
            assert_eq!(r.batches, 5);
            assert!(r.tasks > 0 && r.tasks <= 5000, "{policy:?}: {r:?}");
            assert!(r.aggregated > 0 && r.supertasks > 0, "{policy:?}: {r:?}");
            assert!(r.labels_per_sec > 0.0);
        }
        assert!(bench_dispatch(10, 0, 10, Policy::RoundRobin).is_err());
    }
}
