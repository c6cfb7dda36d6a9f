//! Labels executed twice. A queue hands a task out again when it was not
//! acknowledged: its worker died after executing it (a worker acknowledges
//! only after every label is final), or a dispatcher died after queueing it
//! to a worker but before acknowledging the labels it came from, and a new
//! dispatcher queues the same labels again. Re-executing is idempotent for
//! the bytes, except that a write's warehouse data is deleted once its
//! extents are committed: the second execution fails for want of its data,
//! and that failure must not overwrite the first execution's success.

use labios_label::{Label, LabelKind, LabelState, LabelStatus, Pointer, Result};
use labios_store::Stores;

/// Whether `label` already took effect; if so, the final status to keep
/// (its recorded one, or Complete for a write that died before recording
/// it). A write took effect if its warehouse data is gone and every byte of
/// its range belongs to it or to a newer label in the inventory.
pub(crate) async fn took_effect(stores: &Stores, label: &Label) -> Result<Option<LabelStatus>> {
    let inventory = &stores.inventory;
    if let Some(status) = inventory.status(label.id).await? {
        if status.state.is_final() {
            return Ok(Some(status));
        }
    }
    let (LabelKind::Write, Pointer::Warehouse { key, .. }, Some((file, offset, len))) =
        (label.kind, &label.source, label.destination.file())
    else {
        return Ok(None);
    };
    if stores.warehouse.get(key).await?.is_some() {
        return Ok(None);
    }
    let mut extents: Vec<_> = inventory
        .extents(file, offset, len)
        .await?
        .into_iter()
        .filter(|e| e.label >= label.id)
        .collect();
    extents.sort_by_key(|e| e.offset);
    let mut covered = offset;
    let mut by = None;
    for e in &extents {
        if e.offset > covered {
            break;
        }
        covered = covered.max(e.offset.saturating_add(e.len));
        if e.label == label.id {
            by = Some(e.worker);
        }
    }
    if covered < offset.saturating_add(len) {
        return Ok(None);
    }
    Ok(Some(LabelStatus {
        worker: by,
        ..LabelStatus::new(label.id, LabelState::Complete)
    }))
}
