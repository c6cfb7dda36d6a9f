//! `labios bench SCENARIO --json`: the measurements behind BENCHMARKS.md.
//! Each scenario starts its own runtime in a temporary directory (or uses
//! `--endpoint`) and, where one applies, measures a raw baseline in the same
//! run: the same bytes written or read straight to or from the same
//! filesystem with the same sync semantics.

mod anatomy;
mod cluster;
mod elastic;
mod sds;
mod soak;
mod stacks;

pub use soak::SoakOptions;

use crate::config::Config;
use anyhow::Context;
use bytes::Bytes;
use labios_client::Client;
use labios_connect::connect_client;
use serde_json::json;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const MIB: u64 = 1 << 20;

/// What a client-side scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A `labios serve` child on a temporary data directory.
    LocalServer,
    /// A throwaway distributed deployment (`--cluster`).
    LocalCluster,
    /// Whatever the configuration names (`--endpoint`, or the distributed
    /// deployment's NATS and Redis).
    Configured,
}

/// `config_file`: the file `config` was read from, which a `labios serve`
/// the benchmark starts reads too.
pub async fn run(
    config: Config,
    config_file: Option<PathBuf>,
    target: Target,
    scenario: &str,
    json: bool,
    bytes: Option<u64>,
    soak: SoakOptions,
) -> anyhow::Result<()> {
    let emit = |v: serde_json::Value| {
        if json {
            println!("{v}");
        } else {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
    };
    match scenario {
        "dispatch" => {
            for v in dispatch()? {
                emit(v);
            }
            Ok(())
        }
        "write" | "read" | "small" | "latency" => {
            let server = if target == Target::LocalServer { Some(LocalServer::start(&config, config_file.as_deref())?) } else { None };
            let cluster = if target == Target::LocalCluster { Some(cluster::LocalCluster::start(&config, 3)?) } else { None };
            let cfg = match (&server, &cluster) {
                (Some(s), _) => s.config.clone(),
                (_, Some(c)) => c.config.clone(),
                _ => config,
            };
            let client = connect_client(&cfg.connection(), None, None).await?;
            if let Some(c) = &cluster {
                c.wait_workers(client.stores().inventory.as_ref(), 3).await?;
            }
            let scratch = tempfile::tempdir()?;
            let raw_dir = match (&server, &cluster) {
                (Some(s), _) => s.dir.path().to_path_buf(),
                (_, Some(c)) => c.dir.path().to_path_buf(),
                _ => scratch.path().to_path_buf(),
            };
            let result = match scenario {
                "write" => write_read(&client, &raw_dir, bytes.unwrap_or(512 * MIB), false).await,
                "read" => write_read(&client, &raw_dir, bytes.unwrap_or(512 * MIB), true).await,
                "small" => small(&client, &raw_dir, bytes.unwrap_or(400 * MIB)).await,
                _ => latency(&client, &raw_dir).await,
            };
            drop(server);
            drop(cluster);
            let mut result = result?;
            result["deployment"] = json!(match target {
                Target::LocalServer => "embedded (labios serve)",
                Target::LocalCluster => "distributed (NATS + Redis, 1 dispatcher, 3 workers)",
                Target::Configured => "as configured",
            });
            emit(result);
            Ok(())
        }
        "dispatch-scaling" => {
            for v in dispatch_scaling(&config).await? {
                emit(v);
            }
            Ok(())
        }
        "anatomy" => {
            for v in anatomy::anatomy(config).await? {
                emit(v);
            }
            Ok(())
        }
        "elastic" => {
            for v in elastic::elastic(config, bytes.unwrap_or(4096 * MIB)).await? {
                emit(v);
            }
            Ok(())
        }
        "sds" => {
            let server = LocalServer::start(&config, config_file.as_deref())?;
            let client = connect_client(&server.config.connection(), None, None).await?;
            for mut v in sds::sds(&client, bytes.unwrap_or(1024 * MIB)).await? {
                v["deployment"] = json!("embedded (labios serve)");
                emit(v);
            }
            Ok(())
        }
        "stacks" => {
            for v in stacks::stacks(config, bytes.unwrap_or(256 * MIB)).await? {
                emit(v);
            }
            Ok(())
        }
        "soak" => {
            anyhow::ensure!(
                target == Target::LocalServer,
                "soak measures the memory of the `labios serve` it starts itself: --cluster and --endpoint do not apply"
            );
            let (summary, failures) = soak::soak(config, config_file.as_deref(), &soak, json).await?;
            emit(summary);
            anyhow::ensure!(failures.is_empty(), "soak failed: {}", failures.join("; "));
            Ok(())
        }
        other => anyhow::bail!(
            "unknown benchmark scenario {other:?}; choose one of dispatch, write, read, small, latency, anatomy, elastic, dispatch-scaling, sds, stacks, soak"
        ),
    }
}

pub(crate) fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    json!({ "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1), "cpu": cpu })
}

fn dispatch() -> anyhow::Result<Vec<serde_json::Value>> {
    use labios_core::dispatcher::{bench_dispatch, Policy};
    use labios_label::Weights;
    let policies = [
        ("round-robin", Policy::RoundRobin),
        ("random", Policy::Random),
        (
            "constraint",
            Policy::Constraint {
                weights: Weights::LOW_LATENCY,
                bytes_per_worker: 16 * MIB,
            },
        ),
        (
            "minmax",
            Policy::MinMax {
                weights: Weights::ENERGY_SAVINGS,
            },
        ),
    ];
    // One untimed pass first: page faults and allocator warm-up otherwise
    // land on whichever policy runs first.
    bench_dispatch(100_000, 8, 1024, Policy::RoundRobin)?;
    policies
        .into_iter()
        .map(|(name, policy)| {
            let r = bench_dispatch(100_000, 8, 1024, policy)?;
            Ok(
                json!({ "scenario": "dispatch", "policy": name, "labels": r.labels, "workers": 8,
                    "batch_size": 1024, "labels_per_s": r.labels_per_sec, "tasks": r.tasks,
                    "supertasks": r.supertasks, "aggregated": r.aggregated, "machine": machine() }),
            )
        })
        .collect()
}

/// Dispatcher processes sharing one label queue (distributed deployment):
/// the queue is filled first, then 1, 2 or 4 dispatchers drain it into the
/// workers' queues; labels/s is measured from the first label taken to the
/// queue being empty.
async fn dispatch_scaling(config: &Config) -> anyhow::Result<Vec<serde_json::Value>> {
    const LABELS: u64 = 20_000;
    let mut base = config.clone();
    base.client.min_label_size = 0;
    base.client.max_in_flight = 4 * LABELS as usize;
    let mut cluster = cluster::LocalCluster::start(&base, 3)?;
    cluster.set_dispatchers(0)?;
    let client = connect_client(&cluster.config.connection(), None, None).await?;
    cluster
        .wait_workers(client.stores().inventory.as_ref(), 3)
        .await?;
    let queue = labios_store::client_queue(client.app());
    let data = block(3, 64);
    let mut out = Vec::new();
    for n in [1usize, 2, 4] {
        for i in 0..LABELS {
            client
                .write_at_async(
                    &format!("/scaling/{n}/{}", i % 64),
                    (i / 64) * 64,
                    data.clone(),
                )
                .await?;
        }
        let labels = client.stores().labels.clone();
        anyhow::ensure!(
            labels.depth(&queue).await? as u64 >= LABELS,
            "labels were dispatched before the dispatchers started"
        );
        cluster.set_dispatchers(n)?;
        let deadline = Instant::now() + Duration::from_secs(300);
        while labels.depth(&queue).await? as u64 == LABELS {
            anyhow::ensure!(Instant::now() < deadline, "no dispatcher started");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let t = Instant::now();
        while labels.depth(&queue).await? > 0 {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the queue did not drain within 300 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let secs = t.elapsed().as_secs_f64();
        client.wait_all().await?;
        cluster.set_dispatchers(0)?;
        out.push(
            json!({ "scenario": "dispatch-scaling", "dispatchers": n, "labels": LABELS,
            "labels_per_s": LABELS as f64 / secs, "workers": 3,
            "deployment": "distributed (NATS + Redis), dispatcher processes sharing one queue",
            "machine": machine() }),
        );
    }
    Ok(out)
}

/// A `labios serve` child process on a temporary data directory.
struct LocalServer {
    child: Child,
    dir: tempfile::TempDir,
    config: Config,
}

impl LocalServer {
    fn start(config: &Config, file: Option<&Path>) -> anyhow::Result<LocalServer> {
        Self::start_with(config, file, &[])
    }

    /// The child reads its settings as any `labios serve` does, from the
    /// configuration `file` and the environment, not from `config`: `env`
    /// holds the `LABIOS_*` variables of settings a scenario changes.
    fn start_with(
        config: &Config,
        file: Option<&Path>,
        env: &[(&str, String)],
    ) -> anyhow::Result<LocalServer> {
        let dir = tempfile::tempdir()?;
        let mut config = config.clone();
        config.data_dir = dir.path().join("data");
        let sock = dir.path().join("labios.sock");
        config.endpoint = Some(sock.to_string_lossy().into_owned());
        let exe = std::env::current_exe()?;
        let mut command = Command::new(exe);
        if let Some(file) = file {
            command.arg("--config").arg(std::path::absolute(file)?);
        }
        let child = command
            .args(["serve", "--data-dir"])
            .arg(&config.data_dir)
            .arg("--endpoint")
            .arg(&sock)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start labios serve")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !sock.exists() {
            if Instant::now() > deadline {
                anyhow::bail!("labios serve did not create {} within 30 s", sock.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(LocalServer { child, dir, config })
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        // SIGTERM lets the server stop cleanly; then reap it. A server that
        // does not stop within 30 s (work stuck in it, which a failed soak
        // may have found) is killed, so that the bench still reports.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            eprintln!("labios bench: labios serve did not stop within 30 s of SIGTERM; killing it");
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub(crate) fn block(seed: u64, len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    fastrand::Rng::with_seed(seed).fill(&mut v);
    Bytes::from(v)
}

/// 1 MiB labels written (and optionally read back) through the client,
/// pipelined, then flushed to the devices; raw = the same 1 MiB pwrites to one
/// file in the same filesystem, then fdatasync.
async fn write_read(
    client: &Client,
    raw_dir: &Path,
    total: u64,
    read: bool,
) -> anyhow::Result<serde_json::Value> {
    let n = (total / MIB).max(1);
    let blocks: Vec<Bytes> = (0..16).map(|i| block(i, MIB as usize)).collect();
    let path = "/bench/write.bin";
    const WINDOW: usize = 32;

    let t = Instant::now();
    let mut handles = Vec::new();
    for i in 0..n {
        handles.push(
            client
                .write_at_async(path, i * MIB, blocks[(i % 16) as usize].clone())
                .await?,
        );
        if handles.len() >= WINDOW {
            client.wait_many(&handles).await?;
            handles.clear();
        }
    }
    client.wait_many(&handles).await?;
    client.flush(path).await?;
    let labios_write = t.elapsed().as_secs_f64();

    let raw_path = raw_dir.join("raw-write.bin");
    let t = Instant::now();
    {
        let f = std::fs::File::create(&raw_path)?;
        for i in 0..n {
            f.write_all_at(&blocks[(i % 16) as usize], i * MIB)?;
        }
        f.sync_data()?;
    }
    let raw_write = t.elapsed().as_secs_f64();
    let mib = n as f64;
    if !read {
        let _ = std::fs::remove_file(&raw_path);
        client.remove(path).await?;
        return Ok(
            json!({ "scenario": "write", "label_bytes": MIB, "labels": n, "sync": "flush at end (fdatasync)",
            "labios_mib_s": mib / labios_write, "raw_mib_s": mib / raw_write, "ratio": raw_write / labios_write,
            "machine": machine() }),
        );
    }

    // Hot: everything is in the page cache, so raw is a memcpy. Cold: the
    // kernel's caches are dropped first, so both read the device.
    let (hot_labios, ok_hot) = labios_read(client, path, n, &blocks).await?;
    let hot_raw = raw_read(&raw_path, n)?;
    let cold = drop_caches();
    let (cold_labios, ok_cold) = labios_read(client, path, n, &blocks).await?;
    drop_caches();
    let cold_raw = raw_read(&raw_path, n)?;
    let _ = std::fs::remove_file(&raw_path);
    client.remove(path).await?;
    anyhow::ensure!(ok_hot && ok_cold, "read-back mismatch");
    let mut v = json!({ "scenario": "read", "label_bytes": MIB, "labels": n, "verified": true,
        "hot_labios_mib_s": mib / hot_labios, "hot_raw_mib_s": mib / hot_raw, "hot_ratio": hot_raw / hot_labios,
        "machine": machine() });
    if cold {
        v["labios_mib_s"] = json!(mib / cold_labios);
        v["raw_mib_s"] = json!(mib / cold_raw);
        v["ratio"] = json!(cold_raw / cold_labios);
        v["cache"] = json!("dropped before each cold read (echo 3 > /proc/sys/vm/drop_caches)");
    } else {
        v["cache"] = json!("could not drop caches (not root): hot figures only");
    }
    Ok(v)
}

/// Reads `n` 1 MiB labels, 32 in flight; returns seconds and whether every
/// block matched.
async fn labios_read(
    client: &Client,
    path: &str,
    n: u64,
    blocks: &[Bytes],
) -> anyhow::Result<(f64, bool)> {
    const WINDOW: u64 = 32;
    let t = Instant::now();
    let mut ok = true;
    let mut start = 0;
    while start < n {
        let end = (start + WINDOW).min(n);
        let got =
            futures::future::try_join_all((start..end).map(|i| client.read_at(path, i * MIB, MIB)))
                .await?;
        for (i, data) in (start..end).zip(got) {
            ok &= data == blocks[(i % 16) as usize];
        }
        start = end;
    }
    Ok((t.elapsed().as_secs_f64(), ok))
}

fn raw_read(path: &Path, n: u64) -> anyhow::Result<f64> {
    let t = Instant::now();
    let f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; MIB as usize];
    for i in 0..n {
        f.read_exact_at(&mut buf, i * MIB)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Writes back dirty pages and drops the page cache; false if not permitted.
fn drop_caches() -> bool {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// 4 KiB asynchronous writes, then wait for all.
async fn small(client: &Client, raw_dir: &Path, total: u64) -> anyhow::Result<serde_json::Value> {
    let n = (total / 4096).max(1);
    let data = block(7, 4096);
    let path = "/bench/small.bin";
    let before = labels_done(client).await?;
    let t = Instant::now();
    for i in 0..n {
        client.write_at_async(path, i * 4096, data.clone()).await?;
    }
    client.wait_all().await?;
    let secs = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let labels = labels_done(client).await? - before;
    let raw_path = raw_dir.join("raw-small.bin");
    let t = Instant::now();
    {
        let f = std::fs::File::create(&raw_path)?;
        for i in 0..n {
            f.write_all_at(&data, i * 4096)?;
        }
    }
    let raw = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(raw_path);
    client.remove(path).await?;
    Ok(
        json!({ "scenario": "small", "requests": n, "request_bytes": 4096,
        "labels_per_s": n as f64 / secs, "worker_labels": labels,
        "raw_pwrite_per_s": n as f64 / raw, "machine": machine() }),
    )
}

async fn labels_done(client: &Client) -> anyhow::Result<u64> {
    Ok(client
        .catalog()
        .inventory()
        .workers()
        .await?
        .iter()
        .map(|w| w.labels_done)
        .sum())
}

/// Synchronous 4 KiB writes: each call returns when a worker has written it.
async fn latency(client: &Client, raw_dir: &Path) -> anyhow::Result<serde_json::Value> {
    const N: usize = 5000;
    let data = block(9, 4096);
    let path = "/bench/latency.bin";
    let mut lat = Vec::with_capacity(N);
    for i in 0..N {
        let t = Instant::now();
        client
            .write_at_sync(path, (i as u64 % 256) * 4096, data.clone())
            .await?;
        lat.push(t.elapsed());
    }
    // Reads of what was written, in another order (every 7th block).
    let mut read_lat = Vec::with_capacity(N);
    for i in 0..N {
        let at = (i as u64 * 7 % 256) * 4096;
        let t = Instant::now();
        let got = client.read_at(path, at, 4096).await?;
        read_lat.push(t.elapsed());
        anyhow::ensure!(got == data, "read of 4 KiB at {at} returned other bytes");
    }
    let raw_path: PathBuf = raw_dir.join("raw-latency.bin");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&raw_path)?;
    let mut raw = Vec::with_capacity(N);
    for i in 0..N {
        let t = Instant::now();
        f.write_all_at(&data, (i as u64 % 256) * 4096)?;
        raw.push(t.elapsed());
    }
    let mut raw_read = Vec::with_capacity(N);
    let mut buf = vec![0; 4096];
    for i in 0..N {
        let t = Instant::now();
        f.read_exact_at(&mut buf, (i as u64 * 7 % 256) * 4096)?;
        raw_read.push(t.elapsed());
    }
    drop(f);
    let _ = std::fs::remove_file(raw_path);
    client.remove(path).await?;
    let (p50, p99) = percentiles(&mut lat);
    let (r50, r99) = percentiles(&mut raw);
    let (rd50, rd99) = percentiles(&mut read_lat);
    let (rr50, rr99) = percentiles(&mut raw_read);
    Ok(
        json!({ "scenario": "latency", "writes": N, "bytes": 4096, "p50_us": p50, "p99_us": p99,
        "raw_pwrite_p50_us": r50, "raw_pwrite_p99_us": r99,
        "reads": N, "read_p50_us": rd50, "read_p99_us": rd99,
        "raw_pread_p50_us": rr50, "raw_pread_p99_us": rr99, "machine": machine() }),
    )
}

pub fn percentiles(v: &mut [Duration]) -> (f64, f64) {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}
