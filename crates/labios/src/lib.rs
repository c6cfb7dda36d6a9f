//! The LABIOS runtime.
