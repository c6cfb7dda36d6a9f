//! LABIOS core (article 3.3.2): the administrator, which registers
//! applications and checks their credentials, and the label dispatcher,
//! which turns queued labels into tasks on workers.

pub mod administrator;
pub mod dispatcher;

pub use administrator::Administrator;
pub use dispatcher::{
    bench_dispatch, shuffle, BenchReport, DispatchCounts, Dispatcher, DispatcherConfig,
    DispatcherStats, InventoryDirectory, Plan, Policy, Routed, Scheduler,
};
