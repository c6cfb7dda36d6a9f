//! The worker's compute lane (LabStor's work orchestrator, issue 13):
//! pipelines (software-defined storage) run apart from everything else a
//! worker does, so that a small label keeps its latency while large
//! pipeline labels load the same worker.
//!
//! - **Bounded.** At most `compute_threads` pipelines run at once; the
//!   others wait in the pool's queue without taking a CPU. Unbounded, eight
//!   1 MiB zstd labels on two cores left a small write one CPU share in ten.
//! - **Elastic.** Its threads are started as work waits for them, up to
//!   the bound, and end after [`IDLE`] without work: an idle worker keeps
//!   none.
//! - **Behind.** Its threads run at nice [`NICE`], so the kernel gives the
//!   rest of the process (queues, inventory, storage of small labels) the
//!   CPU first; a pipeline only loses time when something else wants it.
//!
//! The pool is a tokio runtime of its own, used only for its blocking
//! pool: tokio already grows and shrinks one within a bound, and names and
//! starts each of its threads through one hook.

use labios_label::{Error, Result};
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a compute thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(10);
/// The compute threads' nice value: below every other thread of the
/// process, which run at the process's own (0 by default).
const NICE: libc::c_int = 10;

/// The bound when none is configured (0): one CPU is left to the rest of
/// the worker.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}

/// A worker's compute lane; see the module docs.
pub(crate) struct Compute {
    /// `None` only once dropped: a runtime cannot be dropped in async
    /// code, so it is shut down in the background instead.
    pool: Option<tokio::runtime::Runtime>,
    gauge: Arc<Gauge>,
}

/// How many pipelines run now, the most that ever ran at once, and how
/// many threads the lane has now.
#[derive(Default)]
struct Gauge {
    running: AtomicUsize,
    peak: AtomicUsize,
    threads: AtomicUsize,
}

thread_local! {
    /// The gauge of the lane whose pool this thread belongs to, once it
    /// ran a pipeline: taken back when the thread ends. Only the pool's
    /// blocking threads run pipelines, so its one (idle) async worker
    /// thread is never counted.
    static COUNTED: RefCell<Option<Arc<Gauge>>> = const { RefCell::new(None) };
}

impl Compute {
    /// The lane of `worker`, running at most `threads` pipelines at once
    /// (0: [`default_threads`]).
    pub fn new(worker: labios_label::WorkerId, threads: usize) -> Result<Compute> {
        Compute::with_idle(worker, threads, IDLE)
    }

    /// [`Compute::new`] whose threads end after `idle` without work.
    fn with_idle(
        worker: labios_label::WorkerId,
        threads: usize,
        idle: Duration,
    ) -> Result<Compute> {
        let threads = if threads == 0 {
            default_threads()
        } else {
            threads
        };
        let pool = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(threads)
            .thread_keep_alive(idle)
            .thread_name(format!("labios-compute-{worker}"))
            .on_thread_start(|| {
                // Linux: the nice value is per thread, so this one only.
                // SAFETY: setpriority takes plain integers and touches no
                // memory of ours.
                let set = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) };
                if set != 0 {
                    tracing::debug!(
                        "compute thread keeps its priority: {}",
                        std::io::Error::last_os_error()
                    );
                }
            })
            .on_thread_stop(|| {
                if let Some(gauge) = COUNTED.with(|c| c.borrow_mut().take()) {
                    gauge.threads.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .build()
            .map_err(|e| Error::Storage(format!("starting the compute lane: {e}")))?;
        Ok(Compute {
            pool: Some(pool),
            gauge: Arc::default(),
        })
    }

    /// Runs `f` in the lane once a thread is free; a panic in it is an
    /// error, not the worker's end.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::result::Result<T, tokio::task::JoinError> {
        let gauge = self.gauge.clone();
        let pool = self.pool.as_ref().expect("the lane runs until dropped");
        pool.spawn_blocking(move || {
            COUNTED.with(|c| {
                c.borrow_mut().get_or_insert_with(|| {
                    gauge.threads.fetch_add(1, Ordering::AcqRel);
                    gauge.clone()
                });
            });
            let _running = Running::enter(&gauge);
            f()
        })
        .await
    }

    /// The most pipelines that ran at once since the worker started.
    pub fn peak(&self) -> usize {
        self.gauge.peak.load(Ordering::Acquire)
    }

    /// The lane's threads now: as many as pipelines wanted, at most the
    /// bound, none once idle.
    pub fn threads(&self) -> usize {
        self.gauge.threads.load(Ordering::Acquire)
    }
}

/// One pipeline counted as running while this lives (a panic included).
struct Running<'a>(&'a Gauge);

impl<'a> Running<'a> {
    fn enter(gauge: &'a Gauge) -> Running<'a> {
        let now = gauge.running.fetch_add(1, Ordering::AcqRel) + 1;
        gauge.peak.fetch_max(now, Ordering::AcqRel);
        Running(gauge)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Compute {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    /// Waits until `what` holds, for at most 10 s.
    async fn until(what: &str, holds: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !holds() {
            assert!(Instant::now() < deadline, "not within 10 s: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The orchestrator's elasticity: threads start as pipelines wait for
    /// them, never more than the bound, and all end once the lane is idle;
    /// the next load starts them again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_lane_grows_to_its_bound_under_load_and_shrinks_to_none_when_idle() {
        const BOUND: usize = 3;
        let lane = Arc::new(Compute::with_idle(1, BOUND, Duration::from_millis(200)).unwrap());
        assert_eq!(lane.threads(), 0, "an idle lane keeps no thread");
        for round in 0..2 {
            let (release, gate) = mpsc::channel::<()>();
            let gate = Arc::new(parking_lot::Mutex::new(gate));
            let pipelines: Vec<_> = (0..2 * BOUND)
                .map(|_| {
                    let (lane, gate) = (lane.clone(), gate.clone());
                    tokio::spawn(async move {
                        lane.run(move || gate.lock().recv().unwrap()).await.unwrap()
                    })
                })
                .collect();
            // One pipeline holds the gate's lock waiting to be released;
            // the others of the bound wait for the lock, the rest for a
            // thread.
            until("the lane grows to its bound", || {
                lane.threads() == BOUND && lane.gauge.running.load(Ordering::Acquire) == BOUND
            })
            .await;
            for _ in 0..2 * BOUND {
                release.send(()).unwrap();
            }
            for p in pipelines {
                p.await.unwrap();
            }
            assert_eq!(
                lane.peak(),
                BOUND,
                "round {round}: more threads than the bound"
            );
            until("the idle lane ends its threads", || lane.threads() == 0).await;
        }
    }
}
