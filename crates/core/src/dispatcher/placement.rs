//! Placement by hints (WOSS; README "Hints"): the writes of a file whose
//! `placement` or `tier` hint says where its bytes go are pinned there,
//! and the scheduler's policy decides only what hints leave open (the
//! writes of files without one).
//!
//! Workers are ranked by rendezvous hashing (highest random weight) of a
//! key over every commissioned worker of the file's tier: every dispatcher
//! ranks them alike without asking the others, and a worker joining or
//! leaving moves only the groups it wins or held. A label goes to the
//! worker of its slot, or, if that one cannot take it (full, refusing its
//! writer), to the next in rank, so that the other slots stay where they
//! are. The hash is XXH3, whose output is specified, so dispatchers of
//! different builds agree too.

use bytes::Bytes;
use labios_label::hints::{self, Hint, Placement};
use labios_label::{FileId, Label, LabelId, LabelKind, WorkerId, WorkerStatus};
use labios_store::inventory::XATTRS_BATCH_MAX;
use labios_store::Inventory;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64;

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
    /// `block_size`: the bytes of one stripe where they are more than a
    /// label's (0: none given).
    block: u64,
}

impl FilePlacement {
    /// What a file's attributes ask of its placement; `None` without a
    /// `placement` or `tier` hint (`placement=local` needs the writer's
    /// host, which labels do not carry yet).
    pub fn of(xattrs: &[(String, Bytes)]) -> Option<Self> {
        let mut placement = None;
        let mut tier = None;
        let mut block = 0;
        for (name, value) in xattrs.iter().filter(|(n, _)| hints::is_hint(n)) {
            // Hints were checked when set; one that no longer parses (a
            // newer release's) leaves the choice to the policy.
            match Hint::parse(name, value) {
                Ok(Hint::Placement(p)) if p != Placement::Local => placement = Some(p),
                Ok(Hint::Tier(t)) => tier = Some(t),
                Ok(Hint::BlockSize(size)) => block = size,
                _ => {}
            }
        }
        (placement.is_some() || tier.is_some()).then_some(FilePlacement {
            placement,
            tier,
            block,
        })
    }

    /// Whether worker `w` is of the tier the file asks for.
    pub fn serves(&self, w: &WorkerStatus) -> bool {
        self.tier
            .as_deref()
            .is_none_or(|t| hints::tier_serves(t, &w.spec.tier, w.spec.speed))
    }

    /// The worker the write of `len` bytes at `offset` of `file` goes to,
    /// among `workers` (ids, in any order, of the file's tier): its slot's,
    /// or the next in rank that `takes` it; `None` if none does.
    ///
    /// A stripe is `block_size` or the label, whichever is larger: a label
    /// goes whole to one worker, so stripes smaller than the labels would
    /// not spread a write (labels of 1 MiB at 0, 1, 2 MiB over stripes of
    /// 256 KiB would all start in stripes that are multiples of 4).
    pub fn worker(
        &self,
        file: FileId,
        offset: u64,
        len: u64,
        workers: &[WorkerId],
        takes: impl Fn(WorkerId) -> bool,
    ) -> Option<WorkerId> {
        let (ranked, slot) = match &self.placement {
            Some(Placement::Collocate(group)) => (ranked(group.as_bytes(), workers), 0),
            Some(Placement::Scatter(n)) => {
                let ranked = ranked(&file.to_le_bytes(), workers);
                let width = ranked.len().min(*n as usize).max(1) as u64;
                let stripe = offset / self.block.max(len).max(1);
                (ranked, (stripe % width) as usize)
            }
            Some(Placement::Local) | None => {
                let ranked = ranked(&file.to_le_bytes(), workers);
                let width = ranked.len().max(1) as u64;
                let stripe = offset / self.block.max(len).max(1);
                (ranked, (stripe % width) as usize)
            }
        };
        ranked
            .iter()
            .cycle()
            .skip(slot)
            .take(ranked.len())
            .copied()
            .find(|&w| takes(w))
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
    /// ranked over `workers` (every commissioned one) of the file's tier,
    /// the label going to one that `admits` lets take it. Writes of files without a placement or tier hint are not
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
        for (label, (file, offset, len)) in writes {
            let Some((_, Some(placement))) = self.known.get(&file) else {
                continue;
            };
            let of_tier: Vec<&WorkerStatus> =
                workers.iter().filter(|w| placement.serves(w)).collect();
            let ids: Vec<WorkerId> = of_tier.iter().map(|w| w.spec.id).collect();
            let takes = |id: WorkerId| of_tier.iter().any(|w| w.spec.id == id && admits(w, label));
            if let Some(worker) = placement.worker(file, offset, len, &ids, takes) {
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
    use std::collections::BTreeSet;

    const MIB: u64 = 1 << 20;

    fn hinted(pairs: &[(&str, &str)]) -> Option<FilePlacement> {
        let xattrs: Vec<(String, Bytes)> = pairs
            .iter()
            .map(|(n, v)| (format!("{}{n}", hints::PREFIX), Bytes::from(v.to_string())))
            .collect();
        FilePlacement::of(&xattrs)
    }

    fn any(_: WorkerId) -> bool {
        true
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
        let used: BTreeSet<WorkerId> = (0..8)
            .filter_map(|i| cold.worker(5, i * MIB, MIB, &[3, 7, 9], any))
            .collect();
        assert_eq!(used.len(), 3);
    }

    /// A group's files land on one worker, the same for every file and
    /// every dispatcher; groups spread over the workers.
    #[test]
    fn a_group_is_collocated() {
        let workers = [0, 1, 2, 3];
        let group = |g: &str| hinted(&[("placement", &format!("collocate:{g}"))]).unwrap();
        let on = |g: &str, file, workers: &[WorkerId]| group(g).worker(file, 0, MIB, workers, any);
        let one = on("g1", 7, &workers).unwrap();
        for file in 0..50 {
            for offset in [0, MIB, 1 << 30] {
                let w = group("g1").worker(file, offset, 4096, &workers, any);
                assert_eq!(w, Some(one));
            }
        }
        assert_eq!(on("g1", 9, &[3, 1, 0, 2]), Some(one));
        let used: BTreeSet<WorkerId> = (0..64)
            .filter_map(|g| on(&format!("g{g}"), 0, &workers))
            .collect();
        assert_eq!(used.len(), 4, "64 groups use every worker");
        // A worker leaving moves only the groups it held; one that cannot
        // take a label sends it to the next in rank.
        for g in 0..64 {
            let name = format!("g{g}");
            let before = on(&name, 0, &workers).unwrap();
            let after = on(&name, 0, &[0, 1, 3]).unwrap();
            assert!(before == after || before == 2, "group {name} moved");
            let full = group(&name).worker(0, 0, MIB, &workers, |w| w != 2);
            assert_eq!(full, Some(after), "group {name}");
        }
        assert_eq!(on("g1", 0, &[]), None);
        assert_eq!(group("g1").worker(0, 0, MIB, &workers, |_| false), None);
    }

    /// `scatter:N` puts stripe i of a file on the (i mod N)-th of N
    /// workers chosen for the file; a stripe is the block or the label.
    #[test]
    fn a_file_is_scattered_over_n_workers() {
        let workers = [0, 1, 2, 3, 4, 5];
        let p = hinted(&[("placement", "scatter:2")]).unwrap();
        let stripes: Vec<WorkerId> = (0..8)
            .map(|i| p.worker(42, i * MIB, MIB, &workers, any).unwrap())
            .collect();
        assert_ne!(stripes[0], stripes[1]);
        for (i, w) in stripes.iter().enumerate() {
            assert_eq!(*w, stripes[i % 2], "stripe {i}");
        }
        // Labels of 4 MiB: each its own stripe, whatever the block.
        let big = hinted(&[("placement", "scatter:2"), ("block_size", "256KiB")]).unwrap();
        let four: Vec<WorkerId> = (0..4)
            .map(|i| big.worker(42, i * 4 * MIB, 4 * MIB, &workers, any).unwrap())
            .collect();
        assert_eq!(four, [stripes[0], stripes[1], stripes[0], stripes[1]]);
        // Blocks of 4 MiB: four 1 MiB labels to a stripe.
        let blocks = hinted(&[("placement", "scatter:2"), ("block_size", "4MiB")]).unwrap();
        let grouped: Vec<WorkerId> = (0..8)
            .map(|i| blocks.worker(42, i * MIB, MIB, &workers, any).unwrap())
            .collect();
        assert_eq!(grouped[..4], [grouped[0]; 4]);
        assert_eq!(grouped[4..], [grouped[4]; 4]);
        assert_ne!(grouped[0], grouped[4]);
        // Files pick their own pairs.
        let pairs: BTreeSet<(WorkerId, WorkerId)> = (0..40)
            .map(|f| {
                let (a, b) = (
                    p.worker(f, 0, MIB, &workers, any),
                    p.worker(f, MIB, MIB, &workers, any),
                );
                (a.unwrap(), b.unwrap())
            })
            .collect();
        assert!(pairs.len() > 5, "{pairs:?}");
        // A worker that cannot take a label moves that label alone.
        let first = stripes[0];
        let moved: Vec<WorkerId> = (0..8)
            .map(|i| {
                p.worker(42, i * MIB, MIB, &workers, |w| w != first)
                    .unwrap()
            })
            .collect();
        for (i, w) in moved.iter().enumerate() {
            if i % 2 == 1 {
                assert_eq!(*w, stripes[1], "stripe {i} stays");
            } else {
                assert!(*w != first, "stripe {i}");
            }
        }
        // More stripes than workers: every worker, once per round.
        let wide = hinted(&[("placement", "scatter:16")]).unwrap();
        let used: BTreeSet<WorkerId> = (0..6)
            .map(|i| wide.worker(1, i * MIB, MIB, &workers, any).unwrap())
            .collect();
        assert_eq!(used.len(), 6);
    }
}
