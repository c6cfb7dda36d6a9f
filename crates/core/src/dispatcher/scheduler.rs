//! Label scheduling (article 3.3.2c phase b, policies of 3.5.2): answers how
//! many workers a batch needs, which ones, and which tasks go where.

use super::minmax;
use super::shuffler::Routed;
use labios_label::{
    AppId, Error, LabelId, Result, Task, Weights, WorkerId, WorkerState, WorkerStatus,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Tasks per worker; only workers that received work appear.
pub type Plan = Vec<(WorkerId, Vec<Task>)>;

#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// Cycle over the available workers (like a PFS stripes): cheapest, even
    /// counts. The worker manager compiles the available list (article
    /// 3.5.2): a worker suspended for idleness is in it and wakes when its
    /// turn brings it work; in elastic allocation the manager leaves out the
    /// workers it holds in reserve.
    RoundRobin,
    /// Uniform over every worker, suspended ones included.
    Random,
    /// The best-scored workers, as many as the batch's size calls for.
    Constraint {
        weights: Weights,
        bytes_per_worker: u64,
    },
    /// Approximate multidimensional knapsack: most performance for the least
    /// energy within each worker's remaining capacity and queue room.
    MinMax { weights: Weights },
}

/// A policy plus the state it keeps between batches.
pub struct Scheduler {
    policy: Policy,
    /// Round robin resumes where the previous batch stopped, so lone labels
    /// still spread over all workers.
    cursor: usize,
    /// The cursor of each application placed apart (on the workers whose
    /// stacks admit it), so that its labels too visit every one of them in
    /// turn whatever others' batches do; at most [`ISLAND_CURSORS`].
    island_cursors: HashMap<AppId, usize>,
    rng: fastrand::Rng,
    /// Constraint policy: bytes recently assigned, in total and per worker.
    recent: Recent,
}

/// Bytes assigned lately, fading with a half-life of [`RECENT_HALF_LIFE`].
/// A stream of small batches is then sized by the I/O it adds up to (so it
/// spreads over as many workers as one big batch would) and balanced across
/// batches, not only within one.
#[derive(Debug, Default)]
struct Recent {
    total: f64,
    per_worker: std::collections::HashMap<WorkerId, f64>,
    at: Option<std::time::Instant>,
}

const RECENT_HALF_LIFE: f64 = 0.2;

impl Recent {
    fn decay(&mut self) {
        let now = std::time::Instant::now();
        if let Some(at) = self.at {
            let f = 0.5f64.powf(now.duration_since(at).as_secs_f64() / RECENT_HALF_LIFE);
            self.total *= f;
            self.per_worker.retain(|_, b| {
                *b *= f;
                *b >= 1.0
            });
        }
        self.at = Some(now);
    }
}

impl Scheduler {
    pub fn new(policy: Policy) -> Self {
        Scheduler {
            policy,
            cursor: 0,
            island_cursors: HashMap::new(),
            rng: fastrand::Rng::new(),
            recent: Recent::default(),
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Builds the plan for one batch. Pinned tasks go to their worker unless
    /// it is unknown or decommissioned; the rest follow the policy.
    pub fn schedule(&mut self, tasks: Vec<Routed>, workers: &[WorkerStatus]) -> Result<Plan> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        if workers.is_empty() {
            return Err(no_workers());
        }
        let mut out: Vec<Vec<Task>> = workers.iter().map(|_| Vec::new()).collect();
        let mut free = Vec::with_capacity(tasks.len());
        for Routed { task, pinned } in tasks {
            let functions = needs_functions(&task);
            let target = pinned.and_then(|id| {
                workers.iter().position(|w| {
                    w.spec.id == id
                        && w.state != WorkerState::Decommissioned
                        && (w.spec.functions || !functions)
                })
            });
            match target {
                Some(i) => out[i].push(task),
                None => free.push(task),
            }
        }
        if !free.is_empty() {
            let eligible: Vec<usize> = (0..workers.len())
                .filter(|&i| workers[i].state != WorkerState::Decommissioned)
                .collect();
            if eligible.is_empty() {
                return Err(no_workers());
            }
            let admitted: Vec<Option<BTreeSet<AppId>>> =
                workers.iter().map(WorkerStatus::admitted).collect();
            if eligible.iter().all(|&i| admitted[i].is_none()) {
                self.place(free, workers, &eligible, None, &mut out)?;
            } else {
                // A worker whose stack admits only some applications
                // (`auth:A+B`) gets only theirs; an application no worker
                // admits goes to any, whose refusal then names the reason.
                // (A directory entry whose module does not parse admits
                // every one: workers publish only stacks they validated, and
                // each worker still checks its own.)
                let order: HashMap<LabelId, usize> = free
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| Some((t.labels.first()?.id, i + 1)))
                    .collect();
                let mut by_owners: BTreeMap<Vec<AppId>, Vec<Task>> = BTreeMap::new();
                for task in free {
                    by_owners.entry(owners_of(&task)).or_default().push(task);
                }
                for (owners, tasks) in by_owners {
                    let to = preferring(&eligible, |i| {
                        admitted[i]
                            .as_ref()
                            .is_none_or(|apps| owners.iter().all(|o| apps.contains(o)))
                    });
                    let island = match owners[..] {
                        [one] => Some(one),
                        _ => None,
                    };
                    self.place(tasks, workers, &to, island, &mut out)?;
                }
                // Each queue keeps the shuffler's order (priority, then
                // age) across applications; pinned tasks stay first.
                for tasks in &mut out {
                    tasks.sort_by_key(|t| {
                        t.labels
                            .first()
                            .and_then(|l| order.get(&l.id))
                            .copied()
                            .unwrap_or(0)
                    });
                }
            }
        }
        Ok(workers
            .iter()
            .zip(out)
            .filter(|(_, tasks)| !tasks.is_empty())
            .map(|(w, tasks)| (w.spec.id, tasks))
            .collect())
    }

    /// Places unpinned tasks on `eligible` workers: labels with pipelines
    /// only on those that run functions; if none does, on any, whose
    /// refusal then names the reason. `island`: the application they all
    /// belong to, when it is placed apart.
    fn place(
        &mut self,
        free: Vec<Task>,
        workers: &[WorkerStatus],
        eligible: &[usize],
        island: Option<AppId>,
        out: &mut [Vec<Task>],
    ) -> Result<()> {
        let (pipelines, plain): (Vec<Task>, Vec<Task>) =
            free.into_iter().partition(needs_functions);
        self.assign(plain, workers, eligible, island, out)?;
        let capable = preferring(eligible, |i| workers[i].spec.functions);
        self.assign(pipelines, workers, &capable, island, out)
    }

    /// Places unpinned tasks on `eligible` workers by the policy.
    fn assign(
        &mut self,
        free: Vec<Task>,
        workers: &[WorkerStatus],
        eligible: &[usize],
        island: Option<AppId>,
        out: &mut [Vec<Task>],
    ) -> Result<()> {
        if free.is_empty() {
            return Ok(());
        }
        match &self.policy {
            Policy::RoundRobin => {
                let cursor = match island {
                    None => &mut self.cursor,
                    Some(app) => {
                        if self.island_cursors.len() >= ISLAND_CURSORS {
                            self.island_cursors.clear();
                        }
                        self.island_cursors.entry(app).or_default()
                    }
                };
                round_robin(free, workers, eligible, cursor, out)
            }
            Policy::Random => {
                for task in free {
                    out[eligible[self.rng.usize(..eligible.len())]].push(task);
                }
            }
            Policy::Constraint {
                weights,
                bytes_per_worker,
            } => constraint(
                free,
                workers,
                eligible,
                weights,
                *bytes_per_worker,
                &mut self.recent,
                out,
            ),
            Policy::MinMax { weights } => minmax::assign(free, workers, eligible, weights, out)?,
        }
        Ok(())
    }
}

/// The applications a task's labels belong to: one for the labels of one
/// file, several for a supertask of renames, which the shuffler orders
/// together whoever owns them.
fn owners_of(task: &Task) -> Vec<AppId> {
    let mut owners: Vec<AppId> = task.labels.iter().map(|l| l.owner).collect();
    owners.sort_unstable();
    owners.dedup();
    owners
}

/// The `eligible` workers that `keep` accepts, or all of them when it
/// accepts none: a task nobody suits still goes to a worker, whose refusal
/// names the reason.
fn preferring(eligible: &[usize], keep: impl Fn(usize) -> bool) -> Vec<usize> {
    let kept: Vec<usize> = eligible.iter().copied().filter(|&i| keep(i)).collect();
    if kept.is_empty() {
        eligible.to_vec()
    } else {
        kept
    }
}

/// Places `tasks` on `eligible` workers in id order (stable across batches
/// whatever order the directory lists them in), from `cursor` on.
fn round_robin(
    tasks: Vec<Task>,
    workers: &[WorkerStatus],
    eligible: &[usize],
    cursor: &mut usize,
    out: &mut [Vec<Task>],
) {
    let mut ring = eligible.to_vec();
    ring.sort_unstable_by_key(|&i| workers[i].spec.id);
    for task in tasks {
        *cursor %= ring.len();
        out[ring[*cursor]].push(task);
        *cursor += 1;
    }
}

/// Applications placed apart whose round-robin cursors are kept; past it
/// they all start again from the first worker.
const ISLAND_CURSORS: usize = 4096;

fn needs_functions(task: &Task) -> bool {
    task.labels.iter().any(|l| !l.operations.is_empty())
}

fn no_workers() -> Error {
    Error::Unavailable("no workers".into())
}

/// Ranks workers by score, takes as many of the best as the aggregate I/O
/// calls for (one per `bytes_per_worker` of this batch plus what was
/// assigned lately), and spreads the tasks evenly over them by bytes
/// (counting recent assignments), then by count.
#[allow(clippy::too_many_arguments)]
fn constraint(
    tasks: Vec<Task>,
    workers: &[WorkerStatus],
    eligible: &[usize],
    weights: &Weights,
    bytes_per_worker: u64,
    recent: &mut Recent,
    out: &mut [Vec<Task>],
) {
    let mut ranked: Vec<(f64, usize)> = eligible
        .iter()
        .map(|&i| (weights.score(&workers[i]), i))
        .collect();
    ranked.sort_unstable_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(workers[a.1].spec.id.cmp(&workers[b.1].spec.id))
    });
    recent.decay();
    let total: u64 = tasks.iter().map(Task::size).fold(0, u64::saturating_add);
    recent.total += total as f64;
    let wanted = (recent.total / bytes_per_worker.max(1) as f64).ceil() as u64;
    let k = usize::try_from(wanted)
        .unwrap_or(usize::MAX)
        .clamp(1, ranked.len());
    let mut load: Vec<(u64, usize)> = (0..k)
        .map(|j| {
            let id = workers[ranked[j].1].spec.id;
            (recent.per_worker.get(&id).copied().unwrap_or(0.0) as u64, 0)
        })
        .collect();
    for task in tasks {
        let j = (0..k).min_by_key(|&j| load[j]).unwrap_or(0);
        let size = task.size();
        load[j].0 = load[j].0.saturating_add(size);
        load[j].1 += 1;
        *recent
            .per_worker
            .entry(workers[ranked[j].1].spec.id)
            .or_default() += size as f64;
        out[ranked[j].1].push(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatcher::testing::{routed, worker, write};
    use labios_label::Label;
    use std::collections::BTreeSet;

    fn counts(plan: &Plan) -> Vec<(WorkerId, usize)> {
        plan.iter().map(|(w, t)| (*w, t.len())).collect()
    }

    #[test]
    fn no_workers_is_an_error() {
        let mut s = Scheduler::new(Policy::RoundRobin);
        let e = s
            .schedule(routed(vec![write(1, 1, 0, 10)]), &[])
            .unwrap_err();
        assert_eq!(e, Error::Unavailable("no workers".into()));
        let mut gone = worker(1, 3, 3);
        gone.state = WorkerState::Decommissioned;
        let e = s
            .schedule(routed(vec![write(1, 1, 0, 10)]), &[gone])
            .unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)));
        assert!(s.schedule(Vec::new(), &[]).unwrap().is_empty());
    }

    #[test]
    fn round_robin_is_even_and_spreads_across_batches() {
        let mut ws: Vec<WorkerStatus> = (1..=4).map(|i| worker(i, 3, 3)).collect();
        ws.push(WorkerStatus {
            state: WorkerState::Suspended,
            ..worker(9, 5, 1)
        });
        let mut s = Scheduler::new(Policy::RoundRobin);
        for n in [1usize, 3, 7, 10, 13] {
            let tasks = routed((0..n as u64).map(|i| write(i, 1, i * 10, 10)).collect());
            let plan = s.schedule(tasks, &ws).unwrap();
            let c: Vec<usize> = counts(&plan).iter().map(|c| c.1).collect();
            let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
            assert!(c.len() == n.min(5) && hi - lo <= 1, "{n}: {c:?}");
        }
        // Lone labels, batch after batch, visit every worker in turn; the
        // suspended one too, which the work wakes.
        let seen: Vec<WorkerId> = (0..10)
            .map(|i| s.schedule(routed(vec![write(i, 1, 0, 1)]), &ws).unwrap()[0].0)
            .collect();
        let mut distinct = seen.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct, vec![1, 2, 3, 4, 9], "{seen:?}");
    }

    #[test]
    fn round_robin_wakes_suspended_workers_when_none_is_active() {
        let ws: Vec<WorkerStatus> = (1..=2)
            .map(|i| WorkerStatus {
                state: WorkerState::Suspended,
                ..worker(i, 3, 3)
            })
            .collect();
        let plan = Scheduler::new(Policy::RoundRobin)
            .schedule(routed((0..4).map(|i| write(i, 1, 0, 1)).collect()), &ws)
            .unwrap();
        assert_eq!(counts(&plan), vec![(1, 2), (2, 2)]);
    }

    #[test]
    fn random_covers_every_worker_including_suspended() {
        let mut ws: Vec<WorkerStatus> = (1..=5).map(|i| worker(i, 3, 3)).collect();
        ws[1].state = WorkerState::Suspended;
        ws[2].state = WorkerState::Decommissioned;
        let tasks = routed((0..2000).map(|i| write(i, 1, i * 10, 10)).collect());
        let plan = Scheduler::new(Policy::Random).schedule(tasks, &ws).unwrap();
        let c = counts(&plan);
        let ids: Vec<WorkerId> = c.iter().map(|x| x.0).collect();
        assert_eq!(ids, vec![1, 2, 4, 5]);
        assert!(c.iter().all(|x| x.1 > 350), "not uniform: {c:?}");
    }

    #[test]
    fn pinned_tasks_go_to_their_worker_unless_it_is_gone() {
        let mut ws: Vec<WorkerStatus> = (1..=3).map(|i| worker(i, 3, 3)).collect();
        ws[2].state = WorkerState::Decommissioned;
        let pin = |w| Routed {
            task: Task::single(write(1, 1, 0, 10)),
            pinned: Some(w),
        };
        let mut s = Scheduler::new(Policy::RoundRobin);
        let plan = s.schedule(vec![pin(2), pin(2), pin(2)], &ws).unwrap();
        assert_eq!(counts(&plan), vec![(2, 3)]);
        for gone in [3, 77] {
            let plan = s.schedule(vec![pin(gone)], &ws).unwrap();
            assert!(plan[0].0 == 1 || plan[0].0 == 2);
        }
    }

    #[test]
    fn constraint_uses_the_best_workers_and_more_of_them_for_more_bytes() {
        // Speed decides under high-bandwidth weights: workers 4 and 5 are fastest.
        let ws: Vec<WorkerStatus> = (1..=5).map(|i| worker(i, i as u8, 3)).collect();
        let policy = Policy::Constraint {
            weights: Weights::HIGH_BANDWIDTH,
            bytes_per_worker: 1000,
        };
        // A fresh scheduler per batch: no recent history.
        let small = routed((0..10).map(|i| write(i, 1, i * 10, 10)).collect());
        let plan = Scheduler::new(policy.clone()).schedule(small, &ws).unwrap();
        assert_eq!(counts(&plan), vec![(5, 10)]);
        let big = routed((0..20).map(|i| write(i, 1, i * 100, 100)).collect());
        let plan = Scheduler::new(policy.clone()).schedule(big, &ws).unwrap();
        assert_eq!(counts(&plan), vec![(4, 10), (5, 10)]);
        let huge = routed((0..50).map(|i| write(i, 1, i * 1000, 1000)).collect());
        let plan = Scheduler::new(policy).schedule(huge, &ws).unwrap();
        assert_eq!(plan.len(), 5);
        let c: Vec<usize> = counts(&plan).iter().map(|c| c.1).collect();
        assert!(c.iter().all(|&n| n == 10), "{c:?}");
    }

    #[test]
    fn a_worker_whose_stack_admits_some_applications_gets_only_theirs() {
        let island = |id, stack: &str| WorkerStatus {
            stack: vec![stack.to_string(), "file".to_string()],
            ..worker(id, 3, 3)
        };
        let ws = vec![
            island(1, "auth:2+3"),
            worker(2, 3, 3),
            island(3, "auth"),
            island(4, "auth:9"),
        ];
        let of = |app, n: u64| -> Vec<Label> {
            (0..n)
                .map(|i| Label {
                    owner: app,
                    ..write(app as u64 * 100 + i, app as u64, i * 10, 10)
                })
                .collect()
        };
        for policy in [Policy::RoundRobin, Policy::Random] {
            let mut s = Scheduler::new(policy.clone());
            let mut labels = of(1, 12);
            labels.extend(of(2, 12));
            labels.extend(of(7, 12));
            let plan = s.schedule(routed(labels), &ws).unwrap();
            let mut seen: BTreeMap<AppId, Vec<WorkerId>> = BTreeMap::new();
            for (w, tasks) in &plan {
                for t in tasks {
                    seen.entry(owners_of(t)[0]).or_default().push(*w);
                }
            }
            for (app, on) in &seen {
                let wanted: &[WorkerId] = match app {
                    2 => &[1, 2, 3],
                    // Application 9 alone may use worker 4.
                    _ => &[2, 3],
                };
                assert!(
                    on.iter().all(|w| wanted.contains(w)),
                    "{policy:?}: application {app} placed on {on:?}"
                );
            }
            assert_eq!(seen.values().map(Vec::len).sum::<usize>(), 36);
        }
        // One task at a time, two applications in turn: each still visits
        // every worker that admits it.
        let mut s = Scheduler::new(Policy::RoundRobin);
        let mut seen: BTreeMap<AppId, BTreeSet<WorkerId>> = BTreeMap::new();
        for i in 0..12 {
            let app = [1, 9][i % 2];
            let plan = s.schedule(routed(of(app, 1)), &ws).unwrap();
            seen.entry(app).or_default().insert(plan[0].0);
        }
        assert_eq!(seen[&1], BTreeSet::from([2, 3]));
        assert_eq!(seen[&9], BTreeSet::from([2, 3, 4]));
        // A worker shared by applications placed apart keeps the
        // shuffler's order across them; a task of several owners (renames
        // ordered together) goes where all of them are admitted.
        let pool = vec![island(1, "auth:9"), worker(2, 3, 3), island(3, "auth:1")];
        let mut labels: Vec<Label> = [1, 2, 1, 2].iter().flat_map(|&a| of(a, 1)).collect();
        let id = |nanos| labios_label::LabelId { nanos, origin: 1 };
        for (i, l) in labels.iter_mut().enumerate() {
            l.id = id(i as u64 + 1);
        }
        let mut both = Task::single(Label {
            id: id(10),
            ..labels[0].clone()
        });
        both.labels.push(Label {
            id: id(11),
            owner: 2,
            ..labels[1].clone()
        });
        both.supertask = true;
        let mut tasks = routed(labels);
        tasks.push(Routed {
            task: both,
            pinned: None,
        });
        let plan = Scheduler::new(Policy::Random)
            .schedule(tasks, &pool)
            .unwrap();
        for (w, tasks) in &plan {
            let ids: Vec<labios_label::LabelId> = tasks.iter().map(|t| t.labels[0].id).collect();
            let mut sorted = ids.clone();
            sorted.sort();
            assert_eq!(ids, sorted, "worker {w}'s queue");
            if tasks.iter().any(|t| owners_of(t) == [1, 2]) {
                assert_eq!(*w, 2, "only worker 2 admits applications 1 and 2");
            }
        }
        // An application no worker admits still goes somewhere: the worker
        // fails its labels with the reason.
        let closed = vec![island(1, "auth:2"), island(2, "auth:3")];
        let plan = Scheduler::new(Policy::RoundRobin)
            .schedule(routed(of(5, 2)), &closed)
            .unwrap();
        assert_eq!(plan.iter().map(|(_, t)| t.len()).sum::<usize>(), 2);
    }

    #[test]
    fn constraint_spreads_a_stream_of_small_batches() {
        let ws: Vec<WorkerStatus> = (1..=4).map(|i| worker(i, i as u8, 3)).collect();
        let mut s = Scheduler::new(Policy::Constraint {
            weights: Weights::HIGH_BANDWIDTH,
            bytes_per_worker: 1000,
        });
        let mut used = std::collections::BTreeMap::new();
        for i in 0..40 {
            for (w, t) in s
                .schedule(routed(vec![write(i, 1, i * 100, 100)]), &ws)
                .unwrap()
            {
                *used.entry(w).or_insert(0) += t.len();
            }
        }
        // 4000 bytes in quick succession call for the best 3-4 workers, not one.
        assert!(used.len() >= 3, "{used:?}");
        assert!(
            used.keys().next_back() == Some(&4),
            "the best worker leads: {used:?}"
        );
    }
}
