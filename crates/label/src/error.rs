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

/// How every inventory begins the reason of a path that runs through a
/// file or link (the Redis scripts write it too): the one place
/// [`Error::is_parent_not_dir`] looks.
pub const PARENT_NOT_DIR: &str = "parent ";

impl Error {
    /// `path` cannot exist because `parent` is a `kind` ("file", "link"),
    /// not a directory: ENOTDIR to POSIX callers, 409 to S3 clients.
    pub fn parent_not_dir(path: &str, parent: &str, kind: &str) -> Error {
        Error::InvalidPath {
            path: path.to_string(),
            reason: format!("{PARENT_NOT_DIR}{parent} is a {kind}"),
        }
    }

    /// Whether this is [`Error::parent_not_dir`]'s error, here or as it
    /// came back from another process.
    pub fn is_parent_not_dir(&self) -> bool {
        matches!(self, Error::InvalidPath { reason, .. } if reason.starts_with(PARENT_NOT_DIR))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_that_is_not_a_directory_is_told_from_other_invalid_paths() {
        let e = Error::parent_not_dir("/d/f/x", "/d/f", "file");
        assert!(e.is_parent_not_dir());
        assert_eq!(
            e.to_string(),
            "invalid path \"/d/f/x\": parent /d/f is a file"
        );
        // As it reaches another process.
        let back: Error = postcard::from_bytes(&postcard::to_allocvec(&e).unwrap()).unwrap();
        assert!(back.is_parent_not_dir());
        let other = Error::InvalidPath {
            path: "/a/../b".into(),
            reason: "not normalized".into(),
        };
        assert!(!other.is_parent_not_dir());
        assert!(!Error::NotFound("parent /x".into()).is_parent_not_dir());
    }
}
