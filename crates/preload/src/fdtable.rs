//! Descriptors of open LABIOS files.
//!
//! Each one is a real descriptor of a memfd, so that its number is the
//! kernel's to hand out and the kernel's file description does what POSIX
//! asks of it: the file position lives in the memfd's offset, which `dup`,
//! `fork` and `exec` share exactly as they would for a real file. The memfd
//! also holds the file's path, so a program started by `exec` finds its
//! inherited LABIOS descriptors again (see [`restore`]).
//!
//! The descriptor a program holds is the sealed memfd reopened write-only:
//! a call that reaches the kernel without passing through this library
//! (a raw system call, io_uring, libaio, a static helper) gets EBADF for a
//! read and EPERM for a write, never the record's text as if it were the
//! file's bytes.

use crate::conn;
use crate::mount::{self, Vpath};
use crate::real::real;
use labios_client::FileRef;
use labios_label::FileId;
use labios_store::{FileKind, FileMeta};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Descriptors past this number are never LABIOS's (open fails with EMFILE).
pub const MAX_FD: usize = 1 << 16;
const MAGIC: &str = "LABIOS-FD 2";
const MEMFD_NAME: &str = "labios";

#[derive(Debug)]
pub struct OpenFile {
    pub path: Vpath,
    /// The entry opened, which the descriptor's data calls and fstat go
    /// to whatever its path names later (renamed, removed, replaced);
    /// `None` for external storage, which has only paths.
    pub id: Option<FileId>,
    pub dir: bool,
    /// The open flags; `fcntl(F_SETFL)` may change O_APPEND.
    pub flags: AtomicI32,
    /// The session (its address) that holds the file open for this
    /// description ([`labios_connect::Session::hold`]), so that it outlives its
    /// last name until the description's last descriptor closes; 0: none.
    /// A child after `fork`, or a program after `exec`, holds it anew in
    /// its own session when it connects ([`hold_all`]).
    held_by: AtomicUsize,
    /// A child was forked while the description was open: the child may
    /// use it after this process closed it, before its own session holds
    /// the file, so this process's hold lasts until its session ends.
    forked: AtomicBool,
}

impl Drop for OpenFile {
    /// The description's last descriptor closed: the hold ends, in the
    /// session that made it (not in a forked child's new one), unless a
    /// child shares the description ([`OpenFile::forked`]).
    fn drop(&mut self) {
        let held = *self.held_by.get_mut();
        let ends = held != 0 && held == conn::current() && !*self.forked.get_mut();
        if let Some(id) = self.id.filter(|_| ends) {
            let _ = conn::with(&format!("close {}", self.path.full), |s| s.let_go(id));
        }
    }
}

impl OpenFile {
    /// What the descriptor's calls name: the file it opened.
    pub fn target(&self) -> FileRef<'_> {
        match self.id {
            Some(id) => FileRef::Id(id),
            None => FileRef::Path(&self.path.ns),
        }
    }
    pub fn readable(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & libc::O_ACCMODE != libc::O_WRONLY
    }
    pub fn writable(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & libc::O_ACCMODE != libc::O_RDONLY
    }
}

/// One flag per descriptor number, so that the calls of a program on its
/// own descriptors cost one atomic load before going to libc.
static MARK: [AtomicBool; MAX_FD] = [const { AtomicBool::new(false) }; MAX_FD];
static FILES: RwLock<BTreeMap<c_int, Arc<OpenFile>>> = parking_lot::const_rwlock(BTreeMap::new());

pub fn get(fd: c_int) -> Option<Arc<OpenFile>> {
    let i = usize::try_from(fd).ok().filter(|&i| i < MAX_FD)?;
    if !MARK[i].load(Ordering::Acquire) {
        return None;
    }
    FILES.read().get(&fd).cloned()
}

/// The other LABIOS descriptors of this process.
pub fn others(fd: c_int) -> Vec<c_int> {
    FILES.read().keys().copied().filter(|&o| o != fd).collect()
}

pub fn is_labios(fd: c_int) -> bool {
    usize::try_from(fd)
        .ok()
        .filter(|&i| i < MAX_FD)
        .is_some_and(|i| MARK[i].load(Ordering::Acquire))
}

pub fn insert(fd: c_int, file: Arc<OpenFile>) {
    FILES.write().insert(fd, file);
    MARK[fd as usize].store(true, Ordering::Release);
}

pub fn remove(fd: c_int) -> Option<Arc<OpenFile>> {
    if !is_labios(fd) {
        return None;
    }
    MARK[fd as usize].store(false, Ordering::Release);
    FILES.write().remove(&fd)
}

/// The id by which calls reach the entry `meta` found at `path`; `None`
/// for external storage, which has only paths.
pub fn id_of(path: &Vpath, meta: &FileMeta) -> Option<FileId> {
    FileRef::Path(&path.ns)
        .external()
        .is_none()
        .then_some(meta.id)
}

/// A new descriptor for the LABIOS entry `meta` at `path`; errno on
/// failure.
pub fn open(path: Vpath, meta: &FileMeta, flags: c_int) -> Result<c_int, c_int> {
    let dir = meta.kind == FileKind::Dir;
    let id = id_of(&path, meta);
    let held_by = match id.filter(|_| meta.kind == FileKind::File) {
        Some(id) => conn::with(&format!("open {}", path.full), |s| {
            s.hold(id).map(|()| s as *const _ as usize)
        })?,
        None => 0,
    };
    // Built first: a failure below drops it, which ends the hold.
    let file = Arc::new(OpenFile {
        path,
        id,
        dir,
        flags: AtomicI32::new(flags),
        held_by: AtomicUsize::new(held_by),
        forked: AtomicBool::new(false),
    });
    let path = &file.path;
    let cloexec = if flags & libc::O_CLOEXEC != 0 {
        libc::MFD_CLOEXEC
    } else {
        0
    };
    let name = CString::new(MEMFD_NAME).expect("no NUL");
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), (cloexec | libc::MFD_ALLOW_SEALING) as c_uint) };
    if fd < 0 {
        return Err(errno());
    }
    if fd as usize >= MAX_FD {
        unsafe { close_real(fd) };
        return Err(libc::EMFILE);
    }
    let shown_id = id.map_or_else(|| "-".to_string(), |i| i.to_string());
    let record = format!(
        "{MAGIC}\n{}\n{flags}\n{shown_id}\n{}\n{}",
        u8::from(dir),
        path.full,
        path.ns
    );
    let wrote = unsafe {
        real!(pwrite64: fn(c_int, *const c_void, usize, i64) -> isize)(
            fd,
            record.as_ptr().cast(),
            record.len(),
            0,
        )
    };
    // Sealed, so that a write LABIOS does not see (libc writing to a stream
    // internally) fails loudly instead of landing in the placeholder.
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    let sealed =
        unsafe { real!(fcntl: fn(c_int, c_int, c_int) -> c_int)(fd, libc::F_ADD_SEALS, seals) };
    if wrote != record.len() as isize || sealed != 0 || write_only(fd, cloexec != 0).is_err() {
        unsafe { close_real(fd) };
        return Err(libc::EIO);
    }
    insert(fd, file);
    Ok(fd)
}

/// Replaces the memfd at `fd` by a write-only description of it, at the
/// same number (open must give the lowest free number, as POSIX says).
fn write_only(fd: c_int, cloexec: bool) -> Result<(), c_int> {
    let proc_path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
    let flags = libc::O_WRONLY | if cloexec { libc::O_CLOEXEC } else { 0 };
    let w = unsafe {
        real!(open: fn(*const libc::c_char, c_int, c_int) -> c_int)(proc_path.as_ptr(), flags, 0)
    };
    if w < 0 {
        return Err(errno());
    }
    let dup_flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    let moved = unsafe { real!(dup3: fn(c_int, c_int, c_int) -> c_int)(w, fd, dup_flags) };
    let failed = (moved < 0).then(errno);
    unsafe { close_real(w) };
    failed.map_or(Ok(()), Err)
}

/// # Safety
/// `fd` is a descriptor this library owns.
pub unsafe fn close_real(fd: c_int) -> c_int {
    real!(close: fn(c_int) -> c_int)(fd)
}

pub fn errno() -> c_int {
    unsafe { *libc::__errno_location() }
}

/// A libc call's 0 or -1 (errno set) as a result.
pub fn done(r: c_int) -> Result<(), c_int> {
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// The file position (the memfd's offset).
pub fn position(fd: c_int) -> i64 {
    unsafe { real!(lseek64: fn(c_int, i64, c_int) -> i64)(fd, 0, libc::SEEK_CUR) }
}

pub fn set_position(fd: c_int, pos: i64) -> i64 {
    unsafe { real!(lseek64: fn(c_int, i64, c_int) -> i64)(fd, pos, libc::SEEK_SET) }
}

/// Finds the LABIOS descriptors this process inherited through `exec`.
pub fn restore() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<c_int>().ok())
        else {
            continue;
        };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("/memfd:labios ") || fd as usize >= MAX_FD {
            continue;
        }
        if let Some(file) = read_record(fd) {
            insert(fd, Arc::new(file));
        }
    }
}

/// The record of an inherited descriptor, read through a read-only
/// description of its memfd (the descriptor itself is write-only).
fn read_record(fd: c_int) -> Option<OpenFile> {
    let proc_path = CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    let r = unsafe {
        real!(open: fn(*const libc::c_char, c_int, c_int) -> c_int)(
            proc_path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
            0,
        )
    };
    if r < 0 {
        return None;
    }
    let mut buf = vec![0u8; 8192];
    let n = unsafe {
        real!(pread64: fn(c_int, *mut c_void, usize, i64) -> isize)(
            r,
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
        )
    };
    unsafe { close_real(r) };
    buf.truncate(usize::try_from(n).ok()?);
    let text = String::from_utf8(buf).ok()?;
    let mut lines = text.splitn(6, '\n');
    if lines.next()? != MAGIC {
        return None;
    }
    let dir = lines.next()? == "1";
    let flags = lines.next()?.parse().ok()?;
    let id = match lines.next()? {
        "-" => None,
        n => Some(n.parse().ok()?),
    };
    let full = lines.next()?.to_string();
    let ns = lines.next()?.to_string();
    mount::normalize(&full)?;
    Some(OpenFile {
        path: Vpath { full, ns },
        id,
        dir,
        flags: AtomicI32::new(flags),
        held_by: AtomicUsize::new(0),
        forked: AtomicBool::new(false),
    })
}

/// Holds, in the newly connected session `s`, the files of the
/// descriptors this process has from before it (inherited across `fork`
/// or `exec`), so that they outlive their last name here too. A file gone
/// already is not held: its descriptor's calls say ENOENT.
pub fn hold_all(s: &labios_connect::Session) {
    let me = s as *const _ as usize;
    let files: Vec<Arc<OpenFile>> = FILES.read().values().cloned().collect();
    for f in &files {
        let Some(id) = f.id.filter(|_| !f.dir) else {
            continue;
        };
        if f.held_by.load(Ordering::Acquire) != me && s.hold(id).is_ok() {
            f.held_by.store(me, Ordering::Release);
        }
    }
}

/// Fork must not copy the table while another thread changes it. Every
/// open description is now shared with the child (see [`OpenFile`]'s
/// `forked`).
pub fn lock_for_fork() {
    let files = FILES.write();
    for f in files.values() {
        f.forked.store(true, Ordering::Release);
    }
    std::mem::forget(files);
}

/// # Safety
/// Only after [`lock_for_fork`], in the parent and in the child.
pub unsafe fn unlock_after_fork() {
    FILES.force_unlock_write();
}
