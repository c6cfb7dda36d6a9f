//! LABIOS server (article 3.3.3): workers and the worker manager.
//!
//! A [`Worker`] is a storage server serving its own label queue; the
//! [`WorkerManager`] commissions workers, keeps their statuses sorted by
//! score for the dispatcher and wakes suspended workers when load builds up.
//! In a distributed deployment the [`ClusterManager`] does the same for
//! worker processes, through the inventory and the queues, and re-dispatches
//! the tasks of workers that died; a [`Launcher`] starts and stops them.

pub mod cluster_manager;
pub mod launcher;
mod replay;
pub mod worker;
pub mod worker_manager;

pub use cluster_manager::{ClusterManager, ClusterStats};
pub use launcher::{LaunchedWorker, Launcher, LocalProcessLauncher};

pub use worker::{Worker, WorkerConfig, WorkerHandle, WorkerStats};
pub use worker_manager::{ManagerConfig, ScoreBuckets, WorkerManager};
