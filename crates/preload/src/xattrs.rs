//! Extended attributes of LABIOS entries under `labios run`: the user's
//! own (`user.*`) are kept in the inventory with the entry, as the FUSE
//! mount keeps them, and the kernel's namespaces are not kept
//! (`labios_client::xattr` holds the rules both follow). Linux keeps no
//! `user.` attributes on a symbolic link: reads of one find none and
//! writes get EPERM, as here.

use crate::conn;
use crate::io::{self, Errno};
use crate::mount::{Target, Vpath};
use bytes::Bytes;
use labios_client::xattr;
use labios_store::{FileKind, FileMeta};
use std::ffi::CString;

/// The entry a call acts on: the one at `path` (`follow` false: the
/// `l` variants), or where the links at its end lead, which may be a
/// host path (`Err`) whose attributes are the host's.
pub fn entry(
    path: Vpath,
    follow: bool,
) -> Result<Result<(Vpath, FileMeta), Option<CString>>, Errno> {
    if !follow {
        return match io::lookup(&path)? {
            Some(m) => Ok(Ok((path, m))),
            None => Err(io::missing(&path.ns)),
        };
    }
    match io::follow(path)? {
        (Target::Labios(v), Some(m)) => Ok(Ok((v, m))),
        (Target::Labios(v), None) => Err(io::missing(&v.ns)),
        (Target::Real(host), _) => Ok(Err(host)),
    }
}

/// The attributes of the entry (none for a symbolic link).
fn all(path: &Vpath, meta: &FileMeta) -> Result<Vec<(String, Bytes)>, Errno> {
    if meta.kind == FileKind::Symlink {
        return Ok(Vec::new());
    }
    conn::with(&format!("list attributes of {}", path.full), |s| {
        s.run(s.client().xattrs(&path.ns))
    })
}

/// getxattr: the value of `name`, ENODATA when it has none.
pub fn get(path: &Vpath, meta: &FileMeta, name: &str) -> Result<Bytes, Errno> {
    if let Some(e) = xattr::bad_name(name) {
        return Err(e);
    }
    if xattr::kernel_namespace(name) {
        return Err(libc::ENODATA);
    }
    all(path, meta)?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .ok_or(libc::ENODATA)
}

/// listxattr: the names, each followed by a NUL.
pub fn list(path: &Vpath, meta: &FileMeta) -> Result<Vec<u8>, Errno> {
    Ok(xattr::name_list(&all(path, meta)?))
}

/// setxattr (`Some` value, with its flags) or removexattr (`None`).
pub fn set(
    path: &Vpath,
    meta: &FileMeta,
    name: &str,
    value: Option<&[u8]>,
    flags: i32,
) -> Result<(), Errno> {
    if let Some(e) = xattr::bad_name(name) {
        return Err(e);
    }
    if xattr::kernel_namespace(name) {
        return Err(libc::ENOTSUP);
    }
    if value.is_some_and(|v| v.len() > xattr::SIZE_MAX) {
        return Err(libc::E2BIG);
    }
    if flags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
        return Err(libc::EINVAL);
    }
    if meta.kind == FileKind::Symlink {
        return Err(libc::EPERM);
    }
    let exists = match get(path, meta, name) {
        Ok(_) => true,
        Err(libc::ENODATA) => false,
        Err(e) => return Err(e),
    };
    if let Some(e) = xattr::refusal(flags, exists, value.is_none()) {
        return Err(e);
    }
    let value = value.map(Bytes::copy_from_slice);
    conn::with(&format!("set attribute {name} of {}", path.full), |s| {
        s.run(s.client().set_xattr(&path.ns, name, value))
    })
}
