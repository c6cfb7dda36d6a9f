//! Runs a target over a run of inputs and reports what failed: a panic
//! (caught per input), an input that takes longer than the target's hang
//! limit (seen by a watchdog, since the stuck call cannot be interrupted),
//! or an allocation the counting allocator refused ([`crate::alloc`]).
//!
//! Every failure is printed with the seed, the input number and the input
//! in hex, and the input is written under `std::env::temp_dir()`, so that
//! it replays with `labios-fuzz TARGET --replay FILE` or
//! `--seed S --start I --inputs 1`.

use crate::alloc;
use crate::mutate::Corpus;
use std::any::Any;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Failures recorded before a run gives up: past this, one bug is usually
/// being found over and over.
const MAX_FAILURES: usize = 10;
/// How often the watchdog looks at the input being run.
const WATCH_INTERVAL: Duration = Duration::from_millis(20);
/// The progress value while no input is running.
const IDLE: u64 = u64::MAX;

/// A decoder under test.
pub struct Target {
    pub name: &'static str,
    /// One line for `labios-fuzz --list`.
    pub about: &'static str,
    /// Feeds one input to the decoder; a panic is a failure.
    pub run: fn(&[u8]),
    /// Valid encodings, built by the target so that they follow the code.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Tokens of the format, inserted by mutations.
    pub dictionary: &'static [&'static [u8]],
    /// Longest input generated.
    pub max_len: usize,
    /// Inputs `labios-fuzz TARGET` runs by default.
    pub default_inputs: u64,
    /// Inputs the smoke test runs (on a debug build, in CI).
    pub smoke_inputs: u64,
    /// Relative cost of one input: `labios-fuzz all --inputs N` gives this
    /// target `N / cost` inputs.
    pub cost: u64,
    /// An input running longer than this is a hang.
    pub hang: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Panic(String),
    Hang(Duration),
    /// The largest refused allocation, in bytes.
    Allocation(usize),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Panic(message) => write!(f, "panic: {message}"),
            Fault::Hang(running) => {
                write!(f, "hang: the input was still running after {running:.1?}")
            }
            Fault::Allocation(size) => write!(f, "refused an allocation of {size} bytes"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub iteration: u64,
    pub fault: Fault,
    /// Where the input was saved.
    pub saved: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    pub seed: u64,
    /// Inputs that ran to completion (or failed).
    pub inputs: u64,
    pub elapsed: Duration,
    /// The most bytes live at once in the process during the run.
    pub peak_bytes: usize,
    pub failures: Vec<Failure>,
}

impl Report {
    pub fn inputs_per_sec(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What the fuzzing thread shares with the watchdog.
struct Progress {
    /// The input being run, or [`IDLE`].
    current: AtomicU64,
    /// When it started, in nanoseconds since the run started.
    started_ns: AtomicU64,
    done: AtomicU64,
    stop: AtomicBool,
    failures: Mutex<Vec<Failure>>,
}

/// Runs inputs `start..start + inputs` of `seed` through `target`.
pub fn run(target: &'static Target, seed: u64, start: u64, inputs: u64) -> Report {
    let corpus = Arc::new(Corpus::new(
        (target.seeds)(),
        target.dictionary,
        target.max_len,
    ));
    let progress = Arc::new(Progress {
        current: AtomicU64::new(IDLE),
        started_ns: AtomicU64::new(0),
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        failures: Mutex::new(Vec::new()),
    });
    alloc::take_peak();
    let began = Instant::now();
    let fuzzer = {
        let (corpus, progress) = (corpus.clone(), progress.clone());
        thread::Builder::new()
            .name(format!("fuzz-{}", target.name))
            .spawn(move || fuzz(target, &corpus, &progress, seed, start, inputs, began))
            .expect("spawning the fuzzing thread")
    };
    let mut hang = None;
    while !fuzzer.is_finished() {
        thread::sleep(WATCH_INTERVAL);
        let i = progress.current.load(Ordering::Acquire);
        let started = Duration::from_nanos(progress.started_ns.load(Ordering::Acquire));
        let running = began.elapsed().saturating_sub(started);
        if i != IDLE && running > target.hang && progress.current.load(Ordering::Acquire) == i {
            // The stuck thread cannot be stopped: it is left behind, told
            // to stop should the input ever return.
            progress.stop.store(true, Ordering::Release);
            hang = Some((i, running));
            break;
        }
    }
    if hang.is_none() {
        fuzzer.join().expect("the fuzzing thread catches panics");
    }
    let elapsed = began.elapsed();
    let mut failures = std::mem::take(&mut *progress.failures.lock().expect("not poisoned"));
    if let Some((i, running)) = hang {
        let input = corpus.input(seed, i);
        let fault = Fault::Hang(running);
        failures.push(Failure {
            iteration: i,
            saved: report(target.name, seed, i, &input, &fault.to_string()),
            fault,
        });
    }
    Report {
        target: target.name,
        seed,
        inputs: progress.done.load(Ordering::Acquire),
        elapsed,
        peak_bytes: alloc::take_peak(),
        failures,
    }
}

fn fuzz(
    target: &'static Target,
    corpus: &Corpus,
    progress: &Progress,
    seed: u64,
    start: u64,
    inputs: u64,
    began: Instant,
) {
    for i in start..start.saturating_add(inputs) {
        if progress.stop.load(Ordering::Acquire) {
            return;
        }
        let input = corpus.input(seed, i);
        progress
            .started_ns
            .store(began.elapsed().as_nanos() as u64, Ordering::Release);
        progress.current.store(i, Ordering::Release);
        let fault = check(target, seed, i, &input);
        progress.current.store(IDLE, Ordering::Release);
        progress.done.fetch_add(1, Ordering::AcqRel);
        if let Some(fault) = fault {
            let saved = match &fault {
                // Reported by the allocator while the input ran.
                Fault::Allocation(_) => saved_path(target.name, seed, i),
                other => report(target.name, seed, i, &input, &other.to_string()),
            };
            let mut failures = progress.failures.lock().expect("not poisoned");
            failures.push(Failure {
                iteration: i,
                fault,
                saved,
            });
            if failures.len() >= MAX_FAILURES {
                return;
            }
        }
    }
}

/// Runs one input on the current thread: the panic or refused allocation
/// it caused, if any.
fn check(target: &'static Target, seed: u64, iteration: u64, input: &[u8]) -> Option<Fault> {
    alloc::set_context(Some(alloc::Context {
        target: target.name,
        seed,
        iteration,
        input: input.as_ptr(),
        len: input.len(),
    }));
    let outcome = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    alloc::set_context(None);
    match (outcome, alloc::take_refused()) {
        (_, Some(size)) => Some(Fault::Allocation(size)),
        (Err(payload), None) => Some(Fault::Panic(panic_message(payload.as_ref()))),
        (Ok(()), None) => None,
    }
}

/// Runs one saved input (a file written by [`report`]) through `target`,
/// with the same watchdog as a run.
pub fn replay(target: &'static Target, input: Vec<u8>) -> Option<Fault> {
    let begun = Instant::now();
    let runner = thread::Builder::new()
        .name(format!("replay-{}", target.name))
        .spawn(move || check(target, 0, 0, &input))
        .expect("spawning the replay thread");
    while !runner.is_finished() {
        if begun.elapsed() > target.hang {
            return Some(Fault::Hang(begun.elapsed()));
        }
        thread::sleep(WATCH_INTERVAL);
    }
    runner.join().expect("the replay thread catches panics")
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".into())
}

fn saved_path(target: &str, seed: u64, iteration: u64) -> PathBuf {
    std::env::temp_dir().join(format!("labios-fuzz-{target}-{seed}-{iteration}.bin"))
}

/// Prints a failure with everything needed to replay it and saves the
/// input; returns where.
pub fn report(target: &str, seed: u64, iteration: u64, input: &[u8], what: &str) -> PathBuf {
    let path = saved_path(target, seed, iteration);
    let saved = match std::fs::write(&path, input) {
        Ok(()) => format!("saved to {}", path.display()),
        Err(e) => format!("could not be saved to {}: {e}", path.display()),
    };
    let mut hex = String::with_capacity(input.len() * 2);
    for b in input {
        let _ = write!(hex, "{b:02x}");
    }
    eprintln!(
        "labios-fuzz: {target}: {what}\n  seed {seed}, input {iteration}, {} bytes: {hex}\n  \
         {:?}\n  {saved}\n  replay: labios-fuzz {target} --replay {} \
         (or --seed {seed} --start {iteration} --inputs 1)",
        input.len(),
        String::from_utf8_lossy(input),
        path.display()
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds() -> Vec<Vec<u8>> {
        vec![
            b"ok".to_vec(),
            b"!".to_vec(),
            b"big".to_vec(),
            b"slow".to_vec(),
        ]
    }

    const fn target(name: &'static str, run: fn(&[u8])) -> Target {
        Target {
            name,
            about: "a target that fails on purpose",
            run,
            seeds,
            dictionary: &[],
            max_len: 16,
            default_inputs: 4,
            smoke_inputs: 4,
            cost: 1,
            // Far above a panic's backtrace on a loaded machine (CI sets
            // RUST_BACKTRACE=1), far below the hanging target's sleep.
            hang: Duration::from_secs(3),
        }
    }

    static PANICS: Target = target("test-panic", |d| assert!(d != b"!", "bang"));
    static ALLOCATES: Target = target("test-alloc", |d| {
        if d == b"big" {
            let mut v: Vec<u8> = Vec::new();
            assert!(v.try_reserve(alloc::MAX_ALLOCATION + 1).is_err());
        }
    });
    static HANGS: Target = target("test-hang", |d| {
        if d == b"slow" {
            thread::sleep(Duration::from_secs(60));
        }
    });

    #[test]
    fn panics_are_failures_with_the_input_saved() {
        let r = run(&PANICS, 3, 0, 4);
        assert_eq!(r.inputs, 4);
        assert_eq!(r.failures.len(), 1, "{r:?}");
        let f = &r.failures[0];
        assert_eq!((f.iteration, &f.fault), (1, &Fault::Panic("bang".into())));
        assert_eq!(std::fs::read(&f.saved).unwrap(), b"!");
        std::fs::remove_file(&f.saved).unwrap();
        assert_eq!(
            replay(&PANICS, b"!".to_vec()),
            Some(Fault::Panic("bang".into()))
        );
        assert_eq!(replay(&PANICS, b"ok".to_vec()), None);
    }

    #[test]
    fn refused_allocations_are_failures() {
        let r = run(&ALLOCATES, 3, 0, 4);
        assert_eq!(r.failures.len(), 1, "{r:?}");
        assert_eq!(r.failures[0].iteration, 2);
        assert_eq!(
            r.failures[0].fault,
            Fault::Allocation(alloc::MAX_ALLOCATION + 1)
        );
        assert_eq!(std::fs::read(&r.failures[0].saved).unwrap(), b"big");
        std::fs::remove_file(&r.failures[0].saved).unwrap();
    }

    #[test]
    fn hangs_are_failures_and_end_the_run() {
        let r = run(&HANGS, 3, 0, 100);
        assert_eq!(r.inputs, 3, "{r:?}");
        assert_eq!(r.failures.len(), 1, "{r:?}");
        assert_eq!(r.failures[0].iteration, 3);
        assert!(matches!(r.failures[0].fault, Fault::Hang(_)));
        assert_eq!(std::fs::read(&r.failures[0].saved).unwrap(), b"slow");
        std::fs::remove_file(&r.failures[0].saved).unwrap();
    }
}
