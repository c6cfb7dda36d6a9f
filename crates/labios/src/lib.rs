//! LABIOS runtime and tools: configuration, the embedded runtime, the local
//! endpoint (`labios serve`), the CLI commands, the demo and the benchmarks.

pub mod bench;
pub mod cli;
pub mod config;
pub mod cp;
pub mod demo;
pub mod mount;
pub mod processes;
pub mod run;
pub mod runtime;
pub mod s3;
pub mod serve;

pub use config::Config;
pub use runtime::Runtime;
