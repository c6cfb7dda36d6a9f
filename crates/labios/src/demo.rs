//! `labios demo`: a small CM1-like workload (article 4.2.2) on the embedded
//! runtime. Several writers alternate compute steps with checkpoint writes,
//! once synchronously and once asynchronously; everything is read back and
//! verified byte for byte, and a table shows what the application saw.

use crate::config::Config;
use crate::runtime::Runtime;
use anyhow::Context;
use bytes::Bytes;
use labios_client::Client;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const WRITERS: usize = 4;
const STEPS: usize = 4;
/// Each writer's checkpoint per step: one large array and a few small records.
const ARRAY_BYTES: usize = 6 * 1024 * 1024 + 12_345;
const RECORDS: usize = 32;
const RECORD_BYTES: usize = 4096;
const COMPUTE: Duration = Duration::from_millis(60);

pub async fn run(mut config: Config, data_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let _tmp;
    config.data_dir = match data_dir {
        Some(d) => d,
        None => {
            let t = tempfile::tempdir().context("cannot create a temporary data directory")?;
            let p = t.path().to_path_buf();
            _tmp = t;
            p
        }
    };
    println!(
        "LABIOS demo: embedded runtime in {}",
        config.data_dir.display()
    );
    let runtime = Runtime::start(config).await?;
    let mut rows = Vec::new();
    for mode in ["sync", "async"] {
        rows.push(phase(&runtime, mode).await?);
    }
    println!();
    println!(
        "{:<6} {:>10} {:>7} {:>14} {:>10} {:>9}  labels per worker",
        "mode", "MiB", "labels", "app I/O time", "wall time", "verified"
    );
    for r in &rows {
        let per_worker: Vec<String> = r
            .per_worker
            .iter()
            .map(|(w, n)| format!("w{w}:{n}"))
            .collect();
        println!(
            "{:<6} {:>10.1} {:>7} {:>12.1}ms {:>8.1}ms {:>9}  {}",
            r.mode,
            r.bytes as f64 / 1048576.0,
            r.labels,
            r.io_time.as_secs_f64() * 1e3,
            r.wall.as_secs_f64() * 1e3,
            if r.verified { "yes" } else { "NO" },
            per_worker.join(" ")
        );
    }
    runtime.shutdown().await?;
    // Every label the writers published went to some worker.
    for r in &rows {
        let sent: u64 = r.per_worker.values().sum();
        anyhow::ensure!(
            sent == r.labels,
            "{} phase: writers published {} labels but the dispatchers sent {sent} to workers",
            r.mode,
            r.labels
        );
    }
    if rows.iter().all(|r| r.verified) {
        println!("\nall checkpoints read back byte-exact");
        Ok(())
    } else {
        anyhow::bail!("verification failed")
    }
}

struct Row {
    mode: &'static str,
    bytes: u64,
    labels: u64,
    io_time: Duration,
    wall: Duration,
    verified: bool,
    per_worker: BTreeMap<u32, u64>,
}

/// Deterministic checkpoint contents so the read-back can be checked.
fn pattern(mode: &str, step: usize, writer: usize, len: usize, salt: u64) -> Bytes {
    let seed = (step as u64) << 32 ^ (writer as u64) << 16 ^ salt ^ mode.len() as u64;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    Bytes::from(v)
}

/// Labels the runtime's dispatchers have sent to each worker: counted as
/// they are sent, so a phase's figures are exact once its writers have
/// waited for their labels (worker heartbeats lag by a score interval).
fn labels_per_worker(runtime: &Runtime) -> BTreeMap<u32, u64> {
    let mut total = BTreeMap::new();
    for stats in &runtime.dispatch_stats {
        for (w, n) in stats.per_worker() {
            *total.entry(w).or_default() += n;
        }
    }
    for id in 0..runtime.config.workers.len() as u32 {
        total.entry(id).or_default();
    }
    total
}

async fn phase(runtime: &Runtime, mode: &'static str) -> anyhow::Result<Row> {
    let before = labels_per_worker(runtime);
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = runtime.client(0).await?;
        writers.push(tokio::spawn(writer(client, mode, w)));
    }
    let mut io_time = Duration::ZERO;
    let mut bytes = 0;
    let mut labels = 0;
    for h in writers {
        let (t, b, l) = h.await??;
        io_time = io_time.max(t);
        bytes += b;
        labels += l;
    }
    let wall = started.elapsed();
    let after = labels_per_worker(runtime);
    let per_worker: BTreeMap<u32, u64> = after
        .iter()
        .map(|(w, n)| (*w, n - before.get(w).copied().unwrap_or(0)))
        .collect();
    let verified = verify(runtime, mode).await?;
    println!(
        "{mode:>5}: {WRITERS} writers x {STEPS} steps, {:.1} MiB, I/O visible to the application {:.1} ms",
        bytes as f64 / 1048576.0,
        io_time.as_secs_f64() * 1e3
    );
    Ok(Row {
        mode,
        bytes,
        labels,
        io_time,
        wall,
        verified,
        per_worker,
    })
}

/// One simulated rank: compute, then write its checkpoint; returns the time
/// it spent blocked in I/O, the bytes it wrote and the labels it published.
async fn writer(
    client: Client,
    mode: &'static str,
    w: usize,
) -> anyhow::Result<(Duration, u64, u64)> {
    let mut io = Duration::ZERO;
    let mut bytes = 0u64;
    let mut handles = Vec::new();
    for step in 0..STEPS {
        tokio::time::sleep(COMPUTE).await;
        let t = Instant::now();
        let array = format!("/demo/{mode}/step{step}/rank{w}.array");
        let records = format!("/demo/{mode}/step{step}/rank{w}.records");
        let data = pattern(mode, step, w, ARRAY_BYTES, 1);
        let recs = pattern(mode, step, w, RECORDS * RECORD_BYTES, 2);
        if mode == "sync" {
            client.write_at_sync(&array, 0, data).await?;
            for r in 0..RECORDS {
                let off = r * RECORD_BYTES;
                client
                    .write_at_sync(&records, off as u64, recs.slice(off..off + RECORD_BYTES))
                    .await?;
            }
        } else {
            handles.push(client.write_at_async(&array, 0, data).await?);
            for r in 0..RECORDS {
                let off = r * RECORD_BYTES;
                handles.push(
                    client
                        .write_at_async(&records, off as u64, recs.slice(off..off + RECORD_BYTES))
                        .await?,
                );
            }
        }
        bytes += (ARRAY_BYTES + RECORDS * RECORD_BYTES) as u64;
        io += t.elapsed();
    }
    let t = Instant::now();
    client.wait_many(&handles).await?;
    client.wait_all().await?;
    io += t.elapsed();
    Ok((io, bytes, client.labels_published()))
}

async fn verify(runtime: &Runtime, mode: &str) -> anyhow::Result<bool> {
    let client = runtime.client(0).await?;
    for step in 0..STEPS {
        for w in 0..WRITERS {
            let array = client
                .read(&format!("/demo/{mode}/step{step}/rank{w}.array"))
                .await?;
            let records = client
                .read(&format!("/demo/{mode}/step{step}/rank{w}.records"))
                .await?;
            if array != pattern(mode, step, w, ARRAY_BYTES, 1)
                || records != pattern(mode, step, w, RECORDS * RECORD_BYTES, 2)
            {
                eprintln!("mismatch in step {step} writer {w} ({mode})");
                return Ok(false);
            }
        }
    }
    Ok(true)
}
