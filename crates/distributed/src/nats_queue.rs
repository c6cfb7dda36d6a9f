//! Label queues on NATS JetStream (article 3.3.2b, 3.4, 3.5.4;
//! ARCHITECTURE.md "Deployments" 2).
//!
//! # Layout
//!
//! One JetStream **stream per kind of item** — `<stream>_label` for client
//! label queues (`labels.<app>`) and `<stream>_task` for worker queues
//! (`worker.<id>`) — whose subjects are `<stream lowercased>.<kind>.>`; a
//! queue named `q` is the subject `<stream lowercased>.<kind>.q`, and each
//! queue has **one durable pull consumer** (named after the queue) filtered
//! on exactly that subject.
//!
//! Why per kind and not per queue: queues come and go with applications and
//! workers; a stream is a heavyweight server object (its own store
//! directory, and its own Raft group in a cluster) while a consumer over a
//! subject is cheap. Per-subject limits of one stream still give every
//! queue its own bound, and keeping kinds apart means a decoder never sees
//! the other type and each kind can be tuned (bound, retention) alone.
//!
//! * Retention `WorkQueue`: an acknowledged message is deleted.
//! * Storage `File`: queued labels survive restarts of nats-server and of
//!   every client (dispatchers, workers).
//! * Bound: `push` checks the consumer's undelivered count (`num_pending`,
//!   which is also what [`LabelQueue::depth`] reports) and waits with a
//!   small backoff while the queue has no room, failing with
//!   `Error::Full("queue <name>")` after `push_timeout_ms`; pushes of one
//!   process to one queue are serialized so that this check is exact for
//!   them. Producers in other processes could race past it, so the stream
//!   also caps every subject at `2 * bound` stored messages (undelivered
//!   plus unacknowledged; the consumer's `max_ack_pending` is `bound`) with
//!   `DiscardNew` per subject: the server itself never lets a queue grow
//!   without bound.
//! * Sharing: several processes pulling the same queue use the same
//!   durable consumer, so each message goes to exactly one of them
//!   (queue-group semantics); one puller sees one producer's items in order.
//! * Redelivery: a delivery not acknowledged within `ack_wait_ms` (because
//!   its consumer died) is delivered again to whoever pulls the queue next.
//!   That is how a killed worker's labels are re-dispatched.
//! * Pulls never outlive their caller: a pull request whose batch exceeds
//!   the consumer's free `max_ack_pending` room is not ended by the server
//!   (nats-server 2.9 keeps a `no_wait` request open at that limit and
//!   fills it as acknowledgements free room), so a request without an
//!   expiry that the caller gave up on goes on taking messages into an
//!   inbox nobody reads, where they block the queue until `ack_wait`.
//!   Every request therefore asks for at most the room this process has
//!   left (`bound` minus its own unacknowledged deliveries of the queue)
//!   and carries an expiry, so the server always ends it.
//! * Nor do pulls wait on a request the server dropped: nats-server 2.9
//!   sometimes drops a request at its expiry without the 408 that ends it
//!   (about one in a hundred 2 ms requests beside a steady producer). A
//!   request not ended [`EXPIRY_GRACE`] after its expiry is settled by a
//!   round trip through the server: if the server answers, the request is
//!   over and the pull returns what came; if not, the server stopped
//!   answering and the pull fails as before.

use async_nats::jetstream::{
    self,
    consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer},
    stream::{DiscardPolicy, RetentionPolicy, StorageType},
};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use labios_label::{Codec, Error, Result};
use labios_store::{Delivery, LabelQueue};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How to reach NATS and how to shape the queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URL(s), comma separated (`nats://` or `tls://`).
    pub url: String,
    /// Prefix of the stream names (`<stream>_label`, `<stream>_task`); its
    /// lowercase form prefixes the subjects.
    pub stream: String,
    /// Maximum number of waiting (undelivered) items per queue.
    pub bound: usize,
    /// How long a push waits for room before failing with `Error::Full`.
    pub push_timeout_ms: u64,
    /// A delivery not acknowledged within this time is redelivered (to
    /// another consumer if its own died).
    pub ack_wait_ms: u64,
    /// Bound of every single server operation (connect, API request,
    /// publish acknowledgement), so that no call hangs during an outage.
    pub op_timeout_ms: u64,
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    /// CA certificate (PEM) to verify the server with.
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS; both or neither.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Refuse to talk to the server without TLS.
    pub tls_required: bool,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: "nats://127.0.0.1:4222".into(),
            stream: "LABIOS".into(),
            bound: 65536,
            push_timeout_ms: 60_000,
            ack_wait_ms: 30_000,
            op_timeout_ms: 5_000,
            user: None,
            password: None,
            token: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_required: false,
        }
    }
}

/// A delivery handed out by `pull` and not yet acknowledged.
struct Held {
    /// The delivery's ack subject (`$JS.ACK.<stream>.<consumer>...`).
    reply: async_nats::Subject,
    at: Instant,
    queue: Arc<str>,
}

/// Unacknowledged deliveries by token, and how many each queue has: they
/// count against the queue consumer's `max_ack_pending`, which is the room
/// left for the next pull request.
#[derive(Default)]
struct HeldSet {
    by_token: HashMap<u64, Held>,
    per_queue: HashMap<Arc<str>, usize>,
}

impl HeldSet {
    fn insert(&mut self, token: u64, held: Held) {
        *self.per_queue.entry(held.queue.clone()).or_default() += 1;
        self.by_token.insert(token, held);
    }

    fn remove(&mut self, token: u64) -> Option<Held> {
        let held = self.by_token.remove(&token)?;
        if let Some(n) = self.per_queue.get_mut(&*held.queue) {
            *n -= 1;
            if *n == 0 {
                self.per_queue.remove(&*held.queue);
            }
        }
        Some(held)
    }

    fn of(&self, queue: &str) -> usize {
        self.per_queue.get(queue).copied().unwrap_or(0)
    }
}

/// What this process knows about a queue's room: the undelivered count the
/// server reported at `at`, plus what this process pushed since, minus what
/// it pulled since. Pushes trust it for a short while instead of asking the
/// server before every batch.
#[derive(Default)]
struct Room {
    /// Upper estimate of the undelivered count and when the server last
    /// confirmed it.
    depth: usize,
    checked: Option<Instant>,
}

/// How long a push trusts its own room estimate before asking the server
/// again (so that producers in other processes are noticed).
const ROOM_TRUST: Duration = Duration::from_millis(50);
/// Shortest expiry of a pull request (a pull with no wait at all still
/// needs one, so that the server always ends the request).
const MIN_EXPIRES: Duration = Duration::from_millis(1);
/// Pause before asking again after a pull request ended early with nothing.
const RETRY_PAUSE: Duration = Duration::from_millis(5);
/// How long after its expiry a pull request's end may still arrive before
/// the server is asked whether it dropped the request (its expiry runs
/// from when it read the request, and a busy machine delays the answer).
const EXPIRY_GRACE: Duration = Duration::from_millis(50);

struct Inner {
    cfg: NatsConfig,
    client: async_nats::Client,
    stream_name: String,
    stream: jetstream::stream::Stream,
    /// `<stream lowercased>.<kind>`; a queue `q` is subject `<prefix>.q`.
    subject_prefix: String,
    op_timeout: Duration,
    consumers: Mutex<HashMap<String, PullConsumer>>,
    push_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Room>>>>,
    held: Mutex<HeldSet>,
    /// Signalled whenever deliveries are acknowledged or forgotten, for
    /// pulls waiting for room.
    released: tokio::sync::Notify,
    last_prune: Mutex<Instant>,
    next_token: AtomicU64,
    malformed: AtomicU64,
}

/// `LabelQueue<T>` on NATS JetStream for any [`Codec`] item: one type serves
/// the client label queues (`JetStreamQueue<Label>`) and the worker queues
/// (`JetStreamQueue<Task>`). Cheap to clone (clones share the connection).
pub struct JetStreamQueue<T> {
    inner: Arc<Inner>,
    _item: PhantomData<fn() -> T>,
}

impl<T> Clone for JetStreamQueue<T> {
    fn clone(&self) -> Self {
        JetStreamQueue {
            inner: self.inner.clone(),
            _item: PhantomData,
        }
    }
}

fn unavailable(url: &str, what: impl std::fmt::Display) -> Error {
    Error::Unavailable(format!("NATS at {url}: {what}"))
}

/// Lowercase last path segment of the item type: `label`, `task`.
fn default_kind<T>() -> String {
    let name = std::any::type_name::<T>();
    let name = name.split('<').next().unwrap_or(name);
    let last = name.rsplit("::").next().unwrap_or(name);
    last.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect::<String>()
        .to_ascii_lowercase()
}

fn valid_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Queue names become subject tokens: non-empty dot-separated tokens
/// without whitespace or wildcards.
fn check_queue_name(queue: &str) -> Result<()> {
    let ok = !queue.is_empty()
        && queue.split('.').all(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| !c.is_whitespace() && !c.is_control() && c != '*' && c != '>')
        });
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "queue name {queue:?} is not usable as a NATS subject \
             (needs non-empty dot-separated tokens without spaces, '*' or '>')"
        )))
    }
}

/// Durable consumer name of a queue: names may not contain `.`, `*`, `>`
/// or whitespace, so everything but `[A-Za-z0-9-]` is escaped as `_xx`.
fn consumer_name(queue: &str) -> String {
    let mut out = String::with_capacity(queue.len() + 8);
    for b in queue.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

fn is_per_subject_limit(e: &impl std::fmt::Display) -> bool {
    let s = e.to_string();
    s.contains("per subject") || s.contains("maximum messages")
}

impl<T: Codec> JetStreamQueue<T> {
    /// Connects and creates (or adopts) the stream of this item kind
    /// (`label` for `Label`, `task` for `Task`).
    pub async fn connect(cfg: NatsConfig) -> Result<Self> {
        Self::connect_kind(cfg, &default_kind::<T>()).await
    }

    /// Like [`connect`](Self::connect) with an explicit kind (stream
    /// `<stream>_<kind>`).
    pub async fn connect_kind(cfg: NatsConfig, kind: &str) -> Result<Self> {
        if !valid_name_part(&cfg.stream) || !valid_name_part(kind) {
            return Err(Error::InvalidArgument(format!(
                "NATS stream {:?} and kind {kind:?} must be non-empty [A-Za-z0-9_-]",
                cfg.stream
            )));
        }
        if cfg.bound == 0 {
            return Err(Error::InvalidArgument(
                "NATS queue bound must be >= 1".into(),
            ));
        }
        let op_timeout = Duration::from_millis(cfg.op_timeout_ms.max(1));
        let url = cfg.url.clone();
        let mut opts = async_nats::ConnectOptions::new()
            .name("labios")
            .connection_timeout(op_timeout)
            .request_timeout(Some(op_timeout))
            .event_callback(|event| async move {
                tracing::info!("NATS connection event: {event}");
            });
        match (&cfg.user, &cfg.password) {
            (Some(u), Some(p)) => opts = opts.user_and_password(u.clone(), p.clone()),
            (None, None) => {}
            _ => {
                return Err(Error::InvalidArgument(
                    "NATS user and password go together".into(),
                ))
            }
        }
        if let Some(t) = &cfg.token {
            opts = opts.token(t.clone());
        }
        if let Some(ca) = &cfg.tls_ca {
            opts = opts.add_root_certificates(ca.clone());
        }
        match (&cfg.tls_cert, &cfg.tls_key) {
            (Some(c), Some(k)) => opts = opts.add_client_certificate(c.clone(), k.clone()),
            (None, None) => {}
            _ => {
                return Err(Error::InvalidArgument(
                    "NATS tls_cert and tls_key go together".into(),
                ))
            }
        }
        if cfg.tls_required {
            opts = opts.require_tls(true);
        }
        let client = match tokio::time::timeout(op_timeout * 2, opts.connect(url.as_str())).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return Err(Error::Unavailable(format!(
                    "cannot reach NATS at {url}: {e}"
                )))
            }
            Err(_) => {
                return Err(Error::Unavailable(format!(
                    "cannot reach NATS at {url}: no answer within {op_timeout:?}"
                )))
            }
        };
        let js = jetstream::ContextBuilder::new()
            .timeout(op_timeout)
            .build(client.clone());

        let stream_name = format!("{}_{kind}", cfg.stream);
        let subject_prefix = format!("{}.{kind}", cfg.stream.to_ascii_lowercase());
        let want = jetstream::stream::Config {
            name: stream_name.clone(),
            description: Some(format!("LABIOS {kind} queues")),
            subjects: vec![format!("{subject_prefix}.>")],
            retention: RetentionPolicy::WorkQueue,
            storage: StorageType::File,
            discard: DiscardPolicy::New,
            discard_new_per_subject: true,
            max_messages_per_subject: i64::try_from(cfg.bound.saturating_mul(2))
                .unwrap_or(i64::MAX),
            ..Default::default()
        };
        // Processes starting together race to create the stream; the losers
        // get an error from the server and simply find it on a retry.
        let mut attempt = 0;
        let mut stream = loop {
            match js.get_or_create_stream(want.clone()).await {
                Ok(stream) => break stream,
                Err(_) if attempt < 5 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
                }
                Err(e) => {
                    return Err(unavailable(
                        &url,
                        format!(
                            "cannot create JetStream stream {stream_name} \
                             (is nats-server running with -js?): {e}"
                        ),
                    ))
                }
            }
        };
        let have = stream
            .info()
            .await
            .map_err(|e| unavailable(&url, e))?
            .config
            .clone();
        if have.max_messages_per_subject != want.max_messages_per_subject
            || !have.discard_new_per_subject
            || have.discard != DiscardPolicy::New
        {
            let mut update = have.clone();
            update.max_messages_per_subject = want.max_messages_per_subject;
            update.discard = DiscardPolicy::New;
            update.discard_new_per_subject = true;
            js.update_stream(update).await.map_err(|e| {
                unavailable(&url, format!("cannot update stream {stream_name}: {e}"))
            })?;
        }
        Ok(JetStreamQueue {
            inner: Arc::new(Inner {
                cfg,
                client,
                stream_name,
                stream,
                subject_prefix,
                op_timeout,
                consumers: Mutex::new(HashMap::new()),
                push_locks: Mutex::new(HashMap::new()),
                held: Mutex::new(HeldSet::default()),
                released: tokio::sync::Notify::new(),
                last_prune: Mutex::new(Instant::now()),
                next_token: AtomicU64::new(1),
                malformed: AtomicU64::new(0),
            }),
            _item: PhantomData,
        })
    }
}

impl<T> JetStreamQueue<T> {
    /// The NATS subject that holds queue `queue`.
    pub fn subject(&self, queue: &str) -> String {
        format!("{}.{queue}", self.inner.subject_prefix)
    }

    /// The JetStream stream holding this kind of queue.
    pub fn stream_name(&self) -> &str {
        &self.inner.stream_name
    }

    /// Messages that did not decode (terminated and skipped) so far.
    pub fn malformed(&self) -> u64 {
        self.inner.malformed.load(Ordering::Relaxed)
    }

    /// Deliveries pulled but not yet acknowledged by this instance.
    pub fn unacked(&self) -> usize {
        self.inner.held.lock().by_token.len()
    }

    fn url(&self) -> &str {
        &self.inner.cfg.url
    }

    fn unavailable(&self, what: impl std::fmt::Display) -> Error {
        unavailable(self.url(), what)
    }

    async fn timed<F: std::future::Future>(
        &self,
        what: &str,
        d: Duration,
        f: F,
    ) -> Result<F::Output> {
        tokio::time::timeout(d, f)
            .await
            .map_err(|_| self.unavailable(format!("{what}: no answer within {d:?}")))
    }

    /// The durable pull consumer of `queue`, created on first use.
    async fn consumer(&self, queue: &str) -> Result<PullConsumer> {
        if let Some(c) = self.inner.consumers.lock().get(queue) {
            return Ok(c.clone());
        }
        let name = consumer_name(queue);
        let config = pull::Config {
            durable_name: Some(name.clone()),
            description: Some(format!("LABIOS queue {queue}")),
            filter_subject: self.subject(queue),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_millis(self.inner.cfg.ack_wait_ms.max(1)),
            max_ack_pending: i64::try_from(self.inner.cfg.bound).unwrap_or(i64::MAX),
            ..Default::default()
        };
        let op = self.inner.op_timeout;
        let c: PullConsumer = self
            .timed(
                "creating consumer",
                op * 2,
                self.inner.stream.get_or_create_consumer(&name, config),
            )
            .await?
            .map_err(|e| self.unavailable(format!("cannot create consumer for {queue}: {e}")))?;
        self.inner
            .consumers
            .lock()
            .insert(queue.to_string(), c.clone());
        Ok(c)
    }

    /// Undelivered messages of a queue (0 if it does not exist).
    async fn pending(&self, queue: &str) -> Result<usize> {
        let name = consumer_name(queue);
        let op = self.inner.op_timeout;
        match self
            .timed(
                "consumer info",
                op * 2,
                self.inner.stream.consumer_info(&name),
            )
            .await?
        {
            Ok(info) => Ok(usize::try_from(info.num_pending).unwrap_or(usize::MAX)),
            Err(e)
                if e.kind() == async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound =>
            {
                Ok(0)
            }
            Err(e) => Err(self.unavailable(format!("depth of {queue}: {e}"))),
        }
    }

    /// Publishes `payloads` (in order, pipelined, each with its own reply
    /// subject so that the server's acknowledgement says which one it
    /// stored) and returns those the server refused because the subject hit
    /// its hard cap, in order. Replies are matched without the per-message
    /// bookkeeping of `jetstream::Context::publish` (a oneshot, a timer and
    /// a JSON parse each), which dominates the cost of small labels.
    async fn publish(&self, queue: &str, payloads: Vec<Bytes>) -> Result<Vec<Bytes>> {
        let subject = async_nats::Subject::from(self.subject(queue));
        let client = &self.inner.client;
        let n = payloads.len();
        let inbox = client.new_inbox();
        let work = async {
            let mut replies = client
                .subscribe(format!("{inbox}.*"))
                .await
                .map_err(|e| self.unavailable(format!("publish to {queue}: {e}")))?;
            for (i, p) in payloads.iter().enumerate() {
                client
                    .publish_with_reply(subject.clone(), format!("{inbox}.{i}"), p.clone())
                    .await
                    .map_err(|e| self.unavailable(format!("publish to {queue}: {e}")))?;
            }
            let mut refused = vec![false; n];
            let mut seen = 0;
            while seen < n {
                let Some(m) = replies.next().await else {
                    return Err(self.unavailable(format!("publish to {queue}: connection closed")));
                };
                if m.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                    return Err(self.unavailable(format!(
                        "publish to {queue}: no JetStream stream takes {subject}"
                    )));
                }
                let Some(i) = m
                    .subject
                    .rsplit('.')
                    .next()
                    .and_then(|i| i.parse::<usize>().ok())
                    .filter(|i| *i < n)
                else {
                    continue;
                };
                seen += 1;
                // Success is `{"stream":..,"seq":..}`; failures carry an
                // "error" object with a description.
                if m.payload.windows(7).any(|w| w == b"\"error\"") {
                    let text = String::from_utf8_lossy(&m.payload);
                    if is_per_subject_limit(&text) {
                        refused[i] = true;
                    } else {
                        return Err(self.unavailable(format!("publish to {queue} refused: {text}")));
                    }
                }
            }
            Ok(refused)
        };
        let refused = self
            .timed("publish acknowledgements", self.inner.op_timeout, work)
            .await??;
        Ok(payloads
            .into_iter()
            .zip(refused)
            .filter_map(|(p, r)| r.then_some(p))
            .collect())
    }

    fn push_lock(&self, queue: &str) -> Arc<tokio::sync::Mutex<Room>> {
        self.inner
            .push_locks
            .lock()
            .entry(queue.to_string())
            .or_default()
            .clone()
    }

    /// One pull request to the queue's durable consumer for at most `max`
    /// messages, `no_wait` with `expires`: the server hands over what is
    /// there and ends the request at once, or, on an empty queue, waits up
    /// to `wait` for the first message. Either way the server ends it by
    /// the expiry, so no request is left behind to take messages later.
    /// A request the server declines (409) returns what came before.
    async fn fetch_once(
        &self,
        queue: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<async_nats::Message>> {
        let client = &self.inner.client;
        let expires = wait.max(MIN_EXPIRES);
        let request = format!(
            "{{\"batch\":{max},\"no_wait\":true,\"expires\":{}}}",
            expires.as_nanos()
        );
        let api = format!(
            "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
            self.inner.stream_name,
            consumer_name(queue)
        );
        // The server ends the request by its expiry; this deadline only
        // catches a server that stopped answering.
        let limit = expires + self.inner.op_timeout;
        let deadline = Instant::now() + limit;
        let mut ended_by = Instant::now() + expires + EXPIRY_GRACE;
        let mut asked = false;
        let no_answer =
            || self.unavailable(format!("pull from {queue}: no answer within {limit:?}"));
        let start = async {
            let inbox = client.new_inbox();
            let sub = client.subscribe(inbox.clone()).await?;
            client
                .publish_with_reply(api, inbox, Bytes::from(request))
                .await?;
            Ok::<_, async_nats::Error>(sub)
        };
        let mut sub = tokio::time::timeout_at(deadline, start)
            .await
            .map_err(|_| no_answer())?
            .map_err(|e| self.unavailable(format!("pull from {queue}: {e}")))?;
        let mut out = Vec::with_capacity(max.min(1024));
        while out.len() < max {
            let m = match tokio::time::timeout_at(ended_by.min(deadline), sub.next()).await {
                Ok(Some(m)) => m,
                Ok(None) => break,
                // Not ended by its expiry: dropped, or the server is slow or
                // gone. A round trip tells which; if the server answers, the
                // request gets one more grace to end.
                Err(_) if !asked && self.round_trip(deadline).await => {
                    asked = true;
                    ended_by = Instant::now() + EXPIRY_GRACE;
                    continue;
                }
                Err(_) if out.is_empty() && !asked => return Err(no_answer()),
                // What was delivered is handed over: its consumer holds it
                // as unacknowledged until the caller acks.
                Err(_) => break,
            };
            match m.status {
                None | Some(async_nats::StatusCode::OK) => out.push(m),
                Some(async_nats::StatusCode::IDLE_HEARTBEAT) => {}
                Some(async_nats::StatusCode::NOT_FOUND) | Some(async_nats::StatusCode::TIMEOUT) => {
                    break
                }
                Some(async_nats::StatusCode::NO_RESPONDERS) => {
                    // The consumer may have been deleted behind our
                    // back: re-create it on the next call.
                    self.inner.consumers.lock().remove(queue);
                    return Err(
                        self.unavailable(format!("pull from {queue}: JetStream does not answer"))
                    );
                }
                Some(status) => {
                    tracing::debug!(queue, "pull declined: {status} {:?}", m.description);
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Whether the server relays a message back to this connection before
    /// `deadline`: the server reads a connection's messages in order, so
    /// once it has relayed this one it has read every request sent before.
    async fn round_trip(&self, deadline: Instant) -> bool {
        let client = &self.inner.client;
        let echo = async {
            let inbox = client.new_inbox();
            let mut sub = client.subscribe(inbox.clone()).await?;
            client.publish(inbox, Bytes::new()).await?;
            Ok::<_, async_nats::Error>(sub.next().await.is_some())
        };
        matches!(tokio::time::timeout_at(deadline, echo).await, Ok(Ok(true)))
    }

    /// Forgets deliveries older than twice `ack_wait` (at most once per
    /// `ack_wait`): they have been redelivered long ago, and forgetting them
    /// keeps the map bounded and gives their room back if a caller never acks.
    fn prune_held(&self) {
        let ack_wait = Duration::from_millis(self.inner.cfg.ack_wait_ms.max(1));
        let now = Instant::now();
        {
            let mut last = self.inner.last_prune.lock();
            if now.duration_since(*last) < ack_wait {
                return;
            }
            *last = now;
        }
        {
            let mut held = self.inner.held.lock();
            let old: Vec<u64> = held
                .by_token
                .iter()
                .filter(|(_, h)| now.duration_since(h.at) >= ack_wait * 2)
                .map(|(t, _)| *t)
                .collect();
            for t in old {
                held.remove(t);
            }
        }
        self.inner.released.notify_waiters();
    }
}

#[async_trait]
impl<T: Codec> LabelQueue<T> for JetStreamQueue<T> {
    async fn push(&self, queue: &str, items: Vec<T>) -> Result<()> {
        check_queue_name(queue)?;
        if items.is_empty() {
            return Ok(());
        }
        let total = items.len();
        let bound = self.inner.cfg.bound;
        let all_or_nothing = total <= bound;
        let mut left: std::collections::VecDeque<Bytes> =
            items.iter().map(|i| Bytes::from(i.to_bytes())).collect();
        drop(items);
        self.consumer(queue).await?;
        let deadline = Instant::now() + Duration::from_millis(self.inner.cfg.push_timeout_ms);
        let lock = self.push_lock(queue);
        let mut room = match tokio::time::timeout_at(deadline, lock.lock()).await {
            Ok(g) => g,
            Err(_) => return Err(Error::Full(format!("queue {queue}"))),
        };
        let mut backoff = Duration::from_millis(1);
        loop {
            let need = if all_or_nothing { left.len() } else { 1 };
            let trusted = room.checked.is_some_and(|t| t.elapsed() < ROOM_TRUST);
            if !trusted || bound.saturating_sub(room.depth) < need {
                room.depth = self.pending(queue).await?;
                room.checked = Some(Instant::now());
            }
            let free = bound.saturating_sub(room.depth);
            let take = if all_or_nothing {
                if free >= left.len() {
                    left.len()
                } else {
                    0
                }
            } else {
                free.min(left.len())
            };
            if take > 0 {
                let batch: Vec<Bytes> = left.drain(..take).collect();
                let refused = self.publish(queue, batch).await?;
                room.depth += take - refused.len();
                let capped = !refused.is_empty();
                if capped {
                    // Refused by the server's hard cap (producers elsewhere
                    // filled the queue): retry those, keeping their order.
                    room.checked = None;
                    for p in refused.into_iter().rev() {
                        left.push_front(p);
                    }
                }
                if left.is_empty() {
                    return Ok(());
                }
                if !capped {
                    backoff = Duration::from_millis(1);
                    continue;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                let accepted = total - left.len();
                return Err(if accepted == 0 {
                    Error::Full(format!("queue {queue}"))
                } else {
                    Error::Full(format!(
                        "queue {queue} (only {accepted} of {total} items were accepted)"
                    ))
                });
            }
            tokio::time::sleep(backoff.min(deadline - now)).await;
            backoff = (backoff * 2).min(Duration::from_millis(25));
        }
    }

    async fn pull(&self, queue: &str, max: usize, wait: Duration) -> Result<Vec<Delivery<T>>> {
        check_queue_name(queue)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        self.prune_held();
        self.consumer(queue).await?;
        let name: Arc<str> = queue.into();
        let deadline = Instant::now() + wait;
        loop {
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let held = self.inner.held.lock().of(queue);
            let room = self.inner.cfg.bound.saturating_sub(held).min(max);
            if room == 0 {
                // The consumer's whole `max_ack_pending` is unacknowledged
                // here: a request now could only wait at the server.
                if tokio::time::timeout_at(deadline, released).await.is_err() {
                    return Ok(Vec::new());
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let msgs = self.fetch_once(queue, room, left).await?;
            let now = Instant::now();
            let mut out = Vec::with_capacity(msgs.len());
            let mut bad = Vec::new();
            {
                let mut held = self.inner.held.lock();
                for msg in msgs {
                    let Some(reply) = msg.reply else {
                        tracing::warn!(queue, "ignoring a queue message without ack subject");
                        continue;
                    };
                    match T::from_bytes(&msg.payload) {
                        Ok(item) => {
                            let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
                            let queue = name.clone();
                            held.insert(
                                token,
                                Held {
                                    reply,
                                    at: now,
                                    queue,
                                },
                            );
                            out.push(Delivery { item, token });
                        }
                        Err(e) => bad.push((reply, msg.payload.len(), e)),
                    }
                }
            }
            for (reply, len, e) in bad {
                // Terminated: the server never redelivers it, so one bad
                // message cannot poison the queue.
                self.inner.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    queue,
                    "dropping a malformed queue message ({len} bytes): {e}"
                );
                if let Err(e) = self
                    .inner
                    .client
                    .publish(reply, Bytes::from_static(b"+TERM"))
                    .await
                {
                    tracing::warn!(queue, "cannot terminate a malformed message: {e}");
                }
            }
            if !out.is_empty() {
                return Ok(out);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Vec::new());
            }
            // Ended early with nothing usable: declined, another puller's
            // request waits ahead of ours (408 "Requests Pending"), or only
            // malformed messages came. Ask again shortly.
            tokio::time::sleep(left.min(RETRY_PAUSE)).await;
        }
    }

    /// Plain (fire-and-forget) acks followed by one flush: the acks are on
    /// the wire when the call returns, and the server reads them before any
    /// later request of this connection (a pull asking for the room they
    /// free), at the cost of one write per call instead of one round trip
    /// per message (double acks). An ack lost to a connection failure only
    /// means the item is redelivered after `ack_wait` (at-least-once
    /// delivery).
    async fn ack(&self, queue: &str, tokens: &[u64]) -> Result<()> {
        let replies: Vec<async_nats::Subject> = {
            let mut held = self.inner.held.lock();
            tokens
                .iter()
                .filter_map(|t| held.remove(*t).map(|h| h.reply))
                .collect()
        };
        if replies.len() < tokens.len() {
            tracing::debug!(
                queue,
                "{} unknown or already acknowledged tokens",
                tokens.len() - replies.len()
            );
        }
        if replies.is_empty() {
            return Ok(());
        }
        let op = self.inner.op_timeout;
        let send = async {
            for r in replies {
                self.inner
                    .client
                    .publish(r, Bytes::from_static(b"+ACK"))
                    .await?;
            }
            self.inner.client.flush().await?;
            Ok::<_, async_nats::Error>(())
        };
        let sent = self.timed("ack", op, send).await;
        // After the flush, so that the server reads the acks before the
        // request of a waiting pull that asks for the room they free.
        self.inner.released.notify_waiters();
        sent?.map_err(|e| self.unavailable(format!("ack on {queue}: {e}")))
    }

    async fn depth(&self, queue: &str) -> Result<usize> {
        check_queue_name(queue)?;
        self.pending(queue).await
    }

    async fn queues(&self, prefix: &str) -> Result<Vec<String>> {
        let subject_prefix = format!("{}.", self.inner.subject_prefix);
        let list = async {
            let mut names = Vec::new();
            let mut consumers = self.inner.stream.consumers();
            while let Some(info) = consumers.next().await {
                let info = info.map_err(|e| self.unavailable(format!("listing queues: {e}")))?;
                if let Some(q) = info.config.filter_subject.strip_prefix(&subject_prefix) {
                    if q.starts_with(prefix) {
                        names.push(q.to_string());
                    }
                }
            }
            Ok::<_, Error>(names)
        };
        let mut names = self
            .timed("listing queues", self.inner.op_timeout * 4, list)
            .await??;
        names.sort();
        names.dedup();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(default_kind::<labios_label::Label>(), "label");
        assert_eq!(default_kind::<labios_label::Task>(), "task");
        assert_eq!(consumer_name("labels.42"), "labels_2e42");
        assert_eq!(consumer_name("a_b-c"), "a_5fb-c");
        assert!(check_queue_name("worker.3").is_ok());
        for bad in ["", "a..b", ".a", "a.", "a b", "a.*", "a.>"] {
            assert!(check_queue_name(bad).is_err(), "{bad:?}");
        }
    }
}
