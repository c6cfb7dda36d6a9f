//! The `cache` layer: hits spare the stack below, every change is seen by
//! the next read, and the bytes kept stay under the bound.

use labios_stack::backends::memory::MemoryBackend;
use labios_stack::layers::cache::{Cache, BLOCK};
use labios_stack::Backend;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod common;
use common::Stopping;

fn read(stack: &dyn Backend, file: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    stack.read(file, offset, &mut buf).unwrap();
    buf
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

#[test]
fn hits_spare_the_stack_below_and_every_change_is_read_after_it() {
    let device = Stopping::over(Arc::new(MemoryBackend::new(1 << 30)));
    let cache = Cache::new(device.clone(), 8 << 20);
    let below = || device.reads.load(Ordering::SeqCst);
    let mut model = pattern(300_000, 1);
    cache.write(1, &[(0, &model)], false).unwrap();

    assert_eq!(read(&cache, 1, 1000, 200_000), model[1000..201_000]);
    let after_miss = below();
    assert!(after_miss > 0, "the first read goes below");
    assert_eq!(read(&cache, 1, 5000, 100_000), model[5000..105_000]);
    assert_eq!(read(&cache, 1, 0, 10), model[..10]);
    assert_eq!(below(), after_miss, "reads of kept blocks do not go below");

    // An overwrite across two blocks: the next read sees it.
    let new = pattern(20_000, 9);
    cache.write(1, &[(BLOCK - 10_000, &new)], false).unwrap();
    model[(BLOCK - 10_000) as usize..][..20_000].copy_from_slice(&new);
    assert_eq!(read(&cache, 1, 0, 300_000), model);

    // The last block was kept short; a write past the end grows the file
    // with a hole, which reads as zeros through the cache.
    cache.write(1, &[(400_000, &[7; 10])], false).unwrap();
    model.resize(400_000, 0);
    model.extend_from_slice(&[7; 10]);
    assert_eq!(read(&cache, 1, 0, 400_010), model);

    // Reclamation and a cut: freed bytes read as zeros, a read past the
    // new end is the backend's error, as without the cache.
    cache
        .keep_only(1, 0, u64::MAX, &[(0, 70_000), (100_000, 150_000)])
        .unwrap();
    model.truncate(150_000);
    model[70_000..100_000].fill(0);
    assert_eq!(read(&cache, 1, 0, 150_000), model);
    let mut past = vec![0; 10];
    assert!(
        cache.read(1, 149_995, &mut past).is_err(),
        "read past the cut"
    );

    cache.remove(1).unwrap();
    assert!(
        cache.read(1, 0, &mut past).is_err(),
        "read of a removed file"
    );
    assert_eq!(cache.len(1).unwrap(), None);
}

#[test]
fn the_bytes_kept_stay_under_the_bound() {
    let device = Stopping::over(Arc::new(MemoryBackend::new(1 << 30)));
    let cache = Cache::new(device.clone(), 1 << 20);
    let data = pattern(4 << 20, 3);
    cache.write(2, &[(0, &data)], false).unwrap();
    for round in 0..2 {
        for at in (0..4 << 20).step_by(BLOCK as usize) {
            assert_eq!(
                read(&cache, 2, at, BLOCK as usize),
                data[at as usize..][..BLOCK as usize]
            );
        }
        assert!(
            cache.kept() <= 1 << 20,
            "round {round}: {} bytes kept",
            cache.kept()
        );
    }
    // 4 MiB read twice through a 1 MiB cache: most of the second round
    // missed, as it must.
    assert!(device.reads.load(Ordering::SeqCst) > 64 + 32);
}

#[test]
fn a_stack_naming_the_cache_builds_one_and_one_not_naming_it_has_none() {
    use labios_stack::Spec;
    let spec = |names: &[&str]| {
        Spec::try_from(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let named = spec(&["checksum", "cache:2MiB", "zstd", "kv"])
        .build(dir.path(), 1 << 30)
        .unwrap();
    assert!(
        format!("{named:?}").contains("Cache { bytes: 2097152"),
        "{named:?}"
    );
    drop(named);
    let bare = spec(&["cache", "file"]).build(dir.path(), 1 << 30).unwrap();
    assert!(
        format!("{bare:?}").contains("Cache { bytes: 67108864"),
        "{bare:?}"
    );
    let unnamed = spec(&["checksum", "file"])
        .build(dir.path(), 1 << 30)
        .unwrap();
    assert!(
        !format!("{unnamed:?}").contains("Cache { bytes"),
        "{unnamed:?}"
    );
}
