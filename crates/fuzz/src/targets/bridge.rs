//! What the IRIS mappings read back from storage other processes (or a
//! crash) may have written: the index log of the container mappings
//! (replayed by `Containers::open`), the names of write-optimized log
//! objects (`write_optimized::parse`) and files' metadata objects
//! (`Meta::decode`). The first byte of an input picks the decoder: `i`
//! (index), `n` (name), `m` (metadata), other bytes by their value mod 3.

use crate::engine::Target;
use labios_bridge::containers::Containers;
use labios_bridge::virtual_file::Meta;
use labios_bridge::{write_optimized, ContainerOptions, ObjectMapper, ObjectMapping};
use std::cell::RefCell;
use std::path::Path;
use std::time::Duration;

pub static TARGET: Target = Target {
    name: "bridge",
    about:
        "IRIS: container index replay (Containers::open), write-optimized log names, Meta::decode",
    run,
    seeds,
    dictionary: &[
        b"C ",
        b"P ",
        b"D ",
        b"\n",
        b"\\",
        b"\\n",
        b"labios-file 1\n",
        b"mapping ",
        b"size ",
        b"mtime_ns ",
        b"seq ",
        b"bucket ",
        b"levels ",
        b".labios/log/",
        b"-",
    ],
    max_len: 4096,
    default_inputs: 10_000_000,
    smoke_inputs: 20_000,
    cost: 1,
    hang: Duration::from_secs(2),
};

/// Bytes of each container file present when the index is replayed, so
/// that index lines pointing into them are valid.
const CONTAINER_BYTES: usize = 64;

fn seeds() -> Vec<Vec<u8>> {
    let meta = Meta {
        mapping: "read-optimized".into(),
        size: 3 << 20,
        mtime_ns: 1_700_000_000_123_456_789,
        seq: 12,
        bucket: 512 << 10,
        levels: 4,
    };
    [
        "iC 0 0\nP 0 0 10 photos/a.jpg\nP 0 10 20 back\\\\slash\nD photos/a.jpg\n".to_string(),
        "iC 0 0\nC 1 1\nP 1 0 64 new\\nline\nP 0 32 32 a b c\nC 0 2\n".to_string(),
        "iC 3 1\nP 1 60 4 tail\nD missing\nP 1 0".to_string(),
        "nf/.labios/log/00000000000000000007-4096-10-ab12cd34".to_string(),
        "n00000000000000000001-0-1048576-0f0f0f0f".to_string(),
        format!("m{}", meta.encode()),
        format!(
            "m{}",
            Meta {
                mapping: "write-optimized".into(),
                bucket: 0,
                levels: 0,
                ..meta
            }
            .encode()
        ),
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn run(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => index(rest),
        1 => meta(rest),
        _ => name(rest),
    }
}

thread_local! {
    /// A private directory per fuzzing thread, for the index and containers.
    static DIR: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

/// Replays `log` as the index of a store whose containers 0 and 1 exist,
/// then lists what it holds.
fn index(log: &[u8]) {
    DIR.with(|dir| {
        let mut dir = dir.borrow_mut();
        let dir = dir.get_or_insert_with(|| tempfile::tempdir().expect("a temporary directory"));
        let path = dir.path();
        let containers = path.join("containers");
        std::fs::create_dir_all(&containers).expect("creating the container directory");
        for id in 0..2 {
            std::fs::write(containers.join(format!("{id}.dat")), [7; CONTAINER_BYTES])
                .expect("writing a container");
        }
        std::fs::write(path.join("index.log"), log).expect("writing the index");
        let options = ContainerOptions {
            containers: 4,
            sync: false,
            compact_every: None,
            ..ContainerOptions::default()
        };
        if let Ok(store) = Containers::open(path, ObjectMapping::HashedNToM, &options) {
            let listed = futures::executor::block_on(store.list("")).expect("listing the index");
            for object in listed {
                assert!(
                    object.size <= CONTAINER_BYTES as u64,
                    "object {:?} of {} bytes in containers of {CONTAINER_BYTES}",
                    object.key,
                    object.size
                );
            }
        }
        clear(path);
    });
}

fn clear(path: &Path) {
    let containers = path.join("containers");
    for entry in std::fs::read_dir(&containers).expect("listing the containers") {
        std::fs::remove_file(entry.expect("a directory entry").path())
            .expect("removing a container");
    }
    std::fs::remove_file(path.join("index.log")).expect("removing the index");
}

/// A log object name: an accepted one describes an extent the layout can
/// address (it computes `offset + len` for every extent it lists).
fn name(name: &[u8]) {
    let name = String::from_utf8_lossy(name);
    if let Some((_, offset, len)) = write_optimized::parse(&name) {
        assert!(
            offset.checked_add(len).is_some(),
            "log object {name:?} ends past the largest offset"
        );
    }
}

/// A metadata object: what decodes must encode to itself.
fn meta(text: &[u8]) {
    if let Ok(meta) = Meta::decode("/fuzz", text) {
        assert_eq!(
            Meta::decode("/fuzz", meta.encode().as_bytes()).as_ref(),
            Ok(&meta),
            "metadata {:?} does not survive encoding",
            String::from_utf8_lossy(text)
        );
    }
}
