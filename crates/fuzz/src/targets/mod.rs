//! One target per decoder of untrusted input (issue 11), each reaching the
//! decoder the running system uses on that input.

mod bridge;
mod config;
mod frames;
mod functions;
mod gateway;
mod label;
mod pipeline;
mod wasm;

use crate::engine::Target;

/// Every target, in the order `labios-fuzz all` runs them.
pub static TARGETS: &[&Target] = &[
    &label::TARGET,
    &frames::TARGET,
    &pipeline::TARGET,
    &functions::TARGET,
    &config::TARGET,
    &wasm::TARGET,
    &bridge::TARGET,
    &gateway::TARGET,
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().copied().find(|t| t.name == name)
}
