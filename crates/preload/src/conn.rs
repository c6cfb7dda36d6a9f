//! The process's LABIOS session, connected on first use of a LABIOS path
//! (so programs that never touch one never connect), and again in a child
//! after `fork`, whose copy of the parent's session has no threads.

use labios_client::errno_of;
use labios_connect::{ConnectOptions, Session};
use labios_label::Error;
use parking_lot::Mutex;
use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

static SESSION: AtomicPtr<Session> = AtomicPtr::new(std::ptr::null_mut());
static CONNECTING: Mutex<()> = parking_lot::const_mutex(());

thread_local! {
    /// Set while this thread runs LABIOS code: the files LABIOS itself
    /// opens (configuration, sockets) are never intercepted.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// True when a call must go straight to libc.
pub fn bypass() -> bool {
    INSIDE.with(Cell::get)
}

/// Runs LABIOS code with interception off on this thread.
pub fn inside<T>(f: impl FnOnce() -> T) -> T {
    let was = INSIDE.with(|i| i.replace(true));
    let out = f();
    INSIDE.with(|i| i.set(was));
    out
}

fn connected() -> Result<&'static Session, Error> {
    let s = SESSION.load(Ordering::Acquire);
    if !s.is_null() {
        return Ok(unsafe { &*s });
    }
    let _g = CONNECTING.lock();
    let s = SESSION.load(Ordering::Acquire);
    if !s.is_null() {
        return Ok(unsafe { &*s });
    }
    // An asynchronous write returns once its label is published, never
    // from a client-side cache a process exit would lose.
    let options = ConnectOptions {
        min_label_size: Some(0),
        on_thread_start: Some(|| INSIDE.with(|i| i.set(true))),
        ..ConnectOptions::from_env()
    };
    let session = crate::ownfds::numbered_high(|| Session::connect(options))?;
    crate::attrs::configure(session.client().config().attr_cache_ms);
    let session = Box::into_raw(Box::new(session));
    SESSION.store(session, Ordering::Release);
    let session = unsafe { &*session };
    crate::fdtable::hold_all(session);
    Ok(session)
}

/// The address of this process's session; 0 before it connects (and in a
/// child after `fork` until it connects anew). Sessions are never freed,
/// so an address is never another session's.
pub fn current() -> usize {
    SESSION.load(Ordering::Acquire) as usize
}

/// Its destructor runs with this thread's other thread-locals (the async
/// runtime's among them); after that, LABIOS calls need another thread.
struct Live;

impl Drop for Live {
    fn drop(&mut self) {}
}

thread_local! {
    static LIVE: Live = const { Live };
}

/// Runs `f` with the session; a failure becomes an errno, and the ones a
/// user cannot guess from the errno alone are printed to stderr.
///
/// At process exit glibc destroys the main thread's thread-locals before it
/// flushes stdio streams and runs atexit handlers, which may still write
/// LABIOS files; those calls run on a short-lived thread of their own.
pub fn with<T: Send>(
    what: &str,
    f: impl FnOnce(&Session) -> Result<T, Error> + Send,
) -> Result<T, c_int> {
    if LIVE.try_with(|_| ()).is_err() {
        return std::thread::scope(|s| s.spawn(|| with(what, f)).join().unwrap_or(Err(libc::EIO)));
    }
    inside(|| {
        let out = connected().and_then(f);
        out.map_err(|e| {
            let errno = errno_of(&e);
            if !matches!(
                errno,
                libc::ENOENT
                    | libc::EEXIST
                    | libc::EISDIR
                    | libc::ENOTDIR
                    | libc::ENOTEMPTY
                    // A lock taken by another process: programs poll.
                    | libc::EAGAIN
                    | libc::EDEADLK
                    | libc::EINTR
                    // An attribute XATTR_REPLACE or a removal needs.
                    | libc::ENODATA
            ) {
                eprintln!("labios: {what}: {e}");
            }
            errno
        })
    })
}

pub fn before_fork() {
    std::mem::forget(CONNECTING.lock());
}

/// # Safety
/// Only after [`before_fork`].
pub unsafe fn after_fork_parent() {
    CONNECTING.force_unlock();
}

/// The child has the parent's session but none of its runtime threads: it
/// is left alone (never dropped) and the child connects anew when needed.
///
/// # Safety
/// Only after [`before_fork`], in the child.
pub unsafe fn after_fork_child() {
    SESSION.store(std::ptr::null_mut(), Ordering::Release);
    crate::ownfds::forget();
    CONNECTING.force_unlock();
}
