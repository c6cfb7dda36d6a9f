//! `liblabios_preload.so`: run an unmodified program with it in
//! `LD_PRELOAD` (`labios run -- PROGRAM`) and its POSIX and stdio calls on
//! paths under the LABIOS prefixes become labels (article 3.2.2: legacy
//! applications keep their I/O calls). Every other call goes to libc as it
//! would without this library.
//!
//! Environment: `LABIOS_PREFIXES` (colon-separated mount points, default
//! `/labios`), and what any LABIOS client reads (`LABIOS_CONFIG`,
//! `LABIOS_ENDPOINT`, `LABIOS_KEY`, `LABIOS_SECRET`,
//! `LABIOS_CLIENT__MODE=async`).

mod aio;
mod attrs;
mod conn;
mod dirs;
mod exec;
mod fdtable;
mod guard;
mod io;
mod locks;
mod meta;
mod mount;
mod ownfds;
mod posix;
mod real;
mod stdio;
mod xattrs;

/// Runs when the library is loaded, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    conn::inside(|| {
        mount::init();
        fdtable::restore();
        for fd in 0..3 {
            stdio::standard_fd_changed(fd);
        }
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            )
        };
    });
}

extern "C" fn before_fork() {
    conn::before_fork();
    fdtable::lock_for_fork();
}

extern "C" fn after_fork_parent() {
    unsafe {
        fdtable::unlock_after_fork();
        conn::after_fork_parent();
    }
}

extern "C" fn after_fork_child() {
    unsafe {
        fdtable::unlock_after_fork();
        conn::after_fork_child();
    }
}
