//! LABIOS errors as S3 errors, so that an S3 client reacts as it would to
//! any S3 server: it retries what is transient (503) and reports the rest
//! with LABIOS's own message.

use labios_label::Error;
use s3s::{S3Error, S3ErrorCode};

/// The code of a key that needs a directory where the namespace holds a
/// file: `a/b` or the folder `a/` when `a` is an object.
pub const PARENT_IS_FILE: &str = "ObjectParentIsFile";
/// The code of a key that needs a file where the namespace holds a
/// directory: `a` when objects `a/...` exist.
pub const EXISTING_IS_DIRECTORY: &str = "ExistingObjectIsDirectory";

/// A key the namespace cannot hold beside what is there. S3 keeps both `a`
/// and `a/b`; LABIOS's namespace is a file system, which cannot, so the
/// request is refused with 409 Conflict under the codes versitygw (another
/// S3 gateway over a file system) uses. Clients do not retry a 409.
pub fn conflict(code: &'static str, message: impl Into<String>) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), message.into());
    // A custom code has no status of its own: without one it would be 500.
    e.set_status_code(http::StatusCode::CONFLICT);
    e
}

/// `e` as the S3 error a client expects; `missing` is the code for a path
/// that does not exist (`NoSuchKey`, `NoSuchBucket`, `NoSuchUpload`).
pub fn s3(e: Error, missing: S3ErrorCode) -> S3Error {
    let code = match &e {
        // A path through a file, or a directory asked for where a file is
        // (the only way the gateway's calls meet an existing path).
        _ if e.is_parent_not_dir() => return conflict(PARENT_IS_FILE, e.to_string()),
        Error::AlreadyExists(_) => return conflict(PARENT_IS_FILE, e.to_string()),
        Error::NotFound(_) => missing,
        Error::PermissionDenied(_) => S3ErrorCode::AccessDenied,
        Error::InvalidPath { .. } | Error::InvalidArgument(_) => S3ErrorCode::InvalidArgument,
        // Transient: the client backs off and retries.
        Error::Full(_) => S3ErrorCode::SlowDown,
        Error::Unavailable(_) | Error::Timeout(_) | Error::Locked(_) => {
            S3ErrorCode::ServiceUnavailable
        }
        Error::Malformed(_)
        | Error::LabelFailed { .. }
        | Error::Storage(_)
        | Error::Protocol(_) => S3ErrorCode::InternalError,
    };
    // Client mistakes are the client's to read; what LABIOS failed to do
    // is the operator's.
    if matches!(
        code,
        S3ErrorCode::InternalError | S3ErrorCode::ServiceUnavailable
    ) {
        tracing::warn!("labios s3: {e}");
    }
    S3Error::with_message(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_failure() {
        let code = |e| s3(e, S3ErrorCode::NoSuchKey).code().clone();
        assert_eq!(code(Error::NotFound("/b/k".into())), S3ErrorCode::NoSuchKey);
        assert_eq!(
            code(Error::PermissionDenied("x".into())),
            S3ErrorCode::AccessDenied
        );
        assert_eq!(code(Error::Full("queue".into())), S3ErrorCode::SlowDown);
        assert_eq!(
            code(Error::Unavailable("down".into())),
            S3ErrorCode::ServiceUnavailable
        );
        let e = s3(Error::Storage("disk".into()), S3ErrorCode::NoSuchKey);
        assert_eq!(e.message(), Some("storage error: disk"));
        let through_a_file = Error::InvalidPath {
            path: "/b/a/b".into(),
            reason: "parent /b/a is a file".into(),
        };
        for e in [through_a_file, Error::AlreadyExists("/b/a".into())] {
            let e = s3(e, S3ErrorCode::NoSuchKey);
            assert_eq!(e.code().as_str(), PARENT_IS_FILE);
            assert_eq!(e.status_code(), Some(http::StatusCode::CONFLICT));
        }
    }
}
