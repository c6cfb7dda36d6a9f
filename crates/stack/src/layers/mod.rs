//! Layers a stack puts over its backend, one module each; each wraps any
//! [`crate::Backend`] and is one itself.

pub mod cache;
pub mod checksum;
pub mod compress;
pub mod metrics;
pub mod scheduler;
pub mod tier;
