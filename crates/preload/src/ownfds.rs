//! The library's own descriptors (the session's runtime: its epoll and
//! waker descriptors, its sockets) live where programs do not reach for
//! numbers, and survive a program's `close` of them.
//!
//! A program expects the lowest free numbers to be its own: `exec 3<>f`
//! in a shell opens the file (which connects LABIOS, whose runtime then
//! took number 3), then `dup2`s it onto 3, closing the runtime's epoll
//! descriptor; the runtime panicked and the write waited for ever (issue
//! 12, item 2). So while the session connects, every free number below
//! [`floor`] is held by a placeholder, and the descriptors it creates get
//! numbers from there on; those are then recorded, a program's `close` of
//! one succeeds without closing it, and a `dup2` onto one fails with
//! EBUSY instead of silently replacing it.

use parking_lot::Mutex;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

/// Lowest number of a recorded descriptor (`c_int::MAX`: none yet), so
/// that a program's `close` of a low number costs one load.
static LOWEST: AtomicI32 = AtomicI32::new(c_int::MAX);
static OWN: Mutex<Vec<c_int>> = parking_lot::const_mutex(Vec::new());

/// Where the library's descriptors start: 512, or half the process's
/// descriptor limit if that is lower.
fn floor() -> c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    c_int::try_from((soft / 2).min(512)).unwrap_or(512)
}

/// The descriptors open now.
fn open_fds() -> Vec<c_int> {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `f` (which opens the library's descriptors) with every free number
/// below [`floor`] held, then records the descriptors it opened.
pub fn numbered_high<T>(f: impl FnOnce() -> T) -> T {
    let floor = floor();
    // Listed while the low numbers are free: the listing's own descriptor
    // takes one of them, not a number the session may take next.
    let before = open_fds();
    let mut held = Vec::new();
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null >= 0 {
        held.push(null);
        loop {
            let fd = unsafe { libc::fcntl(null, libc::F_DUPFD_CLOEXEC, 0) };
            if fd < 0 {
                break;
            }
            if fd >= floor {
                unsafe { libc::close(fd) };
                break;
            }
            held.push(fd);
        }
    }
    let out = f();
    for fd in held {
        unsafe { libc::close(fd) };
    }
    let mut own = OWN.lock();
    for fd in open_fds() {
        if fd >= floor && !before.contains(&fd) && !own.contains(&fd) {
            own.push(fd);
        }
    }
    if let Some(&lowest) = own.iter().min() {
        LOWEST.store(lowest, Ordering::Release);
    }
    out
}

/// Whether `fd` is one of the library's own descriptors.
pub fn is_own(fd: c_int) -> bool {
    fd >= LOWEST.load(Ordering::Acquire) && OWN.lock().contains(&fd)
}

/// A forked child has the parent's descriptors but not its session: they
/// are the child's to close.
///
/// # Safety
/// Only in a fork's child, before it runs anything else: a lock another
/// thread of the parent held is released.
pub unsafe fn forget() {
    LOWEST.store(c_int::MAX, Ordering::Release);
    if OWN.is_locked() {
        OWN.force_unlock();
    }
    OWN.lock().clear();
}

/// `close_range(first, last, flags)` as `real` calls, skipping the
/// library's descriptors.
pub fn close_range_around(first: u32, last: u32, real: impl Fn(u32, u32) -> c_int) -> c_int {
    let mut own: Vec<u32> = OWN
        .lock()
        .iter()
        .filter_map(|&fd| u32::try_from(fd).ok())
        .filter(|fd| (first..=last).contains(fd))
        .collect();
    own.sort_unstable();
    let mut from = first;
    for fd in own {
        if fd > from {
            let r = real(from, fd - 1);
            if r != 0 {
                return r;
            }
        }
        from = fd.saturating_add(1);
        if fd == u32::MAX {
            return 0;
        }
    }
    if from <= last {
        return real(from, last);
    }
    0
}
