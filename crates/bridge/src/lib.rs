//! Storage bridging (article 3.3.3a and 3.6.1; the IRIS paper).
//!
//! Workers read and write external storage services through Apache OpenDAL,
//! named by URI (`s3://bucket/key`) or by a mount declared in the
//! configuration (`pfs:/path`). LABIOS keeps no copy of an external
//! system's metadata: sizes and listings are asked of the system itself.
//!
//! How a POSIX-style file is laid out in an object store, and how objects
//! are laid out in a file system, is the business of the IRIS mappers
//! ([`mapping`]).

pub mod external;
pub mod mapping;

pub use external::{is_external, External, MountConfig, Mounts};
pub use mapping::{Entry, FileMapper, Mapping, Stat};
