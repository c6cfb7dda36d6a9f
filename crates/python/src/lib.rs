//! `labios._labios`, the native half of the `labios` Python package: a
//! blocking LABIOS session (the one the C API uses) behind Python objects.
//!
//! Every call that waits on LABIOS releases the interpreter (`detach`), so
//! other Python threads run meanwhile. Writes take any object with the buffer
//! protocol and hand its memory to LABIOS as it is: the export is held until
//! LABIOS has stored or copied the bytes, and the caller must not change the
//! contents before the call (or, for `write_async`, the ticket) completes.

use bytes::Bytes;
use labios_client::errno_of;
use labios_connect::{ConnectOptions, Session};
use labios_label::Error;
use labios_store::{FileKind, FileMeta};
use parking_lot::RwLock;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyConnectionError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyMemoryView};
use std::path::PathBuf;
use std::sync::Arc;

/// LABIOS errors as the Python exceptions a file API raises. `OSError(errno,
/// message)` becomes its errno's subclass: FileNotFoundError,
/// FileExistsError, PermissionError, IsADirectoryError, TimeoutError, ...
fn py_err(e: Error) -> PyErr {
    let errno = errno_of(&e);
    let message = e.to_string();
    match e {
        // Bad arguments are ValueError in Python; "is a directory" and the
        // like keep their OSError subclass.
        Error::InvalidPath { .. } => PyValueError::new_err(message),
        Error::InvalidArgument(_) if errno == libc::EINVAL => PyValueError::new_err(message),
        Error::Unavailable(_) => PyConnectionError::new_err((errno, message)),
        _ => PyOSError::new_err((errno, message)),
    }
}

/// What `os.getxattr` raises for an attribute the entry does not have.
fn no_attribute(path: &str, name: &str) -> PyErr {
    PyOSError::new_err((libc::ENODATA, format!("{path} has no attribute {name}")))
}

/// A Python buffer lent to LABIOS; dropping it releases the export (pyo3
/// attaches to the interpreter for that, from whichever thread drops it).
struct Lent(PyUntypedBuffer);

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `lend` only keeps C-contiguous, non-empty buffers, whose
        // exporter keeps `len_bytes` bytes at `buf_ptr` valid until release.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr().cast::<u8>(), self.0.len_bytes()) }
    }
}

/// The bytes of a buffer-protocol object without copying them.
fn lend(data: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    let buffer = PyUntypedBuffer::get(data)?;
    if buffer.len_bytes() == 0 {
        return Ok(Bytes::new());
    }
    if buffer.is_c_contiguous() {
        return Ok(Bytes::from_owner(Lent(buffer)));
    }
    // A strided view (a numpy slice with a step, a transposed array) has no
    // single run of memory to lend: one copy in C order, lent in turn.
    drop(buffer);
    let copy = PyMemoryView::from(data)?.call_method0("tobytes")?;
    lend(&copy)
}

fn file_info<'py>(py: Python<'py>, meta: &FileMeta) -> PyResult<Bound<'py, PyDict>> {
    let info = PyDict::new(py);
    info.set_item("name", &meta.path)?;
    info.set_item("size", meta.size)?;
    let kind = match meta.kind {
        FileKind::File => "file",
        FileKind::Dir => "directory",
        FileKind::Symlink => "link",
        // fsspec's `type` is free-form; these name what they are.
        special => special.word(),
    };
    info.set_item("type", kind)?;
    info.set_item("mode", meta.mode)?;
    info.set_item("owner", meta.owner)?;
    info.set_item("id", meta.id)?;
    info.set_item("ctime_ns", meta.ctime)?;
    info.set_item("mtime_ns", meta.mtime)?;
    info.set_item("atime_ns", meta.atime)?;
    Ok(info)
}

/// A connection to LABIOS (see `labios.connect`). Thread-safe: one client
/// can serve every thread of the process.
#[pyclass(module = "labios", frozen)]
struct Client {
    session: RwLock<Option<Arc<Session>>>,
    /// The process that connected: a forked child inherits the client but
    /// not its runtime's threads.
    pid: u32,
}

impl Client {
    /// Runs `work` on the session with the interpreter released. The session
    /// handle moves into the closure so that, should `close` race with it,
    /// the last reference (and the runtime's shutdown) drops detached too.
    fn call<T, F>(&self, py: Python<'_>, work: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&Session) -> Result<T, Error> + Send,
    {
        self.here()?;
        let session = self
            .session
            .read()
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on a closed LABIOS client"))?;
        py.detach(move || work(&session)).map_err(py_err)
    }

    /// Refuses a client inherited through `fork`: its runtime's threads
    /// stayed in the parent, and a call would never end.
    fn here(&self) -> PyResult<()> {
        if self.pid == std::process::id() {
            return Ok(());
        }
        Err(PyValueError::new_err(
            "this LABIOS client belongs to the process that forked this one: connect a new client here",
        ))
    }
}

#[pymethods]
impl Client {
    /// Connects; unset arguments come from `LABIOS_ENDPOINT`, `LABIOS_KEY`,
    /// `LABIOS_SECRET`, `LABIOS_CONFIG` and the configuration file, as for
    /// the `labios` command.
    #[new]
    #[pyo3(signature = (endpoint=None, *, key=None, secret=None, config=None))]
    fn new(
        py: Python<'_>,
        endpoint: Option<String>,
        key: Option<String>,
        secret: Option<String>,
        config: Option<PathBuf>,
    ) -> PyResult<Self> {
        let env = ConnectOptions::from_env();
        let options = ConnectOptions {
            config: config.or(env.config),
            endpoint: endpoint.or(env.endpoint),
            key: key.or(env.key),
            secret: secret.or(env.secret),
            ..ConnectOptions::default()
        };
        let session = Arc::new(py.detach(|| Session::connect(options)).map_err(py_err)?);
        let mut open = OPEN.lock();
        open.retain(|(_, s)| s.strong_count() > 0);
        open.push((std::process::id(), Arc::downgrade(&session)));
        Ok(Client {
            session: RwLock::new(Some(session)),
            pid: std::process::id(),
        })
    }

    /// Writes `data` (bytes, bytearray, memoryview, numpy array, ...) at
    /// `offset` and returns once every byte is stored; returns its length.
    #[pyo3(signature = (path, data, offset=0))]
    fn write(
        &self,
        py: Python<'_>,
        path: &str,
        data: &Bound<'_, PyAny>,
        offset: u64,
    ) -> PyResult<usize> {
        let data = lend(data)?;
        let len = data.len();
        self.call(py, |s| s.run(s.client().write_at_sync(path, offset, data)))?;
        Ok(len)
    }

    /// Publishes the write's labels (a write under the client's
    /// `min_label_size` is cached to be merged with the file's next small
    /// writes) and returns a `Ticket` at once; the buffer must stay
    /// unchanged until the ticket is waited on. A wait, `close`, or the
    /// interpreter's exit lands them.
    #[pyo3(signature = (path, data, offset=0))]
    fn write_async(
        slf: &Bound<'_, Self>,
        path: &str,
        data: &Bound<'_, PyAny>,
        offset: u64,
    ) -> PyResult<Ticket> {
        let data = lend(data)?;
        let id = slf
            .get()
            .call(slf.py(), |s| s.write_async(path, offset, data))?;
        Ok(Ticket {
            client: slf.clone().unbind(),
            id,
        })
    }

    /// Computational storage: the worker stores what `pipeline` (e.g.
    /// "sort:dtype=i64|zstd:level=19") makes of `data`; returns a `Ticket`
    /// once the data is staged.
    #[pyo3(signature = (path, data, pipeline, offset=0))]
    fn write_through(
        slf: &Bound<'_, Self>,
        path: &str,
        data: &Bound<'_, PyAny>,
        pipeline: &str,
        offset: u64,
    ) -> PyResult<Ticket> {
        let data = lend(data)?;
        let id = slf
            .get()
            .call(slf.py(), |s| s.write_through(path, offset, data, pipeline))?;
        Ok(Ticket {
            client: slf.clone().unbind(),
            id,
        })
    }

    /// In-situ analytics: runs `pipeline` over the whole file where it is
    /// stored and returns only its result (e.g. "median:dtype=i64").
    fn query<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        pipeline: &str,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.call(py, |s| s.query(path, pipeline))?;
        Ok(PyBytes::new(py, &data))
    }

    /// Registers a WebAssembly module (bytes, binary or WAT text) as this
    /// application's private function `name`.
    fn register_function(&self, py: Python<'_>, name: &str, module: Vec<u8>) -> PyResult<()> {
        self.call(py, |s| s.register_function(name, Bytes::from(module)))
    }

    fn remove_function(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.call(py, |s| s.remove_function(name))
    }

    /// This application's functions.
    fn functions(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.call(py, |s| s.functions())
    }

    /// Waits for several tickets at once; each is consumed.
    fn wait(&self, py: Python<'_>, tickets: Vec<PyRef<'_, Ticket>>) -> PyResult<()> {
        let ids: Vec<u64> = tickets.iter().map(|t| t.id).collect();
        self.call(py, |s| s.wait(&ids))
    }

    /// Waits for every write this client has in flight.
    fn wait_all(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |s| s.wait_all())
    }

    /// Up to `size` bytes at `offset` (all to the end of the file when
    /// `size` is None); fewer only at the end of the file.
    #[pyo3(signature = (path, offset=0, size=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        offset: u64,
        size: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.call(py, |s| s.read(path, offset, size.unwrap_or(u64::MAX)))?;
        Ok(PyBytes::new(py, &data))
    }

    /// Reads into a writable buffer from `offset`, as many bytes as it holds
    /// or the file has; returns how many.
    #[pyo3(signature = (path, buffer, offset=0))]
    fn readinto(
        &self,
        py: Python<'_>,
        path: &str,
        buffer: &Bound<'_, PyAny>,
        offset: u64,
    ) -> PyResult<usize> {
        let target = PyUntypedBuffer::get(buffer)?;
        if target.readonly() {
            return Err(PyTypeError::new_err("readinto needs a writable buffer"));
        }
        if !target.is_c_contiguous() {
            return Err(PyBufferError::new_err(
                "readinto needs a C-contiguous buffer",
            ));
        }
        let len = target.len_bytes() as u64;
        let data = self.call(py, |s| s.read(path, offset, len))?;
        // SAFETY: the export is writable, C-contiguous and holds `len` bytes;
        // LABIOS returns at most `len`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), target.buf_ptr().cast::<u8>(), data.len());
        }
        Ok(data.len())
    }

    /// The names of `path`'s extended attributes (its `user.` ones; hints
    /// are `user.labios.*`), as `os.listxattr`.
    fn listxattr(&self, py: Python<'_>, path: &str) -> PyResult<Vec<String>> {
        let all = self.call(py, |s| s.run(s.client().xattrs(path)))?;
        Ok(all.into_iter().map(|(name, _)| name).collect())
    }

    /// The value of `path`'s attribute `name`, as `os.getxattr`: OSError
    /// ENODATA when it has none.
    fn getxattr<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        name: &str,
    ) -> PyResult<Bound<'py, PyBytes>> {
        match self.call(py, |s| s.run(s.client().xattr(path, name)))? {
            Some(value) => Ok(PyBytes::new(py, &value)),
            None => Err(no_attribute(path, name)),
        }
    }

    /// Sets `path`'s attribute `name` to `value`, as `os.setxattr`; a hint
    /// (`user.labios.*`) LABIOS does not take is ValueError naming it.
    fn setxattr(&self, py: Python<'_>, path: &str, name: &str, value: &[u8]) -> PyResult<()> {
        let value = Bytes::copy_from_slice(value);
        self.call(py, |s| s.run(s.client().set_xattr(path, name, Some(value))))
    }

    /// Removes `path`'s attribute `name`, as `os.removexattr`: OSError
    /// ENODATA when it has none.
    fn removexattr(&self, py: Python<'_>, path: &str, name: &str) -> PyResult<()> {
        self.call(py, |s| s.run(s.client().remove_xattr(path, name)))
    }

    /// The entry's metadata as a dict (name, size, type "file" or
    /// "directory", mode, owner, id, ctime_ns, mtime_ns, atime_ns).
    fn stat<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
        let meta = self.call(py, |s| s.run(s.client().stat(path)))?;
        file_info(py, &meta)
    }

    /// Where the file's bytes are: one dict (offset, len, worker, tier,
    /// host) per extent, in offset order, so that a task can run where its
    /// input lies.
    fn locate<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let all = self.call(py, |s| s.run(s.client().locate(path)))?;
        all.iter()
            .map(|l| {
                let d = PyDict::new(py);
                d.set_item("offset", l.offset)?;
                d.set_item("len", l.len)?;
                d.set_item("worker", l.worker)?;
                d.set_item("tier", &l.tier)?;
                d.set_item("host", &l.host)?;
                Ok(d)
            })
            .collect()
    }

    fn exists(&self, py: Python<'_>, path: &str) -> PyResult<bool> {
        Ok(self.call(py, |s| s.stat(path))?.is_some())
    }

    /// The entries directly inside a directory, as `stat` dicts.
    fn listdir<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let entries = self.call(py, |s| s.read_dir(path))?;
        entries.iter().map(|m| file_info(py, m)).collect()
    }

    /// Creates an empty file (and its parents) unless one exists.
    fn create(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        self.call(py, |s| s.create(path).map(drop))
    }

    /// Creates a directory and its parents; an existing one is fine.
    fn mkdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        self.call(py, |s| s.mkdir(path).map(drop))
    }

    /// Removes a file or an empty directory.
    fn remove(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        self.call(py, |s| s.remove(path))
    }

    fn rename(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        self.call(py, |s| s.rename(src, dst))
    }

    fn truncate(&self, py: Python<'_>, path: &str, size: u64) -> PyResult<()> {
        self.call(py, |s| s.truncate(path, size))
    }

    /// Waits for the file's writes and makes them durable on the workers.
    fn flush(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        self.call(py, |s| s.flush(path))
    }

    /// Administration: changes running worker `worker`'s I/O stack to
    /// `spec` ("checksum,zstd,file") as `labios stack set` does, and
    /// returns once the worker runs it. Only for a caller whose
    /// configuration leads to the service's secret (PermissionError
    /// otherwise); ValueError for a malformed spec or another backend,
    /// FileNotFoundError for an unknown worker.
    fn set_stack(&self, py: Python<'_>, worker: u32, spec: &str) -> PyResult<()> {
        self.call(py, |s| s.set_stack(worker, spec))
    }

    /// Waits for everything in flight, then disconnects; idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Some(session) = self.session.write().take() else {
            return Ok(());
        };
        if self.here().is_err() {
            // The parent's to close; dropping it here would join threads
            // this process does not have.
            std::mem::forget(session);
            return Ok(());
        }
        py.detach(move || session.wait_all()).map_err(py_err)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.session.read().is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }
}

impl Drop for Client {
    /// An unclosed client still lands its asynchronous writes (errors have
    /// nobody to go to). Detached: the runtime's threads may need the
    /// interpreter to release lent buffers while it shuts down. When the
    /// interpreter is finalizing there is no attaching, and no Python left
    /// to wait for.
    fn drop(&mut self) {
        // In a forked child the session's runtime has no threads: waiting
        // on it, or dropping it (which joins them), would never end. Its
        // writes are the parent's to land.
        if self.pid != std::process::id() {
            std::mem::forget(self.session.get_mut().take());
            return;
        }
        if let Some(session) = self.session.get_mut().take() {
            Python::try_attach(move |py| {
                py.detach(move || {
                    let _ = session.wait_all();
                })
            });
        }
    }
}

/// One asynchronous write in flight.
#[pyclass(module = "labios", frozen)]
struct Ticket {
    client: Py<Client>,
    id: u64,
}

#[pymethods]
impl Ticket {
    /// Returns when the write is stored; raises its error if it failed. A
    /// ticket can be waited on once (or covered by `Client.wait_all`).
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let id = self.id;
        self.client.get().call(py, |s| s.wait(&[id]))
    }

    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    fn __repr__(&self) -> String {
        format!("<labios.Ticket {}>", self.id)
    }
}

/// The sessions of clients not yet dropped, with the process that made
/// them, which the interpreter's exit waits for ([`wait_at_exit`]).
static OPEN: parking_lot::Mutex<Vec<(u32, std::sync::Weak<Session>)>> =
    parking_lot::const_mutex(Vec::new());

/// Run by `atexit` as the interpreter exits: lands the asynchronous
/// writes (and small writes cached to be merged) of clients never closed,
/// as a file object's buffer is written at exit, for at most
/// [`labios_connect::session::AT_EXIT`] each. A client still held by a
/// thread the interpreter stops where it is (a daemon thread) is never
/// dropped, so never waited for otherwise. A forked child skips its
/// parent's clients, whose runtime threads it does not have.
#[pyfunction]
fn wait_at_exit(py: Python<'_>) {
    let me = std::process::id();
    let open: Vec<Arc<Session>> = OPEN
        .lock()
        .iter()
        .filter(|(pid, _)| *pid == me)
        .filter_map(|(_, s)| s.upgrade())
        .collect();
    py.detach(move || {
        for session in open {
            session.wait_all_at_exit();
        }
    });
}

#[pymodule]
fn _labios(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<Ticket>()?;
    m.py()
        .import("atexit")?
        .call_method1("register", (wrap_pyfunction!(wait_at_exit, m)?,))?;
    Ok(())
}
