//! Workers' I/O stacks (issue 13) under a running deployment: the stack a
//! worker declares is the one it stores on.

mod common;

use common::data;
use common::deploy::{Deployed, Kind};
use std::os::unix::fs::FileExt;

fn spec(names: &[&str]) -> labios_stack::Spec {
    labios_stack::Spec::try_from(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap()
}

/// Writes and reads file `/{dir}/c{t}` through `c` until `done` (and at
/// least `rounds` times): random ranges, half of them bytes a codec
/// shrinks, each write checked by reading the whole file back against a
/// model; `progress` counts the rounds of every client. Returns the path
/// and what the file must hold.
async fn write_and_check(
    c: labios_client::Client,
    t: u64,
    dir: &str,
    rounds: u64,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    progress: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> (String, Vec<u8>) {
    use std::sync::atomic::Ordering;
    let path = format!("/{dir}/c{t}");
    let mut model: Vec<u8> = Vec::new();
    let mut rng = fastrand::Rng::with_seed(t);
    let mut round = 0;
    while !done.load(Ordering::Acquire) || round < rounds {
        round += 1;
        let (offset, len) = (rng.usize(..300_000), rng.usize(1..150_000));
        let bytes: Vec<u8> = if rng.bool() {
            (0..len).map(|i| (i / 9 % 17) as u8 + t as u8).collect()
        } else {
            data(t * 1000 + round, len).to_vec()
        };
        c.write_at_sync(path.as_str(), offset as u64, bytes.clone().into())
            .await
            .unwrap_or_else(|e| panic!("client {t} write {round}: {e}"));
        if model.len() < offset + len {
            model.resize(offset + len, 0);
        }
        model[offset..offset + len].copy_from_slice(&bytes);
        let back = c
            .read(&path)
            .await
            .unwrap_or_else(|e| panic!("client {t} read {round}: {e}"));
        assert!(back == model[..], "client {t} round {round}: wrong bytes");
        progress.fetch_add(1, Ordering::AcqRel);
    }
    (path, model)
}

/// A pool of a `memory` worker and a `checksum,file` worker: files
/// striped over both read back byte-exact, only the second worker's
/// directory holds bytes, and a byte changed there fails the read of its
/// file with the checksum's error instead of returning it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stores_on_the_stack_it_declares() {
    let d = Deployed::start(Kind::Embedded, |c| {
        c.workers.truncate(2);
        c.workers[0].stack = spec(&["memory"]);
        c.workers[1].stack = spec(&["checksum", "file"]);
        c.client.max_label_size = 64 << 10;
    })
    .await;
    let c = d.client().await;
    let files: Vec<_> = (0..6u64)
        .map(|i| (format!("/stacks/f{i}"), data(i, 300_000)))
        .collect();
    for (path, bytes) in &files {
        c.write_at_sync(path.as_str(), 0, bytes.clone())
            .await
            .unwrap();
    }
    for (path, bytes) in &files {
        assert_eq!(&c.read(path).await.unwrap(), bytes, "{path}");
    }
    let on_disk = |i: usize| {
        common::files_under(&d.config().worker_dir(i))
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum::<u64>()
    };
    assert_eq!(on_disk(0), 0, "the memory worker writes no file");
    assert!(on_disk(1) > 0, "the file worker does");
    let inventory = d.stores().inventory;
    let mut holders = std::collections::BTreeSet::new();
    let mut on_second = None;
    for (path, bytes) in &files {
        let meta = inventory.lookup(path).await.unwrap().unwrap();
        let extents = inventory
            .extents(meta.id, 0, bytes.len() as u64)
            .await
            .unwrap();
        holders.extend(extents.iter().map(|e| e.worker));
        if let Some(e) = extents.iter().find(|e| e.worker == 1) {
            on_second = Some((path.clone(), meta.id, e.offset));
        }
    }
    assert_eq!(
        holders.into_iter().collect::<Vec<_>>(),
        [0, 1],
        "both workers hold stripes"
    );
    // One byte changed on the second worker's device.
    let (path, id, offset) = on_second.unwrap();
    let local = d
        .config()
        .worker_dir(1)
        .join("files")
        .join(format!("{id:016x}"));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&local)
        .unwrap();
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, offset + 10).unwrap();
    f.write_all_at(&[byte[0] ^ 1], offset + 10).unwrap();
    let err = c.read(&path).await.unwrap_err().to_string();
    assert!(err.contains("checksum mismatch"), "{err}");
    d.shutdown().await;
}

/// A pool of `kv` workers (every byte in one embedded key-value store per
/// worker): files written over them read back byte-exact, no worker keeps
/// a file per LABIOS file, and after a restart of the runtime the same
/// bytes are read from the stores again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_workers_keep_every_byte_in_their_store_across_a_restart() {
    let mut d = Deployed::start(Kind::Embedded, |c| {
        c.workers.truncate(2);
        for w in &mut c.workers {
            w.stack = spec(&["kv"]);
        }
        c.client.max_label_size = 64 << 10;
    })
    .await;
    let files: Vec<_> = (0..6u64)
        .map(|i| {
            (
                format!("/kv/f{i}"),
                data(i + 40, 200_000 + 8192 * i as usize),
            )
        })
        .collect();
    {
        let c = d.client().await;
        for (path, bytes) in &files {
            c.write_at_sync(path.as_str(), 0, bytes.clone())
                .await
                .unwrap();
        }
        // An overwrite in the middle of one, unaligned.
        c.write_at_sync("/kv/f2", 5000, vec![0xAB; 70_000].into())
            .await
            .unwrap();
    }
    let mut expected: Vec<(String, Vec<u8>)> =
        files.iter().map(|(p, b)| (p.clone(), b.to_vec())).collect();
    expected[2].1[5000..75_000].fill(0xAB);
    for i in 0..2 {
        let dir = d.config().worker_dir(i);
        assert!(dir.join("kv").is_dir(), "worker {i} has its store");
        assert!(
            !dir.join("files").exists() || common::files_under(&dir.join("files")).is_empty(),
            "worker {i} keeps no file per LABIOS file"
        );
    }
    d.restart().await;
    let c = d.client().await;
    for (path, bytes) in &expected {
        assert!(c.read(path).await.unwrap() == bytes[..], "{path}");
    }
    d.shutdown().await;
}

/// Ten live changes of both workers' stacks (`file`, `checksum,zstd,file`,
/// `lz4,file`, in turn) while four clients write and read: no label fails,
/// every read during the changes is what was written, and at the end every
/// file reads back byte-exact on the last stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_stack_changes_under_four_clients_fail_no_label() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::deploy::base_config(dir.path());
    config.workers.truncate(2);
    config.client.max_label_size = 64 << 10;
    let rt = labios::Runtime::start(config).await.unwrap();
    let (done, progress) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut clients = Vec::new();
    for t in 0..4u64 {
        let c = rt.client(0).await.unwrap();
        let (done, progress) = (done.clone(), progress.clone());
        clients.push(tokio::spawn(write_and_check(
            c, t, "live", 8, done, progress,
        )));
    }
    let stacks = [
        spec(&["checksum", "zstd", "file"]),
        spec(&["file"]),
        spec(&["lz4", "file"]),
    ];
    let mut last = spec(&["file"]);
    for i in 0..10u64 {
        // Each change comes after four more writes and reads.
        let seen = progress.load(Ordering::Acquire);
        while progress.load(Ordering::Acquire) < seen + 4 {
            tokio::task::yield_now().await;
        }
        last = stacks[i as usize % stacks.len()].clone();
        for w in 0..2 {
            let worker = rt.manager.handle(w).unwrap();
            worker.set_stack(last.clone()).await.unwrap();
            assert_eq!(worker.stack(), last);
            assert_eq!(worker.status().stack, Vec::<String>::from(last.clone()));
        }
    }
    done.store(true, Ordering::Release);
    let mut written = Vec::new();
    for c in clients {
        written.push(c.await.unwrap());
    }
    let c = rt.client(0).await.unwrap();
    for (path, model) in &written {
        assert!(c.read(path).await.unwrap() == model[..], "{path} on {last}");
    }
    // The codecs stored units: their records (file id bit 62) are there.
    let records = (0..2)
        .map(|i| common::unit_records(&rt.config.worker_dir(i)))
        .sum::<usize>();
    assert!(records > 0, "no unit records: no codec stored a unit");
    let err = rt
        .manager
        .handle(0)
        .unwrap()
        .set_stack(spec(&["kv"]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not its backend"), "{err}");
    rt.shutdown().await.unwrap();
}

/// In the distributed deployment, `labios stack set` reaches the worker
/// processes through the inventory (Redis): ten changes alternating over
/// the two workers while four clients write and read fail no label, each
/// worker's status says the stack it took, its codec stores units, and
/// every file reads back byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_set_changes_worker_processes_of_the_cluster_under_load() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let d = Deployed::start(Kind::Cluster, |c| {
        c.workers.truncate(2);
        c.client.max_label_size = 64 << 10;
    })
    .await;
    let (done, progress) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut clients = Vec::new();
    for t in 0..4u64 {
        let c = d.client().await;
        let (done, progress) = (done.clone(), progress.clone());
        clients.push(tokio::spawn(write_and_check(c, t, "cs", 4, done, progress)));
    }
    let stacks = [
        "checksum,lz4,file",
        "zstd,file",
        "file",
        "checksum,zstd,file",
    ];
    let mut last = [String::from("file"), String::from("file")];
    for i in 0..10usize {
        let (worker, stack) = (i % 2, stacks[i / 2 % stacks.len()]);
        // Each change comes after two more writes and reads.
        let (seen, deadline) = (
            progress.load(Ordering::Acquire),
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        );
        while progress.load(Ordering::Acquire) < seen + 2 {
            assert!(std::time::Instant::now() < deadline, "the clients stalled");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let env = common::deploy::env_of(d.config());
        let args = ["stack", "set", &worker.to_string(), stack].map(String::from);
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(common::deploy::BIN)
                .args(args)
                .envs(env)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout)
                    .contains(&format!("worker {worker} runs {stack}")),
            "change {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        last[worker] = stack.to_string();
    }
    done.store(true, Ordering::Release);
    let mut written = Vec::new();
    for c in clients {
        written.push(c.await.unwrap());
    }
    let statuses = d.stores().inventory.workers().await.unwrap();
    for (w, stack) in last.iter().enumerate() {
        let status = statuses.iter().find(|s| s.spec.id == w as u32).unwrap();
        assert_eq!(status.stack.join(","), *stack, "worker {w}");
    }
    let c = d.client().await;
    for (path, model) in &written {
        assert!(c.read(path).await.unwrap() == model[..], "{path}");
    }
    let records = (0..2)
        .map(|i| common::unit_records(&d.config().worker_dir(i)))
        .sum::<usize>();
    assert!(records > 0, "no worker stored a unit with its codec");
    d.shutdown().await;
}

/// LabStor's permission module, tuned per stack: a worker declared with
/// `auth:1` (application 1 alone) gets no byte of application 2, whose
/// files all go to the open worker; closed live to application 2 as well,
/// the pool refuses its reads and writes with an error naming the stack
/// but still flushes its files (an `fsync` reaches every worker) and
/// removes them (a delete gives space back); opened again, it serves both,
/// and every byte written reads back, on both deployments.
async fn auth_keeps_a_worker_to_the_applications_it_names(kind: Kind) {
    let pfs = tempfile::tempdir().unwrap();
    let d = Deployed::start(kind, |c| {
        c.workers.truncate(2);
        c.workers[0].stack = spec(&["auth:1", "file"]);
        c.client.max_label_size = 64 << 10;
        c.mounts.insert(
            "pfs".into(),
            labios_bridge::MountConfig {
                uri: format!("fs://{}", pfs.path().display()),
                ..Default::default()
            },
        );
    })
    .await;
    let (a, b) = (d.create_app("island").await, d.create_app("other").await);
    assert_eq!((a.id, b.id), (1, 2), "the first applications' ids");
    let (ca, cb) = (d.client_of(&a).await, d.client_of(&b).await);
    let files = |app: u64| -> Vec<(String, bytes::Bytes)> {
        (0..6u64)
            .map(|i| (format!("/auth/a{app}-{i}"), data(app * 10 + i, 300_000)))
            .collect()
    };
    let (of_a, of_b) = (files(1), files(2));
    for ((pa, ba), (pb, bb)) in of_a.iter().zip(&of_b) {
        ca.write_at_sync(pa.as_str(), 0, ba.clone()).await.unwrap();
        cb.write_at_sync(pb.as_str(), 0, bb.clone()).await.unwrap();
    }
    cb.write_at_sync("pfs:/b.txt", 0, bytes::Bytes::from_static(b"external"))
        .await
        .unwrap();
    let inventory = d.stores().inventory;
    let holders = |files: Vec<(String, bytes::Bytes)>| {
        let inventory = inventory.clone();
        async move {
            let mut on = std::collections::BTreeSet::new();
            for (path, bytes) in files {
                let meta = inventory.lookup(&path).await.unwrap().unwrap();
                let extents = inventory
                    .extents(meta.id, 0, bytes.len() as u64)
                    .await
                    .unwrap();
                on.extend(extents.iter().map(|e| e.worker));
            }
            on.into_iter().collect::<Vec<_>>()
        }
    };
    assert_eq!(
        holders(of_a.clone()).await,
        [0, 1],
        "application 1 uses both"
    );
    assert_eq!(
        holders(of_b.clone()).await,
        [1],
        "application 2 only the open one"
    );
    // Closed to application 2 everywhere: refused, naming the stack.
    d.set_stack(1, "auth:1,file").await;
    let err = cb.read(&of_b[0].0).await.unwrap_err().to_string();
    assert!(
        err.contains("(auth:1,file) does not admit application 2"),
        "{err}"
    );
    let err = cb
        .write_at_sync("/auth/late", 0, data(99, 1000))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not admit application 2"), "{err}");
    cb.flush(of_b[0].0.as_str()).await.unwrap();
    cb.remove(&of_b[5].0).await.unwrap();
    assert!(inventory.lookup(&of_b[5].0).await.unwrap().is_none());
    // Removing external data is a change there, admitted as writes are.
    let err = cb.remove("pfs:/b.txt").await.unwrap_err().to_string();
    assert!(err.contains("does not admit application 2"), "{err}");
    assert_eq!(
        std::fs::read(pfs.path().join("b.txt")).unwrap(),
        b"external"
    );
    for (path, bytes) in &of_a {
        assert_eq!(&ca.read(path).await.unwrap(), bytes, "{path}");
    }
    // Open again: both applications read every byte they wrote.
    d.set_stack(0, "file").await;
    d.set_stack(1, "file").await;
    for (path, bytes) in of_a.iter().chain(&of_b[..5]) {
        let c = if path.contains("/a1-") { &ca } else { &cb };
        assert_eq!(&c.read(path).await.unwrap(), bytes, "{path}");
    }
    cb.remove("pfs:/b.txt").await.unwrap();
    assert!(!pfs.path().join("b.txt").exists());
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_keeps_a_worker_to_the_applications_it_names_embedded() {
    auth_keeps_a_worker_to_the_applications_it_names(Kind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_keeps_a_worker_to_the_applications_it_names_cluster() {
    auth_keeps_a_worker_to_the_applications_it_names(Kind::Cluster).await;
}

/// A worker whose stack ends in `external:pfs` keeps its bytes as blocks
/// in the declared mount (a shared directory here), under its own prefix,
/// and none in its local directory; through `checksum` and `zstd` above
/// it, files striped over it and a local worker read back byte-exact, and
/// again after the deployment restarts.
async fn a_worker_on_an_external_mount_keeps_its_bytes_there(kind: Kind) {
    let pfs = tempfile::tempdir().unwrap();
    let mut d = Deployed::start(kind, |c| {
        c.workers.truncate(2);
        c.workers[1].stack = spec(&["checksum", "zstd", "external:pfs"]);
        c.mounts.insert(
            "pfs".into(),
            labios_bridge::MountConfig {
                uri: format!("fs://{}", pfs.path().display()),
                ..Default::default()
            },
        );
        c.client.max_label_size = 64 << 10;
    })
    .await;
    let c = d.client().await;
    let files: Vec<_> = (0..6u64)
        .map(|i| (format!("/ext/f{i}"), data(i, 300_000)))
        .collect();
    for (path, bytes) in &files {
        c.write_at_sync(path.as_str(), 0, bytes.clone())
            .await
            .unwrap();
    }
    let blocks = common::files_under(&pfs.path().join("labios/workers/1"));
    assert!(!blocks.is_empty(), "worker 1 keeps blocks in the mount");
    assert!(
        common::files_under(&d.config().worker_dir(1)).is_empty(),
        "and nothing in its own directory"
    );
    assert!(!pfs.path().join("labios/workers/0").exists());
    drop(c);
    d.restart().await;
    let c = d.client().await;
    for (path, bytes) in &files {
        assert_eq!(&c.read(path).await.unwrap(), bytes, "{path}");
    }
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_an_external_mount_keeps_its_bytes_there_embedded() {
    a_worker_on_an_external_mount_keeps_its_bytes_there(Kind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_an_external_mount_keeps_its_bytes_there_cluster() {
    a_worker_on_an_external_mount_keeps_its_bytes_there(Kind::Cluster).await;
}
