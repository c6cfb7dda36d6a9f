//! LABIOS errors as S3 errors, so that an S3 client reacts as it would to
//! any S3 server: it retries what is transient (503) and reports the rest
//! with LABIOS's own message.

use labios_label::Error;
use s3s::{S3Error, S3ErrorCode};

/// `e` as the S3 error a client expects; `missing` is the code for a path
/// that does not exist (`NoSuchKey`, `NoSuchBucket`, `NoSuchUpload`).
pub fn s3(e: Error, missing: S3ErrorCode) -> S3Error {
    let code = match &e {
        Error::NotFound(_) => missing,
        Error::PermissionDenied(_) => S3ErrorCode::AccessDenied,
        Error::InvalidPath { .. } | Error::InvalidArgument(_) => S3ErrorCode::InvalidArgument,
        // Transient: the client backs off and retries.
        Error::Full(_) => S3ErrorCode::SlowDown,
        Error::Unavailable(_) | Error::Timeout(_) | Error::Locked(_) => {
            S3ErrorCode::ServiceUnavailable
        }
        Error::AlreadyExists(_)
        | Error::Malformed(_)
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
    }
}
