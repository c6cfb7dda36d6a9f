//! stdio on LABIOS files: `fopen` and `fdopen` return a glibc stream made
//! with `fopencookie` whose reads, writes and seeks are the LABIOS calls of
//! [`crate::io`]. fread, fwrite, fgets, fprintf, getc, fseek, ftell,
//! fflush and fclose then work through glibc's own buffering unchanged.

use crate::conn;
use crate::fdtable;
use crate::io;
use crate::mount::{self, Target};
use crate::posix::set_errno;
use crate::real::real;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Stream -> descriptor, for `fileno`.
static STREAMS: Mutex<BTreeMap<usize, c_int>> = parking_lot::const_mutex(BTreeMap::new());
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Names its stream; the descriptor is looked up in [`STREAMS`], so that a
/// stream detached from its descriptor (see [`standard_fd_changed`]) stops
/// touching it.
struct Cookie {
    stream: usize,
}

/// The descriptor and open file behind a cookie, while it has one.
unsafe fn cookie_file(c: *mut c_void) -> Option<(c_int, std::sync::Arc<fdtable::OpenFile>)> {
    let c = &*c.cast::<Cookie>();
    let fd = STREAMS.lock().get(&c.stream).copied()?;
    Some((fd, fdtable::get(fd)?))
}

fn errno_out(e: c_int) -> isize {
    set_errno(e);
    -1
}

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: usize) -> isize {
    let Some((fd, f)) = cookie_file(c) else {
        return errno_out(libc::EBADF);
    };
    let slice = std::slice::from_raw_parts_mut(buf.cast::<u8>(), n);
    io::read(fd, &f, slice, None).map_or_else(errno_out, |n| n as isize)
}

unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: usize) -> isize {
    let Some((fd, f)) = cookie_file(c) else {
        return errno_out(libc::EBADF);
    };
    let slice = std::slice::from_raw_parts(buf.cast::<u8>(), n);
    io::write(fd, &f, slice, None).map_or_else(errno_out, |n| n as isize)
}

unsafe extern "C" fn cookie_seek(c: *mut c_void, pos: *mut i64, whence: c_int) -> c_int {
    let Some((fd, f)) = cookie_file(c) else {
        set_errno(libc::EBADF);
        return -1;
    };
    match io::seek(fd, &f, *pos, whence) {
        Ok(p) => {
            *pos = p;
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    let c = Box::from_raw(c.cast::<Cookie>());
    let Some(fd) = STREAMS.lock().remove(&c.stream) else {
        return 0;
    };
    OPEN.fetch_sub(1, Ordering::AcqRel);
    crate::posix::ret(io::close(fd).map(|()| 0))
}

/// open(2) flags of an fopen mode string.
fn flags_of(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut flags = match (mode.first()?, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if mode.contains(&b'x') {
        flags |= libc::O_EXCL;
    }
    if mode.contains(&b'e') {
        flags |= libc::O_CLOEXEC;
    }
    Some(flags)
}

/// A stream over LABIOS descriptor `fd`; on failure the descriptor stays
/// the caller's.
unsafe fn stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let cookie = Box::into_raw(Box::new(Cookie { stream: 0 }));
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    let f = fopencookie(cookie.cast(), mode, io);
    if f.is_null() {
        drop(Box::from_raw(cookie));
        return f;
    }
    (*cookie).stream = f as usize;
    STREAMS.lock().insert(f as usize, fd);
    OPEN.fetch_add(1, Ordering::AcqRel);
    f
}

unsafe fn open_stream(
    path: *const c_char,
    mode: *const c_char,
    real: impl FnOnce(*const c_char) -> *mut libc::FILE,
) -> *mut libc::FILE {
    if mode.is_null() {
        return real(path);
    }
    match mount::resolve(path) {
        Target::Labios(_) if conn::bypass() => real(path),
        Target::Labios(v) => {
            let mode_bytes = match crate::guard::c_str(mode) {
                Ok(m) => m,
                Err(e) => {
                    set_errno(e);
                    return std::ptr::null_mut();
                }
            };
            let Some(flags) = flags_of(mode_bytes) else {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            };
            match io::open(v, flags, 0o666) {
                Ok(io::Opened::Labios(fd)) => {
                    let f = stream(fd, mode);
                    if f.is_null() {
                        let _ = io::close(fd);
                    }
                    f
                }
                Ok(io::Opened::Host(p)) => real(p.as_ptr()),
                Err(e) => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            }
        }
        Target::Real(p) => real(p.as_ref().map_or(path, |c| c.as_ptr())),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    open_stream(path, mode, |p| {
        real!(fopen: fn(*const c_char, *const c_char) -> *mut libc::FILE)(p, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    open_stream(path, mode, |p| {
        real!(fopen64: fn(*const c_char, *const c_char) -> *mut libc::FILE)(p, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if fdtable::is_labios(fd) {
        return stream(fd, mode);
    }
    real!(fdopen: fn(c_int, *const c_char) -> *mut libc::FILE)(fd, mode)
}

fn fd_of(f: *mut libc::FILE) -> Option<c_int> {
    if OPEN.load(Ordering::Acquire) == 0 {
        return None;
    }
    STREAMS.lock().get(&(f as usize)).copied()
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    fd_of(f).unwrap_or_else(|| real!(fileno: fn(*mut libc::FILE) -> c_int)(f))
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
    fd_of(f).unwrap_or_else(|| real!(fileno_unlocked: fn(*mut libc::FILE) -> c_int)(f))
}

/// glibc's own standard streams, kept while LABIOS streams replace them.
static ORIGINAL: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

unsafe fn slot(fd: c_int) -> Option<*mut *mut libc::FILE> {
    match fd {
        0 => Some(&raw mut stdin),
        1 => Some(&raw mut stdout),
        2 => Some(&raw mut stderr),
        _ => None,
    }
}

/// Standard descriptor `fd` now refers to another file (dup2, or the
/// descriptors a program starts with). A program writes its standard
/// streams through glibc's internal calls, which no interposition sees, so
/// while the descriptor is a LABIOS file its stream is a LABIOS stream; when
/// it is not any more, glibc's own stream comes back.
pub fn standard_fd_changed(fd: c_int) {
    unsafe {
        let Some(slot) = slot(fd) else { return };
        let current = *slot;
        let ours = fd_of(current).is_some();
        if fdtable::is_labios(fd) {
            if ours {
                return;
            }
            let mode = if fd == 0 { c"r" } else { c"w" };
            let f = stream(fd, mode.as_ptr());
            if f.is_null() {
                return;
            }
            if fd == 2 {
                libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
            }
            ORIGINAL[fd as usize].store(current as usize, Ordering::Release);
            *slot = f;
        } else if ours {
            let original = ORIGINAL[fd as usize].load(Ordering::Acquire);
            if original != 0 {
                libc::fflush(current);
                if STREAMS.lock().remove(&(current as usize)).is_some() {
                    OPEN.fetch_sub(1, Ordering::AcqRel);
                }
                *slot = original as *mut libc::FILE;
            }
        }
    }
}

/// The start of glibc's `struct _IO_FILE` (a stable ABI): its flags and
/// its read buffer.
#[repr(C)]
struct FileHead {
    flags: c_int,
    read_ptr: *mut c_char,
    read_end: *mut c_char,
}

const IO_UNBUFFERED: c_int = 0x0002;
const IO_EOF_SEEN: c_int = 0x0010;
const IO_ERR_SEEN: c_int = 0x0020;
const IO_CURRENTLY_PUTTING: c_int = 0x0800;

/// fread on an unbuffered LABIOS stream, as one read of the whole request
/// (as glibc does for an unbuffered file stream). Through a cookie glibc
/// reads such a stream a byte per call, one LABIOS round trip each: `od
/// -j N -N M`, which unbuffers its input, took minutes to skip 300 KB.
/// `None` for every other stream, or one with bytes pushed back or being
/// written, which glibc's own fread serves.
unsafe fn unbuffered_read(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    f: *mut libc::FILE,
) -> Option<usize> {
    let fd = fd_of(f)?;
    let head = &mut *f.cast::<FileHead>();
    if head.flags & IO_UNBUFFERED == 0
        || head.flags & IO_CURRENTLY_PUTTING != 0
        || head.read_ptr < head.read_end
    {
        return None;
    }
    let open = fdtable::get(fd)?;
    let total = size.checked_mul(n)?;
    if total == 0 {
        return Some(0);
    }
    // As glibc's fread, which writes to `ptr` unchecked.
    let buf = std::slice::from_raw_parts_mut(ptr.cast::<u8>(), total);
    let mut got = 0;
    while got < total {
        match io::read(fd, &open, &mut buf[got..], None) {
            Ok(0) => {
                head.flags |= IO_EOF_SEEN;
                break;
            }
            Ok(k) => got += k,
            Err(e) => {
                set_errno(e);
                head.flags |= IO_ERR_SEEN;
                break;
            }
        }
    }
    Some(got / size)
}

#[no_mangle]
pub unsafe extern "C" fn fread(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    f: *mut libc::FILE,
) -> usize {
    if let Some(k) = unbuffered_read(ptr, size, n, f) {
        return k;
    }
    real!(fread: fn(*mut c_void, usize, usize, *mut libc::FILE) -> usize)(ptr, size, n, f)
}

#[no_mangle]
pub unsafe extern "C" fn fread_unlocked(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    f: *mut libc::FILE,
) -> usize {
    if let Some(k) = unbuffered_read(ptr, size, n, f) {
        return k;
    }
    real!(fread_unlocked: fn(*mut c_void, usize, usize, *mut libc::FILE) -> usize)(ptr, size, n, f)
}

/// `_FORTIFY_SOURCE`'s fread: `len` is the size of the buffer at `ptr`.
#[no_mangle]
pub unsafe extern "C" fn __fread_chk(
    ptr: *mut c_void,
    len: usize,
    size: usize,
    n: usize,
    f: *mut libc::FILE,
) -> usize {
    if size.checked_mul(n).is_some_and(|t| t <= len) {
        if let Some(k) = unbuffered_read(ptr, size, n, f) {
            return k;
        }
    }
    real!(__fread_chk: fn(*mut c_void, usize, usize, usize, *mut libc::FILE) -> usize)(
        ptr, len, size, n, f,
    )
}

#[no_mangle]
pub unsafe extern "C" fn __fread_unlocked_chk(
    ptr: *mut c_void,
    len: usize,
    size: usize,
    n: usize,
    f: *mut libc::FILE,
) -> usize {
    if size.checked_mul(n).is_some_and(|t| t <= len) {
        if let Some(k) = unbuffered_read(ptr, size, n, f) {
            return k;
        }
    }
    real!(__fread_unlocked_chk: fn(*mut c_void, usize, usize, usize, *mut libc::FILE) -> usize)(
        ptr, len, size, n, f,
    )
}
