//! A short run of every fuzz target, so that CI (`cargo test --workspace`)
//! keeps each decoder's target working and catches regressions the seeds
//! and their nearest mutations reach. Long runs are `labios-fuzz`'s job.

use labios_fuzz::{find, run};

/// The seed of the smoke runs: fixed, so that a failure in CI replays.
const SEED: u64 = 11;

fn smoke(name: &str) {
    let target = find(name).expect("the target exists");
    let report = run(target, SEED, 0, target.smoke_inputs);
    assert_eq!(report.inputs, target.smoke_inputs, "{report:?}");
    assert!(
        report.failures.is_empty(),
        "{name}: {} failures (details on stderr): {:?}",
        report.failures.len(),
        report.failures
    );
}

#[test]
fn label() {
    smoke("label");
}

#[test]
fn frames() {
    smoke("frames");
}

#[test]
fn pipeline() {
    smoke("pipeline");
}

#[test]
fn functions() {
    smoke("functions");
}

#[test]
fn config() {
    smoke("config");
}

#[test]
fn wasm() {
    smoke("wasm");
}

#[test]
fn bridge() {
    smoke("bridge");
}

#[test]
fn gateway() {
    smoke("gateway");
}
