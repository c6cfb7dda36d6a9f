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
use labios_client::{xattr, FileRef};
use labios_store::{FileKind, FileMeta};
use std::ffi::CString;

/// The entry a call acts on: the one `path` names (`follow` false: the
/// `l` variants; links among its directories are followed, as the kernel
/// does), or where the links at its end lead, which may be a host path
/// (`Err`) whose attributes are the host's. Calls then act on the entry
/// by its id, so a descriptor's reach the file it opened.
pub fn entry(path: Vpath, follow: bool) -> Result<Result<FileMeta, CString>, Errno> {
    if !follow {
        return io::stat(&path).map(Ok);
    }
    match io::follow(path)? {
        (Target::Labios(_), Some(m)) => Ok(Ok(m)),
        (Target::Labios(v), None) => Err(io::missing(&v.ns)),
        (Target::Real(Some(host)), _) => Ok(Err(host)),
        (Target::Real(None), _) => Err(libc::ENOENT),
    }
}

/// Linux keeps `user.` attributes on regular files and directories only.
fn holds_user_attrs(meta: &FileMeta) -> bool {
    matches!(meta.kind, FileKind::File | FileKind::Dir)
}

/// The attributes of the entry (none where it holds none).
fn all(meta: &FileMeta) -> Result<Vec<(String, Bytes)>, Errno> {
    if !holds_user_attrs(meta) {
        return Ok(Vec::new());
    }
    conn::with(&format!("list attributes of {}", meta.path), |s| {
        s.run(s.client().xattrs(FileRef::Id(meta.id)))
    })
}

/// getxattr: the value of `name`, ENODATA when it has none.
pub fn get(meta: &FileMeta, name: &str) -> Result<Bytes, Errno> {
    if xattr::kernel_namespace(name) {
        return Err(libc::ENODATA);
    }
    if !holds_user_attrs(meta) {
        return Err(libc::ENODATA);
    }
    conn::with(&format!("read attribute {name} of {}", meta.path), |s| {
        s.run(s.client().xattr(FileRef::Id(meta.id), name))
    })?
    .ok_or(libc::ENODATA)
}

/// listxattr: the names, each followed by a NUL.
pub fn list(meta: &FileMeta) -> Result<Vec<u8>, Errno> {
    Ok(xattr::name_list(&all(meta)?))
}

/// setxattr (`Some` value, with its flags) or removexattr (`None`); the
/// name, flags and size were checked by the caller, before it read the
/// value from the program's memory.
pub fn set(meta: &FileMeta, name: &str, value: Option<Vec<u8>>, flags: i32) -> Result<(), Errno> {
    if xattr::kernel_namespace(name) {
        return Err(libc::ENOTSUP);
    }
    if !holds_user_attrs(meta) {
        return Err(libc::EPERM);
    }
    let presence = xattr::presence(flags, value.is_none());
    let value = value.map(Bytes::from);
    conn::with(&format!("set attribute {name} of {}", meta.path), |s| {
        s.run(
            s.client()
                .set_xattr_if(FileRef::Id(meta.id), name, value, presence),
        )
    })
}
