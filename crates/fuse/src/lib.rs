//! LABIOS as a file system through FUSE: `labios mount MOUNTPOINT`.
//!
//! `labios run` intercepts a program's calls in the C library, which is
//! fast but misses what does not go through it: static binaries, raw system
//! calls, io_uring, libaio, `mmap`. Through the kernel every program works
//! unchanged (the DAOS model: `dfuse` for every program, an interception
//! library for speed). Each operation becomes the same client calls
//! `labios run` makes: writes are labels, `fsync` waits for them and makes
//! them durable, extended attributes are the inventory's.

mod fs;
mod locks;
mod nodes;

pub use fs::{session, LabiosFs, Settings};
