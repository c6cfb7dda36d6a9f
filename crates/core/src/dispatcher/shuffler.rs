//! Label shuffling (article 3.3.2c, phase a): turns a batch of labels into
//! tasks. Dependent labels (RAW/WAW/WAR on overlapping bytes) become one
//! supertask so that one worker runs them in id order; independent writes at
//! consecutive offsets are aggregated for locality; reads go to the worker
//! that holds their data.
//!
//! This runs on every label, so it moves labels instead of cloning them and
//! works on one flat, sorted array of byte spans rather than per-file maps.

use labios_label::{FileId, Label, LabelId, LabelKind, Pointer, Task, WorkerId};
use std::collections::{BTreeMap, HashMap};

/// Most labels one aggregated task carries.
pub const AGGREGATE_MAX_LABELS: usize = 64;
/// Most bytes one aggregated task carries.
pub const AGGREGATE_MAX_BYTES: u64 = 4 << 20;

/// A task and, when its data or its caller names one, the worker it must go to.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    pub task: Task,
    pub pinned: Option<WorkerId>,
}

/// The byte range one label touches in one file.
#[derive(Clone, Copy)]
struct Span {
    file: FileId,
    start: u64,
    end: u64,
    label: u32,
    mutates: bool,
    /// Touches the whole file (delete, flush or rename without a range).
    whole: bool,
    write: bool,
}

/// Shuffles one batch. `located` maps labels to the worker they are pinned
/// to: reads to the one holding all their data (from the inventory),
/// writes to the one their file's placement hint names.
pub fn shuffle(
    labels: Vec<Label>,
    aggregation: bool,
    located: &HashMap<LabelId, WorkerId>,
) -> Vec<Routed> {
    let n = labels.len();
    let spans = spans_of(&labels);
    let mut sets = DisjointSets::new(n);
    for file in spans.chunk_by(|a, b| a.file == b.file) {
        link_conflicts(file, &mut sets);
    }
    let addressed: Vec<Option<WorkerId>> = labels
        .iter()
        .map(|l| match l.destination {
            Pointer::Worker(w) => Some(w),
            _ => None,
        })
        .collect();
    let mut pins: Vec<Option<WorkerId>> = labels
        .iter()
        .zip(&addressed)
        .map(|(l, to)| match to {
            Some(w) => Some(*w),
            None => located.get(&l.id).copied(),
        })
        .collect();
    let roots: Vec<u32> = (0..n as u32).map(|i| sets.find(i)).collect();
    let mut members = vec![0u32; n];
    for &r in &roots {
        members[r as usize] += 1;
    }

    // First decide which multi-label task each label joins, then move every
    // label exactly once into its task.
    let mut dest = vec![SINGLE; n];
    let mut groups: Vec<Group> = Vec::new();
    let mut dependent: Vec<u32> = (0..n as u32)
        .filter(|&i| members[roots[i as usize] as usize] > 1)
        .collect();
    dependent.sort_unstable_by_key(|&i| roots[i as usize]);
    for set in dependent.chunk_by(|&a, &b| roots[a as usize] == roots[b as usize]) {
        // Labels addressed to a worker run there whatever they conflict
        // with: a delete sent to every worker holding a file is one label
        // per worker, and one supertask would carry them all to the first.
        // The rest of the set stays one supertask with its oldest pinned
        // label. Order on each worker is kept by its queue.
        let set_pin = oldest_pin(set, &labels, &pins);
        let mut parts: BTreeMap<Option<WorkerId>, Vec<u32>> = BTreeMap::new();
        for &i in set {
            parts.entry(addressed[i as usize]).or_default().push(i);
        }
        for (to, part) in parts {
            let pin = to.or_else(|| oldest_pin(&part, &labels, &pins).or(set_pin));
            match part.as_slice() {
                [single] => pins[*single as usize] = pin,
                _ => add_group(&part, true, pin, &mut dest, &mut groups),
            }
        }
    }
    if aggregation {
        aggregate(&spans, &roots, &members, &pins, &mut dest, &mut groups);
    }

    let mut out: Vec<(u8, LabelId, Routed)> = Vec::with_capacity(n);
    for ((label, &d), &pinned) in labels.into_iter().zip(&dest).zip(&pins) {
        match d {
            SINGLE => out.push(keyed(Task::single(label), pinned)),
            g => groups[g as usize].task.labels.push(label),
        }
    }
    for Group { mut task, pinned } in groups {
        // Supertasks run in id order; aggregated writes in offset order.
        if task.supertask {
            task.labels.sort_by_key(|l| l.id);
        } else {
            task.labels
                .sort_by_key(|l| l.file_range().map_or(0, |(_, offset, _)| offset));
        }
        out.push(keyed(task, pinned));
    }
    out.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    out.into_iter().map(|(_, _, r)| r).collect()
}

/// The pin of the oldest pinned label among `members`.
fn oldest_pin(members: &[u32], labels: &[Label], pins: &[Option<WorkerId>]) -> Option<WorkerId> {
    members
        .iter()
        .filter(|&&i| pins[i as usize].is_some())
        .min_by_key(|&&i| labels[i as usize].id)
        .and_then(|&i| pins[i as usize])
}

/// `dest` value of a label that becomes a task of its own.
const SINGLE: u32 = u32::MAX;

/// A multi-label task being assembled.
struct Group {
    task: Task,
    pinned: Option<WorkerId>,
}

fn add_group(
    members: &[u32],
    supertask: bool,
    pinned: Option<WorkerId>,
    dest: &mut [u32],
    groups: &mut Vec<Group>,
) {
    let g = groups.len() as u32;
    for &i in members {
        dest[i as usize] = g;
    }
    groups.push(Group {
        task: Task {
            labels: Vec::with_capacity(members.len()),
            aggregated: !supertask,
            supertask,
        },
        pinned,
    });
}

/// Every (file, range) the batch touches, sorted by file then offset. A
/// rename also touches its destination file as a whole.
fn spans_of(labels: &[Label]) -> Vec<Span> {
    let mut spans = Vec::with_capacity(labels.len());
    for (i, l) in labels.iter().enumerate() {
        let label = i as u32;
        let mutates = l.mutates();
        let write = l.kind == LabelKind::Write;
        if let Some((file, offset, len)) = l.file_range() {
            let whole = l.kind == LabelKind::Rename
                || (len == 0 && matches!(l.kind, LabelKind::Delete | LabelKind::Flush));
            if len > 0 || whole {
                spans.push(Span {
                    file,
                    start: offset,
                    end: offset.saturating_add(len),
                    label,
                    mutates,
                    whole,
                    write,
                });
            }
        }
        if l.kind == LabelKind::Rename {
            if let Some((file, _, _)) = l.destination.file() {
                spans.push(Span {
                    file,
                    start: 0,
                    end: 0,
                    label,
                    mutates,
                    whole: true,
                    write,
                });
            }
        }
    }
    spans.sort_unstable_by_key(|s| (s.file, s.start));
    spans
}

/// Joins the labels of one file (spans sorted by offset) that conflict:
/// overlapping ranges where at least one side mutates.
///
/// One sweep suffices: all mutating spans that contain a point are already
/// joined with each other, so a new span only needs to join the one reaching
/// furthest. A new mutating span must join every read still open; after
/// that those reads are one set, and only the furthest-reaching one is kept.
fn link_conflicts(file: &[Span], sets: &mut DisjointSets) {
    let mut writer: Option<(u64, u32)> = None;
    let mut open_reads: Vec<(u64, u32)> = Vec::new();
    let mut whole: Option<u32> = None;
    for s in file {
        if s.whole {
            whole.get_or_insert(s.label);
            continue;
        }
        if let Some((end, w)) = writer {
            if s.start < end {
                sets.union(s.label, w);
            }
        }
        if s.mutates {
            let mut furthest: Option<(u64, u32)> = None;
            for &(end, r) in &open_reads {
                if end > s.start {
                    sets.union(s.label, r);
                    if !matches!(furthest, Some((e, _)) if end <= e) {
                        furthest = Some((end, r));
                    }
                }
            }
            open_reads.clear();
            open_reads.extend(furthest);
            if !matches!(writer, Some((end, _)) if s.end <= end) {
                writer = Some((s.end, s.label));
            }
        } else {
            open_reads.push((s.end, s.label));
        }
    }
    if let Some(w) = whole {
        for s in file {
            sets.union(s.label, w);
        }
    }
}

/// Merges independent writes that continue each other (one ends where the
/// next starts) into aggregated tasks, within the per-task caps.
fn aggregate(
    spans: &[Span],
    roots: &[u32],
    members: &[u32],
    pins: &[Option<WorkerId>],
    dest: &mut [u32],
    groups: &mut Vec<Group>,
) {
    let independent_write =
        |s: &&Span| s.write && !s.whole && members[roots[s.label as usize] as usize] == 1;
    let mut run: Vec<u32> = Vec::new();
    let (mut file, mut end, mut bytes, mut pin) = (0, 0, 0, None);
    for s in spans.iter().filter(independent_write) {
        let len = s.end - s.start;
        let continues = !run.is_empty()
            && s.file == file
            && s.start == end
            && pins[s.label as usize] == pin
            && run.len() < AGGREGATE_MAX_LABELS
            && bytes + len <= AGGREGATE_MAX_BYTES;
        if !continues {
            if run.len() > 1 {
                add_group(&run, false, pin, dest, groups);
            }
            run.clear();
            (file, bytes, pin) = (s.file, 0, pins[s.label as usize]);
        }
        run.push(s.label);
        end = s.end;
        bytes += len;
    }
    if run.len() > 1 {
        add_group(&run, false, pin, dest, groups);
    }
}

/// Output order: higher priority first, then the oldest label first.
fn keyed(task: Task, pinned: Option<WorkerId>) -> (u8, LabelId, Routed) {
    let priority = task.labels.iter().map(|l| l.priority).max().unwrap_or(0);
    let first = task.labels.iter().map(|l| l.id).min().unwrap_or_default();
    (priority, first, Routed { task, pinned })
}

/// Union-find with path halving; sets are the dependency groups.
struct DisjointSets {
    parent: Vec<u32>,
}

impl DisjointSets {
    fn new(n: usize) -> Self {
        DisjointSets {
            parent: (0..n as u32).collect(),
        }
    }

    fn find(&mut self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            let grand = self.parent[self.parent[x as usize] as usize];
            self.parent[x as usize] = grand;
            x = grand;
        }
        x
    }

    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            self.parent[hi as usize] = lo;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatcher::testing::{read, write};

    fn nums(task: &Task) -> Vec<u64> {
        task.labels.iter().map(|l| l.id.nanos).collect()
    }

    /// (label numbers, aggregated, supertask, pinned) per task, in output order.
    fn shape(out: &[Routed]) -> Vec<(Vec<u64>, bool, bool, Option<WorkerId>)> {
        out.iter()
            .map(|r| (nums(&r.task), r.task.aggregated, r.task.supertask, r.pinned))
            .collect()
    }

    fn plain(labels: Vec<Label>) -> Vec<(Vec<u64>, bool, bool, Option<WorkerId>)> {
        shape(&shuffle(labels, false, &HashMap::new()))
    }

    fn whole(kind: LabelKind, n: u64, file: FileId) -> Label {
        let mut l = read(n, file, 0, 0);
        l.kind = kind;
        l.destination = Pointer::None;
        l
    }

    #[test]
    fn read_after_write_becomes_a_supertask() {
        let out = plain(vec![
            read(2, 1, 50, 10),
            write(1, 1, 0, 100),
            read(3, 1, 200, 100),
            write(4, 2, 0, 100),
        ]);
        assert_eq!(
            out,
            vec![
                (vec![1, 2], false, true, None),
                (vec![3], false, false, None),
                (vec![4], false, false, None),
            ]
        );
    }

    #[test]
    fn write_after_write_and_write_after_read_group() {
        let waw = plain(vec![write(2, 1, 50, 100), write(1, 1, 0, 100)]);
        assert_eq!(waw, vec![(vec![1, 2], false, true, None)]);
        let war = plain(vec![read(1, 1, 0, 100), write(2, 1, 99, 10)]);
        assert_eq!(war, vec![(vec![1, 2], false, true, None)]);
        // Touching (not overlapping) ranges are independent.
        let apart = plain(vec![read(1, 1, 0, 100), write(2, 1, 100, 10)]);
        assert_eq!(apart.len(), 2);
    }

    #[test]
    fn dependencies_are_transitive_and_strictly_ordered() {
        let out = plain(vec![
            read(9, 1, 100, 10),
            write(7, 1, 15, 15),
            read(3, 1, 5, 15),
            write(5, 1, 0, 10),
        ]);
        assert_eq!(
            out,
            vec![
                (vec![3, 5, 7], false, true, None),
                (vec![9], false, false, None)
            ]
        );
        // R1 overlaps R2 only; R2 overlaps W3: R1 stays independent.
        let out = plain(vec![
            read(1, 1, 0, 10),
            read(2, 1, 5, 10),
            write(3, 1, 12, 1),
        ]);
        assert_eq!(
            out,
            vec![
                (vec![1], false, false, None),
                (vec![2, 3], false, true, None)
            ]
        );
    }

    #[test]
    fn overlapping_reads_do_not_group() {
        let out = plain((1..=5).map(|i| read(i, 1, i * 10, 100)).collect());
        assert!(out.iter().all(|t| t.0.len() == 1 && !t.2), "{out:?}");
    }

    #[test]
    fn whole_file_operations_conflict_with_the_whole_file() {
        let out = plain(vec![
            read(1, 1, 1000, 10),
            whole(LabelKind::Delete, 2, 1),
            write(3, 1, 0, 10),
            write(4, 2, 0, 10),
        ]);
        assert_eq!(
            out,
            vec![
                (vec![1, 2, 3], false, true, None),
                (vec![4], false, false, None)
            ]
        );
        let mut rename = whole(LabelKind::Rename, 5, 1);
        rename.destination = read(0, 2, 0, 0).source;
        let out = plain(vec![write(4, 2, 0, 10), rename, write(6, 3, 0, 10)]);
        assert_eq!(
            out,
            vec![
                (vec![4, 5], false, true, None),
                (vec![6], false, false, None)
            ]
        );
    }

    #[test]
    fn consecutive_writes_aggregate_when_enabled() {
        let labels = || {
            vec![
                write(3, 1, 20, 10),
                write(1, 1, 0, 10),
                write(2, 1, 10, 10),
                write(4, 1, 40, 10),
                write(5, 2, 50, 10),
            ]
        };
        let on = shape(&shuffle(labels(), true, &HashMap::new()));
        assert_eq!(
            on,
            vec![
                (vec![1, 2, 3], true, false, None),
                (vec![4], false, false, None),
                (vec![5], false, false, None),
            ]
        );
        let off = plain(labels());
        assert_eq!(off.len(), 5);
        assert!(off.iter().all(|t| !t.1 && !t.2));
    }

    #[test]
    fn aggregation_respects_its_caps() {
        let many = (0..70).map(|i| write(i + 1, 1, i * 10, 10)).collect();
        let sizes: Vec<usize> = shuffle(many, true, &HashMap::new())
            .iter()
            .map(|r| r.task.labels.len())
            .collect();
        assert_eq!(sizes, vec![64, 6]);
        let mib = 1 << 20;
        let big = (0..5).map(|i| write(i + 1, 1, i * mib, mib)).collect();
        let sizes: Vec<usize> = shuffle(big, true, &HashMap::new())
            .iter()
            .map(|r| r.task.labels.len())
            .collect();
        assert_eq!(sizes, vec![4, 1]);
    }

    #[test]
    fn pins_follow_placement_and_locality() {
        let mut direct = write(1, 9, 0, 10);
        direct.destination = Pointer::Worker(5);
        let located = HashMap::from([(
            LabelId {
                nanos: 2,
                origin: 1,
            },
            7,
        )]);
        let out = shape(&shuffle(
            vec![direct, read(2, 1, 0, 10), read(3, 1, 100, 10)],
            true,
            &located,
        ));
        assert_eq!(
            out,
            vec![
                (vec![1], false, false, Some(5)),
                (vec![2], false, false, Some(7)),
                (vec![3], false, false, None),
            ]
        );
        // A supertask is pinned by its first pinned member.
        let located = HashMap::from([(
            LabelId {
                nanos: 3,
                origin: 1,
            },
            4,
        )]);
        let out = shape(&shuffle(
            vec![write(1, 1, 0, 10), read(3, 1, 0, 10)],
            true,
            &located,
        ));
        assert_eq!(out, vec![(vec![1, 3], false, true, Some(4))]);
    }

    /// A file removed from four workers is one delete label per worker
    /// (issue 11, finding 5): they conflict with each other as whole-file
    /// operations, yet each must reach its own worker, or the space of the
    /// file stays taken on the others.
    #[test]
    fn labels_addressed_to_workers_reach_them_whatever_they_conflict_with() {
        let to = |kind, n, worker| {
            let mut l = whole(kind, n, 1);
            l.destination = Pointer::Worker(worker);
            l
        };
        let out = plain(vec![
            write(1, 1, 0, 10),
            to(LabelKind::Delete, 2, 0),
            to(LabelKind::Delete, 3, 1),
            to(LabelKind::Delete, 4, 2),
            to(LabelKind::Flush, 5, 2),
            read(6, 1, 0, 10),
            to(LabelKind::Delete, 7, 3),
        ]);
        assert_eq!(
            out,
            vec![
                // The unaddressed rest keeps its order, placed with the
                // oldest addressed label as before.
                (vec![1, 6], false, true, Some(0)),
                (vec![2], false, false, Some(0)),
                (vec![3], false, false, Some(1)),
                (vec![4, 5], false, true, Some(2)),
                (vec![7], false, false, Some(3)),
            ]
        );
    }

    #[test]
    fn output_is_ordered_by_priority_then_age() {
        let mut urgent = write(5, 1, 0, 10);
        urgent.priority = 9;
        let out = plain(vec![write(3, 2, 0, 10), urgent, write(1, 3, 0, 10)]);
        let order: Vec<u64> = out.iter().map(|t| t.0[0]).collect();
        assert_eq!(order, vec![5, 1, 3]);
    }

    /// The sweep must find exactly the groups a pairwise check finds.
    #[test]
    fn sweep_matches_pairwise_conflicts() {
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..300 {
            let n = rng.usize(1..40);
            let labels: Vec<Label> = (0..n as u64)
                .map(|i| {
                    let (file, off, len) = (rng.u64(0..3), rng.u64(0..200), rng.u64(1..40));
                    match rng.u8(0..10) {
                        0 => whole(LabelKind::Delete, i + 1, file),
                        1..=5 => read(i + 1, file, off, len),
                        _ => write(i + 1, file, off, len),
                    }
                })
                .collect();
            let conflict = |a: &Label, b: &Label| {
                let (Some((fa, oa, la)), Some((fb, ob, lb))) = (a.file_range(), b.file_range())
                else {
                    return false;
                };
                let any_whole = (la == 0 && a.mutates()) || (lb == 0 && b.mutates());
                fa == fb
                    && (a.mutates() || b.mutates())
                    && (any_whole || (oa < ob + lb && ob < oa + la))
            };
            let mut sets = DisjointSets::new(n);
            for i in 0..n {
                for j in i + 1..n {
                    if conflict(&labels[i], &labels[j]) {
                        sets.union(i as u32, j as u32);
                    }
                }
            }
            let mut expected: Vec<Vec<u64>> = (0..n as u32)
                .map(|i| {
                    let r = sets.find(i);
                    (0..n as u32)
                        .filter(|&j| sets.find(j) == r)
                        .map(|j| j as u64 + 1)
                        .collect()
                })
                .collect();
            expected.sort();
            expected.dedup();
            let out = shuffle(labels, false, &HashMap::new());
            let mut got: Vec<Vec<u64>> = out.iter().map(|r| nums(&r.task)).collect();
            for g in &got {
                assert!(
                    g.windows(2).all(|w| w[0] < w[1]),
                    "not strictly ordered: {g:?}"
                );
            }
            got.sort();
            assert_eq!(got, expected);
        }
    }
}
