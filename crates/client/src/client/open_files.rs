//! Files a client holds open: POSIX keeps an unlinked file, its data and
//! its id, until its last descriptor closes. The preload and the mount
//! hold a file for each descriptor or open they give out; the inventory
//! counts sessions, this client counts its own opens.
//!
//! Each file's count has a lock of its own, held across the inventory
//! call that a first hold or a last let-go makes: the calls for one file
//! reach the inventory in the order they count, while other files' opens
//! and closes go on. The last let-go runs in the background (a close
//! need not wait for it); a hold of the same file meanwhile waits for it.

use super::Client;
use labios_label::{FileId, LabelKind, Result};
use std::sync::Arc;

/// One file's hold count.
pub(super) type Slot = Arc<tokio::sync::Mutex<u32>>;

impl Client {
    /// Keeps `file` whole while it is open here: when its last name goes
    /// meanwhile (this client's remove or anyone's), it stays reachable by
    /// id, with its data and `nlink` 0, until the matching
    /// [`Client::let_go`]. Counted: only the first hold of a file asks the
    /// inventory. A missing file is `NotFound`.
    ///
    /// The hold is this client's session's: it ends with the client (its
    /// connection to `labios serve` closing, or its Redis lease lapsing
    /// when its process dies), and a file kept for it alone then goes.
    pub async fn hold(&self, file: FileId) -> Result<()> {
        let slot = self.inner.held.lock().entry(file).or_default().clone();
        let mut count = slot.lock().await;
        if *count == 0 {
            let held = self
                .inner
                .catalog
                .inventory()
                .hold(file, self.inner.origin)
                .await;
            if let Err(e) = held {
                drop(count);
                self.forget_slot(file, &slot);
                return Err(e);
            }
        }
        *count += 1;
        Ok(())
    }

    /// Ends one [`Client::hold`] of `file`. With the last, a file whose
    /// last name went meanwhile goes too and its bytes are freed, both in
    /// the background: this returns at once.
    pub async fn let_go(&self, file: FileId) -> Result<()> {
        let Some(slot) = self.inner.held.lock().get(&file).cloned() else {
            return Ok(());
        };
        let mut count = slot.clone().lock_owned().await;
        if *count != 1 {
            *count = count.saturating_sub(1);
            return Ok(());
        }
        let client = self.clone();
        tokio::spawn(async move {
            let gone = client
                .inner
                .catalog
                .inventory()
                .let_go(file, client.inner.origin)
                .await;
            *count = 0;
            drop(count);
            client.forget_slot(file, &slot);
            let freed = match gone {
                Ok(Some(meta)) => client
                    .publish_to_every_worker(LabelKind::Delete, &meta)
                    .await
                    .map(drop),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            // The session's end lets go of what a failure here left held.
            if let Err(e) = freed {
                tracing::warn!(file, "letting go of an open file: {e}");
            }
        });
        Ok(())
    }

    /// Drops the count of `file` once nobody holds or waits for it: only
    /// the map and `slot` refer to it, and it is 0.
    fn forget_slot(&self, file: FileId, slot: &Slot) {
        let mut held = self.inner.held.lock();
        let idle = Arc::strong_count(slot) == 2 && slot.try_lock().is_ok_and(|n| *n == 0);
        if idle && held.get(&file).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            held.remove(&file);
        }
    }
}
