//! `metrics`: calls, bytes and time at every layer of a stack (LabStor's
//! per-LabMod statistics), so that an administrator sees where a worker's
//! storage time goes without a profiler. Named first in a stack
//! (`metrics,checksum,zstd,file`), it puts a [`Metered`] over the backend
//! and over each layer the stack names; a layer's own time is its
//! meter's less the meter below it. Counters run from the moment the
//! stack was built (a live change starts new ones).
//!
//! Every stack also has one meter on top that only feeds the label
//! anatomy (`labios bench anatomy`'s "worker: storage I/O"), which costs
//! one relaxed load per call while no anatomy is measured: the storage
//! phase is timed here, in one place, not at the worker's call sites.

use crate::Backend;
use labios_label::anatomy::{self, Phase};
use labios_label::{FileId, LayerStats, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The module name that turns the meters on.
pub const NAME: &str = "metrics";

/// One layer's counters, shared by the stack and whoever reports them.
#[derive(Debug, Default)]
pub struct Meter {
    name: String,
    writes: AtomicU64,
    reads: AtomicU64,
    others: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
    nanos: AtomicU64,
}

impl Meter {
    pub fn new(name: &str) -> Meter {
        Meter {
            name: name.to_string(),
            ..Meter::default()
        }
    }

    /// What the counters say now.
    pub fn stats(&self) -> LayerStats {
        LayerStats {
            name: self.name.clone(),
            writes: self.writes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            others: self.others.load(Ordering::Relaxed),
            written: self.written.load(Ordering::Relaxed),
            read: self.read.load(Ordering::Relaxed),
            nanos: self.nanos.load(Ordering::Relaxed),
        }
    }
}

/// What kind of call a meter counts, and its bytes.
#[derive(Clone, Copy)]
enum Call {
    Write(u64),
    Read(u64),
    Other,
}

/// What a [`Metered`] does with its calls.
#[derive(Debug)]
enum Watch {
    /// Counts them on the meter of the layer below.
    Counting(Arc<Meter>),
    /// Times them as the worker's storage phase of the label anatomy,
    /// while one is measured.
    Anatomy,
}

/// A meter over the stack below it; see the module docs.
#[derive(Debug)]
pub struct Metered {
    inner: Arc<dyn Backend>,
    watch: Watch,
}

impl Metered {
    /// Counts every call to `inner` on `meter`.
    pub fn counting(inner: Arc<dyn Backend>, meter: Arc<Meter>) -> Metered {
        Metered {
            inner,
            watch: Watch::Counting(meter),
        }
    }

    /// Times every call to `inner` as the worker's storage phase of the
    /// label anatomy, while one is measured.
    pub fn anatomy(inner: Arc<dyn Backend>) -> Metered {
        Metered {
            inner,
            watch: Watch::Anatomy,
        }
    }

    fn timed<T>(&self, call: Call, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let meter = match &self.watch {
            Watch::Counting(meter) => meter,
            Watch::Anatomy => {
                let t = anatomy::start();
                let out = f();
                anatomy::record(Phase::WorkerStorage, t);
                return out;
            }
        };
        let t = Instant::now();
        let out = f();
        meter
            .nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let (count, bytes) = match call {
            Call::Write(n) => (&meter.writes, Some((&meter.written, n))),
            Call::Read(n) => (&meter.reads, Some((&meter.read, n))),
            Call::Other => (&meter.others, None),
        };
        count.fetch_add(1, Ordering::Relaxed);
        if let (Some((total, n)), true) = (bytes, out.is_ok()) {
            total.fetch_add(n, Ordering::Relaxed);
        }
        out
    }
}

impl Backend for Metered {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        let n = pieces.iter().map(|(_, d)| d.len() as u64).sum();
        self.timed(Call::Write(n), || self.inner.write(file, pieces, sync))
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u64;
        self.timed(Call::Read(n), || self.inner.read(file, offset, buf))
    }

    fn remove(&self, file: FileId) -> Result<()> {
        self.timed(Call::Other, || self.inner.remove(file))
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        self.timed(Call::Other, || self.inner.keep_only(file, start, end, held))
    }

    fn flush(&self, file: FileId) -> Result<()> {
        self.timed(Call::Other, || self.inner.flush(file))
    }

    fn settle(&self) -> Result<()> {
        self.timed(Call::Other, || self.inner.settle())
    }

    crate::pass_through!(inner: files, holds, len, used);
}
