//! Injected device faults, for tests only (issue 11): what a worker's
//! storage device may do wrong, between the backend and the layers over
//! it, so that the model checker shows what LABIOS promises when a device
//! misbehaves. A change (write, reclamation, removal, flush) may fail
//! before it takes effect, or take effect and then report failure; a read
//! may fail. The worker retries a failed device call a few times, then
//! fails the label; each layer's change must leave its data readable
//! whichever of its device calls failed (`tests/crashes.rs` stops a
//! device at each of them in turn).
//!
//! Off unless configured (a non-zero seed): never for production.

use crate::Backend;
use labios_label::{Error, FileId, Result};
use parking_lot::Mutex;
use std::sync::Arc;

/// A device's fault rates, per million calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceFaults {
    /// 0: no faults at all.
    pub seed: u64,
    /// A call fails before it takes effect.
    pub error_ppm: u32,
    /// A change takes effect, then reports failure.
    pub lost_reply_ppm: u32,
}

impl DeviceFaults {
    pub fn enabled(&self) -> bool {
        self.seed != 0
    }

    /// `device` behind these faults (unchanged when they are off).
    pub fn over(&self, device: Arc<dyn Backend>) -> Arc<dyn Backend> {
        if !self.enabled() {
            return device;
        }
        Arc::new(Faulty {
            inner: device,
            rates: *self,
            rng: Mutex::new(fastrand::Rng::with_seed(self.seed)),
        })
    }
}

/// A device whose calls a seeded generator fails, as [`DeviceFaults`]
/// says. The seed fixes the decisions of a sequence of calls; concurrent
/// interleavings still vary between runs.
#[derive(Debug)]
struct Faulty {
    inner: Arc<dyn Backend>,
    rates: DeviceFaults,
    rng: Mutex<fastrand::Rng>,
}

fn injected(what: &str, file: FileId) -> Error {
    Error::Storage(format!("injected device fault: {what} of file {file:016x}"))
}

impl Faulty {
    fn roll(&self, ppm: u32) -> bool {
        ppm > 0 && self.rng.lock().u32(0..1_000_000) < ppm
    }

    /// Runs the change `call` under a decision: a failure before it, or
    /// its success replaced by a failure after it.
    fn change(&self, what: &str, file: FileId, call: impl FnOnce() -> Result<()>) -> Result<()> {
        if self.roll(self.rates.error_ppm) {
            return Err(injected(what, file));
        }
        call()?;
        if self.roll(self.rates.lost_reply_ppm) {
            return Err(injected(what, file));
        }
        Ok(())
    }
}

impl Backend for Faulty {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        self.change("write", file, || self.inner.write(file, pieces, sync))
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        if self.roll(self.rates.error_ppm) {
            return Err(injected("read", file));
        }
        self.inner.read(file, offset, buf)
    }

    fn remove(&self, file: FileId) -> Result<()> {
        self.change("removal", file, || self.inner.remove(file))
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        self.change("reclamation", file, || {
            self.inner.keep_only(file, start, end, held)
        })
    }

    crate::pass_through!(inner: files, holds, len, used);

    fn flush(&self, file: FileId) -> Result<()> {
        self.change("flush", file, || self.inner.flush(file))
    }
}
