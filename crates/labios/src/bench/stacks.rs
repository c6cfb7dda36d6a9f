//! `stacks`: what a worker's I/O stack (issue 13) costs or gains, each
//! stack measured against another in alternating rounds of one run, with a
//! raw baseline (the same bytes written straight to the same file system)
//! in the same run. Each round starts an embedded runtime in this process
//! whose workers all run the stack measured, on a fresh data directory.
//!
//! * `kv` against `file`, 8 KiB labels spread over many files (LabStor
//!   Figure 9(b)), end to end and on the backend alone;
//! * 8 KiB labels into one file, which the dispatcher aggregates, on
//!   `file` and `kv`;
//! * `checksum,file` against `file`, 1 MiB writes and reads;
//! * synchronous 4 KiB write latency on a `memory` worker and a
//!   `tier,file` worker (the burst buffer: acknowledged from memory,
//!   journaled) against a `file` worker (fdatasync per label);
//! * 8 KiB labels while every worker's stack changes ten times, against
//!   the same run without changes (a failed label fails the run, and the
//!   files are read back and checked);
//! * hot 64 KiB reads of compressed data on the stack alone,
//!   `cache:64MiB,zstd,kv` against `zstd,kv`, with `pread` of the same
//!   bytes from the page cache as the raw baseline;
//! * what `metrics` costs on the stack alone;
//! * small synchronous writes among large ones on the stack alone, with no
//!   `scheduler`, in arrival order, and small first;
//! * synchronous 4 KiB write latency on one worker while 1 MiB labels with
//!   a zstd pipeline load it, against the same worker unloaded (the
//!   worker's latency lane, issue 13).

use super::{block, machine, percentiles, MIB};
use crate::config::Config;
use crate::runtime::Runtime;
use bytes::Bytes;
use labios_stack::Spec;
use serde_json::json;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Alternating rounds per comparison; the medians are reported.
const ROUNDS: usize = 5;
/// Files the 8 KiB labels are spread over.
const SMALL_FILES: u64 = 64;

fn spec(names: &str) -> anyhow::Result<Spec> {
    Ok(Spec::try_from(
        names.split(',').map(String::from).collect::<Vec<_>>(),
    )?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A runtime whose `workers` workers all run `stack`, in a fresh directory.
async fn runtime_on(
    config: &Config,
    stack: &Spec,
    workers: usize,
) -> anyhow::Result<(Runtime, tempfile::TempDir)> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let mut c = config.clone();
    c.data_dir = dir.path().to_path_buf();
    c.workers.truncate(workers);
    for w in &mut c.workers {
        w.stack = stack.clone();
    }
    c.client.min_label_size = 0;
    Ok((Runtime::start(c).await?, dir))
}

/// `n` 8 KiB labels over `files` files, each written at consecutive
/// offsets, through a runtime on `stack`: labels/s from the first
/// submission to the last completion.
/// With `swaps`, every worker's stack changes to each in turn, evenly
/// spread over the run while labels are in flight (a failed label fails
/// the run); the files are read back and checked either way.
async fn small_labels(
    config: &Config,
    stack: &Spec,
    n: u64,
    files: u64,
    swaps: &[Spec],
) -> anyhow::Result<f64> {
    let (runtime, _dir) = runtime_on(config, stack, config.workers.len()).await?;
    let client = runtime.client(0).await?;
    let data = block(11, 8192);
    let every = n / (swaps.len() as u64 + 1);
    let t = Instant::now();
    let mut pending = Vec::new();
    for i in 0..n {
        let path = format!("/stacks/small/{}", i % files);
        pending.push(
            client
                .write_at_async(&path, (i / files) * 8192, data.clone())
                .await?,
        );
        if pending.len() >= 256 {
            client.wait_many(&pending).await?;
            pending.clear();
        }
        if let Some(next) = swaps
            .get((i / every.max(1)) as usize)
            .filter(|_| i % every == every - 1)
        {
            for w in 0..config.workers.len() as u32 {
                runtime.manager.handle(w)?.set_stack(next.clone()).await?;
            }
        }
    }
    client.wait_many(&pending).await?;
    let secs = t.elapsed().as_secs_f64();
    for f in 0..files.min(n) {
        let back = client.read(&format!("/stacks/small/{f}")).await?;
        anyhow::ensure!(
            back.chunks(8192).all(|c| c == data),
            "{stack}: file {f} reads back wrong"
        );
    }
    runtime.shutdown().await?;
    Ok(n as f64 / secs)
}

/// Runs `lane(0)` and `lane(1)` on two threads, as the two cores of the
/// machine: the first error, if any.
fn two_lanes<E: Send>(lane: impl Fn(u64) -> Result<(), E> + Sync) -> Result<(), E> {
    std::thread::scope(|s| {
        let lanes: Vec<_> = (0..2u64)
            .map(|i| {
                let lane = &lane;
                s.spawn(move || lane(i))
            })
            .collect();
        lanes
            .into_iter()
            .try_for_each(|l| l.join().expect("writer thread panicked"))
    })
}

/// The same `n` 8 KiB writes on the backend alone, from two threads:
/// what the stack itself costs, without queues and hand-offs.
fn small_backend(stack: &Spec, n: u64) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let backend = stack.build(dir.path(), u64::MAX)?;
    let data = block(12, 8192);
    let t = Instant::now();
    two_lanes(|lane| {
        (lane..n).step_by(2).try_for_each(|i| {
            backend.write(i % SMALL_FILES, &[((i / SMALL_FILES) * 8192, &data)], false)
        })
    })?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The raw baseline of the 8 KiB labels: one local file per LABIOS file,
/// pwrite from two threads.
fn small_raw(n: u64) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let data = block(13, 8192);
    let t = Instant::now();
    two_lanes(|lane| -> std::io::Result<()> {
        let files: Vec<_> = (0..SMALL_FILES)
            .map(|f| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(dir.path().join(f.to_string()))
            })
            .collect::<std::io::Result<_>>()?;
        (lane..n).step_by(2).try_for_each(|i| {
            files[(i % SMALL_FILES) as usize].write_all_at(&data, (i / SMALL_FILES) * 8192)
        })
    })?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// `total` bytes in 1 MiB labels written to one file, waited for, then
/// read back whole: (write MiB/s, read MiB/s).
async fn large(config: &Config, stack: &Spec, total: u64) -> anyhow::Result<(f64, f64)> {
    let (runtime, _dir) = runtime_on(config, stack, config.workers.len()).await?;
    let client = runtime.client(0).await?;
    let n = (total / MIB).max(1);
    let data: Vec<_> = (0..8).map(|i| block(20 + i, MIB as usize)).collect();
    let path = "/stacks/large";
    let t = Instant::now();
    let mut pending = Vec::new();
    for i in 0..n {
        pending.push(
            client
                .write_at_async(path, i * MIB, data[(i % 8) as usize].clone())
                .await?,
        );
        if pending.len() >= 32 {
            client.wait_many(&pending).await?;
            pending.clear();
        }
    }
    client.wait_many(&pending).await?;
    let write = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..n {
        let back = client.read_at(path, i * MIB, MIB).await?;
        anyhow::ensure!(
            back == data[(i % 8) as usize],
            "{stack}: MiB {i} read back wrong"
        );
    }
    let read = n as f64 / t.elapsed().as_secs_f64();
    runtime.shutdown().await?;
    Ok((write, read))
}

/// Synchronous 4 KiB writes to a single worker on `stack`: (p50, p99) µs.
async fn sync_latency(config: &Config, stack: &Spec) -> anyhow::Result<(f64, f64)> {
    const N: u64 = 3000;
    let (runtime, _dir) = runtime_on(config, stack, 1).await?;
    let client = runtime.client(0).await?;
    let data = block(30, 4096);
    let mut lat = Vec::with_capacity(N as usize);
    for i in 0..N {
        let t = Instant::now();
        client
            .write_at_sync("/stacks/latency", (i % 256) * 4096, data.clone())
            .await?;
        lat.push(t.elapsed());
    }
    runtime.shutdown().await?;
    Ok(percentiles(&mut lat))
}

/// Sync 4 KiB writes to one `file` worker whose compute lane runs at most
/// `compute_threads` pipelines (0: the default), first alone, then while
/// another client keeps 1 MiB labels with a zstd pipeline in flight to the
/// same worker: (unloaded p50, p99, loaded p50, p99) µs, and the
/// pipelines' MiB/s meanwhile.
async fn latency_under_pipelines(
    config: &Config,
    compute_threads: usize,
) -> anyhow::Result<([f64; 4], f64)> {
    const N: u64 = 2000;
    const IN_FLIGHT: usize = 8;
    let mut config = config.clone();
    config.worker.compute_threads = compute_threads;
    let (runtime, _dir) = runtime_on(&config, &spec("file")?, 1).await?;
    let client = runtime.client(0).await?;
    let data = block(31, 4096);
    let probe = || {
        let (client, data) = (client.clone(), data.clone());
        async move {
            let mut lat = Vec::with_capacity(N as usize);
            for i in 0..N {
                let t = Instant::now();
                client
                    .write_at_sync("/stacks/probe", (i % 256) * 4096, data.clone())
                    .await?;
                lat.push(t.elapsed());
            }
            anyhow::Ok(lat)
        }
    };
    let mut alone = probe().await?;

    let loader = runtime.client(0).await?;
    let big = Bytes::from(compressible(MIB));
    let ops = labios_label::Operation::parse_pipeline("zstd")?;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let load = tokio::spawn({
        let (stop, started) = (stop.clone(), started.clone());
        async move {
            let mut pending = std::collections::VecDeque::new();
            let (mut done, mut i) = (0u64, 0u64);
            let mut since = None;
            while !stop.load(Ordering::Relaxed) {
                let path = format!("/stacks/load/{}", i % 4);
                pending.push_back(
                    loader
                        .write_through(&path, (i / 4 % 64) * MIB, big.clone(), ops.clone())
                        .await?,
                );
                i += 1;
                if pending.len() == IN_FLIGHT {
                    let first = pending.pop_front().expect("in flight");
                    loader.wait(&first).await?;
                    // Counted from the first completion, with the queue full.
                    match since {
                        None => {
                            since = Some(Instant::now());
                            started.notify_one();
                        }
                        Some(_) => done += 1,
                    }
                }
            }
            let secs = since.map_or(0.0, |t: Instant| t.elapsed().as_secs_f64());
            for h in pending {
                loader.wait(&h).await?;
            }
            anyhow::Ok(done as f64 / secs.max(1e-9))
        }
    });
    started.notified().await;
    let loaded = probe().await;
    stop.store(true, Ordering::Relaxed);
    let mib_s = load.await??;
    let mut loaded = loaded?;
    runtime.shutdown().await?;
    let (a50, a99) = percentiles(&mut alone);
    let (l50, l99) = percentiles(&mut loaded);
    Ok(([a50, a99, l50, l99], mib_s))
}

/// 4 KiB writes with `sync` on the stack alone, one after another, while
/// two threads keep writing 1 MiB with `sync` to other files: (p50, p99)
/// µs of the small writes, and the large writes' MiB/s meanwhile.
fn small_beside_large(stack: &Spec) -> anyhow::Result<(f64, f64, f64)> {
    const SMALL: u64 = 400;
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let backend = stack.build(dir.path(), u64::MAX)?;
    let stop = AtomicBool::new(false);
    let (small, large) = std::thread::scope(|scope| {
        let streams: Vec<_> = (1..=2u64)
            .map(|file| {
                let (backend, stop) = (&backend, &stop);
                scope.spawn(move || -> labios_label::Result<u64> {
                    let data = block(40 + file, MIB as usize);
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        backend.write(file, &[((n % 16) * MIB, &data)], true)?;
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        let t = Instant::now();
        let data = block(42, 4096);
        let small = (0..SMALL)
            .map(|i| {
                let t = Instant::now();
                backend.write(3, &[((i % 256) * 4096, &data)], true)?;
                Ok(t.elapsed())
            })
            .collect::<labios_label::Result<Vec<_>>>();
        stop.store(true, Ordering::Relaxed);
        let secs = t.elapsed().as_secs_f64();
        let mut written = 0;
        for s in streams {
            written += s.join().expect("writer thread panicked")?;
        }
        anyhow::Ok((small?, written as f64 / secs))
    })?;
    let (p50, p99) = percentiles(&mut small.clone());
    Ok((p50, p99, large))
}

/// Bytes the hot reads cycle over, and how many reads of [`HOT_READ`]
/// bytes each round makes.
const HOT_SET: u64 = 16 * MIB;
const HOT_READ: u64 = 64 * 1024;
const HOT_READS: u64 = 4096;

/// Bytes that compress about 4:1 under zstd's fastest level, as logs and
/// text do: a stack's codec stores them compressed.
fn compressible(len: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(40);
    let words: Vec<Vec<u8>> = (0..256)
        .map(|_| {
            (0..rng.usize(3..10))
                .map(|_| rng.alphanumeric() as u8)
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(len as usize + 16);
    while (out.len() as u64) < len {
        out.extend_from_slice(&words[rng.usize(..words.len())]);
        out.push(b' ');
    }
    out.truncate(len as usize);
    out
}

/// [`HOT_READS`] reads of [`HOT_READ`] bytes at random aligned offsets of
/// a [`HOT_SET`] file written once on `stack` alone (after one warming
/// pass): MiB/s, every read checked against what was written, and the
/// bytes the stack stores the set in.
fn hot_reads(stack: &Spec, data: &[u8]) -> anyhow::Result<(f64, u64)> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let backend = stack.build(dir.path(), u64::MAX)?;
    backend.write(1, &[(0, data)], false)?;
    let mut buf = vec![0; HOT_READ as usize];
    let slots = HOT_SET / HOT_READ;
    for i in 0..slots {
        backend.read(1, i * HOT_READ, &mut buf)?;
    }
    let mut rng = fastrand::Rng::with_seed(41);
    let t = Instant::now();
    for _ in 0..HOT_READS {
        let at = rng.u64(..slots) * HOT_READ;
        backend.read(1, at, &mut buf)?;
        anyhow::ensure!(
            buf[..] == data[at as usize..][..HOT_READ as usize],
            "{stack}: the read at {at} is wrong"
        );
    }
    let mib_s = (HOT_READS * HOT_READ) as f64 / MIB as f64 / t.elapsed().as_secs_f64();
    Ok((mib_s, backend.used()))
}

/// The raw baseline of the hot reads: the same reads with `pread` from a
/// local file the page cache holds.
fn hot_raw(data: &[u8]) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let path = dir.path().join("hot");
    std::fs::write(&path, data)?;
    let f = std::fs::File::open(&path)?;
    let mut buf = vec![0; HOT_READ as usize];
    let slots = HOT_SET / HOT_READ;
    for i in 0..slots {
        f.read_exact_at(&mut buf, i * HOT_READ)?;
    }
    let mut rng = fastrand::Rng::with_seed(41);
    let t = Instant::now();
    for _ in 0..HOT_READS {
        let at = rng.u64(..slots) * HOT_READ;
        f.read_exact_at(&mut buf, at)?;
        anyhow::ensure!(buf[..] == data[at as usize..][..HOT_READ as usize]);
    }
    Ok((HOT_READS * HOT_READ) as f64 / MIB as f64 / t.elapsed().as_secs_f64())
}

pub async fn stacks(config: Config, total: u64) -> anyhow::Result<Vec<serde_json::Value>> {
    let (file, kv, checksum, memory, tier) = (
        spec("file")?,
        spec("kv")?,
        spec("checksum,file")?,
        spec("memory")?,
        spec("tier,file")?,
    );
    let mut out = Vec::new();

    const SMALL: u64 = 20_000;
    let (mut e2e, mut backend, mut raw) = ([vec![], vec![]], [vec![], vec![]], vec![]);
    for _ in 0..ROUNDS {
        for (i, stack) in [&file, &kv].into_iter().enumerate() {
            e2e[i].push(small_labels(&config, stack, SMALL, SMALL_FILES, &[]).await?);
            backend[i].push(small_backend(stack, 4 * SMALL)?);
        }
        raw.push(small_raw(4 * SMALL)?);
    }
    let [file_e2e, kv_e2e] = e2e.map(median);
    let [file_backend, kv_backend] = backend.map(median);
    out.push(
        json!({ "scenario": "stacks", "case": "8 KiB labels, kv against file",
        "labels": SMALL, "files": SMALL_FILES, "workers": config.workers.len(), "rounds": ROUNDS,
        "file_labels_per_s": file_e2e, "kv_labels_per_s": kv_e2e, "kv_over_file": kv_e2e / file_e2e,
        "backend_writes": 4 * SMALL, "file_backend_writes_per_s": file_backend,
        "kv_backend_writes_per_s": kv_backend, "kv_over_file_backend": kv_backend / file_backend,
        "raw_pwrite_per_s": median(raw), "machine": machine() }),
    );

    // Aggregated tasks: 8 KiB labels at consecutive offsets of one file,
    // which the dispatcher gathers into tasks of up to 64 labels, each
    // written with one call to the stack.
    let mut runs = [vec![], vec![]];
    for _ in 0..ROUNDS {
        for (i, stack) in [&file, &kv].into_iter().enumerate() {
            runs[i].push(small_labels(&config, stack, SMALL, 1, &[]).await?);
        }
    }
    let [file_one, kv_one] = runs.map(median);
    out.push(json!({ "scenario": "stacks", "case": "8 KiB labels into one file (aggregated tasks), file and kv",
        "labels": SMALL, "workers": config.workers.len(), "rounds": ROUNDS,
        "file_labels_per_s": file_one, "kv_labels_per_s": kv_one,
        "raw_pwrite_per_s": small_raw(SMALL)?, "machine": machine() }));

    // Ten live changes of every worker's stack against none: to the same
    // declaration (what a change itself costs: the stack rebuilt, the
    // calls on the old one drained), and alternating with
    // `checksum,zstd,file` (that, plus what those layers cost).
    let same: Vec<Spec> = vec![file.clone(); 10];
    let mixed: Vec<Spec> = (0..10)
        .map(|i| spec(["checksum,zstd,file", "file"][i % 2]))
        .collect::<anyhow::Result<_>>()?;
    let mut runs = [vec![], vec![], vec![]];
    for _ in 0..ROUNDS {
        for (i, swaps) in [&[][..], &same[..], &mixed[..]].into_iter().enumerate() {
            runs[i].push(small_labels(&config, &file, SMALL, SMALL_FILES, swaps).await?);
        }
    }
    let [steady, same, mixed] = runs.map(median);
    out.push(json!({ "scenario": "stacks", "case": "8 KiB labels during 10 live stack changes against none",
        "labels": SMALL, "swaps": 10, "rounds": ROUNDS, "steady_labels_per_s": steady,
        "same_stack_swaps_labels_per_s": same, "same_over_steady": same / steady,
        "mixed_swaps_labels_per_s": mixed, "mixed_over_steady": mixed / steady,
        "machine": machine() }));

    let (mut writes, mut reads) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..ROUNDS {
        for (i, stack) in [&file, &checksum].into_iter().enumerate() {
            let (w, r) = large(&config, stack, total).await?;
            writes[i].push(w);
            reads[i].push(r);
        }
    }
    let [file_w, sum_w] = writes.map(median);
    let [file_r, sum_r] = reads.map(median);
    out.push(
        json!({ "scenario": "stacks", "case": "1 MiB labels, checksum,file against file",
        "bytes": total, "rounds": ROUNDS, "file_write_mib_s": file_w, "checksum_write_mib_s": sum_w,
        "checksum_over_file_write": sum_w / file_w, "file_read_mib_s": file_r,
        "checksum_read_mib_s": sum_r, "checksum_over_file_read": sum_r / file_r,
        "raw_write_mib_s": raw_large(total)?, "machine": machine() }),
    );

    let (mut p50, mut p99) = ([vec![], vec![], vec![]], [vec![], vec![], vec![]]);
    for _ in 0..ROUNDS {
        for (i, stack) in [&memory, &tier, &file].into_iter().enumerate() {
            let (a, b) = sync_latency(&config, stack).await?;
            p50[i].push(a);
            p99[i].push(b);
        }
    }
    let [mem50, tier50, file50] = p50.map(median);
    let [mem99, tier99, file99] = p99.map(median);
    out.push(json!({ "scenario": "stacks", "case": "sync 4 KiB writes, one memory worker and one tier,file worker against one file worker",
        "rounds": ROUNDS, "memory_p50_us": mem50, "memory_p99_us": mem99, "tier_p50_us": tier50,
        "tier_p99_us": tier99, "file_p50_us": file50, "file_p99_us": file99,
        "memory_over_file_p50": mem50 / file50, "tier_over_file_p50": tier50 / file50,
        "raw_pwrite_fdatasync_p50_us": raw_sync_latency()?, "machine": machine() }));

    // What `metrics` costs: a meter over each named module, on the stack
    // alone, where nothing hides it.
    let (metered, unmetered) = (spec("metrics,checksum,file")?, spec("checksum,file")?);
    let mut runs = [vec![], vec![]];
    for _ in 0..ROUNDS {
        for (i, stack) in [&metered, &unmetered].into_iter().enumerate() {
            runs[i].push(small_backend(stack, 4 * SMALL)?);
        }
    }
    let [metered_per_s, unmetered_per_s] = runs.map(median);
    out.push(json!({ "scenario": "stacks", "case": "8 KiB writes, metrics,checksum,file against checksum,file, the stack alone",
        "writes": 4 * SMALL, "rounds": ROUNDS, "metrics_writes_per_s": metered_per_s,
        "plain_writes_per_s": unmetered_per_s, "metrics_over_plain": metered_per_s / unmetered_per_s,
        "raw_pwrite_per_s": small_raw(4 * SMALL)?, "machine": machine() }));

    // The compute lane's default bound (one CPU left to the rest) against
    // one pipeline per CPU: what the reserve buys small labels, and what
    // it costs the pipelines.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut runs = [(); 2].map(|_| ([(); 4].map(|_| vec![]), vec![]));
    for _ in 0..ROUNDS {
        for (i, threads) in [0, cpus].into_iter().enumerate() {
            let (lat, mib_s) = latency_under_pipelines(&config, threads).await?;
            for (run, v) in runs[i].0.iter_mut().zip(lat) {
                run.push(v);
            }
            runs[i].1.push(mib_s);
        }
    }
    let [(bounded, bounded_mib_s), (all, all_mib_s)] =
        runs.map(|(lat, mib_s)| (lat.map(median), median(mib_s)));
    out.push(json!({ "scenario": "stacks", "case": "sync 4 KiB writes on one file worker, alone and while 1 MiB zstd pipeline labels (8 in flight) load it, with the default compute lane and with one pipeline per CPU",
        "writes": 2000, "rounds": ROUNDS, "cpus": cpus,
        "alone_p50_us": bounded[0], "alone_p99_us": bounded[1],
        "loaded_p50_us": bounded[2], "loaded_p99_us": bounded[3],
        "loaded_over_alone_p99": bounded[3] / bounded[1], "pipeline_mib_s": bounded_mib_s,
        "per_cpu_alone_p99_us": all[1], "per_cpu_loaded_p50_us": all[2], "per_cpu_loaded_p99_us": all[3],
        "per_cpu_loaded_over_alone_p99": all[3] / all[1], "per_cpu_pipeline_mib_s": all_mib_s,
        "raw_pwrite_fdatasync_p50_us": raw_sync_latency()?, "machine": machine() }));

    // The scheduler: a small synchronous write among large ones, with no
    // scheduler, in arrival order, and small first (one call at a time).
    let stacks = [
        spec("file")?,
        spec("scheduler,file")?,
        spec("scheduler:small,file")?,
    ];
    let mut runs = [(); 3].map(|_| [(); 3].map(|_| vec![]));
    for _ in 0..ROUNDS {
        for (i, stack) in stacks.iter().enumerate() {
            let (p50, p99, mib_s) = small_beside_large(stack)?;
            for (run, v) in runs[i].iter_mut().zip([p50, p99, mib_s]) {
                run.push(v);
            }
        }
    }
    let [none, fifo, small] = runs.map(|r| r.map(median));
    out.push(json!({ "scenario": "stacks", "case": "4 KiB sync writes beside two threads of 1 MiB sync writes, the stack alone: file, scheduler,file, scheduler:small,file",
        "small_writes": 400, "rounds": ROUNDS,
        "file_p50_us": none[0], "file_p99_us": none[1], "file_large_mib_s": none[2],
        "fifo_p50_us": fifo[0], "fifo_p99_us": fifo[1], "fifo_large_mib_s": fifo[2],
        "small_first_p50_us": small[0], "small_first_p99_us": small[1], "small_first_large_mib_s": small[2],
        "small_first_over_fifo_p99": small[1] / fifo[1],
        "raw_pwrite_fdatasync_p50_us": raw_sync_latency()?, "machine": machine() }));

    let (cached, plain) = (spec("cache:64MiB,zstd,kv")?, spec("zstd,kv")?);
    let data = compressible(HOT_SET);
    let (mut runs, mut raw, mut stored) = ([vec![], vec![]], vec![], 0);
    for _ in 0..ROUNDS {
        for (i, stack) in [&cached, &plain].into_iter().enumerate() {
            let (mib_s, used) = hot_reads(stack, &data)?;
            runs[i].push(mib_s);
            stored = used;
        }
        raw.push(hot_raw(&data)?);
    }
    let [cached_mib_s, plain_mib_s] = runs.map(median);
    out.push(json!({ "scenario": "stacks", "case": "hot 64 KiB reads of compressed data, cache:64MiB,zstd,kv against zstd,kv, the stack alone",
        "set_bytes": HOT_SET, "reads": HOT_READS, "rounds": ROUNDS, "stored_bytes": stored,
        "cached_mib_s": cached_mib_s, "plain_mib_s": plain_mib_s,
        "cached_over_plain": cached_mib_s / plain_mib_s, "raw_pread_mib_s": median(raw),
        "machine": machine() }));
    Ok(out)
}

/// The raw baseline of the 1 MiB writes: the same bytes to one local
/// file, then fdatasync, MiB/s.
fn raw_large(total: u64) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let f = std::fs::File::create(dir.path().join("large"))?;
    let n = (total / MIB).max(1);
    let data = block(21, MIB as usize);
    let t = Instant::now();
    for i in 0..n {
        f.write_all_at(&data, i * MIB)?;
    }
    f.sync_data()?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The raw baseline of a synchronous 4 KiB write: pwrite then fdatasync,
/// p50 µs.
fn raw_sync_latency() -> anyhow::Result<f64> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let f = std::fs::File::create(dir.path().join("latency"))?;
    let data = block(31, 4096);
    let mut lat: Vec<Duration> = Vec::with_capacity(1000);
    for i in 0..1000u64 {
        let t = Instant::now();
        f.write_all_at(&data, (i % 256) * 4096)?;
        f.sync_data()?;
        lat.push(t.elapsed());
    }
    Ok(percentiles(&mut lat).0)
}
