//! The stat and statfs families. LABIOS entries report the inventory's
//! size, mode and times; the device number is LABIOS's own and the inode is
//! the file id. A LABIOS path's file system is the whole deployment: the
//! workers' capacity and use, and a magic number of its own, which MPI-IO
//! (ROMIO) takes for a plain POSIX file system.

use crate::conn;
use crate::fdtable;
use crate::io::{self, Errno};
use crate::mount::{self, Target};
use crate::posix::{ret, set_errno};
use crate::real::real;
use labios_store::{FileKind, FileMeta};
use std::os::raw::{c_char, c_int, c_uint};

/// "LB": what `st_dev` says for every LABIOS entry.
const DEVICE: u64 = 0x4c42;
/// Programs size their buffers by `st_blksize`; one label's worth of data
/// per call keeps label counts low.
const BLOCK: i64 = 1 << 20;

fn split_time(ns: u64) -> (i64, i64) {
    ((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64)
}

fn type_bits(m: &FileMeta) -> u32 {
    match m.kind {
        FileKind::Dir => libc::S_IFDIR,
        FileKind::File => libc::S_IFREG,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::CharDevice => libc::S_IFCHR,
        FileKind::BlockDevice => libc::S_IFBLK,
        FileKind::Socket => libc::S_IFSOCK,
    }
}

/// A device's number, asked of LABIOS for devices only.
fn device_number(m: &FileMeta) -> u64 {
    if !matches!(m.kind, FileKind::CharDevice | FileKind::BlockDevice) {
        return 0;
    }
    conn::with(&format!("stat {}", m.path), |s| s.device_number(&m.path)).unwrap_or(0)
}

unsafe fn fill_stat(m: &FileMeta, st: *mut libc::stat) {
    let st = &mut *st;
    *st = std::mem::zeroed();
    st.st_dev = DEVICE;
    st.st_ino = m.id;
    st.st_nlink = m.nlink.into();
    st.st_mode = type_bits(m) | (m.mode & 0o7777);
    st.st_rdev = device_number(m);
    st.st_uid = m.uid;
    st.st_gid = m.gid;
    st.st_size = m.size as i64;
    st.st_blksize = BLOCK;
    st.st_blocks = m.size.div_ceil(512) as i64;
    (st.st_atime, st.st_atime_nsec) = split_time(m.atime);
    (st.st_mtime, st.st_mtime_nsec) = split_time(m.mtime);
    (st.st_ctime, st.st_ctime_nsec) = split_time(m.ctime);
}

unsafe fn fill_statx(m: &FileMeta, stx: *mut libc::statx) {
    let stx = &mut *stx;
    *stx = std::mem::zeroed();
    stx.stx_mask = libc::STATX_BASIC_STATS;
    stx.stx_blksize = BLOCK as u32;
    stx.stx_nlink = m.nlink;
    stx.stx_uid = m.uid;
    stx.stx_gid = m.gid;
    stx.stx_mode = (type_bits(m) | (m.mode & 0o7777)) as u16;
    let rdev = device_number(m);
    stx.stx_rdev_major = libc::major(rdev);
    stx.stx_rdev_minor = libc::minor(rdev);
    stx.stx_ino = m.id;
    stx.stx_size = m.size;
    stx.stx_blocks = m.size.div_ceil(512);
    for (t, ns) in [
        (&mut stx.stx_atime, m.atime),
        (&mut stx.stx_mtime, m.mtime),
        (&mut stx.stx_ctime, m.ctime),
    ] {
        let (s, n) = split_time(ns);
        t.tv_sec = s;
        t.tv_nsec = n as u32;
    }
    stx.stx_dev_major = (DEVICE >> 8) as u32;
    stx.stx_dev_minor = (DEVICE & 0xff) as u32;
}

/// The entry of a LABIOS descriptor; one whose file was removed while
/// open reports size 0 and no links, as an unlinked file would.
fn meta_of_fd(fd: c_int) -> Option<Result<FileMeta, Errno>> {
    let f = fdtable::get(fd)?;
    Some(match io::fstat(&f) {
        Ok(Some(m)) => Ok(m),
        Ok(None) => Ok(FileMeta {
            id: f.id.unwrap_or(0),
            path: f.path.ns.clone(),
            kind: if f.dir { FileKind::Dir } else { FileKind::File },
            size: 0,
            mode: 0o644,
            owner: 0,
            uid: 0,
            gid: 0,
            ctime: 0,
            mtime: 0,
            atime: 0,
            nlink: 0,
        }),
        Err(e) => Err(e),
    })
}

/// The entry `path` (relative to `dirfd`) names, or the libc path to use.
unsafe fn meta_at(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> Result<Result<FileMeta, Errno>, Option<std::ffi::CString>> {
    if !path.is_null() && *path == 0 && flags & libc::AT_EMPTY_PATH != 0 {
        return meta_of_fd(dirfd).ok_or(None);
    }
    match mount::resolve_at(dirfd, path) {
        Target::Labios(v) if !crate::conn::bypass() => {
            if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                return Ok(io::stat(&v));
            }
            match io::follow(v) {
                Ok((Target::Labios(_), Some(m))) => Ok(Ok(m)),
                Ok((Target::Labios(v), None)) => Ok(Err(io::missing(&v.ns))),
                Ok((Target::Real(p), _)) => Err(p),
                Err(e) => Ok(Err(e)),
            }
        }
        Target::Labios(_) => Err(None),
        Target::Real(p) => Err(p),
    }
}

fn done<T>(r: Result<T, Errno>, fill: impl FnOnce(&T)) -> c_int {
    ret(r.map(|m| {
        fill(&m);
        0
    }))
}

unsafe fn stat_at(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
    real: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    match meta_at(dirfd, path, flags) {
        Ok(r) => done(r, |m| fill_stat(m, st)),
        Err(p) => real(p.as_ref().map_or(path, |c| c.as_ptr())),
    }
}

unsafe fn stat_fd(fd: c_int, st: *mut libc::stat, real: impl FnOnce() -> c_int) -> c_int {
    match meta_of_fd(fd) {
        Some(r) => done(r, |m| fill_stat(m, st)),
        None => real(),
    }
}

type Stat = libc::stat;

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut Stat) -> c_int {
    stat_at(libc::AT_FDCWD, path, st, 0, |p| {
        real!(stat: fn(*const c_char, *mut Stat) -> c_int)(p, st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut Stat) -> c_int {
    stat_at(libc::AT_FDCWD, path, st, 0, |p| {
        real!(stat64: fn(*const c_char, *mut Stat) -> c_int)(p, st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, st: *mut Stat) -> c_int {
    stat_at(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW, |p| {
        real!(lstat: fn(*const c_char, *mut Stat) -> c_int)(p, st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, st: *mut Stat) -> c_int {
    stat_at(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW, |p| {
        real!(lstat64: fn(*const c_char, *mut Stat) -> c_int)(p, st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut Stat) -> c_int {
    stat_fd(fd, st, || {
        real!(fstat: fn(c_int, *mut Stat) -> c_int)(fd, st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut Stat) -> c_int {
    stat_fd(fd, st, || {
        real!(fstat64: fn(c_int, *mut Stat) -> c_int)(fd, st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    st: *mut Stat,
    flags: c_int,
) -> c_int {
    stat_at(dirfd, path, st, flags, |p| {
        real!(fstatat: fn(c_int, *const c_char, *mut Stat, c_int) -> c_int)(dirfd, p, st, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    st: *mut Stat,
    flags: c_int,
) -> c_int {
    stat_at(dirfd, path, st, flags, |p| {
        real!(fstatat64: fn(c_int, *const c_char, *mut Stat, c_int) -> c_int)(dirfd, p, st, flags)
    })
}

// glibc before 2.33 compiled stat() into calls of these; with version 1
// (x86_64) or 0 (generic) their struct is the one above, so calls that are
// not LABIOS's go to the modern functions.

#[no_mangle]
pub unsafe extern "C" fn __xstat(_ver: c_int, path: *const c_char, st: *mut Stat) -> c_int {
    stat(path, st)
}

#[no_mangle]
pub unsafe extern "C" fn __xstat64(_ver: c_int, path: *const c_char, st: *mut Stat) -> c_int {
    stat64(path, st)
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat(_ver: c_int, path: *const c_char, st: *mut Stat) -> c_int {
    lstat(path, st)
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat64(_ver: c_int, path: *const c_char, st: *mut Stat) -> c_int {
    lstat64(path, st)
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, st: *mut Stat) -> c_int {
    fstat(fd, st)
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_ver: c_int, fd: c_int, st: *mut Stat) -> c_int {
    fstat64(fd, st)
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut Stat,
    flags: c_int,
) -> c_int {
    fstatat(dirfd, path, st, flags)
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut Stat,
    flags: c_int,
) -> c_int {
    fstatat64(dirfd, path, st, flags)
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    stx: *mut libc::statx,
) -> c_int {
    if stx.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    match meta_at(dirfd, path, flags) {
        Ok(r) => done(r, |m| fill_statx(m, stx)),
        Err(p) => real!(statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int)(
            dirfd,
            p.as_ref().map_or(path, |c| c.as_ptr()),
            flags,
            mask,
            stx,
        ),
    }
}

/// "LABI": `f_type` of every LABIOS path. Not a magic number any program
/// special-cases, so ROMIO and friends treat LABIOS as plain POSIX storage.
const FS_MAGIC: i64 = 0x4c41_4249;
/// Block size statfs reports.
const FS_BLOCK: u64 = 4096;

/// What statfs says of LABIOS: `(capacity, used)` in bytes.
fn fs_fill(cap: u64, used: u64) -> libc::statfs {
    // SAFETY: statfs is plain old data; zero is a valid value of each field.
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    sf.f_type = FS_MAGIC as _;
    sf.f_bsize = FS_BLOCK as _;
    sf.f_frsize = FS_BLOCK as _;
    sf.f_blocks = cap / FS_BLOCK;
    sf.f_bfree = cap.saturating_sub(used) / FS_BLOCK;
    sf.f_bavail = sf.f_bfree;
    sf.f_files = u64::MAX >> 1;
    sf.f_ffree = u64::MAX >> 1;
    sf.f_namelen = 255;
    sf
}

fn vfs_fill(sf: &libc::statfs) -> libc::statvfs {
    // SAFETY: statvfs is plain old data; zero is a valid value of each field.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    v.f_bsize = sf.f_bsize as _;
    v.f_frsize = sf.f_frsize as _;
    v.f_blocks = sf.f_blocks;
    v.f_bfree = sf.f_bfree;
    v.f_bavail = sf.f_bavail;
    v.f_files = sf.f_files;
    v.f_ffree = sf.f_ffree;
    v.f_favail = sf.f_ffree;
    v.f_fsid = FS_MAGIC as _;
    v.f_namemax = 255;
    v
}

/// statfs of a LABIOS path, or the libc path to ask instead (`None`: the
/// caller's own).
unsafe fn statfs_path(
    path: *const c_char,
) -> Result<Result<libc::statfs, Errno>, Option<std::ffi::CString>> {
    match mount::resolve_at(libc::AT_FDCWD, path) {
        Target::Labios(v) if !crate::conn::bypass() => {
            Ok(io::capacity(&v).map(|(cap, used)| fs_fill(cap, used)))
        }
        Target::Labios(_) => Err(None),
        Target::Real(p) => Err(p),
    }
}

/// statfs of a descriptor: LABIOS's own for a LABIOS descriptor.
fn statfs_fd(fd: c_int) -> Option<Result<libc::statfs, Errno>> {
    let f = fdtable::get(fd)?;
    Some(
        conn::with(&format!("fstatfs {}", f.path.full), |s| s.capacity())
            .map(|(cap, used)| fs_fill(cap, used)),
    )
}

macro_rules! statfs_entry {
    ($name:ident, $out:ty, $fill:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut $out) -> c_int {
            match statfs_path(path) {
                Ok(r) => done(r, |sf| *out = $fill(sf)),
                Err(p) => real!($name: fn(*const c_char, *mut $out) -> c_int)(
                    p.as_ref().map_or(path, |c| c.as_ptr()),
                    out,
                ),
            }
        }
    };
}

macro_rules! fstatfs_entry {
    ($name:ident, $out:ty, $fill:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, out: *mut $out) -> c_int {
            match statfs_fd(fd) {
                Some(r) => done(r, |sf| *out = $fill(sf)),
                None => real!($name: fn(c_int, *mut $out) -> c_int)(fd, out),
            }
        }
    };
}

statfs_entry!(statfs, libc::statfs, |sf: &libc::statfs| *sf);
statfs_entry!(statfs64, libc::statfs, |sf: &libc::statfs| *sf);
statfs_entry!(statvfs, libc::statvfs, vfs_fill);
statfs_entry!(statvfs64, libc::statvfs, vfs_fill);
fstatfs_entry!(fstatfs, libc::statfs, |sf: &libc::statfs| *sf);
fstatfs_entry!(fstatfs64, libc::statfs, |sf: &libc::statfs| *sf);
fstatfs_entry!(fstatvfs, libc::statvfs, vfs_fill);
fstatfs_entry!(fstatvfs64, libc::statvfs, vfs_fill);
