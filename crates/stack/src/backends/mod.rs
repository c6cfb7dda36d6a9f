//! The backends a worker's stack ends in, one module each.

pub mod blocks;
pub mod file;
pub mod kv;
pub mod memory;
