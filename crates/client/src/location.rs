//! Where a file's bytes are (WOSS's location exposed to a scheduler;
//! README "Hints"): each extent with its worker, tier and host, as
//! `Client::locate`, `labios locate` and the attribute
//! `user.labios.location` give it.

use labios_label::{WorkerId, WorkerStatus};
use labios_store::Extent;

/// The virtual attribute that reads a file's location; it is computed at
/// each read, never stored, listed or set.
pub const ATTRIBUTE: &str = "user.labios.location";

/// A run of a file's bytes on one worker, and where that is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub offset: u64,
    pub len: u64,
    pub worker: WorkerId,
    /// The worker's tier and host; empty for a worker no longer known.
    pub tier: String,
    pub host: String,
}

impl Location {
    /// The locations of `extents` (in offset order), given the workers'
    /// statuses: adjacent extents on one worker make one run, so that a
    /// file written label by label to one worker is one line, not one per
    /// label.
    pub fn of(extents: &[Extent], workers: &[WorkerStatus]) -> Vec<Location> {
        let mut out: Vec<Location> = Vec::new();
        for e in extents {
            if let Some(last) = out.last_mut() {
                if last.worker == e.worker && last.offset + last.len == e.offset {
                    last.len += e.len;
                    continue;
                }
            }
            let w = workers.iter().find(|w| w.spec.id == e.worker);
            out.push(Location {
                offset: e.offset,
                len: e.len,
                worker: e.worker,
                tier: w.map(|w| w.spec.tier.clone()).unwrap_or_default(),
                host: w.map(|w| w.host.clone()).unwrap_or_default(),
            });
        }
        out
    }

    /// Lines `OFFSET LEN WORKER TIER HOST`, one per extent (`-` for an
    /// unknown tier or host), as the attribute and `labios locate` give
    /// them: a shell script reads them with `while read`.
    pub fn lines(all: &[Location]) -> String {
        let or_dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        all.iter()
            .map(|l| {
                format!(
                    "{} {} {} {} {}\n",
                    l.offset,
                    l.len,
                    l.worker,
                    or_dash(&l.tier),
                    or_dash(&l.host)
                )
            })
            .collect()
    }
}
