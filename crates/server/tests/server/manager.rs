//! The worker manager: static vs elastic allocation, the directory view,
//! decommissioning.

use crate::common::*;
use labios_label::{LabelKind, Task, Weights, WorkerDirectory, WorkerState};
use labios_server::{ManagerConfig, WorkerConfig, WorkerManager};
use labios_store::worker_queue;
use std::time::{Duration, Instant};

fn manager(rig: &Rig, allocation: &str, interval_ms: u64) -> WorkerManager {
    WorkerManager::new(
        rig.stores.clone(),
        ManagerConfig {
            allocation: allocation.into(),
            min_active: 1,
            wake_threshold: 4,
            interval_ms,
            buckets: 10,
            ..ManagerConfig::default()
        },
        WorkerConfig {
            idle_suspend_ms: 0,
            score_interval_ms: 50,
            ..WorkerConfig::default()
        },
        Weights::LOW_LATENCY,
    )
}

fn states(m: &WorkerManager) -> Vec<(u32, WorkerState)> {
    let mut s: Vec<_> = m.workers().iter().map(|w| (w.spec.id, w.state)).collect();
    s.sort_by_key(|(id, _)| *id);
    s
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Holds worker 1's queue shut and fills it past the wake threshold.
async fn build_up_queue(rig: &Rig) -> Vec<labios_label::LabelId> {
    rig.gate.close(&worker_queue(1)).await;
    let f = rig.file("/burst").await;
    let mut ids = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..20u64 {
        let label = rig.write(&f, i * 100, &pattern(100, i as u8)).await;
        ids.push(label.id);
        tasks.push(Task::single(label));
    }
    rig.push(1, tasks).await;
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_allocation_keeps_everyone_active_and_sorted() {
    let rig = Rig::new();
    // Slow balancing, so it does not refresh the view under the assertions.
    let m = manager(&rig, "static", 60_000);
    for id in 1..=3 {
        let mut s = spec(id, 1 << 30);
        s.speed = id as u8;
        m.commission(s, rig.worker_dir(id)).await.unwrap();
    }
    assert!(m.commission(spec(1, 1), rig.worker_dir(9)).await.is_err());
    assert_eq!(
        states(&m),
        vec![
            (1, WorkerState::Active),
            (2, WorkerState::Active),
            (3, WorkerState::Active)
        ]
    );
    // Best score first: the fastest worker.
    let order: Vec<u32> = WorkerDirectory::workers(&m)
        .iter()
        .map(|w| w.spec.id)
        .collect();
    assert_eq!(order, vec![3, 2, 1]);
    // Assigned labels count at once: worker 3 with a full queue drops.
    m.assigned(3, 64, 0);
    let w3 = m.workers().into_iter().find(|w| w.spec.id == 3).unwrap();
    assert_eq!(w3.queued, 64);
    assert_eq!(m.workers().last().unwrap().spec.id, 3);

    // Static allocation never wakes a suspended worker, however long the queues.
    m.handle(2).unwrap().suspend();
    m.handle(3).unwrap().suspend();
    let ids = build_up_queue(&rig).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(m.wake_latencies().is_empty());
    assert_eq!(m.handle(2).unwrap().status().state, WorkerState::Suspended);
    rig.gate.open(&worker_queue(1));
    complete(&rig.wait(&ids).await);
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elastic_allocation_wakes_workers_when_queues_build_up() {
    let rig = Rig::new();
    let m = manager(&rig, "elastic", 20);
    for id in 1..=3 {
        m.commission(spec(id, 1 << 30), rig.worker_dir(id))
            .await
            .unwrap();
    }
    assert_eq!(
        states(&m),
        vec![
            (1, WorkerState::Active),
            (2, WorkerState::Suspended),
            (3, WorkerState::Suspended)
        ]
    );
    let published = rig.stores.inventory.workers().await.unwrap();
    assert_eq!(
        published
            .iter()
            .filter(|w| w.state == WorkerState::Suspended)
            .count(),
        2
    );

    let ids = build_up_queue(&rig).await;
    until("an extra worker to wake", || !m.wake_latencies().is_empty()).await;
    // 20 queued over one active worker > 4: one more woke; 20 / 2 > 4: so did the last.
    until("all workers active", || {
        states(&m).iter().all(|(_, s)| *s == WorkerState::Active)
    })
    .await;
    let latencies = m.wake_latencies();
    println!("manager wake-up latencies: {latencies:?}");
    assert_eq!(latencies.len(), 2);
    assert!(latencies.iter().all(|l| *l < Duration::from_secs(1)));
    rig.gate.open(&worker_queue(1));
    complete(&rig.wait(&ids).await);

    // An explicit activation message.
    m.handle(2).unwrap().suspend();
    m.wake(2).await.unwrap();
    assert_eq!(m.handle(2).unwrap().status().state, WorkerState::Active);
    assert_eq!(m.wake_latencies().len(), 3);
    assert!(m.wake(42).await.is_err());
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommissioned_worker_serves_its_data_then_retires() {
    let rig = Rig::new();
    let m = manager(&rig, "static", 20);
    m.commission(spec(1, 1 << 30), rig.worker_dir(1))
        .await
        .unwrap();
    m.commission(spec(2, 1 << 30), rig.worker_dir(2))
        .await
        .unwrap();
    let f = rig.file("/d").await;
    complete(&rig.run(1, vec![rig.write(&f, 0, b"pinned").await]).await);

    m.decommission(1).await.unwrap();
    assert_eq!(states(&m)[0], (1, WorkerState::Decommissioned));
    // The worst score: schedulers rank it last.
    assert_eq!(m.workers().last().unwrap().spec.id, 1);
    let published = rig.stores.inventory.workers().await.unwrap();
    assert!(published
        .iter()
        .any(|w| w.spec.id == 1 && w.state == WorkerState::Decommissioned));

    // Still serves reads pinned to it while it holds data.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let s = rig.run(1, vec![rig.read(&f, 0, 6)]).await;
    assert_eq!(rig.result(&s[0]).await, &b"pinned"[..]);
    assert!(m.handle(1).is_ok());

    // Once its data is deleted it retires (as a client removes a file:
    // the inventory first, then the workers' bytes).
    rig.stores.inventory.remove("/d").await.unwrap();
    complete(&rig.run(1, vec![rig.on_file(LabelKind::Delete, &f)]).await);
    // The handle goes first, the view entry once the worker has stopped.
    until("worker 1 to retire", || {
        m.handle(1).is_err() && m.workers().iter().all(|w| w.spec.id != 1)
    })
    .await;
    assert_eq!(states(&m), vec![(2, WorkerState::Active)]);
    let published = rig.stores.inventory.workers().await.unwrap();
    assert!(published.iter().all(|w| w.spec.id != 1));
    m.shutdown().await;
}
