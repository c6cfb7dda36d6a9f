//! A worker's stack that changes while labels run (LabStor's live upgrade):
//! the backend stays open, and the layers over it are rebuilt from the new
//! declaration and put in place between two calls. Every call runs whole
//! on the stack it began on: a change waits for the calls on the old stack
//! to finish, and the calls after it run on the new one, so no label fails
//! for a change and none meets two stacks at once. Every stack has every
//! layer, passive where not named (see [`crate::LAYERS`]), so the new
//! stack reads whatever the old one wrote.

use crate::{Backend, Place, Spec};
use labios_label::{Error, FileId, Result};
use parking_lot::RwLock;
use std::sync::Arc;

/// The stack a worker runs now, over the backend it opened at start.
#[derive(Debug)]
pub struct Live {
    backend: Arc<dyn Backend>,
    /// The declaration and the stack built from it. Calls hold it shared;
    /// a change holds it alone (the lock is fair: a waiting change is not
    /// starved by the calls that keep coming).
    now: RwLock<(Spec, Arc<dyn Backend>)>,
}

impl Live {
    /// Opens the backend of `place`'s stack in its directory, holding at
    /// most `capacity` bytes, with the stack over it (and the place's
    /// device faults between them).
    pub fn open(place: &Place, capacity: u64) -> Result<Live> {
        let spec = &place.stack;
        let backend = place.faults.over(spec.open(&place.dir, capacity)?);
        Ok(Live {
            now: RwLock::new((spec.clone(), spec.over(backend.clone())?)),
            backend,
        })
    }

    /// The declaration the stack runs now.
    pub fn spec(&self) -> Spec {
        self.now.read().0.clone()
    }

    /// Puts the stack `spec` declares in place, once the calls on the
    /// current one have finished; blocks until then. The backend cannot
    /// change this way: its bytes would have to move.
    pub fn set(&self, spec: Spec) -> Result<()> {
        let was = self.spec();
        if spec.backend() != was.backend() {
            return Err(Error::InvalidArgument(format!(
                "stack: {spec} keeps its bytes on {:?}, this worker on {:?}; a running worker \
                 changes its layers, not its backend",
                spec.backend(),
                was.backend()
            )));
        }
        let mut now = self.now.write();
        // What the old stack holds only in memory reaches the backend
        // before the new one is built (a new stack replays any journal it
        // finds) or takes a call; if it cannot, the old one stays.
        now.1.settle()?;
        let stack = spec.over(self.backend.clone())?;
        *now = (spec, stack);
        Ok(())
    }

    fn stack(&self) -> parking_lot::RwLockReadGuard<'_, (Spec, Arc<dyn Backend>)> {
        self.now.read()
    }
}

impl Backend for Live {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        self.stack().1.write(file, pieces, sync)
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.stack().1.read(file, offset, buf)
    }

    fn remove(&self, file: FileId) -> Result<()> {
        self.stack().1.remove(file)
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        self.stack().1.keep_only(file, start, end, held)
    }

    fn files(&self) -> Result<Vec<FileId>> {
        self.stack().1.files()
    }

    fn flush(&self, file: FileId) -> Result<()> {
        self.stack().1.flush(file)
    }

    fn holds(&self, file: FileId) -> bool {
        self.stack().1.holds(file)
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        self.stack().1.len(file)
    }

    fn used(&self) -> u64 {
        self.stack().1.used()
    }

    fn settle(&self) -> Result<()> {
        self.stack().1.settle()
    }
}
