//! The `tier` layer: writes acknowledged from memory, written back in the
//! background, on `flush`, under its bound, on a stack change and at a
//! stop; a device that fails keeps them here.

mod common;

use common::Stopping;
use labios_stack::backends::file::FileBackend;
use labios_stack::backends::memory::MemoryBackend;
use labios_stack::layers::tier::{Tier, JOURNAL};
use labios_stack::live::Live;
use labios_stack::{Backend, Place, Spec};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read(b: &dyn Backend, file: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    b.read(file, offset, &mut buf).unwrap();
    buf
}

/// Waits until `done` holds, for at most 10 s.
fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::yield_now();
    }
}

/// A stack below that takes no change (its journal elsewhere): the tier
/// acknowledges writes and reads them back from memory; `flush` answers
/// the device's error and keeps them; once the device works, `flush` puts
/// them on it.
#[test]
fn writes_are_acknowledged_from_memory_and_flush_puts_them_on_the_device() {
    let device = Stopping::over(Arc::new(MemoryBackend::new(1 << 30)));
    device.left.store(0, Ordering::SeqCst);
    let journal = Arc::new(MemoryBackend::new(1 << 30));
    let tier = Tier::new(device.clone(), journal, 1 << 20).unwrap();
    let data = bytes(10_000, 1);
    tier.write(3, &[(100, &data)], true).unwrap();
    tier.write(3, &[(5_000, b"newer")], false).unwrap();
    let mut want = vec![0; 100];
    want.extend_from_slice(&data);
    want[5_000..5_005].copy_from_slice(b"newer");
    assert_eq!(read(&tier, 3, 0, want.len()), want);
    assert_eq!(tier.len(3).unwrap(), Some(10_100));
    assert!(tier.holds(3) && !device.holds(3));
    let err = tier.flush(3).unwrap_err().to_string();
    assert!(err.contains("the device stopped"), "{err}");
    assert_eq!(read(&tier, 3, 0, want.len()), want, "kept after the error");
    assert_eq!(tier.dirty(), 10_000);
    // Past the end: an error naming the length, not zeros.
    let mut past = [0; 10];
    let err = tier.read(3, 10_095, &mut past).unwrap_err().to_string();
    assert!(err.contains("shorter"), "{err}");
    device.left.store(u64::MAX, Ordering::SeqCst);
    tier.flush(3).unwrap();
    assert_eq!(tier.dirty(), 0);
    assert_eq!(read(device.as_ref(), 3, 0, want.len()), want);
}

/// Without `flush`, the background write-back puts a write on the device
/// within its interval.
#[test]
fn the_background_write_back_reaches_the_device() {
    let device = Arc::new(MemoryBackend::new(1 << 30));
    let tier = Tier::new(device.clone(), device.clone(), 1 << 20).unwrap();
    let data = bytes(70_000, 2);
    tier.write(5, &[(0, &data)], false).unwrap();
    until("the write-back", || device.holds(5) && tier.dirty() == 0);
    assert_eq!(read(device.as_ref(), 5, 0, data.len()), data);
}

/// Many writes through a small tier: it never holds more than its bound,
/// and a write larger than the bound goes straight to the device, after
/// the older bytes of its file.
#[test]
fn the_tier_stays_within_its_bound() {
    let device = Arc::new(MemoryBackend::new(1 << 30));
    let tier = Tier::new(device.clone(), device.clone(), 64 << 10).unwrap();
    let mut model = vec![0u8; 1 << 20];
    for i in 0..200u64 {
        let at = (i * 7919) % ((1 << 20) - 16_384);
        let data = bytes(16_384, i as u8);
        tier.write(1, &[(at, &data)], false).unwrap();
        model[at as usize..][..data.len()].copy_from_slice(&data);
        assert!(tier.dirty() <= 64 << 10, "{} bytes held", tier.dirty());
    }
    let large = bytes(100_000, 9);
    tier.write(1, &[(1_000, &large)], false).unwrap();
    model[1_000..101_000].copy_from_slice(&large);
    let end = tier.len(1).unwrap().unwrap() as usize;
    assert_eq!(read(&tier, 1, 0, end), model[..end]);
    tier.settle().unwrap();
    assert_eq!(read(device.as_ref(), 1, 0, end), model[..end]);
}

/// A worker whose stack drops its tier, and one whose stack stops: every
/// byte the tier held reaches the device first.
#[test]
fn a_stack_change_and_a_stop_write_everything_back() {
    let dir = tempfile::tempdir().unwrap();
    let spec =
        |s: &str| Spec::try_from(s.split(',').map(String::from).collect::<Vec<_>>()).unwrap();
    let place = Place {
        stack: spec("tier:1MiB,checksum,file"),
        ..Place::from(dir.path().to_path_buf())
    };
    let live = Live::open(&place, 1 << 30).unwrap();
    let data = bytes(300_000, 3);
    live.write(2, &[(0, &data)], false).unwrap();
    live.set(spec("checksum,zstd,file")).unwrap();
    let plain = spec("checksum,file").build(dir.path(), 1 << 30).unwrap();
    assert_eq!(read(plain.as_ref(), 2, 0, data.len()), data);
    drop(plain);
    live.set(spec("tier,file")).unwrap();
    live.write(2, &[(7, b"last")], false).unwrap();
    drop(live);
    let plain = spec("file").build(dir.path(), 1 << 30).unwrap();
    assert_eq!(read(plain.as_ref(), 2, 7, 4), b"last");
    assert_eq!(read(plain.as_ref(), 2, 11, 1000), data[11..1011]);
}

/// Removal drops what the tier holds of a file, and reclamation writes it
/// back first, so that the device keeps the file's order of changes.
#[test]
fn removal_and_reclamation_keep_the_order_of_changes() {
    let device = Arc::new(MemoryBackend::new(1 << 30));
    let tier = Tier::new(device.clone(), device.clone(), 1 << 20).unwrap();
    tier.write(4, &[(0, &bytes(50_000, 4))], false).unwrap();
    tier.remove(4).unwrap();
    assert!(!tier.holds(4) && tier.dirty() == 0);
    tier.settle().unwrap();
    assert!(!device.holds(4), "a removed file came back");
    let data = bytes(50_000, 5);
    tier.write(4, &[(0, &data)], false).unwrap();
    tier.keep_only(4, 0, u64::MAX, &[(0, 20_000)]).unwrap();
    assert_eq!(tier.len(4).unwrap(), Some(20_000));
    assert_eq!(read(device.as_ref(), 4, 0, 20_000), data[..20_000]);
    assert_eq!(device.len(4).unwrap(), Some(20_000));
}

/// A tier over a file backend whose data path refuses every change
/// ([`Stopping`]), so that only its journal reaches `dir`.
fn journal_only(dir: &std::path::Path, bound: u64) -> (Arc<FileBackend>, Tier) {
    let device = Arc::new(FileBackend::open(dir).unwrap());
    let stopped = Stopping::over(device.clone());
    stopped.left.store(0, Ordering::SeqCst);
    let tier = Tier::new(stopped, device.clone(), bound).unwrap();
    (device, tier)
}

/// The worker's process is gone in the middle of the journal's last
/// append: nothing of `tier` runs its stop, and its last `cut` bytes
/// never reached the device.
fn stop_mid_append(device: &FileBackend, tier: Tier, cut: u64) {
    std::mem::forget(tier);
    let journal = device.path(JOURNAL);
    let len = std::fs::metadata(&journal).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap()
        .set_len(len - cut)
        .unwrap();
}

/// A worker's process that stops before its tier writes back: the next
/// stack on the backend, with or without a tier, replays the journal
/// first, up to a record whose append the stop cut short (never
/// acknowledged), and drops it.
#[test]
fn the_journal_is_replayed_by_the_next_stack_up_to_a_torn_record() {
    for next in ["tier,checksum,file", "checksum,file"] {
        let dir = tempfile::tempdir().unwrap();
        let (device, tier) = journal_only(dir.path(), 1 << 20);
        let (a, b, c) = (bytes(5_000, 6), bytes(3_000, 7), bytes(100, 8));
        tier.write(1, &[(0, &a)], false).unwrap();
        tier.write(2, &[(10, &b)], true).unwrap();
        tier.write(1, &[(4_000, &c)], false).unwrap();
        stop_mid_append(&device, tier, 3);
        let spec = Spec::try_from(next.split(',').map(String::from).collect::<Vec<_>>()).unwrap();
        let stack = spec.over(device.clone()).unwrap();
        assert_eq!(read(stack.as_ref(), 1, 0, 5_000), a, "{next}");
        assert_eq!(read(stack.as_ref(), 2, 10, 3_000), b, "{next}");
        assert!(
            !device.holds(JOURNAL) && !device.holds(JOURNAL + 1),
            "{next}"
        );
        let mut files = stack.files().unwrap();
        files.sort();
        assert_eq!(files, [1, 2], "{next}: the journal is not a file");
    }
}

/// The journal keeps a large write's bytes as a piece of their own after
/// its record's head: a write of small and large pieces replays whole, and
/// a stop that cuts the last large write's bytes short drops that record.
#[test]
fn large_writes_in_the_journal_replay_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let (device, tier) = journal_only(dir.path(), 4 << 20);
    let (small, large, again) = (bytes(100, 1), bytes(300_000, 2), bytes(40_000, 3));
    let torn = bytes(200_000, 4);
    tier.write(1, &[(0, &small), (1_000, &large), (400_000, &small)], false)
        .unwrap();
    tier.write(1, &[(500, &again)], true).unwrap();
    tier.write(2, &[(0, &torn)], false).unwrap();
    stop_mid_append(&device, tier, 1_000);
    let stack = Spec::try_from(vec!["file".to_string()])
        .unwrap()
        .over(device.clone())
        .unwrap();
    let mut want = vec![0; 400_100];
    want[..100].copy_from_slice(&small);
    want[1_000..301_000].copy_from_slice(&large);
    want[400_000..].copy_from_slice(&small);
    want[500..40_500].copy_from_slice(&again);
    assert_eq!(read(stack.as_ref(), 1, 0, want.len()), want);
    assert_eq!(stack.len(1).unwrap(), Some(want.len() as u64));
    assert_eq!(stack.len(2).unwrap(), None, "the torn write was replayed");
}

/// What a test device does around each call it passes to the device
/// below: the call's kind, file and offset, and the call itself.
trait Hook: std::fmt::Debug + Send + Sync + 'static {
    fn call<T>(
        &self,
        what: (&'static str, u64, u64),
        f: impl FnOnce() -> labios_label::Result<T>,
    ) -> labios_label::Result<T>;
}

/// A file device whose calls that change or read a file go through `hook`.
#[derive(Debug)]
struct Hooked<H> {
    inner: Arc<FileBackend>,
    hook: H,
}

impl<H: Hook> Backend for Hooked<H> {
    fn write(&self, file: u64, pieces: &[(u64, &[u8])], sync: bool) -> labios_label::Result<()> {
        let at = pieces.first().map_or(0, |(o, _)| *o);
        self.hook
            .call(("write", file, at), || self.inner.write(file, pieces, sync))
    }
    fn read(&self, file: u64, offset: u64, buf: &mut [u8]) -> labios_label::Result<()> {
        self.hook.call(("read", file, offset), || {
            self.inner.read(file, offset, buf)
        })
    }
    fn remove(&self, file: u64) -> labios_label::Result<()> {
        self.hook
            .call(("remove", file, 0), || self.inner.remove(file))
    }
    fn keep_only(
        &self,
        file: u64,
        start: u64,
        end: u64,
        held: &[(u64, u64)],
    ) -> labios_label::Result<()> {
        self.hook.call(("keep_only", file, start), || {
            self.inner.keep_only(file, start, end, held)
        })
    }
    fn len(&self, file: u64) -> labios_label::Result<Option<u64>> {
        self.hook.call(("len", file, 0), || self.inner.len(file))
    }
    labios_stack::pass_through!(inner: files, flush, holds, used);
}

/// A hook by which the first try of each call on a journal, and of each
/// write, fails (the same kind on the same file and place), before it
/// takes effect or, one time in two, after; the next try is let through.
#[derive(Debug, Default)]
struct FailingOnce {
    tried: parking_lot::Mutex<std::collections::HashSet<(&'static str, u64, u64)>>,
}

impl Hook for FailingOnce {
    fn call<T>(
        &self,
        what: (&'static str, u64, u64),
        f: impl FnOnce() -> labios_label::Result<T>,
    ) -> labios_label::Result<T> {
        let failed = || labios_label::Error::Storage(format!("a device fault in {what:?}"));
        let (kind, file, _) = what;
        if file != JOURNAL && file != JOURNAL + 1 && kind != "write" {
            return f();
        }
        let mut tried = self.tried.lock();
        let first = tried.insert(what);
        let after = tried.len().is_multiple_of(2);
        drop(tried);
        match (first, after) {
            (false, _) => f(),
            (true, false) => Err(failed()),
            (true, true) => f().and_then(|_| Err(failed())),
        }
    }
}

/// A worker's start replays its journal through a device whose calls fail
/// once (the model checker with injected device faults once failed a
/// start on the removal of an empty journal): each step is tried again,
/// and every acknowledged write is there, with or without a tier.
#[test]
fn a_start_replays_the_journal_through_transient_device_faults() {
    for next in ["tier,checksum,file", "checksum,file", "file"] {
        let dir = tempfile::tempdir().unwrap();
        let (device, tier) = journal_only(dir.path(), 4 << 20);
        let (a, b, c) = (bytes(5_000, 1), bytes(100_000, 2), bytes(2_000, 3));
        tier.write(1, &[(0, &a)], false).unwrap();
        tier.write(2, &[(7, &b)], false).unwrap();
        tier.write(1, &[(4_000, &c)], false).unwrap();
        stop_mid_append(&device, tier, 0);
        let flaky = Arc::new(Hooked {
            inner: device.clone(),
            hook: FailingOnce::default(),
        });
        let spec = Spec::try_from(next.split(',').map(String::from).collect::<Vec<_>>()).unwrap();
        drop(spec.over(flaky).unwrap());
        // Read back through a stack on the device itself.
        let stack = spec.over(device.clone()).unwrap();
        let want = [&a[..4_000], &c[..]].concat();
        assert_eq!(read(stack.as_ref(), 1, 0, 6_000), want, "{next}");
        assert_eq!(stack.len(1).unwrap(), Some(6_000), "{next}");
        assert_eq!(read(stack.as_ref(), 2, 7, 100_000), b, "{next}");
        assert!(
            !device.holds(JOURNAL) && !device.holds(JOURNAL + 1),
            "{next}"
        );
        drop(stack);
    }
}

/// A device on which writes to file 1 wait at a gate and writes to file
/// 2 fail until told otherwise.
#[derive(Debug)]
struct Split {
    inner: MemoryBackend,
    gate: parking_lot::Mutex<bool>,
    opened: parking_lot::Condvar,
    waiting: std::sync::atomic::AtomicBool,
    fail_two: std::sync::atomic::AtomicBool,
}

impl Backend for Split {
    fn write(&self, file: u64, pieces: &[(u64, &[u8])], sync: bool) -> labios_label::Result<()> {
        if file == 1 {
            let mut open = self.gate.lock();
            self.waiting.store(true, Ordering::SeqCst);
            while !*open {
                self.opened.wait(&mut open);
            }
        }
        if file == 2 && self.fail_two.load(Ordering::SeqCst) {
            return Err(labios_label::Error::Storage("file 2 fails".into()));
        }
        self.inner.write(file, pieces, sync)
    }
    labios_stack::pass_through!(inner: read, remove, keep_only, files, flush, holds, len, used);
}

/// Opens the gate of a [`Split`] when dropped, so that a failing check
/// ends the test instead of leaving a write waiting for ever.
struct Opens<'a>(&'a Split);

impl Drop for Opens<'_> {
    fn drop(&mut self) {
        *self.0.gate.lock() = true;
        self.0.opened.notify_all();
    }
}

/// A write-back that fails while another file's is on its way to the
/// device keeps its bytes, and the tier's count of what it holds stays
/// the bytes it holds (the model checker under device faults once
/// stopped a worker on a wrong check of that count, dropping the failed
/// file's bytes).
#[test]
fn a_write_back_failing_beside_another_in_flight_keeps_its_bytes() {
    let device = Arc::new(Split {
        inner: MemoryBackend::new(1 << 30),
        gate: parking_lot::Mutex::new(false),
        opened: parking_lot::Condvar::new(),
        waiting: false.into(),
        fail_two: true.into(),
    });
    let journal = Arc::new(MemoryBackend::new(1 << 30));
    let tier = Tier::new(device.clone(), journal, 1 << 20).unwrap();
    let (one, two) = (bytes(65_536, 1), bytes(10_000, 2));
    tier.write(1, &[(0, &one)], false).unwrap();
    tier.write(2, &[(0, &two)], false).unwrap();
    std::thread::scope(|scope| {
        let flushing = scope.spawn(|| tier.flush(1));
        let open = Opens(&device);
        until("file 1 on its way", || {
            device.waiting.load(Ordering::SeqCst)
        });
        let err = tier.flush(2).unwrap_err().to_string();
        assert!(err.contains("file 2 fails"), "{err}");
        assert_eq!(tier.dirty(), (one.len() + two.len()) as u64);
        assert_eq!(read(&tier, 2, 0, two.len()), two, "kept after the error");
        drop(open);
        flushing.join().unwrap().unwrap();
    });
    assert_eq!(tier.dirty(), two.len() as u64);
    device.fail_two.store(false, Ordering::SeqCst);
    tier.flush(2).unwrap();
    assert_eq!(tier.dirty(), 0);
    assert_eq!(read(device.as_ref(), 1, 0, one.len()), one);
    assert_eq!(read(device.as_ref(), 2, 0, two.len()), two);
}

/// A worker killed in the middle of a removal below its tier: the codec
/// had dropped the file's data but not yet its unit records (the tier
/// journals a removal before it passes it below). The next start replays
/// the journal: a write made before the removal, replayed over that half
/// done removal, once needed the unit the records name, found the data
/// missing and failed the worker's start (`labios serve` exited; found by
/// the model checker, `served_on_layered_stacks`). Changes a later removal
/// undoes are not replayed; the start succeeds and nothing of the file is
/// left, while another file's journaled write is replayed.
#[test]
fn a_removal_a_crash_left_half_done_below_is_finished_by_the_replay() {
    const F: u64 = 1;
    let dir = tempfile::tempdir().unwrap();
    let below = Spec::try_from(vec!["checksum".into(), "lz4".into(), "file".into()]).unwrap();
    // A unit the codec stores compressed (its records name it), summed.
    let unit = vec![7u8; 65_536];
    {
        let stack = below.build(dir.path(), 1 << 30).unwrap();
        stack.write(F, &[(0, &unit)], true).unwrap();
    }
    let (device, tier) = journal_only(dir.path(), 1 << 20);
    // The codec's unit records and the checksum's sums.
    let companions = |device: &FileBackend| {
        [F | 1 << 62, F | 1 << 63]
            .into_iter()
            .filter(|&f| device.holds(f))
            .count()
    };
    assert_eq!(companions(&device), 2, "records and sums were written");
    let other = bytes(3_000, 9);
    tier.write(F, &[(100, b"inside the unit")], false).unwrap();
    tier.write(2, &[(0, &other)], false).unwrap();
    // Journaled; the device below takes no change, as when the crash
    // came before the removal reached it.
    assert!(tier.remove(F).is_err());
    stop_mid_append(&device, tier, 0);
    // The removal reached the device in part: the data went (both of the
    // codec's slots), the records and sums stayed.
    device.remove(F).unwrap();
    device.remove(F | 1 << 61).unwrap();
    let mut next = vec!["tier".to_string()];
    next.extend(Vec::<String>::from(below.clone()));
    let stack = Spec::try_from(next)
        .unwrap()
        .over(device.clone())
        .expect("the next start replays the journal");
    assert_eq!(stack.len(F).unwrap(), None);
    assert_eq!(
        companions(&device),
        0,
        "nothing of the removed file is left"
    );
    assert_eq!(read(stack.as_ref(), 2, 0, 3_000), other);
}

/// A hook by which the next call `gated` names ("remove" or "write") on
/// file 1 says it began, then waits to be let through.
#[derive(Debug)]
struct Gated {
    gated: parking_lot::Mutex<Option<&'static str>>,
    began: parking_lot::Mutex<std::sync::mpsc::Sender<()>>,
    through: parking_lot::Mutex<std::sync::mpsc::Receiver<()>>,
}

/// A gated device over `inner`, what tells that its gated call began,
/// and what lets that call through.
type GatedParts = (
    Arc<Hooked<Gated>>,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
);

impl Gated {
    fn over(inner: Arc<FileBackend>) -> GatedParts {
        let (began, on_begin) = std::sync::mpsc::channel();
        let (let_through, through) = std::sync::mpsc::channel();
        let hook = Gated {
            gated: parking_lot::Mutex::new(None),
            began: parking_lot::Mutex::new(began),
            through: parking_lot::Mutex::new(through),
        };
        (Arc::new(Hooked { inner, hook }), on_begin, let_through)
    }
}

impl Hook for Gated {
    fn call<T>(
        &self,
        (call, file, _): (&'static str, u64, u64),
        f: impl FnOnce() -> labios_label::Result<T>,
    ) -> labios_label::Result<T> {
        let mut gated = self.gated.lock();
        if file == 1 && *gated == Some(call) {
            *gated = None;
            drop(gated);
            self.began.lock().send(()).unwrap();
            self.through.lock().recv().unwrap();
        }
        f()
    }
}

/// The journal holding a removal stays until the removal is done below:
/// a write-back round (here a settle, as at a stop or a stack change)
/// that dropped it while the removal ran would leave a crash nothing to
/// finish a half-done removal with. The settle waits for the removal, and
/// the journal goes once both are done.
#[test]
fn a_journal_stays_until_the_removal_it_holds_is_done_below() {
    let dir = tempfile::tempdir().unwrap();
    let device = Arc::new(FileBackend::open(dir.path()).unwrap());
    let (gated, on_begin, let_through) = Gated::over(device.clone());
    let tier = Arc::new(Tier::new(gated.clone(), device.clone(), 1 << 20).unwrap());
    tier.write(1, &[(0, b"to be removed")], false).unwrap();
    tier.settle().unwrap();
    *gated.hook.gated.lock() = Some("remove");
    let journaled = || device.holds(JOURNAL) || device.holds(JOURNAL + 1);
    assert!(!journaled(), "settled: no journal left");
    let removing = {
        let tier = tier.clone();
        std::thread::spawn(move || tier.remove(1))
    };
    on_begin.recv().unwrap();
    assert!(journaled(), "the removal is journaled before it goes below");
    let settling = {
        let tier = tier.clone();
        std::thread::spawn(move || tier.settle())
    };
    // Two seconds for the settle to drop the journal (what it once did);
    // it must neither drop it nor end while the removal runs.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && journaled() && !settling.is_finished() {
        std::thread::yield_now();
    }
    assert!(journaled(), "the journal went while its removal ran below");
    assert!(!settling.is_finished(), "the settle did not wait");
    let_through.send(()).unwrap();
    removing.join().unwrap().unwrap();
    settling.join().unwrap().unwrap();
    assert!(!journaled(), "both done: the journal goes");
    assert!(!device.holds(1));
}

/// A write made while a reclamation of its file writes back what came
/// before it: the reclamation is journaled in the same step as it takes
/// those bytes, so the write comes after it in the journal as on the
/// device, and a replay after a crash keeps the write where the running
/// tier kept it (it was once journaled before the reclamation, which the
/// replay then let free it).
#[test]
fn a_write_during_a_reclamation_is_replayed_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let device = Arc::new(FileBackend::open(dir.path()).unwrap());
    let (gated, on_begin, let_through) = Gated::over(device.clone());
    let tier = Arc::new(Tier::new(gated.clone(), device.clone(), 1 << 20).unwrap());
    tier.write(1, &[(0, b"kept by the reclamation")], false)
        .unwrap();
    *gated.hook.gated.lock() = Some("write");
    let reclaiming = {
        let tier = tier.clone();
        std::thread::spawn(move || tier.keep_only(1, 0, u64::MAX, &[(0, 10)]))
    };
    on_begin.recv().unwrap();
    // The reclamation writes back what came before it; this write comes
    // meanwhile, past what it keeps.
    tier.write(1, &[(100, b"0123456789")], false).unwrap();
    let_through.send(()).unwrap();
    reclaiming.join().unwrap().unwrap();
    let mut want = b"kept by th".to_vec();
    want.resize(100, 0);
    want.extend_from_slice(b"0123456789");
    assert_eq!(read(tier.as_ref(), 1, 0, 110), want, "the running tier");
    // A crash now: nothing of the tier's memory is left, and the next
    // start replays the journal.
    std::mem::forget(Arc::try_unwrap(tier).expect("one tier"));
    let stack = Spec::try_from(vec!["file".to_string()])
        .unwrap()
        .over(device.clone())
        .unwrap();
    assert_eq!(read(stack.as_ref(), 1, 0, 110), want, "after the replay");
}
