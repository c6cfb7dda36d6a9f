//! A worker against the embedded stores, driven by tasks pushed by hand.

use crate::common::*;
use labios_label::{
    Label, LabelKind, LabelState, LabelStatus, Segment, Task, Weights, WorkerState,
};
use labios_server::{Worker, WorkerConfig, WorkerHandle};
use labios_store::{FileKind, FileMeta};
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;

fn config() -> WorkerConfig {
    WorkerConfig {
        threads: 4,
        idle_suspend_ms: 0,
        score_interval_ms: 50,
        ..WorkerConfig::default()
    }
}

async fn start(rig: &Rig, id: u32, capacity: u64, config: WorkerConfig) -> WorkerHandle {
    Worker::spawn(
        spec(id, capacity),
        rig.worker_dir(id),
        rig.stores.clone(),
        config,
        Weights::LOW_LATENCY,
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_byte_exact_and_read_back_through_the_warehouse() {
    let rig = Rig::new();
    let w = start(&rig, 1, 64 * MB, config()).await;
    let f = rig.file("/data/a").await;
    // Odd sizes and offsets, with holes between them.
    let pieces: Vec<(u64, Vec<u8>)> = vec![
        (0, pattern(1, 1)),
        (1, pattern(4095, 2)),
        (8192, pattern(4097, 3)),
        (100_003, pattern(65_537, 4)),
    ];
    let mut labels = Vec::new();
    for (offset, data) in &pieces {
        labels.push(rig.write(&f, *offset, data).await);
    }
    complete(&rig.run(1, labels).await);

    let mut expected = vec![0u8; 100_003 + 65_537];
    for (offset, data) in &pieces {
        expected[*offset as usize..][..data.len()].copy_from_slice(data);
    }
    let on_disk = std::fs::read(local(&rig.worker_dir(1), f.id)).unwrap();
    assert_eq!(on_disk, expected);
    let meta = rig.stores.inventory.file(f.id).await.unwrap().unwrap();
    assert_eq!(meta.size, expected.len() as u64);

    // Whole file, a range across a hole, a single byte.
    let reads = vec![
        rig.read(&f, 0, expected.len() as u64),
        rig.read(&f, 4000, 5000),
        rig.read(&f, 100_003, 1),
    ];
    let statuses = rig.run(1, reads).await;
    assert_eq!(rig.result(&statuses[0]).await, expected);
    assert_eq!(rig.result(&statuses[1]).await, expected[4000..9000]);
    assert_eq!(rig.result(&statuses[2]).await, expected[100_003..100_004]);
    // Written data no longer sits in the warehouse.
    assert!(rig.stores.warehouse.keys("a1/w/").await.unwrap().is_empty());
    let stats = w.stats();
    assert_eq!(stats.labels_done, 7);
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_writes_land_in_queue_order() {
    let rig = Rig::new();
    let w = start(&rig, 1, 256 * MB, config()).await;
    let files = [
        rig.file("/o/1").await,
        rig.file("/o/2").await,
        rig.file("/o/3").await,
    ];
    let mut expected = vec![vec![0u8; 64 * 1024]; files.len()];
    let mut labels = Vec::new();
    for i in 0..300u32 {
        let which = (i % 3) as usize;
        let offset = fastrand::u64(0..60_000);
        let len = fastrand::usize(1..4096);
        let data = pattern(len, i as u8);
        expected[which][offset as usize..][..len].copy_from_slice(&data);
        labels.push(rig.write(&files[which], offset, &data).await);
    }
    complete(&rig.run(1, labels).await);
    for (f, want) in files.iter().zip(&expected) {
        let size = rig.stores.inventory.file(f.id).await.unwrap().unwrap().size as usize;
        let on_disk = std::fs::read(local(&rig.worker_dir(1), f.id)).unwrap();
        assert_eq!(on_disk, want[..size]);
        let status = rig.run(1, vec![rig.read(f, 0, size as u64)]).await;
        assert_eq!(rig.result(&status[0]).await, want[..size]);
    }
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_and_aggregated_writes() {
    let rig = Rig::new();
    let w = start(&rig, 1, 64 * MB, config()).await;
    let f = rig.file("/idx").await;
    let data = pattern(30, 9);
    let mut indexed = rig.write(&f, 0, &data).await;
    indexed.index = vec![
        Segment {
            file_offset: 1000,
            buf_offset: 0,
            len: 10,
        },
        Segment {
            file_offset: 0,
            buf_offset: 10,
            len: 20,
        },
    ];
    let a = rig.write(&f, 2000, b"abc").await;
    let b = rig.write(&f, 2003, b"defg").await;
    let ids = vec![indexed.id, a.id, b.id];
    rig.push(1, vec![Task::single(indexed)]).await;
    rig.push(
        1,
        vec![Task {
            labels: vec![a, b],
            aggregated: true,
            supertask: false,
        }],
    )
    .await;
    complete(&rig.wait(&ids).await);
    let on_disk = std::fs::read(local(&rig.worker_dir(1), f.id)).unwrap();
    assert_eq!(on_disk[1000..1010], data[..10]);
    assert_eq!(on_disk[..20], data[10..]);
    assert_eq!(&on_disk[2000..2007], b"abcdefg");

    let mut bad = rig.write(&f, 0, &data).await;
    bad.index = vec![Segment {
        file_offset: 0,
        buf_offset: 25,
        len: 10,
    }];
    let status = rig.run(1, vec![bad]).await;
    assert_eq!(status[0].state, LabelState::Failed);
    assert!(
        status[0].error.as_ref().unwrap().contains("outside"),
        "{status:?}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_length_write_completes_and_sets_size() {
    let rig = Rig::new();
    let w = start(&rig, 1, MB, config()).await;
    let f = rig.file("/z").await;
    complete(&rig.run(1, vec![rig.write(&f, 5000, b"").await]).await);
    let meta = rig.stores.inventory.file(f.id).await.unwrap().unwrap();
    assert_eq!(meta.size, 5000);
    // Reading the hole gives zeros.
    let s = rig.run(1, vec![rig.read(&f, 0, 5000)]).await;
    assert_eq!(rig.result(&s[0]).await, vec![0u8; 5000]);
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_flush_and_rename() {
    let rig = Rig::new();
    let w1 = start(&rig, 1, 64 * MB, config()).await;
    let w2 = start(&rig, 2, 64 * MB, config()).await;
    let a = rig.file("/r/a").await;
    let b = rig.file("/r/b").await;
    let mut sync_write = rig.write(&a, 0, &pattern(10_000, 1)).await;
    sync_write.sync = true;
    complete(&rig.run(1, vec![sync_write]).await);
    // /r/b lives on both workers.
    complete(
        &rig.run(1, vec![rig.write(&b, 0, &pattern(100, 2)).await])
            .await,
    );
    complete(
        &rig.run(2, vec![rig.write(&b, 100, &pattern(100, 3)).await])
            .await,
    );
    assert!(local(&rig.worker_dir(2), b.id).exists());

    let s = rig
        .run(
            1,
            vec![
                rig.on_file(LabelKind::Flush, &a),
                rig.on_file(LabelKind::Flush, &b),
            ],
        )
        .await;
    complete(&s);

    // Renaming /r/a over /r/b reclaims b's bytes on both workers.
    let rename = rig.rename(&a, "/r/b");
    complete(&rig.run(1, vec![rename.clone()]).await);
    let moved = rig.stores.inventory.lookup("/r/b").await.unwrap().unwrap();
    assert_eq!(moved.id, a.id);
    assert!(rig.stores.inventory.lookup("/r/a").await.unwrap().is_none());
    // The same label delivered again, to a worker that has not seen it,
    // after a new file was made at the old name: it moves nothing (the
    // model checker saw such a copy replace the moved file with the new,
    // empty one).
    let again = rig
        .stores
        .inventory
        .create("/r/a", FileKind::File, 0o644, labios_store::Owner::root(1))
        .await
        .unwrap();
    let s = rig.run(2, vec![rename]).await;
    assert_eq!(s[0].state, LabelState::Failed, "{s:?}");
    assert_eq!(
        rig.stores
            .inventory
            .lookup("/r/b")
            .await
            .unwrap()
            .unwrap()
            .id,
        a.id
    );
    assert_eq!(
        rig.stores
            .inventory
            .lookup("/r/a")
            .await
            .unwrap()
            .unwrap()
            .id,
        again.id
    );
    rig.stores.inventory.remove("/r/a").await.unwrap();
    assert!(!local(&rig.worker_dir(1), b.id).exists());
    let deadline = Instant::now() + Duration::from_secs(5);
    while local(&rig.worker_dir(2), b.id).exists() {
        assert!(
            Instant::now() < deadline,
            "worker 2 never reclaimed the replaced file"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let used = w1.refresh().await.used;
    assert!(used >= 10_000, "used {used}");
    // A delete keeps what the inventory still gives the worker...
    complete(
        &rig.run(1, vec![rig.on_file(LabelKind::Delete, &moved)])
            .await,
    );
    assert_eq!(w1.status().used, used);
    // ...and frees everything once the file is gone from it, as a client
    // removes a file.
    rig.stores.inventory.remove("/r/b").await.unwrap();
    complete(
        &rig.run(1, vec![rig.on_file(LabelKind::Delete, &moved)])
            .await,
    );
    assert!(!local(&rig.worker_dir(1), a.id).exists());
    assert_eq!(w1.status().used, 0);
    // Deleting what is not there is fine.
    complete(
        &rig.run(1, vec![rig.on_file(LabelKind::Delete, &moved)])
            .await,
    );
    w1.shutdown().await;
    w2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_and_the_worker_keeps_serving() {
    let rig = Rig::new();
    let w = start(&rig, 1, 8192, config()).await;
    let other = start(&rig, 2, MB, config()).await;
    let f = rig.file("/bad").await;

    let mut missing = rig.write(&f, 0, b"hello").await;
    let key = match &missing.source {
        labios_label::Pointer::Warehouse { key, .. } => key.clone(),
        _ => unreachable!(),
    };
    rig.stores.warehouse.delete(&key).await.unwrap();
    let mut short = rig.write(&f, 0, b"hello").await;
    if let labios_label::Pointer::Warehouse { len, .. } = &mut short.source {
        *len = 7;
    }
    let too_big = rig.write(&f, 0, &vec![1u8; 64 * 1024]).await;
    // A pipeline failing at the worker: "x" is not gzip data.
    let mut pipeline = rig.write(&f, 0, b"x").await;
    pipeline.operations.push(labios_label::Operation {
        function: "gunzip".into(),
        args: vec![],
    });
    let mut no_file = rig.read(&f, 0, 1);
    no_file.source = labios_label::Pointer::None;
    let ids: Vec<_> = [&missing, &short, &too_big, &pipeline, &no_file]
        .iter()
        .map(|l| l.id)
        .collect();
    // Supertask: one failing label does not stop the next.
    let good = rig.write(&f, 0, b"fine").await;
    missing.priority = 1;
    rig.push(
        1,
        vec![Task {
            labels: vec![missing, short, too_big, pipeline, no_file, good.clone()],
            aggregated: false,
            supertask: true,
        }],
    )
    .await;
    let s = rig.wait(&ids).await;
    let errors: Vec<String> = s
        .iter()
        .map(|s| s.error.clone().unwrap_or_default())
        .collect();
    assert!(
        s.iter()
            .all(|s| s.state == LabelState::Failed && s.worker == Some(1)),
        "{s:?}"
    );
    assert!(
        errors[0].contains("missing from the warehouse"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains('7') && errors[1].contains('5'),
        "{}",
        errors[1]
    );
    assert!(errors[2].contains("worker 1 is full"), "{}", errors[2]);
    assert!(errors[3].contains("gunzip"), "{}", errors[3]);
    assert!(errors[4].contains("file range"), "{}", errors[4]);
    complete(&rig.wait(&[good.id]).await);

    // Bytes that moved to another worker are refused with "moved:".
    complete(&rig.run(2, vec![rig.write(&f, 2, b"ZZ").await]).await);
    let s = rig.run(1, vec![rig.read(&f, 0, 4)]).await;
    assert_eq!(s[0].state, LabelState::Failed);
    assert!(s[0].error.as_ref().unwrap().starts_with("moved:"), "{s:?}");
    // The local file lost its bytes behind the inventory's back: an error,
    // not a short read.
    std::fs::OpenOptions::new()
        .write(true)
        .open(local(&rig.worker_dir(1), f.id))
        .unwrap()
        .set_len(1)
        .unwrap();
    let s = rig.run(1, vec![rig.read(&f, 0, 2)]).await;
    assert_eq!(s[0].state, LabelState::Failed);
    assert!(s[0].error.as_ref().unwrap().contains("shorter"), "{s:?}");
    // Still serving.
    complete(&rig.run(1, vec![rig.write(&f, 0, b"ok").await]).await);
    w.shutdown().await;
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_written_outside_the_worker_dir() {
    let rig = Rig::new();
    let w = start(&rig, 7, 64 * MB, config()).await;
    let evil = rig.file("/etc/passwd").await;
    let f = rig.file("/x/ü ..y/z").await;
    complete(
        &rig.run(
            7,
            vec![
                rig.write(&evil, 0, b"evil").await,
                rig.write(&f, 1 << 30, b"far").await,
            ],
        )
        .await,
    );
    w.shutdown().await;
    let files = tree(rig.dir.path());
    let worker_files = rig.worker_dir(7).join("files");
    assert_eq!(files.len(), 2, "{files:?}");
    for path in &files {
        assert!(
            path.starts_with(&worker_files),
            "{path:?} is outside {worker_files:?}"
        );
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            name.len() == 16 && name.chars().all(|c| c.is_ascii_hexdigit()),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspends_when_idle_and_wakes_on_task_arrival_or_wake() {
    let rig = Rig::new();
    let w = start(
        &rig,
        1,
        64 * MB,
        WorkerConfig {
            idle_suspend_ms: 100,
            ..config()
        },
    )
    .await;
    assert!(
        w.wait_for(WorkerState::Suspended, Duration::from_secs(5))
            .await
    );
    let published = rig.stores.inventory.workers().await.unwrap();
    assert_eq!(published[0].state, WorkerState::Suspended);
    assert_eq!(
        published[0].score,
        Weights::LOW_LATENCY.score(&published[0])
    );

    // A task arriving wakes it.
    let f = rig.file("/wake").await;
    complete(&rig.run(1, vec![rig.write(&f, 0, b"wake up").await]).await);
    assert!(w.wait_woken(0, Duration::from_secs(5)).await);
    let stats = w.stats();
    assert_eq!(stats.wakes, 1);
    let on_task = stats.last_wake_latency.unwrap();
    assert_eq!(w.status().state, WorkerState::Active);

    // Idle again, then an activation message.
    assert!(
        w.wait_for(WorkerState::Suspended, Duration::from_secs(5))
            .await
    );
    assert!(w.wake());
    assert!(w.wait_woken(1, Duration::from_secs(5)).await);
    assert_eq!(w.status().state, WorkerState::Active);
    assert!(!w.wake(), "an active worker has nothing to wake");
    let stats = w.stats();
    assert_eq!(stats.wakes, 2);
    let on_wake = stats.last_wake_latency.unwrap();
    println!("wake-up latency: on task arrival {on_task:?}, on wake() {on_wake:?}");
    assert!(on_task < Duration::from_secs(1) && on_wake < Duration::from_secs(1));

    // Manager-initiated suspend; a task still wakes it.
    w.suspend();
    assert!(
        w.wait_for(WorkerState::Suspended, Duration::from_secs(5))
            .await
    );
    complete(&rig.run(1, vec![rig.read(&f, 0, 7)]).await);
    assert!(w.wait_woken(2, Duration::from_secs(5)).await);
    assert_eq!(w.stats().wakes, 3);
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_score_and_restarts_with_its_data() {
    let rig = Rig::new();
    let w = start(&rig, 3, 4 * MB, config()).await;
    let f = rig.file("/s").await;
    complete(
        &rig.run(3, vec![rig.write(&f, 0, &vec![5u8; 2 * MB as usize]).await])
            .await,
    );
    // The interval publication catches up with the write.
    let deadline = Instant::now() + Duration::from_secs(5);
    let published = loop {
        let p = rig.stores.inventory.workers().await.unwrap().pop().unwrap();
        if p.used >= 2 * MB && p.queued == 0 {
            break p;
        }
        assert!(Instant::now() < deadline, "status never published: {p:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(published.score, Weights::LOW_LATENCY.score(&published));
    assert_eq!(published.labels_done, 1);
    assert_eq!(published.bytes_done, 2 * MB);
    w.shutdown().await;
    let final_status = rig.stores.inventory.workers().await.unwrap().pop().unwrap();
    assert_eq!(final_status.state, WorkerState::Suspended);

    let again = start(&rig, 3, 4 * MB, config()).await;
    assert_eq!(again.status().used, published.used);
    let s = rig.run(3, vec![rig.read(&f, MB - 1, 2)]).await;
    assert_eq!(rig.result(&s[0]).await, vec![5u8; 2]);
    again.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_tasks_already_taken() {
    let rig = Rig::new();
    let w = start(
        &rig,
        1,
        64 * MB,
        WorkerConfig {
            threads: 1,
            ..config()
        },
    )
    .await;
    let f = rig.file("/many").await;
    let mut labels = Vec::new();
    for i in 0..200u64 {
        labels.push(rig.write(&f, i * 10, &pattern(10, i as u8)).await);
    }
    let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
    rig.push(1, labels.into_iter().map(Task::single).collect())
        .await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    w.shutdown().await;
    let depth = rig.stores.tasks.depth("worker.1").await.unwrap();
    let statuses = rig
        .stores
        .inventory
        .wait(&ids, Duration::from_millis(1))
        .await
        .unwrap();
    let done = statuses
        .iter()
        .filter(|s| s.state == LabelState::Complete)
        .count();
    // Every task was either executed or is still queued: none was lost.
    assert_eq!(done + depth, 200, "done {done}, queued {depth}");
}

/// A manager in another process knows a worker is alive only by its
/// heartbeat, so a suspended worker keeps publishing its status; and it
/// wakes on an empty task (an activation message), which it acknowledges
/// without executing or reporting anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_worker_keeps_its_heartbeat_and_wakes_on_an_empty_task() {
    let rig = Rig::new();
    let w = start(&rig, 1, 64 * MB, config()).await;
    w.suspend();
    assert!(
        w.wait_for(WorkerState::Suspended, Duration::from_secs(5))
            .await
    );
    let heartbeat = || async { rig.stores.inventory.workers().await.unwrap()[0].heartbeat };
    let first = heartbeat().await;
    // Several score intervals (50 ms) later, still suspended and newer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = rig.stores.inventory.workers().await.unwrap()[0].clone();
    assert_eq!(later.state, WorkerState::Suspended);
    assert!(later.heartbeat > first, "no heartbeat while suspended");

    let queue = labios_store::worker_queue(1);
    rig.stores
        .tasks
        .push(&queue, vec![Task::wake_up()])
        .await
        .unwrap();
    assert!(w.wait_woken(0, Duration::from_secs(5)).await);
    assert_eq!(w.status().state, WorkerState::Active);
    let t = Instant::now();
    while rig.stores.tasks.depth(&queue).await.unwrap() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "wake-up not acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(w.stats().labels_done, 0);
    assert!(heartbeat().await >= later.heartbeat);
    w.shutdown().await;
}

/// A queue that stops answering depth queries (NATS after a restart took
/// seconds) must not silence the heartbeat: the manager declared a live
/// worker down (a CI failure of `nats_and_redis_restart_lose_no_acknowledged_write`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_goes_on_while_the_queue_does_not_answer() {
    let rig = Rig::new();
    let w = start(&rig, 1, 64 * MB, config()).await;
    rig.gate
        .depth_stalls
        .store(true, std::sync::atomic::Ordering::Release);
    let heartbeat = || async { rig.stores.inventory.workers().await.unwrap()[0].heartbeat };
    let mut last = heartbeat().await;
    let t = Instant::now();
    let mut beats = 0;
    // Five more heartbeats (score interval 50 ms), each within a second.
    while beats < 5 {
        let now = heartbeat().await;
        if now > last {
            beats += 1;
            last = now;
        }
        assert!(
            t.elapsed() < Duration::from_secs(1 + beats),
            "{beats} heartbeats while the queue did not answer"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rig.gate
        .depth_stalls
        .store(false, std::sync::atomic::Ordering::Release);
    w.shutdown().await;
}

/// Every tick of the score interval publishes a heartbeat. Regression: a
/// tick published only if a whole interval had passed since the last
/// publication, and the last one had started a little after the previous
/// tick (behind that tick's stack look-up): about every other tick was
/// skipped, and a heartbeat delayed by a Redis restart on top of that
/// outlasted the manager's `dead_after_ms` (CI, `cluster_faults`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tick_publishes_a_heartbeat() {
    let rig = Rig::new();
    *rig.gate.heartbeats.lock() = Some((rig.stores.inventory.clone(), Vec::new()));
    let w = start(&rig, 1, 64 * MB, config()).await;
    const TICKS: usize = 20;
    let t = Instant::now();
    let log = loop {
        let seen = rig
            .gate
            .heartbeats
            .lock()
            .as_ref()
            .map_or(0, |(_, l)| l.len());
        if seen > TICKS {
            break rig.gate.heartbeats.lock().take().unwrap().1;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "only {seen} ticks in 20 s at a 50 ms interval"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The first query may come before the first tick's publication.
    let beats: Vec<u64> = log[1..].iter().map(|b| b[0]).collect();
    let repeated = beats.windows(2).filter(|p| p[1] <= p[0]).count();
    assert_eq!(
        repeated, 0,
        "{repeated} of {TICKS} ticks published no heartbeat: {beats:?}"
    );
    w.shutdown().await;
}

/// Issue 11, finding 2: every write kind runs one sequence with the
/// newest-label-wins guard. An older label delivered after a newer one
/// (several dispatchers, a redelivery) must not put its bytes under the
/// newer label's extent, whether either carries a pipeline, and whether
/// the newer one ran on this worker or another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_label_arriving_late_never_overwrites_a_newer_one() {
    let rig = Rig::new();
    let w1 = start(&rig, 1, 64 * MB, config()).await;
    let w2 = start(&rig, 2, 64 * MB, config()).await;
    // `sort` keeps the length, so both versions cover the same bytes.
    let sorted = |l: &mut labios_label::Label| {
        l.operations = labios_label::Operation::parse_pipeline("sort:dtype=u32").unwrap();
    };
    let words = |seed: u32| -> Vec<u8> {
        (0..4096u32)
            .flat_map(|i| (i.wrapping_mul(2_654_435_761) ^ seed).to_le_bytes())
            .collect()
    };
    let sort = |data: &[u8]| -> Vec<u8> {
        let mut v: Vec<u32> = data
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        v.sort_unstable();
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    };
    // (older is a pipeline, newer is a pipeline, newer runs elsewhere)
    let cases = [
        (true, false, false),
        (false, true, false),
        (true, true, false),
        (true, false, true),
        (false, false, true),
    ];
    for (n, &(older_sorts, newer_sorts, elsewhere)) in cases.iter().enumerate() {
        let f = rig.file(&format!("/late/{n}")).await;
        let (a, b) = (words(n as u32), words(1000 + n as u32));
        let mut older = rig.write(&f, 0, &a).await;
        let mut newer = rig.write(&f, 0, &b).await;
        if older_sorts {
            sorted(&mut older);
        }
        if newer_sorts {
            sorted(&mut newer);
        }
        let want = if newer_sorts { sort(&b) } else { b.clone() };
        complete(&rig.run(if elsewhere { 2 } else { 1 }, vec![newer]).await);
        complete(&rig.run(1, vec![older]).await);
        let size = want.len() as u64;
        let holder = if elsewhere { 2 } else { 1 };
        let status = rig.run(holder, vec![rig.read(&f, 0, size)]).await;
        assert!(
            rig.result(&status[0]).await == want,
            "case {n}: the older label's bytes won"
        );
        if !elsewhere {
            let on_disk = std::fs::read(local(&rig.worker_dir(1), f.id)).unwrap();
            assert!(on_disk == want, "case {n}: stale bytes on the device");
        } else {
            // Nothing of the older label stays on worker 1.
            let kept = std::fs::metadata(local(&rig.worker_dir(1), f.id))
                .map(|m| std::os::unix::fs::MetadataExt::blocks(&m))
                .unwrap_or(0);
            assert_eq!(kept, 0, "case {n}: worker 1 keeps bytes nobody reads");
        }
    }
    w1.shutdown().await;
    w2.shutdown().await;
}

/// A worker that overwrites bytes another worker holds asks that worker to
/// free them. Before, the label waited for room in the other worker's
/// queue: two workers with full queues, each with every lane waiting on the
/// other's, stopped for good (the soak in BENCHMARKS.md), and after the
/// push timeout the writes were reported Failed although they had landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_never_waits_for_room_in_the_queue_of_the_worker_it_displaces() {
    const BOUND: usize = 4;
    let rig = Rig::with_bounds(BOUND, 256 * MB);
    let w1 = start(&rig, 1, 64 * MB, config()).await;
    let w2 = start(&rig, 2, 64 * MB, config()).await;
    let f = rig.file("/displaced").await;
    let other = rig.file("/other").await;
    complete(
        &rig.run(2, vec![rig.write(&f, 0, &pattern(8192, 1)).await])
            .await,
    );
    assert!(w2.refresh().await.used >= 8192);

    // Worker 2 stops pulling, and its queue fills to the bound.
    let queue = labios_store::worker_queue(2);
    rig.gate.close(&queue).await;
    let held: Vec<_> = (0..BOUND)
        .map(|_| rig.on_file(LabelKind::Flush, &other))
        .collect();
    let held_ids: Vec<_> = held.iter().map(|l| l.id).collect();
    rig.push(2, held.into_iter().map(Task::single).collect())
        .await;
    assert_eq!(rig.stores.tasks.depth(&queue).await.unwrap(), BOUND);

    // Worker 1 overwrites all of it: the label completes at once.
    let newer = pattern(8192, 2);
    let statuses = rig.run(1, vec![rig.write(&f, 0, &newer).await]).await;
    complete(&statuses);
    let status = rig.run(1, vec![rig.read(&f, 0, 8192)]).await;
    assert!(rig.result(&status[0]).await == newer);

    // Once worker 2 pulls again, the reclaim reaches it and frees its copy;
    // nobody waits for that delete, so it leaves no status behind.
    let done_before = w2.stats().labels_done;
    rig.gate.open(&queue);
    complete(&rig.wait(&held_ids).await);
    let deadline = Instant::now() + Duration::from_secs(20);
    while w2.refresh().await.used > 0 || w2.stats().labels_done < done_before + BOUND as u64 + 1 {
        assert!(
            Instant::now() < deadline,
            "worker 2 never freed the displaced bytes: {:?}",
            w2.status()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(rig.stores.inventory.label_count().await.unwrap(), 0);
    w1.shutdown().await;
    w2.shutdown().await;
}

/// Reads on every slot of a worker's lanes, writes queued behind them, and
/// the warehouse full of the writes' data: the reads' results go into the
/// warehouse's reserve for results. Before, they waited for room that only
/// the queued writes would free, and failed after the put timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_complete_while_queued_writes_fill_the_warehouse() {
    const WAREHOUSE: u64 = MB;
    const READ: u64 = 8 << 10;
    let rig = Rig::with_bounds(4096, WAREHOUSE);
    let one_lane = WorkerConfig {
        threads: 1,
        ..config()
    };
    let w = start(&rig, 1, 64 * MB, one_lane).await;
    let f = rig.file("/read-me").await;
    let data = pattern(READ as usize, 7);
    complete(&rig.run(1, vec![rig.write(&f, 0, &data).await]).await);

    let queue = labios_store::worker_queue(1);
    rig.gate.close(&queue).await;
    // More reads than the lane runs at once, all of whose results fit in
    // the reserve, then writes whose data fills the rest of the warehouse.
    let reads: Vec<_> = (0..12).map(|_| rig.read(&f, 0, READ)).collect();
    assert!(12 * READ <= labios_store::warehouse::result_reserve(WAREHOUSE));
    let mut labels = reads.clone();
    let g = rig.file("/queued").await;
    let piece = 32u64 << 10;
    let staged = labios_store::warehouse::staged_bound(WAREHOUSE);
    for i in 0..staged / piece {
        labels.push(
            rig.write(&g, i * piece, &pattern(piece as usize, i as u8))
                .await,
        );
    }
    assert!(rig.stores.warehouse.usage().await.unwrap() + piece > staged);
    let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
    rig.push(1, labels.into_iter().map(Task::single).collect())
        .await;
    rig.gate.open(&queue);
    let statuses = rig.wait(&ids).await;
    complete(&statuses);
    for status in &statuses[..reads.len()] {
        assert!(rig.result(status).await == data);
    }
    w.shutdown().await;
}

/// The compute lane (issue 13, LabStor's work orchestrator): pipelines run
/// at most `compute_threads` at once, and a small write to the same worker
/// does not wait behind the pipelines that bound holds back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_writes_pass_pipelines_held_back_by_the_compute_lane() {
    let rig = Rig::new();
    let bounded = WorkerConfig {
        compute_threads: 1,
        ..config()
    };
    let w = start(&rig, 1, 256 * MB, bounded).await;
    // zstd at level 19 takes a good part of a second per MiB.
    let mut slow = Vec::new();
    for n in 0..3 {
        let f = rig.file(&format!("/compute/{n}")).await;
        let mut label = rig.write(&f, 0, &pattern(MB as usize, n)).await;
        label.operations = labios_label::Operation::parse_pipeline("zstd:level=19").unwrap();
        slow.push(label);
    }
    let slow_ids: Vec<_> = slow.iter().map(|l| l.id).collect();
    rig.push(1, slow.into_iter().map(Task::single).collect())
        .await;
    let t = Instant::now();
    while w.stats().compute_peak == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "no pipeline started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let f = rig.file("/compute/small").await;
    let small = pattern(4096, 9);
    complete(&rig.run(1, vec![rig.write(&f, 0, &small).await]).await);
    let mut waiting = 0;
    for id in &slow_ids {
        let status = rig.stores.inventory.status(*id).await.unwrap();
        waiting += usize::from(status.is_none_or(|s| !s.state.is_final()));
    }
    assert!(waiting >= 1, "the small write waited for every pipeline");

    assert_eq!(w.stats().compute_threads_now, 1, "one thread at the bound");
    complete(&rig.wait(&slow_ids).await);
    assert_eq!(
        w.stats().compute_peak,
        1,
        "more pipelines ran than the bound"
    );
    let back = rig.run(1, vec![rig.read(&f, 0, 4096)]).await;
    assert!(rig.result(&back[0]).await == small);
    w.shutdown().await;
}

/// Write labels of `data` at consecutive offsets of `f`, `piece` bytes each.
async fn consecutive(rig: &Rig, f: &FileMeta, data: &[u8], piece: usize) -> Vec<Label> {
    let mut labels = Vec::new();
    for (i, chunk) in data.chunks(piece).enumerate() {
        labels.push(rig.write(f, (i * piece) as u64, chunk).await);
    }
    labels
}

/// Pushes `labels` to worker 1 as one aggregated task, as the shuffler
/// makes them, and waits for their statuses.
async fn run_aggregated(rig: &Rig, labels: Vec<Label>) -> Vec<LabelStatus> {
    let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
    rig.push(
        1,
        vec![Task {
            labels,
            aggregated: true,
            supertask: false,
        }],
    )
    .await;
    rig.wait(&ids).await
}

/// The default stack with every call counted.
fn metered() -> labios_stack::Spec {
    labios_stack::Spec::try_from(vec!["metrics".to_string(), "file".to_string()]).unwrap()
}

/// Writes the device saw, from the `metrics` table of the worker's stack.
fn device_writes(w: &WorkerHandle) -> u64 {
    let layers = w.status().layers;
    let device = layers.last().expect("the worker runs a metered stack");
    assert_eq!(device.name, "file");
    device.writes
}

/// An aggregated task (consecutive writes of one file, as the shuffler
/// makes them) reaches the stack as one vectored write, each label still
/// with its own status; a task whose labels overlap runs label by label,
/// the newest label's bytes last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_task_is_one_call_to_the_stack() {
    const PIECE: usize = 4096;
    let rig = Rig::new();
    let w = start(&rig, 1, 64 * MB, config()).await;
    w.set_stack(metered()).await.unwrap();
    let f = rig.file("/aggregated").await;
    let data = pattern(16 * PIECE, 3);
    let mut labels = consecutive(&rig, &f, &data, PIECE).await;
    for label in labels.iter_mut().step_by(4) {
        label.sync = true;
    }
    complete(&run_aggregated(&rig, labels).await);
    assert_eq!(device_writes(&w), 1, "one call for the whole task");
    let back = rig.run(1, vec![rig.read(&f, 0, data.len() as u64)]).await;
    assert!(rig.result(&back[0]).await == data);

    let older = rig.write(&f, 0, &pattern(PIECE, 4)).await;
    let newer_bytes = pattern(PIECE, 5);
    let newer = rig.write(&f, 0, &newer_bytes).await;
    complete(&run_aggregated(&rig, vec![older, newer]).await);
    assert_eq!(device_writes(&w), 3, "overlapping labels, one call each");
    let back = rig.run(1, vec![rig.read(&f, 0, PIECE as u64)]).await;
    assert!(rig.result(&back[0]).await == newer_bytes);
    w.shutdown().await;
}

/// A label of an aggregated task that cannot run (its staged bytes are
/// gone) fails alone, naming why; the others land, in one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failed_label_of_an_aggregated_task_fails_alone() {
    let rig = Rig::new();
    let w = start(&rig, 1, 64 * MB, config()).await;
    w.set_stack(metered()).await.unwrap();
    let f = rig.file("/partly").await;
    let data = pattern(3 * 1000, 6);
    let labels = consecutive(&rig, &f, &data, 1000).await;
    let lost = labels[1].staged_key().unwrap().to_string();
    assert!(rig.stores.warehouse.delete(&lost).await.unwrap());
    let statuses = run_aggregated(&rig, labels).await;
    assert_eq!(statuses[0].state, LabelState::Complete, "{statuses:?}");
    assert_eq!(statuses[2].state, LabelState::Complete, "{statuses:?}");
    assert_eq!(statuses[1].state, LabelState::Failed);
    let error = statuses[1].error.as_deref().unwrap();
    assert!(error.contains("missing from the warehouse"), "{error}");
    assert_eq!(device_writes(&w), 1);
    for i in [0usize, 2] {
        let back = rig
            .run(1, vec![rig.read(&f, (i * 1000) as u64, 1000)])
            .await;
        assert!(rig.result(&back[0]).await == data[i * 1000..][..1000]);
    }
    let hole = rig.run(1, vec![rig.read(&f, 1000, 1000)]).await;
    assert!(rig.result(&hole[0]).await == vec![0; 1000]);
    w.shutdown().await;
}

/// An aggregated task larger than the room the worker has left lands
/// what fits, label by label, as its labels would alone; the rest fail
/// naming the full worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_task_over_the_room_left_lands_what_fits() {
    const PIECE: usize = 4096;
    let rig = Rig::new();
    let w = start(&rig, 1, 10 << 10, config()).await;
    w.set_stack(metered()).await.unwrap();
    let f = rig.file("/nearly-full").await;
    let data = pattern(3 * PIECE, 8);
    let labels = consecutive(&rig, &f, &data, PIECE).await;
    let statuses = run_aggregated(&rig, labels).await;
    complete(&statuses[..2]);
    assert_eq!(statuses[2].state, LabelState::Failed);
    let error = statuses[2].error.as_deref().unwrap();
    assert!(error.contains("worker 1 is full"), "{error}");
    assert_eq!(device_writes(&w), 2, "one call per label that fit");
    let back = rig.run(1, vec![rig.read(&f, 0, 2 * PIECE as u64)]).await;
    assert!(rig.result(&back[0]).await == data[..2 * PIECE]);
    w.shutdown().await;
}

/// A draining stop (the embedded runtime's, whose queues live in its
/// memory) runs every task still queued for the worker before it stops;
/// a plain stop (a worker of durable queues) leaves them queued for its
/// restart. The embedded runtime once stopped its workers plainly, and
/// what waited in their queues was lost with the process although the
/// clients had been told it was published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_stop_runs_every_queued_task_first() {
    let rig = Rig::new();
    // One task at a time: nearly all wait in the queue at the stop.
    let one_at_a_time = WorkerConfig {
        threads: 1,
        pull_batch: 1,
        ..config()
    };
    for (id, drain) in [(1, false), (2, true)] {
        let w = start(&rig, id, 64 * MB, one_at_a_time.clone()).await;
        let f = rig.file(&format!("/drain/{id}")).await;
        let mut labels = Vec::new();
        for i in 0..40u64 {
            labels.push(rig.write(&f, i * 4096, &pattern(4096, i as u8)).await);
        }
        let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
        rig.push(id, labels.into_iter().map(Task::single).collect())
            .await;
        if drain {
            w.drain_and_shutdown().await;
        } else {
            w.shutdown().await;
        }
        let queue = labios_store::worker_queue(id);
        let left = rig.stores.tasks.depth(&queue).await.unwrap();
        if drain {
            assert_eq!(left, 0, "tasks left queued after a draining stop");
            complete(&rig.wait(&ids).await);
            let on_disk = std::fs::read(local(&rig.worker_dir(id), f.id)).unwrap();
            let want: Vec<u8> = (0..40u64).flat_map(|i| pattern(4096, i as u8)).collect();
            assert!(on_disk == want, "the bytes differ");
        } else {
            assert!(left > 0, "a plain stop ran every queued task");
        }
    }
}
