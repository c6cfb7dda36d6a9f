//! The wire protocol: frames of `u32 little-endian length | body`, the body
//! being a `labios_label::codec` encoding of a [`Request`] or [`Response`].

use crate::access::Cred;
use crate::inventory::{
    AppRecord, Extent, FileKind, FileMeta, Named, Owner, ReadPlan, RenameHow, SetAttr, XattrCond,
};
use crate::locks::{HeldLock, LockRequest};
use bytes::Bytes;
use labios_label::codec::{MAGIC, VERSION};
use labios_label::{
    decode, AppId, Error, FileId, Label, LabelId, LabelStatus, Result, Task, WorkerId, WorkerStatus,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest frame accepted either way: a label's data travels in one frame,
/// and anything larger is refused before it is allocated.
pub const MAX_FRAME: usize = 80 << 20;

/// What a client learns when the server accepts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub app: AppId,
    /// A label-id origin no other client has.
    pub origin: u64,
    /// The application's secret, for signing labels: the one the client
    /// presented, or, for a local session without credentials, the default
    /// application's (README "Tenants").
    pub secret: String,
    /// Whether the server maps the shared region the client handed over
    /// with its Hello (`super::region`): until it says so, the client's
    /// puts go over the socket.
    pub shared: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum QueueOp<T> {
    Push {
        queue: String,
        items: Vec<T>,
    },
    Pull {
        queue: String,
        max: u64,
        wait: Duration,
    },
    Ack {
        queue: String,
        tokens: Vec<u64>,
    },
    Depth {
        queue: String,
    },
    Queues {
        prefix: String,
    },
}

/// The wire protocol this build speaks, sent in every Hello: one more each
/// time a [`Request`], a [`Reply`] or the [`Session`] changes shape. A
/// client library of another release than `labios serve` is then refused at
/// its Hello with an error naming both protocols, instead of failing later
/// on a frame neither side can read. The codec's `VERSION` in every frame
/// stays apart: it also covers persisted labels.
pub const PROTOCOL: u32 = 3;

/// New variants (here and in [`Reply`]) go last: a variant is sent as its
/// index, so appending keeps the meaning of what older peers send.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Hello {
        key: Option<String>,
        secret: Option<String>,
        /// [`PROTOCOL`] of the client; last, so that a Hello of a client
        /// from before it fails to decode as a whole.
        protocol: u32,
    },
    Labels(QueueOp<Label>),
    Tasks(QueueOp<Task>),
    Put {
        key: String,
        #[serde(deserialize_with = "super::payload::bytes")]
        data: Bytes,
    },
    Get {
        key: String,
    },
    Take {
        key: String,
    },
    Delete {
        key: String,
    },
    Keys {
        prefix: String,
    },
    Usage,
    Create {
        path: String,
        kind: FileKind,
        mode: u32,
        owner: Owner,
    },
    Lookup {
        path: String,
    },
    List {
        prefix: String,
    },
    Remove {
        path: String,
    },
    Rename {
        from: String,
        to: String,
        how: RenameHow,
    },
    SetSize {
        file: FileId,
        size: u64,
    },
    CommitExtent {
        file: FileId,
        extent: Extent,
    },
    Extents {
        file: FileId,
        offset: u64,
        len: u64,
    },
    File {
        file: FileId,
    },
    SetStatus(LabelStatus),
    Status(LabelId),
    Wait {
        ids: Vec<LabelId>,
        timeout: Duration,
    },
    LabelCount,
    PutWorker(WorkerStatus),
    Workers,
    RemoveWorker(WorkerId),
    AskStack(WorkerId, Vec<String>),
    TakeStack(WorkerId),
    PutApp(AppRecord),
    App(AppId),
    Apps,
    PutFunction {
        app: AppId,
        name: String,
        module: Option<Bytes>,
    },
    Function {
        app: AppId,
        name: String,
    },
    Functions(AppId),
    NextId(String),
    Sync,
    SetXattr {
        file: FileId,
        name: String,
        value: Option<Bytes>,
        cond: XattrCond,
    },
    Xattrs {
        file: FileId,
    },
    ReserveAppend {
        file: FileId,
        len: u64,
    },
    Symlink {
        path: String,
        target: String,
        owner: Owner,
    },
    Link {
        from: String,
        to: String,
    },
    SetAttr {
        file: FileId,
        attr: SetAttr,
    },
    /// `request` on behalf of the user `cred`: sent by a trusted client
    /// (root, such as a root `labios mount`) serving other users, whose
    /// requests are then checked as theirs. Refused from anyone else.
    As {
        cred: Cred,
        request: Box<Request>,
    },
    /// [`crate::locks::Locks::lock`]; the server puts the connection's own
    /// session in the holder, whatever the client wrote there.
    Lock(LockRequest),
    LockConflict(LockRequest),
    /// [`crate::locks::Locks::release`], of the connection's own session
    /// (the server puts it in).
    Unlock {
        session: u64,
        owner: Option<u64>,
        file: Option<FileId>,
    },
    /// [`crate::Inventory::open`]: the caller is checked for `access` now,
    /// and its data moves on the file are not checked again on this
    /// connection (`super::opened`).
    Open {
        file: FileId,
        access: u32,
    },
    /// [`Inventory::hold`] and [`Inventory::let_go`]: the server makes
    /// `session` the connection's own, and ends its holds when it closes.
    ///
    /// [`Inventory::hold`]: crate::Inventory::hold
    /// [`Inventory::let_go`]: crate::Inventory::let_go
    Hold {
        file: FileId,
        session: u64,
    },
    LetGo {
        file: FileId,
        session: u64,
    },
    LetGoSession {
        session: u64,
    },
    XattrsOf {
        files: Vec<FileId>,
    },
    /// [`crate::Inventory::read_plan`].
    ReadPlan {
        named: Named,
        offset: u64,
        len: u64,
    },
    /// [`crate::Inventory::wait`], answered with the results of complete
    /// labels under `prefix` (the client's own read results) taken from
    /// the warehouse and sent with the statuses: each of at most `inline`
    /// bytes (and [`INLINE_MAX`]), `budget` bytes in all. A small read
    /// then needs no round trip of its own for its bytes.
    WaitInline {
        ids: Vec<LabelId>,
        timeout: Duration,
        inline: u64,
        budget: u64,
        prefix: String,
    },
    /// A [`Request::Put`] whose `len` bytes lie in slot `slot` of the
    /// connection's shared region (`super::region`), which the server
    /// turns into the `Put` itself before any check.
    PutShared {
        key: String,
        slot: u32,
        len: u64,
    },
}

/// The largest read result [`Request::WaitInline`] brings back with its
/// status; larger ones are taken with a call of their own, whose frame
/// carries them without a copy.
pub const INLINE_MAX: u64 = 64 << 10;

/// The most bytes of results one [`Reply::Waited`] brings back, whatever
/// budget the client asks (the server takes them out of the warehouse
/// before it answers, so the answer must always fit a frame), and the
/// most a connection holds until taken.
pub const INLINE_BUDGET_MAX: u64 = 8 << 20;

/// One variant per result shape of the trait methods.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Unit,
    Session(Session),
    Bool(bool),
    Count(u64),
    Data(#[serde(deserialize_with = "super::payload::maybe_bytes")] Option<Bytes>),
    Names(Vec<String>),
    Labels(Vec<(Label, u64)>),
    Tasks(Vec<(Task, u64)>),
    Meta(FileMeta),
    MaybeMeta(Option<FileMeta>),
    Metas(Vec<FileMeta>),
    Removed(FileMeta, Vec<Extent>),
    Renamed(Option<(FileMeta, Vec<Extent>)>),
    Extents(Vec<Extent>),
    Status(Option<LabelStatus>),
    Statuses(Vec<LabelStatus>),
    Workers(Vec<WorkerStatus>),
    Stack(Option<Vec<String>>),
    App(Option<AppRecord>),
    Apps(Vec<AppRecord>),
    Xattrs(Vec<(String, Bytes)>),
    Lock(Option<HeldLock>),
    XattrsOf(Vec<Option<Vec<(String, Bytes)>>>),
    ReadPlan(Option<ReadPlan>),
    /// Statuses, and the results taken for [`Request::WaitInline`] by key.
    Waited(Vec<LabelStatus>, Vec<(String, Bytes)>),
    /// A [`Reply::Data`] whose `len` bytes the server wrote into slot
    /// `slot` of the connection's shared region (`super::region`); the
    /// client copies them out and gives the slot back.
    DataShared {
        slot: u32,
        len: u64,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RequestFrame {
    pub id: u64,
    pub request: Request,
}

/// Id 0 answers a frame that could not be read: it concerns the whole
/// connection, which the server closes after sending it.
#[derive(Debug, Serialize, Deserialize)]
pub struct ResponseFrame {
    pub id: u64,
    pub result: Result<Reply>,
}

/// Encodes a whole frame (length prefix included) in one buffer sized for
/// `payload_hint` bytes of data, so a large put is copied once.
pub fn frame<T: Serialize>(value: &T, payload_hint: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(payload_hint + 256);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    postcard::to_io(value, &mut out).map_err(|e| Error::Protocol(e.to_string()))?;
    let body = out.len() - 4;
    if body > MAX_FRAME {
        return Err(Error::Protocol(format!(
            "a {body}-byte message exceeds the {MAX_FRAME}-byte frame limit"
        )));
    }
    out[..4].copy_from_slice(&(body as u32).to_le_bytes());
    Ok(out)
}

/// Reads one frame body; `Ok(None)` on a clean end of stream. The buffer
/// grows with the bytes that actually arrive, so a lying length prefix
/// cannot make us allocate what was never sent.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Bytes>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(Error::Unavailable(e.to_string())),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(Error::Protocol(format!(
            "a {len}-byte frame exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    let mut body = Vec::with_capacity(len.min(16 << 20));
    let got = r
        .take(len as u64)
        .read_to_end(&mut body)
        .await
        .map_err(|e| Error::Unavailable(e.to_string()))?;
    if got < len {
        return Err(Error::Unavailable(format!(
            "connection closed inside a frame ({got} of {len} bytes)"
        )));
    }
    // Byte fields are slices of the frame (`payload`), which keep all of
    // its allocation: a frame that grew past its first capacity gives
    // back what it did not use.
    body.shrink_to_fit();
    Ok(Some(Bytes::from(body)))
}

/// The value in a frame body; its large byte fields are slices of `body`
/// (see `payload`).
pub fn decode_frame<T: DeserializeOwned>(body: &Bytes) -> Result<T> {
    super::payload::decoding(body, decode).map_err(|e| Error::Protocol(e.to_string()))
}

/// Writes queued frames, flushing only when none is waiting: batches under
/// load, no added delay when idle. Ends when every sender is gone or the
/// peer stops reading.
pub async fn write_frames<W: tokio::io::AsyncWrite + Unpin>(
    w: W,
    mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
) {
    use tokio::io::AsyncWriteExt;
    let mut w = tokio::io::BufWriter::with_capacity(64 << 10, w);
    while let Some(f) = rx.recv().await {
        if w.write_all(&f).await.is_err() {
            return;
        }
        while let Ok(f) = rx.try_recv() {
            if w.write_all(&f).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}
