//! Shared set-up for the integration tests: an embedded runtime on a
//! temporary data directory, and deterministic random data.
#![allow(dead_code)]

pub mod deploy;
pub mod model;
pub mod model_client;
pub mod mount;
pub mod s3;
pub mod serve;

/// `both!(name, ...)`: for each `async fn name(kind: Kind)`, a module `name`
/// with the tests `embedded` and `cluster`.
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::Kind;
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn embedded() {
                super::$name(Kind::Embedded).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn cluster() {
                super::$name(Kind::Cluster).await
            }
        }
    )*};
}

use bytes::Bytes;
use labios::{Config, Runtime};
use std::path::Path;

pub fn config(dir: &Path) -> Config {
    let mut c = Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    c.warehouse.max_bytes = 256 << 20;
    c
}

pub async fn start(dir: &Path) -> Runtime {
    Runtime::start(config(dir)).await.expect("runtime starts")
}

pub fn data(seed: u64, len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    fastrand::Rng::with_seed(seed).fill(&mut v);
    Bytes::from(v)
}

/// Every file and symbolic link under `root`, recursively (links are not
/// followed).
pub fn files_under(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Unit record files (a codec layer's, file id bit 62) under `root`: more
/// than none means a codec stored units there.
pub fn unit_records(root: &Path) -> usize {
    files_under(root)
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('4'))
        })
        .count()
}
