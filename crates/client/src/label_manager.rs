//! Label manager (article 3.3.1a): builds labels from requests — split above
//! the max label size, small requests aggregated into one indexed label —
//! gives each a unique time-ordered id, publishes them to the application's
//! label queue and waits on them.

use crate::config::ClientConfig;
use crate::content_manager::{read_key, write_key};
use labios_label::{
    AppId, Error, FileId, Label, LabelId, LabelIdGen, LabelKind, LabelState, LabelStatus, Pointer,
    Result, Segment, StateFlags, WorkerId,
};
use labios_store::{client_queue, Inventory, LabelQueue};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct LabelManager {
    queue: Arc<dyn LabelQueue<Label>>,
    inventory: Arc<dyn Inventory>,
    ids: LabelIdGen,
    app: AppId,
    queue_name: String,
    config: ClientConfig,
    /// The application's secret: every published label is signed with it
    /// (`labios_label::auth`). Without it labels go out unsigned and the
    /// dispatcher fails them.
    secret: Option<Arc<str>>,
    /// Labels this manager has published.
    published: AtomicU64,
}

/// A byte range of a request and the label that carries it.
pub struct Piece {
    pub label: Label,
    /// Warehouse key the piece's bytes go to.
    pub key: String,
    /// Offset of this piece within the request's data.
    pub data_offset: usize,
    pub len: usize,
}

impl LabelManager {
    pub fn new(
        queue: Arc<dyn LabelQueue<Label>>,
        inventory: Arc<dyn Inventory>,
        app: AppId,
        origin: u64,
        config: ClientConfig,
        secret: Option<Arc<str>>,
    ) -> Self {
        LabelManager {
            secret,
            queue,
            inventory,
            ids: LabelIdGen::new(origin),
            app,
            queue_name: client_queue(app),
            config,
            published: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    pub fn app(&self) -> AppId {
        self.app
    }

    /// A fresh label of this application, for callers that set its
    /// pointers and operations themselves (pipelines).
    pub fn new_label(&self, kind: LabelKind) -> Label {
        self.label(kind)
    }

    fn label(&self, kind: LabelKind) -> Label {
        let mut label = Label::new(self.ids.next(), kind, self.app);
        label.flags = StateFlags::default().with(StateFlags::QUEUED);
        label
    }

    /// Write labels for `len` bytes at `offset`, one per max-size chunk.
    pub fn write_pieces(
        &self,
        path: &str,
        file: FileId,
        offset: u64,
        len: usize,
        sync: bool,
    ) -> Vec<Piece> {
        let max = self.config.max_label_size as usize;
        let mut pieces = Vec::with_capacity(len.div_ceil(max).max(1));
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(max);
            let mut label = self.label(LabelKind::Write);
            let key = write_key(self.app, label.id);
            label.source = Pointer::Warehouse {
                key: key.clone(),
                len: n as u64,
            };
            label.destination = Pointer::File {
                path: path.to_string(),
                file,
                offset: offset + done as u64,
                len: n as u64,
            };
            label.sync = sync;
            pieces.push(Piece {
                label,
                key,
                data_offset: done,
                len: n,
            });
            done += n;
        }
        pieces
    }

    /// Write labels of `len` zero bytes at `offset` that carry no data (the
    /// worker makes the zeros), one per max-size chunk.
    pub fn zero_pieces(&self, path: &str, file: FileId, offset: u64, len: u64) -> Vec<Label> {
        let max = self.config.max_label_size;
        let mut labels = Vec::with_capacity(len.div_ceil(max) as usize);
        let mut done = 0;
        while done < len {
            let n = (len - done).min(max);
            let mut label = self.label(LabelKind::Write);
            label.source = Pointer::Zeros { len: n };
            label.destination = Pointer::File {
                path: path.to_string(),
                file,
                offset: offset + done,
                len: n,
            };
            labels.push(label);
            done += n;
        }
        labels
    }

    /// One indexed label carrying several small writes (N requests -> 1 label).
    pub fn indexed_write(
        &self,
        path: &str,
        file: FileId,
        buffered: u64,
        segments: Vec<Segment>,
    ) -> Label {
        let start = segments.iter().map(|s| s.file_offset).min().unwrap_or(0);
        let end = segments
            .iter()
            .map(|s| s.file_offset + s.len)
            .max()
            .unwrap_or(0);
        let mut label = self.label(LabelKind::Write);
        label.flags = label.flags.with(StateFlags::CACHED);
        label.source = Pointer::Warehouse {
            key: write_key(self.app, label.id),
            len: buffered,
        };
        label.destination = Pointer::File {
            path: path.to_string(),
            file,
            offset: start,
            len: end - start,
        };
        label.index = segments;
        label
    }

    /// Read labels for one worker's run of the file, split at the max size,
    /// each with the file range it reads.
    pub fn read_labels(
        &self,
        path: &str,
        file: FileId,
        offset: u64,
        len: u64,
    ) -> Vec<(Label, u64, u64)> {
        let max = self.config.max_label_size;
        let mut out = Vec::new();
        let mut done = 0;
        while done < len {
            let n = (len - done).min(max);
            let mut label = self.label(LabelKind::Read);
            label.source = Pointer::File {
                path: path.to_string(),
                file,
                offset: offset + done,
                len: n,
            };
            label.destination = Pointer::Warehouse {
                key: read_key(self.app, label.id),
                len: n,
            };
            out.push((label, offset + done, n));
            done += n;
        }
        out
    }

    /// A label reading `len` bytes at `offset` of external storage into
    /// the warehouse.
    pub fn external_read(&self, uri: &str, offset: u64, len: u64) -> Label {
        let mut label = self.label(LabelKind::Read);
        label.source = Pointer::Uri {
            uri: uri.to_string(),
            offset,
            len,
        };
        label.destination = Pointer::Warehouse {
            key: read_key(self.app, label.id),
            len,
        };
        label
    }

    /// A label asking a worker for the metadata of external path `uri`
    /// ([`LabelKind::Stat`] or [`LabelKind::List`]), put in the warehouse
    /// for this client to take.
    pub fn external_metadata(&self, kind: LabelKind, uri: &str) -> Label {
        debug_assert!(matches!(kind, LabelKind::Stat | LabelKind::List));
        let mut label = self.label(kind);
        label.source = Pointer::Uri {
            uri: uri.to_string(),
            offset: 0,
            len: 0,
        };
        label.destination = Pointer::Warehouse {
            key: read_key(self.app, label.id),
            len: 0,
        };
        label
    }

    /// A label removing external path `uri`, run by a worker: the one
    /// place its mount's merged writes and relaxed metadata are kept, which
    /// a removal must drop with the data.
    pub fn external_remove(&self, uri: &str) -> Label {
        let mut label = self.label(LabelKind::Delete);
        label.source = Pointer::Uri {
            uri: uri.to_string(),
            offset: 0,
            len: 0,
        };
        label
    }

    /// A label writing a warehouse entry of `len` bytes at `offset` of
    /// external storage, and the entry's key.
    pub fn external_write(&self, uri: &str, offset: u64, len: u64) -> (Label, String) {
        let mut label = self.label(LabelKind::Write);
        let key = write_key(self.app, label.id);
        label.source = Pointer::Warehouse {
            key: key.clone(),
            len,
        };
        label.destination = Pointer::Uri {
            uri: uri.to_string(),
            offset,
            len,
        };
        label.sync = true;
        (label, key)
    }

    /// A flush of external file `uri` addressed to one worker: it stores
    /// what that worker's mount holds back (merged writes, metadata).
    pub fn external_flush(&self, uri: &str, worker: WorkerId) -> Label {
        let mut label = self.label(LabelKind::Flush);
        label.source = Pointer::Uri {
            uri: uri.to_string(),
            offset: 0,
            len: 0,
        };
        label.destination = Pointer::Worker(worker);
        label
    }

    /// A label addressed to one worker (delete, flush of its local copy).
    pub fn pinned(&self, kind: LabelKind, path: &str, file: FileId, worker: WorkerId) -> Label {
        let mut label = self.label(kind);
        label.source = Pointer::File {
            path: path.to_string(),
            file,
            offset: 0,
            len: 0,
        };
        label.destination = Pointer::Worker(worker);
        label
    }

    pub async fn publish(&self, mut labels: Vec<Label>) -> Result<()> {
        if labels.is_empty() {
            return Ok(());
        }
        if let Some(secret) = &self.secret {
            for label in &mut labels {
                labios_label::auth::sign(label, secret.as_bytes());
            }
        }
        let n = labels.len() as u64;
        self.queue.push(&self.queue_name, labels).await?;
        self.published.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Labels published so far.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Waits for labels and returns their final statuses; a timeout is an
    /// error naming how many were still unfinished.
    pub async fn wait(&self, ids: &[LabelId]) -> Result<Vec<LabelStatus>> {
        self.waited(ids, false).await
    }

    /// [`Self::wait`] for read labels whose results the caller takes out
    /// of the warehouse next ([`Inventory::wait_taking`]).
    pub async fn wait_taking(&self, ids: &[LabelId]) -> Result<Vec<LabelStatus>> {
        self.waited(ids, true).await
    }

    async fn waited(&self, ids: &[LabelId], taking: bool) -> Result<Vec<LabelStatus>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let timeout = Duration::from_millis(self.config.wait_timeout_ms);
        let deadline = std::time::Instant::now() + timeout;
        // The labels run whether or not the inventory answers this wait: a
        // caller told "failed" by an unreachable inventory could see its
        // write land afterwards. So an unavailable inventory is asked
        // again until the deadline; only then is the outcome reported
        // unknown (the error says so).
        let mut attempt = 0u32;
        let statuses = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let waited = if taking {
                self.inventory.wait_taking(ids, left).await
            } else {
                self.inventory.wait(ids, left).await
            };
            match waited {
                Err(Error::Unavailable(why)) if !left.is_zero() => {
                    attempt += 1;
                    tracing::debug!("waiting for labels, attempt {attempt}: {why}");
                    tokio::time::sleep(Duration::from_millis(u64::from(attempt.min(50)) * 10))
                        .await;
                }
                Err(Error::Unavailable(why)) => {
                    return Err(Error::Unavailable(format!(
                        "outcome of {} labels unknown: {why}",
                        ids.len()
                    )))
                }
                r => break r?,
            }
        };
        let unfinished = statuses.iter().filter(|s| !s.state.is_final()).count();
        if unfinished > 0 {
            return Err(Error::Timeout(format!(
                "{unfinished} of {} labels unfinished after {} ms",
                ids.len(),
                self.config.wait_timeout_ms
            )));
        }
        Ok(statuses)
    }
}

/// The first failure among statuses, as an error.
pub fn first_failure(statuses: &[LabelStatus]) -> Result<()> {
    match statuses.iter().find(|s| s.state == LabelState::Failed) {
        Some(s) => Err(Error::LabelFailed {
            label: s.id.to_string(),
            reason: s.error.clone().unwrap_or_else(|| "unknown error".into()),
        }),
        None => Ok(()),
    }
}
