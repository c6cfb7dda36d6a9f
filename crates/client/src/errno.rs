//! LABIOS errors as POSIX sees them.

use labios_label::Error;

/// The POSIX errno closest to a LABIOS error, for every POSIX face of
/// LABIOS: intercepted calls, the FUSE mount, Python's `OSError`.
pub fn errno_of(e: &Error) -> i32 {
    match e {
        // An attribute a change needs, not a missing file.
        Error::NotFound(m) if m.ends_with(labios_store::NO_ATTRIBUTE) => libc::ENODATA,
        Error::NotFound(_) => libc::ENOENT,
        Error::AlreadyExists(_) => libc::EEXIST,
        Error::InvalidPath { reason, .. } if reason.contains("longer than") => libc::ENAMETOOLONG,
        // A path through a file or link.
        _ if e.is_parent_not_dir() => libc::ENOTDIR,
        Error::InvalidPath { .. } => libc::EINVAL,
        // A refused hint, whatever its value or path says.
        Error::InvalidArgument(m) if m.ends_with(labios_label::hints::REFUSED) => libc::EINVAL,
        Error::InvalidArgument(m) if m.ends_with(crate::xattr::TOO_LARGE) => libc::E2BIG,
        Error::InvalidArgument(m) if m.ends_with("is a directory") => libc::EISDIR,
        Error::InvalidArgument(m) if m.ends_with("is not a directory") => libc::ENOTDIR,
        Error::InvalidArgument(m) if m.contains("not empty") => libc::ENOTEMPTY,
        Error::InvalidArgument(m) if m.ends_with("no hard link to a directory") => libc::EPERM,
        Error::InvalidArgument(m) if m.ends_with("too many links") => libc::EMLINK,
        Error::InvalidArgument(m) if m.ends_with(crate::client::NOT_SUPPORTED) => libc::EOPNOTSUPP,
        Error::InvalidArgument(_) | Error::Malformed(_) => libc::EINVAL,
        Error::PermissionDenied(m) if m.ends_with(labios_store::access::NOT_PERMITTED) => {
            libc::EPERM
        }
        Error::PermissionDenied(_) => libc::EACCES,
        Error::Full(_) => libc::ENOSPC,
        Error::Timeout(_) => libc::ETIMEDOUT,
        Error::LabelFailed { .. } | Error::Storage(_) | Error::Protocol(_) => libc::EIO,
        Error::Unavailable(_) => libc::EHOSTUNREACH,
        Error::Locked(m) if m.ends_with(labios_store::locks::DEADLOCK) => libc::EDEADLK,
        Error::Locked(m) if m.ends_with(labios_store::locks::TOO_MANY) => libc::ENOLCK,
        Error::Locked(m) if m.ends_with(crate::client::INTERRUPTED) => libc::EINTR,
        Error::Locked(_) => libc::EAGAIN,
    }
}
