//! The server side: answers remote proxies from a set of [`Stores`].

use super::opened::{Gives, Opened};
use super::order::CheckOrder;
use super::proto::{
    decode_frame, frame, read_frame, write_frames, QueueOp, Reply, Request, RequestFrame,
    ResponseFrame, Session, PROTOCOL,
};
use super::put_order::PutsInFlight;
use super::region::{first_chunk, ServerRegion};
use super::staging::{is_write_data, names, write_data, Staging};
use super::Endpoint;
use crate::access::{Cred, EXEC, READ, WRITE};
use crate::label_queue::LabelQueue;
use crate::Stores;
use crate::{FileKind, Named, RenameHow};
use labios_label::{AppId, Error, Label, LabelKind, Result};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

/// Checks a client's key and secret and names its application. Async because
/// the administrator looks credentials up in the inventory.
pub type AuthFn = Arc<
    dyn Fn(Option<String>, Option<String>) -> futures::future::BoxFuture<'static, Result<Grant>>
        + Send
        + Sync,
>;

/// What an accepted client may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub app: AppId,
    /// Handed back in the session so the client can sign labels.
    pub secret: String,
    /// Confined to its application's queue, warehouse keys, files and label
    /// statuses (README "Tenants"); `false` only for trusted service
    /// connections (tests, tools run by the operator).
    pub confined: bool,
}

impl Grant {
    /// A client confined to application `app`.
    pub fn tenant(app: AppId, secret: impl Into<String>) -> Self {
        Grant {
            app,
            secret: secret.into(),
            confined: true,
        }
    }

    /// A connection allowed everything.
    pub fn service(app: AppId) -> Self {
        Grant {
            app,
            secret: String::new(),
            confined: false,
        }
    }
}

/// Which application each session origin was issued to, so that label
/// statuses (keyed by label id, whose origin names its client) are shown
/// only to their own application.
type Origins = Arc<parking_lot::Mutex<std::collections::HashMap<u64, AppId>>>;

/// Requests of one connection running at once; further frames wait, which
/// pushes back on the client through the socket.
const IN_FLIGHT: usize = 1024;
const OUTBOX: usize = 1024;

pub enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    /// Binds `endpoint`. A leftover Unix socket file is replaced, unless a
    /// server still answers on it.
    pub async fn bind(endpoint: &Endpoint) -> Result<Self> {
        let failed =
            |e: std::io::Error| Error::Unavailable(format!("cannot listen on {endpoint}: {e}"));
        match endpoint {
            Endpoint::Unix(path) => {
                if path.exists() {
                    if tokio::net::UnixStream::connect(path).await.is_ok() {
                        return Err(Error::AlreadyExists(format!(
                            "a server is already listening on {}",
                            path.display()
                        )));
                    }
                    std::fs::remove_file(path).map_err(failed)?;
                }
                Ok(Listener::Unix(
                    UnixListener::bind(path).map_err(failed)?,
                    path.clone(),
                ))
            }
            Endpoint::Tcp(addr) => Ok(Listener::Tcp(
                TcpListener::bind(addr).await.map_err(failed)?,
            )),
        }
    }

    /// Where clients reach this listener (the real port when bound to 0).
    pub fn endpoint(&self) -> Result<Endpoint> {
        match self {
            Listener::Unix(_, path) => Ok(Endpoint::Unix(path.clone())),
            Listener::Tcp(l) => Ok(Endpoint::Tcp(l.local_addr()?.to_string())),
        }
    }
}

/// Serves connections until `shutdown` turns true (or its sender is
/// dropped); open connections are closed then too.
pub async fn serve(
    listener: Listener,
    stores: Stores,
    auth: AuthFn,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let mut conns = JoinSet::new();
    let origins = Origins::default();
    let order = CheckOrder::default();
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            changed = shutdown.changed() => if changed.is_err() { break },
            accepted = accept(&listener) => match accepted {
                Ok(accepted) => {
                    conns.spawn(connection(
                        accepted,
                        stores.clone(),
                        auth.clone(),
                        origins.clone(),
                        order.clone(),
                        shutdown.clone(),
                    ));
                }
                Err(e) => tracing::warn!("accept on {:?}: {e}", listener.endpoint()),
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// An accepted connection; on a Unix socket, with the user of the process
/// at the other end (SO_PEERCRED: the kernel's word, not the client's).
enum Accepted {
    Unix(tokio::net::UnixStream, Cred),
    Tcp(tokio::net::TcpStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    Ok(match listener {
        Listener::Unix(l, _) => {
            let (s, _) = l.accept().await?;
            let c = s.peer_cred()?;
            Accepted::Unix(s, Cred::of_process(c.uid(), c.gid(), c.pid()))
        }
        Listener::Tcp(l) => {
            let (s, _) = l.accept().await?;
            s.set_nodelay(true)?;
            Accepted::Tcp(s)
        }
    })
}

/// A connection's two halves, the user at the other end of a Unix socket,
/// and the shared region its client handed over with its first bytes.
type Opening = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
    Option<Cred>,
    Option<Arc<ServerRegion>>,
);

/// The region a client handed over, if it is one the server may map. A
/// refused region leaves the client's puts on the socket (the session tells
/// it so); the log says why.
fn region_of(mut fds: Vec<OwnedFd>) -> Option<Arc<ServerRegion>> {
    let opened = match (fds.pop(), fds.len()) {
        (None, _) => return None,
        (Some(fd), 0) => ServerRegion::open(fd),
        (Some(_), n) => Err(Error::InvalidArgument(format!(
            "{} descriptors sent, not one",
            n + 1
        ))),
    };
    opened
        .map_err(|e| {
            tracing::warn!("shared region refused, the client's puts go over the socket: {e}")
        })
        .ok()
}

async fn opening(accepted: Accepted) -> std::io::Result<Opening> {
    Ok(match accepted {
        Accepted::Unix(s, peer) => {
            let (first, fds) = first_chunk(&s).await?;
            let region = region_of(fds);
            let (r, w) = s.into_split();
            let r = std::io::Cursor::new(first).chain(r);
            (Box::new(r), Box::new(w), Some(peer), region)
        }
        Accepted::Tcp(s) => {
            let (r, w) = s.into_split();
            (Box::new(r), Box::new(w), None, None)
        }
    })
}

/// Data answers of at least this many bytes go through the client's shared
/// region when a slot is free: below it, the socket's copy costs as little.
const SHARED_ANSWER_MIN: usize = 16 << 10;

/// `result` with its data, if large, in a slot of the client's region
/// ([`Reply::DataShared`]): one copy, none of the bytes on the socket.
fn answered_shared(result: Result<Reply>, region: Option<&ServerRegion>) -> Result<Reply> {
    match (result, region) {
        (Ok(Reply::Data(Some(d))), Some(r)) if d.len() >= SHARED_ANSWER_MIN => match r.give(&d) {
            Some(slot) => Ok(Reply::DataShared {
                slot,
                len: d.len() as u64,
            }),
            None => Ok(Reply::Data(Some(d))),
        },
        (result, _) => result,
    }
}

/// A [`Request::PutShared`] (alone or on behalf of a user) as the
/// [`Request::Put`] of its slot's bytes. Only write data, which its label's
/// worker soon drops, keeps the slot: anything else (a room share may wait
/// long to be taken) is copied out and the slot freed at once.
fn unshared(request: Request, region: Option<&Arc<ServerRegion>>) -> Result<Request> {
    match request {
        Request::PutShared { key, slot, len } => match region {
            Some(r) => {
                let held = r.take(slot, len)?;
                let data = match is_write_data(&key) {
                    true => held,
                    false => bytes::Bytes::copy_from_slice(&held),
                };
                Ok(Request::Put { key, data })
            }
            None => Err(Error::InvalidArgument(
                "a put from a shared region on a connection that handed over none".into(),
            )),
        },
        Request::As { cred, request } => Ok(Request::As {
            cred,
            request: Box::new(unshared(*request, region)?),
        }),
        request => Ok(request),
    }
}

/// The POSIX user a connection's requests act as (README "Permissions").
#[derive(Debug, Clone)]
enum Acting {
    /// Root on the Unix socket, or a service connection: its requests are
    /// not checked, and the owners it names for new entries are taken (a
    /// root `labios mount` creates for its callers).
    Trusted,
    User(Cred),
}

/// The user a TCP client that is not a service acts as: it has no local
/// identity the kernel vouches for, so it gets the unprivileged `nobody`.
pub const TCP_USER: u32 = 65_534;

impl Acting {
    fn of(peer: Option<Cred>, grant: &Grant) -> Acting {
        match peer {
            Some(c) if !c.is_root() => Acting::User(c),
            Some(_) => Acting::Trusted,
            None if !grant.confined => Acting::Trusted,
            None => Acting::User(Cred {
                uid: TCP_USER,
                gid: TCP_USER,
                groups: Vec::new(),
            }),
        }
    }
}

/// The results of the complete labels among `statuses` that a
/// [`Request::WaitInline`] brings back, taken out of the warehouse; none
/// unless every label is final (a wait that times out is an error to its
/// caller, which then takes nothing). A result the warehouse fails to
/// give, or that is larger than its status said, stays there, and so does
/// every one after it: the client takes them with calls of their own.
async fn take_inline(
    w: &dyn crate::Warehouse,
    statuses: &[labios_label::LabelStatus],
    inline: u64,
    budget: u64,
    prefix: &str,
) -> Vec<(String, bytes::Bytes)> {
    let mut left = budget.min(super::proto::INLINE_BUDGET_MAX);
    let mut taken = Vec::new();
    if !statuses.iter().all(|s| s.state.is_final()) {
        return taken;
    }
    let inline = inline.min(super::proto::INLINE_MAX);
    for s in statuses {
        let Some(key) = s.result_key.as_ref() else {
            continue;
        };
        let small = s.result_len <= inline && s.result_len <= left;
        if s.state != labios_label::LabelState::Complete || !small || !key.starts_with(prefix) {
            continue;
        }
        match w.take(key).await {
            Ok(Some(data)) if data.len() as u64 <= inline.min(left) => {
                left -= data.len() as u64;
                taken.push((key.clone(), data));
            }
            Ok(Some(data)) => {
                // Not what its status said: back where the client finds it.
                if w.put(key, data).await.is_err() {
                    tracing::warn!("a read result taken to inline could not be put back: {key}");
                }
                break;
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }
    taken
}

fn respond(id: u64, result: Result<Reply>) -> Vec<u8> {
    let hint = match &result {
        Ok(Reply::Data(Some(d))) => d.len(),
        Ok(Reply::Waited(_, taken)) => taken.iter().map(|(_, d)| d.len()).sum(),
        _ => 0,
    };
    frame(&ResponseFrame { id, result }, hint)
        .unwrap_or_else(|e| frame(&ResponseFrame { id, result: Err(e) }, 0).unwrap_or_default())
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    accepted: Accepted,
    stores: Stores,
    auth: AuthFn,
    origins: Origins,
    order: CheckOrder,
    mut shutdown: watch::Receiver<bool>,
) {
    let opened = tokio::select! {
        _ = shutdown.changed() => return,
        opened = opening(accepted) => opened,
    };
    let Ok((r, w, peer, region)) = opened else {
        return;
    };
    let (outbox, rx) = mpsc::channel::<Vec<u8>>(OUTBOX);
    let writer = tokio::spawn(write_frames(w, rx));
    let mut r = BufReader::with_capacity(64 << 10, r);
    let mut tasks = JoinSet::new();
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut hello = true;
    let mut grant: Option<Arc<Grant>> = None;
    let mut acting = Arc::new(Acting::Trusted);
    let mut peer = peer;
    let mut own_origin = None;
    let opened = Arc::new(Opened::default());
    let staging = Arc::new(parking_lot::Mutex::new(Staging::default()));
    let puts = PutsInFlight::default();
    loop {
        let body = tokio::select! {
            _ = shutdown.changed() => break,
            body = read_frame(&mut r) => body,
        };
        let frame: RequestFrame = match body.and_then(|b| match b {
            Some(b) => decode_frame(&b).map(Some),
            None => Ok(None),
        }) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) if hello => {
                let e = Error::Protocol(format!(
                    "the first request is not a Hello of wire protocol {PROTOCOL} ({e}): \
                     is this client library (liblabios_preload.so, liblabios_c.so, the \
                     Python package) of an older LABIOS release than `labios serve` {}?",
                    env!("CARGO_PKG_VERSION")
                ));
                let _ = outbox.send(respond(0, Err(e))).await;
                break;
            }
            Err(e) => {
                let _ = outbox.send(respond(0, Err(e))).await;
                break;
            }
        };
        if hello {
            hello = false;
            let reply = match frame.request {
                Request::Hello { protocol, .. } if protocol != PROTOCOL => {
                    Err(Error::Protocol(format!(
                        "this client speaks wire protocol {protocol} and `labios serve` {} \
                         speaks {PROTOCOL}: use the client library of the server's release",
                        env!("CARGO_PKG_VERSION")
                    )))
                }
                Request::Hello { key, secret, .. } => match auth(key, secret).await {
                    Ok(g) => match stores.inventory.next_id("origin").await {
                        Ok(origin) => {
                            origins.lock().insert(origin, g.app);
                            own_origin = Some(origin);
                            let session = Session {
                                app: g.app,
                                origin,
                                secret: g.secret.clone(),
                                shared: region.is_some(),
                            };
                            acting = Arc::new(Acting::of(peer.take(), &g));
                            grant = Some(Arc::new(g));
                            Ok(Reply::Session(session))
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                },
                _ => Err(Error::Protocol("the first request must be Hello".into())),
            };
            let accepted = reply.is_ok();
            let _ = outbox.send(respond(frame.id, reply)).await;
            if !accepted {
                break;
            }
            continue;
        }
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        let (stores, outbox) = (stores.clone(), outbox.clone());
        let (grant, origins, opened, order) = (
            grant.clone(),
            origins.clone(),
            opened.clone(),
            order.clone(),
        );
        // In read order, before anything can refuse the put: a push runs
        // after the puts of its data read before it, which the client did
        // not wait for, and fails if one of them failed or was refused
        // (put_order.rs; a put dropped unfinished counts as failed).
        let running = write_data(&frame.request).map(|key| puts.begin(key));
        // First, so that a request refused below frees its slot.
        let request = match unshared(frame.request, region.as_ref()) {
            Ok(request) => request,
            Err(e) => {
                let _ = outbox.send(respond(frame.id, Err(e))).await;
                continue;
            }
        };
        let (acting, request) = match request {
            Request::As { cred, request } => match acting.as_ref() {
                Acting::Trusted if cred.is_root() => (acting.clone(), *request),
                Acting::Trusted => (Arc::new(Acting::User(cred)), *request),
                Acting::User(c) => {
                    let e = denied(format!(
                        "user {} may not act for user {}: only root may",
                        c.uid, cred.uid
                    ));
                    let _ = outbox.send(respond(frame.id, Err(e))).await;
                    continue;
                }
            },
            request => (acting.clone(), request),
        };
        if let Some(key) = write_data(&request) {
            let may = grant
                .as_ref()
                .is_none_or(|g| !g.confined || own_key(g.app, &key, true));
            if may {
                staging.lock().stored(key);
            }
        }
        let awaited = puts.awaited(&request);
        let named = names(&request);
        let staging = staging.clone();
        let request = own_session(request, own_origin.unwrap_or_default());
        let region = region.clone();
        tasks.spawn(async move {
            let stored = awaited.wait().await;
            let turn = order
                .turn(&request, matches!(acting.as_ref(), Acting::User(_)))
                .await;
            let checked = match stored {
                Ok(()) => posix(&stores, &acting, grant.as_deref(), &opened, request).await,
                Err(e) => Err(e),
            };
            let result = match checked {
                Err(e) => Err(e),
                Ok((request, gives)) => {
                    let result = match grant {
                        Some(g) if g.confined => confined(&stores, &g, &origins, request).await,
                        _ => handle(&stores, request).await,
                    };
                    if let (Acting::User(c), Ok(Reply::Meta(m))) = (acting.as_ref(), &result) {
                        opened.answered(c.uid, gives, m);
                    }
                    result
                }
            };
            if let Some(running) = running {
                running.finish(&result.as_ref().map(|_| ()).map_err(Clone::clone));
            }
            // With no await since the push ended: a push that succeeded is
            // never swept below as if it had not run.
            if result.is_ok() && !named.is_empty() {
                staging.lock().named(&named);
            }
            // A client slow to read its answers must not hold up others.
            drop(turn);
            let result = answered_shared(result, region.as_deref());
            let _ = outbox.send(respond(frame.id, result)).await;
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    // The client is gone or misbehaved: drop what it still waits for,
    // and the write data it staged for labels it never pushed.
    tasks.shutdown().await;
    let staging = std::mem::take(&mut *staging.lock());
    staging.sweep(stores.warehouse.as_ref()).await;
    // Its labels' ids carry an origin no later session is given, and only
    // its own requests may ask after them: the entry would only grow the
    // map, connection after connection.
    if let Some(origin) = own_origin {
        origins.lock().remove(&origin);
        // A process that dies holding locks must not leave them behind.
        if let Err(e) = stores.locks.release(origin, None, None).await {
            tracing::warn!("releasing the locks of session {origin}: {e}");
        }
        // Nor files it kept open past their last name.
        if let Some(g) = &grant {
            let_go_of_session(&stores, g, origin).await;
        }
    }
    drop(outbox);
    let _ = writer.await;
}

/// Ends the holds of session `origin`, whose connection closed (its
/// process may have been killed), and frees the files that go with them.
async fn let_go_of_session(stores: &Stores, grant: &Grant, origin: u64) {
    let freed = match stores.inventory.let_go_session(origin).await {
        Ok(gone) => crate::free_files(stores, &gone, grant.app, &grant.secret, origin).await,
        Err(e) => Err(e),
    };
    if let Err(e) = freed {
        tracing::warn!("ending the open files of session {origin}: {e}");
    }
}

/// Lock and hold requests act for the connection's own session: a client
/// names only owners within it.
fn own_session(request: Request, session: u64) -> Request {
    match request {
        Request::Lock(mut r) => {
            r.holder.session = session;
            Request::Lock(r)
        }
        Request::LockConflict(mut r) => {
            r.holder.session = session;
            Request::LockConflict(r)
        }
        Request::Unlock { owner, file, .. } => Request::Unlock {
            session,
            owner,
            file,
        },
        Request::Hold { file, .. } => Request::Hold { file, session },
        Request::LetGo { file, .. } => Request::LetGo { file, session },
        Request::LetGoSession { .. } => Request::LetGoSession { session },
        other => other,
    }
}

async fn queue_op<T: Send + 'static>(
    q: &dyn LabelQueue<T>,
    op: QueueOp<T>,
    wrap: fn(Vec<(T, u64)>) -> Reply,
) -> Result<Reply> {
    Ok(match op {
        QueueOp::Push { queue, items } => q.push(&queue, items).await.map(|_| Reply::Unit)?,
        QueueOp::Pull { queue, max, wait } => {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            let got = q.pull(&queue, max, wait).await?;
            wrap(got.into_iter().map(|d| (d.item, d.token)).collect())
        }
        QueueOp::Ack { queue, tokens } => q.ack(&queue, &tokens).await.map(|_| Reply::Unit)?,
        QueueOp::Depth { queue } => Reply::Count(q.depth(&queue).await? as u64),
        QueueOp::Queues { prefix } => Reply::Names(q.queues(&prefix).await?),
    })
}

async fn handle(s: &Stores, request: Request) -> Result<Reply> {
    let (w, i) = (&s.warehouse, &s.inventory);
    Ok(match request {
        Request::Hello { .. } => return Err(Error::Protocol("Hello sent twice".into())),
        Request::PutShared { .. } => {
            return Err(Error::Protocol(
                "a shared put reached the stores unresolved".into(),
            ))
        }
        Request::As { .. } => {
            return Err(Error::Protocol(
                "a request on behalf of a user inside another".into(),
            ))
        }
        Request::Labels(op) => return queue_op(s.labels.as_ref(), op, Reply::Labels).await,
        Request::Tasks(op) => return queue_op(s.tasks.as_ref(), op, Reply::Tasks).await,
        Request::Put { key, data } => w.put(&key, data).await.map(|_| Reply::Unit)?,
        Request::Get { key } => Reply::Data(w.get(&key).await?),
        Request::Take { key } => Reply::Data(w.take(&key).await?),
        Request::Delete { key } => Reply::Bool(w.delete(&key).await?),
        Request::Keys { prefix } => Reply::Names(w.keys(&prefix).await?),
        Request::Usage => Reply::Count(w.usage().await?),
        Request::Create {
            path,
            kind,
            mode,
            owner,
        } => Reply::Meta(i.create(&path, kind, mode, owner).await?),
        Request::Symlink {
            path,
            target,
            owner,
        } => Reply::Meta(i.symlink(&path, &target, owner).await?),
        Request::Link { from, to } => Reply::Meta(i.link(&from, &to).await?),
        Request::SetAttr { file, attr } => Reply::Meta(i.set_attr(file, attr).await?),
        Request::Lookup { path } => Reply::MaybeMeta(i.lookup(&path).await?),
        Request::List { prefix } => Reply::Metas(i.list(&prefix).await?),
        Request::Remove { path } => {
            let (m, e) = i.remove(&path).await?;
            Reply::Removed(m, e)
        }
        Request::Rename { from, to, how } => Reply::Renamed(i.rename_as(&from, &to, how).await?),
        Request::SetSize { file, size } => i.set_size(file, size).await.map(|_| Reply::Unit)?,
        Request::CommitExtent { file, extent } => {
            i.commit_extent(file, extent).await.map(|_| Reply::Unit)?
        }
        Request::ReserveAppend { file, len } => Reply::Count(i.reserve_append(file, len).await?),
        Request::Extents { file, offset, len } => {
            Reply::Extents(i.extents(file, offset, len).await?)
        }
        Request::File { file } => Reply::MaybeMeta(i.file(file).await?),
        Request::ReadPlan { named, offset, len } => {
            Reply::ReadPlan(i.read_plan(&named, offset, len).await?)
        }
        Request::Open { file, access } => Reply::Meta(i.open(file, access).await?),
        Request::Hold { file, session } => Reply::Bool(i.hold(file, session).await?),
        Request::LetGo { file, session } => Reply::MaybeMeta(i.let_go(file, session).await?),
        Request::LetGoSession { session } => Reply::Metas(i.let_go_session(session).await?),
        Request::SetStatus(st) => i.set_status(st).await.map(|_| Reply::Unit)?,
        Request::Status(id) => Reply::Status(i.status(id).await?),
        Request::Wait { ids, timeout } => Reply::Statuses(i.wait(&ids, timeout).await?),
        Request::WaitInline {
            ids,
            timeout,
            inline,
            budget,
            prefix,
        } => {
            let statuses = i.wait(&ids, timeout).await?;
            let taken = take_inline(w.as_ref(), &statuses, inline, budget, &prefix).await;
            Reply::Waited(statuses, taken)
        }
        Request::LabelCount => Reply::Count(i.label_count().await? as u64),
        Request::PutWorker(st) => i.put_worker(st).await.map(|_| Reply::Unit)?,
        Request::Workers => Reply::Workers(i.workers().await?),
        Request::RemoveWorker(id) => i.remove_worker(id).await.map(|_| Reply::Unit)?,
        Request::AskStack(id, stack) => i.ask_stack(id, stack).await.map(|_| Reply::Unit)?,
        Request::TakeStack(id) => Reply::Stack(i.take_stack(id).await?),
        Request::PutApp(app) => i.put_app(app).await.map(|_| Reply::Unit)?,
        Request::App(id) => Reply::App(i.app(id).await?),
        Request::Apps => Reply::Apps(i.apps().await?),
        Request::PutFunction { app, name, module } => i
            .put_function(app, &name, module)
            .await
            .map(|_| Reply::Unit)?,
        Request::Function { app, name } => Reply::Data(i.function(app, &name).await?),
        Request::Functions(app) => Reply::Names(i.functions(app).await?),
        Request::NextId(name) => Reply::Count(i.next_id(&name).await?),
        Request::Sync => i.sync().await.map(|_| Reply::Unit)?,
        Request::SetXattr {
            file,
            name,
            value,
            cond,
        } => i
            .set_xattr_if(file, &name, value, cond)
            .await
            .map(|_| Reply::Unit)?,
        Request::Xattrs { file } => Reply::Xattrs(i.xattrs(file).await?),
        Request::XattrsOf { files } => Reply::XattrsOf(i.xattrs_of(&files).await?),
        Request::Lock(r) => s.locks.lock(&r).await.map(|_| Reply::Unit)?,
        Request::LockConflict(r) => Reply::Lock(s.locks.conflict(&r).await?),
        Request::Unlock {
            session,
            owner,
            file,
        } => s
            .locks
            .release(session, owner, file)
            .await
            .map(|_| Reply::Unit)?,
    })
}

/// The parent directory of a normalized path.
fn parent_of(path: &str) -> &str {
    labios_label::path::parent(path).unwrap_or("/")
}

/// The directory a new name `path` is made in: its parent, or the nearest
/// ancestor that exists when the parents are missing (they are made with
/// the entry, as the caller's).
async fn making_in(i: &dyn crate::Inventory, path: &str) -> Result<Option<crate::FileMeta>> {
    let mut at = parent_of(path);
    loop {
        if let Some(m) = i.lookup(at).await? {
            return Ok(Some(m));
        }
        if at == "/" {
            return Ok(None);
        }
        at = parent_of(at);
    }
}

/// Checks that `cred` may search every existing directory above `path`
/// (the execute bit of each), as the kernel does walking a path.
async fn may_search(i: &dyn crate::Inventory, cred: &Cred, path: &str) -> Result<()> {
    let mut dirs = Vec::new();
    let mut at = path;
    while let Some(p) = labios_label::path::parent(at) {
        dirs.push(p);
        at = p;
    }
    for d in dirs.into_iter().rev() {
        match i.lookup(d).await? {
            Some(m) if m.kind == FileKind::Dir => cred.check(&m, EXEC)?,
            _ => break,
        }
    }
    Ok(())
}

/// Checks that `cred` may move the data of labels it publishes: read the
/// files read labels (and pipelines) read, write those write labels
/// write. What an open or create on this connection allowed the user
/// (`opened`) passes without asking the mode again, as a descriptor keeps
/// the access its open gave; anything else is checked label by label.
async fn may_move_data(
    i: &dyn crate::Inventory,
    cred: &Cred,
    opened: &Opened,
    labels: &[Label],
) -> Result<()> {
    let mut seen = std::collections::HashMap::new();
    for l in labels {
        let wants = match l.kind {
            LabelKind::Read => [(l.source.file(), READ), (None, 0)],
            LabelKind::Write => [(l.destination.file(), WRITE), (None, 0)],
            LabelKind::Composite => [(l.source.file(), READ), (l.destination.file(), WRITE)],
            _ => continue,
        };
        for (file, want) in wants {
            let Some((id, _, _)) = file else { continue };
            if opened.allows(cred.uid, id, want) {
                continue;
            }
            let meta = match seen.get(&id) {
                Some(m) => m,
                None => seen.entry(id).or_insert(i.file(id).await?),
            };
            if let Some(m) = meta {
                cred.check(m, want)?;
            }
        }
    }
    Ok(())
}

/// Checks that `cred` may make a name in the directory `dir`.
fn may_make(cred: &Cred, dir: Option<&crate::FileMeta>) -> Result<()> {
    dir.map_or(Ok(()), |d| cred.check(d, WRITE | EXEC))
}

/// Checks that `cred` may take the name `path` away (remove, rename from
/// or over it), when there is an entry there.
async fn may_unname(i: &dyn crate::Inventory, cred: &Cred, path: &str) -> Result<()> {
    let Some(victim) = i.lookup(path).await? else {
        return Ok(());
    };
    match i.lookup(parent_of(path)).await? {
        Some(dir) => cred.check_unlink(&dir, &victim),
        None => Ok(()),
    }
}

/// Checks that `cred` may change the data or attributes of file `file`;
/// with `opened`, what an open allowed it counts.
async fn may_write(
    i: &dyn crate::Inventory,
    cred: &Cred,
    file: labios_label::FileId,
    opened: Option<&Opened>,
) -> Result<()> {
    if opened.is_some_and(|o| o.allows(cred.uid, file, WRITE)) {
        return Ok(());
    }
    match i.file(file).await? {
        Some(m) => cred.check(&m, WRITE),
        None => Ok(()),
    }
}

/// The paths whose directories a request walks.
fn searched(request: &Request) -> Vec<&str> {
    match request {
        Request::Lookup { path }
        | Request::ReadPlan {
            named: Named::Path(path),
            ..
        }
        | Request::Create { path, .. }
        | Request::Symlink { path, .. }
        | Request::Remove { path } => vec![path],
        Request::Link { from, to } | Request::Rename { from, to, .. } => vec![from, to],
        Request::List { prefix } => vec![prefix],
        _ => Vec::new(),
    }
}

/// A request as the user it acts as may make it (README "Permissions"):
/// checked against the permission bits of the entries and directories it
/// touches by [`Cred`]'s rules, with the owner of a new entry set to that
/// user (and the group of a set-group-ID parent), and what its answer
/// gives the user on this connection ([`Gives`]). Trusted connections'
/// requests pass unchanged.
async fn posix(
    s: &Stores,
    acting: &Acting,
    grant: Option<&Grant>,
    opened: &Opened,
    request: Request,
) -> Result<(Request, Gives)> {
    let Acting::User(cred) = acting else {
        return Ok((request, Gives::Nothing));
    };
    let i = s.inventory.as_ref();
    let app = grant.map_or(0, |g| g.app);
    for path in searched(&request) {
        may_search(i, cred, path).await?;
    }
    let mut gives = Gives::Nothing;
    let request = match request {
        Request::Labels(QueueOp::Push { queue, items }) => {
            may_move_data(i, cred, opened, &items).await?;
            Request::Labels(QueueOp::Push { queue, items })
        }
        Request::List { prefix } => {
            if let Some(dir) = prefix.strip_suffix('/').filter(|d| !d.is_empty()) {
                if let Some(m) = i.lookup(dir).await?.filter(|m| m.kind == FileKind::Dir) {
                    cred.check(&m, READ)?;
                }
            }
            Request::List { prefix }
        }
        Request::Create {
            path, kind, mode, ..
        } => {
            // An existing file is returned to be written; a new one is
            // its creator's to read and write, whatever its mode.
            match i.lookup(&path).await? {
                Some(m) if m.kind == FileKind::File && kind == FileKind::File => {
                    cred.check(&m, WRITE)?;
                    gives = Gives::Access(WRITE);
                }
                Some(_) => {}
                None if kind == FileKind::File => gives = Gives::Made,
                None => {}
            }
            let dir = making_in(i, &path).await?;
            may_make(cred, dir.as_ref())?;
            cred.check_make(kind, &path)?;
            let (owner, mode) = cred.new_entry(app, dir.as_ref(), kind, mode);
            Request::Create {
                path,
                kind,
                mode,
                owner,
            }
        }
        Request::Symlink { path, target, .. } => {
            let dir = making_in(i, &path).await?;
            may_make(cred, dir.as_ref())?;
            let (owner, _) = cred.new_entry(app, dir.as_ref(), FileKind::Symlink, 0o777);
            Request::Symlink {
                path,
                target,
                owner,
            }
        }
        Request::Link { from, to } => {
            if let Some(m) = i.lookup(&from).await? {
                cred.check_link_source(&m)?;
            }
            may_make(cred, making_in(i, &to).await?.as_ref())?;
            Request::Link { from, to }
        }
        Request::Remove { path } => {
            may_unname(i, cred, &path).await?;
            Request::Remove { path }
        }
        Request::Rename { from, to, how } => {
            // An exchange moves each name to the other's place.
            let moving: &[(&str, &str)] = match how {
                RenameHow::Exchange => &[(&from, &to), (&to, &from)],
                _ => &[(&from, &to)],
            };
            for (a, b) in moving {
                may_unname(i, cred, a).await?;
                may_make(cred, making_in(i, b).await?.as_ref())?;
                may_unname(i, cred, b).await?;
                // A directory moving elsewhere changes its `..`: it must
                // be writable too, as on Linux.
                if parent_of(a) != parent_of(b) {
                    if let Some(m) = i.lookup(a).await?.filter(|m| m.kind == FileKind::Dir) {
                        cred.check(&m, WRITE)?;
                    }
                }
            }
            Request::Rename { from, to, how }
        }
        Request::SetSize { file, size } => {
            may_write(i, cred, file, Some(opened)).await?;
            Request::SetSize { file, size }
        }
        Request::ReserveAppend { file, len } => {
            may_write(i, cred, file, Some(opened)).await?;
            Request::ReserveAppend { file, len }
        }
        Request::SetXattr {
            file,
            name,
            value,
            cond,
        } => {
            may_write(i, cred, file, None).await?;
            Request::SetXattr {
                file,
                name,
                value,
                cond,
            }
        }
        Request::SetAttr { file, attr } => {
            let meta = i
                .file(file)
                .await?
                .ok_or_else(|| Error::NotFound(format!("file id {file}")))?;
            let attr = cred.check_set_attr(&meta, attr)?;
            Request::SetAttr { file, attr }
        }
        // A read lock needs what reading needs, a write lock what writing
        // needs (checked per call, as data moves are).
        Request::Lock(r) => {
            if let (Some(kind), Some(m)) = (r.kind, i.file(r.file).await?) {
                let want = match kind {
                    crate::locks::LockKind::Read => READ,
                    crate::locks::LockKind::Write => WRITE,
                };
                cred.check(&m, want)?;
            }
            Request::Lock(r)
        }
        Request::Open { file, access } => {
            let m = i
                .file(file)
                .await?
                .ok_or_else(|| Error::NotFound(format!("file id {file}")))?;
            cred.check(&m, access & (READ | WRITE))?;
            gives = Gives::Access(access & (READ | WRITE));
            Request::Open { file, access }
        }
        other => other,
    };
    Ok((request, gives))
}

fn denied(what: impl std::fmt::Display) -> Error {
    Error::PermissionDenied(what.to_string())
}

/// Warehouse keys of application `app`: its labels' data and results, and
/// its room. Anyone may put into another application's room (sharing).
fn own_key(app: AppId, key: &str, put: bool) -> bool {
    key.starts_with(&format!("a{app}/"))
        || key.starts_with(&format!("room/{app}/"))
        || (put && key.starts_with("room/"))
}

fn own_file(app: AppId, meta: Option<crate::FileMeta>) -> Result<()> {
    match meta {
        Some(m) if m.owner != app => {
            Err(denied(format!("{} belongs to another application", m.path)))
        }
        _ => Ok(()),
    }
}

/// Registering a new application is allowed; changing another one is not.
async fn other_app(i: &dyn crate::Inventory, app: AppId, id: AppId) -> Result<()> {
    if id != app && i.app(id).await?.is_some() {
        return Err(denied(format!(
            "application {app} cannot change application {id}"
        )));
    }
    Ok(())
}

fn own_labels(origins: &Origins, app: AppId, ids: &[labios_label::LabelId]) -> Result<()> {
    let origins = origins.lock();
    match ids.iter().find(|id| origins.get(&id.origin) != Some(&app)) {
        Some(id) => Err(denied(format!("label {id} belongs to another application"))),
        None => Ok(()),
    }
}

/// A confined session's request: checked against its application, then
/// served like any other (README "Tenants").
async fn confined(s: &Stores, g: &Grant, origins: &Origins, request: Request) -> Result<Reply> {
    let app = g.app;
    let i = &s.inventory;
    let own_queue = crate::client_queue(app);
    match &request {
        Request::Labels(op) => match op {
            // Names and depths are what `labios status` shows.
            QueueOp::Queues { .. } | QueueOp::Depth { .. } => {}
            QueueOp::Push { queue, items } => {
                if *queue != own_queue {
                    return Err(denied(format!(
                        "application {app} may only publish into {own_queue}, not {queue}"
                    )));
                }
                if let Some(l) = items.iter().find(|l| l.owner != app) {
                    return Err(denied(format!(
                        "label {} claims application {} but this session is application {app}",
                        l.id, l.owner
                    )));
                }
            }
            QueueOp::Pull { queue, .. } | QueueOp::Ack { queue, .. } if *queue != own_queue => {
                return Err(denied(format!(
                    "queue {queue} belongs to another application"
                )));
            }
            _ => {}
        },
        Request::Tasks(op) if !matches!(op, QueueOp::Depth { .. } | QueueOp::Queues { .. }) => {
            return Err(denied("worker queues are reserved to LABIOS itself"));
        }
        Request::Put { key, .. } if !own_key(app, key, true) => {
            return Err(denied(format!(
                "warehouse key {key} belongs to another application"
            )));
        }
        Request::Get { key } | Request::Take { key } | Request::Delete { key }
            if !own_key(app, key, false) =>
        {
            return Err(denied(format!(
                "warehouse key {key} belongs to another application"
            )));
        }
        Request::Keys { prefix } if !own_key(app, prefix, false) => {
            return Err(denied(format!(
                "application {app} may only list keys under a{app}/ or room/{app}/"
            )));
        }
        Request::PutFunction { app: owner, .. }
        | Request::Function { app: owner, .. }
        | Request::Functions(owner)
            if *owner != app =>
        {
            return Err(denied(format!(
                "the functions of application {owner} are private to it"
            )));
        }
        Request::Create { owner, path, .. } | Request::Symlink { owner, path, .. }
            if owner.app != app =>
        {
            return Err(denied(format!(
                "application {app} cannot create {path} for application {}",
                owner.app
            )));
        }
        Request::Create { path, .. } => {
            // Creating an existing path returns it; someone else's file is
            // not handed out that way.
            own_file(app, i.lookup(path).await?)?;
        }
        // A new name for a file is given by its owner only (as Linux's
        // protected_hardlinks).
        Request::Remove { path } | Request::Link { from: path, .. } => {
            own_file(app, i.lookup(path).await?)?
        }
        Request::Rename { from, to, .. } => {
            own_file(app, i.lookup(from).await?)?;
            own_file(app, i.lookup(to).await?)?;
        }
        // A file's attributes are readable by anyone, like its stat, and
        // changed only by its owner.
        Request::SetSize { file, .. }
        | Request::CommitExtent { file, .. }
        | Request::ReserveAppend { file, .. }
        | Request::SetXattr { file, .. }
        | Request::SetAttr { file, .. } => {
            own_file(app, i.file(*file).await?)?;
        }
        Request::Lock(r) | Request::LockConflict(r) => own_file(app, i.file(r.file).await?)?,
        Request::Hold { file, .. } => own_file(app, i.file(*file).await?)?,
        Request::SetStatus(_)
        | Request::PutWorker(_)
        | Request::RemoveWorker(_)
        | Request::AskStack(..)
        | Request::TakeStack(_) => {
            return Err(denied(
                "label statuses and workers are reserved to LABIOS itself and its administrator",
            ));
        }
        Request::Status(id) => own_labels(origins, app, std::slice::from_ref(id))?,
        Request::Wait { ids, .. } => own_labels(origins, app, ids)?,
        Request::WaitInline { ids, prefix, .. } => {
            own_labels(origins, app, ids)?;
            if !own_key(app, prefix, false) {
                return Err(denied(format!(
                    "warehouse keys under {prefix:?} belong to another application"
                )));
            }
        }
        Request::PutApp(record) => other_app(i.as_ref(), app, record.id).await?,
        _ => {}
    }
    // Other applications' secrets are never shown.
    let hide = |mut a: crate::AppRecord| {
        if a.id != app {
            a.secret = String::new();
        }
        a
    };
    Ok(match handle(s, request).await? {
        Reply::App(a) => Reply::App(a.map(hide)),
        Reply::Apps(all) => Reply::Apps(all.into_iter().map(hide).collect()),
        other => other,
    })
}
