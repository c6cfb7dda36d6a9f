//! `soak` (issue 11): millions of labels of mixed sizes through a `labios
//! serve` child, with the resident memory of both processes and the depth of
//! every bounded buffer sampled each second. Memory must stay flat once
//! warm (the baseline is minute 1) and no buffer may pass its bound; a read
//! that returns other bytes than were written fails the run.
//!
//! The server runs with bounds smaller than its defaults ([`QUEUE_BOUND`],
//! [`WAREHOUSE_BYTES`]; a configuration that sets its own keeps them) and
//! the writers offer more than it absorbs, so that backpressure, not the
//! workload's own pacing, is what limits the buffers.

use super::{machine, LocalServer, MIB};
use crate::config::Config;
use anyhow::Context;
use bytes::Bytes;
use labios_client::Client;
use labios_connect::connect_client;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `labios bench soak` runs.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// Stop once the writers have published this many labels.
    pub labels: u64,
    /// Stop after this long even if fewer labels went through.
    pub seconds: Option<u64>,
    /// Write the plot (SVG) here.
    pub plot: Option<PathBuf>,
}

/// Items each label queue (client queue, worker queues) holds before a push
/// waits: small enough that the bursts of reads below fill it.
const QUEUE_BOUND: usize = 128;
/// Bytes in transit the warehouse holds before a put waits: half of what
/// one writer's burst of writes offers at once.
const WAREHOUSE_BYTES: u64 = 32 * MIB;
/// Client sessions writing at once, each on its own files (several
/// applications' processes; their rounds interleave, so the load on the
/// server never drains to zero at a barrier).
const WRITERS: usize = 4;
/// Files of small writes per writer, and their size.
const SMALL_FILES: usize = 8;
const SMALL_FILE: usize = 512 * 1024;
/// Files of 64 KiB - 1 MiB writes per writer, and their size.
const BIG_FILES: usize = 2;
const BIG_FILE: usize = 4 * MIB as usize;
/// Writes of a round, one after the other, each published as soon as it
/// is made (small ones once the client has aggregated 64 KiB of them).
const SMALL_WRITES: u32 = 8192;
const MID_WRITES: u32 = 16;
const BIG_WRITES: u32 = 16;
/// Then a burst: every slot of the burst file rewritten at once, twice the
/// warehouse bound...
const BURST_SLOTS: usize = 256;
const BURST_SLOT: usize = 256 * 1024;
/// ...and, after `wait_all`, this many small reads at once (several times
/// the queue bound), each checked against what was written, plus a few
/// 1 MiB reads.
const BURST_READS: usize = 1024;
const BIG_READS: usize = 4;
/// Random bytes every write is a slice of.
const POOL: usize = 8 * MIB as usize;
/// Memory is compared with its level at this age: allocator arenas, file
/// descriptors and worker lanes exist by then, and the label statuses
/// nobody waits for have started to be reclaimed.
const WARM_SECS: f64 = 60.0;
/// Seconds of samples the baseline and the end are each the median of.
const WINDOW_SECS: f64 = 60.0;
/// Growth of resident memory from the warm baseline to the end that fails
/// the soak.
const GROWTH_LIMIT_PERCENT: f64 = 5.0;
/// Buffers are looked at this often; a sample keeps the deepest look of
/// its second, since a burst can fill and drain a queue within one.
const POLL: Duration = Duration::from_millis(100);
const POLLS_PER_SAMPLE: u32 = 10;

/// One second's look at both processes and the server's buffers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sample {
    t: f64,
    labels: u64,
    serve_rss: u64,
    bench_rss: u64,
    buffers: Buffers,
    statuses: u64,
    disk: u64,
}

/// The server's bounded buffers: deepest seen over a sample's second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Buffers {
    label_queue: u64,
    worker_queue_max: u64,
    warehouse: u64,
}

impl Buffers {
    fn max(self, other: Buffers) -> Buffers {
        Buffers {
            label_queue: self.label_queue.max(other.label_queue),
            worker_queue_max: self.worker_queue_max.max(other.worker_queue_max),
            warehouse: self.warehouse.max(other.warehouse),
        }
    }
}

impl Sample {
    fn json(&self) -> serde_json::Value {
        json!({ "scenario": "soak-sample", "t": (self.t * 10.0).round() / 10.0,
            "labels": self.labels, "serve_rss_kib": self.serve_rss / 1024,
            "bench_rss_kib": self.bench_rss / 1024,
            "label_queue_max": self.buffers.label_queue,
            "worker_queue_max": self.buffers.worker_queue_max,
            "warehouse_bytes_max": self.buffers.warehouse, "label_statuses": self.statuses,
            "disk_bytes": self.disk })
    }
}

/// The bounds the server runs with: items per label queue, bytes in the
/// warehouse.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    queue: u64,
    warehouse: u64,
}

/// Counters the writers share with the sampler.
#[derive(Default)]
struct Progress {
    stop: AtomicBool,
    bytes_written: AtomicU64,
    reads_verified: AtomicU64,
}

/// Runs the soak; returns its summary and the checks it failed (none: the
/// soak passed).
pub async fn soak(
    config: Config,
    config_file: Option<&std::path::Path>,
    options: &SoakOptions,
    json: bool,
) -> anyhow::Result<(serde_json::Value, Vec<String>)> {
    let mut config = config;
    let defaults = Config::default();
    if config.queue.bound == defaults.queue.bound {
        config.queue.bound = QUEUE_BOUND;
    }
    if config.warehouse.max_bytes == defaults.warehouse.max_bytes {
        config.warehouse.max_bytes = WAREHOUSE_BYTES;
    }
    config.validate()?;
    let bounds = Bounds {
        queue: config.queue.bound as u64,
        warehouse: config.warehouse.max_bytes,
    };
    let server = LocalServer::start_with(
        &config,
        config_file,
        &[
            ("LABIOS_QUEUE__BOUND", bounds.queue.to_string()),
            ("LABIOS_WAREHOUSE__MAX_BYTES", bounds.warehouse.to_string()),
        ],
    )?;
    let serve_pid = server.child.id();
    // A process past a quarter of the machine's memory ends the run before
    // it takes the machine down with it.
    let memory_limit = mem_total()? / 4;
    let monitor = connect_client(&server.config.connection(), None, None).await?;
    let label_queue = labios_store::client_queue(monitor.app());
    let progress = Arc::new(Progress::default());
    let pool = super::block(42, POOL);
    let mut clients = Vec::new();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let client = connect_client(&server.config.connection(), None, None).await?;
        clients.push(client.clone());
        writers.spawn(writer(w, client, pool.clone(), progress.clone()));
    }

    let start = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut failures = Vec::new();
    let mut stopped_by = None;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut polls = 0;
    let mut deepest = Buffers::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                deepest = deepest.max(buffers(&monitor, &label_queue).await?);
                polls += 1;
                if polls < POLLS_PER_SAMPLE {
                    continue;
                }
                polls = 0;
                let s = Sample {
                    t: start.elapsed().as_secs_f64(),
                    labels: clients.iter().map(Client::labels_published).sum(),
                    serve_rss: rss(&format!("/proc/{serve_pid}/status"))?,
                    bench_rss: rss("/proc/self/status")?,
                    buffers: std::mem::take(&mut deepest),
                    statuses: monitor.stores().inventory.label_count().await? as u64,
                    disk: disk_usage(server.dir.path()),
                };
                if json {
                    println!("{}", s.json());
                }
                if samples.len() % 60 == 59 {
                    eprintln!(
                        "soak: {:.0} s, {} labels, serve {} MiB, bench {} MiB",
                        s.t, s.labels, s.serve_rss / MIB, s.bench_rss / MIB
                    );
                }
                samples.push(s);
                if stopped_by.is_none() {
                    if s.labels >= options.labels {
                        stopped_by = Some("labels".to_string());
                    } else if options.seconds.is_some_and(|max| s.t >= max as f64) {
                        stopped_by = Some("time limit".to_string());
                    } else if s.serve_rss.max(s.bench_rss) > memory_limit {
                        let why = format!(
                            "memory: a process passed {} MiB, a quarter of the machine's memory",
                            memory_limit / MIB
                        );
                        failures.push(format!("stopped early by {why}"));
                        stopped_by = Some(why);
                    }
                    if stopped_by.is_some() {
                        progress.stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            joined = writers.join_next() => match joined {
                None => break,
                Some(result) => {
                    // The first writer to fail ends the soak: the others
                    // are dropped, and the summary says what failed.
                    let failed = match result {
                        Ok(Ok(())) if progress.stop.load(Ordering::Relaxed) => None,
                        Ok(Ok(())) => Some("a writer stopped before the end".to_string()),
                        Ok(Err(e)) => Some(format!("{e:#}")),
                        Err(e) => Some(format!("a writer panicked: {e}")),
                    };
                    if let Some(why) = failed {
                        let t = start.elapsed().as_secs_f64();
                        failures.push(format!("at {t:.0} s: {why}"));
                        stopped_by = Some("a failed writer".to_string());
                        break;
                    }
                }
            },
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let labels: u64 = clients.iter().map(Client::labels_published).sum();
    drop(server);

    if let Some(path) = &options.plot {
        std::fs::write(path, plot(&samples, bounds))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut memory = |name: &str, f: fn(&Sample) -> u64| {
        let points: Vec<(f64, f64)> = samples.iter().map(|s| (s.t, f(s) as f64)).collect();
        match growth(&points, WARM_SECS, WINDOW_SECS) {
            Some(g) => {
                if g.percent >= GROWTH_LIMIT_PERCENT {
                    failures.push(format!(
                        "{name} resident memory grew {:.1} % from minute 1 to the last minute (medians; limit {GROWTH_LIMIT_PERCENT} %)",
                        g.percent
                    ));
                }
                json!({ "minute_1_median_mib": g.baseline / MIB as f64,
                    "last_minute_median_mib": g.end / MIB as f64,
                    "max_after_minute_1_mib": g.max / MIB as f64, "growth_percent": g.percent })
            }
            None => json!({ "note": "run shorter than a minute: no warm baseline" }),
        }
    };
    let serve_rss = memory("labios serve", |s| s.serve_rss);
    let bench_rss = memory("the bench (client)", |s| s.bench_rss);
    let deepest = samples
        .iter()
        .fold(Buffers::default(), |d, s| d.max(s.buffers));
    let at_bound = |f: &dyn Fn(&Sample) -> bool| samples.iter().filter(|s| f(s)).count();
    for (name, max, bound) in [
        ("the client queue", deepest.label_queue, bounds.queue),
        ("a worker queue", deepest.worker_queue_max, bounds.queue),
        ("the warehouse", deepest.warehouse, bounds.warehouse),
    ] {
        if max > bound {
            failures.push(format!("{name} held {max}, over its bound {bound}"));
        }
    }
    let warm_disk = samples.iter().find(|s| s.t >= WARM_SECS).map(|s| s.disk);
    let summary = json!({ "scenario": "soak", "labels": labels, "target_labels": options.labels,
        "stopped_by": stopped_by, "seconds": seconds, "labels_per_s": labels as f64 / seconds,
        "writers": WRITERS, "bytes_written": progress.bytes_written.load(Ordering::Relaxed),
        "reads_verified": progress.reads_verified.load(Ordering::Relaxed),
        "samples": samples.len(), "serve_rss": serve_rss, "bench_rss": bench_rss,
        "label_queue": { "max": deepest.label_queue, "bound": bounds.queue,
            "seconds_at_bound": at_bound(&|s| s.buffers.label_queue >= bounds.queue) },
        "worker_queue": { "max": deepest.worker_queue_max, "bound": bounds.queue,
            "seconds_at_bound": at_bound(&|s| s.buffers.worker_queue_max >= bounds.queue) },
        "warehouse_bytes": { "max": deepest.warehouse, "bound": bounds.warehouse,
            "seconds_within_1_mib_of_bound": at_bound(&|s| s.buffers.warehouse + MIB > bounds.warehouse) },
        "client_in_flight_bound": config.client.max_in_flight,
        "label_statuses_max": samples.iter().map(|s| s.statuses).max(),
        "disk_mib": { "minute_1": warm_disk.map(|d| d as f64 / MIB as f64),
            "end": samples.last().map(|s| s.disk as f64 / MIB as f64) },
        "passed": failures.is_empty(), "failures": failures,
        "deployment": "embedded (labios serve)", "machine": machine() });
    Ok((summary, failures))
}

async fn buffers(monitor: &Client, label_queue: &str) -> anyhow::Result<Buffers> {
    let stores = monitor.stores();
    let mut b = Buffers {
        label_queue: stores.labels.depth(label_queue).await? as u64,
        warehouse: stores.warehouse.usage().await?,
        ..Buffers::default()
    };
    for q in stores.tasks.queues("worker.").await? {
        b.worker_queue_max = b.worker_queue_max.max(stores.tasks.depth(&q).await? as u64);
    }
    Ok(b)
}

/// Resident set size in bytes, from a `/proc/PID/status` file.
fn rss(status: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(status).with_context(|| format!("cannot read {status}"))?;
    kib_field(&text, "VmRSS:").with_context(|| format!("no VmRSS in {status}"))
}

fn mem_total() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("cannot read /proc/meminfo")?;
    kib_field(&text, "MemTotal:").context("no MemTotal in /proc/meminfo")
}

/// A `NAME:   1234 kB` line of a /proc file, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// Bytes allocated on disk under `dir` (the server's data directory).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_usage(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// What one writer's files must hold: a copy of the small and big files,
/// and for each slot of the burst file, where in the pool its bytes came
/// from.
struct Files {
    small: Vec<String>,
    big: Vec<String>,
    burst: String,
    shadow_small: Vec<Vec<u8>>,
    shadow_big: Vec<Vec<u8>>,
    burst_slots: Vec<usize>,
}

/// One client session: rounds of mixed writes over its own files, each
/// round ended by `wait_all` and reads checked against what the files must
/// hold.
async fn writer(
    w: usize,
    client: Client,
    pool: Bytes,
    progress: Arc<Progress>,
) -> anyhow::Result<()> {
    let mut rng = fastrand::Rng::with_seed(w as u64);
    let mut files = Files {
        small: (0..SMALL_FILES)
            .map(|i| format!("/soak/{w}/small-{i}"))
            .collect(),
        big: (0..BIG_FILES)
            .map(|i| format!("/soak/{w}/big-{i}"))
            .collect(),
        burst: format!("/soak/{w}/burst"),
        shadow_small: vec![vec![0u8; SMALL_FILE]; SMALL_FILES],
        shadow_big: vec![vec![0u8; BIG_FILE]; BIG_FILES],
        burst_slots: vec![0; BURST_SLOTS],
    };
    let slice = |rng: &mut fastrand::Rng, len: usize| {
        let at = rng.usize(0..=POOL - len);
        pool.slice(at..at + len)
    };
    let write = |path: &str, offset: usize, data: Bytes| {
        progress
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let (client, path) = (client.clone(), path.to_string());
        async move { client.write_at_async(&path, offset as u64, data).await }
    };
    // Every file is written whole first, so that reads never meet a hole
    // or the end of a file.
    for (path, shadow) in files.small.iter().zip(&mut files.shadow_small) {
        let data = slice(&mut rng, SMALL_FILE);
        shadow.copy_from_slice(&data);
        write(path, 0, data).await?;
    }
    for (path, shadow) in files.big.iter().zip(&mut files.shadow_big) {
        for at in (0..BIG_FILE).step_by(MIB as usize) {
            let data = slice(&mut rng, MIB as usize);
            shadow[at..at + data.len()].copy_from_slice(&data);
            write(path, at, data).await?;
        }
    }
    let ops = SMALL_WRITES + MID_WRITES + BIG_WRITES;
    loop {
        let slots: Vec<usize> = (0..BURST_SLOTS)
            .map(|_| rng.usize(0..=POOL - BURST_SLOT))
            .collect();
        futures::future::try_join_all(slots.iter().enumerate().map(|(s, &from)| {
            write(
                &files.burst,
                s * BURST_SLOT,
                pool.slice(from..from + BURST_SLOT),
            )
        }))
        .await?;
        files.burst_slots = slots;
        client.wait_all().await?;
        verify_burst(&client, &files, &pool, &mut rng).await?;
        progress
            .reads_verified
            .fetch_add((BURST_READS + BIG_READS) as u64, Ordering::Relaxed);
        if progress.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        for _ in 0..ops {
            let pick = rng.u32(0..ops);
            let (path, shadow, at, len) = if pick < SMALL_WRITES {
                // A few hundred bytes to just under the aggregation size,
                // spread evenly over the orders of magnitude.
                let len = log_uniform(rng.f64(), 256, 64 * 1024 - 1);
                let f = rng.usize(0..SMALL_FILES);
                let at = rng.usize(0..=SMALL_FILE - len);
                (&files.small[f], &mut files.shadow_small[f], at, len)
            } else {
                let len = if pick < SMALL_WRITES + MID_WRITES {
                    rng.usize(64 * 1024..MIB as usize)
                } else {
                    MIB as usize
                };
                let f = rng.usize(0..BIG_FILES);
                let at = if len == MIB as usize {
                    rng.usize(0..BIG_FILE / len) * len
                } else {
                    rng.usize(0..=BIG_FILE - len)
                };
                (&files.big[f], &mut files.shadow_big[f], at, len)
            };
            let data = slice(&mut rng, len);
            shadow[at..at + len].copy_from_slice(&data);
            write(path, at, data).await?;
        }
    }
}

/// The reads of a round, all at once: small ones of the burst file and of
/// the small files, and 1 MiB ones of the big files.
async fn verify_burst(
    client: &Client,
    files: &Files,
    pool: &Bytes,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<()> {
    let mut reads: Vec<(&str, usize, &[u8])> = Vec::with_capacity(BURST_READS + BIG_READS);
    for i in 0..BURST_READS {
        let len = log_uniform(rng.f64(), 256, 16 * 1024);
        if i % 2 == 0 {
            let slot = rng.usize(0..BURST_SLOTS);
            let within = rng.usize(0..=BURST_SLOT - len);
            let from = files.burst_slots[slot] + within;
            reads.push((
                &files.burst,
                slot * BURST_SLOT + within,
                &pool[from..from + len],
            ));
        } else {
            let f = rng.usize(0..SMALL_FILES);
            let at = rng.usize(0..=SMALL_FILE - len);
            reads.push((&files.small[f], at, &files.shadow_small[f][at..at + len]));
        }
    }
    for _ in 0..BIG_READS {
        let f = rng.usize(0..BIG_FILES);
        let at = rng.usize(0..BIG_FILE / MIB as usize) * MIB as usize;
        reads.push((
            &files.big[f],
            at,
            &files.shadow_big[f][at..at + MIB as usize],
        ));
    }
    futures::future::try_join_all(
        reads
            .into_iter()
            .map(|(path, at, want)| verify(client, path, at, want)),
    )
    .await?;
    Ok(())
}

/// `min` to `max` bytes, log-uniform from `u` in [0, 1): as many reads or
/// writes of a few hundred bytes as of a few KiB or tens of KiB.
fn log_uniform(u: f64, min: usize, max: usize) -> usize {
    let len = min as f64 * (max as f64 / min as f64).powf(u);
    (len as usize).clamp(min, max)
}

async fn verify(client: &Client, path: &str, at: usize, want: &[u8]) -> anyhow::Result<()> {
    let got = client.read_at(path, at as u64, want.len() as u64).await?;
    if got != want {
        let first = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        anyhow::bail!(
            "soak read of {path} at {at} ({} bytes) returned other bytes than were written: {} bytes back, first difference at byte {first}",
            want.len(),
            got.len()
        );
    }
    Ok(())
}

/// Where a series stands at the warm baseline, at the end, and at most in
/// between, and the growth from the baseline to the end.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Growth {
    baseline: f64,
    end: f64,
    max: f64,
    percent: f64,
}

/// `points` are (seconds, value) in time order. The baseline is the median
/// of the `window` seconds from `warm` on (minute 1), the end the median of
/// the last `window` seconds: a single sample may land in a burst, whose
/// buffers come and go within the second, and would read as growth or
/// shrinkage that is not there. None when no point is `warm` seconds late.
fn growth(points: &[(f64, f64)], warm: f64, window: f64) -> Option<Growth> {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (v[(n - 1) / 2] + v[n / 2]) / 2.0
    };
    let first: Vec<f64> = points
        .iter()
        .filter(|p| p.0 >= warm && p.0 < warm + window)
        .map(|p| p.1)
        .collect();
    if first.is_empty() {
        return None;
    }
    let last_t = points.last()?.0;
    let last: Vec<f64> = points
        .iter()
        .filter(|p| p.0 >= warm && p.0 > last_t - window)
        .map(|p| p.1)
        .collect();
    let max = points
        .iter()
        .filter(|p| p.0 >= warm)
        .map(|p| p.1)
        .fold(f64::MIN, f64::max);
    let (baseline, end) = (median(first), median(last));
    Some(Growth {
        baseline,
        end,
        max,
        percent: (end - baseline) * 100.0 / baseline,
    })
}

/// One line of a plot.
struct Series {
    name: &'static str,
    color: &'static str,
    points: Vec<(f64, f64)>,
}

/// One chart of the plot: its lines, and the bound they must stay under.
struct Panel {
    title: String,
    series: Vec<Series>,
    bound: Option<f64>,
}

fn plot(samples: &[Sample], bounds: Bounds) -> String {
    let line = |name, color, f: fn(&Sample) -> f64| Series {
        name,
        color,
        points: samples.iter().map(|s| (s.t, f(s))).collect(),
    };
    let rate: Vec<(f64, f64)> = samples
        .windows(2)
        .map(|w| {
            let dt = (w[1].t - w[0].t).max(1e-3);
            (w[1].t, (w[1].labels - w[0].labels) as f64 / dt)
        })
        .collect();
    svg(
        &[
            Panel {
                title: "Resident memory (MiB)".into(),
                series: vec![
                    line("labios serve", "#1f77b4", |s| {
                        s.serve_rss as f64 / MIB as f64
                    }),
                    line("bench (client)", "#ff7f0e", |s| {
                        s.bench_rss as f64 / MIB as f64
                    }),
                ],
                bound: None,
            },
            Panel {
                title: format!(
                    "Labels waiting, deepest each second (bound {} per queue)",
                    bounds.queue
                ),
                series: vec![
                    line("client queue", "#2ca02c", |s| s.buffers.label_queue as f64),
                    line("fullest worker queue", "#d62728", |s| {
                        s.buffers.worker_queue_max as f64
                    }),
                ],
                bound: Some(bounds.queue as f64),
            },
            Panel {
                title: format!(
                    "Warehouse: data in transit, most each second (MiB, bound {})",
                    bounds.warehouse / MIB
                ),
                series: vec![line("warehouse", "#9467bd", |s| {
                    s.buffers.warehouse as f64 / MIB as f64
                })],
                bound: Some(bounds.warehouse as f64 / MIB as f64),
            },
            Panel {
                title: "Labels published per second".into(),
                series: vec![Series {
                    name: "labels/s",
                    color: "#8c564b",
                    points: rate,
                }],
                bound: None,
            },
        ],
        WARM_SECS,
    )
}

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 170.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
/// Room above each panel's chart for its title and legend, and below it
/// for the time axis.
const HEADER: f64 = 40.0;
const AXIS: f64 = 24.0;

/// A hand-written SVG of stacked panels sharing one time axis, with a
/// dashed line at `marker` seconds (the warm baseline).
fn svg(panels: &[Panel], marker: f64) -> String {
    let t_max = panels
        .iter()
        .flat_map(|p| &p.series)
        .flat_map(|s| &s.points)
        .map(|p| p.0)
        .fold(1.0, f64::max);
    let minutes = t_max >= 300.0;
    let (unit, label) = if minutes { (60.0, "min") } else { (1.0, "s") };
    let x_step = nice(t_max / unit / 8.0) * unit;
    let plot_w = WIDTH - LEFT - RIGHT;
    let x = |t: f64| LEFT + t / t_max * plot_w;
    let height = panels.len() as f64 * (HEADER + PANEL_HEIGHT + AXIS);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, panel) in panels.iter().enumerate() {
        let top = i as f64 * (HEADER + PANEL_HEIGHT + AXIS) + HEADER;
        let bottom = top + PANEL_HEIGHT;
        let data_max = panel
            .series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.1)
            .fold(panel.bound.unwrap_or(0.0), f64::max);
        let y_step = nice(data_max.max(1e-9) * 1.05 / 4.0);
        let y_max = (data_max * 1.05 / y_step).ceil().max(1.0) * y_step;
        let y = |v: f64| bottom - v / y_max * PANEL_HEIGHT;
        out += &format!(
            "<text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
            top - 22.0,
            panel.title
        );
        let mut legend_x = LEFT;
        for s in &panel.series {
            out += &format!(
                "<rect x=\"{legend_x:.1}\" y=\"{:.1}\" width=\"14\" height=\"3\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
                top - 10.0,
                s.color,
                legend_x + 18.0,
                top - 6.0,
                s.name
            );
            legend_x += 30.0 + 7.0 * s.name.len() as f64;
        }
        out += &format!(
            "<rect x=\"{LEFT}\" y=\"{top:.1}\" width=\"{plot_w}\" height=\"{PANEL_HEIGHT}\" fill=\"none\" stroke=\"#999\"/>\n"
        );
        let mut v = 0.0;
        while v <= y_max + y_step / 2.0 {
            out += &format!(
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{yv:.1}\" y2=\"{yv:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
                LEFT + plot_w,
                LEFT - 5.0,
                y(v) + 4.0,
                number(v),
                yv = y(v)
            );
            v += y_step;
        }
        let mut t = 0.0;
        while t <= t_max {
            out += &format!(
                "<line x1=\"{xt:.1}\" x2=\"{xt:.1}\" y1=\"{top:.1}\" y2=\"{bottom:.1}\" stroke=\"#eee\"/><text x=\"{xt:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{} {label}</text>\n",
                bottom + 14.0,
                number(t / unit),
                xt = x(t)
            );
            t += x_step;
        }
        if marker <= t_max {
            out += &format!(
                "<line x1=\"{xm:.1}\" x2=\"{xm:.1}\" y1=\"{top:.1}\" y2=\"{bottom:.1}\" stroke=\"#555\" stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#555\">minute 1</text>\n",
                x(marker) + 3.0,
                top + 12.0,
                xm = x(marker)
            );
        }
        if let Some(b) = panel.bound {
            out += &format!(
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{yb:.1}\" y2=\"{yb:.1}\" stroke=\"#000\" stroke-dasharray=\"6 3\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">bound</text>\n",
                LEFT + plot_w,
                LEFT + plot_w - 4.0,
                y(b) - 4.0,
                yb = y(b)
            );
        }
        for s in &panel.series {
            let points: Vec<String> = s
                .points
                .iter()
                .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
                .collect();
            out += &format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" points=\"{}\"/>\n",
                s.color,
                points.join(" ")
            );
        }
    }
    out += "</svg>\n";
    out
}

/// The smallest 1, 2 or 5 times a power of ten that is at least `v`.
fn nice(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&n| n >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

/// A tick label: whole numbers without decimals.
fn number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline is minute 1, not the cold start; a burst in either
    /// window moves its median no more than one sample does.
    #[test]
    fn growth_compares_the_medians_of_minute_1_and_the_last_minute() {
        let mut points = vec![(1.0, 10.0), (59.0, 90.0)];
        points.extend((60..120).map(|t| (t as f64, if t == 70 { 500.0 } else { 100.0 })));
        points.extend((120..180).map(|t| (t as f64, if t == 179 { 900.0 } else { 103.0 })));
        let g = growth(&points, 60.0, 60.0).unwrap();
        assert_eq!(g.baseline, 100.0);
        assert_eq!(g.end, 103.0);
        assert_eq!(g.max, 900.0);
        assert!((g.percent - 3.0).abs() < 1e-9, "{}", g.percent);
        assert_eq!(growth(&points[..2], 60.0, 60.0), None);
    }

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(nice(0.7), 1.0);
        assert_eq!(nice(1.0), 1.0);
        assert_eq!(nice(3.2), 5.0);
        assert_eq!(nice(230.0), 500.0);
        assert_eq!(number(1024.0), "1024");
        assert_eq!(number(2.5), "2.5");
    }

    /// Every sample becomes one point inside its panel, and a bound above
    /// the data still fits in the chart.
    #[test]
    fn svg_draws_each_series_inside_its_panel() {
        let panels = [Panel {
            title: "queue".into(),
            series: vec![Series {
                name: "q",
                color: "red",
                points: vec![(0.0, 0.0), (50.0, 10.0), (100.0, 5.0)],
            }],
            bound: Some(40.0),
        }];
        let svg = svg(&panels, 60.0);
        let points = svg
            .split("points=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap();
        let xy: Vec<(f64, f64)> = points
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        assert_eq!(xy.len(), 3);
        assert_eq!(xy[0], (LEFT, HEADER + PANEL_HEIGHT));
        assert_eq!(xy[2].0, WIDTH - RIGHT);
        assert!(xy
            .iter()
            .all(|&(_, y)| (HEADER..=HEADER + PANEL_HEIGHT).contains(&y)));
        assert!(svg.contains(">bound</text>") && svg.contains(">minute 1</text>"));
    }
}
