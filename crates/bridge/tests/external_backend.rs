//! The `external` backend of a worker's stack (worker_blocks.rs): the
//! stack conformance suite over mounts in memory and in a directory, under
//! layers, and what a restart of the worker keeps.

use labios_bridge::{MountConfig, Mounts, WorkerMounts};
use labios_stack::conformance::backend_suite;
use labios_stack::live::Live;
use labios_stack::{Backend, Place, Spec};
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

/// The stack `spec` declares for worker `worker`, its blocks in `mounts`,
/// as a worker opens it (a tier's journal in its local directory `dir`).
fn open(spec: &Spec, mounts: &Mounts, worker: u32, dir: &Path) -> Arc<dyn Backend> {
    let externals = WorkerMounts {
        mounts: mounts.clone(),
        worker,
    };
    let place = Place {
        stack: spec.clone(),
        ..Place::from(dir.to_path_buf())
    };
    Arc::new(Live::open_with(&place, 1 << 30, Some(&externals)).unwrap())
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
        for stack in [
            "external:m",
            "checksum,zstd,external:m",
            "tier:64KiB,checksum,external:m",
        ] {
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
        // A tier over `external` journals in the worker's own directory:
        // a small write is acknowledged there before the mount has it.
        let (stack, m) = (spec("tier:1MiB,external:m"), mounts(&uri));
        let b = open(&stack, &m, 1, &local);
        b.write(10, &[(0, b"journaled")], false).unwrap();
        let journal = std::fs::read_dir(local.join("journal/files"))
            .unwrap()
            .count();
        assert!(journal > 0, "the journal is local");
        b.settle().unwrap();
        let mut back = [0u8; 9];
        open(&stack, &m, 1, &local).read(10, 0, &mut back).unwrap();
        assert_eq!(&back, b"journaled");
        b.remove(10).unwrap();
        drop(b);
        // What changes cut short leave: a block without its file's
        // length, and one past its file's length.
        let stray = root.join("labios/workers/1/0000000000000063/0000000000000000");
        std::fs::create_dir_all(stray.parent().unwrap()).unwrap();
        std::fs::write(&stray, vec![7u8; 64 << 10]).unwrap();
        let b = open(&spec("external:m"), &mounts(&uri), 1, &local);
        b.write(4, &[(0, b"four")], true).unwrap();
        drop(b);
        let past = root.join("labios/workers/1/0000000000000004/0000000000000002");
        std::fs::write(&past, vec![7u8; 64 << 10]).unwrap();
        // And an object a crash left half written before its rename.
        let half = root.join("labios/workers/1/.writing/half");
        std::fs::create_dir_all(half.parent().unwrap()).unwrap();
        std::fs::write(&half, [7u8; 100]).unwrap();
        let b = open(&spec("external:m"), &mounts(&uri), 1, &local);
        assert_eq!((b.used(), b.files().unwrap()), (64 << 10, vec![4]));
        assert!(
            !stray.exists() && !past.exists(),
            "the stray blocks are deleted"
        );
        assert!(!half.exists(), "the half-written object is deleted");
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

/// A change of a file that fails part way (one of its blocks cannot be
/// stored: a directory stands where the object goes) fails its write, and
/// the worker counts exactly the blocks the mount then holds; once the obstacle is
/// gone the file is written and read whole, and a restart counts the same.
#[test]
fn a_change_that_fails_part_way_leaves_the_count_true() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mount");
    let uri = format!("fs://{}", root.display());
    let local = dir.path().join("worker");
    on_worker_thread(move || {
        let (stack, m) = (spec("external:m"), mounts(&uri));
        let b = open(&stack, &m, 1, &local);
        let file_dir = root.join("labios/workers/1/0000000000000005");
        let obstacle = file_dir.join("0000000000000003");
        std::fs::create_dir_all(obstacle.join("x")).unwrap();
        let stored = |root: &Path| {
            std::fs::read_dir(root.join("labios/workers/1/0000000000000005"))
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.file_type().unwrap().is_file())
                        .filter(|e| e.file_name() != "len")
                        .count() as u64
                })
                .unwrap_or(0)
        };
        b.write(5, &[(0, b"first")], true).unwrap();
        let data: Vec<u8> = (0..(8u32 << 16)).map(|i| (i % 249) as u8).collect();
        let err = b.write(5, &[(0, &data)], true).unwrap_err().to_string();
        assert!(err.contains("0000000000000003"), "{err}");
        // Block 0 (the file's length is still 5) stays, rewritten: a
        // failed write may change part of its range, as a failed pwrite
        // may; the blocks it put past the length go.
        assert_eq!(stored(&root), 1, "only the block within the length");
        assert_eq!(b.used(), 64 << 10, "counted as stored");
        std::fs::remove_dir_all(&obstacle).unwrap();
        b.write(5, &[(0, &data)], true).unwrap();
        assert_eq!(b.used(), 8 << 16);
        let mut back = vec![0; data.len()];
        b.read(5, 0, &mut back).unwrap();
        assert!(back == data);
        drop(b);
        assert_eq!(open(&stack, &m, 1, &local).used(), 8 << 16);
    });
}

/// Labels cannot name the workers' blocks in a mount: not by another
/// spelling, another case, or through a mount declared around it.
#[test]
fn no_label_may_name_the_workers_blocks() {
    let m = mounts("memory://");
    for path in [
        "m:/labios",
        "m:/labios/workers/1/0000000000000005/len",
        "m:/./labios//workers/1",
        "m:/Labios/Workers/1",
        "m:/labios/workers/1/.writing/x",
    ] {
        let err = m.resolve(path).unwrap_err().to_string();
        assert!(err.contains("LABIOS's own objects"), "{path}: {err}");
    }
    assert_eq!(m.resolve("m:/labiosx").unwrap().path, "labiosx");
    let dir = tempfile::tempdir().unwrap();
    let fs = |sub: &str| MountConfig {
        uri: format!("fs://{}{sub}", dir.path().display()),
        ..Default::default()
    };
    let nested = Mounts::new(&BTreeMap::from([
        ("outer".to_string(), fs("")),
        ("inner".to_string(), fs("/lake")),
    ]))
    .unwrap();
    let err = nested
        .resolve("outer:/lake/labios/workers/2/0000000000000001/len")
        .unwrap_err()
        .to_string();
    assert!(err.contains("LABIOS's own objects"), "{err}");
    assert!(nested.resolve("outer:/lake/data").is_ok());
}
