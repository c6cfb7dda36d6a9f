//! File locks on Redis, for the distributed deployment: every client
//! process on every host sees one lock table.
//!
//! The rules are [`labios_store::locks`]'s, applied in the client: it reads
//! a file's locks (`{ns}:lock:<file>`) and the wait graph (`{ns}:lockwaits`)
//! in one `MGET`, decides, and writes the result back only if neither
//! changed meanwhile (one compare-and-set script; a lost race is tried
//! again). A session lives while its lease key (`{ns}:lease:<session>`)
//! does: this process renews it every [`RENEW`] while the session holds or
//! waits for locks, so a killed process's locks are dropped by the next
//! call that meets them at most [`LEASE`] later.

use super::{Link, RedisConfig};
use labios_label::codec::{decode, encode};
use labios_label::{Error, FileId, Result};
use labios_store::locks::{
    decide, released, FileLocks, HeldLock, Holder, LockRequest, Locks, WaitGraph,
};
use parking_lot::Mutex;
use redis::Script;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// How long a session's locks outlive its last renewal.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often a live session renews its lease.
const RENEW: Duration = Duration::from_secs(2);
/// Compare-and-set rounds before a call gives up (each lost round means
/// another client changed the same locks in between).
const ROUNDS: usize = 1000;

/// Writes KEYS[1] (the file's locks) and KEYS[2] (the wait graph) if they
/// still hold ARGV[1] and ARGV[3] ("" for absent); an empty new value
/// deletes. ARGV[5] = "1" when the graph is to be written. A non-empty
/// ARGV[6] (a file id) joins the set KEYS[3] of the files a session may
/// hold locks on, which then lives ARGV[7] ms as its lease does: in the
/// same step, so that no lock is ever missing from its holder's set.
const CAS: &str = r#"
local function cur(k) return redis.call('GET', k) or '' end
if cur(KEYS[1]) ~= ARGV[1] or cur(KEYS[2]) ~= ARGV[3] then return 0 end
local function put(k, v) if v == '' then redis.call('DEL', k) else redis.call('SET', k, v) end end
put(KEYS[1], ARGV[2])
if ARGV[5] == '1' then put(KEYS[2], ARGV[4]) end
if ARGV[6] ~= '' then
  redis.call('SADD', KEYS[3], ARGV[6])
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
return 1
"#;

pub struct RedisLocks {
    link: Link,
    /// `{ns}:`
    p: String,
    cas: Script,
    /// Lease renewals of this process's sessions.
    leases: Arc<Mutex<HashMap<u64, tokio::task::JoinHandle<()>>>>,
}

impl Drop for RedisLocks {
    fn drop(&mut self) {
        for (_, h) in self.leases.lock().drain() {
            h.abort();
        }
    }
}

/// A snapshot of one file's locks and the graph, as read.
struct Snapshot {
    locks_raw: Vec<u8>,
    graph_raw: Vec<u8>,
    locks: FileLocks,
    graph: WaitGraph,
}

impl RedisLocks {
    pub async fn connect(cfg: &RedisConfig) -> Result<Self> {
        super::check_urls(cfg)?;
        let (link, _) = if cfg.cluster {
            super::connect_cluster(cfg).await?
        } else {
            super::connect_one(cfg, &cfg.urls[0]).await?
        };
        Ok(RedisLocks {
            link,
            p: format!("{{{}}}:", cfg.namespace),
            cas: Script::new(CAS),
            leases: Arc::default(),
        })
    }

    fn lock_key(&self, file: FileId) -> String {
        format!("{}lock:{file:016x}", self.p)
    }

    fn graph_key(&self) -> String {
        format!("{}lockwaits", self.p)
    }

    fn lease_key(p: &str, session: u64) -> String {
        format!("{p}lease:{session:016x}")
    }

    /// Starts renewing `session`'s lease (once per session), after writing
    /// it, so that a lock never exists before the lease that keeps it.
    async fn keep_alive(&self, session: u64) -> Result<()> {
        if self.leases.lock().contains_key(&session) {
            return Ok(());
        }
        let keys = [Self::lease_key(&self.p, session), self.files_key(session)];
        renew(&self.link, &keys).await?;
        let link = self.link.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(RENEW).await;
                if let Err(e) = renew(&link, &keys).await {
                    tracing::warn!("renewing the lock lease {}: {e}", keys[0]);
                }
            }
        });
        if let Some(old) = self.leases.lock().insert(session, task) {
            old.abort();
        }
        Ok(())
    }

    async fn read(&self, file: FileId) -> Result<Snapshot> {
        let mut cmd = redis::cmd("MGET");
        cmd.arg(self.lock_key(file)).arg(self.graph_key());
        let got: Vec<Option<Vec<u8>>> = self.link.cmd(&cmd).await?;
        let mut got = got.into_iter();
        let locks_raw = got.next().flatten().unwrap_or_default();
        let graph_raw = got.next().flatten().unwrap_or_default();
        let value = |what: &str, e: Error| {
            Error::Malformed(format!(
                "Redis at {}: {what} of file {file}: {e}",
                self.link.addr
            ))
        };
        let locks = match locks_raw.as_slice() {
            [] => FileLocks::default(),
            b => decode(b).map_err(|e| value("locks", e))?,
        };
        let graph = match graph_raw.as_slice() {
            [] => WaitGraph::default(),
            b => decode(b).map_err(|e| value("lock waits", e))?,
        };
        let mut s = Snapshot {
            locks_raw,
            graph_raw,
            locks,
            graph,
        };
        self.drop_dead(&mut s).await?;
        Ok(s)
    }

    /// Forgets the locks and waits of sessions whose lease ran out.
    async fn drop_dead(&self, s: &mut Snapshot) -> Result<()> {
        let mut sessions: BTreeSet<u64> = s.locks.sessions();
        sessions.extend(
            s.graph
                .waits
                .iter()
                .flat_map(|(w, b)| std::iter::once(w.session).chain(b.iter().map(|h| h.session))),
        );
        if sessions.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for &session in &sessions {
            pipe.exists(Self::lease_key(&self.p, session));
        }
        let alive: Vec<bool> = self.link.pipe(&pipe).await?;
        let dead: BTreeSet<u64> = sessions
            .into_iter()
            .zip(alive)
            .filter(|(_, a)| !a)
            .map(|(s, _)| s)
            .collect();
        if !dead.is_empty() {
            s.locks.release(|h| dead.contains(&h.session));
            s.graph.release(|h| dead.contains(&h.session));
        }
        Ok(())
    }

    /// Writes the snapshot's new state if what it was read from is still
    /// there, adding `file` to the files of session `holder` if given;
    /// false when another client changed it first.
    async fn write(&self, file: FileId, s: &Snapshot, holder: Option<u64>) -> Result<bool> {
        let locks = if s.locks.locks.is_empty() {
            Vec::new()
        } else {
            encode(&s.locks)
        };
        let graph = if s.graph.waits.is_empty() {
            Vec::new()
        } else {
            encode(&s.graph)
        };
        if locks == s.locks_raw && graph == s.graph_raw {
            return Ok(true);
        }
        let write_graph: &[u8] = if graph == s.graph_raw { b"0" } else { b"1" };
        let (lk, gk) = (self.lock_key(file), self.graph_key());
        // Without a holder the third key is not touched.
        let (fk, member) = match holder {
            Some(session) => (self.files_key(session), file.to_string()),
            None => (gk.clone(), String::new()),
        };
        let lease = LEASE.as_millis().to_string();
        let done: i64 = self
            .link
            .script(
                &self.cas,
                &[&lk, &gk, &fk],
                &[
                    &s.locks_raw,
                    &locks,
                    &s.graph_raw,
                    &graph,
                    write_graph,
                    member.as_bytes(),
                    lease.as_bytes(),
                ],
            )
            .await?;
        Ok(done == 1)
    }

    /// Runs `change` on fresh snapshots of `file` until one is written
    /// (see [`RedisLocks::write`] for `holder`).
    async fn update<T>(
        &self,
        file: FileId,
        holder: Option<u64>,
        mut change: impl FnMut(&mut Snapshot) -> T,
    ) -> Result<T> {
        for _ in 0..ROUNDS {
            let mut s = self.read(file).await?;
            let out = change(&mut s);
            if self.write(file, &s, holder).await? {
                return Ok(out);
            }
        }
        Err(Error::Unavailable(format!(
            "Redis at {}: the locks of file {file} changed under {ROUNDS} attempts in a row",
            self.link.addr
        )))
    }

    fn files_key(&self, session: u64) -> String {
        format!("{}lockfiles:{session:016x}", self.p)
    }
}

/// Renews a session's lease `[lease, files]`: the lease key, and the set
/// of its files (if it has one), which goes with it.
async fn renew(link: &Link, [lease, files]: &[String; 2]) -> Result<()> {
    let ms = LEASE.as_millis() as u64;
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(lease).arg(1).arg("PX").arg(ms).ignore();
    pipe.cmd("PEXPIRE").arg(files).arg(ms).ignore();
    link.pipe::<()>(&pipe).await
}

#[async_trait::async_trait]
impl Locks for RedisLocks {
    async fn lock(&self, r: &LockRequest) -> Result<()> {
        // A session remembers the files it may hold locks on, for its
        // release.
        let holder = r.kind.map(|_| r.holder.session);
        if let Some(session) = holder {
            self.keep_alive(session).await?;
        }
        self.update(r.file, holder, |s| {
            decide(&mut s.locks, &mut s.graph, r).outcome
        })
        .await?
    }

    async fn conflict(&self, r: &LockRequest) -> Result<Option<HeldLock>> {
        Ok(self.read(r.file).await?.locks.conflict(r))
    }

    async fn release(&self, session: u64, owner: Option<u64>, file: Option<FileId>) -> Result<()> {
        let gone = |h: &Holder| released(h, session, owner);
        let files: Vec<FileId> = match file {
            Some(f) => vec![f],
            None => {
                let mut cmd = redis::cmd("SMEMBERS");
                cmd.arg(self.files_key(session));
                self.link.cmd(&cmd).await?
            }
        };
        for f in files {
            self.update(f, None, |s| {
                s.locks.release(gone);
                s.graph.release(gone);
            })
            .await?;
        }
        if owner.is_none() && file.is_none() {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(self.files_key(session))
                .arg(Self::lease_key(&self.p, session));
            self.link.cmd::<()>(&cmd).await?;
            if let Some(h) = self.leases.lock().remove(&session) {
                h.abort();
            }
        }
        Ok(())
    }
}
