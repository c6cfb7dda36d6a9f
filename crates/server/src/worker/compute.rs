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

/// How many pipelines run now, and the most that ever ran at once.
#[derive(Default)]
struct Gauge {
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl Compute {
    /// The lane of `worker`, running at most `threads` pipelines at once
    /// (0: [`default_threads`]).
    pub fn new(worker: labios_label::WorkerId, threads: usize) -> Result<Compute> {
        let threads = if threads == 0 {
            default_threads()
        } else {
            threads
        };
        let pool = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(threads)
            .thread_keep_alive(IDLE)
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
            let _running = Running::enter(&gauge);
            f()
        })
        .await
    }

    /// The most pipelines that ran at once since the worker started.
    pub fn peak(&self) -> usize {
        self.gauge.peak.load(Ordering::Acquire)
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
