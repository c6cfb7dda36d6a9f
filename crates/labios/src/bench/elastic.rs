//! `elastic`: 1 MiB writes with 25/50/75/100% of the workers active, static
//! allocation (only those workers exist) versus elastic (all exist, the rest
//! start suspended and the manager wakes them as queues build), as in the
//! article's Figure 13; plus the measured worker wake-up latency.

use super::{block, machine, MIB};
use crate::config::Config;
use crate::runtime::Runtime;
use serde_json::json;
use std::time::{Duration, Instant};

pub async fn elastic(config: Config, total: u64) -> anyhow::Result<Vec<serde_json::Value>> {
    let n = (total / MIB).max(1);
    let pool = config.workers.len();
    let data: Vec<_> = (0..8).map(|i| block(i, MIB as usize)).collect();
    let mut out = Vec::new();
    for quarter in 1..=4usize {
        let active = (pool * quarter).div_ceil(4).max(1);
        for allocation in ["static", "elastic"] {
            if allocation == "elastic" && active == pool {
                continue;
            }
            let dir = tempfile::tempdir()?;
            let mut c = config.clone();
            c.data_dir = dir.path().to_path_buf();
            c.manager.allocation = allocation.into();
            c.manager.min_active = active;
            c.manager.wake_threshold = 8;
            c.worker.max_queue = 64;
            c.dispatcher.policy = "round-robin".into();
            if allocation == "static" {
                c.workers.truncate(active);
            }
            let runtime = Runtime::start(c).await?;
            let client = runtime.client(0).await?;
            let t = Instant::now();
            let mut handles = Vec::new();
            for i in 0..n {
                handles.push(
                    client
                        .write_at_async("/elastic/out", i * MIB, data[(i % 8) as usize].clone())
                        .await?,
                );
                if handles.len() >= 64 {
                    client.wait_many(&handles).await?;
                    handles.clear();
                }
            }
            client.wait_many(&handles).await?;
            client.flush("/elastic/out").await?;
            let secs = t.elapsed().as_secs_f64();
            let wakes = runtime.manager.wake_latencies();
            let mean_wake = if wakes.is_empty() {
                None
            } else {
                Some(wakes.iter().sum::<Duration>().as_secs_f64() * 1e6 / wakes.len() as f64)
            };
            out.push(json!({ "scenario": "elastic", "allocation": allocation, "active_workers": active,
                "pool": pool, "labels": n, "label_bytes": MIB, "seconds": secs, "mib_s": n as f64 / secs,
                "wakes": wakes.len(), "mean_wake_latency_us": mean_wake, "machine": machine() }));
            runtime.shutdown().await?;
        }
    }
    Ok(out)
}
