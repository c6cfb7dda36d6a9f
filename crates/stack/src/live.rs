//! A worker's stack that changes while labels run (LabStor's live upgrade):
//! the backend stays open, and the layers over it are rebuilt from the new
//! declaration and put in place between two calls. Every call runs whole
//! on the stack it began on: a change waits for the calls on the old stack
//! to finish, and the calls after it run on the new one, so no label fails
//! for a change and none meets two stacks at once. Every stack has every
//! layer, passive where not named (see [`crate::LAYERS`]), so the new
//! stack reads whatever the old one wrote.

use crate::{Backend, Meters, Place, Spec};
use labios_label::{AppId, Error, FileId, Result};
use parking_lot::RwLock;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The stack a worker runs now, over the backend it opened at start.
#[derive(Debug)]
pub struct Live {
    backend: Arc<dyn Backend>,
    /// Where a tier keeps its journal (`Spec::journal`).
    journal: Arc<dyn Backend>,
    /// The declaration, the stack built from it and its meters. Calls
    /// hold it shared; a change holds it alone (the lock is fair: a
    /// waiting change is not starved by the calls that keep coming).
    now: RwLock<Now>,
}

#[derive(Debug)]
struct Now {
    spec: Spec,
    stack: Arc<dyn Backend>,
    meters: Meters,
    /// The applications the spec's `auth` module admits (`None`: every
    /// one), parsed once: every label asks.
    admitted: Option<BTreeSet<AppId>>,
}

impl Now {
    fn build(spec: Spec, backend: Arc<dyn Backend>, journal: &Arc<dyn Backend>) -> Result<Now> {
        let (stack, meters) = spec.over_journaled(backend, journal)?;
        Ok(Now {
            admitted: spec.admitted(),
            spec,
            stack,
            meters,
        })
    }
}

impl Live {
    /// Opens the backend of `place`'s stack in its directory, holding at
    /// most `capacity` bytes, with the stack over it (and the place's
    /// device faults between them).
    pub fn open(place: &Place, capacity: u64) -> Result<Live> {
        Live::open_with(place, capacity, None)
    }

    /// [`Self::open`], with the worker's external storage for a stack
    /// ending in `external:MOUNT`.
    pub fn open_with(
        place: &Place,
        capacity: u64,
        externals: Option<&dyn crate::Externals>,
    ) -> Result<Live> {
        let spec = &place.stack;
        let backend = place
            .faults
            .over(spec.open_with(&place.dir, capacity, externals)?);
        let journal = spec.journal(&place.dir, &backend)?;
        Ok(Live {
            now: RwLock::new(Now::build(spec.clone(), backend.clone(), &journal)?),
            backend,
            journal,
        })
    }

    /// The declaration the stack runs now.
    pub fn spec(&self) -> Spec {
        self.now.read().spec.clone()
    }

    /// Whether the stack now lets application `app`'s labels run (its
    /// `auth` module); a change of stack changes it between two labels.
    pub fn admits(&self, app: AppId) -> bool {
        self.now
            .read()
            .admitted
            .as_ref()
            .is_none_or(|apps| apps.contains(&app))
    }

    /// Each layer's counters since the stack was put in place, top first
    /// (empty unless it names `metrics`).
    pub fn layers(&self) -> Vec<labios_label::LayerStats> {
        self.now.read().meters.stats()
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
        now.stack.settle()?;
        *now = Now::build(spec, self.backend.clone(), &self.journal)?;
        Ok(())
    }

    /// The stack now, held for the whole of a call: a change waits for
    /// it to end.
    fn stack(&self) -> parking_lot::RwLockReadGuard<'_, Now> {
        self.now.read()
    }
}

impl Backend for Live {
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()> {
        self.stack().stack.write(file, pieces, sync)
    }

    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.stack().stack.read(file, offset, buf)
    }

    fn remove(&self, file: FileId) -> Result<()> {
        self.stack().stack.remove(file)
    }

    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()> {
        self.stack().stack.keep_only(file, start, end, held)
    }

    fn files(&self) -> Result<Vec<FileId>> {
        self.stack().stack.files()
    }

    fn flush(&self, file: FileId) -> Result<()> {
        self.stack().stack.flush(file)
    }

    fn holds(&self, file: FileId) -> bool {
        self.stack().stack.holds(file)
    }

    fn len(&self, file: FileId) -> Result<Option<u64>> {
        self.stack().stack.len(file)
    }

    fn used(&self) -> u64 {
        self.stack().stack.used()
    }

    fn settle(&self) -> Result<()> {
        self.stack().stack.settle()
    }
}
