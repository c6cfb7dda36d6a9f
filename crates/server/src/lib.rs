//! LABIOS server (article 3.3.3): workers and the worker manager.
//!
//! A [`Worker`] is a storage server serving its own label queue; the
//! [`WorkerManager`] commissions workers, keeps their statuses sorted by
//! score for the dispatcher and wakes suspended workers when load builds up.

pub mod worker;
pub mod worker_manager;

pub use worker::{Worker, WorkerConfig, WorkerHandle, WorkerStats};
pub use worker_manager::{ManagerConfig, ScoreBuckets, WorkerManager};
