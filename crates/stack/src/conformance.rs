//! One suite every stack the registry builds must pass: the same ranges,
//! overwrites, holes, short reads, space reclamation and removal, and what
//! a restart keeps. Public so that the worker's tests can run it on the
//! stacks they configure.

use crate::{Backend, Spec, BACKENDS, LAYERS};
use std::path::Path;

/// Each backend the registry knows (but `external`) under every combination of layers it
/// may name: none, or one name of each layer, in the registry's order;
/// then a `tier` (which passes every call on to the same layers, so that
/// one stack per backend tries it) over each backend, small enough on
/// some that writes pass its bound; and `metrics` and the `scheduler` in
/// a few stacks.
pub fn every_stack() -> Vec<Spec> {
    let mut tops: Vec<Vec<String>> = vec![Vec::new()];
    // The tier and the scheduler hold calls back, not bytes: they join a
    // few stacks below rather than doubling every combination.
    let product = LAYERS
        .iter()
        .rev()
        .filter(|(n, _)| n != &["tier"] && n != &["scheduler"]);
    for (names, _) in product {
        tops = tops
            .iter()
            .flat_map(|below| {
                std::iter::once(below.clone()).chain(names.iter().map(move |n| {
                    let mut with = vec![n.to_string()];
                    with.extend(below.iter().cloned());
                    with
                }))
            })
            .collect();
    }
    // An external backend needs a worker's mounts: labios-bridge runs the
    // suite over it (tests/external_backend.rs).
    BACKENDS
        .iter()
        .filter(|(backend, _)| *backend != crate::EXTERNAL)
        .flat_map(|(backend, _)| {
            tops.iter().map(move |top| {
                let mut names = top.clone();
                names.push(backend.to_string());
                Spec::try_from(names).expect("known modules in the registry's order")
            })
        })
        .chain(
            [
                "tier,file",
                "tier:1MiB,checksum,lz4,kv",
                "metrics,tier:64KiB,cache:1MiB,memory",
                "metrics,checksum,zstd,file",
                "checksum,lz4,scheduler:small:2,file",
                "tier:1MiB,cache:1MiB,scheduler,kv",
            ]
            .map(|s| {
                Spec::try_from(s.split(',').map(String::from).collect::<Vec<_>>())
                    .expect("known modules in the registry's order")
            }),
        )
        .collect()
}

fn read(b: &dyn Backend, file: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    b.read(file, offset, &mut buf)
        .unwrap_or_else(|e| panic!("read of file {file} {offset}+{len}: {e}"));
    buf
}

/// The ranges of files 7 and 8 the reclamation checks keep.
const HELD: [(u64, u64); 2] = [(64 << 10, 128 << 10), (512 << 10, 576 << 10)];

/// Bytes no codec shrinks (xorshift), so that space checks see them all.
fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(seed);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Whether file `file` reads as `data` kept where [`HELD`] says and from
/// 768 KiB on, zeros elsewhere.
fn kept_as_held(b: &dyn Backend, file: u64, data: &[u8]) {
    let back = read(b, file, 0, data.len());
    for (i, (&got, &was)) in back.iter().zip(data).enumerate() {
        let kept = HELD.iter().any(|&(s, e)| (s..e).contains(&(i as u64))) || i >= 768 << 10;
        assert_eq!(got, if kept { was } else { 0 }, "file {file} byte {i}");
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

/// The behaviour of [`Backend`]'s methods, on a fresh backend.
pub fn backend_suite(b: &dyn Backend) {
    assert_eq!(b.used(), 0, "a fresh backend holds nothing");
    // An overwrite changes its range only.
    let original = pattern(10_000, 1);
    b.write(1, &[(0, &original)], false).unwrap();
    b.write(1, &[(0, &[0xEE; 100])], false).unwrap();
    let back = read(b, 1, 0, original.len());
    assert!(back[..100].iter().all(|&x| x == 0xEE));
    assert_eq!(back[100..], original[100..]);
    // Pieces land at their offsets; holes read as zeros and take nothing.
    b.write(2, &[(1 << 20, b"tail"), (3, b"head")], true)
        .unwrap();
    assert_eq!(read(b, 2, 0, 8), b"\0\0\0head\0");
    assert_eq!(read(b, 2, 1 << 20, 4), b"tail");
    assert_eq!(b.len(2).unwrap(), Some((1 << 20) + 4));
    assert_eq!(b.len(404).unwrap(), None);
    assert!(b.used() < 1 << 20, "sparse: {} bytes used", b.used());
    // Unaligned pieces across block boundaries, and one read across them.
    let long = pattern(3 * 4096 + 17, 2);
    b.write(3, &[(4093, &long)], false).unwrap();
    assert_eq!(read(b, 3, 4093, long.len()), long);
    assert_eq!(read(b, 3, 0, 4093), vec![0; 4093]);
    // Past the end, or a file never written: an error naming the cause.
    let mut buf = [0u8; 20];
    let err = b.read(2, (1 << 20) - 4, &mut buf).unwrap_err().to_string();
    assert!(err.contains("shorter"), "{err}");
    let err = b.read(404, 0, &mut buf).unwrap_err().to_string();
    assert!(err.contains("missing"), "{err}");
    // Space goes back with what the inventory no longer gives (bytes no
    // codec shrinks, so that the space is the bytes').
    let data = noise(1 << 20, 3);
    b.write(7, &[(0, &data)], false).unwrap();
    let before = b.used();
    b.keep_only(7, 0, 768 << 10, &HELD).unwrap();
    assert!(
        b.used() <= before - (600 << 10),
        "{} of {before} still used",
        b.used()
    );
    kept_as_held(b, 7, &data);
    // The same with bytes a codec shrinks, then with unaligned ranges.
    let data = pattern(1 << 20, 5);
    b.write(8, &[(0, &data)], false).unwrap();
    b.keep_only(8, 0, 768 << 10, &HELD).unwrap();
    kept_as_held(b, 8, &data);
    b.keep_only(8, 100, 70_000, &[(200, 300), (66_000, 66_001)])
        .unwrap();
    let back = read(b, 8, 0, 80_000);
    for (i, (&got, &was)) in back.iter().zip(&data).enumerate() {
        let before = HELD.iter().any(|&(s, e)| (s..e).contains(&(i as u64)));
        let freed = (100..70_000).contains(&i) && !(200..300).contains(&i) && i != 66_000;
        assert_eq!(
            got,
            if before && !freed { was } else { 0 },
            "file 8 byte {i}"
        );
    }
    // A cut inside a unit a codec stored.
    b.keep_only(8, 0, u64::MAX, &[(66_000, 66_001), (512 << 10, 530_000)])
        .unwrap();
    assert_eq!(b.len(8).unwrap(), Some(530_000));
    assert_eq!(read(b, 8, 529_990, 10), data[529_990..530_000]);
    assert_eq!(read(b, 8, 66_000, 1), data[66_000..66_001]);
    assert!(b.read(8, 529_990, &mut buf).is_err(), "cut at 530,000");
    b.remove(8).unwrap();
    // The whole file: it ends with its last held byte, then goes.
    let data = noise(1 << 20, 3);
    b.keep_only(7, 0, u64::MAX, &HELD).unwrap();
    assert_eq!(
        read(b, 7, 0, 576 << 10)[512 << 10..],
        data[512 << 10..576 << 10]
    );
    assert!(b.read(7, 576 << 10, &mut buf).is_err(), "cut after 576 KiB");
    let mut files = b.files().unwrap();
    files.sort();
    assert_eq!(files, [1, 2, 3, 7]);
    b.keep_only(7, 0, u64::MAX, &[]).unwrap();
    assert!(!b.holds(7));
    // Removal, twice, and flushes of held and unknown files.
    b.flush(1).unwrap();
    b.flush(404).unwrap();
    for f in [1, 1, 2, 3] {
        b.remove(f).unwrap();
    }
    assert!(b.files().unwrap().is_empty());
    // Settled, a stack keeps nothing of its own either (a tier's journal).
    b.settle().unwrap();
    assert_eq!(b.used(), 0, "everything removed");
}

/// What a restart keeps: everything written on a durable stack, nothing on
/// one in memory (which must then hold no file rather than wrong bytes).
pub fn restart_suite(spec: &Spec, dir: &Path) {
    let data = pattern(64 << 10, 4);
    let b = spec.build(dir, 1 << 30).unwrap();
    b.write(5, &[(0, &data)], true).unwrap();
    b.flush(5).unwrap();
    b.settle().unwrap();
    let used = b.used();
    drop(b);
    let b = spec.build(dir, 1 << 30).unwrap();
    if spec.durable() {
        assert_eq!(b.used(), used, "{spec}");
        assert_eq!(read(b.as_ref(), 5, 0, data.len()), data, "{spec}");
    } else {
        assert_eq!((b.used(), b.files().unwrap()), (0, vec![]), "{spec}");
    }
}
