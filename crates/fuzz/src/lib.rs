//! Fuzzing of every LABIOS decoder of untrusted input (issue 11) on the
//! stable toolchain: a mutation engine ([`engine`], [`mutate`]) that starts
//! from valid encodings each target builds itself, catches panics, watches
//! for hangs and, through a counting global allocator ([`alloc`]), refuses
//! unbounded allocations. Runs are deterministic per seed, so a failure
//! replays.
//!
//! `cargo test -p labios-fuzz` runs a short smoke of each target; the
//! `labios-fuzz` binary runs long campaigns (see its `--help`).

pub mod alloc;
pub mod engine;
pub mod mutate;
pub mod targets;

pub use engine::{run, Failure, Fault, Report, Target};
pub use targets::{find, TARGETS};
