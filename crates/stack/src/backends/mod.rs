//! The backends a worker's stack ends in, one module each.

pub mod file;
pub mod memory;
