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
pub mod faults;
pub mod layers;
pub mod live;

use labios_label::worker::{is_auth, AUTH};
use labios_label::{AppId, Error, FileId, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest LABIOS file id a stack stores. Layers keep their own data
/// under ids with bits above this one set (the codec's unit records and
/// second slots, the checksum's sums, the tier's journal), so an id
/// beyond it would be taken for another file's companion. The inventory
/// counts file ids up from 1; a label naming one beyond this is refused.
pub const LAST_FILE: FileId = (1 << 60) - 1;

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
    /// Writes down whatever the stack holds only in memory (a `tier`'s
    /// dirty bytes), before the stack is changed or stopped. Only the top
    /// of a stack buffers, so the layers below keep this default.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

/// Implements the named [`Backend`] methods (`files`, `flush`, `holds`,
/// `len`, `used`, and for wrappers that change only some calls, `read`,
/// `remove`, `keep_only`) of a layer by passing each to the backend in its
/// field `$inner` unchanged: a layer states only what it changes.
#[macro_export]
macro_rules! pass_through {
    ($inner:ident: $($method:ident),+ $(,)?) => {
        $($crate::pass_through!(@ $inner $method);)+
    };
    (@ $inner:ident files) => {
        fn files(&self) -> ::labios_label::Result<Vec<::labios_label::FileId>> {
            self.$inner.files()
        }
    };
    (@ $inner:ident flush) => {
        fn flush(&self, file: ::labios_label::FileId) -> ::labios_label::Result<()> {
            self.$inner.flush(file)
        }
    };
    (@ $inner:ident holds) => {
        fn holds(&self, file: ::labios_label::FileId) -> bool {
            self.$inner.holds(file)
        }
    };
    (@ $inner:ident len) => {
        fn len(&self, file: ::labios_label::FileId) -> ::labios_label::Result<Option<u64>> {
            self.$inner.len(file)
        }
    };
    (@ $inner:ident used) => {
        fn used(&self) -> u64 {
            self.$inner.used()
        }
    };
    (@ $inner:ident read) => {
        fn read(
            &self,
            file: ::labios_label::FileId,
            offset: u64,
            buf: &mut [u8],
        ) -> ::labios_label::Result<()> {
            self.$inner.read(file, offset, buf)
        }
    };
    (@ $inner:ident remove) => {
        fn remove(&self, file: ::labios_label::FileId) -> ::labios_label::Result<()> {
            self.$inner.remove(file)
        }
    };
    (@ $inner:ident keep_only) => {
        fn keep_only(
            &self,
            file: ::labios_label::FileId,
            start: u64,
            end: u64,
            held: &[(u64, u64)],
        ) -> ::labios_label::Result<()> {
            self.$inner.keep_only(file, start, end, held)
        }
    };
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

/// What a backend is built from: the worker's storage directory, the
/// bytes it may hold, the module's argument (`external:NAME`) and the
/// worker's external storage.
struct Opening<'a> {
    dir: &'a Path,
    capacity: u64,
    argument: Option<&'a str>,
    externals: Option<&'a dyn Externals>,
}

type Open = fn(&Opening) -> Result<Arc<dyn Backend>>;

/// The backend that keeps a worker's blocks in a declared mount.
pub const EXTERNAL: &str = "external";

/// Every backend a stack may end in, by name.
const BACKENDS: &[(&str, Open)] = &[
    ("file", |o| {
        Ok(Arc::new(backends::file::FileBackend::open(o.dir)?))
    }),
    ("kv", |o| {
        Ok(Arc::new(backends::kv::KvBackend::open(o.dir, o.capacity)?))
    }),
    ("memory", |o| {
        Ok(Arc::new(backends::memory::MemoryBackend::new(o.capacity)))
    }),
    (EXTERNAL, |o| {
        let mount = o
            .argument
            .expect("a spec names the mount of an external backend");
        let externals = o.externals.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "stack: \"{EXTERNAL}:{mount}\" keeps its bytes in a mount; only a worker, \
                 which has the configuration's mounts, opens it"
            ))
        })?;
        externals.open(mount, o.capacity)
    }),
];

/// Opens the backend of a stack ending in `external:MOUNT`: the mounts are
/// declared in the configuration and reached through labios-bridge, above
/// this crate, so the worker hands them in.
pub trait Externals: Send + Sync {
    /// The backend that keeps this worker's bytes in mount `mount`, at
    /// most `capacity` of them; an unknown mount is an error naming it.
    fn open(&self, mount: &str, capacity: u64) -> Result<Arc<dyn Backend>>;
}

/// What a layer wraps: the stack below it, the backend under every layer
/// (where the tier keeps its journal), and the module the stack names for
/// the layer, its argument included (`None`: the stack does not name it,
/// and it runs passive).
type Wrap = fn(Arc<dyn Backend>, &Arc<dyn Backend>, Option<&str>) -> Result<Arc<dyn Backend>>;

/// The layers, from the top: each is one or more names for one layer's
/// work. Every stack has each of them, just above its backend and in this
/// order: each records per block what wrote it, and one a stack does not
/// name runs passive, reading what its records say and starting none, so
/// that a stack can change under the data an earlier one wrote. (The
/// tier, the cache and the scheduler record nothing: unnamed, they are not
/// there. The tier is on top, so that a write is acknowledged before the
/// layers below spend anything on it; the scheduler at the bottom, so that
/// it orders what the device is asked.)
pub(crate) const LAYERS: &[(&[&str], Wrap)] = &[
    // Unnamed, the tier is not there, but a journal a stopped tier left
    // on the backend is replayed all the same.
    (&["tier"], |inner, raw, named| match named {
        Some(module) => Ok(Arc::new(layers::tier::Tier::new(
            inner,
            raw.clone(),
            layers::cache::size_of(module, layers::tier::DEFAULT_BYTES)?,
        )?)),
        None => {
            layers::tier::replay(inner.as_ref(), raw.as_ref())?;
            Ok(inner)
        }
    }),
    (&["checksum"], |inner, _, named| {
        Ok(Arc::new(layers::checksum::Checksum::new(
            inner,
            named.is_some(),
        )))
    }),
    (&["cache"], |inner, _, named| match named {
        Some(module) => Ok(Arc::new(layers::cache::Cache::new(
            inner,
            layers::cache::size_of(module, layers::cache::DEFAULT_BYTES)?,
        ))),
        None => Ok(inner),
    }),
    (&["zstd", "lz4"], |inner, _, named| {
        use layers::compress::{Codec, Compress};
        let codec = match named {
            Some("zstd") => Codec::Zstd,
            Some("lz4") => Codec::Lz4,
            _ => Codec::Raw,
        };
        Ok(Arc::new(Compress::new(inner, codec)))
    }),
    // Unnamed, it is not there: calls reach the device as they come.
    (&["scheduler"], |inner, _, named| match named {
        Some(module) => {
            let (policy, depth) = layers::scheduler::parse(module)?;
            Ok(Arc::new(layers::scheduler::Scheduler::new(
                inner, policy, depth,
            )))
        }
        None => Ok(inner),
    }),
];

fn known<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// The index in [`LAYERS`] of the layer `module` names (its name is what
/// comes before any `:ARGUMENT`).
fn layer_of(module: &str) -> Option<usize> {
    let name = module.split(':').next().unwrap_or(module);
    LAYERS.iter().position(|(names, _)| names.contains(&name))
}

/// Refuses an argument the layer of `module` does not take, or one it
/// cannot read, naming the module.
fn check_argument(module: &str) -> Result<()> {
    match module.split_once(':') {
        None => Ok(()),
        Some(("cache" | "tier", _)) => layers::cache::size_of(module, 0).map(drop),
        Some(("scheduler", _)) => layers::scheduler::parse(module).map(drop),
        Some((name, _)) => Err(Error::InvalidArgument(format!(
            "stack: {module:?}: the {name} layer takes no argument"
        ))),
    }
}

/// A module's name and the argument after its `:`, if any.
fn name_and_argument(module: &str) -> (&str, Option<&str>) {
    match module.split_once(':') {
        Some((name, argument)) => (name, Some(argument)),
        None => (module, None),
    }
}

/// `modules` without the `auth` module that may lead them.
fn below_auth(modules: &[String]) -> &[String] {
    match modules.split_first() {
        Some((first, rest)) if is_auth(first) => rest,
        _ => modules,
    }
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
        let (name, argument) = name_and_argument(last);
        if !BACKENDS.iter().any(|(n, _)| *n == name) {
            return Err(Error::InvalidArgument(format!(
                "stack: unknown backend {last:?} (known: {})",
                known(BACKENDS)
            )));
        }
        match (name, argument) {
            (EXTERNAL, Some(mount)) if !mount.is_empty() => {}
            (EXTERNAL, _) => {
                return Err(Error::InvalidArgument(format!(
                    "stack: {last:?}: the external backend names a mount, {EXTERNAL}:NAME"
                )))
            }
            (_, Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "stack: {last:?}: the {name} backend takes no argument"
                )))
            }
            (_, None) => {}
        }
        // `auth` is above the trait (the worker checks a label before any
        // call), so it comes first of all.
        if let Some(auth) = layers.first().filter(|m| is_auth(m)) {
            labios_label::worker::admitted(auth)?;
        }
        let layers = below_auth(layers);
        // `metrics` times the layers under it, so it comes first of them.
        let layers = match layers.split_first() {
            Some((first, rest)) if first == layers::metrics::NAME => rest,
            _ => layers,
        };
        let mut above: Option<(usize, &String)> = None;
        for layer in layers {
            if is_auth(layer) {
                return Err(Error::InvalidArgument(format!(
                    "stack: {layer:?} comes first, once: a label is admitted before any layer runs"
                )));
            }
            if layer.split(':').next() == Some(layers::metrics::NAME) {
                return Err(Error::InvalidArgument(if layer == layers::metrics::NAME {
                    format!(
                        "stack: {layer:?} comes first, once (only auth before it): it times \
                         every layer below it"
                    )
                } else {
                    format!("stack: {layer:?}: the metrics layer takes no argument")
                }));
            }
            let Some(at) = layer_of(layer) else {
                let names: Vec<&str> = [AUTH, layers::metrics::NAME]
                    .into_iter()
                    .chain(LAYERS.iter().flat_map(|(n, _)| n.iter().copied()))
                    .collect();
                return Err(Error::InvalidArgument(format!(
                    "stack: unknown layer {layer:?} (known: {})",
                    names.join(", ")
                )));
            };
            check_argument(layer)?;
            match above {
                Some((was, name)) if was == at => {
                    return Err(Error::InvalidArgument(format!(
                        "stack: {name:?} and {layer:?} do one layer's work; name one"
                    )))
                }
                Some((was, name)) if was > at => {
                    return Err(Error::InvalidArgument(format!(
                        "stack: {layer:?} must come before {name:?}"
                    )))
                }
                _ => above = Some((at, layer)),
            }
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
        self.over(self.open(dir, capacity)?)
    }

    /// The stack's backend alone, opened under `dir`, or in one of
    /// `externals` for an `external:MOUNT` stack.
    pub fn open_with(
        &self,
        dir: &Path,
        capacity: u64,
        externals: Option<&dyn Externals>,
    ) -> Result<Arc<dyn Backend>> {
        let (name, argument) = name_and_argument(self.backend());
        let (_, open) = BACKENDS
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a spec names only known backends");
        open(&Opening {
            dir,
            capacity,
            argument,
            externals,
        })
    }

    /// The stack's backend alone, opened under `dir`.
    pub fn open(&self, dir: &Path, capacity: u64) -> Result<Arc<dyn Backend>> {
        self.open_with(dir, capacity, None)
    }

    /// The name of the stack's backend.
    pub fn backend(&self) -> &str {
        self.0.last().expect("a spec ends in a backend")
    }

    /// The stack's layers over `backend`, which the stack's own backend
    /// opened: every layer, passive where the stack does not name it. A
    /// tier's journal left on `backend` is replayed first, so no other
    /// stack may be taking calls on it.
    pub fn over(&self, backend: Arc<dyn Backend>) -> Result<Arc<dyn Backend>> {
        Ok(self.over_metered(backend)?.0)
    }

    /// [`Self::over`], and the meters of its layers, top first: one for
    /// each module the stack names when it names `metrics`
    /// (layers/metrics.rs), none otherwise.
    pub fn over_metered(&self, backend: Arc<dyn Backend>) -> Result<(Arc<dyn Backend>, Meters)> {
        let journal = backend.clone();
        self.over_journaled(backend, &journal)
    }

    /// [`Self::over_metered`], with a `tier`'s journal kept on `journal`
    /// rather than on the backend: a local device under a stack whose
    /// backend is remote (`external`), so that acknowledging a write costs
    /// a local append, not a request to the mount.
    pub fn over_journaled(
        &self,
        backend: Arc<dyn Backend>,
        journal: &Arc<dyn Backend>,
    ) -> Result<(Arc<dyn Backend>, Meters)> {
        use layers::metrics::{Meter, Metered};
        let metered = self.below_auth()[0] == layers::metrics::NAME;
        let mut meters = Vec::new();
        let mut meter = |stack: Arc<dyn Backend>, name: &str| -> Arc<dyn Backend> {
            if !metered {
                return stack;
            }
            let m = Arc::new(Meter::new(name));
            meters.push(m.clone());
            Arc::new(Metered::counting(stack, m))
        };
        let bottom = meter(backend.clone(), self.backend());
        let below = self.below_auth();
        let layers = &below[..below.len() - 1];
        let top = LAYERS
            .iter()
            .rev()
            .try_fold(bottom, |stack, (names, wrap)| {
                let named = layers.iter().find(|l| layer_of(l) == layer_of(names[0]));
                let wrapped = wrap(stack, journal, named.map(String::as_str))?;
                Ok::<_, Error>(match named {
                    Some(name) => meter(wrapped, name),
                    None => wrapped,
                })
            })?;
        meters.reverse();
        Ok((Arc::new(Metered::anatomy(top)), Meters(meters)))
    }

    /// The modules under `auth`: the layers and the backend the stack is
    /// built of.
    fn below_auth(&self) -> &[String] {
        below_auth(&self.0)
    }

    /// The applications a worker running this stack lets run there (its
    /// `auth` module, [`AUTH`]; `None`: every one).
    pub fn admitted(&self) -> Option<BTreeSet<AppId>> {
        labios_label::worker::admitted_by(&self.0)
    }

    /// Where a `tier` of this stack keeps its journal, given the backend
    /// opened under `dir`: the backend itself, or for an `external`
    /// backend a `file` backend in the worker's own directory.
    pub fn journal(&self, dir: &Path, backend: &Arc<dyn Backend>) -> Result<Arc<dyn Backend>> {
        match name_and_argument(self.backend()) {
            (EXTERNAL, _) => Ok(Arc::new(backends::file::FileBackend::open(
                &dir.join("journal"),
            )?)),
            _ => Ok(backend.clone()),
        }
    }

    /// Whether the stack keeps what it holds across a restart of its
    /// worker (an `external` one: as its mount's service does).
    pub fn durable(&self) -> bool {
        self.backend() != "memory"
    }

    /// Whether the stack acknowledges writes before they reach its
    /// backend (it names `tier`): a crash loses those not yet written
    /// back (layers/tier.rs).
    pub fn buffers(&self) -> bool {
        self.0.iter().any(|m| layer_of(m) == layer_of("tier"))
    }
}

/// The meters of a stack's layers, top first (empty unless the stack
/// names `metrics`).
#[derive(Debug, Default, Clone)]
pub struct Meters(Vec<Arc<layers::metrics::Meter>>);

impl Meters {
    /// What each layer's counters say now.
    pub fn stats(&self) -> Vec<labios_label::LayerStats> {
        self.0.iter().map(|m| m.stats()).collect()
    }
}

/// Where and on what a worker keeps its bytes: its directory, its stack,
/// and the faults its device is made to show (tests only; off by
/// default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub dir: PathBuf,
    pub stack: Spec,
    pub faults: faults::DeviceFaults,
}

impl From<PathBuf> for Place {
    /// The default stack in `dir`.
    fn from(dir: PathBuf) -> Place {
        Place {
            dir,
            stack: Spec::default(),
            faults: Default::default(),
        }
    }
}
