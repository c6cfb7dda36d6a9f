//! Every backend of the registry through the conformance suite, and the
//! registry's refusals.

use labios_stack::backends::file::FileBackend;
use labios_stack::backends::memory::MemoryBackend;
use labios_stack::conformance::{backend_suite, every_stack, restart_suite};
use labios_stack::layers::checksum::Checksum;
use labios_stack::{Backend, Spec};
use std::sync::Arc;

#[test]
fn every_stack_passes_the_suite_and_restarts_as_it_says() {
    let specs = every_stack();
    assert_eq!(specs.len(), 42, "{specs:?}");
    for spec in specs {
        let dir = tempfile::tempdir().unwrap();
        backend_suite(spec.build(dir.path(), 1 << 30).unwrap().as_ref());
        let dir = tempfile::tempdir().unwrap();
        restart_suite(&spec, dir.path());
    }
}

#[test]
fn a_malformed_stack_is_refused_naming_the_module() {
    let spec =
        |names: &[&str]| Spec::try_from(names.iter().map(|n| n.to_string()).collect::<Vec<_>>());
    assert_eq!(spec(&["memory"]).unwrap().to_string(), "memory");
    for (names, named) in [
        (&[][..], "empty"),
        (&["ssd"][..], "\"ssd\""),
        (&["snappy", "file"][..], "unknown layer \"snappy\""),
        (&["cache:0", "file"][..], "\"cache:0\": the cache's size"),
        (
            &["cache:64XB", "kv"][..],
            "\"cache:64XB\": the cache's size",
        ),
        (
            &["cache:99999999999GiB", "kv"][..],
            "\"cache:99999999999GiB\": the cache's size",
        ),
        (
            &["checksum:1", "file"][..],
            "\"checksum:1\": the checksum layer takes no argument",
        ),
        (
            &["zstd", "cache:1MiB", "file"][..],
            "\"cache:1MiB\" must come before \"zstd\"",
        ),
        (
            &["cache", "checksum", "file"][..],
            "\"checksum\" must come before \"cache\"",
        ),
        (
            &["zstd", "checksum", "file"][..],
            "\"checksum\" must come before \"zstd\"",
        ),
        (
            &["zstd", "lz4", "file"][..],
            "\"zstd\" and \"lz4\" do one layer's work",
        ),
        (
            &["checksum", "metrics", "file"][..],
            "\"metrics\" comes first, once",
        ),
        (
            &["metrics", "metrics", "file"][..],
            "\"metrics\" comes first, once",
        ),
        (
            &["metrics:1", "file"][..],
            "\"metrics:1\": the metrics layer takes no argument",
        ),
        (&["metrics"][..], "unknown backend \"metrics\""),
        (
            &["checksum", "auth", "file"][..],
            "\"auth\" comes first, once",
        ),
        (
            &["auth:2+x", "file"][..],
            "\"auth:2+x\": \"x\" is not an application id",
        ),
        (
            &["auth:", "file"][..],
            "\"auth:\": \"\" is not an application id",
        ),
        (&["auth"][..], "unknown backend \"auth\""),
        (&["file", "checksum"][..], "unknown backend \"checksum\""),
    ] {
        let err = spec(names).unwrap_err().to_string();
        assert!(err.contains(named), "{names:?}: {err}");
    }
}

/// `auth` (first, before `metrics`) names who may use the worker and
/// builds nothing: the stack under it is the one it would be without it.
#[test]
fn the_auth_module_admits_the_applications_it_names() {
    let spec = |s: &str| Spec::try_from(s.split(',').map(String::from).collect::<Vec<_>>());
    let island = spec("auth:3+7,metrics,checksum,file").unwrap();
    assert_eq!(island.admitted(), Some([3, 7].into()));
    for open in ["auth,file", "checksum,file", "file"] {
        assert_eq!(spec(open).unwrap().admitted(), None, "{open}");
    }
    assert_eq!(island.to_string(), "auth:3+7,metrics,checksum,file");
    let dir = tempfile::tempdir().unwrap();
    let backend = island.open(dir.path(), 1 << 20).unwrap();
    let (stack, meters) = island.over_metered(backend).unwrap();
    stack.write(1, &[(0, b"island")], true).unwrap();
    let mut back = [0u8; 6];
    stack.read(1, 0, &mut back).unwrap();
    assert_eq!(&back, b"island");
    // `metrics` under `auth` meters the layers it names: checksum, file.
    let names: Vec<String> = meters.stats().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["checksum", "file"]);
}

#[test]
fn the_memory_backend_stays_within_its_capacity() {
    let m = MemoryBackend::new(8192);
    m.write(1, &[(0, &[1; 4096])], false).unwrap();
    let err = m.write(1, &[(4096, &[2; 4097])], false).unwrap_err();
    assert!(err.to_string().contains("full"), "{err}");
    let mut back = [0u8; 4096];
    m.read(1, 0, &mut back).unwrap();
    assert_eq!(back, [1; 4096], "a refused write changes nothing");
    m.write(1, &[(4096, &[2; 4096])], false).unwrap();
    assert_eq!(m.used(), 8192);
}

/// A byte changed on the device under `checksum` is an error naming the
/// file and the block, never data; the blocks around it still read.
#[test]
fn a_corrupted_byte_under_checksum_is_an_error_not_data() {
    let dir = tempfile::tempdir().unwrap();
    let file = Arc::new(FileBackend::open(dir.path()).unwrap());
    let stack = Checksum::new(file.clone(), true);
    let data: Vec<u8> = (0..5 * 4096u32).map(|i| (i % 241) as u8).collect();
    stack.write(9, &[(0, &data)], false).unwrap();
    use std::os::unix::fs::FileExt;
    let local = std::fs::OpenOptions::new()
        .write(true)
        .open(file.path(9))
        .unwrap();
    local
        .write_all_at(&[data[2 * 4096 + 7] ^ 0x40], 2 * 4096 + 7)
        .unwrap();
    let mut buf = vec![0; 100];
    let err = stack.read(9, 2 * 4096, &mut buf).unwrap_err().to_string();
    assert!(
        err.contains("checksum mismatch")
            && err.contains("0000000000000009")
            && err.contains("offset 8192"),
        "{err}"
    );
    let mut all = vec![0; data.len()];
    assert!(
        stack.read(9, 0, &mut all).is_err(),
        "a read across it fails too"
    );
    let mut before = vec![0; 2 * 4096];
    stack.read(9, 0, &mut before).unwrap();
    assert_eq!(before, data[..2 * 4096]);
    let mut after = vec![0; 2 * 4096];
    stack.read(9, 3 * 4096, &mut after).unwrap();
    assert_eq!(after, data[3 * 4096..]);
    // Written again, the block is whole again.
    stack
        .write(9, &[(2 * 4096, &data[2 * 4096..3 * 4096])], false)
        .unwrap();
    stack.read(9, 0, &mut all).unwrap();
    assert_eq!(all, data);
}

/// A change that keeps some of a corrupted block's old bytes (a write or
/// a cut inside it) fails before it changes anything, naming the block,
/// and the block goes on failing reads: the corrupted byte is never summed
/// as if it had been written. Written whole, the block mends.
#[test]
fn a_change_inside_a_corrupted_block_fails_and_never_sums_the_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let file = Arc::new(FileBackend::open(dir.path()).unwrap());
    let stack = Checksum::new(file.clone(), true);
    let data: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 239) as u8).collect();
    stack.write(9, &[(0, &data)], false).unwrap();
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new()
        .write(true)
        .open(file.path(9))
        .unwrap()
        .write_all_at(&[data[4096 + 7] ^ 0x08], 4096 + 7)
        .unwrap();
    let fails_in_block_1 = |what: &str, err: labios_label::Error| {
        let err = err.to_string();
        assert!(
            err.contains("checksum mismatch") && err.contains("offset 4096"),
            "{what}: {err}"
        );
    };
    let still_corrupt = |what: &str| {
        let mut block = vec![0; 4096];
        let err = stack.read(9, 4096, &mut block).unwrap_err();
        fails_in_block_1(what, err);
        let mut around = vec![0; 4096];
        stack.read(9, 0, &mut around).unwrap();
        assert_eq!(around, data[..4096], "{what}: block 0");
        stack.read(9, 2 * 4096, &mut around).unwrap();
        assert_eq!(around, data[2 * 4096..], "{what}: block 2");
        assert_eq!(stack.len(9).unwrap(), Some(3 * 4096), "{what}: length");
    };
    let err = stack.write(9, &[(4096 + 100, b"new")], false).unwrap_err();
    fails_in_block_1("a write inside it", err);
    still_corrupt("after a write inside it");
    let err = stack
        .write(9, &[(0, &data[..4096 + 10])], false)
        .unwrap_err();
    fails_in_block_1("a write over its start", err);
    still_corrupt("after a write over its start");
    let err = stack
        .keep_only(9, 0, u64::MAX, &[(0, 4096 + 2000)])
        .unwrap_err();
    fails_in_block_1("a cut inside it", err);
    still_corrupt("after a cut inside it");
    let err = stack.keep_only(9, 4096 + 3000, 3 * 4096, &[]).unwrap_err();
    fails_in_block_1("a hole punched inside it", err);
    still_corrupt("after a hole punched inside it");
    // A write of the whole block keeps none of its old bytes: it goes
    // through, and the block reads as written again; so does a cut then.
    stack
        .write(9, &[(4096, &data[4096..2 * 4096])], false)
        .unwrap();
    stack
        .keep_only(9, 0, u64::MAX, &[(0, 4096 + 2000)])
        .unwrap();
    let mut all = vec![0; 4096 + 2000];
    stack.read(9, 0, &mut all).unwrap();
    assert_eq!(all, data[..4096 + 2000]);
}

/// Where the crash test's child writes, and on which stack; set only in
/// the child.
const CRASH_DIR: &str = "LABIOS_STACK_CRASH_DIR";
const CRASH_SPEC: &str = "LABIOS_STACK_CRASH_SPEC";
const CRASH_LABELS: u64 = 400;

fn crash_block(label: u64) -> Vec<u8> {
    (0..8192u64)
        .map(|i| ((i * 7 + label * 13) % 253) as u8)
        .collect()
}

/// The child of the crash test: writes 8 KiB labels without `sync`,
/// printing each one once the backend acknowledged it, until it is killed.
#[test]
fn crash_child() {
    let (Ok(dir), Ok(spec)) = (std::env::var(CRASH_DIR), std::env::var(CRASH_SPEC)) else {
        return;
    };
    let spec = Spec::try_from(spec.split(',').map(String::from).collect::<Vec<_>>()).unwrap();
    let stack = spec.build(std::path::Path::new(&dir), 1 << 30).unwrap();
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for label in 0..CRASH_LABELS {
        stack
            .write(label % 7, &[(label * 8192, &crash_block(label))], false)
            .unwrap();
        writeln!(out, "acked {label}").unwrap();
        out.flush().unwrap();
    }
    loop {
        std::thread::park();
    }
}

/// `kill -9` of a process after its writes were acknowledged loses none of
/// them on any durable stack, with or without `sync`: what the operating
/// system holds survives the process (a `tier`'s journal included).
#[test]
fn every_durable_stack_keeps_acknowledged_writes_through_kill_9() {
    use std::io::BufRead;
    for spec in every_stack().into_iter().filter(|s| s.durable()) {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CRASH_DIR, dir.path())
            .env(CRASH_SPEC, spec.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // Killed in the middle of its writes: after a third of them.
        let mut acked = 0;
        for line in lines.by_ref() {
            if let Some(n) = line.unwrap().strip_prefix("acked ") {
                acked = n.parse::<u64>().unwrap() + 1;
                if acked == CRASH_LABELS / 3 {
                    break;
                }
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(acked, CRASH_LABELS / 3, "{spec}: the child stopped early");
        let stack = spec.build(dir.path(), 1 << 30).unwrap();
        for label in 0..acked {
            let mut back = vec![0; 8192];
            stack
                .read(label % 7, label * 8192, &mut back)
                .unwrap_or_else(|e| panic!("{spec}: label {label}: {e}"));
            assert!(back == crash_block(label), "{spec}: label {label} differs");
        }
    }
}
