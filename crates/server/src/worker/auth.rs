//! Who may use a worker (LabStor's permission LabMod, tunable per stack;
//! README "Worker I/O stacks"): every check a worker makes on a label
//! before its stack is called, in one place, above the `Backend` trait
//! (whose calls name files, not callers).
//!
//! Every worker runs a label only if its owner signed it, its warehouse
//! entries are under the owner's prefix, and the files it touches belong
//! to the owner. A stack that names `auth:A+B` also keeps the worker to
//! applications A and B, and a live change of stack changes that between
//! two labels.

use labios_label::{AppId, FileId, Label, LabelKind, Pointer, WorkerId};
use labios_stack::live::Live;
use labios_store::{LabelVerifier, Stores};
use std::collections::HashMap;
use std::sync::Arc;

/// File owners remembered at most; the cache is emptied when it is full.
const OWNERS_CACHED: usize = 1 << 16;

/// A label-level refusal: the label is Failed with this text.
type Refusal = String;

/// The checks of one worker.
pub(super) struct Guard {
    worker: WorkerId,
    /// Label signatures are checked again here (README "Tenants"): a worker
    /// queue may be reachable without going through a dispatcher.
    verifier: LabelVerifier,
    stores: Stores,
    /// The stack whose `auth` module says which applications it admits.
    stack: Arc<Live>,
    /// Owner of each file id seen (an owner never changes and ids are not
    /// reused), so the ownership check costs an inventory lookup per file,
    /// not per label.
    owners: parking_lot::Mutex<HashMap<FileId, AppId>>,
}

impl Guard {
    pub(super) fn new(worker: WorkerId, stores: Stores, stack: Arc<Live>) -> Guard {
        Guard {
            worker,
            verifier: LabelVerifier::new(stores.inventory.clone()),
            stores,
            stack,
            owners: Default::default(),
        }
    }

    /// The label's owner signed it and its warehouse entries are the
    /// owner's. A label refused here may name another application's
    /// entries: the caller leaves them alone.
    pub(super) async fn signed(&self, label: &Label) -> Result<(), Refusal> {
        self.verifier
            .verify(label)
            .await
            .map_err(|e| e.to_string())?;
        let prefix = format!("a{}/", label.owner);
        for p in [&label.source, &label.destination] {
            if let Pointer::Warehouse { key, .. } = p {
                if !key.starts_with(&prefix) {
                    return Err(format!(
                        "permission denied: warehouse entry {key} belongs to another application"
                    ));
                }
            }
        }
        Ok(())
    }

    /// A [`Self::signed`] label may run here: the stack admits its owner
    /// and the files it touches are the owner's. A delete or a flush of a
    /// LABIOS file runs for the file's owner whatever the stack admits:
    /// they bring no bytes in, a worker closed to an application still
    /// gives back the space its earlier files hold, and a client's `fsync`
    /// reaches every worker. A delete of external storage is the stack's to
    /// admit, as any other change there.
    pub(super) async fn may_run(&self, label: &Label) -> Result<(), Refusal> {
        let external_delete =
            label.kind == LabelKind::Delete && matches!(label.source, Pointer::Uri { .. });
        let admitted = (matches!(label.kind, LabelKind::Delete | LabelKind::Flush)
            && !external_delete)
            || self.stack.admits(label.owner);
        if !admitted {
            return Err(format!(
                "permission denied: worker {}'s stack ({}) does not admit application {}",
                self.worker,
                self.stack.spec(),
                label.owner
            ));
        }
        for p in [&label.source, &label.destination] {
            let Pointer::File { path, file, .. } = p else {
                continue;
            };
            if self
                .owner(path, *file)
                .await?
                .is_some_and(|o| o != label.owner)
            {
                return Err(format!(
                    "permission denied: {path} belongs to another application"
                ));
            }
        }
        Ok(())
    }

    /// The owner of `file` (by id when the label names one; the rename
    /// target names none, so by `path`). A file already gone from the
    /// inventory has no owner left to protect (a delete after removal).
    async fn owner(&self, path: &str, file: FileId) -> Result<Option<AppId>, Refusal> {
        if file == 0 {
            let meta = self.stores.inventory.lookup(path).await;
            return Ok(meta.map_err(|e| e.to_string())?.map(|m| m.owner));
        }
        if let Some(owner) = self.owners.lock().get(&file).copied() {
            return Ok(Some(owner));
        }
        let meta = self.stores.inventory.file(file).await;
        let owner = meta.map_err(|e| e.to_string())?.map(|m| m.owner);
        if let Some(owner) = owner {
            let mut owners = self.owners.lock();
            if owners.len() >= OWNERS_CACHED {
                owners.clear();
            }
            owners.insert(file, owner);
        }
        Ok(owner)
    }
}
