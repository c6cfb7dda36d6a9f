//! A blocking LABIOS client for callers that are not async Rust: the C API,
//! the `LD_PRELOAD` interception library and the Python package.
//!
//! A session owns a small tokio runtime of its own, so that a C program, a
//! Python interpreter or an intercepted `read()` can call LABIOS from any
//! thread without knowing about async Rust.

use crate::{connect_client, Settings};
use bytes::Bytes;
use labios_client::{Client, FileRef, Handle, IoMode};
use labios_label::{Error, Operation, Result};
use labios_store::{FileKind, FileMeta, RenameHow};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where and as whom to connect; unset fields come from the configuration
/// file and the `LABIOS_*` environment, as for the `labios` command.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// TOML configuration file (`LABIOS_CONFIG`).
    pub config: Option<PathBuf>,
    /// Unix socket path or HOST:PORT of `labios serve` (`LABIOS_ENDPOINT`).
    pub endpoint: Option<String>,
    /// Application key and secret (`LABIOS_KEY`, `LABIOS_SECRET`).
    pub key: Option<String>,
    pub secret: Option<String>,
    /// Overrides `client.mode` of the configuration.
    pub mode: Option<IoMode>,
    /// Overrides `client.min_label_size` (0: no small-I/O cache, every
    /// write is published at once).
    pub min_label_size: Option<u64>,
    /// Runs on each thread of the session's runtime as it starts: the
    /// interception library marks them, so that the library's own threads
    /// are never intercepted.
    pub on_thread_start: Option<fn()>,
}

impl ConnectOptions {
    /// The options the `labios` command would use in this environment.
    pub fn from_env() -> ConnectOptions {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        ConnectOptions {
            config: var("LABIOS_CONFIG").map(PathBuf::from),
            endpoint: var("LABIOS_ENDPOINT"),
            key: var("LABIOS_KEY"),
            secret: var("LABIOS_SECRET"),
            mode: None,
            min_label_size: None,
            on_thread_start: None,
        }
    }
}

/// Outstanding asynchronous writes, named by a number C and Python can hold.
pub type Ticket = u64;

/// How long a process's exit waits for what a session it never closed has
/// in flight ([`Session::wait_all_at_exit`]).
pub const AT_EXIT: std::time::Duration = std::time::Duration::from_secs(30);

pub struct Session {
    runtime: tokio::runtime::Runtime,
    client: Client,
    /// The configuration it connected with, which also says how to reach
    /// the service for administration ([`Session::set_stack`]).
    config: Settings,
    tickets: Mutex<HashMap<Ticket, Handle>>,
    next_ticket: AtomicU64,
}

impl Session {
    pub fn connect(options: ConnectOptions) -> Result<Session> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .worker_threads(2)
            .thread_name("labios-session")
            // No signal or process drivers: their process-wide state would
            // be shared with a forked child's session.
            .enable_io()
            .enable_time();
        if let Some(start) = options.on_thread_start {
            builder.on_thread_start(start);
        }
        let runtime = builder
            .build()
            .map_err(|e| Error::Unavailable(format!("cannot start the session runtime: {e}")))?;
        let mut config = Settings::load(options.config.as_deref())
            .map_err(|e| Error::InvalidArgument(format!("{e:#}")))?;
        // In the distributed deployment, an endpoint is the node gateway
        // (`labios serve`) the session goes through.
        if let Some(endpoint) = options.endpoint {
            config.endpoint = Some(endpoint);
        }
        if let Some(mode) = options.mode {
            config.client.mode = mode;
        }
        if let Some(min) = options.min_label_size {
            config.client.min_label_size = min;
        }
        let client = runtime
            .block_on(connect_client(&config, options.key, options.secret))
            .map_err(|e| match e.downcast::<Error>() {
                Ok(e) => e,
                Err(e) => Error::Unavailable(format!("cannot connect to LABIOS: {e:#}")),
            })?;
        Ok(Session {
            runtime,
            client,
            config,
            tickets: Mutex::new(HashMap::new()),
            next_ticket: AtomicU64::new(1),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Changes running worker `worker`'s stack to `spec` (`checksum,zstd,file`),
    /// as `labios stack set` does: as the service, so only for a caller
    /// that can read the service's secret (embedded: the file `labios
    /// serve` keeps in the configuration's data directory; distributed:
    /// the configuration's service credentials). Returns once the worker
    /// runs it.
    pub fn set_stack(&self, worker: u32, spec: &str) -> Result<()> {
        let spec = crate::parse_stack(spec)?;
        self.run(crate::set_worker_stack(&self.config, worker, &spec))
    }

    pub fn mode(&self) -> IoMode {
        self.client.config().mode
    }

    /// Runs a client call to completion on the session's runtime.
    pub fn run<F: Future>(&self, work: F) -> F::Output {
        self.runtime.block_on(work)
    }

    /// Writes and returns when every byte is stored by a worker.
    pub fn write(&self, path: &str, offset: u64, data: &[u8]) -> Result<()> {
        let data = Bytes::copy_from_slice(data);
        self.run(self.client.write_at_sync(path, offset, data))
    }

    /// Writes in the configured mode (asynchronous: returns once published).
    pub fn write_in_mode<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        offset: u64,
        data: Bytes,
    ) -> Result<()> {
        self.run(self.client.write_at(file, offset, data))
    }

    /// Appends in the configured mode; returns the offset the bytes went to
    /// (decided atomically by the inventory: see `Client::append`).
    pub fn append_in_mode<'a>(&self, file: impl Into<FileRef<'a>>, data: Bytes) -> Result<u64> {
        self.run(self.client.append(file, data))
    }

    /// Publishes the write's labels and returns a ticket to wait on.
    pub fn write_async(&self, path: &str, offset: u64, data: Bytes) -> Result<Ticket> {
        let handle = self.run(self.client.write_at_async(path, offset, data))?;
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.tickets.lock().insert(ticket, handle);
        Ok(ticket)
    }

    /// Waits for tickets; each is consumed whether it succeeded or failed.
    pub fn wait(&self, tickets: &[Ticket]) -> Result<()> {
        let handles = {
            let mut map = self.tickets.lock();
            if let Some(t) = tickets.iter().find(|t| !map.contains_key(t)) {
                return Err(Error::InvalidArgument(format!(
                    "ticket {t} is unknown or was already waited on"
                )));
            }
            tickets
                .iter()
                .filter_map(|t| map.remove(t))
                .collect::<Vec<_>>()
        };
        self.run(self.client.wait_many(&handles))
    }

    /// Waits for everything this session has in flight.
    pub fn wait_all(&self) -> Result<()> {
        self.tickets.lock().clear();
        self.run(self.client.wait_all())
    }

    /// [`Session::wait_all`] as a process exits: for at most [`AT_EXIT`],
    /// so that a program whose service is gone (the usual reason to exit
    /// on an error) is not held for the whole wait timeout. Errors have
    /// nobody to go to; what was not landed in time is said on stderr.
    pub fn wait_all_at_exit(&self) {
        // The timer is made inside the runtime, which it needs.
        let waited =
            self.run(async { tokio::time::timeout(AT_EXIT, self.client.wait_all()).await });
        match waited {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("labios: at exit: {e}"),
            Err(_) => eprintln!(
                "labios: at exit: writes still in flight after {AT_EXIT:?} are not waited for"
            ),
        }
    }

    /// Up to `len` bytes at `offset`; fewer only at end of file.
    pub fn read<'a>(&self, file: impl Into<FileRef<'a>>, offset: u64, len: u64) -> Result<Bytes> {
        self.run(self.client.read_at(file, offset, len))
    }

    /// The entry `file` names, or `None` if there is none.
    /// [`Client::hold`]: a descriptor keeps its file past its last name.
    pub fn hold(&self, file: labios_label::FileId) -> Result<()> {
        self.run(self.client.hold(file))
    }

    /// [`Client::let_go`], when a descriptor closes.
    pub fn let_go(&self, file: labios_label::FileId) -> Result<()> {
        self.run(self.client.let_go(file))
    }

    pub fn stat<'a>(&self, file: impl Into<FileRef<'a>>) -> Result<Option<FileMeta>> {
        match self.run(self.client.stat(file)) {
            Ok(meta) => Ok(Some(meta)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Bytes the workers may store in all, and bytes they hold now (what
    /// `statfs` of a LABIOS path reports).
    pub fn capacity(&self) -> Result<(u64, u64)> {
        let workers = self.run(self.client.catalog().inventory().workers())?;
        Ok(workers.iter().fold((0, 0), |(cap, used), w| {
            (
                cap.saturating_add(w.spec.capacity),
                used.saturating_add(w.used),
            )
        }))
    }

    /// Names of the entries directly inside directory `dir`.
    pub fn read_dir(&self, dir: &str) -> Result<Vec<FileMeta>> {
        let meta = self.run(self.client.stat(dir))?;
        if meta.kind != FileKind::Dir {
            return Err(Error::InvalidArgument(format!(
                "{} is not a directory",
                meta.path
            )));
        }
        let parent = if meta.path == "/" {
            "/".to_string()
        } else {
            format!("{}/", meta.path)
        };
        let all = self.run(self.client.list(&meta.path))?;
        Ok(all
            .into_iter()
            .filter(|m| {
                m.path
                    .strip_prefix(&parent)
                    .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
            })
            .collect())
    }

    pub fn create(&self, path: &str) -> Result<FileMeta> {
        self.run(self.client.create(path))
    }

    /// A symbolic link at `path` to `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<FileMeta> {
        self.run(self.client.symlink(target, path))
    }

    /// A further name `to` for the file or symbolic link `from` (hard link).
    pub fn link(&self, from: &str, to: &str) -> Result<FileMeta> {
        self.run(self.client.link(from, to))
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: &str) -> Result<String> {
        self.run(self.client.readlink(path))
    }

    pub fn mkdir(&self, path: &str) -> Result<FileMeta> {
        self.run(self.client.mkdir(path))
    }

    /// A FIFO, device or socket at `path` (mknod).
    pub fn mknod(&self, path: &str, kind: FileKind, mode: u32, rdev: u64) -> Result<FileMeta> {
        self.run(self.client.mknod(path, kind, mode, rdev))
    }

    /// The number of the device at `path`.
    pub fn device_number(&self, path: &str) -> Result<u64> {
        self.run(self.client.device_number(path))
    }

    /// A directory with permission bits `mode` (umask already applied).
    pub fn mkdir_mode(&self, path: &str, mode: u32) -> Result<FileMeta> {
        self.run(self.client.mkdir_mode(path, mode))
    }

    /// The file at `path`, made with permission bits `mode` if missing.
    pub fn create_mode(&self, path: &str, mode: u32) -> Result<FileMeta> {
        self.run(self.client.create_mode(path, mode))
    }

    /// Changes mode, owner or times of the entry at `path` itself.
    pub fn set_attr<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        attr: labios_store::SetAttr,
    ) -> Result<FileMeta> {
        self.run(self.client.set_attr(file, attr))
    }

    pub fn remove(&self, path: &str) -> Result<()> {
        self.run(self.client.remove(path))
    }

    /// Removes the entry `meta` just looked up, without asking again.
    pub fn remove_entry(&self, meta: FileMeta) -> Result<()> {
        self.run(self.client.remove_entry(meta))
    }

    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.run(self.client.rename(from, to))
    }

    /// rename with `renameat2`'s choice about an entry at `to`
    /// ([`Client::rename_as`]).
    pub fn rename_as(&self, from: &str, to: &str, how: RenameHow) -> Result<()> {
        self.run(self.client.rename_as(from, to, how))
    }

    pub fn truncate<'a>(&self, file: impl Into<FileRef<'a>>, size: u64) -> Result<()> {
        self.run(self.client.truncate(file, size))
    }

    /// fallocate(2) with Linux's mode bits ([`Client::fallocate`]).
    pub fn fallocate<'a>(
        &self,
        file: impl Into<FileRef<'a>>,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        self.run(self.client.fallocate(file, mode, offset, len))
    }

    /// Waits for the file's writes and makes them durable on the workers.
    pub fn flush<'a>(&self, file: impl Into<FileRef<'a>>) -> Result<()> {
        self.run(self.client.flush(file))
    }
}

impl Session {
    /// Computational storage: the worker stores what the pipeline (text,
    /// as [`Operation::parse_pipeline`] reads it) makes of `data`; the
    /// ticket completes once it is written.
    pub fn write_through(
        &self,
        path: &str,
        offset: u64,
        data: Bytes,
        pipeline: &str,
    ) -> Result<Ticket> {
        let ops = Operation::parse_pipeline(pipeline)?;
        let handle = self.run(self.client.write_through(path, offset, data, ops))?;
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.tickets.lock().insert(ticket, handle);
        Ok(ticket)
    }

    /// In-situ analytics: the pipeline's result over the whole file.
    pub fn query(&self, path: &str, pipeline: &str) -> Result<Bytes> {
        let ops = Operation::parse_pipeline(pipeline)?;
        self.run(self.client.query(path, ops))
    }

    pub fn register_function(&self, name: &str, module: Bytes) -> Result<()> {
        self.run(self.client.register_function(name, module))
    }

    pub fn remove_function(&self, name: &str) -> Result<()> {
        self.run(self.client.remove_function(name))
    }

    pub fn functions(&self) -> Result<Vec<String>> {
        self.run(self.client.functions())
    }
}
