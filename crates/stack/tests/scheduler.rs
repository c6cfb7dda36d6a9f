//! The `scheduler` layer: which waiting call reaches the device next.
//! Calls are held at a gated device, so every order is decided while all
//! of them wait, and the test is the same however fast the machine is.

use labios_label::{FileId, Result};
use labios_stack::backends::memory::MemoryBackend;
use labios_stack::layers::scheduler::{Policy, Scheduler, MAX_PASSED};
use labios_stack::{Backend, Spec};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A device that holds every call until the test opens it, and records
/// the calls in the order they reached it (by their file ids) and the
/// most that were inside at once.
#[derive(Debug)]
struct Gated {
    inner: MemoryBackend,
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    open: bool,
    inside: usize,
    most_inside: usize,
    order: Vec<FileId>,
}

impl Gated {
    fn new() -> Arc<Gated> {
        Arc::new(Gated {
            inner: MemoryBackend::new(1 << 30),
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    fn pass<T>(&self, file: FileId, call: impl FnOnce() -> T) -> T {
        let mut s = self.state.lock();
        s.order.push(file);
        s.inside += 1;
        s.most_inside = s.most_inside.max(s.inside);
        self.changed.notify_all();
        while !s.open {
            self.changed.wait(&mut s);
        }
        drop(s);
        let out = call();
        self.state.lock().inside -= 1;
        out
    }

    fn open(&self) {
        self.state.lock().open = true;
        self.changed.notify_all();
    }

    /// Waits until `n` calls have reached the device.
    fn reached(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut s = self.state.lock();
        while s.order.len() < n {
            assert!(
                Instant::now() < deadline,
                "{} calls reached the device",
                s.order.len()
            );
            self.changed.wait_for(&mut s, Duration::from_millis(50));
        }
    }

    fn order(&self) -> Vec<FileId> {
        self.state.lock().order.clone()
    }
}

impl Backend for Gated {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        self.pass(file, || self.inner.write(file, pieces, sync))
    }
    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.pass(file, || self.inner.read(file, offset, buf))
    }
    fn remove(&self, file: FileId) -> Result<()> {
        self.pass(file, || self.inner.remove(file))
    }
    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        self.pass(file, || self.inner.keep_only(file, start, end, held))
    }
    fn flush(&self, file: FileId) -> Result<()> {
        self.pass(file, || self.inner.flush(file))
    }
    labios_stack::pass_through!(inner: files, holds, len, used);
}

/// Waits until `n` calls wait in the scheduler.
fn waiting(s: &Scheduler, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.waiting() < n {
        assert!(Instant::now() < deadline, "{} calls wait", s.waiting());
        std::thread::yield_now();
    }
}

/// Holds the device with a call to file 100, queues a write of
/// `sizes[i]` bytes to file `i` one after another (each waiting before
/// the next comes), opens the device and returns the order the files
/// reached it, after the first.
fn order_of(policy: Policy, sizes: &[usize]) -> Vec<FileId> {
    let device = Gated::new();
    let s = Arc::new(Scheduler::new(device.clone(), policy, 1));
    std::thread::scope(|scope| {
        scope.spawn(|| s.write(100, &[(0, &[1; 4096])], false).unwrap());
        device.reached(1);
        for (i, &size) in sizes.iter().enumerate() {
            let queued = s.clone();
            scope.spawn(move || {
                queued
                    .write(i as FileId, &[(0, &vec![2; size])], false)
                    .unwrap()
            });
            waiting(&s, i + 1);
        }
        device.open();
    });
    let order = device.order();
    assert_eq!(order[0], 100);
    order[1..].to_vec()
}

#[test]
fn fifo_keeps_arrival_order_and_small_first_lets_small_calls_pass() {
    let sizes = [1 << 20, 1 << 20, 4096, 1 << 20, 512];
    assert_eq!(order_of(Policy::Fifo, &sizes), [0, 1, 2, 3, 4]);
    assert_eq!(order_of(Policy::SmallFirst, &sizes), [4, 2, 0, 1, 3]);
}

#[test]
fn a_large_call_is_passed_over_at_most_max_passed_times() {
    let mut sizes = vec![1 << 20];
    sizes.extend(std::iter::repeat_n(4096, 20));
    let order = order_of(Policy::SmallFirst, &sizes);
    let large = order.iter().position(|f| *f == 0).unwrap();
    assert_eq!(large, MAX_PASSED as usize, "{order:?}");
    // The small ones keep their arrival order among themselves.
    let small: Vec<FileId> = order.into_iter().filter(|f| *f != 0).collect();
    assert!(small.windows(2).all(|w| w[0] < w[1]), "{small:?}");
}

#[test]
fn the_depth_bounds_the_calls_below_at_once() {
    let device = Gated::new();
    let s = Arc::new(Scheduler::new(device.clone(), Policy::SmallFirst, 2));
    std::thread::scope(|scope| {
        for f in 0..6 {
            let s = s.clone();
            scope.spawn(move || s.write(f, &[(0, &[3; 4096])], false).unwrap());
        }
        device.reached(2);
        waiting(&s, 4);
        device.open();
    });
    let state = device.state.lock();
    assert_eq!((state.order.len(), state.most_inside), (6, 2));
}

#[test]
fn scheduler_specs_are_read_or_refused_naming_the_module() {
    let spec = |s: &str| Spec::try_from(s.split(',').map(String::from).collect::<Vec<_>>());
    for good in [
        "scheduler,file",
        "scheduler:fifo,file",
        "scheduler:small:4,kv",
        "checksum,zstd,scheduler:small,file",
    ] {
        spec(good).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    for (bad, says) in [
        (
            "scheduler:lifo,file",
            "\"scheduler:lifo\": the scheduler takes a policy",
        ),
        (
            "scheduler:small:0,file",
            "\"scheduler:small:0\": the scheduler takes",
        ),
        ("scheduler:small:2:1,file", "\"scheduler:small:2:1\""),
        (
            "scheduler,zstd,file",
            "\"zstd\" must come before \"scheduler\"",
        ),
    ] {
        let err = spec(bad).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
    // A stack that names it passes each call through it, bytes intact.
    let dir = tempfile::tempdir().unwrap();
    let b = spec("checksum,scheduler:small:2,memory")
        .unwrap()
        .build(dir.path(), 1 << 20)
        .unwrap();
    b.write(1, &[(10, b"scheduled")], true).unwrap();
    let mut back = [0; 9];
    b.read(1, 10, &mut back).unwrap();
    assert_eq!(&back, b"scheduled");
}
