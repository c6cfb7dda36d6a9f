//! `labios bench sds`: software-defined storage in the style of the
//! article's Figures 17 and 18.
//!
//! (a) In-situ analytics: statistics, a filter and a word count over a data
//!     set stored in LABIOS, run at the workers (`query`), against reading
//!     the same data into the client and computing there.
//! (b) Offloading: sort, AES-256-GCM, zstd and lz4 applied by the workers
//!     after the data is staged (`write_through`), against applying them in
//!     the application before a plain write. Reported: the time until the
//!     application may exit, and the total time until the data is stored.

use super::{machine, MIB};
use bytes::Bytes;
use labios_client::Client;
use labios_functions::Context;
use labios_label::Operation;
use serde_json::json;
use std::collections::HashMap;
use std::time::Instant;

/// One file of the data set; the data set is `total / FILE` of them.
const FILE: u64 = 64 * MIB;

fn ops(spec: &str) -> anyhow::Result<Vec<Operation>> {
    Ok(Operation::parse_pipeline(spec)?)
}

/// Pseudo-random little-endian i64 values.
fn numbers(seed: u64, len: u64) -> Bytes {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut v = Vec::with_capacity(len as usize);
    while (v.len() as u64) < len {
        v.extend_from_slice(&rng.i64(-1_000_000_000..1_000_000_000).to_le_bytes());
    }
    Bytes::from(v)
}

/// ASCII words from a small vocabulary, in lines.
fn text(seed: u64, len: u64) -> Bytes {
    const WORDS: &[&str] = &[
        "storage",
        "label",
        "worker",
        "queue",
        "data",
        "analysis",
        "the",
        "of",
        "simulation",
        "checkpoint",
        "cloud",
        "hpc",
    ];
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut v = Vec::with_capacity(len as usize);
    while (v.len() as u64) < len {
        v.extend_from_slice(WORDS[rng.usize(..WORDS.len())].as_bytes());
        v.push(if rng.u8(..12) == 0 { b'\n' } else { b' ' });
    }
    v.truncate(len as usize);
    Bytes::from(v)
}

/// Applies a pipeline in this process, as an application would inline.
fn local(spec: &str, data: Bytes) -> anyhow::Result<Bytes> {
    let modules = HashMap::new();
    let ctx = Context {
        app: 0,
        key: Some(labios_functions::app_key("bench")),
        modules: &modules,
        sandbox: None,
    };
    Ok(labios_functions::apply(&ops(spec)?, data, &ctx)?)
}

pub async fn sds(client: &Client, total: u64) -> anyhow::Result<Vec<serde_json::Value>> {
    let files = total.div_ceil(FILE).max(1);
    let mut out = Vec::new();
    // (a) In-situ analytics over `files` numeric files and as many text ones.
    for i in 0..files {
        client
            .write_at_sync(&format!("/bench/sds/n{i}"), 0, numbers(i, FILE))
            .await?;
        client
            .write_at_sync(&format!("/bench/sds/t{i}"), 0, text(i, FILE))
            .await?;
    }
    let analyses = [
        ("stats", "n", "stats:dtype=i64"),
        ("filter", "n", "filter:dtype=i64,min=0,max=10000000"),
        ("wordcount", "t", "wordcount"),
    ];
    for (name, prefix, spec) in analyses {
        let t = Instant::now();
        let mut in_situ_bytes = 0;
        for i in 0..files {
            let r = client
                .query(&format!("/bench/sds/{prefix}{i}"), ops(spec)?)
                .await?;
            in_situ_bytes += r.len();
        }
        let in_situ = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut moved = 0u64;
        for i in 0..files {
            let data = client.read(&format!("/bench/sds/{prefix}{i}")).await?;
            moved += data.len() as u64;
            let spec = spec.to_string();
            tokio::task::spawn_blocking(move || local(&spec, data)).await??;
        }
        let at_client = t.elapsed().as_secs_f64();
        out.push(json!({
            "scenario": "sds-in-situ", "analysis": name, "pipeline": spec,
            "dataset_bytes": files * FILE, "files": files,
            "in_situ_s": in_situ, "result_bytes_to_client": in_situ_bytes,
            "read_and_compute_at_client_s": at_client, "bytes_to_client": moved,
            "speedup": at_client / in_situ,
            "machine": machine(),
        }));
    }
    // (b) Offloading transformations, over the numeric data (generated
    // before the clocks start).
    let inputs: Vec<Bytes> = (0..files).map(|i| numbers(i, FILE)).collect();
    for spec in ["sort:dtype=i64", "encrypt", "zstd:level=3", "lz4"] {
        let t = Instant::now();
        for i in 0..files {
            let data = inputs[i as usize].clone();
            let s = spec.to_string();
            let done = tokio::task::spawn_blocking(move || local(&s, data)).await??;
            client
                .write_at_sync(&format!("/bench/sds/inline{i}"), 0, done)
                .await?;
        }
        let inline = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut handles = Vec::new();
        for i in 0..files {
            handles.push(
                client
                    .write_through(
                        &format!("/bench/sds/off{i}"),
                        0,
                        inputs[i as usize].clone(),
                        ops(spec)?,
                    )
                    .await?,
            );
        }
        let may_exit = t.elapsed().as_secs_f64();
        client.wait_many(&handles).await?;
        let offloaded = t.elapsed().as_secs_f64();
        out.push(json!({
            "scenario": "sds-offload", "pipeline": spec, "bytes": files * FILE, "files": files,
            "inline_exit_s": inline, "inline_total_s": inline,
            "offload_exit_s": may_exit, "offload_total_s": offloaded,
            "machine": machine(),
        }));
    }
    for i in 0..files {
        for p in ["n", "t", "inline", "off"] {
            client.remove(&format!("/bench/sds/{p}{i}")).await?;
        }
    }
    Ok(out)
}
