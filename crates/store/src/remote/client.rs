//! The client side: four trait proxies over one multiplexed connection.

use super::proto::{
    decode_frame, frame, read_frame, write_frames, QueueOp, Reply, Request, RequestFrame,
    ResponseFrame, Session, INLINE_BUDGET_MAX, INLINE_MAX, PROTOCOL,
};
use super::region::{send_with_fd, ClientRegion};
use super::staging::is_write_data;
use super::Endpoint;
use crate::access::Cred;
use crate::inventory::{
    AppRecord, Extent, FileKind, FileMeta, Inventory, Named, Owner, ReadPlan, RenameHow, SetAttr,
    XattrCond,
};
use crate::label_queue::{Delivery, LabelQueue};
use crate::locks::{HeldLock, LockRequest, Locks};
use crate::warehouse::{PutAnswer, Warehouse};
use crate::Stores;
use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{
    AppId, Error, FileId, Label, LabelId, LabelStatus, Result, Task, WorkerId, WorkerStatus,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};

/// Frames queued for the writer task; callers wait when it is full.
const OUTBOX: usize = 1024;

type Pending = HashMap<u64, oneshot::Sender<Result<Reply>>>;

struct Conn {
    endpoint: String,
    outbox: mpsc::Sender<Vec<u8>>,
    /// `None` once the connection is gone: later calls fail at once.
    pending: Mutex<Option<Pending>>,
    next_id: AtomicU64,
    /// Where this session's read results are kept in the warehouse
    /// (`a<app>/r/`), known once the server has accepted it.
    results: std::sync::OnceLock<String>,
    /// Read results that came back with their statuses, until taken.
    inlined: Mutex<Inlined>,
    /// The region handed to a server on this host, through which puts
    /// send their bytes once the server said it maps it (`super::region`).
    region: std::sync::OnceLock<ClientRegion>,
}

/// Read results held for the warehouse calls that take them.
#[derive(Default)]
struct Inlined {
    by_key: HashMap<String, Bytes>,
    bytes: u64,
    /// Room the waits in flight asked for, so that together they keep
    /// within the bound.
    reserved: u64,
}

impl Inlined {
    fn take(&mut self, key: &str) -> Option<Bytes> {
        let data = self.by_key.remove(key)?;
        self.bytes -= data.len() as u64;
        Some(data)
    }
}

impl Conn {
    fn gone(&self) -> Error {
        Error::Unavailable(format!(
            "connection to LABIOS at {} was lost",
            self.endpoint
        ))
    }

    async fn call(&self, request: Request) -> Result<Reply> {
        let answer = self.send(request).await?;
        answer.await.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Queues `request` for the writer; its answer comes on the receiver.
    async fn send(&self, request: Request) -> Result<oneshot::Receiver<Result<Reply>>> {
        let request = match CALLER.try_with(Cred::clone) {
            Ok(cred) => Request::As {
                cred,
                request: Box::new(request),
            },
            Err(_) => request,
        };
        let hint = match &request {
            Request::Put { data, .. } => data.len(),
            Request::SetXattr { value: Some(v), .. } => v.len(),
            _ => 0,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let bytes = frame(&RequestFrame { id, request }, hint)?;
        let (tx, rx) = oneshot::channel();
        match self.pending.lock().as_mut() {
            Some(p) => p.insert(id, tx),
            None => return Err(self.gone()),
        };
        if self.outbox.send(bytes).await.is_err() {
            if let Some(p) = self.pending.lock().as_mut() {
                p.remove(&id);
            }
            return Err(self.gone());
        }
        Ok(rx)
    }

    /// Fails every pending call with `err` and refuses new ones.
    fn close(&self, err: Error) {
        if let Some(p) = self.pending.lock().take() {
            for (_, tx) in p {
                let _ = tx.send(Err(err.clone()));
            }
        }
    }
}

fn unexpected(reply: Reply) -> Error {
    Error::Protocol(format!("unexpected reply {reply:?}"))
}

macro_rules! expect {
    ($reply:expr, $pat:pat => $v:expr) => {
        match $reply {
            $pat => Ok($v),
            other => Err(unexpected(other)),
        }
    };
}

/// Opens one connection to `labios serve` at `endpoint`, authenticates and
/// returns the four stores, all sharing it; over a Unix socket, puts go
/// through a shared region ([`connect_sharing`]).
pub async fn connect(
    endpoint: &Endpoint,
    key: Option<String>,
    secret: Option<String>,
) -> Result<(Stores, Session)> {
    connect_sharing(endpoint, key, secret, true).await
}

/// [`connect`], with puts through a region shared with the server if
/// `shared` and the endpoint is a Unix socket (`super::region`), else over
/// the socket.
pub async fn connect_sharing(
    endpoint: &Endpoint,
    key: Option<String>,
    secret: Option<String>,
    shared: bool,
) -> Result<(Stores, Session)> {
    let unreachable = |e: std::io::Error| {
        Error::Unavailable(format!(
            "cannot reach LABIOS at {endpoint}: {e}; is `labios serve` running?"
        ))
    };
    let hello = frame(
        &RequestFrame {
            id: HELLO,
            request: Request::Hello {
                key,
                secret,
                protocol: PROTOCOL,
            },
        },
        0,
    )?;
    let region = match endpoint {
        Endpoint::Unix(_) if shared => shared_region(),
        _ => None,
    };
    let (conn, hello) = match endpoint {
        Endpoint::Unix(path) => {
            let s = tokio::net::UnixStream::connect(path)
                .await
                .map_err(unreachable)?;
            send_with_fd(&s, &hello, region.as_ref().map(ClientRegion::fd))
                .await
                .map_err(unreachable)?;
            let (r, w) = s.into_split();
            start(endpoint, r, w)
        }
        Endpoint::Tcp(addr) => {
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(unreachable)?;
            s.set_nodelay(true).map_err(unreachable)?;
            let (r, w) = s.into_split();
            let (conn, answer) = start(endpoint, r, w);
            conn.outbox.send(hello).await.map_err(|_| conn.gone())?;
            (conn, answer)
        }
    };
    let hello = hello
        .await
        .unwrap_or_else(|_| Err(conn.gone()))
        .map_err(|e| match e {
            Error::Protocol(e) => Error::Protocol(format!(
                "LABIOS at {endpoint} refused this client (wire protocol {PROTOCOL}, \
                 release {}): {e}",
                env!("CARGO_PKG_VERSION")
            )),
            e => e,
        })?;
    let session = expect!(hello, Reply::Session(s) => s)?;
    if let Some(region) = region.filter(|_| session.shared) {
        let _ = conn.region.set(region);
    }
    let _ = conn.results.set(format!("a{}/r/", session.app));
    let stores = Stores {
        labels: Arc::new(RemoteQueue::<Label>::new(conn.clone())),
        tasks: Arc::new(RemoteQueue::<Task>::new(conn.clone())),
        warehouse: Arc::new(RemoteWarehouse(conn.clone())),
        inventory: Arc::new(RemoteInventory(conn.clone())),
        locks: Arc::new(RemoteLocks(conn)),
    };
    Ok((stores, session))
}

/// The id of the Hello, the first request of every connection, whose
/// answer [`start`] waits for from the moment it reads.
const HELLO: u64 = 1;

/// A region to share with `labios serve` on this host; one that cannot be
/// made (no memfd) leaves puts on the socket.
fn shared_region() -> Option<ClientRegion> {
    ClientRegion::create()
        .inspect_err(|e| tracing::warn!("puts go over the socket: {e}"))
        .ok()
}

/// Starts the connection's reader and writer, with the answer to its
/// Hello (id [`HELLO`], sent by the caller) expected.
fn start<R, W>(endpoint: &Endpoint, r: R, w: W) -> (Arc<Conn>, oneshot::Receiver<Result<Reply>>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (outbox, rx) = mpsc::channel::<Vec<u8>>(OUTBOX);
    let (hello, answer) = oneshot::channel();
    let conn = Arc::new(Conn {
        endpoint: endpoint.to_string(),
        outbox,
        pending: Mutex::new(Some(HashMap::from([(HELLO, hello)]))),
        next_id: AtomicU64::new(HELLO + 1),
        results: std::sync::OnceLock::new(),
        inlined: Mutex::new(Inlined::default()),
        region: std::sync::OnceLock::new(),
    });
    tokio::spawn(write_frames(w, rx));
    let reader_conn = conn.clone();
    tokio::spawn(async move {
        let conn = reader_conn;
        let mut r = BufReader::with_capacity(64 << 10, r);
        let err = loop {
            let body = match read_frame(&mut r).await {
                Ok(Some(b)) => b,
                Ok(None) => break conn.gone(),
                Err(e) => break e,
            };
            let resp: ResponseFrame = match decode_frame(&body) {
                Ok(r) => r,
                Err(e) => break e,
            };
            if resp.id == 0 {
                break resp.result.err().unwrap_or_else(|| conn.gone());
            }
            let tx = conn
                .pending
                .lock()
                .as_mut()
                .and_then(|p| p.remove(&resp.id));
            // An answer in a slot is copied out here, whether anyone still
            // waits for it or not, so that its slot is always given back.
            let result = match resp.result {
                Ok(Reply::DataShared { slot, len }) => match conn.region.get() {
                    Some(r) => r.receive(slot, len).map(|d| Reply::Data(Some(d))),
                    None => Err(Error::Protocol(
                        "the server answered in a shared region this client did not hand over"
                            .into(),
                    )),
                },
                result => result,
            };
            if let Some(tx) = tx {
                let _ = tx.send(result);
            }
        };
        conn.close(err);
    });
    (conn, answer)
}

/// A queue item type that has its own family of requests.
pub(crate) trait Wire: Send + Sized + 'static {
    fn request(op: QueueOp<Self>) -> Request;
    fn deliveries(reply: Reply) -> Result<Vec<(Self, u64)>>;
}

impl Wire for Label {
    fn request(op: QueueOp<Self>) -> Request {
        Request::Labels(op)
    }
    fn deliveries(reply: Reply) -> Result<Vec<(Self, u64)>> {
        expect!(reply, Reply::Labels(v) => v)
    }
}

impl Wire for Task {
    fn request(op: QueueOp<Self>) -> Request {
        Request::Tasks(op)
    }
    fn deliveries(reply: Reply) -> Result<Vec<(Self, u64)>> {
        expect!(reply, Reply::Tasks(v) => v)
    }
}

struct RemoteQueue<T> {
    conn: Arc<Conn>,
    _items: PhantomData<fn() -> T>,
}

impl<T> RemoteQueue<T> {
    fn new(conn: Arc<Conn>) -> Self {
        RemoteQueue {
            conn,
            _items: PhantomData,
        }
    }
}

#[async_trait]
impl<T: Wire + serde::Serialize> LabelQueue<T> for RemoteQueue<T> {
    async fn push(&self, queue: &str, items: Vec<T>) -> Result<()> {
        let op = QueueOp::Push {
            queue: queue.into(),
            items,
        };
        expect!(self.conn.call(T::request(op)).await?, Reply::Unit => ())
    }

    async fn pull(&self, queue: &str, max: usize, wait: Duration) -> Result<Vec<Delivery<T>>> {
        let op = QueueOp::Pull {
            queue: queue.into(),
            max: max as u64,
            wait,
        };
        let got = T::deliveries(self.conn.call(T::request(op)).await?)?;
        Ok(got
            .into_iter()
            .map(|(item, token)| Delivery { item, token })
            .collect())
    }

    async fn ack(&self, queue: &str, tokens: &[u64]) -> Result<()> {
        let op = QueueOp::Ack {
            queue: queue.into(),
            tokens: tokens.to_vec(),
        };
        expect!(self.conn.call(T::request(op)).await?, Reply::Unit => ())
    }

    async fn depth(&self, queue: &str) -> Result<usize> {
        let op = QueueOp::Depth {
            queue: queue.into(),
        };
        expect!(self.conn.call(T::request(op)).await?, Reply::Count(n) => n as usize)
    }

    async fn queues(&self, prefix: &str) -> Result<Vec<String>> {
        let op = QueueOp::Queues {
            prefix: prefix.into(),
        };
        expect!(self.conn.call(T::request(op)).await?, Reply::Names(v) => v)
    }
}

struct RemoteWarehouse(Arc<Conn>);

/// A slot filled for a put, given back unless its request was sent (a put
/// dropped or failed before that would otherwise keep it for good).
struct Placed<'a> {
    region: &'a ClientRegion,
    slot: u32,
    sent: bool,
}

impl<'a> Placed<'a> {
    fn new(region: &'a ClientRegion, data: &[u8]) -> Option<Placed<'a>> {
        let slot = region.place(data)?;
        Some(Placed {
            region,
            slot,
            sent: false,
        })
    }

    fn sent(mut self) {
        self.sent = true;
    }
}

impl Drop for Placed<'_> {
    fn drop(&mut self) {
        if !self.sent {
            self.region.unplace(self.slot);
        }
    }
}

impl RemoteWarehouse {
    /// Queues a put of `data` under `key` (a write's data through a slot
    /// of the shared region when there is one and a slot is free: the bytes
    /// are copied once, into the slot, and the server takes them from
    /// there; other entries, such as a room share that may wait long to be
    /// taken, go over the socket) and gives the answer still to come.
    async fn queue_put(&self, key: &str, data: Bytes) -> Result<PutAnswer> {
        let region = self.0.region.get().filter(|_| is_write_data(key));
        let answer = match region.and_then(|r| Placed::new(r, &data)) {
            None => {
                let request = Request::Put {
                    key: key.into(),
                    data,
                };
                self.0.send(request).await?
            }
            Some(placed) => {
                let request = Request::PutShared {
                    key: key.into(),
                    slot: placed.slot,
                    len: data.len() as u64,
                };
                let answer = self.0.send(request).await?;
                // Sent: the server frees the slot from now on, whatever
                // happens.
                placed.sent();
                answer
            }
        };
        let conn = self.0.clone();
        Ok(Box::pin(async move {
            expect!(answer.await.unwrap_or_else(|_| Err(conn.gone()))?, Reply::Unit => ())
        }))
    }
}

#[async_trait]
impl Warehouse for RemoteWarehouse {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.queue_put(key, data).await?.await
    }
    /// The server holds a push back until the puts of the write data its
    /// labels name, read before it on this connection, are done; it
    /// tracks no other key, whose put is then answered first.
    async fn put_ordered(&self, key: &str, data: Bytes) -> Result<PutAnswer> {
        let answer = self.queue_put(key, data).await?;
        if is_write_data(key) {
            return Ok(answer);
        }
        answer.await?;
        Ok(Box::pin(std::future::ready(Ok(()))))
    }
    /// A process reaching the warehouse through the server is an
    /// application, never a worker (workers run beside the stores): it
    /// gets no reserve, its results are staged data like any other.
    async fn put_result(&self, key: &str, data: Bytes) -> Result<()> {
        self.put(key, data).await
    }
    /// A read result that came back with its status is here, no longer
    /// in the server's warehouse; so in `take` and `delete`.
    async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        if let Some(data) = self.0.inlined.lock().by_key.get(key) {
            return Ok(Some(data.clone()));
        }
        expect!(self.0.call(Request::Get { key: key.into() }).await?, Reply::Data(d) => d)
    }
    async fn take(&self, key: &str) -> Result<Option<Bytes>> {
        if let Some(data) = self.0.inlined.lock().take(key) {
            return Ok(Some(data));
        }
        expect!(self.0.call(Request::Take { key: key.into() }).await?, Reply::Data(d) => d)
    }
    async fn delete(&self, key: &str) -> Result<bool> {
        if self.0.inlined.lock().take(key).is_some() {
            return Ok(true);
        }
        expect!(self.0.call(Request::Delete { key: key.into() }).await?, Reply::Bool(b) => b)
    }
    async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let r = self
            .0
            .call(Request::Keys {
                prefix: prefix.into(),
            })
            .await?;
        expect!(r, Reply::Names(v) => v)
    }
    async fn usage(&self) -> Result<u64> {
        expect!(self.0.call(Request::Usage).await?, Reply::Count(n) => n)
    }
}

tokio::task_local! {
    /// The user the requests of the current task act for (see [`acting_as`]).
    static CALLER: Cred;
}

/// Runs `work` with every request it sends to `labios serve` made on
/// behalf of `cred` ([`Request::As`]): how a root `labios mount` has each
/// caller's requests checked as that caller's. Requests that `work` hands
/// to other tasks go as the connection's own user.
pub async fn acting_as<T>(cred: Cred, work: impl std::future::Future<Output = T>) -> T {
    CALLER.scope(cred, work).await
}

struct RemoteInventory(Arc<Conn>);

#[async_trait]
impl Inventory for RemoteInventory {
    async fn create(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        owner: Owner,
    ) -> Result<FileMeta> {
        let r = self
            .0
            .call(Request::Create {
                path: path.into(),
                kind,
                mode,
                owner,
            })
            .await?;
        expect!(r, Reply::Meta(m) => m)
    }
    async fn symlink(&self, path: &str, target: &str, owner: Owner) -> Result<FileMeta> {
        let r = self
            .0
            .call(Request::Symlink {
                path: path.into(),
                target: target.into(),
                owner,
            })
            .await?;
        expect!(r, Reply::Meta(m) => m)
    }
    async fn set_attr(&self, file: FileId, attr: SetAttr) -> Result<FileMeta> {
        expect!(self.0.call(Request::SetAttr { file, attr }).await?, Reply::Meta(m) => m)
    }
    async fn link(&self, from: &str, to: &str) -> Result<FileMeta> {
        let r = self
            .0
            .call(Request::Link {
                from: from.into(),
                to: to.into(),
            })
            .await?;
        expect!(r, Reply::Meta(m) => m)
    }
    async fn lookup(&self, path: &str) -> Result<Option<FileMeta>> {
        let r = self.0.call(Request::Lookup { path: path.into() }).await?;
        expect!(r, Reply::MaybeMeta(m) => m)
    }
    async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        let r = self
            .0
            .call(Request::List {
                prefix: prefix.into(),
            })
            .await?;
        expect!(r, Reply::Metas(v) => v)
    }
    async fn remove(&self, path: &str) -> Result<(FileMeta, Vec<Extent>)> {
        let r = self.0.call(Request::Remove { path: path.into() }).await?;
        expect!(r, Reply::Removed(m, e) => (m, e))
    }
    async fn rename_as(
        &self,
        from: &str,
        to: &str,
        how: RenameHow,
    ) -> Result<Option<(FileMeta, Vec<Extent>)>> {
        let r = self
            .0
            .call(Request::Rename {
                from: from.into(),
                to: to.into(),
                how,
            })
            .await?;
        expect!(r, Reply::Renamed(v) => v)
    }
    async fn set_size(&self, file: FileId, size: u64) -> Result<()> {
        expect!(self.0.call(Request::SetSize { file, size }).await?, Reply::Unit => ())
    }
    async fn commit_extent(&self, file: FileId, extent: Extent) -> Result<()> {
        let r = self.0.call(Request::CommitExtent { file, extent }).await?;
        expect!(r, Reply::Unit => ())
    }
    async fn reserve_append(&self, file: FileId, len: u64) -> Result<u64> {
        let r = self.0.call(Request::ReserveAppend { file, len }).await?;
        expect!(r, Reply::Count(offset) => offset)
    }
    async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let r = self.0.call(Request::Extents { file, offset, len }).await?;
        expect!(r, Reply::Extents(v) => v)
    }
    async fn file(&self, file: FileId) -> Result<Option<FileMeta>> {
        expect!(self.0.call(Request::File { file }).await?, Reply::MaybeMeta(m) => m)
    }
    async fn read_plan(&self, named: &Named, offset: u64, len: u64) -> Result<Option<ReadPlan>> {
        let r = self
            .0
            .call(Request::ReadPlan {
                named: named.clone(),
                offset,
                len,
            })
            .await?;
        expect!(r, Reply::ReadPlan(p) => p)
    }
    async fn open(&self, file: FileId, access: u32) -> Result<FileMeta> {
        expect!(self.0.call(Request::Open { file, access }).await?, Reply::Meta(m) => m)
    }
    async fn hold(&self, file: FileId, session: u64) -> Result<bool> {
        expect!(self.0.call(Request::Hold { file, session }).await?, Reply::Bool(b) => b)
    }
    async fn let_go(&self, file: FileId, session: u64) -> Result<Option<FileMeta>> {
        let r = self.0.call(Request::LetGo { file, session }).await?;
        expect!(r, Reply::MaybeMeta(m) => m)
    }
    async fn let_go_session(&self, session: u64) -> Result<Vec<FileMeta>> {
        let r = self.0.call(Request::LetGoSession { session }).await?;
        expect!(r, Reply::Metas(v) => v)
    }
    async fn set_xattr_if(
        &self,
        file: FileId,
        name: &str,
        value: Option<Bytes>,
        cond: XattrCond,
    ) -> Result<()> {
        let name = name.to_string();
        let r = self.0.call(Request::SetXattr {
            file,
            name,
            value,
            cond,
        });
        expect!(r.await?, Reply::Unit => ())
    }
    async fn xattrs(&self, file: FileId) -> Result<Vec<(String, Bytes)>> {
        expect!(self.0.call(Request::Xattrs { file }).await?, Reply::Xattrs(v) => v)
    }
    async fn xattrs_of(&self, files: &[FileId]) -> Result<Vec<Option<Vec<(String, Bytes)>>>> {
        crate::inventory::check_xattrs_batch(files)?;
        let files = files.to_vec();
        expect!(self.0.call(Request::XattrsOf { files }).await?, Reply::XattrsOf(v) => v)
    }
    async fn set_status(&self, status: LabelStatus) -> Result<()> {
        expect!(self.0.call(Request::SetStatus(status)).await?, Reply::Unit => ())
    }
    async fn status(&self, id: LabelId) -> Result<Option<LabelStatus>> {
        expect!(self.0.call(Request::Status(id)).await?, Reply::Status(s) => s)
    }
    async fn wait(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>> {
        let r = self
            .0
            .call(Request::Wait {
                ids: ids.to_vec(),
                timeout,
            })
            .await?;
        expect!(r, Reply::Statuses(v) => v)
    }
    /// Small read results of this session come back with their statuses
    /// (one round trip fewer per read), kept until taken, within
    /// [`INLINE_BUDGET_MAX`]: a wait asks for no more than the room left.
    async fn wait_taking(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>> {
        let conn = &self.0;
        let budget = {
            let mut inlined = conn.inlined.lock();
            let budget = INLINE_BUDGET_MAX.saturating_sub(inlined.bytes + inlined.reserved);
            inlined.reserved += budget;
            budget
        };
        let Some(prefix) = conn.results.get().filter(|_| budget > 0) else {
            conn.inlined.lock().reserved -= budget;
            return self.wait(ids, timeout).await;
        };
        let r = conn
            .call(Request::WaitInline {
                ids: ids.to_vec(),
                timeout,
                inline: INLINE_MAX,
                budget,
                prefix: prefix.clone(),
            })
            .await;
        let mut inlined = conn.inlined.lock();
        inlined.reserved -= budget;
        let (statuses, taken) = expect!(r?, Reply::Waited(s, t) => (s, t))?;
        for (key, data) in taken {
            inlined.bytes += data.len() as u64;
            if let Some(old) = inlined.by_key.insert(key, data) {
                inlined.bytes -= old.len() as u64;
            }
        }
        Ok(statuses)
    }
    async fn label_count(&self) -> Result<usize> {
        expect!(self.0.call(Request::LabelCount).await?, Reply::Count(n) => n as usize)
    }
    async fn put_worker(&self, status: WorkerStatus) -> Result<()> {
        expect!(self.0.call(Request::PutWorker(status)).await?, Reply::Unit => ())
    }
    async fn workers(&self) -> Result<Vec<WorkerStatus>> {
        expect!(self.0.call(Request::Workers).await?, Reply::Workers(v) => v)
    }
    async fn remove_worker(&self, id: WorkerId) -> Result<()> {
        expect!(self.0.call(Request::RemoveWorker(id)).await?, Reply::Unit => ())
    }
    async fn ask_stack(&self, id: WorkerId, stack: Vec<String>) -> Result<()> {
        expect!(self.0.call(Request::AskStack(id, stack)).await?, Reply::Unit => ())
    }
    async fn take_stack(&self, id: WorkerId) -> Result<Option<Vec<String>>> {
        expect!(self.0.call(Request::TakeStack(id)).await?, Reply::Stack(s) => s)
    }
    async fn put_app(&self, app: AppRecord) -> Result<()> {
        expect!(self.0.call(Request::PutApp(app)).await?, Reply::Unit => ())
    }
    async fn app(&self, id: AppId) -> Result<Option<AppRecord>> {
        expect!(self.0.call(Request::App(id)).await?, Reply::App(a) => a)
    }
    async fn apps(&self) -> Result<Vec<AppRecord>> {
        expect!(self.0.call(Request::Apps).await?, Reply::Apps(v) => v)
    }
    async fn put_function(&self, app: AppId, name: &str, module: Option<Bytes>) -> Result<()> {
        let name = name.to_string();
        expect!(self.0.call(Request::PutFunction { app, name, module }).await?, Reply::Unit => ())
    }
    async fn function(&self, app: AppId, name: &str) -> Result<Option<Bytes>> {
        let name = name.to_string();
        expect!(self.0.call(Request::Function { app, name }).await?, Reply::Data(d) => d)
    }
    async fn functions(&self, app: AppId) -> Result<Vec<String>> {
        expect!(self.0.call(Request::Functions(app)).await?, Reply::Names(n) => n)
    }
    async fn next_id(&self, counter: &str) -> Result<u64> {
        expect!(self.0.call(Request::NextId(counter.into())).await?, Reply::Count(n) => n)
    }
    async fn sync(&self) -> Result<()> {
        expect!(self.0.call(Request::Sync).await?, Reply::Unit => ())
    }
}

/// The locks of `labios serve`, held by this connection's session.
struct RemoteLocks(Arc<Conn>);

#[async_trait]
impl Locks for RemoteLocks {
    async fn lock(&self, r: &LockRequest) -> Result<()> {
        expect!(self.0.call(Request::Lock(*r)).await?, Reply::Unit => ())
    }

    async fn conflict(&self, r: &LockRequest) -> Result<Option<HeldLock>> {
        expect!(self.0.call(Request::LockConflict(*r)).await?, Reply::Lock(l) => l)
    }

    async fn release(&self, session: u64, owner: Option<u64>, file: Option<FileId>) -> Result<()> {
        let request = Request::Unlock {
            session,
            owner,
            file,
        };
        expect!(self.0.call(request).await?, Reply::Unit => ())
    }
}
