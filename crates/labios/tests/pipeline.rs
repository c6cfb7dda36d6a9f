//! End-to-end tests of the whole label pipeline:
//! client -> label queue -> dispatcher -> worker queues -> workers -> inventory.
//!
//! Every test is written once against `common::deploy::Deployed` and runs on
//! both deployments (ARCHITECTURE.md "Deployments": one test suite runs against both):
//! `<test>::embedded` on the in-process runtime, `<test>::cluster` on real
//! nats-server and redis-server with `labios dispatcher` / `labios worker`
//! processes (needs `bash scripts/services.sh install`).

mod common;

use bytes::Bytes;
use common::deploy::{Deployed, Kind};
use common::{data, files_under};
use labios_client::{ClientConfig, FileRef, IoMode};
use labios_label::{
    AppId, FileId, LabelId, LabelStatus, Result, WorkerId, WorkerState, WorkerStatus,
};
use labios_store::inventory::{AppRecord, Extent, FileKind, FileMeta, Inventory, Owner, SetAttr};
use labios_store::{Stores, XattrCond};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

both!(
    concurrent_clients_odd_sizes_sync_and_async_read_back_exact,
    async_small_writes_aggregate_and_read_after_write_sees_them,
    overwrite_keeps_bytes_outside_the_range_and_reads_are_never_short,
    nothing_is_written_outside_the_data_directory,
    a_lone_label_does_not_wait_out_the_batch_window,
    every_policy_spreads_load_and_suspended_workers_wake,
    completed_label_metadata_is_reclaimed_under_sustained_load,
    restart_reads_back_every_completed_file,
    a_clean_stop_loses_no_published_write,
    a_full_queue_pushes_back_instead_of_growing,
    remove_rename_flush_and_rooms,
    sync_mode_config_and_label_size_settings_are_honoured,
    several_dispatchers_on_one_queue_keep_the_newest_write,
    removed_truncated_and_overwritten_bytes_free_their_space_on_every_worker,
    cached_writes_on_their_way_to_the_queue_are_waited_for,
    a_lookup_that_raced_a_landing_write_is_read_again,
    a_background_flush_one_wait_joins_still_holds_back_another_read,
    holds_are_counted_and_a_last_let_go_runs_before_the_next_hold,
);

const ODD_SIZES: [usize; 8] = [0, 1, 65_535, 65_536, 65_537, 1_048_575, 1_048_577, 10 << 20];

async fn concurrent_clients_odd_sizes_sync_and_async_read_back_exact(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let mut tasks = Vec::new();
    for c in 0..4u64 {
        let client = d.client().await;
        tasks.push(tokio::spawn(async move {
            for (i, &size) in ODD_SIZES.iter().enumerate() {
                let path = format!("/clients/{c}/file{i}");
                let bytes = data(c * 100 + i as u64, size);
                if (c + i as u64).is_multiple_of(2) {
                    client.write_at_sync(&path, 0, bytes.clone()).await.unwrap();
                } else {
                    let h = client
                        .write_at_async(&path, 0, bytes.clone())
                        .await
                        .unwrap();
                    client.wait(&h).await.unwrap();
                }
            }
            // Read back from another client of the same application.
            client
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let reader = d.client().await;
    for c in 0..4u64 {
        for (i, &size) in ODD_SIZES.iter().enumerate() {
            let path = format!("/clients/{c}/file{i}");
            let got = reader.read(&path).await.unwrap();
            assert_eq!(got.len(), size, "{path} length");
            assert!(
                got == data(c * 100 + i as u64, size),
                "{path} content differs"
            );
            assert_eq!(reader.stat(&path).await.unwrap().size, size as u64);
        }
    }
    // Labels went to every worker.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let workers = d.stores().inventory.workers().await.unwrap();
    assert_eq!(workers.len(), 4);
    for w in &workers {
        assert!(
            w.labels_done > 0,
            "worker {} executed no label: {workers:?}",
            w.spec.id
        );
    }
    d.shutdown().await;
}

async fn async_small_writes_aggregate_and_read_after_write_sees_them(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let client = d.client().await;
    let mut expect = vec![0u8; 1000 * 100];
    for i in 0..1000usize {
        let chunk = data(i as u64, 100);
        expect[i * 100..(i + 1) * 100].copy_from_slice(&chunk);
        client
            .write_at_async("/small/records", (i * 100) as u64, chunk)
            .await
            .unwrap();
    }
    // No wait: the read itself must see every byte written before it.
    let got = client.read("/small/records").await.unwrap();
    assert!(
        got == expect,
        "read-after-write through the small-I/O cache"
    );
    // Another client sees them too once the writer has waited.
    client.wait_all().await.unwrap();
    let other = d.client().await;
    assert_eq!(other.stat("/small/records").await.unwrap().size, 100_000);
    // Aggregated: 100 000 bytes in writes of 100 become labels of at least
    // the minimum label size (64 KiB), not 1000 labels (counted without
    // the read labels above).
    let min = d.config().client.min_label_size as u64;
    let before = client.labels_published();
    for i in 0..1000u64 {
        client
            .write_at_async("/small/again", i * 100, data(i, 100))
            .await
            .unwrap();
    }
    client.wait_all().await.unwrap();
    let labels = client.labels_published() - before;
    assert!(
        labels <= 100_000u64.div_ceil(min) + 1,
        "1000 small writes became {labels} labels"
    );
    d.shutdown().await;
}

async fn overwrite_keeps_bytes_outside_the_range_and_reads_are_never_short(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let client = d.client().await;
    let base = data(1, 3 << 20);
    client.write_at_sync("/f", 0, base.clone()).await.unwrap();
    let patch = data(2, 1000);
    client.write_at_sync("/f", 0, patch.clone()).await.unwrap();
    let mid = data(3, 70_000);
    client
        .write_at_sync("/f", 1_500_000, mid.clone())
        .await
        .unwrap();
    let mut expect = base.to_vec();
    expect[..1000].copy_from_slice(&patch);
    expect[1_500_000..1_570_000].copy_from_slice(&mid);
    let got = client.read("/f").await.unwrap();
    assert_eq!(got.len(), 3 << 20, "overwrite must not truncate");
    assert!(got == expect);
    // A range read returns exactly what was asked, or less only at EOF.
    let r = client.read_at("/f", (3 << 20) - 10, 100).await.unwrap();
    assert_eq!(&r[..], &expect[(3 << 20) - 10..]);
    // Writing past the end leaves a hole that reads as zeros.
    client
        .write_at_sync("/f", (4 << 20) + 5, Bytes::from_static(b"tail"))
        .await
        .unwrap();
    let hole = client.read_at("/f", 3 << 20, 1 << 20).await.unwrap();
    assert!(hole.iter().all(|b| *b == 0) && hole.len() == 1 << 20);
    // A worker file that lost bytes behind LABIOS's back is an error, not
    // a short read. Flushed first: the `ram` worker's tier keeps recent
    // writes in memory until written back (its journal, which can go while
    // this runs, is no file of LABIOS's).
    client.flush("/f").await.unwrap();
    for f in files_under(d.data_dir()) {
        if f.to_string_lossy().contains("/files/") {
            match std::fs::OpenOptions::new().write(true).open(&f) {
                Ok(file) => file.set_len(10).unwrap(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("{}: {e}", f.display()),
            }
        }
    }
    let err = client.read("/f").await.unwrap_err().to_string();
    assert!(!err.is_empty(), "truncated storage must fail the read");
    d.shutdown().await;
}

async fn nothing_is_written_outside_the_data_directory(kind: Kind) {
    // The deployment's root directory holds its data directory and nothing
    // else (a cluster keeps NATS and Redis stores elsewhere).
    let d = Deployed::start(kind, |_| {}).await;
    let outer = d.root().to_path_buf();
    let data_dir = d.data_dir().to_path_buf();
    let client = d.client().await;
    let marker = outer.join("escaped");
    let abs = marker.to_string_lossy().into_owned();
    // An absolute host path is a name inside the LABIOS namespace, nothing more.
    client
        .write_at_sync(&abs, 0, Bytes::from_static(b"x"))
        .await
        .unwrap();
    client
        .write_at_sync("/etc/labios-should-not-exist", 0, Bytes::from_static(b"x"))
        .await
        .unwrap();
    for bad in ["/../escaped", "../../escaped", "/a/../../escaped"] {
        let err = client
            .write_at_sync(bad, 0, Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("escapes the namespace"),
            "{bad}: {err}"
        );
    }
    assert!(!marker.exists());
    assert!(!std::path::Path::new("/etc/labios-should-not-exist").exists());
    for f in files_under(&outer) {
        assert!(
            f.starts_with(&data_dir),
            "{} is outside the data directory",
            f.display()
        );
    }
    assert_eq!(client.read(&abs).await.unwrap(), Bytes::from_static(b"x"));
    d.shutdown().await;
}

async fn a_lone_label_does_not_wait_out_the_batch_window(kind: Kind) {
    // A window far longer than any round trip, even on a loaded machine:
    // a write that waited it out would take 20 s; one that did not takes
    // milliseconds. The bound between them is a condition, not a timing.
    let window = Duration::from_secs(20);
    let d = Deployed::start(kind, |config| {
        config.dispatcher.batch_window_ms = window.as_millis() as u64;
    })
    .await;
    let client = d.client().await;
    client
        .write_at_sync("/warm", 0, data(1, 4096))
        .await
        .unwrap();
    let mut worst = Duration::ZERO;
    for i in 0..20 {
        let t = Instant::now();
        client
            .write_at_sync("/lone", i * 4096, data(i, 4096))
            .await
            .unwrap();
        worst = worst.max(t.elapsed());
    }
    assert!(
        worst < window / 2,
        "a lone synchronous write took {worst:?} with a {window:?} window"
    );
    d.shutdown().await;
}

async fn every_policy_spreads_load_and_suspended_workers_wake(kind: Kind) {
    for policy in ["round-robin", "random", "constraint", "minmax"] {
        let d = Deployed::start(kind, |config| {
            config.dispatcher.policy = policy.into();
            config.dispatcher.bytes_per_worker = 1 << 20;
            config.worker.idle_suspend_ms = 200;
            config.worker.score_interval_ms = 50;
        })
        .await;
        // Let every worker fall asleep.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ws = d.stores().inventory.workers().await.unwrap();
            if ws.iter().all(|w| w.state == WorkerState::Suspended) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{policy}: workers never suspended: {ws:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let client = d.client().await;
        let mut handles = Vec::new();
        for i in 0..64u64 {
            handles.push(
                client
                    .write_at_async(&format!("/spread/{i}"), 0, data(i, 256 << 10))
                    .await
                    .unwrap(),
            );
        }
        client.wait_many(&handles).await.unwrap();
        let mut used = BTreeSet::new();
        for i in 0..64u64 {
            let m = client.stat(&format!("/spread/{i}")).await.unwrap();
            for e in client.catalog().extents(m.id, 0, m.size).await.unwrap() {
                used.insert(e.worker);
            }
        }
        assert!(used.len() >= 2, "{policy}: all labels went to {used:?}");
        if policy == "round-robin" || policy == "random" {
            assert_eq!(
                used.len(),
                4,
                "{policy} must use every worker, used {used:?}"
            );
        }
        d.shutdown().await;
    }
}

async fn completed_label_metadata_is_reclaimed_under_sustained_load(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let client = d.client().await;
    let mut peaks = Vec::new();
    // Labels per round. Each cluster label makes several loopback NATS and
    // Redis round trips (64 KiB through the Redis warehouse); 5 x 2000 would
    // take ~90 s on a debug build on 2 cores, 5 x 400 still keeps thousands
    // of statuses' worth of churn against the bound of 100 below.
    let per_round = match kind {
        Kind::Embedded => 2000,
        Kind::Cluster => 400,
    };
    for round in 0..5u64 {
        for i in 0..per_round {
            client
                .write_at_async(
                    "/sustained",
                    (round * per_round + i) * 65_536,
                    data(i, 65_536),
                )
                .await
                .unwrap();
        }
        client.wait_all().await.unwrap();
        peaks.push(d.stores().inventory.label_count().await.unwrap());
    }
    assert!(
        peaks.iter().all(|&n| n < 100),
        "label statuses pile up: {peaks:?}"
    );
    assert_eq!(
        d.stores().warehouse.usage().await.unwrap(),
        0,
        "warehouse keeps data of completed labels"
    );
    d.shutdown().await;
}

async fn restart_reads_back_every_completed_file(kind: Kind) {
    let sizes = [1usize, 4096, 1_048_577, 3 << 20];
    let mut d = Deployed::start(kind, |_| {}).await;
    {
        let client = d.client().await;
        for (i, &s) in sizes.iter().enumerate() {
            client
                .write_at_sync(&format!("/keep/{i}"), 0, data(i as u64, s))
                .await
                .unwrap();
        }
    }
    // Embedded: shutdown and start on the same data directory; cluster: every
    // LABIOS process stopped with SIGTERM and started again.
    d.restart().await;
    let client = d.client().await;
    for (i, &s) in sizes.iter().enumerate() {
        assert!(
            client.read(&format!("/keep/{i}")).await.unwrap() == data(i as u64, s),
            "/keep/{i}"
        );
    }
    // New files after a restart never reuse ids of old ones.
    client
        .write_at_sync("/keep/new", 0, data(99, 10))
        .await
        .unwrap();
    assert!(client.read("/keep/0").await.unwrap() == data(0, 1));
    d.shutdown().await;
}

/// A write published asynchronously and never waited for (a program
/// under `labios run --async` that exits without closing its file) is
/// acknowledged: a clean stop runs it before it stops. The embedded
/// runtime's stop once ended its dispatchers and workers with labels still
/// in its in-memory queues (the client's and the workers'), and they were
/// gone after the restart. On the cluster the queues are durable and the
/// labels run after the restart.
async fn a_clean_stop_loses_no_published_write(kind: Kind) {
    let files = 24u64;
    let size = 256 << 10;
    // Workers that take one task at a time, each store call waiting up to
    // 10 ms (an injected delay) and a label making more calls to run than
    // to publish: most of what is dispatched waits in the workers' queues
    // at the stop.
    let mut d = Deployed::start(kind, |config| {
        config.worker.threads = 1;
        config.worker.pull_batch = 1;
        if kind == Kind::Embedded {
            config.faults = labios_store::faults::FaultConfig {
                seed: 7,
                delay_ppm: 1_000_000,
                max_delay_ms: 10,
                ..Default::default()
            };
        }
    })
    .await;
    {
        let client = d.client().await;
        for i in 0..files {
            client
                .write_at_async(&format!("/published/{i}"), 0, data(i, size))
                .await
                .unwrap();
        }
    }
    d.restart().await;
    let client = d.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0..files {
        let path = format!("/published/{i}");
        loop {
            let got = client.read(&path).await.unwrap_or_default();
            if got == data(i, size) {
                break;
            }
            assert!(
                kind == Kind::Cluster && Instant::now() < deadline,
                "{path}: {} of {size} bytes back after a clean stop",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    d.shutdown().await;
}

/// An embedded deployment (`tweak`ed) whose workers store plain files (a
/// `tier` acknowledges from memory), where every write of the file at
/// `bad` fails on every worker's device (ENOSPC: `/dev/full` in its
/// place), and a client.
async fn with_a_refusing_file(
    bad: &str,
    tweak: impl FnOnce(&mut labios::Config),
) -> (Deployed, labios_client::Client) {
    let d = Deployed::start(Kind::Embedded, |config| {
        for w in &mut config.workers {
            w.stack = labios_stack::Spec::try_from(vec!["file".to_string()]).unwrap();
        }
        tweak(config);
    })
    .await;
    let client = d.client().await;
    client.catalog().open_or_create(bad, 0o644).await.unwrap();
    let id = client.catalog().stat(bad).await.unwrap().id;
    for dir in d.worker_dirs() {
        let files = dir.join("files");
        std::fs::create_dir_all(&files).unwrap();
        std::os::unix::fs::symlink("/dev/full", files.join(format!("{id:016x}"))).unwrap();
    }
    (d, client)
}

/// A failed asynchronous write is reported by the wait for it even when
/// the client collected its status earlier, to make room for more labels
/// (`client.max_in_flight`). Such failures were once kept as one failure
/// of no label: the wait for the failed write found nothing and returned
/// Ok, and only `wait_all` said something had failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_write_collected_to_make_room_is_reported_by_its_wait() {
    let (d, client) = with_a_refusing_file("/room/bad", |config| {
        config.client.max_in_flight = 2;
    })
    .await;
    let bad = "/room/bad";
    let size = 128 << 10;
    // Three labels (over the 1 MiB label size), all failing: reported once.
    let failed = client
        .write_at_async(bad, 0, data(1, (2 << 20) + 1))
        .await
        .unwrap();
    // The first of these finds the in-flight bound reached and collects
    // what is in flight, the failed write's labels among it.
    let mut good = Vec::new();
    for i in 0..4u64 {
        let path = format!("/room/good{i}");
        good.push(
            client
                .write_at_async(&path, 0, data(10 + i, size))
                .await
                .unwrap(),
        );
    }
    let err = client
        .wait(&failed)
        .await
        .expect_err("the wait for a failed write must fail");
    assert!(err.to_string().contains("space"), "{err}");
    client.wait_many(&good).await.unwrap();
    client.wait_all().await.unwrap();
    for i in 0..4u64 {
        let back = client.read(&format!("/room/good{i}")).await.unwrap();
        assert!(back == data(10 + i, size), "/room/good{i}");
    }
    d.shutdown().await;
}

/// More failed writes than the client keeps the reasons of, before any
/// wait asks for them: a wait for one whose reason was not kept cannot say
/// it succeeded (it once said Ok, the failure dropped), and `wait_all`
/// says how many were lost to the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_past_those_kept_never_read_as_success() {
    let (d, client) = with_a_refusing_file("/kept/bad", |config| {
        config.client.max_in_flight = 1;
        config.client.min_label_size = 0;
        config.worker.retries = 0;
    })
    .await;
    let bad = "/kept/bad";
    // Each write collects the one before it (the in-flight bound is 1),
    // whose failure is kept for its wait: 1,024 are, the rest are counted.
    let mut handles = Vec::new();
    for i in 0..1100u64 {
        handles.push(
            client
                .write_at_async(bad, i * 512, data(i, 512))
                .await
                .unwrap(),
        );
    }
    let first = client.wait(&handles[0]).await.unwrap_err().to_string();
    assert!(first.contains("space"), "{first}");
    let dropped = client.wait(&handles[1090]).await.unwrap_err().to_string();
    assert!(
        dropped.contains("which they were is not known"),
        "{dropped}"
    );
    let all = client.wait_all().await.unwrap_err().to_string();
    assert!(all.contains("more than 1024 other labels failed"), "{all}");
    // Reported once: the client starts afresh.
    client
        .write_at_sync("/kept/good", 0, data(7, 512))
        .await
        .unwrap();
    client.wait_all().await.unwrap();
    d.shutdown().await;
}

async fn a_full_queue_pushes_back_instead_of_growing(kind: Kind) {
    let bound = 8;
    let d = Deployed::start(kind, |config| {
        config.queue.bound = bound;
        // How long a producer waits for room. The cluster's dispatcher drains
        // the NATS queue from another process and frees room only when its
        // consumer acknowledges, several loopback round trips later; 200 ms
        // is too tight for that on a loaded debug build, 2 s is not.
        config.queue.push_timeout_ms = match kind {
            Kind::Embedded => 200,
            Kind::Cluster => 2000,
        };
        config.client.mode = IoMode::Async;
    })
    .await;
    // Without a dispatcher draining it the client queue fills and the push fails.
    let client = d.client().await;
    let mut pushed = 0;
    let mut full = None;
    for i in 0..1000u64 {
        let label = labios_label::Label::new(
            labios_label::LabelId {
                nanos: i + 1,
                origin: 1 << 40,
            },
            labios_label::LabelKind::Flush,
            0,
        );
        match client
            .stores()
            .labels
            .push("backpressure.test", vec![label])
            .await
        {
            Ok(()) => pushed += 1,
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    assert_eq!(pushed, bound, "bound is {bound} labels");
    assert!(full.unwrap().to_string().contains("full"));
    assert!(
        client
            .stores()
            .labels
            .depth("backpressure.test")
            .await
            .unwrap()
            <= bound
    );
    // The real client queue keeps flowing under the same bound.
    for i in 0..200u64 {
        client
            .write_at_async("/bp", i * 65_536, data(i, 65_536))
            .await
            .unwrap();
    }
    client.wait_all().await.unwrap();
    assert_eq!(client.stat("/bp").await.unwrap().size, 200 * 65_536);
    d.shutdown().await;
}

async fn remove_rename_flush_and_rooms(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let client = d.client().await;
    client
        .write_at_sync("/r/a", 0, data(1, 2 << 20))
        .await
        .unwrap();
    client.flush("/r/a").await.unwrap();
    client.rename("/r/a", "/r/b").await.unwrap();
    assert!(matches!(
        client.stat("/r/a").await,
        Err(labios_label::Error::NotFound(_))
    ));
    assert!(client.read("/r/b").await.unwrap() == data(1, 2 << 20));
    client.remove("/r/b").await.unwrap();
    assert!(matches!(
        client.read("/r/b").await,
        Err(labios_label::Error::NotFound(_))
    ));
    // The workers free a removed file's bytes in the background (the
    // removal returns once the inventory forgot the file): they must be
    // gone soon.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leftovers: Vec<_> = files_under(d.data_dir())
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("/files/"))
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
            .collect();
        if leftovers.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "data of removed file left on workers: {leftovers:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Ephemeral room: data handed over through the warehouse only.
    let other = d.client().await;
    client
        .share(0, "handoff", Bytes::from_static(b"payload"))
        .await
        .unwrap();
    assert_eq!(
        other
            .receive("handoff", Duration::from_secs(5))
            .await
            .unwrap(),
        Bytes::from_static(b"payload")
    );
    d.shutdown().await;
}

async fn sync_mode_config_and_label_size_settings_are_honoured(kind: Kind) {
    let d = Deployed::start(kind, |config| {
        config.client = ClientConfig {
            max_label_size: 100_000,
            min_label_size: 10_000,
            ..ClientConfig::default()
        };
        config.dispatcher.aggregation = false;
    })
    .await;
    let client = d.client().await;
    client
        .write_at("/split", 0, data(5, 1_000_000))
        .await
        .unwrap();
    let m = client.stat("/split").await.unwrap();
    let extents = client.catalog().extents(m.id, 0, m.size).await.unwrap();
    assert!(
        extents.len() >= 10,
        "1 MB at 100 KB max label size gives >= 10 extents, got {}",
        extents.len()
    );
    assert!(client.read("/split").await.unwrap() == data(5, 1_000_000));
    d.shutdown().await;
}

async fn several_dispatchers_on_one_queue_keep_the_newest_write(kind: Kind) {
    let d = Deployed::start(kind, |config| {
        // Embedded: three dispatcher tasks; cluster: three `labios dispatcher`
        // processes consuming the same NATS queue.
        config.dispatchers = 3;
        config.dispatcher.batch_size = 2;
        config.dispatcher.aggregation = false;
        // One worker: every version lands on the same device, in whatever order
        // the dispatchers deliver them.
        config.workers.truncate(1);
        config.client.min_label_size = 0;
    })
    .await;
    let client = d.client().await;
    // Many overlapping versions of the same ranges, published back to back:
    // whatever order dispatchers and workers take them in, the newest wins.
    let mut expect = vec![0u8; 256 << 10];
    for round in 0..400u64 {
        let off = (round % 7) * 16_384;
        let chunk = data(round, 96 << 10);
        expect[off as usize..off as usize + chunk.len()].copy_from_slice(&chunk);
        client
            .write_at_async("/versions", off, chunk)
            .await
            .unwrap();
    }
    client.wait_all().await.unwrap();
    let got = client.read("/versions").await.unwrap();
    let size = client.stat("/versions").await.unwrap().size as usize;
    assert!(got == expect[..size], "an older version won");
    d.shutdown().await;
}

/// Bytes allocated on each worker's device (st_blocks), by worker.
fn allocated(d: &Deployed) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt;
    d.worker_dirs()
        .iter()
        .map(|w| {
            files_under(&w.join("files"))
                .iter()
                .filter_map(|p| std::fs::metadata(p).ok())
                .map(|m| m.blocks() * 512)
                .sum()
        })
        .collect()
}

/// Waits until the workers hold at most `live` bytes plus a block per
/// extent edge (space freed by deletes the workers send each other is
/// freed after the call that caused it returns).
async fn until_allocated_at_most(d: &Deployed, live: u64, what: &str) {
    let bound = live + (1 << 20);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = allocated(d);
        if now.iter().sum::<u64>() <= bound {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: workers still hold {now:?} bytes for {live} live bytes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 11, finding 5: `rm` of a file striped over the workers freed it
/// only on the first (the deletes for all workers became one supertask).
/// Removal, truncation, overwrite and rename over a file free the space
/// on every worker, and a worker's restart frees what it holds of files
/// the inventory no longer has.
async fn removed_truncated_and_overwritten_bytes_free_their_space_on_every_worker(kind: Kind) {
    let mut d = Deployed::start(kind, |_| {}).await;
    let c = d.client().await;
    let mib: u64 = 1 << 20;
    c.write_at_sync("/space/big", 0, data(1, 16 << 20))
        .await
        .unwrap();
    let held = allocated(&d);
    assert!(
        held.iter().filter(|&&b| b > 0).count() >= 2 && held.iter().sum::<u64>() >= 16 * mib,
        "the file should be striped: {held:?}"
    );
    c.truncate("/space/big", 4 << 20).await.unwrap();
    until_allocated_at_most(&d, 4 * mib, "truncated to 4 MiB").await;
    // Overwrites land wherever the scheduler puts them.
    for round in 0..4 {
        c.write_at_sync("/space/big", 0, data(10 + round, 4 << 20))
            .await
            .unwrap();
    }
    until_allocated_at_most(&d, 4 * mib, "overwritten 4 times").await;
    assert!(c.read("/space/big").await.unwrap() == data(13, 4 << 20));
    c.remove("/space/big").await.unwrap();
    until_allocated_at_most(&d, 0, "removed").await;

    c.write_at_sync("/space/a", 0, data(2, 8 << 20))
        .await
        .unwrap();
    c.write_at_sync("/space/b", 0, data(3, 8 << 20))
        .await
        .unwrap();
    c.rename("/space/a", "/space/b").await.unwrap();
    until_allocated_at_most(&d, 8 * mib, "renamed over").await;
    assert!(c.read("/space/b").await.unwrap() == data(2, 8 << 20));

    // Bytes of a file the inventory does not know (a delete a down worker
    // missed) go at the worker's next start, and so do a layer's sums
    // left without their file (a crash between the two removes); known
    // files stay whole.
    let files = d.worker_dirs()[1].join("files");
    let strays =
        [(1u64 << 40) + 7, ((1u64 << 40) + 9) | 1 << 63].map(|id| files.join(format!("{id:016x}")));
    for stray in &strays {
        std::fs::write(stray, vec![7u8; 1 << 20]).unwrap();
    }
    drop(c);
    d.restart().await;
    for stray in &strays {
        assert!(!stray.exists(), "{} survived the restart", stray.display());
    }
    let c = d.client().await;
    assert!(c.read("/space/b").await.unwrap() == data(2, 8 << 20));
    until_allocated_at_most(&d, 8 * mib, "restarted").await;
    d.shutdown().await;
}

/// A client of `app` on `stores` (the deployment's, some behind a test's
/// layer).
async fn client_over(d: &Deployed, app: &AppRecord, stores: Stores) -> labios_client::Client {
    let origin = stores.inventory.next_id("origin").await.unwrap();
    labios_client::Client::with_secret(
        stores,
        app.id,
        &app.secret,
        origin,
        d.config().client_settings(),
    )
    .unwrap()
}

/// A warehouse whose next `put`, once armed, stops until released: the
/// moment cached small writes have left the client's cache and are not
/// yet a label in flight.
struct Gated {
    inner: std::sync::Arc<dyn labios_store::Warehouse>,
    hold: Hold,
}

/// One held call: armed by a test, entered by the next call, released by
/// the test.
struct Hold {
    armed: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    open: tokio::sync::Semaphore,
}

impl Default for Hold {
    fn default() -> Hold {
        Hold {
            armed: false.into(),
            entered: tokio::sync::Notify::new(),
            open: tokio::sync::Semaphore::new(0),
        }
    }
}

impl Hold {
    /// The next [`Hold::pass`] stops until [`Hold::release`].
    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Until an armed call has stopped.
    async fn entered(&self) {
        self.entered.notified().await;
    }

    fn release(&self) {
        self.open.add_permits(1);
    }

    /// Stops here if armed.
    async fn pass(&self) {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.entered.notify_one();
            self.open.acquire().await.expect("never closed").forget();
        }
    }
}

/// A client of a new application `app` whose warehouse puts can be held.
async fn gated_client(
    d: &Deployed,
    app: &AppRecord,
) -> (std::sync::Arc<Gated>, labios_client::Client) {
    let stores = d.stores();
    let gate = std::sync::Arc::new(Gated {
        inner: stores.warehouse.clone(),
        hold: Hold::default(),
    });
    let client = client_over(
        d,
        app,
        Stores {
            warehouse: gate.clone(),
            ..stores
        },
    )
    .await;
    (gate, client)
}

#[async_trait::async_trait]
impl labios_store::Warehouse for Gated {
    async fn put(&self, key: &str, data: Bytes) -> labios_label::Result<()> {
        self.hold.pass().await;
        self.inner.put(key, data).await
    }
    async fn put_result(&self, key: &str, data: Bytes) -> labios_label::Result<()> {
        self.inner.put_result(key, data).await
    }
    async fn get(&self, key: &str) -> labios_label::Result<Option<Bytes>> {
        self.inner.get(key).await
    }
    async fn take(&self, key: &str) -> labios_label::Result<Option<Bytes>> {
        self.inner.take(key).await
    }
    async fn delete(&self, key: &str) -> labios_label::Result<bool> {
        self.inner.delete(key).await
    }
    async fn keys(&self, prefix: &str) -> labios_label::Result<Vec<String>> {
        self.inner.keys(prefix).await
    }
    async fn usage(&self) -> labios_label::Result<u64> {
        self.inner.usage().await
    }
}

/// A write that returned is cached; one task's wait takes the cache to
/// store and publish it while another task of the same client truncates
/// the file, reads it, or waits. Each must find the write on its way (the
/// truncate cuts it, the read sees it), never miss it because it was
/// neither in the cache nor in flight at that moment.
async fn cached_writes_on_their_way_to_the_queue_are_waited_for(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let app = d.create_app("transit").await;
    let (gate, client) = gated_client(&d, &app).await;
    for (n, racer) in ["truncate", "read", "wait"].into_iter().enumerate() {
        let path = format!("/transit/{racer}");
        let bytes = data(n as u64, 100);
        client
            .write_at_async(&path, 0, bytes.clone())
            .await
            .unwrap();
        gate.hold.arm();
        let waiter = tokio::spawn({
            let client = client.clone();
            async move { client.wait_all().await }
        });
        gate.hold.entered().await;
        let racing = tokio::spawn({
            let (client, path) = (client.clone(), path.clone());
            async move {
                match racer {
                    "truncate" => client.truncate(&path, 10).await.map(|()| Bytes::new()),
                    "read" => client.read(&path).await,
                    _ => client.wait_all().await.map(|()| Bytes::new()),
                }
            }
        });
        // Released once the racer has finished, or has had ample time to
        // get past the point where it could miss the write.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while !racing.is_finished() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        if racing.is_finished() && racer == "wait" {
            let seen = d.client_of(&app).await.read(&path).await.unwrap();
            assert_eq!(seen, bytes, "the wait returned before the write was stored");
        }
        gate.hold.release();
        waiter.await.unwrap().unwrap();
        let got = racing.await.unwrap().unwrap();
        let after = d.client_of(&app).await.read(&path).await.unwrap();
        match racer {
            "truncate" => assert_eq!(
                after,
                bytes.slice(..10),
                "the truncate came after the write"
            ),
            "read" => assert_eq!(got, bytes, "the read came after the write"),
            _ => assert_eq!(after, bytes, "the wait covered the write"),
        }
    }
    d.shutdown().await;
}

/// A read (or stat) looks its file up while this client's write to it is
/// still cached; before it asks whether its own writes landed, another
/// task's wait stores the write and sees it land. The size the lookup
/// returned predates the write, so the read must look again: it once
/// returned no bytes (a CI run of the test above).
async fn a_lookup_that_raced_a_landing_write_is_read_again(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let app = d.create_app("landing").await;
    let stores = d.stores();
    let held = std::sync::Arc::new(HeldLookup {
        inner: stores.inventory.clone(),
        hold: Hold::default(),
    });
    let client = client_over(
        &d,
        &app,
        Stores {
            inventory: held.clone(),
            ..stores
        },
    )
    .await;
    for (n, racer) in ["read", "stat"].into_iter().enumerate() {
        let path = format!("/landing/{racer}");
        let bytes = data(n as u64, 100);
        client
            .write_at_async(&path, 0, bytes.clone())
            .await
            .unwrap();
        held.hold.arm();
        let racing = tokio::spawn({
            let (client, path) = (client.clone(), path.clone());
            async move {
                match racer {
                    "read" => client.read(&path).await,
                    _ => client
                        .stat(&path)
                        .await
                        .map(|m| Bytes::from(m.size.to_string())),
                }
            }
        });
        held.hold.entered().await;
        client.wait_all().await.unwrap();
        held.hold.release();
        let got = racing.await.unwrap().unwrap();
        match racer {
            "read" => assert_eq!(
                got, bytes,
                "the read missed a write that returned before it"
            ),
            _ => assert_eq!(
                got, "100",
                "the stat missed a write that returned before it"
            ),
        }
    }
    d.shutdown().await;
}

/// A full small-write cache goes to the warehouse in the background and is
/// held there. One task's wait joins that flush; a read by another task
/// must wait for it too (it once found no flush listed, since the first
/// wait had taken the list, and read the file as empty).
async fn a_background_flush_one_wait_joins_still_holds_back_another_read(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let app = d.create_app("joined").await;
    let (gate, client) = gated_client(&d, &app).await;
    let half = (d.config().client_settings().min_label_size / 2) as usize;
    let bytes = data(9, 2 * half);
    client
        .write_at_async("/joined/file", 0, bytes.slice(..half))
        .await
        .unwrap();
    gate.hold.arm();
    // Fills the cache: its flush goes to the background and stops at the gate.
    client
        .write_at_async("/joined/file", half as u64, bytes.slice(half..))
        .await
        .unwrap();
    gate.hold.entered().await;
    let mut joining = Box::pin(client.wait_all());
    assert!(
        futures::poll!(&mut joining).is_pending(),
        "a wait returned while a flush was held"
    );
    let mut reader = tokio::spawn({
        let client = client.clone();
        async move { client.read("/joined/file").await }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut reader)
            .await
            .is_err(),
        "a read returned while this client's earlier write was held on its way"
    );
    gate.hold.release();
    joining.await.unwrap();
    assert!(
        reader.await.unwrap().unwrap() == bytes,
        "the read missed the flushed write"
    );
    d.shutdown().await;
}

/// An inventory whose next lookup, once armed, is answered at once and its
/// reply then held until released: the moment a reader has looked a file
/// up and not yet asked whether this client's own writes to it landed.
/// Every other call goes straight through.
struct HeldLookup {
    inner: std::sync::Arc<dyn Inventory>,
    hold: Hold,
}

#[async_trait::async_trait]
impl Inventory for HeldLookup {
    async fn lookup(&self, path: &str) -> Result<Option<FileMeta>> {
        let reply = self.inner.lookup(path).await;
        self.hold.pass().await;
        reply
    }
    async fn create(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        owner: Owner,
    ) -> Result<FileMeta> {
        self.inner.create(path, kind, mode, owner).await
    }
    async fn symlink(&self, path: &str, target: &str, owner: Owner) -> Result<FileMeta> {
        self.inner.symlink(path, target, owner).await
    }
    async fn set_attr(&self, file: FileId, attr: SetAttr) -> Result<FileMeta> {
        self.inner.set_attr(file, attr).await
    }
    async fn link(&self, from: &str, to: &str) -> Result<FileMeta> {
        self.inner.link(from, to).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        self.inner.list(prefix).await
    }
    async fn remove(&self, path: &str) -> Result<(FileMeta, Vec<Extent>)> {
        self.inner.remove(path).await
    }
    async fn rename_as(
        &self,
        from: &str,
        to: &str,
        how: labios_store::RenameHow,
    ) -> Result<Option<(FileMeta, Vec<Extent>)>> {
        self.inner.rename_as(from, to, how).await
    }
    async fn set_size(&self, file: FileId, size: u64) -> Result<()> {
        self.inner.set_size(file, size).await
    }
    async fn commit_extent(&self, file: FileId, extent: Extent) -> Result<()> {
        self.inner.commit_extent(file, extent).await
    }
    async fn reserve_append(&self, file: FileId, len: u64) -> Result<u64> {
        self.inner.reserve_append(file, len).await
    }
    async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.inner.extents(file, offset, len).await
    }
    async fn file(&self, file: FileId) -> Result<Option<FileMeta>> {
        self.inner.file(file).await
    }
    async fn open(&self, file: FileId, access: u32) -> Result<FileMeta> {
        self.inner.open(file, access).await
    }
    async fn hold(&self, file: FileId, session: u64) -> Result<bool> {
        self.inner.hold(file, session).await
    }
    async fn let_go(&self, file: FileId, session: u64) -> Result<Option<FileMeta>> {
        self.inner.let_go(file, session).await
    }
    async fn let_go_session(&self, session: u64) -> Result<Vec<FileMeta>> {
        self.inner.let_go_session(session).await
    }
    async fn set_xattr_if(
        &self,
        file: FileId,
        name: &str,
        value: Option<Bytes>,
        cond: XattrCond,
    ) -> Result<()> {
        self.inner.set_xattr_if(file, name, value, cond).await
    }
    async fn xattrs(&self, file: FileId) -> Result<Vec<(String, Bytes)>> {
        self.inner.xattrs(file).await
    }
    async fn set_status(&self, status: LabelStatus) -> Result<()> {
        self.inner.set_status(status).await
    }
    async fn status(&self, id: LabelId) -> Result<Option<LabelStatus>> {
        self.inner.status(id).await
    }
    async fn wait(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>> {
        self.inner.wait(ids, timeout).await
    }
    async fn label_count(&self) -> Result<usize> {
        self.inner.label_count().await
    }
    async fn put_worker(&self, status: WorkerStatus) -> Result<()> {
        self.inner.put_worker(status).await
    }
    async fn workers(&self) -> Result<Vec<WorkerStatus>> {
        self.inner.workers().await
    }
    async fn remove_worker(&self, id: WorkerId) -> Result<()> {
        self.inner.remove_worker(id).await
    }
    async fn ask_stack(&self, id: WorkerId, stack: Vec<String>) -> Result<()> {
        self.inner.ask_stack(id, stack).await
    }
    async fn take_stack(&self, id: WorkerId) -> Result<Option<Vec<String>>> {
        self.inner.take_stack(id).await
    }
    async fn put_app(&self, app: AppRecord) -> Result<()> {
        self.inner.put_app(app).await
    }
    async fn app(&self, id: AppId) -> Result<Option<AppRecord>> {
        self.inner.app(id).await
    }
    async fn apps(&self) -> Result<Vec<AppRecord>> {
        self.inner.apps().await
    }
    async fn put_function(&self, app: AppId, name: &str, module: Option<Bytes>) -> Result<()> {
        self.inner.put_function(app, name, module).await
    }
    async fn function(&self, app: AppId, name: &str) -> Result<Option<Bytes>> {
        self.inner.function(app, name).await
    }
    async fn functions(&self, app: AppId) -> Result<Vec<String>> {
        self.inner.functions(app).await
    }
    async fn next_id(&self, counter: &str) -> Result<u64> {
        self.inner.next_id(counter).await
    }
    async fn sync(&self) -> Result<()> {
        self.inner.sync().await
    }
}

/// A client's holds of one file are counted: a remove keeps the file until
/// the last let-go; a let-go returns at once (its inventory call runs in
/// the background) and a hold right after it waits for that call, so the
/// file held again is kept through a remove; the last let-go of a file
/// removed meanwhile frees it.
async fn holds_are_counted_and_a_last_let_go_runs_before_the_next_hold(kind: Kind) {
    let d = Deployed::start(kind, |_| {}).await;
    let client = d.client().await;
    let other = d.client().await;
    for round in 0..20 {
        let path = format!("/held/{round}");
        client
            .write_at_sync(path.as_str(), 0, Bytes::from_static(b"kept"))
            .await
            .unwrap();
        let id = client.stat(path.as_str()).await.unwrap().id;
        client.hold(id).await.unwrap();
        client.hold(id).await.unwrap();
        client.let_go(id).await.unwrap();
        client.let_go(id).await.unwrap();
        client.hold(id).await.unwrap();
        other.remove(&path).await.unwrap();
        let kept = client.read_at(FileRef::Id(id), 0, 4).await.unwrap();
        assert_eq!(&kept[..], b"kept", "round {round}: held again, kept");
        assert_eq!(client.stat(FileRef::Id(id)).await.unwrap().nlink, 0);
        client.let_go(id).await.unwrap();
        let t = Instant::now();
        while client.stat(FileRef::Id(id)).await.is_ok() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "round {round}: never let go"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
