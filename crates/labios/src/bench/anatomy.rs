//! `anatomy`: the time share of each component for 1 MiB write and read
//! labels (the article's Figure 11), measured on the embedded runtime with
//! one label in flight at a time.

use super::{block, machine, MIB};
use crate::config::Config;
use crate::runtime::Runtime;
use labios_label::anatomy::{self, Phase};
use serde_json::json;
use std::time::Instant;

const LABELS: u64 = 200;

pub async fn anatomy(mut config: Config) -> anyhow::Result<Vec<serde_json::Value>> {
    let dir = tempfile::tempdir()?;
    config.data_dir = dir.path().to_path_buf();
    let runtime = Runtime::start(config).await?;
    let client = runtime.client(0).await?;
    let data = block(11, MIB as usize);
    // Warm up: files, descriptors and caches exist before measuring.
    client
        .write_at_sync("/anatomy/warm", 0, data.clone())
        .await?;
    client.read("/anatomy/warm").await?;

    let mut out = Vec::new();
    for op in ["write", "read"] {
        if op == "read" {
            for i in 0..LABELS {
                client
                    .write_at_sync("/anatomy/file", i * MIB, data.clone())
                    .await?;
            }
        }
        anatomy::enable(true);
        let t = Instant::now();
        for i in 0..LABELS {
            if op == "write" {
                client
                    .write_at_sync("/anatomy/file", i * MIB, data.clone())
                    .await?;
            } else {
                let got = client.read_at("/anatomy/file", i * MIB, MIB).await?;
                anyhow::ensure!(got == data, "read-back mismatch");
            }
        }
        let total = t.elapsed().as_nanos() as u64;
        let phases = anatomy::totals();
        anatomy::enable(false);
        let accounted: u64 = phases.iter().map(|(_, n)| n).sum();
        let mut shares = serde_json::Map::new();
        for (phase, nanos) in &phases {
            if *nanos > 0 || matches!(phase, Phase::WarehousePut | Phase::WorkerStorage) {
                shares.insert(phase.name().into(), json!(percent(*nanos, total)));
            }
        }
        shares.insert(
            "queues, wake-ups and notification (rest)".into(),
            json!(percent(total.saturating_sub(accounted), total)),
        );
        out.push(
            json!({ "scenario": "anatomy", "label": op, "label_bytes": MIB, "labels": LABELS,
            "mean_us_per_label": total as f64 / LABELS as f64 / 1e3, "share_percent": shares,
            "machine": machine() }),
        );
    }
    runtime.shutdown().await?;
    Ok(out)
}

fn percent(part: u64, total: u64) -> f64 {
    (part as f64 * 1000.0 / total.max(1) as f64).round() / 10.0
}
