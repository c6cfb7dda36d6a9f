//! POSIX entry points. Each one asks whether its descriptor or path is
//! LABIOS's (one atomic load for descriptors, a prefix comparison for
//! paths) and otherwise calls libc's function unchanged.

use crate::conn;
use crate::fdtable::{self, done};
use crate::guard;
use crate::io::{self, Errno};
use crate::locks;
use crate::mount::{self, Target, Vpath};
use crate::ownfds;
use crate::real::real;
use crate::xattrs;
use labios_client::xattr;
use labios_store::{FileMeta, RenameHow, SetAttr, SetTime};
use libc::{mode_t, off64_t, off_t, size_t, ssize_t};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_uint, c_ulong, c_void};

pub fn set_errno(e: Errno) {
    unsafe { *libc::__errno_location() = e }
}

pub fn ret(r: Result<c_int, Errno>) -> c_int {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

fn ret0(r: Result<(), Errno>) -> c_int {
    ret(r.map(|()| 0))
}

fn rets(r: Result<usize, Errno>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The path to hand libc: the caller's, or its absolute form when it was
/// relative to a LABIOS working directory.
fn real_path(p: &Option<CString>, orig: *const c_char) -> *const c_char {
    p.as_ref().map_or(orig, |c| c.as_ptr())
}

/// Resolves a path argument; `Err` carries the libc path to use instead.
/// The prefix test comes first: it is what nearly every call of a program
/// needs, and it is cheaper than the thread-local of [`conn::bypass`].
unsafe fn labios_path_at(dirfd: c_int, path: *const c_char) -> Result<Vpath, Option<CString>> {
    match mount::resolve_at(dirfd, path) {
        Target::Labios(v) if !conn::bypass() => Ok(v),
        Target::Labios(_) => Err(None),
        Target::Real(p) => Err(p),
    }
}

unsafe fn labios_path(path: *const c_char) -> Result<Vpath, Option<CString>> {
    labios_path_at(libc::AT_FDCWD, path)
}

// ---- symbolic links --------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    linkpath: *const c_char,
) -> c_int {
    match labios_path_at(dirfd, linkpath) {
        Ok(v) => {
            let target = match crate::guard::c_str(target) {
                Ok(t) => t,
                Err(e) => return ret(Err(e)),
            };
            match std::str::from_utf8(target) {
                Ok(t) => ret0(io::on_name(
                    &v,
                    |p| io::symlink(t, p),
                    |host| {
                        done(real!(symlink: fn(*const c_char, *const c_char) -> c_int)(
                            target.as_ptr().cast(),
                            host.as_ptr(),
                        ))
                    },
                )),
                Err(_) => ret(Err(libc::EINVAL)),
            }
        }
        Err(p) => real!(symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int)(
            target,
            dirfd,
            real_path(&p, linkpath),
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, linkpath: *const c_char) -> c_int {
    match labios_path(linkpath) {
        Ok(_) => symlinkat(target, libc::AT_FDCWD, linkpath),
        Err(p) => real!(symlink: fn(*const c_char, *const c_char) -> c_int)(
            target,
            real_path(&p, linkpath),
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> ssize_t {
    match labios_path_at(dirfd, path) {
        Ok(v) => match io::readlink(&v) {
            Ok(t) => {
                // No NUL is added, and a short buffer truncates: readlink(2).
                let n = t.len().min(size);
                std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast(), n);
                n as ssize_t
            }
            Err(e) => rets(Err(e)),
        },
        Err(p) => real!(readlinkat: fn(c_int, *const c_char, *mut c_char, usize) -> ssize_t)(
            dirfd,
            real_path(&p, path),
            buf,
            size,
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: usize) -> ssize_t {
    match labios_path(path) {
        Ok(_) => readlinkat(libc::AT_FDCWD, path, buf, size),
        Err(p) => real!(readlink: fn(*const c_char, *mut c_char, usize) -> ssize_t)(
            real_path(&p, path),
            buf,
            size,
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    linkat(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
}

/// Both names in LABIOS: a hard link in its namespace. One in LABIOS and
/// one not: EXDEV, as between two file systems.
#[no_mangle]
pub unsafe extern "C" fn linkat(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    match (labios_path_at(olddirfd, old), labios_path_at(newdirfd, new)) {
        (Ok(_), Ok(_)) if flags & !libc::AT_SYMLINK_FOLLOW != 0 => ret(Err(libc::EINVAL)),
        (Ok(a), Ok(b)) => {
            let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
            ret0(io::on_names(&a, &b, |a, b| io::link(a.clone(), b, follow)))
        }
        (Err(a), Err(b)) => {
            real!(linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int)(
                olddirfd,
                real_path(&a, old),
                newdirfd,
                real_path(&b, new),
                flags,
            )
        }
        _ => ret(Err(across(old, new))),
    }
}

/// Why a call naming one path in LABIOS and `old` or `new` elsewhere
/// fails: a path the kernel could not read (a bad pointer, one too long)
/// as the kernel says, else EXDEV, as between two file systems.
unsafe fn across(old: *const c_char, new: *const c_char) -> c_int {
    crate::guard::c_str(old)
        .and_then(|_| crate::guard::c_str(new))
        .err()
        .unwrap_or(libc::EXDEV)
}

// ---- entries LABIOS does not keep -----------------------------------------

/// FIFOs, devices and sockets are names in the LABIOS namespace (what
/// opening one does is the kernel's, on `labios mount`); a regular file
/// made this way is an empty file. Nothing is made on the host disk.
#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    match labios_path_at(dirfd, path) {
        Ok(v) => ret0(io::on_name(
            &v,
            |p| io::mknod(p, mode, dev),
            |host| {
                done(
                    real!(mknod: fn(*const c_char, mode_t, libc::dev_t) -> c_int)(
                        host.as_ptr(),
                        mode,
                        dev,
                    ),
                )
            },
        )),
        Err(p) => real!(mknodat: fn(c_int, *const c_char, mode_t, libc::dev_t) -> c_int)(
            dirfd,
            real_path(&p, path),
            mode,
            dev,
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    mknodat(libc::AT_FDCWD, path, mode, dev)
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    mknodat(dirfd, path, mode | libc::S_IFIFO, 0)
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    mknodat(libc::AT_FDCWD, path, mode | libc::S_IFIFO, 0)
}

/// A Unix socket needs a kernel inode: binding one at a LABIOS path under
/// `labios run` is EOPNOTSUPP (on `labios mount` the kernel makes it), and
/// never makes anything on the host disk. Other addresses go to libc.
#[no_mangle]
pub unsafe extern "C" fn bind(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let real =
        || real!(bind: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int)(fd, addr, len);
    match unix_path(addr, len) {
        Some(path) => match labios_path(path.as_ptr()) {
            Ok(_) => ret(Err(libc::EOPNOTSUPP)),
            // A relative name under a LABIOS working directory that leads
            // out: bind the host path it names.
            Err(Some(host)) => {
                let mut a: libc::sockaddr_un = std::mem::zeroed();
                a.sun_family = libc::AF_UNIX as libc::sa_family_t;
                let bytes = host.as_bytes_with_nul();
                if bytes.len() > a.sun_path.len() {
                    return ret(Err(libc::ENAMETOOLONG));
                }
                for (d, s) in a.sun_path.iter_mut().zip(bytes) {
                    *d = *s as c_char;
                }
                real!(bind: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int)(
                    fd,
                    (&a as *const libc::sockaddr_un).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                )
            }
            Err(None) => real(),
        },
        None => real(),
    }
}

/// The path of a Unix socket address with one (not abstract, not
/// unnamed), once the kernel says the address is readable; `sun_path`
/// need not end in NUL when it fills the address.
unsafe fn unix_path(addr: *const libc::sockaddr, len: libc::socklen_t) -> Option<CString> {
    let path_at = std::mem::offset_of!(libc::sockaddr_un, sun_path);
    if (len as usize) <= path_at || crate::guard::c_str(addr.cast()).is_err() {
        return None;
    }
    let un = addr.cast::<libc::sockaddr_un>();
    if (*un).sun_family != libc::AF_UNIX as libc::sa_family_t {
        return None;
    }
    let most = (len as usize - path_at).min((*un).sun_path.len());
    let bytes = crate::guard::c_str((*un).sun_path.as_ptr()).ok()?;
    let path = &bytes[..bytes.len().min(most)];
    (!path.is_empty()).then(|| CString::new(path).ok())?
}

/// Kept so that LABIOS creates apply the umask the kernel would.
#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = real!(umask: fn(mode_t) -> mode_t)(mask);
    io::umask_set(mask);
    old
}

// ---- open and close ------------------------------------------------------

unsafe fn open_at(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
    real: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    match labios_path_at(dirfd, path) {
        Ok(v) => match io::open(v, flags, mode) {
            Ok(io::Opened::Labios(fd)) => fd,
            Ok(io::Opened::Host(p)) => real(p.as_ptr()),
            Err(e) => ret(Err(e)),
        },
        Err(p) => real(real_path(&p, path)),
    }
}

// The mode is C-variadic; on the Linux ABIs Rust targets it arrives where a
// third fixed argument would, and it is only read with O_CREAT.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    open_at(libc::AT_FDCWD, path, flags, mode, |p| {
        real!(open: fn(*const c_char, c_int, mode_t) -> c_int)(p, flags, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    open_at(libc::AT_FDCWD, path, flags, mode, |p| {
        real!(open64: fn(*const c_char, c_int, mode_t) -> c_int)(p, flags, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    open_at(libc::AT_FDCWD, path, flags, 0, |p| {
        real!(__open_2: fn(*const c_char, c_int) -> c_int)(p, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    open_at(libc::AT_FDCWD, path, flags, 0, |p| {
        real!(__open64_2: fn(*const c_char, c_int) -> c_int)(p, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    open_at(dirfd, path, flags, mode, |p| {
        real!(openat: fn(c_int, *const c_char, c_int, mode_t) -> c_int)(dirfd, p, flags, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    open_at(dirfd, path, flags, mode, |p| {
        real!(openat64: fn(c_int, *const c_char, c_int, mode_t) -> c_int)(dirfd, p, flags, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    open_at(dirfd, path, flags, 0, |p| {
        real!(__openat_2: fn(c_int, *const c_char, c_int) -> c_int)(dirfd, p, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    open_at(dirfd, path, flags, 0, |p| {
        real!(__openat64_2: fn(c_int, *const c_char, c_int) -> c_int)(dirfd, p, flags)
    })
}

const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    open_at(libc::AT_FDCWD, path, CREAT, mode, |p| {
        real!(creat: fn(*const c_char, mode_t) -> c_int)(p, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    open_at(libc::AT_FDCWD, path, CREAT, mode, |p| {
        real!(creat64: fn(*const c_char, mode_t) -> c_int)(p, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fdtable::is_labios(fd) {
        return ret0(io::close(fd));
    }
    // The session's own descriptor: the program closes what it believes
    // is a stray number (a daemon closing all), and it stays open.
    if !conn::bypass() && ownfds::is_own(fd) {
        return 0;
    }
    real!(close: fn(c_int) -> c_int)(fd)
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let real =
        |a: c_uint, b: c_uint| real!(close_range: fn(c_uint, c_uint, c_int) -> c_int)(a, b, flags);
    if conn::bypass() {
        return real(first, last);
    }
    ownfds::close_range_around(first, last, real)
}

/// glibc's closefrom closes with a raw system call: the library's
/// descriptors are skipped here instead.
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    let first = c_uint::try_from(low).unwrap_or(0);
    let real =
        |a: c_uint, b: c_uint| real!(close_range: fn(c_uint, c_uint, c_int) -> c_int)(a, b, 0);
    if conn::bypass() {
        real(first, c_uint::MAX);
        return;
    }
    ownfds::close_range_around(first, c_uint::MAX, real);
}

/// mkstemp and friends on a LABIOS template: O_EXCL creation under fresh
/// names until one is free.
unsafe fn make_temp(template: *mut c_char, flags: c_int, real: impl FnOnce() -> c_int) -> c_int {
    if conn::bypass() || template.is_null() {
        return real();
    }
    if !matches!(mount::resolve(template), Target::Labios(_)) {
        return real();
    }
    let len = libc::strlen(template);
    if len < 6 || std::slice::from_raw_parts(template.add(len - 6), 6) != [b'X' as c_char; 6] {
        set_errno(libc::EINVAL);
        return -1;
    }
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for _ in 0..100 {
        for i in 0..6 {
            *template.add(len - 6 + i) = CHARS[fastrand_index(CHARS.len())] as c_char;
        }
        let Target::Labios(v) = mount::resolve(template) else {
            break;
        };
        let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
        match io::open(v, flags, 0o600) {
            Err(libc::EEXIST) => continue,
            Ok(io::Opened::Labios(fd)) => return fd,
            Ok(io::Opened::Host(_)) => return ret(Err(libc::EEXIST)),
            Err(e) => return ret(Err(e)),
        }
    }
    set_errno(libc::EEXIST);
    -1
}

fn fastrand_index(n: usize) -> usize {
    let mut b = [0u8; 8];
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    (u64::from_ne_bytes(b) % n as u64) as usize
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    make_temp(template, 0, || {
        real!(mkstemp: fn(*mut c_char) -> c_int)(template)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    make_temp(template, 0, || {
        real!(mkstemp64: fn(*mut c_char) -> c_int)(template)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    make_temp(template, flags, || {
        real!(mkostemp: fn(*mut c_char, c_int) -> c_int)(template, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    make_temp(template, flags, || {
        real!(mkostemp64: fn(*mut c_char, c_int) -> c_int)(template, flags)
    })
}

// ---- data ----------------------------------------------------------------

/// The bytes go to the caller's buffer through the kernel: a bad buffer
/// is EFAULT, as for a kernel file, not a crash.
unsafe fn read_fd(fd: c_int, buf: *mut c_void, n: size_t, at: Option<i64>) -> Option<ssize_t> {
    let f = fdtable::get(fd)?;
    let deliver = |data: &[u8]| crate::guard::copy_out(buf.cast(), data);
    Some(rets(
        io::read_bytes(fd, &f, n, at, deliver).map(|d| d.len()),
    ))
}

/// The caller's bytes are copied by the kernel: a bad buffer is EFAULT.
unsafe fn write_fd(fd: c_int, buf: *const c_void, n: size_t, at: Option<i64>) -> Option<ssize_t> {
    let f = fdtable::get(fd)?;
    let take = || crate::guard::copy_in(buf.cast(), n).map(bytes::Bytes::from);
    Some(rets(io::write_bytes(fd, &f, take, at)))
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    read_fd(fd, buf, n, None)
        .unwrap_or_else(|| real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, n))
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    cap: size_t,
) -> ssize_t {
    read_fd(fd, buf, n.min(cap), None).unwrap_or_else(|| {
        real!(__read_chk: fn(c_int, *mut c_void, size_t, size_t) -> ssize_t)(fd, buf, n, cap)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    read_fd(fd, buf, n, Some(off)).unwrap_or_else(|| {
        real!(pread: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t)(fd, buf, n, off)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    read_fd(fd, buf, n, Some(off)).unwrap_or_else(|| {
        real!(pread64: fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t)(fd, buf, n, off)
    })
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    cap: size_t,
) -> ssize_t {
    read_fd(fd, buf, n.min(cap), Some(off)).unwrap_or_else(|| {
        real!(__pread64_chk: fn(c_int, *mut c_void, size_t, off64_t, size_t) -> ssize_t)(
            fd, buf, n, off, cap,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    write_fd(fd, buf, n, None)
        .unwrap_or_else(|| real!(write: fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, n))
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    write_fd(fd, buf, n, Some(off)).unwrap_or_else(|| {
        real!(pwrite: fn(c_int, *const c_void, size_t, off_t) -> ssize_t)(fd, buf, n, off)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    write_fd(fd, buf, n, Some(off)).unwrap_or_else(|| {
        real!(pwrite64: fn(c_int, *const c_void, size_t, off64_t) -> ssize_t)(fd, buf, n, off)
    })
}

/// The caller's `iovec` array, checked mapped: EFAULT, not a crash.
unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> Result<&'a [libc::iovec], Errno> {
    let n = usize::try_from(cnt).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    crate::guard::mapped(iov.cast(), n * std::mem::size_of::<libc::iovec>())?;
    Ok(std::slice::from_raw_parts(iov, n))
}

/// Vectored I/O on LABIOS files gathers into one label; every buffer is
/// copied by the kernel (EFAULT for a bad one).
pub(crate) unsafe fn readv_fd(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    at: Option<i64>,
) -> Option<ssize_t> {
    let f = fdtable::get(fd)?;
    let deliver = |iov: &[libc::iovec], data: &[u8]| {
        let mut done = 0;
        for v in iov {
            let take = v.iov_len.min(data.len() - done);
            crate::guard::copy_out(v.iov_base.cast(), &data[done..done + take])?;
            done += take;
        }
        Ok(())
    };
    let read = iovecs(iov, cnt).and_then(|iov| {
        let total: usize = iov.iter().map(|v| v.iov_len).sum();
        io::read_bytes(fd, &f, total, at, |d| deliver(iov, d)).map(|d| d.len())
    });
    Some(rets(read))
}

pub(crate) unsafe fn writev_fd(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    at: Option<i64>,
) -> Option<ssize_t> {
    let f = fdtable::get(fd)?;
    let gather = |iov: &[libc::iovec]| -> Result<bytes::Bytes, Errno> {
        let mut buf = Vec::with_capacity(iov.iter().map(|v| v.iov_len).sum());
        for v in iov.iter().filter(|v| v.iov_len > 0) {
            buf.extend_from_slice(&crate::guard::copy_in(v.iov_base.cast(), v.iov_len)?);
        }
        Ok(buf.into())
    };
    let written = iovecs(iov, cnt).and_then(|iov| io::write_bytes(fd, &f, || gather(iov), at));
    Some(rets(written))
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    readv_fd(fd, iov, cnt, None).unwrap_or_else(|| {
        real!(readv: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, cnt)
    })
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    writev_fd(fd, iov, cnt, None).unwrap_or_else(|| {
        real!(writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, cnt)
    })
}

#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    readv_fd(fd, iov, cnt, Some(off)).unwrap_or_else(|| {
        real!(preadv: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t)(fd, iov, cnt, off)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    writev_fd(fd, iov, cnt, Some(off)).unwrap_or_else(|| {
        real!(pwritev: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t)(fd, iov, cnt, off)
    })
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    readv_fd(fd, iov, cnt, Some(off)).unwrap_or_else(|| {
        real!(preadv64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t)(fd, iov, cnt, off)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    writev_fd(fd, iov, cnt, Some(off)).unwrap_or_else(|| {
        real!(pwritev64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t)(
            fd, iov, cnt, off,
        )
    })
}

/// What `preadv2`/`pwritev2` flags mean for a LABIOS descriptor: none
/// changes where the bytes go (offset -1 is the file position, as for
/// `readv`); RWF_DSYNC and RWF_SYNC make the write durable before it
/// returns, RWF_HIPRI is a hint, RWF_NOWAIT cannot be kept (a label always
/// waits) and is EAGAIN, which its callers answer by calling again without
/// it; anything else (RWF_APPEND, unknown bits) is EOPNOTSUPP.
fn rwf_check(flags: c_int, write: bool) -> Result<bool, c_int> {
    let sync = libc::RWF_DSYNC | libc::RWF_SYNC;
    if flags & libc::RWF_NOWAIT != 0 {
        return Err(libc::EAGAIN);
    }
    let known = libc::RWF_HIPRI | if write { sync } else { 0 };
    if flags & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(flags & sync != 0)
}

unsafe fn rw2_fd(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
    write: bool,
) -> Option<ssize_t> {
    let f = fdtable::get(fd)?;
    let sync = match rwf_check(flags, write) {
        Ok(sync) => sync,
        Err(e) => return Some(rets(Err(e))),
    };
    let at = (off != -1).then_some(off);
    if !write {
        return readv_fd(fd, iov, cnt, at);
    }
    let n = writev_fd(fd, iov, cnt, at)?;
    if n >= 0 && sync {
        if let Err(e) = io::fsync(&f) {
            return Some(rets(Err(e)));
        }
    }
    Some(n)
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    rw2_fd(fd, iov, cnt, off, flags, false).unwrap_or_else(|| {
        real!(preadv2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t)(
            fd, iov, cnt, off, flags,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    rw2_fd(fd, iov, cnt, off, flags, false).unwrap_or_else(|| {
        real!(preadv64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t)(
            fd, iov, cnt, off, flags,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    rw2_fd(fd, iov, cnt, off, flags, true).unwrap_or_else(|| {
        real!(pwritev2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t)(
            fd, iov, cnt, off, flags,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    rw2_fd(fd, iov, cnt, off, flags, true).unwrap_or_else(|| {
        real!(pwritev64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t)(
            fd, iov, cnt, off, flags,
        )
    })
}

fn seek_fd(fd: c_int, off: i64, whence: c_int) -> Option<i64> {
    let f = fdtable::get(fd)?;
    Some(io::seek(fd, &f, off, whence).unwrap_or_else(|e| {
        set_errno(e);
        -1
    }))
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    seek_fd(fd, off, whence)
        .unwrap_or_else(|| real!(lseek: fn(c_int, off_t, c_int) -> off_t)(fd, off, whence))
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    seek_fd(fd, off, whence)
        .unwrap_or_else(|| real!(lseek64: fn(c_int, off64_t, c_int) -> off64_t)(fd, off, whence))
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    match fdtable::get(fd) {
        Some(f) => ret0(io::fsync(&f)),
        None => real!(fsync: fn(c_int) -> c_int)(fd),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    match fdtable::get(fd) {
        Some(f) => ret0(io::fsync(&f)),
        None => real!(fdatasync: fn(c_int) -> c_int)(fd),
    }
}

fn ftruncate_fd(fd: c_int, len: i64) -> Option<c_int> {
    let f = fdtable::get(fd)?;
    if f.dir || !f.writable() {
        return Some(ret(Err(libc::EINVAL)));
    }
    Some(ret0(io::ftruncate(&f, len)))
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    ftruncate_fd(fd, len).unwrap_or_else(|| real!(ftruncate: fn(c_int, off_t) -> c_int)(fd, len))
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    ftruncate_fd(fd, len)
        .unwrap_or_else(|| real!(ftruncate64: fn(c_int, off64_t) -> c_int)(fd, len))
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    match labios_path(path) {
        Ok(v) => ret0(io::truncate(&v, len)),
        Err(p) => real!(truncate: fn(*const c_char, off_t) -> c_int)(real_path(&p, path), len),
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    match labios_path(path) {
        Ok(v) => ret0(io::truncate(&v, len)),
        Err(p) => real!(truncate64: fn(*const c_char, off64_t) -> c_int)(real_path(&p, path), len),
    }
}

/// fallocate(2) on a LABIOS descriptor, checked in the kernel's order;
/// the modes are `Client::fallocate`'s.
fn allocate_fd(fd: c_int, mode: c_int, off: i64, len: i64) -> Option<Result<(), Errno>> {
    let f = fdtable::get(fd)?;
    Some((|| {
        let (Ok(off), Ok(len @ 1..)) = (u64::try_from(off), u64::try_from(len)) else {
            return Err(libc::EINVAL);
        };
        if !f.writable() {
            return Err(libc::EBADF);
        }
        if f.dir {
            return Err(libc::EISDIR);
        }
        io::fallocate(&f, mode, off, len)
    })())
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    match allocate_fd(fd, 0, off, len) {
        Some(r) => r.err().unwrap_or(0),
        None => real!(posix_fallocate: fn(c_int, off_t, off_t) -> c_int)(fd, off, len),
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    match allocate_fd(fd, 0, off, len) {
        Some(r) => r.err().unwrap_or(0),
        None => real!(posix_fallocate64: fn(c_int, off64_t, off64_t) -> c_int)(fd, off, len),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    match allocate_fd(fd, mode, off, len) {
        Some(r) => ret0(r),
        None => real!(fallocate: fn(c_int, c_int, off_t, off_t) -> c_int)(fd, mode, off, len),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    match allocate_fd(fd, mode, off, len) {
        Some(r) => ret0(r),
        None => real!(fallocate64: fn(c_int, c_int, off64_t, off64_t) -> c_int)(fd, mode, off, len),
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    if fdtable::is_labios(fd) {
        return 0;
    }
    real!(posix_fadvise: fn(c_int, off_t, off_t, c_int) -> c_int)(fd, off, len, advice)
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    off: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    if fdtable::is_labios(fd) {
        return 0;
    }
    real!(posix_fadvise64: fn(c_int, off64_t, off64_t, c_int) -> c_int)(fd, off, len, advice)
}

// ---- descriptors -----------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let fd = real!(dup: fn(c_int) -> c_int)(old);
    if fd >= 0 {
        if let Some(f) = fdtable::get(old) {
            fdtable::insert(fd, f);
        }
    }
    fd
}

unsafe fn dup_onto(old: c_int, new: c_int, real: impl FnOnce() -> c_int) -> c_int {
    if old == new {
        return real();
    }
    // Replacing the session's own descriptor would break LABIOS for the
    // whole process: refused, as the kernel refuses a number in flux.
    if !conn::bypass() && ownfds::is_own(new) {
        eprintln!("labios: dup2 onto descriptor {new}: it is LABIOS's own (EBUSY)");
        return ret(Err(libc::EBUSY));
    }
    let from = fdtable::get(old);
    let fd = real();
    if fd >= 0 {
        fdtable::remove(new);
        if let Some(f) = from {
            fdtable::insert(new, f);
        }
        crate::stdio::standard_fd_changed(new);
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    dup_onto(old, new, || {
        real!(dup2: fn(c_int, c_int) -> c_int)(old, new)
    })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    dup_onto(old, new, || {
        real!(dup3: fn(c_int, c_int, c_int) -> c_int)(old, new, flags)
    })
}

/// fcntl on a LABIOS descriptor: status flags are LABIOS's, locks always
/// succeed (LABIOS has no byte-range locks; README "Interception"), the rest
/// (close-on-exec, duplication) is the memfd's.
unsafe fn fcntl_fd(fd: c_int, cmd: c_int, arg: c_ulong, real: impl Fn(c_ulong) -> c_int) -> c_int {
    let Some(f) = fdtable::get(fd) else {
        return real(arg);
    };
    use std::sync::atomic::Ordering::Relaxed;
    match cmd {
        libc::F_GETFL => f.flags.load(Relaxed) & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
        libc::F_SETFL => {
            let settable = libc::O_APPEND | libc::O_NONBLOCK;
            let old = f.flags.load(Relaxed);
            f.flags
                .store((old & !settable) | (arg as c_int & settable), Relaxed);
            0
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let new = real(arg);
            if new >= 0 {
                fdtable::insert(new, f);
            }
            new
        }
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => ret0(locks::fcntl(fd, &f, cmd, arg as *mut libc::flock)),
        _ => real(arg),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_fd(fd, cmd, arg, |a| {
        real!(fcntl: fn(c_int, c_int, c_ulong) -> c_int)(fd, cmd, a)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_fd(fd, cmd, arg, |a| {
        real!(fcntl64: fn(c_int, c_int, c_ulong) -> c_int)(fd, cmd, a)
    })
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    if let Some(f) = fdtable::get(fd) {
        return ret0(locks::flock(fd, &f, op));
    }
    real!(flock: fn(c_int, c_int) -> c_int)(fd, op)
}

/// glibc's lockf calls fcntl inside libc, where it is not intercepted.
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    if let Some(f) = fdtable::get(fd) {
        return ret0(locks::lockf(fd, &f, cmd, len));
    }
    real!(lockf: fn(c_int, c_int, off_t) -> c_int)(fd, cmd, len)
}

#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int {
    if let Some(f) = fdtable::get(fd) {
        return ret0(locks::lockf(fd, &f, cmd, len));
    }
    real!(lockf64: fn(c_int, c_int, off64_t) -> c_int)(fd, cmd, len)
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if fdtable::is_labios(fd) {
        return ret(Err(libc::ENOTTY));
    }
    real!(ioctl: fn(c_int, c_ulong, *mut c_void) -> c_int)(fd, req, arg)
}

/// LABIOS files cannot be mapped; programs that try fall back to read.
/// A LABIOS file cannot be mapped under `labios run` (its pages would
/// have to come from the kernel): ENODEV, which programs fall back from,
/// and once per process a word on stderr pointing to `labios mount`.
fn no_mapping(fd: c_int) -> *mut c_void {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let path = fdtable::get(fd)
            .map(|f| f.path.full.clone())
            .unwrap_or_default();
        eprintln!(
            "labios: mmap of {path} is not supported under labios run (ENODEV); \
             programs that map files run on `labios mount`"
        );
    });
    set_errno(libc::ENODEV);
    libc::MAP_FAILED
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 && fdtable::is_labios(fd) {
        return no_mapping(fd);
    }
    real!(mmap: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void)(
        addr, len, prot, flags, fd, off,
    )
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 && fdtable::is_labios(fd) {
        return no_mapping(fd);
    }
    real!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void)(
        addr, len, prot, flags, fd, off,
    )
}

/// Between two LABIOS files a copy of labels (the bytes go from worker to
/// worker); between LABIOS and elsewhere EXDEV, which makes cp and friends
/// copy with read and write.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    match (fdtable::get(fd_in), fdtable::get(fd_out)) {
        (Some(a), Some(b)) => {
            return rets(io::copy_range(
                (fd_in, &a, off_in),
                (fd_out, &b, off_out),
                len,
                flags,
            ))
        }
        (None, None) => {}
        _ => {
            set_errno(libc::EXDEV);
            return -1;
        }
    }
    real!(copy_file_range: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t)(
        fd_in, off_in, fd_out, off_out, len, flags,
    )
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, fd_in: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if fdtable::is_labios(out) || fdtable::is_labios(fd_in) {
        set_errno(libc::EINVAL);
        return -1;
    }
    real!(sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t)(out, fd_in, off, n)
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    fd_in: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if fdtable::is_labios(out) || fdtable::is_labios(fd_in) {
        set_errno(libc::EINVAL);
        return -1;
    }
    real!(sendfile64: fn(c_int, c_int, *mut off64_t, size_t) -> ssize_t)(out, fd_in, off, n)
}

// ---- namespace -------------------------------------------------------------

/// What a path's last component is to the kernel, trailing slashes aside.
#[derive(PartialEq)]
enum Last {
    Name,
    Dot,
    DotDot,
}

/// The last component of a path that [`labios_path_at`] accepted (so not
/// null). Normalizing `d/e/.` gives `d/e`, but removing or renaming it
/// must not act on `d/e`: the kernel refuses a last component `.` or
/// `..` for these calls, and so does LABIOS.
unsafe fn last_component(path: *const c_char) -> Last {
    let bytes = crate::guard::c_str(path).unwrap_or_default();
    let trimmed = match bytes.iter().rposition(|&b| b != b'/') {
        Some(end) => &bytes[..=end],
        None => return Last::Name,
    };
    match trimmed.rsplit(|&b| b == b'/').next() {
        Some(b".") => Last::Dot,
        Some(b"..") => Last::DotDot,
        _ => Last::Name,
    }
}

/// unlink (`dir` false) or rmdir (`dir` true) of a LABIOS path, with the
/// kernel's answers for a last component `.` or `..`: rmdir EINVAL and
/// ENOTEMPTY, unlink EISDIR.
unsafe fn remove_at(v: &Vpath, path: *const c_char, dir: bool) -> c_int {
    match (last_component(path), dir) {
        (Last::Name, _) => ret0(io::on_name(
            v,
            |p| io::remove(p, dir),
            |host| {
                done(if dir {
                    real!(rmdir: fn(*const c_char) -> c_int)(host.as_ptr())
                } else {
                    real!(unlink: fn(*const c_char) -> c_int)(host.as_ptr())
                })
            },
        )),
        (Last::Dot, true) => ret(Err(libc::EINVAL)),
        (Last::DotDot, true) => ret(Err(libc::ENOTEMPTY)),
        (_, false) => ret(Err(libc::EISDIR)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    match labios_path(path) {
        Ok(v) => remove_at(&v, path, false),
        Err(p) => real!(unlink: fn(*const c_char) -> c_int)(real_path(&p, path)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    match labios_path_at(dirfd, path) {
        Ok(v) => remove_at(&v, path, flags & libc::AT_REMOVEDIR != 0),
        Err(p) => real!(unlinkat: fn(c_int, *const c_char, c_int) -> c_int)(
            dirfd,
            real_path(&p, path),
            flags,
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    match labios_path(path) {
        Ok(v) => remove_at(&v, path, true),
        Err(p) => real!(rmdir: fn(*const c_char) -> c_int)(real_path(&p, path)),
    }
}

/// mkdir of a LABIOS path, through links among its directories.
fn make_dir(v: &Vpath, mode: mode_t) -> Result<(), Errno> {
    io::on_name(
        v,
        |p| io::mkdir(p, mode),
        |host| unsafe {
            done(real!(mkdir: fn(*const c_char, mode_t) -> c_int)(
                host.as_ptr(),
                mode,
            ))
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    match labios_path(path) {
        Ok(v) => ret0(make_dir(&v, mode)),
        Err(p) => real!(mkdir: fn(*const c_char, mode_t) -> c_int)(real_path(&p, path), mode),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    match labios_path_at(dirfd, path) {
        Ok(v) => ret0(make_dir(&v, mode)),
        Err(p) => real!(mkdirat: fn(c_int, *const c_char, mode_t) -> c_int)(
            dirfd,
            real_path(&p, path),
            mode,
        ),
    }
}

/// Both sides in LABIOS: a LABIOS rename. One side only: EXDEV, as between
/// two file systems, so that mv copies.
unsafe fn rename_at(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    how: RenameHow,
    real: impl FnOnce(*const c_char, *const c_char) -> c_int,
) -> c_int {
    match (labios_path_at(olddir, old), labios_path_at(newdir, new)) {
        // The kernel's answer when either last component is `.` or `..`.
        (Ok(_), Ok(_))
            if last_component(old) != Last::Name || last_component(new) != Last::Name =>
        {
            ret(Err(libc::EBUSY))
        }
        (Ok(a), Ok(b)) => ret0(io::on_names(&a, &b, |a, b| io::rename_as(a, b, how))),
        (Err(a), Err(b)) => real(real_path(&a, old), real_path(&b, new)),
        _ => ret(Err(across(old, new))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    rename_at(
        libc::AT_FDCWD,
        old,
        libc::AT_FDCWD,
        new,
        RenameHow::Replace,
        |a, b| real!(rename: fn(*const c_char, *const c_char) -> c_int)(a, b),
    )
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
) -> c_int {
    rename_at(olddir, old, newdir, new, RenameHow::Replace, |a, b| {
        real!(renameat: fn(c_int, *const c_char, c_int, *const c_char) -> c_int)(
            olddir, a, newdir, b,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    let how = match flags {
        0 => RenameHow::Replace,
        libc::RENAME_NOREPLACE => RenameHow::NoReplace,
        libc::RENAME_EXCHANGE => RenameHow::Exchange,
        // Both, or RENAME_WHITEOUT (overlayfs's, for root only): EINVAL,
        // as ext4 says to the first and to a user.
        _ => {
            if let (Ok(_), _) | (_, Ok(_)) =
                (labios_path_at(olddir, old), labios_path_at(newdir, new))
            {
                return ret(Err(libc::EINVAL));
            }
            RenameHow::Replace
        }
    };
    rename_at(olddir, old, newdir, new, how, |a, b| {
        real!(renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int)(
            olddir, a, newdir, b, flags,
        )
    })
}

/// access on a LABIOS path ([`io::access`]); `real` answers for a host
/// path a link leads to.
unsafe fn access_at(
    v: &Vpath,
    mode: c_int,
    flags: c_int,
    real: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    let effective = flags & libc::AT_EACCESS != 0;
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    match io::access(v, mode, effective, nofollow) {
        Ok(Some(host)) => real(host.as_ptr()),
        other => ret0(other.map(|_| ())),
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    let real = |p| real!(access: fn(*const c_char, c_int) -> c_int)(p, mode);
    match labios_path(path) {
        Ok(v) => access_at(&v, mode, 0, real),
        Err(p) => real(real_path(&p, path)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    let real = |p| real!(euidaccess: fn(*const c_char, c_int) -> c_int)(p, mode);
    match labios_path(path) {
        Ok(v) => access_at(&v, mode, libc::AT_EACCESS, real),
        Err(p) => real(real_path(&p, path)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    let real = |p| real!(eaccess: fn(*const c_char, c_int) -> c_int)(p, mode);
    match labios_path(path) {
        Ok(v) => access_at(&v, mode, libc::AT_EACCESS, real),
        Err(p) => real(real_path(&p, path)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    match labios_path_at(dirfd, path) {
        Ok(v) => access_at(&v, mode, flags, |p| {
            real!(faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int)(
                libc::AT_FDCWD,
                p,
                mode,
                flags,
            )
        }),
        Err(p) => real!(faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int)(
            dirfd,
            real_path(&p, path),
            mode,
            flags,
        ),
    }
}

// Modes, owners and times: kept by the inventory, changed as the server
// allows (README "Permissions").

/// A chown's user and group; -1 leaves one unchanged.
fn owner_attr(uid: libc::uid_t, gid: libc::gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != libc::uid_t::MAX).then_some(uid),
        gid: (gid != libc::gid_t::MAX).then_some(gid),
        ..SetAttr::default()
    }
}

fn mode_attr(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    }
}

/// A time of seconds and nanoseconds; before the epoch is EINVAL (LABIOS
/// keeps times as nanoseconds since it).
fn time_at(sec: i64, nsec: i64) -> Result<SetTime, Errno> {
    let (Ok(sec), Ok(nsec)) = (u64::try_from(sec), u64::try_from(nsec)) else {
        return Err(libc::EINVAL);
    };
    if nsec >= 1_000_000_000 {
        return Err(libc::EINVAL);
    }
    sec.checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(nsec))
        .map(SetTime::At)
        .ok_or(libc::EINVAL)
}

/// Both times now: what a NULL `times` means to every call below.
fn now_attr() -> SetAttr {
    SetAttr {
        atime: Some(SetTime::Now),
        mtime: Some(SetTime::Now),
        ..SetAttr::default()
    }
}

/// utimensat's two timespecs, with UTIME_NOW and UTIME_OMIT.
unsafe fn timespec_attr(times: *const libc::timespec) -> Result<SetAttr, Errno> {
    if times.is_null() {
        return Ok(now_attr());
    }
    let one = |t: &libc::timespec| match t.tv_nsec {
        libc::UTIME_OMIT => Ok(None),
        libc::UTIME_NOW => Ok(Some(SetTime::Now)),
        n => time_at(t.tv_sec, n).map(Some),
    };
    let t = std::slice::from_raw_parts(times, 2);
    Ok(SetAttr {
        atime: one(&t[0])?,
        mtime: one(&t[1])?,
        ..SetAttr::default()
    })
}

/// utimes' two timevals.
unsafe fn timeval_attr(times: *const libc::timeval) -> Result<SetAttr, Errno> {
    if times.is_null() {
        return Ok(now_attr());
    }
    let t = std::slice::from_raw_parts(times, 2);
    let one = |t: &libc::timeval| {
        if t.tv_usec >= 1_000_000 {
            return Err(libc::EINVAL);
        }
        time_at(t.tv_sec, t.tv_usec.saturating_mul(1000)).map(Some)
    };
    Ok(SetAttr {
        atime: one(&t[0])?,
        mtime: one(&t[1])?,
        ..SetAttr::default()
    })
}

unsafe fn utimbuf_attr(times: *const libc::utimbuf) -> Result<SetAttr, Errno> {
    if times.is_null() {
        return Ok(now_attr());
    }
    let t = &*times;
    Ok(SetAttr {
        atime: Some(time_at(t.actime, 0)?),
        mtime: Some(time_at(t.modtime, 0)?),
        ..SetAttr::default()
    })
}

/// The entry a LABIOS descriptor names.
fn set_attr_fd(fd: c_int, attr: Result<SetAttr, Errno>) -> Result<(), Errno> {
    let f = fdtable::get(fd).ok_or(libc::EBADF)?;
    io::set_attr_fd(&f, attr?)
}

macro_rules! attr_path {
    ($name:ident ( $($a:ident : $t:ty),* ), $follow:expr, $attr:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> c_int {
            match labios_path(path) {
                Ok(v) => ret0($attr.and_then(|attr| io::set_attr(v, $follow, attr))),
                Err(p) => real!($name: fn(*const c_char $(, $t)*) -> c_int)(real_path(&p, path) $(, $a)*),
            }
        }
    };
}

macro_rules! attr_at {
    ($name:ident ( $($a:ident : $t:ty),* ), $attr:expr, $flags:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char $(, $a: $t)*) -> c_int {
            // A NULL path (utimensat), or an empty one with AT_EMPTY_PATH,
            // names the descriptor itself.
            let itself = path.is_null() || (*path == 0 && $flags & libc::AT_EMPTY_PATH != 0);
            if itself && fdtable::is_labios(dirfd) {
                return ret0(set_attr_fd(dirfd, $attr));
            }
            match labios_path_at(dirfd, path) {
                Ok(v) => {
                    let follow = $flags & libc::AT_SYMLINK_NOFOLLOW == 0;
                    ret0($attr.and_then(|attr| io::set_attr(v, follow, attr)))
                }
                Err(p) => real!($name: fn(c_int, *const c_char $(, $t)*) -> c_int)(
                    dirfd, real_path(&p, path) $(, $a)*
                ),
            }
        }
    };
}

macro_rules! attr_fd {
    ($name:ident ( $($a:ident : $t:ty),* ), $attr:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int $(, $a: $t)*) -> c_int {
            if fdtable::is_labios(fd) {
                return ret0(set_attr_fd(fd, $attr));
            }
            real!($name: fn(c_int $(, $t)*) -> c_int)(fd $(, $a)*)
        }
    };
}

attr_path!(chmod(mode: mode_t), true, Ok(mode_attr(mode)));
attr_path!(chown(uid: libc::uid_t, gid: libc::gid_t), true, Ok(owner_attr(uid, gid)));
attr_path!(lchown(uid: libc::uid_t, gid: libc::gid_t), false, Ok(owner_attr(uid, gid)));
attr_path!(utime(times: *const libc::utimbuf), true, utimbuf_attr(times));
attr_path!(utimes(times: *const libc::timeval), true, timeval_attr(times));
attr_path!(lutimes(times: *const libc::timeval), false, timeval_attr(times));
attr_at!(fchmodat(mode: mode_t, flags: c_int), Ok(mode_attr(mode)), flags);
attr_at!(
    fchownat(uid: libc::uid_t, gid: libc::gid_t, flags: c_int),
    Ok(owner_attr(uid, gid)),
    flags
);
attr_at!(
    utimensat(times: *const libc::timespec, flags: c_int),
    timespec_attr(times),
    flags
);
attr_fd!(fchmod(mode: mode_t), Ok(mode_attr(mode)));
attr_fd!(fchown(uid: libc::uid_t, gid: libc::gid_t), Ok(owner_attr(uid, gid)));
attr_fd!(futimens(times: *const libc::timespec), timespec_attr(times));
attr_fd!(futimes(times: *const libc::timeval), timeval_attr(times));

/// A C string in `buf` (of `cap` bytes), or in fresh malloc'd memory when
/// `buf` is NULL, as realpath and getcwd return theirs.
unsafe fn give_string(s: &str, buf: *mut c_char, cap: usize) -> Result<*mut c_char, Errno> {
    let out = if buf.is_null() {
        libc::malloc(s.len() + 1).cast::<c_char>()
    } else if cap < s.len() + 1 {
        return Err(libc::ERANGE);
    } else {
        buf
    };
    if out.is_null() {
        return Err(libc::ENOMEM);
    }
    std::ptr::copy_nonoverlapping(s.as_ptr().cast(), out, s.len());
    *out.add(s.len()) = 0;
    Ok(out)
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    match labios_path(path) {
        Ok(v) => match io::exists(&v)
            .and_then(|()| give_string(&v.full, resolved, libc::PATH_MAX as usize))
        {
            Ok(p) => p,
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        },
        Err(p) => real!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char)(
            real_path(&p, path),
            resolved,
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    match labios_path(path) {
        Ok(v) => ret0(io::stat(&v).and_then(|m| {
            if m.kind != labios_store::FileKind::Dir {
                return Err(libc::ENOTDIR);
            }
            mount::set_cwd(Some(v.full));
            Ok(())
        })),
        Err(p) => {
            let r = real!(chdir: fn(*const c_char) -> c_int)(real_path(&p, path));
            if r == 0 {
                mount::set_cwd(None);
            }
            r
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    match fdtable::get(fd) {
        Some(f) if f.dir => {
            mount::set_cwd(Some(f.path.full.clone()));
            0
        }
        Some(_) => ret(Err(libc::ENOTDIR)),
        None => {
            let r = real!(fchdir: fn(c_int) -> c_int)(fd);
            if r == 0 {
                mount::set_cwd(None);
            }
            r
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    match mount::cwd() {
        Some(c) => give_string(&c, buf, if buf.is_null() { usize::MAX } else { size })
            .unwrap_or_else(|e| {
                set_errno(e);
                std::ptr::null_mut()
            }),
        None => real!(getcwd: fn(*mut c_char, size_t) -> *mut c_char)(buf, size),
    }
}

// ---- extended attributes ---------------------------------------------------
// A LABIOS entry keeps its `user.` attributes (see `xattrs`); a path or
// descriptor that is not LABIOS's goes to libc.

/// An attribute call on `path`: on the LABIOS entry it names (or, when
/// `follow`, leads to) with `on`, else libc's `real` with the host path.
unsafe fn xattr_at(
    path: *const c_char,
    follow: bool,
    on: impl FnOnce(&FileMeta) -> Result<usize, Errno>,
    real: impl FnOnce(*const c_char) -> ssize_t,
) -> ssize_t {
    match labios_path(path) {
        Err(p) => real(real_path(&p, path)),
        Ok(v) => match xattrs::entry(v, follow) {
            Ok(Ok(meta)) => rets(on(&meta)),
            Ok(Err(host)) => real(host.as_ptr()),
            Err(e) => rets(Err(e)),
        },
    }
}

/// An attribute call on descriptor `fd`: on the LABIOS entry it opened
/// (by id, whatever its path names now) with `on`, else libc's `real`.
unsafe fn xattr_fd(
    fd: c_int,
    on: impl FnOnce(&FileMeta) -> Result<usize, Errno>,
    real: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let Some(f) = fdtable::get(fd) else {
        return real();
    };
    rets(io::fstat(&f).and_then(|m| on(&m.ok_or(libc::ENOENT)?)))
}

/// The attribute name a caller passed, checked as the kernel checks it
/// before any file system sees it.
unsafe fn xattr_name(name: *const c_char) -> Result<String, Errno> {
    let bytes = guard::c_str(name)?;
    // LABIOS keeps names as text: a name that is not UTF-8 is refused.
    let name = std::str::from_utf8(bytes).map_err(|_| libc::ENOTSUP)?;
    match xattr::bad_name(name) {
        Some(e) => Err(e),
        None => Ok(name.to_string()),
    }
}

/// getxattr's and listxattr's answer: the size when asked for it (`size`
/// 0), ERANGE when `buf` is too small, the bytes otherwise.
unsafe fn give_xattr(bytes: &[u8], buf: *mut c_void, size: size_t) -> Result<usize, Errno> {
    if size == 0 {
        return Ok(bytes.len());
    }
    if size < bytes.len() {
        return Err(libc::ERANGE);
    }
    guard::copy_out(buf.cast::<u8>(), bytes)?;
    Ok(bytes.len())
}

unsafe fn get_xattr(
    meta: &FileMeta,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> Result<usize, Errno> {
    let found = xattrs::get(meta, &xattr_name(name)?)?;
    give_xattr(&found, value, size)
}

/// setxattr (`value` with its size) or removexattr (`None`): the flags,
/// the name and the size are checked, in the kernel's order, before the
/// value is read from the program's memory.
unsafe fn set_xattr(
    meta: &FileMeta,
    name: *const c_char,
    value: Option<(*const c_void, size_t)>,
    flags: c_int,
) -> Result<usize, Errno> {
    if flags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
        return Err(libc::EINVAL);
    }
    let name = xattr_name(name)?;
    let value = match value {
        Some((_, size)) if size > xattr::SIZE_MAX => return Err(libc::E2BIG),
        Some((_, 0)) => Some(Vec::new()),
        Some((v, size)) => Some(guard::copy_in(v.cast::<u8>(), size)?),
        None => None,
    };
    xattrs::set(meta, &name, value, flags).map(|()| 0)
}

unsafe fn list_xattr(meta: &FileMeta, list: *mut c_char, size: size_t) -> Result<usize, Errno> {
    give_xattr(&xattrs::list(meta)?, list.cast(), size)
}

/// An attribute call by path (`follow`: the call, else its `l` variant):
/// `$on` with the entry's metadata `$m`, or libc's own function.
macro_rules! xattr_path {
    ($name:ident, $follow:expr, ($($a:ident : $t:ty),*) -> $ret:ty, |$m:ident| $on:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> $ret {
            xattr_at(path, $follow, |$m| $on, |p| {
                real!($name: fn(*const c_char $(, $t)*) -> $ret)(p $(, $a)*) as ssize_t
            }) as $ret
        }
    };
}

/// The `f` variant of an attribute call: by descriptor.
macro_rules! xattr_fd {
    ($name:ident, ($($a:ident : $t:ty),*) -> $ret:ty, |$m:ident| $on:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int $(, $a: $t)*) -> $ret {
            xattr_fd(fd, |$m| $on, || {
                real!($name: fn(c_int $(, $t)*) -> $ret)(fd $(, $a)*) as ssize_t
            }) as $ret
        }
    };
}

xattr_path!(getxattr, true, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t,
    |m| get_xattr(m, name, value, size));
xattr_path!(lgetxattr, false, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t,
    |m| get_xattr(m, name, value, size));
xattr_fd!(fgetxattr, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t,
    |m| get_xattr(m, name, value, size));
xattr_path!(setxattr, true,
    (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int,
    |m| set_xattr(m, name, Some((value, size)), flags));
xattr_path!(lsetxattr, false,
    (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int,
    |m| set_xattr(m, name, Some((value, size)), flags));
xattr_fd!(fsetxattr,
    (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int,
    |m| set_xattr(m, name, Some((value, size)), flags));
xattr_path!(removexattr, true, (name: *const c_char) -> c_int, |m| set_xattr(m, name, None, 0));
xattr_path!(lremovexattr, false, (name: *const c_char) -> c_int, |m| set_xattr(m, name, None, 0));
xattr_fd!(fremovexattr, (name: *const c_char) -> c_int, |m| set_xattr(m, name, None, 0));
xattr_path!(listxattr, true, (list: *mut c_char, size: size_t) -> ssize_t,
    |m| list_xattr(m, list, size));
xattr_path!(llistxattr, false, (list: *mut c_char, size: size_t) -> ssize_t,
    |m| list_xattr(m, list, size));
xattr_fd!(flistxattr, (list: *mut c_char, size: size_t) -> ssize_t, |m| list_xattr(m, list, size));
