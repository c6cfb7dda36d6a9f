//! Storage bridging (article 3.3.3a and 3.6.1; the IRIS paper).
//!
//! Workers read and write external storage services through Apache OpenDAL,
//! named by URI (`s3://bucket/key`) or by a mount declared in the
//! configuration (`pfs:/path`); the declarations and names are
//! `labios-mounts`, all a client needs, since only workers reach external
//! storage. Apart from what a mount holds back (merged writes, relaxed
//! metadata, cached blocks), LABIOS keeps no copy of an external system's
//! metadata: sizes and listings are asked of the system itself.
//!
//! How a POSIX-style file is laid out in an object store, and how objects
//! are laid out in a file system, is the business of the IRIS mappers
//! ([`mapping`], [`object_mapping`]); the [`prefetch`], [`cache`] and
//! [`aggregator`] modules make bridged I/O fewer and larger requests.

pub mod aggregator;
pub mod balanced;
pub mod cache;
pub mod cached;
pub mod containers;
pub mod external;
pub mod mapping;
pub mod object_mapping;
pub mod one_to_one;
pub mod options;
pub mod prefetch;
pub mod read_optimized;
pub mod slots;
pub mod virtual_file;
pub mod worker_blocks;
pub mod write_optimized;

pub use aggregator::Aggregator;
pub use cached::Cached;
pub use containers::ContainerOptions;
pub use external::{
    is_external, External, MountConfig, MountTable, Mounts, Serving, DEFAULT_HOLD_MS, MAX_HOLD_MS,
};
pub use mapping::{Entry, FileMapper, Mapping, Stat};
pub use object_mapping::{object_mapper, ObjectInfo, ObjectMapper, ObjectMapping};
pub use options::{mapper_for, Balanced, MapperOptions, ReadOptimized, WriteOptimized};
pub use virtual_file::{MetadataMode, Relaxed};
pub use worker_blocks::WorkerMounts;
