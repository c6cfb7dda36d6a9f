//! A worker's I/O stack (LabStor's LabStack; LABIOS article 3.3.3): what a
//! worker does to its storage, behind one [`Backend`] trait, in the shape
//! of Apache OpenDAL: one access trait, one module per backend under
//! `backends/`, and a stack built from the worker's declaration by one
//! registry ([`Spec`]), so that a new backend is one file plus one line.
//!
//! A stack is declared per worker as module names, the backend last
//! (`[[workers]] stack = ["file"]`). Layers that wrap any backend come
//! before it; the registry refuses a name it does not know, naming it.
//!
//! Files are LABIOS file ids and offsets are the file's own: a label names
//! a byte range of a LABIOS file, and every backend keeps those offsets,
//! so a label is one positional write or read whatever the backend.
//! All methods block; callers run them off the async executor.

pub mod backends;
pub mod conformance;
pub mod layers;

use labios_label::{Error, FileId, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a worker does to its storage.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Writes each `(offset, bytes)` piece at its offset of `file`. Bytes
    /// outside the pieces do not change. With `sync`, the pieces are on
    /// the durable device before this returns where the backend has one.
    fn write(&self, file: FileId, pieces: &[(u64, &[u8])], sync: bool) -> Result<()>;
    /// Fills `buf` from `offset` of `file`; holes read as zeros. A file
    /// that is missing, or shorter than the range, is an error naming it,
    /// never a short read: the inventory said these bytes are here.
    fn read(&self, file: FileId, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Drops every byte of `file`; a file never written is fine.
    fn remove(&self, file: FileId) -> Result<()>;
    /// Frees every byte of `file` in `start..end` outside `held` (sorted,
    /// disjoint ranges the inventory gives this worker): what an overwrite
    /// elsewhere or a truncation left behind. With `end == u64::MAX` the
    /// file also ends at its last held byte, and goes if it holds none.
    fn keep_only(&self, file: FileId, start: u64, end: u64, held: &[(u64, u64)]) -> Result<()>;
    /// The files this backend holds bytes of.
    fn files(&self) -> Result<Vec<FileId>>;
    /// Makes what was written to `file` durable, where the backend can.
    fn flush(&self, file: FileId) -> Result<()>;
    /// Whether any bytes of `file` are held.
    fn holds(&self, file: FileId) -> bool;
    /// One past the last byte of `file` held (its local length); `None`
    /// when nothing of it is.
    fn len(&self, file: FileId) -> Result<Option<u64>>;
    /// Bytes held (allocated, not logical sizes).
    fn used(&self) -> u64;
}

/// Whether a [`Backend::keep_only`] of `..end` keeping `held` leaves the
/// file nothing (it then goes); asserts the invariant of `held`, sorted
/// and disjoint, which every backend relies on.
fn keeps_nothing(end: u64, held: &[(u64, u64)]) -> bool {
    assert!(
        held.windows(2).all(|w| w[0].1 <= w[1].0),
        "held ranges overlap or are unsorted: {held:?}"
    );
    end == u64::MAX && held.is_empty()
}

/// A worker's stack as declared: module names, the backend last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Spec(Vec<String>);

impl Default for Spec {
    /// The article's worker: a file per LABIOS file.
    fn default() -> Self {
        Spec(vec!["file".to_string()])
    }
}

/// What a backend is built from: the worker's storage directory and the
/// bytes it may hold.
type Open = fn(&Path, u64) -> Result<Arc<dyn Backend>>;

/// Every backend a stack may end in, by name.
const BACKENDS: &[(&str, Open)] = &[
    ("file", |dir, _| {
        Ok(Arc::new(backends::file::FileBackend::open(dir)?))
    }),
    ("kv", |dir, capacity| {
        Ok(Arc::new(backends::kv::KvBackend::open(dir, capacity)?))
    }),
    ("memory", |_, capacity| {
        Ok(Arc::new(backends::memory::MemoryBackend::new(capacity)))
    }),
];

/// What a layer wraps: the stack below it.
type Wrap = fn(Arc<dyn Backend>) -> Arc<dyn Backend>;

/// Every layer a stack may put over its backend, by name.
const LAYERS: &[(&str, Wrap)] = &[("checksum", |inner| {
    Arc::new(layers::checksum::Checksum::new(inner))
})];

fn known<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

impl TryFrom<Vec<String>> for Spec {
    type Error = Error;

    /// Refuses an empty stack, a last module that is not a backend, and
    /// a module before it that is not a layer.
    fn try_from(names: Vec<String>) -> Result<Spec> {
        let Some((last, layers)) = names.split_last() else {
            return Err(Error::InvalidArgument(format!(
                "stack: empty; it ends in a backend ({})",
                known(BACKENDS)
            )));
        };
        if !BACKENDS.iter().any(|(n, _)| n == last) {
            return Err(Error::InvalidArgument(format!(
                "stack: unknown backend {last:?} (known: {})",
                known(BACKENDS)
            )));
        }
        if let Some(layer) = layers.iter().find(|l| !LAYERS.iter().any(|(n, _)| n == l)) {
            return Err(Error::InvalidArgument(format!(
                "stack: unknown layer {layer:?} (known: {})",
                known(LAYERS)
            )));
        }
        Ok(Spec(names))
    }
}

impl From<Spec> for Vec<String> {
    fn from(spec: Spec) -> Vec<String> {
        spec.0
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

impl Spec {
    /// The stack a worker storing under `dir`, at most `capacity` bytes,
    /// runs.
    pub fn build(&self, dir: &Path, capacity: u64) -> Result<Arc<dyn Backend>> {
        let (name, layers) = self.0.split_last().expect("a spec ends in a backend");
        let (_, open) = BACKENDS
            .iter()
            .find(|(n, _)| n == name)
            .expect("a spec names only known backends");
        let mut stack = open(dir, capacity)?;
        for layer in layers.iter().rev() {
            let (_, wrap) = LAYERS
                .iter()
                .find(|(n, _)| n == layer)
                .expect("a spec names only known layers");
            stack = wrap(stack);
        }
        Ok(stack)
    }

    /// Whether the stack keeps what it holds across a restart of its
    /// worker.
    pub fn durable(&self) -> bool {
        self.0.last().is_some_and(|b| b != "memory")
    }
}

/// Where and on what a worker keeps its bytes: its directory and its stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub dir: PathBuf,
    pub stack: Spec,
}

impl From<PathBuf> for Place {
    /// The default stack in `dir`.
    fn from(dir: PathBuf) -> Place {
        Place {
            dir,
            stack: Spec::default(),
        }
    }
}
