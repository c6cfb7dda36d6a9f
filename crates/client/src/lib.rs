//! LABIOS client (article 3.3.1, Figure 2): turns an application's I/O
//! requests into labels. The three managers mirror the article's boxes:
//! [`label_manager`] builds and publishes labels, [`content_manager`] moves
//! data through the warehouse, [`catalog_manager`] reads and updates the
//! inventory. [`Client`] is the facade an application holds.

pub mod catalog_manager;
pub mod client;
pub mod config;
pub mod content_manager;
mod errno;
pub mod label_manager;
pub mod location;
pub mod xattr;

pub use client::{Client, FileRef, Handle, LockCall};
pub use config::{ClientConfig, IoMode};
pub use errno::errno_of;
pub use location::Location;
