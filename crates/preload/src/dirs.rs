//! Directory streams over LABIOS directories. A `DIR *` handed out here
//! points at a [`Stream`]; libc never sees it, because every call that
//! takes one (readdir, closedir, dirfd, ...) is intercepted too.

use crate::conn;
use crate::fdtable;
use crate::io::{self, Errno};
use crate::mount::{self, Target};
use crate::posix::set_errno;
use crate::real::real;
use labios_store::FileKind;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_long};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Stream {
    fd: c_int,
    entries: Vec<(CString, u8, u64)>,
    pos: usize,
    ent: libc::dirent64,
}

static STREAMS: Mutex<BTreeSet<usize>> = parking_lot::const_mutex(BTreeSet::new());
/// Streams open: while 0, readdir on the program's own streams takes no lock.
static OPEN: AtomicUsize = AtomicUsize::new(0);

fn ours(dirp: *mut libc::DIR) -> Option<&'static mut Stream> {
    if OPEN.load(Ordering::Acquire) == 0 || dirp.is_null() {
        return None;
    }
    if !STREAMS.lock().contains(&(dirp as usize)) {
        return None;
    }
    Some(unsafe { &mut *dirp.cast::<Stream>() })
}

/// A stream over the LABIOS directory open at `fd` (which it then owns).
fn stream(fd: c_int) -> Result<*mut libc::DIR, Errno> {
    let f = fdtable::get(fd).ok_or(libc::EBADF)?;
    if !f.dir {
        return Err(libc::ENOTDIR);
    }
    let children = conn::with(&format!("readdir {}", f.path.full), |s| {
        s.read_dir(&f.path.ns)
    })?;
    // `ls -l`, `find` and `du` stat every entry they list next.
    crate::attrs::put(&children);
    let mut entries = vec![
        (CString::new(".").expect("no NUL"), libc::DT_DIR, 0),
        (CString::new("..").expect("no NUL"), libc::DT_DIR, 0),
    ];
    for m in children {
        let name = m.path.rsplit('/').next().unwrap_or_default();
        let kind = match m.kind {
            FileKind::Dir => libc::DT_DIR,
            FileKind::File => libc::DT_REG,
            FileKind::Symlink => libc::DT_LNK,
            FileKind::Fifo => libc::DT_FIFO,
            FileKind::CharDevice => libc::DT_CHR,
            FileKind::BlockDevice => libc::DT_BLK,
            FileKind::Socket => libc::DT_SOCK,
        };
        if let Ok(name) = CString::new(name) {
            entries.push((name, kind, m.id));
        }
    }
    let s = Box::new(Stream {
        fd,
        entries,
        pos: 0,
        ent: unsafe { std::mem::zeroed() },
    });
    let p = Box::into_raw(s);
    STREAMS.lock().insert(p as usize);
    OPEN.fetch_add(1, Ordering::AcqRel);
    Ok(p.cast())
}

fn fail(e: Errno) -> *mut libc::DIR {
    set_errno(e);
    std::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn opendir(name: *const c_char) -> *mut libc::DIR {
    match mount::resolve(name) {
        Target::Labios(v) if !conn::bypass() => {
            match io::open(v, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(io::Opened::Labios(fd)) => stream(fd).unwrap_or_else(|e| {
                    let _ = io::close(fd);
                    fail(e)
                }),
                Ok(io::Opened::Host(p)) => {
                    real!(opendir: fn(*const c_char) -> *mut libc::DIR)(p.as_ptr())
                }
                Err(e) => fail(e),
            }
        }
        Target::Real(Some(p)) => real!(opendir: fn(*const c_char) -> *mut libc::DIR)(p.as_ptr()),
        Target::Real(None) | Target::Labios(_) => {
            real!(opendir: fn(*const c_char) -> *mut libc::DIR)(name)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    if fdtable::is_labios(fd) {
        return stream(fd).unwrap_or_else(fail);
    }
    real!(fdopendir: fn(c_int) -> *mut libc::DIR)(fd)
}

unsafe fn next(s: &mut Stream) -> *mut libc::dirent64 {
    let Some((name, kind, ino)) = s.entries.get(s.pos) else {
        return std::ptr::null_mut();
    };
    s.pos += 1;
    let e = &mut s.ent;
    e.d_ino = if *ino == 0 { 1 } else { *ino };
    e.d_off = s.pos as i64;
    e.d_type = *kind;
    let bytes = name.as_bytes_with_nul();
    let n = bytes.len().min(e.d_name.len());
    for (d, b) in e.d_name.iter_mut().zip(&bytes[..n]) {
        *d = *b as c_char;
    }
    e.d_name[n - 1] = 0;
    e.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    e
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(dirp: *mut libc::DIR) -> *mut libc::dirent64 {
    match ours(dirp) {
        Some(s) => next(s),
        None => real!(readdir64: fn(*mut libc::DIR) -> *mut libc::dirent64)(dirp),
    }
}

/// On 64-bit Linux `struct dirent` is `struct dirent64`.
#[no_mangle]
pub unsafe extern "C" fn readdir(dirp: *mut libc::DIR) -> *mut libc::dirent64 {
    match ours(dirp) {
        Some(s) => next(s),
        None => real!(readdir: fn(*mut libc::DIR) -> *mut libc::dirent64)(dirp),
    }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(dirp: *mut libc::DIR) -> c_int {
    if ours(dirp).is_none() {
        return real!(closedir: fn(*mut libc::DIR) -> c_int)(dirp);
    }
    STREAMS.lock().remove(&(dirp as usize));
    OPEN.fetch_sub(1, Ordering::AcqRel);
    let s = Box::from_raw(dirp.cast::<Stream>());
    crate::posix::ret(io::close(s.fd).map(|()| 0))
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(dirp: *mut libc::DIR) -> c_int {
    match ours(dirp) {
        Some(s) => s.fd,
        None => real!(dirfd: fn(*mut libc::DIR) -> c_int)(dirp),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(dirp: *mut libc::DIR) {
    match ours(dirp) {
        Some(s) => s.pos = 0,
        None => real!(rewinddir: fn(*mut libc::DIR) -> ())(dirp),
    }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(dirp: *mut libc::DIR) -> c_long {
    match ours(dirp) {
        Some(s) => s.pos as c_long,
        None => real!(telldir: fn(*mut libc::DIR) -> c_long)(dirp),
    }
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(dirp: *mut libc::DIR, loc: c_long) {
    match ours(dirp) {
        Some(s) => s.pos = usize::try_from(loc).unwrap_or(0),
        None => real!(seekdir: fn(*mut libc::DIR, c_long) -> ())(dirp, loc),
    }
}
