//! The three shared structures of LABIOS (article 3.3): the label queue, the
//! warehouse (data) and the inventory (metadata). Each is a trait so that
//! client, core and server code is written once and runs on the embedded
//! implementations (`embedded`), through a `labios serve` process (`remote`)
//! or on distributed engines.

pub mod access;
pub mod auth;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod embedded;
pub mod faults;
pub mod inventory;
pub mod label_queue;
pub mod locks;
pub mod remote;
pub mod warehouse;

pub use auth::LabelVerifier;
pub use inventory::{
    AppRecord, Extent, FileKind, FileMeta, Inventory, Named, Owner, Presence, ReadPlan, RenameHow,
    SetAttr, SetTime, XattrCond, NO_ATTRIBUTE,
};
pub use label_queue::{Delivery, LabelQueue};
pub use warehouse::{PutAnswer, Warehouse};

use std::sync::Arc;

/// The handles every component needs, in whatever deployment.
#[derive(Clone)]
pub struct Stores {
    pub labels: Arc<dyn LabelQueue<labios_label::Label>>,
    pub tasks: Arc<dyn LabelQueue<labios_label::Task>>,
    pub warehouse: Arc<dyn Warehouse>,
    pub inventory: Arc<dyn Inventory>,
    /// File locks (`fcntl`, `flock`), held across processes and hosts.
    pub locks: Arc<dyn locks::Locks>,
}

/// Client label queues are named `labels.<application id>`.
pub const CLIENT_QUEUE_PREFIX: &str = "labels.";

/// Name of the queue a client publishes into for application `app`.
pub fn client_queue(app: labios_label::AppId) -> String {
    format!("{CLIENT_QUEUE_PREFIX}{app}")
}

/// Frees the bytes of files that went with their last holder when no
/// client of theirs is left to do it (`labios serve` for a closed
/// connection, the manager for a lapsed lease): a delete label per file
/// and worker, each worker freeing what the inventory no longer gives it,
/// published into application `app`'s queue and signed with its `secret`
/// (unsigned when empty), ids from origin `origin`.
pub async fn free_files(
    stores: &Stores,
    files: &[FileMeta],
    app: labios_label::AppId,
    secret: &str,
    origin: u64,
) -> labios_label::Result<()> {
    use labios_label::{Label, LabelIdGen, LabelKind, Pointer, StateFlags};
    if files.is_empty() {
        return Ok(());
    }
    let workers = stores.inventory.workers().await?;
    let ids = LabelIdGen::new(origin);
    let mut labels = Vec::with_capacity(files.len() * workers.len());
    for file in files {
        for w in &workers {
            let mut label = Label::new(ids.next(), LabelKind::Delete, app);
            label.flags = StateFlags::default().with(StateFlags::QUEUED);
            label.source = Pointer::File {
                path: file.path.clone(),
                file: file.id,
                offset: 0,
                len: 0,
            };
            label.destination = Pointer::Worker(w.spec.id);
            if !secret.is_empty() {
                labios_label::auth::sign(&mut label, secret.as_bytes());
            }
            labels.push(label);
        }
    }
    stores.labels.push(&client_queue(app), labels).await
}

/// Name of a worker's own queue (article 3.3.3b: the manager hosts them).
pub fn worker_queue(worker: labios_label::WorkerId) -> String {
    format!("worker.{worker}")
}
