//! Files a client holds open: POSIX keeps an unlinked file, its data and
//! its id, until its last descriptor closes. The preload and the mount
//! hold a file for each descriptor or open they give out; the inventory
//! counts sessions, this client counts its own opens.

use super::Client;
use labios_label::{FileId, LabelKind, Result};

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
        // Held across the inventory call, so that a first hold and a last
        // let-go of one file reach the inventory in the order they count.
        let mut held = self.inner.held.lock().await;
        if let Some(n) = held.get_mut(&file) {
            *n += 1;
            return Ok(());
        }
        self.inner
            .catalog
            .inventory()
            .hold(file, self.inner.origin)
            .await?;
        held.insert(file, 1);
        Ok(())
    }

    /// Ends one [`Client::hold`] of `file`. With the last, a file whose
    /// last name went meanwhile goes too and its bytes are freed in the
    /// background, as after a remove.
    pub async fn let_go(&self, file: FileId) -> Result<()> {
        let mut held = self.inner.held.lock().await;
        match held.get_mut(&file) {
            None => return Ok(()),
            Some(n) if *n > 1 => {
                *n -= 1;
                return Ok(());
            }
            Some(_) => {
                held.remove(&file);
            }
        }
        let gone = self
            .inner
            .catalog
            .inventory()
            .let_go(file, self.inner.origin)
            .await?;
        drop(held);
        if let Some(meta) = gone {
            self.publish_to_every_worker(LabelKind::Delete, &meta)
                .await?;
        }
        Ok(())
    }
}
