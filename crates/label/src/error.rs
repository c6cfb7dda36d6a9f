//! One error type for the whole system: every component reports failures in
//! terms a user can act on ("not found: /a/b", "queue full"), and the same
//! value crosses process boundaries unchanged.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Error {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    AlreadyExists(String),
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("malformed encoding: {0}")]
    Malformed(String),
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    #[error("backpressure: {0} is full")]
    Full(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("label {label} failed: {reason}")]
    LabelFailed { label: String, reason: String },
    #[error("storage error: {0}")]
    Storage(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A file lock is held by someone else (or waiting for it would
    /// deadlock): EAGAIN, EDEADLK or ENOLCK, as the message ends.
    #[error("locked: {0}")]
    Locked(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::NotFound => Error::NotFound(e.to_string()),
            _ => Error::Storage(e.to_string()),
        }
    }
}
