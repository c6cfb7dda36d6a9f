//! `fcntl` record locks (process- and open-file-description-owned),
//! `flock` and `lockf` on LABIOS descriptors, held by the deployment's lock
//! service so that they hold against every other process, on any host.
//!
//! Owners: a process's `fcntl` locks belong to its pid; `flock` and OFD
//! locks belong to the open file description, named by the inode of the
//! descriptor's memfd (shared by `dup` and `fork`, new for every `open`).
//! As POSIX asks, closing any descriptor of a file releases the process's
//! `fcntl` locks on it, and closing the last descriptor of a description in
//! this process releases the description's locks. The session's end (the
//! process exiting or being killed) releases everything it held.

use crate::conn;
use crate::fdtable::{self, OpenFile};
use crate::io::{self, Errno};
use labios_client::LockCall;
use labios_label::FileId;
use labios_store::locks::{HeldLock, LockKind, LockSpace, TO_EOF};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::os::raw::c_int;

/// Set in the owner of a description's locks, so that it never equals a
/// pid.
const DESCRIPTION: u64 = 1 << 63;

/// What this process holds, so that a close that releases nothing costs no
/// round trip.
#[derive(Default)]
struct Held {
    /// Files with `fcntl` locks of this process.
    process: HashSet<FileId>,
    /// Descriptions with locks, and their file.
    descriptions: HashMap<u64, FileId>,
}

static HELD: Mutex<Option<Held>> = parking_lot::const_mutex(None);

fn held<T>(f: impl FnOnce(&mut Held) -> T) -> T {
    f(HELD.lock().get_or_insert_with(Held::default))
}

fn process_owner() -> u64 {
    std::process::id() as u64
}

/// The owner of the description behind `fd`: the inode of its memfd, asked
/// of the kernel (`fstat` of libc is this library's, and tells the LABIOS
/// file's).
fn description(fd: c_int) -> Result<u64, Errno> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) } != 0 {
        return Err(fdtable::errno());
    }
    Ok(DESCRIPTION | st.st_ino)
}

/// The file a descriptor opened: its locks stay on it when it is renamed.
fn file_id(f: &OpenFile) -> Result<FileId, Errno> {
    match f.id {
        Some(id) => Ok(id),
        None => io::lookup(&f.path)?.map(|m| m.id).ok_or(libc::ENOENT),
    }
}

/// Sends one lock call.
fn call(what: &str, f: &OpenFile, c: LockCall, wait: bool) -> Result<(), Errno> {
    conn::with(&format!("{what} {}", f.path.full), |s| {
        s.run(s.client().lock(c, wait))
    })
}

fn kind_of(l_type: c_int) -> Result<Option<LockKind>, Errno> {
    match l_type {
        libc::F_RDLCK => Ok(Some(LockKind::Read)),
        libc::F_WRLCK => Ok(Some(LockKind::Write)),
        libc::F_UNLCK => Ok(None),
        _ => Err(libc::EINVAL),
    }
}

/// The absolute byte range of a `struct flock`, as Linux computes it.
fn range(fd: c_int, f: &OpenFile, l: &libc::flock) -> Result<(u64, u64), Errno> {
    let base = match c_int::from(l.l_whence) {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => fdtable::position(fd),
        libc::SEEK_END => io::size(f)? as i64,
        _ => return Err(libc::EINVAL),
    };
    let start = base.checked_add(l.l_start).ok_or(libc::EOVERFLOW)?;
    let (start, end) = match l.l_len {
        0 => (start, None),
        n if n > 0 => (
            start,
            Some(start.checked_add(n - 1).ok_or(libc::EOVERFLOW)?),
        ),
        n => (start.checked_add(n).ok_or(libc::EINVAL)?, Some(start - 1)),
    };
    if start < 0 {
        return Err(libc::EINVAL);
    }
    Ok((start as u64, end.map_or(TO_EOF, |e| e as u64)))
}

/// `fcntl(F_GETLK | F_SETLK | F_SETLKW | F_OFD_*)`.
///
/// # Safety
/// `arg` is the caller's `struct flock` pointer.
pub unsafe fn fcntl(
    fd: c_int,
    f: &OpenFile,
    cmd: c_int,
    arg: *mut libc::flock,
) -> Result<(), Errno> {
    crate::guard::mapped(arg.cast(), std::mem::size_of::<libc::flock>())?;
    let mut l = arg.read_unaligned();
    set(fd, f, cmd, &mut l)?;
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        arg.write_unaligned(l);
    }
    Ok(())
}

fn set(fd: c_int, f: &OpenFile, cmd: c_int, l: &mut libc::flock) -> Result<(), Errno> {
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    if ofd && l.l_pid != 0 {
        return Err(libc::EINVAL);
    }
    let kind = kind_of(c_int::from(l.l_type))?;
    let (start, end) = range(fd, f, l)?;
    let owner = if ofd {
        description(fd)?
    } else {
        process_owner()
    };
    let file = file_id(f)?;
    let c = LockCall {
        file,
        space: LockSpace::Record,
        owner,
        pid: std::process::id(),
        kind,
        start,
        end,
    };
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        if kind.is_none() {
            return Err(libc::EINVAL);
        }
        let got = conn::with(&format!("fcntl F_GETLK {}", f.path.full), |s| {
            s.run(s.client().lock_conflict(c))
        })?;
        describe(l, got, ofd);
        return Ok(());
    }
    match kind {
        Some(LockKind::Read) if !f.readable() => return Err(libc::EBADF),
        Some(LockKind::Write) if !f.writable() => return Err(libc::EBADF),
        _ => {}
    }
    let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
    call("fcntl", f, c, wait)?;
    if kind.is_some() {
        held(|h| {
            if ofd {
                h.descriptions.insert(owner, file);
            } else {
                h.process.insert(file);
            }
        });
    }
    Ok(())
}

/// Writes what `F_GETLK` reports into the caller's `struct flock`.
fn describe(l: &mut libc::flock, got: Option<HeldLock>, ofd: bool) {
    let Some(h) = got else {
        l.l_type = libc::F_UNLCK as _;
        return;
    };
    l.l_type = match h.kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
    } as _;
    l.l_whence = libc::SEEK_SET as _;
    l.l_start = h.start as i64;
    l.l_len = if h.end == TO_EOF {
        0
    } else {
        (h.end - h.start + 1) as i64
    };
    // An OFD lock has no process to name.
    l.l_pid = if ofd || h.holder.owner & DESCRIPTION != 0 {
        -1
    } else {
        h.pid as i32
    };
}

/// `flock(fd, op)`.
pub fn flock(fd: c_int, f: &OpenFile, op: c_int) -> Result<(), Errno> {
    let kind = match op & !libc::LOCK_NB {
        libc::LOCK_SH => Some(LockKind::Read),
        libc::LOCK_EX => Some(LockKind::Write),
        libc::LOCK_UN => None,
        _ => return Err(libc::EINVAL),
    };
    let owner = description(fd)?;
    let file = file_id(f)?;
    let c = LockCall {
        file,
        space: LockSpace::Flock,
        owner,
        pid: std::process::id(),
        kind,
        start: 0,
        end: TO_EOF,
    };
    call("flock", f, c, op & libc::LOCK_NB == 0)?;
    if kind.is_some() {
        held(|h| h.descriptions.insert(owner, file));
    }
    Ok(())
}

/// `lockf(fd, cmd, len)`: `fcntl` locks from the current position.
pub fn lockf(fd: c_int, f: &OpenFile, cmd: c_int, len: i64) -> Result<(), Errno> {
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_whence = libc::SEEK_CUR as _;
    l.l_len = len;
    let (lcmd, l_type) = match cmd {
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_TEST => (libc::F_GETLK, libc::F_WRLCK),
        _ => return Err(libc::EINVAL),
    };
    l.l_type = l_type as _;
    set(fd, f, lcmd, &mut l)?;
    // As glibc's: another process's lock is EACCES.
    if cmd == libc::F_TEST && c_int::from(l.l_type) != libc::F_UNLCK {
        return Err(libc::EACCES);
    }
    Ok(())
}

/// Before `fd` (of `f`) is closed: releases the process's `fcntl` locks
/// on its file, and its description's locks when no other descriptor of
/// this process shares the description.
pub fn closing(fd: c_int, f: &OpenFile) {
    let (process, descriptions) = held(|h| (!h.process.is_empty(), !h.descriptions.is_empty()));
    if !process && !descriptions {
        return;
    }
    let own = description(fd).ok();
    let mut releases: Vec<(u64, FileId)> = Vec::new();
    if let Some(d) = own {
        let shared = fdtable::others(fd)
            .into_iter()
            .any(|o| description(o).ok() == Some(d));
        if !shared {
            if let Some(file) = held(|h| h.descriptions.remove(&d)) {
                releases.push((d, file));
            }
        }
    }
    if process {
        if let Ok(file) = file_id(f) {
            if held(|h| h.process.remove(&file)) {
                releases.push((process_owner(), file));
            }
        }
    }
    for (owner, file) in releases {
        let _ = conn::with(&format!("close {}", f.path.full), |s| {
            s.run(s.client().unlock_owner(owner, file))
        });
    }
}
