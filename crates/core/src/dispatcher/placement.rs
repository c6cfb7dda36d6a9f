//! Placement by hints (WOSS; README "Hints"): the writes of a file whose
//! `user.labios.placement` hint says where its bytes go are pinned there,
//! and the scheduler's policy decides only what hints leave open (the
//! writes of files without one).
//!
//! Workers are chosen by rendezvous hashing (highest random weight) of a
//! key over the available workers: every dispatcher picks the same ones
//! without asking the others, and a worker joining or leaving moves only
//! the keys it wins or held. The hash is XXH3, whose output is specified,
//! so dispatchers of different builds agree too.

use bytes::Bytes;
use labios_label::hints::{self, Hint, Placement};
use labios_label::{FileId, Label, LabelId, LabelKind, WorkerId, WorkerStatus};
use labios_store::inventory::XATTRS_BATCH_MAX;
use labios_store::Inventory;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64;

/// The smallest stripe of `scatter:N` (and its stripe without a
/// `block_size` hint): the client's default largest label. A label goes
/// whole to the worker of the stripe it starts in, so stripes smaller than
/// the labels would not spread a write: labels of 1 MiB starting at 0, 1,
/// 2 MiB over stripes of 256 KiB would all start in stripes that are
/// multiples of 4.
pub const MIN_STRIPE: u64 = 1 << 20;
/// How long a file's hints, once read, decide its writes before they are
/// read again. Placement hints change only while a file is empty (no
/// extent committed), so they can be stale for writes of a file hinted
/// while earlier ones were still in flight, or truncated to nothing and
/// hinted anew.
const HINTS_TTL: Duration = Duration::from_secs(1);
/// Files whose hints the dispatcher remembers at most.
const HINTS_CACHED_MAX: usize = 1 << 16;

/// Where a file's writes go, from its hints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePlacement {
    /// `collocate` or `scatter`; `None`: stripes over every worker the
    /// tier allows.
    placement: Option<Placement>,
    /// The workers' tier or a policy (`tier` hint); `None`: any.
    tier: Option<String>,
    /// The bytes of one stripe: `block_size`, at least [`MIN_STRIPE`].
    stripe: u64,
}

impl FilePlacement {
    /// What a file's attributes ask of its placement; `None` without a
    /// `placement` or `tier` hint (`placement=local` needs the writer's
    /// host, which labels do not carry yet).
    pub fn of(xattrs: &[(String, Bytes)]) -> Option<Self> {
        let mut placement = None;
        let mut tier = None;
        let mut stripe = MIN_STRIPE;
        for (name, value) in xattrs.iter().filter(|(n, _)| hints::is_hint(n)) {
            // Hints were checked when set; one that no longer parses (a
            // newer release's) leaves the choice to the policy.
            match Hint::parse(name, value) {
                Ok(Hint::Placement(p)) if p != Placement::Local => placement = Some(p),
                Ok(Hint::Tier(t)) => tier = Some(t),
                Ok(Hint::BlockSize(size)) => stripe = size.max(MIN_STRIPE),
                _ => {}
            }
        }
        (placement.is_some() || tier.is_some()).then_some(FilePlacement {
            placement,
            tier,
            stripe,
        })
    }

    /// Whether worker `w` is of the tier the file asks for.
    pub fn serves(&self, w: &WorkerStatus) -> bool {
        self.tier
            .as_deref()
            .is_none_or(|t| hints::tier_serves(t, &w.spec.tier, w.spec.speed))
    }

    /// The worker among `workers` (ids, in any order, of the file's tier)
    /// the write at `offset` of `file` goes to; `None` if there are none.
    pub fn worker(&self, file: FileId, offset: u64, workers: &[WorkerId]) -> Option<WorkerId> {
        let width = match &self.placement {
            Some(Placement::Collocate(group)) => {
                return ranked(group.as_bytes(), workers).first().copied()
            }
            Some(Placement::Scatter(n)) => *n as usize,
            Some(Placement::Local) | None => usize::MAX,
        };
        let ranked = ranked(&file.to_le_bytes(), workers);
        let width = ranked.len().min(width);
        if width == 0 {
            return None;
        }
        let stripe = offset / self.stripe;
        Some(ranked[(stripe % width as u64) as usize])
    }
}

/// `workers` by their rendezvous weight for `key`, highest first.
fn ranked(key: &[u8], workers: &[WorkerId]) -> Vec<WorkerId> {
    let weight = |w: WorkerId| {
        let mut bytes = key.to_vec();
        bytes.extend_from_slice(&w.to_le_bytes());
        xxh3_64(&bytes)
    };
    let mut by_weight: Vec<(u64, WorkerId)> = workers.iter().map(|&w| (weight(w), w)).collect();
    by_weight.sort_unstable_by(|a, b| b.cmp(a));
    by_weight.into_iter().map(|(_, w)| w).collect()
}

/// The placements of files lately written, read from the inventory once
/// per [`HINTS_TTL`].
#[derive(Default)]
pub struct Placements {
    known: HashMap<FileId, (Instant, Option<FilePlacement>)>,
}

impl Placements {
    /// The workers the writes among `labels` go to by their files' hints,
    /// chosen among `workers` of the file's tier that `admits` lets take
    /// the label. Writes of files without a placement or tier hint are not
    /// among them; nor those no worker can take, or whose hints could not
    /// be read: the policy places them.
    pub async fn pins(
        &mut self,
        inventory: &dyn Inventory,
        labels: &[Label],
        workers: &[WorkerStatus],
        admits: impl Fn(&WorkerStatus, &Label) -> bool,
    ) -> HashMap<LabelId, WorkerId> {
        let writes: Vec<(&Label, (FileId, u64, u64))> = labels
            .iter()
            .filter(|l| l.kind == LabelKind::Write)
            .filter_map(|l| Some((l, l.destination.file()?)))
            .collect();
        if writes.is_empty() {
            return HashMap::new();
        }
        self.refresh(inventory, writes.iter().map(|(_, (file, _, _))| *file))
            .await;
        let mut pins = HashMap::new();
        for (label, (file, offset, _)) in writes {
            let Some((_, Some(placement))) = self.known.get(&file) else {
                continue;
            };
            let eligible: Vec<WorkerId> = workers
                .iter()
                .filter(|w| placement.serves(w) && admits(w, label))
                .map(|w| w.spec.id)
                .collect();
            if let Some(worker) = placement.worker(file, offset, &eligible) {
                pins.insert(label.id, worker);
            }
        }
        pins
    }

    /// Reads the hints of those of `files` not known, or known for longer
    /// than [`HINTS_TTL`]. Room for them is made first, by dropping what
    /// expired and then, if need be, what this batch does not write.
    async fn refresh(&mut self, inventory: &dyn Inventory, files: impl Iterator<Item = FileId>) {
        let now = Instant::now();
        let mut batch: Vec<FileId> = files.collect();
        batch.sort_unstable();
        batch.dedup();
        let stale: Vec<FileId> = batch
            .iter()
            .copied()
            .filter(|f| {
                self.known
                    .get(f)
                    .is_none_or(|(at, _)| now.duration_since(*at) > HINTS_TTL)
            })
            .collect();
        if stale.is_empty() {
            return;
        }
        if self.known.len() + stale.len() > HINTS_CACHED_MAX {
            self.known
                .retain(|_, (at, _)| now.duration_since(*at) <= HINTS_TTL);
        }
        if self.known.len() + stale.len() > HINTS_CACHED_MAX {
            self.known.retain(|f, _| batch.binary_search(f).is_ok());
        }
        for chunk in stale.chunks(XATTRS_BATCH_MAX) {
            match inventory.xattrs_of(chunk).await {
                Ok(all) => {
                    for (file, xattrs) in chunk.iter().zip(all) {
                        let placement = xattrs.as_deref().and_then(FilePlacement::of);
                        self.known.insert(*file, (now, placement));
                    }
                }
                Err(e) => tracing::warn!("dispatcher: cannot read the hints of written files: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hinted(pairs: &[(&str, &str)]) -> Option<FilePlacement> {
        let xattrs: Vec<(String, Bytes)> = pairs
            .iter()
            .map(|(n, v)| (format!("{}{n}", hints::PREFIX), Bytes::from(v.to_string())))
            .collect();
        FilePlacement::of(&xattrs)
    }

    #[test]
    fn only_placement_and_tier_hints_place() {
        assert_eq!(hinted(&[]), None);
        assert_eq!(hinted(&[("replicas", "2"), ("block_size", "4KiB")]), None);
        assert_eq!(hinted(&[("placement", "local")]), None);
        let cold = hinted(&[("tier", "COLD")]).unwrap();
        let status = |tier: &str, speed| {
            let mut w = crate::dispatcher::testing::worker(0, speed, 1);
            w.spec.tier = tier.into();
            w
        };
        assert!(cold.serves(&status("hdd", 1)) && !cold.serves(&status("ram", 5)));
        // A tier alone stripes over its workers.
        let used: std::collections::BTreeSet<WorkerId> = (0..8)
            .filter_map(|i| cold.worker(5, i * MIN_STRIPE, &[3, 7, 9]))
            .collect();
        assert_eq!(used.len(), 3);
        let p = hinted(&[("placement", "scatter:2"), ("block_size", "4MiB")]).unwrap();
        assert_eq!(p.stripe, 4 << 20);
        let p = hinted(&[("placement", "scatter:2"), ("block_size", "64KiB")]).unwrap();
        assert_eq!(
            p.stripe, MIN_STRIPE,
            "stripes are never smaller than labels"
        );
    }

    /// A group's files land on one worker, the same for every file and
    /// every dispatcher; groups spread over the workers.
    #[test]
    fn a_group_is_collocated() {
        let workers = [0, 1, 2, 3];
        let group = |g: &str| hinted(&[("placement", &format!("collocate:{g}"))]).unwrap();
        let one = group("g1").worker(7, 0, &workers).unwrap();
        for file in 0..50 {
            for offset in [0, 1 << 20, 1 << 30] {
                assert_eq!(group("g1").worker(file, offset, &workers), Some(one));
            }
        }
        let reordered = [3, 1, 0, 2];
        assert_eq!(group("g1").worker(9, 0, &reordered), Some(one));
        let used: std::collections::BTreeSet<WorkerId> = (0..64)
            .filter_map(|g| group(&format!("g{g}")).worker(0, 0, &workers))
            .collect();
        assert_eq!(used.len(), 4, "64 groups use every worker");
        // A worker leaving moves only the groups it held.
        let fewer = [0, 1, 3];
        for g in 0..64 {
            let before = group(&format!("g{g}")).worker(0, 0, &workers).unwrap();
            let after = group(&format!("g{g}")).worker(0, 0, &fewer).unwrap();
            assert!(before == after || before == 2, "group g{g} moved");
        }
        assert_eq!(group("g1").worker(0, 0, &[]), None);
    }

    /// `scatter:N` puts stripe i of a file on the (i mod N)-th of N
    /// workers chosen for the file.
    #[test]
    fn a_file_is_scattered_over_n_workers() {
        let workers = [0, 1, 2, 3, 4, 5];
        let p = hinted(&[("placement", "scatter:2"), ("block_size", "1MiB")]).unwrap();
        let stripes: Vec<WorkerId> = (0..8)
            .map(|i| p.worker(42, i << 20, &workers).unwrap())
            .collect();
        assert_ne!(stripes[0], stripes[1]);
        for (i, w) in stripes.iter().enumerate() {
            assert_eq!(*w, stripes[i % 2], "stripe {i}");
        }
        // Within a stripe, one worker.
        assert_eq!(p.worker(42, (1 << 20) - 1, &workers), Some(stripes[0]));
        // Files pick their own pairs.
        let pairs: std::collections::BTreeSet<(WorkerId, WorkerId)> = (0..40)
            .map(|f| {
                let (a, b) = (p.worker(f, 0, &workers), p.worker(f, 1 << 20, &workers));
                (a.unwrap(), b.unwrap())
            })
            .collect();
        assert!(pairs.len() > 5, "{pairs:?}");
        // More stripes than workers: every worker, once per round.
        let wide = hinted(&[("placement", "scatter:16")]).unwrap();
        let used: std::collections::BTreeSet<WorkerId> = (0..6)
            .map(|i| wide.worker(1, i * MIN_STRIPE, &workers).unwrap())
            .collect();
        assert_eq!(used.len(), 6);
    }
}
