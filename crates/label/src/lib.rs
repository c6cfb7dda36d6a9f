//! The LABIOS data model shared by every component.
//!
//! A [`Label`] is the unit of work (article 3.2.1): what to do, on which data,
//! for whom. Everything that travels between client, core and server is
//! defined here so that each side agrees on one vocabulary and one encoding.

pub mod anatomy;
pub mod auth;
pub mod codec;
pub mod error;
pub mod hints;
pub mod id;
pub mod label;
pub mod path;
pub mod score;
pub mod task;
pub mod worker;

pub use codec::{decode, encode, Codec};
pub use error::{Error, Result};
pub use id::{worker_origin, AppId, FileId, LabelId, LabelIdGen, WorkerId};
pub use label::{
    part_key, Label, LabelKind, Operation, Pointer, Segment, StateFlags, LABEL_SIZE_LIMIT,
};
pub use path::normalize as normalize_path;
pub use score::Weights;
pub use task::Task;
pub use worker::{
    LabelState, LabelStatus, LayerStats, WorkerDirectory, WorkerSpec, WorkerState, WorkerStatus,
};
