//! Makes a request's permission check and its change one step, as the
//! kernel does by holding a directory's lock across both: without it, a
//! `chmod` of a directory, or a rename that changes what a name points to,
//! landing between the check of a request and its change could let the
//! request through on what was true a moment before.
//!
//! Every change of the namespace or of an entry's attributes (what checks
//! read) runs alone; the checked requests of users that act on what those
//! changes change run together with each other, between such changes.
//! Everything else takes no part: requests nobody checks (label statuses,
//! waits, warehouse keys, queue pulls), and checked ones that may wait
//! without bound once checked (a blocking record lock, a label push under
//! backpressure), which held in the order would stop every namespace
//! change behind them. Those are checks of a file by id, as the kernel
//! checks a descriptor's access when it is opened, and a mode change after
//! the check does not undo them there either.
//!
//! The order is kept by one `labios serve` process: every request of the
//! embedded deployment and of a node gateway (`labios serve` over a
//! distributed deployment) passes through one.

use super::proto::Request;
use crate::inventory::Named;
use std::sync::Arc;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// One server's order of checks and changes.
#[derive(Clone, Default)]
pub struct CheckOrder(Arc<RwLock<()>>);

/// A request's place in the order, held until its change is made.
pub enum Turn {
    /// A change of what checks read: nothing else checked runs meanwhile.
    Alone {
        _held: OwnedRwLockWriteGuard<()>,
    },
    /// A checked request that changes nothing checks read.
    Shared {
        _held: OwnedRwLockReadGuard<()>,
    },
    Free,
}

impl CheckOrder {
    /// Waits for `request`'s turn; `checked` when its sender's requests
    /// are checked (a user's, not a trusted connection's).
    pub async fn turn(&self, request: &Request, checked: bool) -> Turn {
        if changes_what_checks_read(request) {
            Turn::Alone {
                _held: self.0.clone().write_owned().await,
            }
        } else if checked && acts_on_what_changes_change(request) {
            Turn::Shared {
                _held: self.0.clone().read_owned().await,
            }
        } else {
            Turn::Free
        }
    }
}

/// Namespace changes and attribute changes: what permission checks read
/// (modes, owners, and which entry a path names).
fn changes_what_checks_read(request: &Request) -> bool {
    matches!(
        request,
        Request::Create { .. }
            | Request::Symlink { .. }
            | Request::Link { .. }
            | Request::Remove { .. }
            | Request::Rename { .. }
            | Request::SetAttr { .. }
    )
}

/// Checked requests whose check and effect read names, modes or owners,
/// and whose effect is short: a look-up or listing through directories,
/// an open, a size change, an append's reservation, an extended attribute.
fn acts_on_what_changes_change(request: &Request) -> bool {
    matches!(
        request,
        Request::Lookup { .. }
            | Request::ReadPlan {
                named: Named::Path(_),
                ..
            }
            | Request::List { .. }
            | Request::Open { .. }
            | Request::SetSize { .. }
            | Request::ReserveAppend { .. }
            | Request::SetXattr { .. }
    )
}
