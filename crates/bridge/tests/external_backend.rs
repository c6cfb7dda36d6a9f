//! The `external` backend of a worker's stack (worker_blocks.rs): the
//! stack conformance suite over mounts in memory and in a directory, under
//! layers, and what a restart of the worker keeps.

use labios_bridge::{MountConfig, Mounts, WorkerMounts};
use labios_stack::conformance::backend_suite;
use labios_stack::{Backend, Spec};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn spec(s: &str) -> Spec {
    Spec::try_from(s.split(',').map(String::from).collect::<Vec<_>>()).unwrap()
}

fn mounts(uri: &str) -> Mounts {
    let declared = BTreeMap::from([(
        "m".to_string(),
        MountConfig {
            uri: uri.to_string(),
            ..Default::default()
        },
    )]);
    Mounts::new(&declared).unwrap()
}

/// Runs `f` on a blocking thread of a runtime, as a worker calls its stack.
fn on_worker_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { tokio::task::spawn_blocking(f).await })
        .unwrap()
}

/// The stack `spec` declares for worker `worker`, its blocks in `mounts`.
fn open(spec: &Spec, mounts: &Mounts, worker: u32, dir: &Path) -> Arc<dyn Backend> {
    let externals = WorkerMounts {
        mounts: mounts.clone(),
        worker,
    };
    let backend = spec.open_with(dir, 1 << 30, Some(&externals)).unwrap();
    spec.over(backend).unwrap()
}

const STACKS: [&str; 4] = [
    "external:m",
    "checksum,zstd,external:m",
    "tier:64KiB,cache:1MiB,external:m",
    "metrics,checksum,lz4,scheduler,external:m",
];

#[test]
fn every_stack_over_an_external_mount_passes_the_suite() {
    for uri in ["memory://", "fs"] {
        for stack in STACKS {
            let dir = tempfile::tempdir().unwrap();
            let uri = match uri {
                "fs" => format!("fs://{}", dir.path().join("mount").display()),
                other => other.to_string(),
            };
            let local = dir.path().join("worker");
            on_worker_thread(move || {
                eprintln!("stack {stack} over {uri}");
                let b = open(&spec(stack), &mounts(&uri), 3, &local);
                backend_suite(b.as_ref());
            });
        }
    }
}

/// Bytes a worker wrote to a directory mount are there after its restart,
/// under its own prefix (a second worker on the same mount sees none of
/// them); blocks a crash left without their file's length are deleted by
/// the next open.
#[test]
fn an_external_worker_keeps_its_bytes_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mount");
    let uri = format!("fs://{}", root.display());
    let local = dir.path().join("worker");
    on_worker_thread(move || {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for stack in ["external:m", "checksum,zstd,external:m"] {
            let (stack, m) = (spec(stack), mounts(&uri));
            let b = open(&stack, &m, 1, &local);
            b.write(9, &[(100, &data)], true).unwrap();
            b.settle().unwrap();
            let used = b.used();
            drop(b);
            let b = open(&stack, &m, 1, &local);
            assert_eq!(b.used(), used, "{stack}");
            let mut back = vec![0; data.len()];
            b.read(9, 100, &mut back).unwrap();
            assert!(back == data, "{stack}: the bytes read back");
            let other = open(&stack, &m, 2, &local);
            assert_eq!((other.used(), other.files().unwrap()), (0, vec![]));
            b.remove(9).unwrap();
        }
        // A block without its file's length: a change cut short.
        let orphan = root.join("labios/workers/1/0000000000000063/0000000000000000");
        std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
        std::fs::write(&orphan, vec![7u8; 64 << 10]).unwrap();
        let b = open(&spec("external:m"), &mounts(&uri), 1, &local);
        assert_eq!((b.used(), b.files().unwrap()), (0, vec![]));
        assert!(!orphan.exists(), "the orphan block is deleted");
    });
}

/// A stack naming a mount the configuration does not declare is refused
/// at open, naming it; `external` without a mount is refused by the spec.
#[test]
fn an_unknown_mount_is_refused_naming_it() {
    let err = Spec::try_from(vec!["external".to_string()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("external:NAME"), "{err}");
    let err = Spec::try_from(vec!["file:x".to_string()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("takes no argument"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().to_path_buf();
    let err = on_worker_thread(move || {
        let externals = WorkerMounts {
            mounts: mounts("memory://"),
            worker: 1,
        };
        spec("external:archive")
            .open_with(&local, 1 << 20, Some(&externals))
            .map(drop)
            .unwrap_err()
            .to_string()
    });
    assert!(err.contains("mount \"archive\""), "{err}");
}
