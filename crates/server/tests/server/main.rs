//! Integration tests of the LABIOS server against the embedded stores.

mod common;
mod manager;
mod worker;
