//! The `metrics` layer: each module a stack names gets a meter counting
//! its calls, bytes and time (including the layers below), a live change
//! starts fresh meters, and a stack that does not name it has none; the
//! label anatomy's storage phase is timed by every stack.

use labios_label::anatomy::{self, Phase};
use labios_label::LayerStats;
use labios_stack::live::Live;
use labios_stack::{Backend, Place, Spec};

fn spec(s: &str) -> Spec {
    Spec::try_from(s.split(',').map(String::from).collect::<Vec<_>>()).unwrap()
}

fn named(layers: &[LayerStats]) -> Vec<&str> {
    layers.iter().map(|l| l.name.as_str()).collect()
}

#[test]
fn every_named_module_counts_its_calls_bytes_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let stack = spec("metrics,checksum,cache:4MiB,zstd,file");
    let (b, meters) = stack
        .over_metered(stack.open(dir.path(), 1 << 30).unwrap())
        .unwrap();
    // Compressible, so the codec writes fewer bytes than it is given.
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i / 4096) as u8).collect();
    b.write(3, &[(0, &data)], false).unwrap();
    let mut back = vec![0; data.len()];
    b.read(3, 0, &mut back).unwrap();
    assert!(back == data);
    // A second read of the same bytes is served by the cache.
    b.read(3, 0, &mut back).unwrap();
    b.flush(3).unwrap();

    let layers = meters.stats();
    assert_eq!(
        named(&layers),
        ["checksum", "cache:4MiB", "zstd", "file"],
        "{layers:?}"
    );
    let [checksum, cache, zstd, file] = &layers[..] else {
        unreachable!()
    };
    assert_eq!((checksum.writes, checksum.written), (1, 1 << 20));
    assert_eq!((checksum.reads, checksum.read), (2, 2 << 20));
    assert_eq!(checksum.others, 1, "the flush");
    // Below the top, the checksum's sums travel with the data. The cache
    // passes the first read down, not the second.
    assert!(cache.read >= 2 << 20, "{layers:?}");
    assert!(zstd.read < cache.read - (1 << 20) + 1, "{layers:?}");
    assert!(zstd.written >= 1 << 20, "the codec is given every byte");
    assert!(
        file.written < zstd.written / 4,
        "the device gets the compressed units: {layers:?}"
    );
    assert!(file.writes >= 1 && file.others >= 1, "{layers:?}");
    // Each meter's time includes everything below it.
    for pair in layers.windows(2) {
        assert!(pair[0].nanos >= pair[1].nanos, "{layers:?}");
    }
    assert!(file.nanos > 0);
}

#[test]
fn a_failed_call_is_counted_but_moves_no_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let stack = spec("metrics,memory");
    let (b, meters) = stack
        .over_metered(stack.open(dir.path(), 4096).unwrap())
        .unwrap();
    assert!(
        b.write(1, &[(0, &[7; 8192])], false).is_err(),
        "over capacity"
    );
    let mut buf = [0; 16];
    assert!(b.read(9, 0, &mut buf).is_err(), "a file never written");
    let [memory] = &meters.stats()[..] else {
        panic!("one meter")
    };
    assert_eq!(
        (memory.writes, memory.written, memory.reads, memory.read),
        (1, 0, 1, 0)
    );
}

#[test]
fn a_stack_not_naming_metrics_has_no_meters_and_a_live_change_starts_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let live = Live::open(
        &Place {
            stack: spec("checksum,file"),
            ..Place::from(dir.path().to_path_buf())
        },
        1 << 30,
    )
    .unwrap();
    live.write(1, &[(0, &[1; 4096])], false).unwrap();
    assert!(live.layers().is_empty());

    live.set(spec("metrics,checksum,file")).unwrap();
    assert_eq!(named(&live.layers()), ["checksum", "file"]);
    assert_eq!(live.layers()[0].writes, 0, "counted from the change");
    live.write(1, &[(4096, &[2; 4096])], false).unwrap();
    assert_eq!(live.layers()[0].written, 4096);

    live.set(spec("metrics,lz4,file")).unwrap();
    assert_eq!(named(&live.layers()), ["lz4", "file"]);
    assert_eq!(live.layers()[0].written, 0);
    let mut back = vec![0; 8192];
    live.read(1, 0, &mut back).unwrap();
    assert_eq!(&back[..4096], &[1; 4096]);
    assert_eq!(&back[4096..], &[2; 4096]);

    live.set(spec("file")).unwrap();
    assert!(live.layers().is_empty());
}

/// The worker's storage phase of `labios bench anatomy` is timed by the
/// stack itself, with or without `metrics`.
#[test]
fn every_stack_times_the_anatomys_storage_phase() {
    let storage = || {
        anatomy::totals()
            .into_iter()
            .find(|(p, _)| *p == Phase::WorkerStorage)
            .map(|(_, n)| n)
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let b = spec("file").build(dir.path(), 1 << 30).unwrap();
    // The other tests here run beside this one and may add to the
    // process-wide counters while they are on: they only ever grow.
    anatomy::enable(true);
    b.write(1, &[(0, &[5; 65536])], true).unwrap();
    let after_write = storage();
    assert!(after_write > 0);
    let mut back = vec![0; 65536];
    b.read(1, 0, &mut back).unwrap();
    assert!(storage() > after_write);
    anatomy::enable(false);
}
