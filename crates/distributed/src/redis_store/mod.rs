//! Warehouse and inventory on Redis (ARCHITECTURE.md "Deployments" 2).
//!
//! Redis is the distributed hashmap of article 3.3.1b-c: values in transit
//! live in a [`RedisWarehouse`], metadata in a [`RedisInventory`]. Both are
//! plain clients: any number of processes on any hosts share one deployment
//! by pointing at the same servers and `namespace`.
//!
//! # Key layout (`ns` = [`RedisConfig::namespace`])
//!
//! Warehouse, on every server (or spread over a Cluster by key slot):
//! - `ns:w:<key>`: the value, a Redis string.
//! - `ns:wusage`: bytes held on that server (the bound is per server).
//!
//! Inventory, all under the hash tag `{ns}` so that one Lua script may touch
//! any of them (in a Cluster they live on the node owning that slot):
//! - `{ns}:file:<id>`: hash `v`(=1, format) `id path kind`(f|d) `size`
//!   (16 hex digits) `mode owner ctime mtime atime` (decimal).
//! - `{ns}:path:<path>` -> file id; `{ns}:paths`: sorted set of every path
//!   (score 0, lexicographic: `list(prefix)` is one `ZRANGEBYLEX`).
//! - `{ns}:x:<id>`: the file's extents, a sorted set (score 0) of members
//!   `start(16 hex) end(16 hex) label(32 hex) worker(8 hex)`; they never
//!   overlap, so lexicographic order is offset order.
//! - `{ns}:xattr:<id>`: the file's extended attributes, a hash name ->
//!   value (absent when it has none); deleted with the file record by the
//!   scripts that remove or replace a file.
//! - `{ns}:ctr`: hash of counters (`HINCRBY`); `{ns}:workers`, `{ns}:apps`:
//!   hashes id -> codec-encoded record.
//! - `{ns}:label:<id hex>`: codec-encoded `LabelStatus` with a TTL
//!   (`reclaim_after_ms` once final, a day before), `{ns}:labels`: sorted
//!   set id -> expiry (ms, server clock) that `label_count` trims and counts.
//! - channel `{ns}:done`: a label id, published when its status turns final.
//! - channel `{ns}:watch`: never published on; every connection's watcher
//!   subscribes to it (see `watch_server`).
//! - Open files ([`Inventory::hold`]): `{ns}:holds:<id>`, the set of
//!   sessions holding file `id` open; `{ns}:hlease:<session>`, a key that
//!   lives `hold_lease_ms` past its process's last renewal (a session whose
//!   key is gone is dead, and leaves the holds sets the scripts meet it
//!   in); `{ns}:holding:<session>`, its files; `{ns}:nameless`, the files
//!   kept open past their last name (record `nlink` 0, no path names them),
//!   which [`Inventory::drop_unheld`] drops once no live session holds them.
//!
//! # Atomicity
//! Every inventory change is one Lua script (see `lua.rs`), so newest-label-
//! wins merges, renames and removes are atomic across processes. A warehouse
//! put of a new key on one server moves the byte counter and stores the
//! value in one MULTI/EXEC transaction (plain commands: a script handed the
//! value costs Redis far more), and takes both back if the counter went over
//! the bound, so only puts in flight can overshoot it for a moment;
//! replacing a key is one script that checks and moves the counter with the
//! value. In Cluster mode the value and the counter are in different slots:
//! a put first reserves its full length in the counter (atomic, so the bound
//! always holds), then stores the value and releases the length it
//! replaced; replacing a value therefore needs room for both for a moment.
//!
//! # Node-local placement (article 3.5.4)
//! With several independent servers in `urls` and `node_local = true`, the
//! server of a key is chosen by the key alone, so every process finds it:
//! a key `n<i>/...` lives on server `i` (the node hint); any other key on
//! server `fnv1a64(key) % urls.len()`. A producer makes node-local keys with
//! [`RedisWarehouse::local_key`], which prefixes its `home` server (config
//! `home`, or [`RedisWarehouse::with_home`]); consumers on other nodes read
//! them with the same key. With `node_local = false` every key is hashed.
//!
//! # Durability
//! Redis's own: what survives a crash is what its persistence kept. Run
//! servers with `--appendonly yes --appendfsync everysec` (as
//! `scripts/services.sh start-redis` does): a process crash loses nothing
//! acknowledged, a power cut at most about one second. [`Inventory::sync`]
//! therefore only checks that the server answers.
//!
//! # Failures
//! Every operation is bounded by `op_timeout_ms`: an unreachable or
//! restarting server gives `Error::Unavailable("cannot reach Redis at
//! ..."`), never a hang. A command the server surely did not run (refused
//! connection, `LOADING`) is sent again every few tens of milliseconds
//! until then, so a restart shorter than `op_timeout_ms` is waited through
//! and answered within moments of the server's return. A command cut while
//! in flight may have run: it is sent again only if it changes nothing
//! (see `unsent`). A refused password gives `Error::PermissionDenied`. A stored value that
//! does not decode is `Error::Malformed` naming its key.

mod locks;
mod lua;

pub use locks::{RedisLocks, LEASE as LOCK_LEASE};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use labios_label::id::now_nanos;
use labios_label::{
    decode, encode, normalize_path, AppId, Error, FileId, LabelId, LabelState, LabelStatus, Result,
    WorkerId, WorkerStatus,
};
use labios_store::inventory::{
    check_link_target, check_xattr, clip_to, read_len, LINK_MAX, XATTR_TOTAL_MAX,
};
use labios_store::warehouse::staged_bound;
use labios_store::{
    AppRecord, Extent, FileKind, FileMeta, Inventory, Named, Owner, Presence, ReadPlan, RenameHow,
    SetAttr, SetTime, Warehouse, XattrCond,
};
use parking_lot::Mutex;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, RedisError, RedisFuture, Script, Value};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How the distributed deployment reaches Redis (`[redis]` in the config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// Servers (`redis://host:port`, `rediss://` for TLS). Several
    /// independent servers spread the warehouse (see `node_local`); the
    /// inventory uses the first. With `cluster`, these are seed nodes.
    pub urls: Vec<String>,
    /// The servers form a Redis Cluster.
    pub cluster: bool,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Connect with TLS (turns `redis://` into `rediss://`).
    pub tls: bool,
    /// PEM file of the CA that signed the servers' certificates.
    pub tls_ca: Option<String>,
    /// Bytes the warehouse may hold on each server.
    pub max_bytes: u64,
    /// How long a warehouse put waits for room before failing `Full`.
    pub put_timeout_ms: u64,
    /// How long a final label status nobody waited for is kept.
    pub reclaim_after_ms: u64,
    /// Upper bound of any single Redis operation (connect included).
    pub op_timeout_ms: u64,
    /// Keys with a node hint `n<i>/` live on server `i` (article 3.5.4).
    pub node_local: bool,
    /// Index in `urls` of this process's own node (for `local_key`).
    pub home: Option<usize>,
    /// Prefix of every key, so deployments can share servers.
    pub namespace: String,
    /// How long a client's holds of open files (a file removed while open
    /// lives until its last close) outlive the client: its process renews
    /// them every third of this while it runs; a killed one's lapse.
    pub hold_lease_ms: u64,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            urls: vec!["redis://127.0.0.1:6379".into()],
            cluster: false,
            username: None,
            password: None,
            tls: false,
            tls_ca: None,
            max_bytes: 1 << 30,
            put_timeout_ms: 30_000,
            reclaim_after_ms: 60_000,
            hold_lease_ms: 10_000,
            op_timeout_ms: 5_000,
            node_local: false,
            home: None,
            namespace: "labios".into(),
        }
    }
}

/// Non-final label statuses expire after a day: a label whose client and
/// worker both vanished must not leak forever.
const PENDING_TTL_MS: u64 = 24 * 3600 * 1000;

// ---------------------------------------------------------------------------
// Connections

/// One server (through a reconnecting manager) or a whole Cluster.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// A connection with the address it names in errors and its time bound.
#[derive(Clone)]
struct Link {
    conn: Conn,
    /// `redis://host:port` without credentials.
    addr: String,
    timeout: Duration,
    /// When the server last answered on this link.
    heard: Arc<Heard>,
}

/// The time of a link's last answer, in milliseconds since `epoch`, and
/// the connections to its server seen closing: what tells whether a
/// command that must not be sent twice may go on the link as it is.
struct Heard {
    epoch: Instant,
    at: AtomicU64,
    /// Whether the watching connection ([`watch_server`]) is up: while it
    /// is not, a restart could pass unseen, and every change PINGs first.
    /// Always true on a link nothing watches (the cluster client's).
    watching: AtomicBool,
    /// Closings and openings of the watching connection: a restart
    /// of the server closes it with the link's own.
    lost: AtomicU64,
    /// `lost` as of the last PING answered after it.
    checked: AtomicU64,
    /// The watching task, which ends with the link.
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Heard {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.lock().take() {
            w.abort();
        }
    }
}

impl Heard {
    fn new() -> Arc<Heard> {
        Arc::new(Heard {
            epoch: Instant::now(),
            at: AtomicU64::new(0),
            watching: AtomicBool::new(true),
            lost: AtomicU64::new(0),
            checked: AtomicU64::new(0),
            watcher: Mutex::new(None),
        })
    }

    fn now(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.at.fetch_max(ms, Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        let at = Duration::from_millis(self.at.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(at)
    }
}

/// A link quiet for this long is asked a PING before a command that
/// must not be sent twice: the server may have restarted since, and the
/// connection's first command then fails with a broken pipe that does not
/// say whether it was sent (see [`unsent`]). A server's link also PINGs
/// first once its watching connection closed ([`watch_server`]), however
/// recently it was heard: a restart shorter than this left such commands
/// to the dead connection (CI, `cluster_faults`: a read label failed on
/// the put of its result 0.5 s after Redis was back). This bound still
/// covers what a watcher cannot see (a connection gone silent without
/// closing) and the cluster client, which has no watcher.
const QUIET: Duration = Duration::from_millis(500);

/// The longest pause between two tries of a watcher to reach a server
/// that is away: it counted the loss already, so it is in no hurry.
const WATCH_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Keeps a connection of its own to the link's server and counts its
/// closings in `heard.lost`: a restart of the server closes it as it
/// closes the link's connection, whose manager (over RESP2) would only
/// find out with the next command, by a broken pipe that may not be
/// resent. Between a closing and the next opening `heard.watching` is
/// false, and an opening counts too: a restart while nothing watched
/// cannot pass unseen. The connection subscribes to `channel`, on which
/// nobody publishes, so that the server's idle `timeout` spares it;
/// refused the subscription (an ACL without the channel), it watches
/// unsubscribed. After a closing it connects again at once, then at pauses
/// growing from [`RESEND_PAUSE_MAX`] to [`WATCH_PAUSE_MAX`] while the
/// server is away (or closes the connection as soon as it is made).
fn watch_server(client: redis::Client, channel: String, heard: &Arc<Heard>, timeout: Duration) {
    heard.watching.store(false, Ordering::Release);
    let weak = Arc::downgrade(heard);
    let task = tokio::spawn(async move {
        let mut pause = Duration::ZERO;
        loop {
            match tokio::time::timeout(timeout, client.get_async_pubsub()).await {
                Ok(Ok(mut ps)) => {
                    if let Err(e) = ps.subscribe(&channel).await {
                        tracing::debug!("watching a Redis server unsubscribed: {e}");
                    }
                    let Some(heard) = weak.upgrade() else { return };
                    heard.lost.fetch_add(1, Ordering::AcqRel);
                    heard.watching.store(true, Ordering::Release);
                    drop(heard);
                    let opened = tokio::time::Instant::now();
                    let mut closed = ps.on_message();
                    while closed.next().await.is_some() {}
                    // Again at once after a watch that lasted; a connection
                    // closed as soon as made (a server at `maxclients`)
                    // backs off as a refused one does.
                    pause = if opened.elapsed() >= WATCH_PAUSE_MAX {
                        Duration::ZERO
                    } else {
                        (pause * 2).clamp(RESEND_PAUSE_MAX, WATCH_PAUSE_MAX)
                    };
                }
                _ => pause = (pause * 2).clamp(RESEND_PAUSE_MAX, WATCH_PAUSE_MAX),
            }
            let Some(heard) = weak.upgrade() else { return };
            heard.watching.store(false, Ordering::Release);
            heard.lost.fetch_add(1, Ordering::AcqRel);
            drop(heard);
            tokio::time::sleep(pause).await;
        }
    });
    *heard.watcher.lock() = Some(task);
}

/// Commands that change nothing: sent twice, they answer the same.
const READ_ONLY: &[&str] = &[
    "EXISTS", "GET", "HEXISTS", "HGET", "HGETALL", "HKEYS", "HLEN", "HMGET", "KEYS", "MGET",
    "PING", "PTTL", "SCAN", "SMEMBERS", "STRLEN", "TTL", "TYPE", "ZCARD", "ZRANGE",
];

fn read_only(cmd: &Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(name))
        if READ_ONLY.iter().any(|r| r.as_bytes().eq_ignore_ascii_case(name)))
}

fn map_err(addr: &str, e: RedisError) -> Error {
    let auth = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"));
    if auth {
        Error::PermissionDenied(format!(
            "Redis at {addr} refused access ({e}); set [redis] username/password"
        ))
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || matches!(
            e.kind(),
            redis::ErrorKind::BusyLoadingError
                | redis::ErrorKind::ClusterDown
                | redis::ErrorKind::MasterDown
                | redis::ErrorKind::TryAgain
        )
    {
        Error::Unavailable(format!("cannot reach Redis at {addr}: {e}"))
    } else if e.kind() == redis::ErrorKind::InvalidClientConfig {
        Error::InvalidArgument(format!("Redis at {addr}: {e}"))
    } else {
        Error::Storage(format!("Redis at {addr}: {e}"))
    }
}

/// Whether sending the command again cannot apply it twice:
/// - no connection could be made (refused): the server is down or still
///   starting, and the command never left;
/// - the server refused it while loading its data after a restart
///   (`LOADING`), before running it;
/// - a broken pipe, for a command that changes nothing (`read_only`).
///   redis-rs gives a broken pipe both for a command written to a
///   connection already found dead (a restart since the connection's last
///   use: never sent) and for one in flight when the server closed it
///   (perhaps applied, its answer lost). Sent again, a warehouse put
///   counted its bytes twice and a take found its own result gone. A
///   command that changes something goes after a PING unless the link was
///   heard from within [`QUIET`] and its watcher saw no closing since
///   ([`Heard`]), which leaves only the second case; its broken pipe is an
///   error naming the server.
fn unsent(e: &RedisError, read_only: bool) -> bool {
    e.is_connection_refusal()
        || e.kind() == redis::ErrorKind::BusyLoadingError
        || read_only
            && std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// The longest pause between two tries of a command that was not sent.
/// Short, because whoever waits on the command waits out the pause after
/// the server is back: a worker's heartbeat among them, which the
/// manager's `dead_after_ms` (1 s in the fault tests) must not miss.
const RESEND_PAUSE_MAX: Duration = Duration::from_millis(40);

/// How long a connection is tried again while the server refuses it: a
/// server starting beside us gets this long to listen, and a wrong
/// address or a server not running is reported without making the user
/// wait out twice the operation timeout.
const CONNECT_PATIENCE: Duration = Duration::from_secs(2);

/// Runs `attempt` until it succeeds, fails otherwise than [`unsent`], or
/// has failed unsent for `patience`, for at most `within` in all: again at
/// once after the first failure (the connection manager has begun
/// reconnecting), then after pauses growing to [`RESEND_PAUSE_MAX`].
/// `Err` carries the last unsent failure when `within` ran out.
///
/// This, not the connection manager's own retries, waits through a
/// restart: the manager's backoff (backon's) waits its minimum delay of
/// 1 s, and up to 2 s with jitter, before its first retry, whatever the
/// maximum says; every command waited on that reconnection, so a worker
/// whose command was cut by a Redis restart published no heartbeat for
/// over a second and was declared down (CI, `cluster_faults`).
async fn resending<T, F, Fut>(
    within: Duration,
    patience: Duration,
    read_only: bool,
    mut attempt: F,
) -> std::result::Result<redis::RedisResult<T>, Option<RedisError>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let mut last = None;
    let started = tokio::time::Instant::now();
    let tries = async {
        let mut pause = Duration::ZERO;
        loop {
            match attempt().await {
                Err(e) if unsent(&e, read_only) && started.elapsed() < patience => last = Some(e),
                r => return r,
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).clamp(Duration::from_millis(5), RESEND_PAUSE_MAX);
        }
    };
    let outcome = tokio::time::timeout(within, tries).await;
    outcome.map_err(|_| last)
}

impl Link {
    /// Runs the command `send` makes (again while it was [`unsent`]),
    /// bounded by the operation timeout; one that changes something
    /// (`!read_only`) after a PING if the link was [`QUIET`].
    async fn bounded<T, F, Fut>(&self, read_only: bool, mut send: F) -> Result<T>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let watching = self.heard.watching.load(Ordering::Acquire);
        let lost = self.heard.lost.load(Ordering::Acquire);
        let unchecked = !watching || lost != self.heard.checked.load(Ordering::Acquire);
        if !read_only && (unchecked || self.heard.quiet_for() >= QUIET) {
            let ping = redis::cmd("PING");
            let pinged = resending(self.timeout, self.timeout, true, || {
                let mut c = self.conn.clone();
                let ping = &ping;
                async move { ping.query_async::<String>(&mut c).await }
            });
            self.answer(pinged.await)?;
            self.heard.checked.fetch_max(lost, Ordering::AcqRel);
        }
        let sent = resending(self.timeout, self.timeout, read_only, || {
            send(self.conn.clone())
        });
        self.answer(sent.await)
    }

    /// What [`resending`] gave, as this link's result: an answer marks the
    /// link heard from; an error names the server; no answer within the
    /// operation timeout is `Unavailable`.
    fn answer<T>(
        &self,
        outcome: std::result::Result<redis::RedisResult<T>, Option<redis::RedisError>>,
    ) -> Result<T> {
        match outcome {
            Ok(Ok(v)) => {
                self.heard.now();
                Ok(v)
            }
            Ok(Err(e)) | Err(Some(e)) => Err(map_err(&self.addr, e)),
            Err(None) => Err(Error::Unavailable(format!(
                "cannot reach Redis at {}: no answer within {:?}",
                self.addr, self.timeout
            ))),
        }
    }

    async fn cmd<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.bounded(read_only(cmd), |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await
    }

    async fn pipe<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let read_only = pipe.cmd_iter().all(read_only);
        self.bounded(
            read_only,
            |mut c| async move { pipe.query_async(&mut c).await },
        )
        .await
    }

    /// A script that may change something: never sent twice.
    async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T> {
        self.invoke(false, script, keys, args).await
    }

    /// A script that changes nothing, sent again like a read.
    async fn read_script<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T> {
        self.invoke(true, script, keys, args).await
    }

    async fn invoke<T: FromRedisValue>(
        &self,
        read_only: bool,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        let inv = &inv;
        self.bounded(
            read_only,
            |mut c| async move { inv.invoke_async(&mut c).await },
        )
        .await
    }
}

fn connection_info(cfg: &RedisConfig, url: &str) -> Result<(redis::ConnectionInfo, String)> {
    let mut url = url.to_string();
    if cfg.tls && url.starts_with("redis://") {
        url = format!("rediss://{}", &url["redis://".len()..]);
    }
    let mut info = url
        .as_str()
        .into_connection_info()
        .map_err(|e| Error::InvalidArgument(format!("bad Redis URL {url:?}: {e}")))?;
    if cfg.username.is_some() {
        info.redis.username = cfg.username.clone();
    }
    if cfg.password.is_some() {
        info.redis.password = cfg.password.clone();
    }
    let addr = match &info.addr {
        redis::ConnectionAddr::Tcp(h, p) => format!("redis://{h}:{p}"),
        redis::ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}"),
        other => format!("{other}"),
    };
    Ok((info, addr))
}

/// The CA certificates of `[redis] tls_ca`, if set (PEM, as Redis and
/// OpenSSL write them).
fn tls_certificates(cfg: &RedisConfig) -> Result<Option<redis::TlsCertificates>> {
    let Some(path) = &cfg.tls_ca else {
        return Ok(None);
    };
    let pem = std::fs::read(path)
        .map_err(|e| Error::InvalidArgument(format!("[redis] tls_ca: cannot read {path}: {e}")))?;
    Ok(Some(redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}

fn client(cfg: &RedisConfig, info: redis::ConnectionInfo, addr: &str) -> Result<redis::Client> {
    match tls_certificates(cfg)? {
        Some(certs) => redis::Client::build_with_tls(info, certs),
        None => redis::Client::open(info),
    }
    .map_err(|e| map_err(addr, e))
}

/// Connects to one server and checks with a PING that it answers and
/// accepts the credentials.
async fn connect_one(cfg: &RedisConfig, url: &str) -> Result<(Link, redis::Client)> {
    let (info, addr) = connection_info(cfg, url)?;
    let client = client(cfg, info, &addr)?;
    let timeout = Duration::from_millis(cfg.op_timeout_ms.max(1));
    // No retries of its own: [`resending`] tries again, sooner.
    let mcfg = ConnectionManagerConfig::new()
        .set_connection_timeout(timeout)
        .set_response_timeout(timeout)
        .set_number_of_retries(0);
    let connecting = || ConnectionManager::new_with_config(client.clone(), mcfg.clone());
    let conn = match resending(timeout * 2, CONNECT_PATIENCE, false, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) | Err(Some(e)) => return Err(refine_connect_error(&addr, e)),
        Err(None) => {
            return Err(Error::Unavailable(format!(
                "cannot reach Redis at {addr}: no connection within {:?}",
                timeout * 2
            )))
        }
    };
    let heard = Heard::new();
    let channel = format!("{{{}}}:watch", cfg.namespace);
    watch_server(client.clone(), channel, &heard, timeout);
    let link = Link {
        conn: Conn::Single(conn),
        addr,
        timeout,
        heard,
    };
    link.cmd::<String>(&redis::cmd("PING")).await?;
    Ok((link, client))
}

/// At connect time, anything but refused credentials or a bad
/// configuration means the server cannot be reached.
fn refine_connect_error(addr: &str, e: RedisError) -> Error {
    let text = e.to_string();
    match map_err(addr, e) {
        Error::Storage(_) => Error::Unavailable(format!("cannot reach Redis at {addr}: {text}")),
        other => other,
    }
}

async fn connect_cluster(cfg: &RedisConfig) -> Result<(Link, redis::Client)> {
    let timeout = Duration::from_millis(cfg.op_timeout_ms.max(1));
    let mut infos = Vec::new();
    let mut addrs = Vec::new();
    for url in &cfg.urls {
        let (info, addr) = connection_info(cfg, url)?;
        infos.push(info);
        addrs.push(addr);
    }
    let addr = format!("cluster {}", addrs.join(","));
    let mut b = redis::cluster::ClusterClientBuilder::new(infos.clone())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(2);
    if let Some(u) = &cfg.username {
        b = b.username(u.clone());
    }
    if let Some(p) = &cfg.password {
        b = b.password(p.clone());
    }
    if let Some(certs) = tls_certificates(cfg)? {
        b = b.certs(certs);
    }
    let cc = b.build().map_err(|e| map_err(&addr, e))?;
    let conn = match tokio::time::timeout(timeout * 2, cc.get_async_connection()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(refine_connect_error(&addr, e)),
        Err(_) => {
            return Err(Error::Unavailable(format!(
                "cannot reach Redis at {addr}: no connection within {:?}",
                timeout * 2
            )))
        }
    };
    let link = Link {
        conn: Conn::Cluster(conn),
        addr: addr.clone(),
        timeout,
        heard: Heard::new(),
    };
    link.cmd::<String>(&redis::cmd("PING")).await?;
    // Pub/sub goes through any one node: classic PUBLISH reaches them all.
    let client = client(cfg, infos[0].clone(), &addr)?;
    Ok((link, client))
}

fn check_urls(cfg: &RedisConfig) -> Result<()> {
    if cfg.urls.is_empty() {
        return Err(Error::InvalidArgument("[redis] urls is empty".into()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Warehouse

/// The warehouse on one or several Redis servers, or a Redis Cluster.
pub struct RedisWarehouse {
    shards: Vec<Link>,
    cluster: bool,
    node_local: bool,
    home: Option<usize>,
    max_bytes: u64,
    put_timeout: Duration,
    prefix: String,
    usage_key: String,
    put: Script,
    take: Script,
    delete: Script,
    reserve: Script,
    swap: Script,
    getdel_len: Script,
}

impl RedisWarehouse {
    pub async fn connect(cfg: &RedisConfig) -> Result<Self> {
        check_urls(cfg)?;
        let shards = if cfg.cluster {
            vec![connect_cluster(cfg).await?.0]
        } else {
            let mut v = Vec::new();
            for url in &cfg.urls {
                v.push(connect_one(cfg, url).await?.0);
            }
            v
        };
        if let Some(h) = cfg.home {
            if h >= shards.len() && !cfg.cluster {
                return Err(Error::InvalidArgument(format!(
                    "[redis] home {h} is not an index of urls ({} servers)",
                    shards.len()
                )));
            }
        }
        Ok(RedisWarehouse {
            shards,
            cluster: cfg.cluster,
            node_local: cfg.node_local && !cfg.cluster,
            home: cfg.home,
            max_bytes: cfg.max_bytes,
            put_timeout: Duration::from_millis(cfg.put_timeout_ms),
            prefix: format!("{}:w:", cfg.namespace),
            usage_key: format!("{}:wusage", cfg.namespace),
            put: Script::new(lua::WH_PUT),
            take: Script::new(lua::WH_TAKE),
            delete: Script::new(lua::WH_DELETE),
            reserve: Script::new(lua::WH_RESERVE),
            swap: Script::new(lua::WH_SWAP),
            getdel_len: Script::new(lua::WH_GETDEL_LEN),
        })
    }

    /// The same warehouse seen from node `home` (index in `urls`).
    pub fn with_home(mut self, home: usize) -> Self {
        self.home = Some(home);
        self
    }

    pub fn home(&self) -> Option<usize> {
        self.home
    }

    /// Number of servers keys are spread over (1 for a Cluster).
    pub fn servers(&self) -> usize {
        self.shards.len()
    }

    /// A key for `name` that lives on this process's home server when
    /// node-local placement is on (`n<home>/<name>`), `name` otherwise.
    pub fn local_key(&self, name: &str) -> String {
        match (self.node_local, self.home) {
            (true, Some(h)) => format!("n{h}/{name}"),
            _ => name.to_string(),
        }
    }

    /// Index in `urls` of the server that holds `key`.
    pub fn server_of(&self, key: &str) -> usize {
        let n = self.shards.len();
        if n == 1 {
            return 0;
        }
        if self.node_local {
            if let Some(rest) = key.strip_prefix('n') {
                if let Some((idx, _)) = rest.split_once('/') {
                    if let Ok(i) = idx.parse::<usize>() {
                        if i < n && idx.bytes().all(|b| b.is_ascii_digit()) {
                            return i;
                        }
                    }
                }
            }
        }
        (fnv1a64(key.as_bytes()) % n as u64) as usize
    }

    /// The Redis key holding warehouse `key`.
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn shard(&self, key: &str) -> &Link {
        &self.shards[self.server_of(key)]
    }

    /// One attempt: stored, or no room right now.
    ///
    /// A new key (every label's data has its own) takes plain commands:
    /// Redis spends about 50-100 µs running a script handed a 64 KiB value
    /// (it copies the argument into Lua and back) against about 1 µs for a
    /// SET, measured with `INFO commandstats`. Replacing an existing key
    /// must account for the old value atomically, so it takes the scripts.
    async fn try_put(&self, link: &Link, rkey: &str, data: &[u8], limit: u64) -> Result<bool> {
        let max = limit.to_string();
        let len = data.len() as u64;
        if !self.cluster {
            // Counted and stored in one transaction, so the count never
            // misses a stored value; a put that took the count over the
            // bound takes both back (only puts in flight can overshoot).
            let (used, stored): (u64, Option<String>) = link
                .pipe(
                    redis::pipe()
                        .atomic()
                        .cmd("INCRBY")
                        .arg(&self.usage_key)
                        .arg(len)
                        .cmd("SET")
                        .arg(rkey)
                        .arg(data)
                        .arg("NX"),
                )
                .await?;
            if stored.is_none() {
                self.release(link, len).await?;
                let r: i64 = link
                    .script(&self.put, &[rkey, &self.usage_key], &[data, max.as_bytes()])
                    .await?;
                return Ok(r == 1);
            }
            if used > limit {
                link.pipe::<()>(
                    redis::pipe()
                        .atomic()
                        .cmd("DEL")
                        .arg(rkey)
                        .ignore()
                        .cmd("DECRBY")
                        .arg(&self.usage_key)
                        .arg(len)
                        .ignore(),
                )
                .await?;
                return Ok(false);
            }
            return Ok(true);
        }
        let r: i64 = link
            .script(
                &self.reserve,
                &[&self.usage_key],
                &[len.to_string().as_bytes(), max.as_bytes()],
            )
            .await?;
        if r != 1 {
            return Ok(false);
        }
        let stored: Option<String> = match link
            .cmd(redis::cmd("SET").arg(rkey).arg(data).arg("NX"))
            .await
        {
            Ok(stored) => stored,
            Err(e) => {
                let _ = self.release(link, len).await;
                return Err(e);
            }
        };
        if stored.is_some() {
            return Ok(true);
        }
        let old: u64 = match link.script(&self.swap, &[rkey], &[data]).await {
            Ok(old) => old,
            Err(e) => {
                let _ = self.release(link, len).await;
                return Err(e);
            }
        };
        self.release(link, old).await?;
        Ok(true)
    }

    async fn release(&self, link: &Link, n: u64) -> Result<()> {
        if n > 0 {
            link.cmd::<i64>(redis::cmd("DECRBY").arg(&self.usage_key).arg(n))
                .await?;
        }
        Ok(())
    }
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Escapes glob characters for `SCAN MATCH`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl RedisWarehouse {
    /// Stores `data` once the values held, with it, stay within `limit`.
    async fn put_within(&self, key: &str, data: Bytes, limit: u64) -> Result<()> {
        let len = data.len() as u64;
        if len > limit {
            return Err(Error::Full(format!(
                "warehouse (a {len}-byte value exceeds its {limit}-byte bound)"
            )));
        }
        let link = self.shard(key);
        let rkey = self.redis_key(key);
        let deadline = tokio::time::Instant::now() + self.put_timeout;
        let mut backoff = Duration::from_millis(1);
        loop {
            if self.try_put(link, &rkey, &data, limit).await? {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(Error::Full(format!(
                    "warehouse at {} (no room for {len} bytes under key {key:?} within {:?})",
                    link.addr, self.put_timeout
                )));
            }
            tokio::time::sleep(backoff.min(deadline - now)).await;
            backoff = (backoff * 2).min(Duration::from_millis(50));
        }
    }
}

#[async_trait]
impl Warehouse for RedisWarehouse {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.put_within(key, data, staged_bound(self.max_bytes))
            .await
    }

    async fn put_result(&self, key: &str, data: Bytes) -> Result<()> {
        self.put_within(key, data, self.max_bytes).await
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        let v: Option<Vec<u8>> = self
            .shard(key)
            .cmd(redis::cmd("GET").arg(self.redis_key(key)))
            .await?;
        Ok(v.map(Bytes::from))
    }

    async fn take(&self, key: &str) -> Result<Option<Bytes>> {
        let link = self.shard(key);
        let rkey = self.redis_key(key);
        if !self.cluster {
            let v: Option<Vec<u8>> = link
                .script(&self.take, &[&rkey, &self.usage_key], &[])
                .await?;
            return Ok(v.map(Bytes::from));
        }
        let v: Option<Vec<u8>> = link.cmd(redis::cmd("GETDEL").arg(&rkey)).await?;
        if let Some(v) = &v {
            self.release(link, v.len() as u64).await?;
        }
        Ok(v.map(Bytes::from))
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        let link = self.shard(key);
        let rkey = self.redis_key(key);
        if !self.cluster {
            let n: i64 = link
                .script(&self.delete, &[&rkey, &self.usage_key], &[])
                .await?;
            return Ok(n == 1);
        }
        let n: i64 = link.script(&self.getdel_len, &[&rkey], &[]).await?;
        if n < 0 {
            return Ok(false);
        }
        self.release(link, n as u64).await?;
        Ok(true)
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let pattern = format!("{}*", glob_escape(&self.redis_key(prefix)));
        let mut out = Vec::new();
        for link in &self.shards {
            let found: Vec<String> = if self.cluster {
                // Routed to every master by the cluster client.
                link.cmd(redis::cmd("KEYS").arg(&pattern)).await?
            } else {
                let mut all = Vec::new();
                let mut cursor: u64 = 0;
                loop {
                    let (next, batch): (u64, Vec<String>) = link
                        .cmd(
                            redis::cmd("SCAN")
                                .arg(cursor)
                                .arg("MATCH")
                                .arg(&pattern)
                                .arg("COUNT")
                                .arg(1000),
                        )
                        .await?;
                    all.extend(batch);
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
                all
            };
            out.extend(
                found
                    .into_iter()
                    .filter_map(|k| k.strip_prefix(&self.prefix).map(str::to_string))
                    .filter(|k| k.starts_with(prefix)),
            );
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    async fn usage(&self) -> Result<u64> {
        let mut total = 0u64;
        for link in &self.shards {
            let v: Option<i64> = link.cmd(redis::cmd("GET").arg(&self.usage_key)).await?;
            total += v.unwrap_or(0).max(0) as u64;
        }
        Ok(total)
    }
}

// ---------------------------------------------------------------------------
// Inventory

struct Scripts {
    create: Script,
    symlink: Script,
    link: Script,
    lookup: Script,
    list: Script,
    remove: Script,
    rename: Script,
    set_size: Script,
    set_attr: Script,
    commit: Script,
    reserve_append: Script,
    extents: Script,
    read_plan: Script,
    set_xattr: Script,
    xattrs: Script,
    set_status: Script,
    label_count: Script,
    forget: Script,
    count_subdirs: Script,
    hold: Script,
    let_go: Script,
    let_go_session: Script,
    drop_unheld: Script,
    take_field: Script,
}

impl Scripts {
    fn new() -> Self {
        let s = |body: &str| Script::new(&format!("{}{body}", lua::PRELUDE));
        Scripts {
            create: s(lua::CREATE),
            symlink: s(lua::SYMLINK),
            link: s(lua::LINK),
            lookup: s(lua::LOOKUP),
            list: s(lua::LIST),
            remove: s(lua::REMOVE),
            rename: s(lua::RENAME),
            set_size: s(lua::SET_SIZE),
            set_attr: s(lua::SET_ATTR),
            commit: s(lua::COMMIT),
            reserve_append: s(lua::RESERVE_APPEND),
            extents: s(lua::EXTENTS),
            read_plan: s(lua::READ_PLAN),
            set_xattr: s(lua::SET_XATTR),
            xattrs: s(lua::XATTRS),
            set_status: s(lua::SET_STATUS),
            label_count: s(lua::LABEL_COUNT),
            forget: s(lua::FORGET),
            count_subdirs: s(lua::COUNT_SUBDIRS),
            hold: s(lua::HOLD),
            let_go: s(lua::LET_GO),
            let_go_session: s(lua::LET_GO_SESSION),
            drop_unheld: s(lua::DROP_UNHELD),
            take_field: s(lua::TAKE_FIELD),
        }
    }
}

/// Local waiters of labels, woken by the `{ns}:done` subscription.
type Watchers = Mutex<HashMap<String, Vec<Arc<Waiter>>>>;

/// One `wait` call: woken with the label ids published since it last
/// looked, so that it re-reads those and not every label it waits for
/// (which made waiting on n labels cost n^2 key reads).
#[derive(Default)]
struct Waiter {
    notify: Notify,
    fired: Mutex<Vec<String>>,
}

/// The inventory on Redis (one server or a Cluster); see the module doc.
pub struct RedisInventory {
    link: Link,
    /// `{ns}:`
    p: String,
    reclaim_after: Duration,
    scripts: Scripts,
    watchers: Arc<Watchers>,
    listener: tokio::task::JoinHandle<()>,
    /// How long a session's holds of open files outlive its last renewal.
    hold_lease: Duration,
    /// Sessions of this process holding files open: how many, and the task
    /// renewing their lease every third of it while they do.
    holding: Mutex<HashMap<u64, (usize, tokio::task::JoinHandle<()>)>>,
}

impl Drop for RedisInventory {
    fn drop(&mut self) {
        self.listener.abort();
        for (_, (_, renewal)) in self.holding.lock().drain() {
            renewal.abort();
        }
    }
}

/// How often `wait` re-reads statuses when no notification arrives (lost
/// subscription, server restart).
const WAIT_POLL: Duration = Duration::from_millis(100);

fn hex16(v: u64) -> String {
    format!("{v:016x}")
}

fn label_hex(id: LabelId) -> String {
    format!("{:032x}", id.as_u128())
}

impl RedisInventory {
    /// Connects (to `urls[0]`, or the Cluster) and creates the root `/`.
    pub async fn connect(cfg: &RedisConfig) -> Result<Self> {
        check_urls(cfg)?;
        let (link, client) = if cfg.cluster {
            connect_cluster(cfg).await?
        } else {
            connect_one(cfg, &cfg.urls[0]).await?
        };
        let p = format!("{{{}}}:", cfg.namespace);
        let watchers: Arc<Watchers> = Arc::default();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let listener = tokio::spawn(listen(
            client,
            format!("{p}done"),
            Arc::downgrade(&watchers),
            link.timeout,
            ready_tx,
        ));
        let inv = RedisInventory {
            link,
            p,
            reclaim_after: Duration::from_millis(cfg.reclaim_after_ms),
            scripts: Scripts::new(),
            watchers,
            listener,
            hold_lease: Duration::from_millis(cfg.hold_lease_ms.max(1)),
            holding: Mutex::new(HashMap::new()),
        };
        // Until subscribed, wait falls back on polling; give it a moment so
        // that the first waits are prompt.
        let _ = tokio::time::timeout(inv.link.timeout, ready_rx).await;
        inv.create("/", FileKind::Dir, 0o755, Owner::root(0))
            .await?;
        inv.run(&inv.scripts.count_subdirs, &[]).await?;
        Ok(inv)
    }

    /// Runs an inventory script that may change something (never sent
    /// twice) and checks its status element.
    async fn run(&self, script: &Script, args: &[&[u8]]) -> Result<Vec<Value>> {
        let v = self.link.script(script, &[&self.p], args).await?;
        self.status(v)
    }

    /// Runs an inventory script that changes nothing (sent again like a
    /// read after a broken link) and checks its status element.
    async fn run_read(&self, script: &Script, args: &[&[u8]]) -> Result<Vec<Value>> {
        let v = self.link.read_script(script, &[&self.p], args).await?;
        self.status(v)
    }

    /// An inventory script's reply without its status element, or the
    /// error the status names.
    fn status(&self, mut v: Vec<Value>) -> Result<Vec<Value>> {
        if v.is_empty() {
            return Err(self.malformed("script reply", "empty"));
        }
        let status: String = redis::from_redis_value(&v[0])
            .map_err(|e| self.malformed("script reply", &e.to_string()))?;
        let text = |i: usize| -> String {
            v.get(i)
                .and_then(|x| redis::from_redis_value::<String>(x).ok())
                .unwrap_or_default()
        };
        match status.as_str() {
            "ok" => {
                v.remove(0);
                Ok(v)
            }
            "notfound" => Err(Error::NotFound(text(1))),
            "exists" => Err(Error::AlreadyExists(text(1))),
            "invalidarg" => Err(Error::InvalidArgument(text(1))),
            "invalidpath" => Err(Error::InvalidPath {
                path: text(1),
                reason: text(2),
            }),
            "storage" => Err(Error::Storage(format!(
                "Redis at {}: {}",
                self.link.addr,
                text(1)
            ))),
            other => Err(self.malformed("script reply", &format!("status {other:?}"))),
        }
    }

    fn malformed(&self, key: &str, why: &str) -> Error {
        Error::Malformed(format!(
            "Redis at {}: value of {}{key}: {why}",
            self.link.addr,
            if key.starts_with('{') { "" } else { &self.p }
        ))
    }

    /// Decodes the list of file records a script returned at `at`.
    fn metas(&self, v: &[Value], at: usize) -> Result<Vec<FileMeta>> {
        let recs: Vec<Value> = match v.get(at) {
            Some(x) => redis::from_redis_value(x)
                .map_err(|e| self.malformed("file records", &e.to_string()))?,
            None => Vec::new(),
        };
        recs.iter().map(|r| self.meta(r)).collect()
    }

    /// One more file `session` holds: the first starts renewing its lease.
    fn count_hold(&self, session: u64) {
        let mut holding = self.holding.lock();
        if let Some((n, _)) = holding.get_mut(&session) {
            *n += 1;
            return;
        }
        let (link, lease) = (self.link.clone(), self.hold_lease);
        let keys = [
            format!("{}hlease:{session}", self.p),
            format!("{}holding:{session}", self.p),
        ];
        let renewal = tokio::spawn(async move {
            let ms = lease.as_millis() as u64;
            loop {
                tokio::time::sleep(lease / 3).await;
                let mut pipe = redis::pipe();
                pipe.cmd("SET")
                    .arg(&keys[0])
                    .arg("1")
                    .arg("PX")
                    .arg(ms)
                    .ignore();
                pipe.cmd("PEXPIRE").arg(&keys[1]).arg(ms).ignore();
                if let Err(e) = link.pipe::<()>(&pipe).await {
                    tracing::warn!("renewing the open files of session {session}: {e}");
                }
            }
        });
        holding.insert(session, (1, renewal));
    }

    /// One file fewer `session` holds (`all`: none any more).
    fn count_let_go(&self, session: u64, all: bool) {
        let mut holding = self.holding.lock();
        if let Some((n, _)) = holding.get_mut(&session) {
            *n = n.saturating_sub(1);
            if *n == 0 || all {
                if let Some((_, renewal)) = holding.remove(&session) {
                    renewal.abort();
                }
            }
        }
    }

    /// Decodes a file record (flat HGETALL array).
    fn meta(&self, v: &Value) -> Result<FileMeta> {
        let pairs: Vec<Vec<u8>> =
            redis::from_redis_value(v).map_err(|e| self.malformed("file:?", &e.to_string()))?;
        let mut f: HashMap<&[u8], &[u8]> = HashMap::new();
        for kv in pairs.chunks(2) {
            if let [k, v] = kv {
                f.insert(k.as_slice(), v.as_slice());
            }
        }
        let key = format!(
            "file:{}",
            f.get(&b"id"[..])
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_else(|| "?".into())
        );
        let get = |name: &str| -> Result<&str> {
            let raw = f
                .get(name.as_bytes())
                .ok_or_else(|| self.malformed(&key, &format!("no field {name}")))?;
            std::str::from_utf8(raw).map_err(|_| self.malformed(&key, &format!("{name} not UTF-8")))
        };
        let num = |name: &str| -> Result<u64> {
            get(name)?
                .parse()
                .map_err(|_| self.malformed(&key, &format!("{name} is not a number")))
        };
        if get("v")? != "1" {
            return Err(self.malformed(&key, &format!("unknown format {}", get("v")?)));
        }
        let size = get("size")?;
        let size = u64::from_str_radix(size, 16)
            .ok()
            .filter(|_| size.len() == 16)
            .ok_or_else(|| self.malformed(&key, "size is not 16 hex digits"))?;
        Ok(FileMeta {
            id: num("id")?,
            path: get("path")?.to_string(),
            kind: match get("kind")? {
                "f" => FileKind::File,
                "d" => FileKind::Dir,
                "l" => FileKind::Symlink,
                "p" => FileKind::Fifo,
                "c" => FileKind::CharDevice,
                "b" => FileKind::BlockDevice,
                "s" => FileKind::Socket,
                k => return Err(self.malformed(&key, &format!("kind {k:?}"))),
            },
            size,
            mode: u32::try_from(num("mode")?).map_err(|_| self.malformed(&key, "mode"))?,
            owner: u32::try_from(num("owner")?).map_err(|_| self.malformed(&key, "owner"))?,
            // Records written before files had a POSIX owner belong to root.
            uid: match f.get(&b"uid"[..]) {
                None => 0,
                Some(_) => u32::try_from(num("uid")?).map_err(|_| self.malformed(&key, "uid"))?,
            },
            gid: match f.get(&b"gid"[..]) {
                None => 0,
                Some(_) => u32::try_from(num("gid")?).map_err(|_| self.malformed(&key, "gid"))?,
            },
            ctime: num("ctime")?,
            mtime: num("mtime")?,
            atime: num("atime")?,
            nlink: match f.get(&b"nlink"[..]) {
                None => 1,
                Some(_) => {
                    u32::try_from(num("nlink")?).map_err(|_| self.malformed(&key, "nlink"))?
                }
            },
        })
    }

    /// Decodes extent members of file `file`.
    fn extent_list(&self, file: &str, v: &Value) -> Result<Vec<Extent>> {
        let members: Vec<String> = redis::from_redis_value(v)
            .map_err(|e| self.malformed(&format!("x:{file}"), &e.to_string()))?;
        members
            .iter()
            .map(|m| {
                let bad = || self.malformed(&format!("x:{file}"), &format!("extent {m:?}"));
                if m.len() != 72 || !m.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad());
                }
                let start = u64::from_str_radix(&m[0..16], 16).map_err(|_| bad())?;
                let end = u64::from_str_radix(&m[16..32], 16).map_err(|_| bad())?;
                let label = u128::from_str_radix(&m[32..64], 16).map_err(|_| bad())?;
                let worker = u32::from_str_radix(&m[64..72], 16).map_err(|_| bad())?;
                if end <= start {
                    return Err(bad());
                }
                Ok(Extent {
                    offset: start,
                    len: end - start,
                    worker,
                    label: LabelId::from_u128(label),
                })
            })
            .collect()
    }

    fn decode_at<T: serde::de::DeserializeOwned>(&self, key: &str, bytes: &[u8]) -> Result<T> {
        decode(bytes).map_err(|e| self.malformed(key, &e.to_string()))
    }

    async fn statuses(&self, ids: &[LabelId]) -> Result<Vec<Option<LabelStatus>>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(512) {
            let mut c = redis::cmd("MGET");
            for id in chunk {
                c.arg(format!("{}label:{}", self.p, label_hex(*id)));
            }
            let vals: Vec<Option<Vec<u8>>> = self.link.cmd(&c).await?;
            for (id, v) in chunk.iter().zip(vals) {
                out.push(match v {
                    Some(b) => Some(self.decode_at(&format!("label:{}", label_hex(*id)), &b)?),
                    None => None,
                });
            }
        }
        Ok(out)
    }

    /// Pending label ids (hex) to watch, registered before the re-check.
    fn watch<'a>(&self, ids: impl IntoIterator<Item = &'a String>, n: &Arc<Waiter>) {
        let mut w = self.watchers.lock();
        for id in ids {
            let list = w.entry(id.clone()).or_default();
            if !list.iter().any(|x| Arc::ptr_eq(x, n)) {
                list.push(n.clone());
            }
        }
    }

    fn unwatch(&self, ids: &[String], n: &Arc<Waiter>) {
        let mut w = self.watchers.lock();
        for id in ids {
            if let Some(list) = w.get_mut(id) {
                list.retain(|x| !Arc::ptr_eq(x, n));
                if list.is_empty() {
                    w.remove(id);
                }
            }
        }
    }
}

/// Keeps a subscription to `channel` and wakes local waiters of each label
/// id published there; reconnects after any failure until the inventory is
/// dropped.
async fn listen(
    client: redis::Client,
    channel: String,
    watchers: Weak<Watchers>,
    timeout: Duration,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    loop {
        if let Ok(Ok(mut ps)) = tokio::time::timeout(timeout, client.get_async_pubsub()).await {
            if ps.subscribe(&channel).await.is_ok() {
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
                let mut stream = ps.on_message();
                while let Some(msg) = stream.next().await {
                    let Some(w) = watchers.upgrade() else { return };
                    let id = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                    let list = w.lock().remove(&id);
                    for waiter in list.into_iter().flatten() {
                        waiter.fired.lock().push(id.clone());
                        waiter.notify.notify_one();
                    }
                }
            }
        }
        if watchers.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Refuses paths that did not go through `normalize_path`.
fn check_path(path: &str) -> Result<()> {
    if normalize_path(path)? == path {
        Ok(())
    } else {
        Err(Error::InvalidPath {
            path: path.to_string(),
            reason: "not normalized".into(),
        })
    }
}

/// Proper ancestors of a normalized path, shallowest first, root excluded.
fn ancestors(path: &str) -> Vec<&str> {
    path.match_indices('/')
        .skip(1)
        .map(|(i, _)| &path[..i])
        .collect()
}

fn kind_code(kind: FileKind) -> &'static [u8] {
    match kind {
        FileKind::File => b"f",
        FileKind::Dir => b"d",
        FileKind::Symlink => b"l",
        FileKind::Fifo => b"p",
        FileKind::CharDevice => b"c",
        FileKind::BlockDevice => b"b",
        FileKind::Socket => b"s",
    }
}

#[async_trait]
impl Inventory for RedisInventory {
    async fn create(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        owner: Owner,
    ) -> Result<FileMeta> {
        check_path(path)?;
        let (mode, now) = (mode.to_string(), now_nanos().to_string());
        let [app, uid, gid] = [owner.app, owner.uid, owner.gid].map(|n| n.to_string());
        let mut args: Vec<&[u8]> = vec![
            path.as_bytes(),
            kind_code(kind),
            mode.as_bytes(),
            app.as_bytes(),
            now.as_bytes(),
            uid.as_bytes(),
            gid.as_bytes(),
        ];
        args.extend(ancestors(path).into_iter().map(str::as_bytes));
        let v = self.run(&self.scripts.create, &args).await?;
        self.meta(
            v.first()
                .ok_or_else(|| self.malformed("create reply", "empty"))?,
        )
    }

    async fn symlink(&self, path: &str, target: &str, owner: Owner) -> Result<FileMeta> {
        check_path(path)?;
        check_link_target(target)?;
        let size = format!("{:016x}", target.len());
        let now = now_nanos().to_string();
        let [app, uid, gid] = [owner.app, owner.uid, owner.gid].map(|n| n.to_string());
        let mut args: Vec<&[u8]> = vec![
            path.as_bytes(),
            target.as_bytes(),
            size.as_bytes(),
            app.as_bytes(),
            now.as_bytes(),
            uid.as_bytes(),
            gid.as_bytes(),
        ];
        args.extend(ancestors(path).into_iter().map(str::as_bytes));
        let v = self.run(&self.scripts.symlink, &args).await?;
        self.meta(
            v.first()
                .ok_or_else(|| self.malformed("symlink reply", "empty"))?,
        )
    }

    async fn link(&self, from: &str, to: &str) -> Result<FileMeta> {
        check_path(from)?;
        check_path(to)?;
        let (now, max) = (now_nanos().to_string(), LINK_MAX.to_string());
        let mut args: Vec<&[u8]> = vec![
            from.as_bytes(),
            to.as_bytes(),
            now.as_bytes(),
            max.as_bytes(),
        ];
        args.extend(ancestors(to).into_iter().map(str::as_bytes));
        let v = self.run(&self.scripts.link, &args).await?;
        self.meta(
            v.first()
                .ok_or_else(|| self.malformed("link reply", "empty"))?,
        )
    }

    async fn lookup(&self, path: &str) -> Result<Option<FileMeta>> {
        check_path(path)?;
        let v = self
            .run_read(&self.scripts.lookup, &[path.as_bytes()])
            .await?;
        v.first().map(|r| self.meta(r)).transpose()
    }

    async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        let v = self
            .run_read(&self.scripts.list, &[prefix.as_bytes()])
            .await?;
        self.metas(&v, 0)
    }

    async fn remove(&self, path: &str) -> Result<(FileMeta, Vec<Extent>)> {
        check_path(path)?;
        if path == "/" {
            return Err(Error::InvalidArgument("cannot remove the root /".into()));
        }
        let now = now_nanos().to_string();
        let v = self
            .run(&self.scripts.remove, &[path.as_bytes(), now.as_bytes()])
            .await?;
        let [meta, ext] = v.as_slice() else {
            return Err(self.malformed("remove reply", "not [meta, extents]"));
        };
        let meta = self.meta(meta)?;
        let ext = self.extent_list(&meta.id.to_string(), ext)?;
        Ok((meta, ext))
    }

    async fn rename_as(
        &self,
        from: &str,
        to: &str,
        how: RenameHow,
    ) -> Result<Option<(FileMeta, Vec<Extent>)>> {
        check_path(from)?;
        check_path(to)?;
        if from == "/" || to == "/" {
            return Err(Error::InvalidArgument("cannot rename the root /".into()));
        }
        if to.starts_with(&format!("{from}/")) {
            return Err(Error::InvalidArgument(format!(
                "cannot move {from} into itself ({to})"
            )));
        }
        if how == RenameHow::Exchange && from.starts_with(&format!("{to}/")) {
            return Err(Error::InvalidArgument(format!(
                "cannot exchange {from} with a directory holding it ({to})"
            )));
        }
        let how: &[u8] = match how {
            RenameHow::Replace => b"r",
            RenameHow::NoReplace => b"n",
            RenameHow::Exchange => b"x",
        };
        let now = now_nanos().to_string();
        let mut args: Vec<&[u8]> = vec![from.as_bytes(), to.as_bytes(), now.as_bytes(), how];
        args.extend(ancestors(to).into_iter().map(str::as_bytes));
        let v = self.run(&self.scripts.rename, &args).await?;
        match v.as_slice() {
            [] => Ok(None),
            [meta, ext] => {
                let meta = self.meta(meta)?;
                let ext = self.extent_list(&meta.id.to_string(), ext)?;
                Ok(Some((meta, ext)))
            }
            _ => Err(self.malformed("rename reply", "not [meta, extents]")),
        }
    }

    async fn set_size(&self, file: FileId, size: u64) -> Result<()> {
        let (id, size, now) = (file.to_string(), hex16(size), now_nanos().to_string());
        self.run(
            &self.scripts.set_size,
            &[id.as_bytes(), size.as_bytes(), now.as_bytes()],
        )
        .await?;
        Ok(())
    }

    async fn set_attr(&self, file: FileId, attr: SetAttr) -> Result<FileMeta> {
        attr.check()?;
        let now = now_nanos();
        let at = |t: Option<SetTime>| match t {
            None => String::new(),
            Some(SetTime::Now) => now.to_string(),
            Some(SetTime::At(n)) => n.to_string(),
        };
        let num = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
        let args = [
            file.to_string(),
            now.to_string(),
            num(attr.mode),
            num(attr.uid),
            num(attr.gid),
            at(attr.atime),
            at(attr.mtime),
        ];
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let v = self.run(&self.scripts.set_attr, &args).await?;
        self.meta(
            v.first()
                .ok_or_else(|| self.malformed("set_attr reply", "empty"))?,
        )
    }

    async fn commit_extent(&self, file: FileId, extent: Extent) -> Result<()> {
        let end = extent.offset.checked_add(extent.len).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "extent at {} of {} bytes runs past the largest offset",
                extent.offset, extent.len
            ))
        })?;
        let id = file.to_string();
        let (s, e) = (hex16(extent.offset), hex16(end));
        let lbl = label_hex(extent.label);
        let w = format!("{:08x}", extent.worker);
        let now = now_nanos().to_string();
        self.run(
            &self.scripts.commit,
            &[
                id.as_bytes(),
                s.as_bytes(),
                e.as_bytes(),
                lbl.as_bytes(),
                w.as_bytes(),
                now.as_bytes(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn reserve_append(&self, file: FileId, len: u64) -> Result<u64> {
        let (id, len, now) = (file.to_string(), hex16(len), now_nanos().to_string());
        let v = self
            .run(
                &self.scripts.reserve_append,
                &[id.as_bytes(), len.as_bytes(), now.as_bytes()],
            )
            .await?;
        let offset: String = v
            .first()
            .and_then(|x| redis::from_redis_value(x).ok())
            .ok_or_else(|| self.malformed("reserve_append reply", "no offset"))?;
        u64::from_str_radix(&offset, 16)
            .map_err(|_| self.malformed(&format!("file:{id}"), "size is not hex16"))
    }

    async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let end = offset.saturating_add(len);
        let id = file.to_string();
        let (s, e) = (hex16(offset), hex16(end));
        let v = self
            .run_read(
                &self.scripts.extents,
                &[id.as_bytes(), s.as_bytes(), e.as_bytes()],
            )
            .await?;
        let Some(members) = v.first() else {
            return Ok(Vec::new());
        };
        let mut out = self.extent_list(&id, members)?;
        clip_to(&mut out, offset, end);
        Ok(out)
    }

    /// Entry and extents in one script: one round trip, one consistent
    /// look.
    async fn read_plan(&self, named: &Named, offset: u64, len: u64) -> Result<Option<ReadPlan>> {
        let (how, at) = match named {
            Named::Path(path) => {
                check_path(path)?;
                ("path", path.clone())
            }
            Named::Id(id) => ("id", id.to_string()),
        };
        let (s, e) = (hex16(offset), hex16(offset.saturating_add(len)));
        let v = self
            .run_read(
                &self.scripts.read_plan,
                &[how.as_bytes(), at.as_bytes(), s.as_bytes(), e.as_bytes()],
            )
            .await?;
        let [record, members] = v.as_slice() else {
            return match v.as_slice() {
                [] => Ok(None),
                _ => Err(self.malformed("read plan reply", "not [record, extents]")),
            };
        };
        let meta = self.meta(record)?;
        let Some(len) = read_len(&meta, offset, len) else {
            return Ok(Some((meta, Vec::new())));
        };
        let mut extents = self.extent_list(&meta.id.to_string(), members)?;
        clip_to(&mut extents, offset, offset + len);
        Ok(Some((meta, extents)))
    }

    async fn file(&self, file: FileId) -> Result<Option<FileMeta>> {
        let v: Value = self
            .link
            .cmd(redis::cmd("HGETALL").arg(format!("{}file:{file}", self.p)))
            .await?;
        let empty = match &v {
            Value::Array(a) => a.is_empty(),
            Value::Map(m) => m.is_empty(),
            Value::Nil => true,
            _ => false,
        };
        if empty {
            return Ok(None);
        }
        self.meta(&v).map(Some)
    }

    async fn set_xattr_if(
        &self,
        file: FileId,
        name: &str,
        value: Option<Bytes>,
        cond: XattrCond,
    ) -> Result<()> {
        // Refuses a bad name or an oversized value before any round trip;
        // the total and the condition are checked below, against what the
        // script found.
        check_xattr(file, name, value.as_deref(), 0)?;
        let (id, now) = (file.to_string(), now_nanos().to_string());
        let presence = match cond.presence {
            Presence::Any => "any",
            Presence::Present => "present",
            Presence::Absent => "absent",
            Presence::Both => "both",
        };
        let empty = if cond.while_empty { "1" } else { "0" };
        let mut args: Vec<&[u8]> = vec![
            id.as_bytes(),
            now.as_bytes(),
            name.as_bytes(),
            presence.as_bytes(),
            empty.as_bytes(),
        ];
        let room = value
            .as_ref()
            .map(|v| (XATTR_TOTAL_MAX - name.len() - v.len()).to_string());
        if let (Some(v), Some(room)) = (&value, &room) {
            args.push(v);
            args.push(room.as_bytes());
        }
        let v = self.run(&self.scripts.set_xattr, &args).await?;
        let bad = || self.malformed("set_xattr reply", "not [others, exists, size]");
        let (others, exists, size): (usize, u8, String) = match v.as_slice() {
            [o, e, s] => (
                redis::from_redis_value(o).map_err(|_| bad())?,
                redis::from_redis_value(e).map_err(|_| bad())?,
                redis::from_redis_value(s).map_err(|_| bad())?,
            ),
            _ => return Err(bad()),
        };
        let size = u64::from_str_radix(&size, 16).map_err(|_| bad())?;
        check_xattr(file, name, value.as_deref(), others)?;
        cond.check(file, name, exists == 1, size)
    }

    async fn xattrs(&self, file: FileId) -> Result<Vec<(String, Bytes)>> {
        let key = format!("xattr:{file}");
        let id = file.to_string();
        let v = self
            .run_read(&self.scripts.xattrs, &[id.as_bytes()])
            .await?;
        let flat: Vec<Vec<u8>> = match v.first() {
            Some(x) => {
                redis::from_redis_value(x).map_err(|e| self.malformed(&key, &e.to_string()))?
            }
            None => Vec::new(),
        };
        let mut out = Vec::with_capacity(flat.len() / 2);
        let mut it = flat.into_iter();
        while let (Some(name), Some(value)) = (it.next(), it.next()) {
            let name = String::from_utf8(name)
                .map_err(|_| self.malformed(&key, "attribute name not UTF-8"))?;
            out.push((name, Bytes::from(value)));
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    async fn set_status(&self, status: LabelStatus) -> Result<()> {
        let id = label_hex(status.id);
        let fin = status.state.is_final();
        let ttl = if fin {
            self.reclaim_after.as_millis().max(1) as u64
        } else {
            PENDING_TTL_MS
        }
        .to_string();
        let data = encode(&status);
        self.link
            .script::<i64>(
                &self.scripts.set_status,
                &[&self.p],
                &[
                    id.as_bytes(),
                    &data,
                    ttl.as_bytes(),
                    if fin { b"1" } else { b"0" },
                ],
            )
            .await?;
        Ok(())
    }

    async fn status(&self, id: LabelId) -> Result<Option<LabelStatus>> {
        Ok(self.statuses(&[id]).await?.pop().flatten())
    }

    async fn wait(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let waiter = Arc::new(Waiter::default());
        let hex: Vec<String> = ids.iter().map(|id| label_hex(*id)).collect();
        let mut at: HashMap<&str, Vec<usize>> = HashMap::with_capacity(hex.len());
        for (i, h) in hex.iter().enumerate() {
            at.entry(h.as_str()).or_default().push(i);
        }
        // Register first, then read: a completion published in between
        // still wakes us (no lost wake-ups).
        self.watch(&hex, &waiter);
        let result = async {
            let mut got: Vec<Option<LabelStatus>> = vec![None; ids.len()];
            let mut look: Vec<usize> = (0..ids.len()).collect();
            loop {
                let wanted: Vec<LabelId> = look.iter().map(|&i| ids[i]).collect();
                for (&i, s) in look.iter().zip(self.statuses(&wanted).await?) {
                    got[i] = s;
                }
                let pending: Vec<usize> = (0..ids.len())
                    .filter(|&i| !got[i].as_ref().is_some_and(|s| s.state.is_final()))
                    .collect();
                let now = tokio::time::Instant::now();
                if pending.is_empty() || now >= deadline {
                    let out: Vec<LabelStatus> = ids
                        .iter()
                        .zip(got)
                        .map(|(id, s)| {
                            s.unwrap_or_else(|| LabelStatus::new(*id, LabelState::Queued))
                        })
                        .collect();
                    let fin: Vec<&[u8]> = out
                        .iter()
                        .zip(&hex)
                        .filter(|(s, _)| s.state.is_final())
                        .map(|(_, h)| h.as_bytes())
                        .collect();
                    for chunk in fin.chunks(512) {
                        self.link
                            .script::<i64>(&self.scripts.forget, &[&self.p], chunk)
                            .await?;
                    }
                    return Ok(out);
                }
                let nap = (deadline - now).min(WAIT_POLL);
                let woken = tokio::time::timeout(nap, waiter.notify.notified())
                    .await
                    .is_ok();
                // A wake-up removed our registration for the labels it
                // named: register again before re-reading them. Without
                // one (a lost subscription), re-read everything pending.
                look = if woken {
                    let fired = std::mem::take(&mut *waiter.fired.lock());
                    let mut look: Vec<usize> = fired
                        .iter()
                        .filter_map(|h| at.get(h.as_str()))
                        .flatten()
                        .copied()
                        .filter(|&i| !got[i].as_ref().is_some_and(|s| s.state.is_final()))
                        .collect();
                    look.sort_unstable();
                    look.dedup();
                    look
                } else {
                    pending
                };
                self.watch(look.iter().map(|&i| &hex[i]), &waiter);
            }
        }
        .await;
        self.unwatch(&hex, &waiter);
        result
    }

    async fn label_count(&self) -> Result<usize> {
        let n: u64 = self
            .link
            .script(&self.scripts.label_count, &[&self.p], &[])
            .await?;
        Ok(n as usize)
    }

    async fn put_worker(&self, status: WorkerStatus) -> Result<()> {
        self.link
            .cmd::<i64>(
                redis::cmd("HSET")
                    .arg(format!("{}workers", self.p))
                    .arg(status.spec.id)
                    .arg(encode(&status)),
            )
            .await?;
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerStatus>> {
        let all: Vec<(u32, Vec<u8>)> = self
            .link
            .cmd(redis::cmd("HGETALL").arg(format!("{}workers", self.p)))
            .await?;
        // Each worker writes its record again at start and on every
        // heartbeat; one in an older format is skipped, not an error that
        // would blind the manager to every other worker.
        let mut out: Vec<(u32, WorkerStatus)> = all
            .into_iter()
            .filter_map(
                |(id, b)| match self.decode_at(&format!("workers[{id}]"), &b) {
                    Ok(w) => Some((id, w)),
                    Err(e) => {
                        tracing::warn!("skipping worker {id} record: {e}");
                        None
                    }
                },
            )
            .collect();
        out.sort_by_key(|(id, _)| *id);
        Ok(out.into_iter().map(|(_, w)| w).collect())
    }

    /// Removing an unknown worker is not an error.
    async fn remove_worker(&self, id: WorkerId) -> Result<()> {
        self.link
            .cmd::<i64>(redis::cmd("HDEL").arg(format!("{}workers", self.p)).arg(id))
            .await?;
        Ok(())
    }

    async fn ask_stack(&self, id: WorkerId, stack: Vec<String>) -> Result<()> {
        self.link
            .cmd::<i64>(
                redis::cmd("HSET")
                    .arg(format!("{}stacks", self.p))
                    .arg(id)
                    .arg(encode(&stack)),
            )
            .await?;
        Ok(())
    }

    async fn take_stack(&self, id: WorkerId) -> Result<Option<Vec<String>>> {
        let key = format!("{}stacks", self.p);
        let taken: Option<Vec<u8>> = self
            .link
            .script(
                &self.scripts.take_field,
                &[&key],
                &[id.to_string().as_bytes()],
            )
            .await?;
        taken
            .map(|b| self.decode_at(&format!("stacks[{id}]"), &b))
            .transpose()
    }

    async fn put_app(&self, app: AppRecord) -> Result<()> {
        self.link
            .cmd::<i64>(
                redis::cmd("HSET")
                    .arg(format!("{}apps", self.p))
                    .arg(app.id)
                    .arg(encode(&app)),
            )
            .await?;
        Ok(())
    }

    async fn put_function(&self, app: AppId, name: &str, module: Option<Bytes>) -> Result<()> {
        let key = format!("{}functions:{app}", self.p);
        match module {
            Some(m) => self
                .link
                .cmd::<i64>(redis::cmd("HSET").arg(key).arg(name).arg(m.as_ref()))
                .await
                .map(drop),
            None => self
                .link
                .cmd::<i64>(redis::cmd("HDEL").arg(key).arg(name))
                .await
                .map(drop),
        }
    }

    async fn function(&self, app: AppId, name: &str) -> Result<Option<Bytes>> {
        let v: Option<Vec<u8>> = self
            .link
            .cmd(
                redis::cmd("HGET")
                    .arg(format!("{}functions:{app}", self.p))
                    .arg(name),
            )
            .await?;
        Ok(v.map(Bytes::from))
    }

    async fn functions(&self, app: AppId) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .link
            .cmd(redis::cmd("HKEYS").arg(format!("{}functions:{app}", self.p)))
            .await?;
        names.sort();
        Ok(names)
    }

    async fn app(&self, id: AppId) -> Result<Option<AppRecord>> {
        let v: Option<Vec<u8>> = self
            .link
            .cmd(redis::cmd("HGET").arg(format!("{}apps", self.p)).arg(id))
            .await?;
        v.map(|b| self.decode_at(&format!("apps[{id}]"), &b))
            .transpose()
    }

    async fn apps(&self) -> Result<Vec<AppRecord>> {
        let all: Vec<(u32, Vec<u8>)> = self
            .link
            .cmd(redis::cmd("HGETALL").arg(format!("{}apps", self.p)))
            .await?;
        let mut out: Vec<(u32, AppRecord)> = all
            .into_iter()
            .map(|(id, b)| Ok((id, self.decode_at(&format!("apps[{id}]"), &b)?)))
            .collect::<Result<_>>()?;
        out.sort_by_key(|(id, _)| *id);
        Ok(out.into_iter().map(|(_, a)| a).collect())
    }

    async fn next_id(&self, counter: &str) -> Result<u64> {
        self.link
            .cmd(
                redis::cmd("HINCRBY")
                    .arg(format!("{}ctr", self.p))
                    .arg(counter)
                    .arg(1),
            )
            .await
    }

    /// The session's lease lives `redis.hold_lease_ms` past its last
    /// renewal: a killed client's files are dropped by the next
    /// [`Inventory::drop_unheld`] after that (the manager's).
    async fn hold(&self, file: FileId, session: u64) -> Result<bool> {
        let (id, s) = (file.to_string(), session.to_string());
        let lease = (self.hold_lease.as_millis() as u64).to_string();
        self.run(
            &self.scripts.hold,
            &[id.as_bytes(), s.as_bytes(), lease.as_bytes()],
        )
        .await?;
        self.count_hold(session);
        Ok(true)
    }

    async fn let_go(&self, file: FileId, session: u64) -> Result<Option<FileMeta>> {
        let (id, s) = (file.to_string(), session.to_string());
        let v = self
            .run(&self.scripts.let_go, &[id.as_bytes(), s.as_bytes()])
            .await?;
        self.count_let_go(session, false);
        v.first().map(|r| self.meta(r)).transpose()
    }

    async fn let_go_session(&self, session: u64) -> Result<Vec<FileMeta>> {
        let s = session.to_string();
        let v = self
            .run(&self.scripts.let_go_session, &[s.as_bytes()])
            .await?;
        self.count_let_go(session, true);
        self.metas(&v, 0)
    }

    async fn drop_unheld(&self) -> Result<Vec<FileMeta>> {
        let v = self.run(&self.scripts.drop_unheld, &[]).await?;
        self.metas(&v, 0)
    }

    /// Durability is Redis's own (append-only file, see the module doc):
    /// this only checks that the server answers.
    async fn sync(&self) -> Result<()> {
        self.link.cmd::<String>(&redis::cmd("PING")).await?;
        Ok(())
    }
}
