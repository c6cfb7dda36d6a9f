//! File locks as programs take them (`fcntl`, `flock`, `lockf`): a lock
//! call goes to the deployment's lock service; a call that waits
//! (`F_SETLKW`, `flock` without `LOCK_NB`) asks again until it is granted,
//! refused as a deadlock, or cancelled by its owner's release (a close).

use super::Client;
use labios_label::{Error, FileId, Result};
use labios_store::locks::{HeldLock, Holder, LockKind, LockRequest, LockSpace};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Ends the message of a wait cancelled by its owner's release (EINTR).
pub const INTERRUPTED: &str = "interrupted";

/// First and longest pause between two attempts of a waiting lock call.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(50);

/// One lock call, as a program makes it.
#[derive(Debug, Clone, Copy)]
pub struct LockCall {
    pub file: FileId,
    pub space: LockSpace,
    /// A process (fcntl), an open file description (flock, OFD locks) or
    /// the kernel's lock owner (the mount); unique within this client.
    pub owner: u64,
    pub pid: u32,
    /// `None` unlocks.
    pub kind: Option<LockKind>,
    pub start: u64,
    /// Last byte, inclusive ([`labios_store::locks::TO_EOF`]).
    pub end: u64,
}

/// A waiting lock call, cancelled by a release of its owner.
pub(super) struct Waiter {
    file: FileId,
    owner: u64,
    cancelled: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Client {
    fn lock_request(&self, c: &LockCall, waiting: bool) -> LockRequest {
        LockRequest {
            file: c.file,
            space: c.space,
            holder: Holder {
                session: self.inner.origin,
                owner: c.owner,
            },
            pid: c.pid,
            kind: c.kind,
            start: c.start,
            end: c.end,
            waiting,
        }
    }

    /// Takes, changes or releases a lock; `wait` waits while another owner
    /// holds a conflicting one.
    pub async fn lock(&self, c: LockCall, wait: bool) -> Result<()> {
        let locks = self.inner.stores.locks.clone();
        if !wait || c.kind.is_none() {
            return locks.lock(&self.lock_request(&c, false)).await;
        }
        let me = Arc::new(Waiter {
            file: c.file,
            owner: c.owner,
            cancelled: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        });
        self.inner.lock_waiters.lock().push(me.clone());
        let r = self.lock_request(&c, true);
        let mut pause = FIRST_PAUSE;
        let out = loop {
            match locks.lock(&r).await {
                Err(Error::Locked(m)) if !m.ends_with(labios_store::locks::DEADLOCK) => {}
                done => break done,
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = me.wake.notified() => {}
            }
            if me.cancelled.load(Ordering::Acquire) {
                break Err(Error::Locked(format!(
                    "waiting for a lock on file {}: the owner closed the file, {INTERRUPTED}",
                    c.file
                )));
            }
            pause = (pause * 2).min(LONGEST_PAUSE);
        };
        self.inner
            .lock_waiters
            .lock()
            .retain(|w| !Arc::ptr_eq(w, &me));
        out
    }

    /// The lock that keeps `c` from being granted (`F_GETLK`).
    pub async fn lock_conflict(&self, c: LockCall) -> Result<Option<HeldLock>> {
        self.inner
            .stores
            .locks
            .conflict(&self.lock_request(&c, false))
            .await
    }

    /// Releases what `owner` holds on `file` (a close) and cancels its
    /// waits there.
    pub async fn unlock_owner(&self, owner: u64, file: FileId) -> Result<()> {
        for w in self.inner.lock_waiters.lock().iter() {
            if w.owner == owner && w.file == file {
                w.cancelled.store(true, Ordering::Release);
                w.wake.notify_one();
            }
        }
        self.inner
            .stores
            .locks
            .release(self.inner.origin, Some(owner), Some(file))
            .await
    }
}
