//! The layers every stack has (`checksum`, and the codecs `zstd` and
//! `lz4`), named or passive: a stack changed under its data, any number of
//! times and in any order, reads every byte as the data was written.

use labios_stack::backends::file::FileBackend;
use labios_stack::backends::kv::KvBackend;
use labios_stack::backends::memory::MemoryBackend;
use labios_stack::conformance::every_stack;
use labios_stack::{Backend, Spec};
use std::collections::BTreeMap;
use std::sync::Arc;

const UNIT: u64 = 64 * 1024;

fn spec(names: &[&str]) -> Spec {
    Spec::try_from(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap()
}

/// Bytes a codec shrinks (`packed`) or does not.
fn bytes(rng: &mut fastrand::Rng, len: usize, packed: bool) -> Vec<u8> {
    if packed {
        let seed = rng.u8(..);
        (0..len)
            .map(|i| seed.wrapping_add((i / 7 % 13) as u8))
            .collect()
    } else {
        (0..len).map(|_| rng.u8(..)).collect()
    }
}

/// An offset or a length near the boundaries the layers care about.
fn near_boundary(rng: &mut fastrand::Rng, most: u64) -> u64 {
    let base = [4096, UNIT, 3 * UNIT, 5 * UNIT][rng.usize(..4)] * rng.u64(0..3);
    let v = match rng.u8(..4) {
        0 => base.saturating_sub(1),
        1 => base + 1,
        2 => base,
        _ => rng.u64(..most),
    };
    v.min(most)
}

/// Random writes, reclamations, cuts, removals and reads on `backend`
/// through stacks of `names` changed every few steps, against a model.
fn churn(backend: Arc<dyn Backend>, name: &str, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let tops: Vec<Vec<String>> = every_stack()
        .into_iter()
        .filter(|s| s.backend() == name)
        .map(Vec::<String>::from)
        .collect();
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for step in 0..24 {
        let names = &tops[rng.usize(..tops.len())];
        let stack = Spec::try_from(names.clone())
            .unwrap()
            .over(backend.clone())
            .unwrap();
        let at = format!("seed {seed}, step {step}, stack {names:?}");
        for op in 0..12 {
            let file = rng.u64(1..4);
            let at = format!("{at}, op {op}, file {file}");
            match rng.u8(..10) {
                0..=4 => {
                    let offset = near_boundary(&mut rng, 6 * UNIT);
                    let len = near_boundary(&mut rng, 3 * UNIT).max(1) as usize;
                    let packed = rng.bool();
                    let data = bytes(&mut rng, len, packed);
                    eprintln!("{at}: write {offset}+{len} packed {packed}");
                    stack
                        .write(file, &[(offset, &data)], rng.u8(..8) == 0)
                        .unwrap();
                    let m = model.entry(file).or_default();
                    let end = offset as usize + len;
                    if m.len() < end {
                        m.resize(end, 0);
                    }
                    m[offset as usize..end].copy_from_slice(&data);
                }
                5..=7 => {
                    let start = near_boundary(&mut rng, 6 * UNIT);
                    let end = if rng.bool() {
                        u64::MAX
                    } else {
                        start + near_boundary(&mut rng, 3 * UNIT)
                    };
                    let mut held = Vec::new();
                    let mut from = 0;
                    while rng.u8(..3) != 0 {
                        let s = from + near_boundary(&mut rng, 2 * UNIT);
                        let e = s + near_boundary(&mut rng, UNIT).max(1);
                        held.push((s, e));
                        from = e + 1;
                    }
                    eprintln!("{at}: keep_only {start}..{end} {held:?}");
                    stack.keep_only(file, start, end, &held).unwrap();
                    let Some(m) = model.get_mut(&file) else {
                        continue;
                    };
                    if end == u64::MAX && held.is_empty() {
                        model.remove(&file);
                        continue;
                    }
                    let kept = |i: u64| held.iter().any(|&(s, e)| (s..e).contains(&i));
                    for i in start..end.min(m.len() as u64) {
                        if !kept(i) {
                            m[i as usize] = 0;
                        }
                    }
                    if let (true, Some(&(_, last))) = (end == u64::MAX, held.last()) {
                        m.truncate(last.min(m.len() as u64) as usize);
                    }
                }
                8 => {
                    stack.remove(file).unwrap();
                    model.remove(&file);
                }
                _ => stack.flush(file).unwrap(),
            }
            for (&f, m) in &model {
                assert_eq!(stack.len(f).unwrap(), Some(m.len() as u64), "{at}: length");
                let mut back = vec![0; m.len()];
                stack
                    .read(f, 0, &mut back)
                    .unwrap_or_else(|e| panic!("{at}: file {f}: {e}"));
                if let Some(i) = back.iter().zip(m).position(|(a, b)| a != b) {
                    panic!("{at}: file {f} byte {i} reads {} not {}", back[i], m[i]);
                }
            }
        }
    }
}

/// Seeds: `LABIOS_STACK_SEED` replays one; otherwise a few fixed ones.
fn seeds() -> Vec<u64> {
    match std::env::var("LABIOS_STACK_SEED") {
        Ok(s) => vec![s.parse().expect("LABIOS_STACK_SEED is a number")],
        Err(_) => (1..=3).collect(),
    }
}

#[test]
fn a_stack_changed_under_its_data_reads_every_byte() {
    for seed in seeds() {
        let dir = tempfile::tempdir().unwrap();
        churn(
            Arc::new(FileBackend::open(dir.path()).unwrap()),
            "file",
            seed,
        );
        let dir = tempfile::tempdir().unwrap();
        churn(
            Arc::new(KvBackend::open(dir.path(), 1 << 30).unwrap()),
            "kv",
            seed,
        );
        churn(Arc::new(MemoryBackend::new(1 << 30)), "memory", seed);
    }
}

/// A codec stores less; the data stays readable by a stack that names no
/// codec; a changed payload under `checksum` is an error, never data.
#[test]
fn a_codec_stores_less_and_its_units_stay_readable_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = Arc::new(FileBackend::open(dir.path()).unwrap());
    let data: Vec<u8> = (0..1 << 20).map(|i| (i / 64 % 251) as u8).collect();
    for codec in ["zstd", "lz4"] {
        let stack = spec(&["checksum", codec, "file"])
            .over(file.clone())
            .unwrap();
        stack.write(9, &[(0, &data)], true).unwrap();
        assert!(
            file.used() < 300 << 10,
            "{codec}: 1 MiB takes {} bytes",
            file.used()
        );
        let plain = spec(&["file"]).over(file.clone()).unwrap();
        let mut back = vec![0; data.len()];
        plain.read(9, 0, &mut back).unwrap();
        assert!(back == data, "{codec}: a stack without codec reads it");
        plain.remove(9).unwrap();
    }
    let stack = spec(&["checksum", "zstd", "file"])
        .over(file.clone())
        .unwrap();
    stack.write(9, &[(0, &data)], false).unwrap();
    // The second slot of file 9 holds its compressed units.
    let slot = file.path(9 | 1 << 61);
    let mut stored = std::fs::read(&slot).unwrap();
    let at = 3 * UNIT as usize + 40;
    stored[at] ^= 0x5A;
    std::fs::write(&slot, &stored).unwrap();
    let mut back = vec![0; UNIT as usize];
    let err = stack.read(9, 3 * UNIT, &mut back).unwrap_err().to_string();
    assert!(
        err.contains("file 0000000000000009")
            && err.contains("at offset")
            && (err.contains("checksum mismatch") || err.contains("does not decode")),
        "{err}"
    );
    stack.read(9, 2 * UNIT, &mut back).unwrap();
    assert!(back == data[2 * UNIT as usize..3 * UNIT as usize]);
}

/// Ten changes of a running stack while four threads write and read their
/// files: no call fails, every read is what was written, on each backend.
#[test]
fn a_live_change_under_load_fails_no_call_and_keeps_every_byte() {
    use labios_stack::live::Live;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    for backend in ["file", "kv", "memory"] {
        let dir = tempfile::tempdir().unwrap();
        let live = Live::open(
            &labios_stack::Place {
                dir: dir.path().to_path_buf(),
                stack: spec(&[backend]),
                faults: Default::default(),
            },
            1 << 30,
        )
        .unwrap();
        let (done, progress) = (AtomicBool::new(false), AtomicU64::new(0));
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (live, done, progress) = (&live, &done, &progress);
                s.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(t);
                    let mut model = Vec::new();
                    let mut rounds = 0;
                    while !done.load(Ordering::Acquire) || rounds < 20 {
                        rounds += 1;
                        let offset = near_boundary(&mut rng, 4 * UNIT);
                        let len = near_boundary(&mut rng, 2 * UNIT).max(1) as usize;
                        let packed = rng.bool();
                        let data = bytes(&mut rng, len, packed);
                        live.write(t, &[(offset, &data)], false).unwrap();
                        let end = offset as usize + len;
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[offset as usize..end].copy_from_slice(&data);
                        let mut back = vec![0; model.len()];
                        live.read(t, 0, &mut back).unwrap();
                        assert!(back == model, "{backend}: thread {t} round {rounds}");
                        progress.fetch_add(1, Ordering::AcqRel);
                    }
                });
            }
            let stacks = [
                &["checksum", "zstd", backend][..],
                &[backend][..],
                &["lz4", backend][..],
                &["checksum", backend][..],
            ];
            for i in 0..10 {
                // Each change comes after eight more writes and reads.
                while progress.load(Ordering::Acquire) < 8 * (i as u64 + 1) {
                    std::thread::yield_now();
                }
                live.set(spec(stacks[i % stacks.len()])).unwrap();
                assert_eq!(live.spec(), spec(stacks[i % stacks.len()]));
            }
            done.store(true, Ordering::Release);
        });
        let other = if backend == "kv" { "file" } else { "kv" };
        let err = live.set(spec(&[other])).unwrap_err().to_string();
        assert!(err.contains("not its backend"), "{err}");
    }
}
