//! What an intercepted call does to a LABIOS file, independent of which C
//! entry point (POSIX, stdio, directory streams) it came through.

use crate::attrs;
use crate::conn;
use crate::fdtable::{self, OpenFile};
use crate::mount::{self, Target, Vpath};
use bytes::Bytes;
use labios_client::{FileRef, IoMode};
use labios_store::{FileKind, FileMeta, RenameHow, SetAttr};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

pub type Errno = c_int;

fn parent(ns: &str) -> Option<&str> {
    match ns.rfind('/') {
        Some(0) if ns.len() > 1 => Some("/"),
        Some(i) if i > 0 => Some(&ns[..i]),
        _ => None,
    }
}

/// The parent directory must exist, as POSIX asks of open(O_CREAT) and mkdir.
fn check_parent(s: &labios_connect::Session, ns: &str) -> Result<(), labios_label::Error> {
    let Some(p) = parent(ns) else { return Ok(()) };
    if p == "/" || attrs::known_dir(p) {
        return Ok(());
    }
    match s.stat(p)? {
        Some(m) if m.kind == FileKind::Dir => {
            attrs::dir_seen(p);
            Ok(())
        }
        Some(_) => Err(labios_label::Error::InvalidArgument(format!(
            "{p} is not a directory"
        ))),
        None => Err(labios_label::Error::NotFound(p.to_string())),
    }
}

/// Hops a path may take through symbolic links, as Linux's limit.
const MAX_HOPS: usize = 40;

/// Where `path` leads once the symbolic links at its end are followed
/// (links in the middle of a path are not: the kernel's mount does that),
/// with the entry found there (`None`: nothing), or the host path a link
/// leads out of LABIOS to.
pub fn follow(mut path: Vpath) -> Result<(Target, Option<FileMeta>), Errno> {
    let mut hops = 0;
    loop {
        let meta = match lookup(&path) {
            // Missing or not a directory: perhaps behind a link among the
            // directories, which the kernel walks through.
            found @ (Ok(None) | Err(libc::ENOTDIR)) => match through_links(&path, &mut hops)? {
                Some(Target::Labios(next)) => {
                    path = next;
                    continue;
                }
                Some(real) => return Ok((real, None)),
                None => found?,
            },
            other => other?,
        };
        let Some(m) = meta.as_ref().filter(|m| m.kind == FileKind::Symlink) else {
            return Ok((Target::Labios(path), meta));
        };
        hops += 1;
        if hops > MAX_HOPS {
            return Err(libc::ELOOP);
        }
        let target = conn::with(&format!("readlink {}", path.full), |s| s.readlink(&m.path))?;
        match mount::link_target(&path, &target) {
            Target::Labios(next) => path = next,
            real => return Ok((real, None)),
        }
    }
}

/// `path` with its first symbolic link among the directories replaced by
/// where it points (`None`: there is none, a file is in the way); `hops`
/// counts the links followed, ELOOP past [`MAX_HOPS`] as the kernel.
fn through_links(path: &Vpath, hops: &mut usize) -> Result<Option<Target>, Errno> {
    let parts: Vec<&str> = path.full.split('/').filter(|p| !p.is_empty()).collect();
    let mut at = String::new();
    for (i, part) in parts.iter().enumerate().take(parts.len().saturating_sub(1)) {
        at.push('/');
        at.push_str(part);
        let Some(dir) = mount::labios(&at) else {
            continue;
        };
        match lookup(&dir)? {
            None => return Err(libc::ENOENT),
            Some(m) if m.kind == FileKind::Symlink => {
                *hops += 1;
                if *hops > MAX_HOPS {
                    return Err(libc::ELOOP);
                }
                let target =
                    conn::with(&format!("readlink {}", dir.full), |s| s.readlink(&m.path))?;
                return Ok(Some(mount::through(
                    &dir,
                    &target,
                    &parts[i + 1..].join("/"),
                )));
            }
            Some(m) if m.kind != FileKind::Dir => return Ok(None),
            Some(_) => {}
        }
    }
    Ok(None)
}

/// `path` with every symbolic link among its directories followed (not
/// its last component: whether that is followed is the call's), or the
/// host path a link leads out of LABIOS to.
fn dirs_followed(path: &Vpath) -> Result<Target, Errno> {
    let mut hops = 0;
    let mut path = path.clone();
    loop {
        match through_links(&path, &mut hops)? {
            None => return Ok(Target::Labios(path)),
            Some(Target::Labios(next)) => path = next,
            Some(real) => return Ok(real),
        }
    }
}

/// Where a name-acting call (mkdir, unlink, rmdir, symlink, mknod,
/// rename, link) that failed with `e` on `path` goes instead: the kernel
/// walks symbolic links among the directories of every path, and one in
/// the way looks like a missing directory (ENOENT) or a file (ENOTDIR).
/// `None`: no link is in the way, `e` stands. Costs look-ups only on such
/// a failure.
fn retry_through_links(path: &Vpath, e: Errno) -> Result<Option<Target>, Errno> {
    if !matches!(e, libc::ENOENT | libc::ENOTDIR) {
        return Ok(None);
    }
    match dirs_followed(path) {
        Ok(Target::Labios(v)) if v.full == path.full => Ok(None),
        Ok(t) => Ok(Some(t)),
        Err(libc::ELOOP) => Err(libc::ELOOP),
        Err(_) => Ok(None),
    }
}

/// Runs the name-acting `call` on `path`, again through the symbolic links
/// among its directories if it finds them in the way, or `host` on the
/// host path they lead to ([`retry_through_links`]).
pub fn on_name(
    path: &Vpath,
    call: impl Fn(&Vpath) -> Result<(), Errno>,
    host: impl FnOnce(&std::ffi::CStr) -> Result<(), Errno>,
) -> Result<(), Errno> {
    match call(path) {
        Err(e) => match retry_through_links(path, e)? {
            Some(Target::Labios(v)) => call(&v),
            Some(Target::Real(Some(p))) => host(&p),
            _ => Err(e),
        },
        ok => ok,
    }
}

/// [`on_name`] of a call naming two paths (rename, link): through links
/// among the directories of either; one side led out of LABIOS is EXDEV,
/// as between two file systems.
pub fn on_names(
    a: &Vpath,
    b: &Vpath,
    call: impl Fn(&Vpath, &Vpath) -> Result<(), Errno>,
) -> Result<(), Errno> {
    match call(a, b) {
        Err(e) => {
            let ra = retry_through_links(a, e)?;
            let rb = retry_through_links(b, e)?;
            if ra.is_none() && rb.is_none() {
                return Err(e);
            }
            let side = |r: Option<Target>, v: &Vpath| match r {
                None => Ok(v.clone()),
                Some(Target::Labios(n)) => Ok(n),
                Some(Target::Real(_)) => Err(libc::EXDEV),
            };
            call(&side(ra, a)?, &side(rb, b)?)
        }
        ok => ok,
    }
}

/// What an open leads to.
pub enum Opened {
    /// A LABIOS descriptor.
    Labios(c_int),
    /// A symbolic link led out of LABIOS: open this host path instead.
    Host(std::ffi::CString),
}

/// Opens `path`, following symbolic links at its end unless O_NOFOLLOW.
pub fn open(path: Vpath, flags: c_int, mode: u32) -> Result<Opened, Errno> {
    let plain_create = flags & libc::O_CREAT != 0
        && flags & (libc::O_EXCL | libc::O_NOFOLLOW | libc::O_DIRECTORY) == 0
        && flags & libc::O_TMPFILE != libc::O_TMPFILE;
    if plain_create {
        if let Some(fd) = create_directly(&path, flags, mode)? {
            return Ok(Opened::Labios(fd));
        }
    }
    // O_CREAT | O_EXCL never follows a link at the end: a link there,
    // dangling or not, is EEXIST (POSIX).
    let exclusive = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
    let (target, meta) = if flags & libc::O_NOFOLLOW != 0 || exclusive {
        let meta = lookup(&path)?;
        (Target::Labios(path), meta)
    } else {
        follow(path)?
    };
    match target {
        Target::Labios(v) => open_entry(v, meta, flags, mode).map(Opened::Labios),
        Target::Real(Some(p)) => Ok(Opened::Host(p)),
        Target::Real(None) => Err(libc::ENOENT),
    }
}

/// `open(O_CREAT)` of a file in one round trip: the inventory creates it
/// or returns the file already there. Anything else at the path (a
/// directory, a link to follow, another application's file) is left to
/// the full path: `None`.
fn create_directly(path: &Vpath, flags: c_int, mode: u32) -> Result<Option<c_int>, Errno> {
    use labios_label::Error;
    attrs::changed(&path.ns);
    let mode = masked(mode);
    let made = conn::with(&format!("create {}", path.full), |s| {
        // A missing parent, or a link among the directories, is for the
        // full path to follow or refuse.
        let to_follow =
            |e: &Error| matches!(labios_client::errno_of(e), libc::ENOTDIR | libc::ENOENT);
        match check_parent(s, &path.ns) {
            Err(e) if to_follow(&e) => return Ok(None),
            other => other?,
        }
        match s.create_mode(&path.ns, mode) {
            Ok(m) => Ok(Some(m)),
            Err(Error::AlreadyExists(_) | Error::PermissionDenied(_)) => Ok(None),
            Err(e) if to_follow(&e) => Ok(None),
            Err(e) => Err(e),
        }
    })?;
    let Some(m) = made else { return Ok(None) };
    if flags & libc::O_ACCMODE != libc::O_RDONLY && flags & libc::O_TRUNC != 0 && m.size > 0 {
        conn::with(&format!("truncate {}", path.full), |s| {
            s.truncate(data_of(path, &m), 0)
        })?;
    } else {
        attrs::put([&m]);
    }
    fdtable::open(path.clone(), &m, flags).map(Some)
}

/// Opens `path`, whose entry (after [`follow`]) is `meta`.
fn open_entry(
    path: Vpath,
    meta: Option<FileMeta>,
    flags: c_int,
    mode: u32,
) -> Result<c_int, Errno> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(libc::EOPNOTSUPP);
    }
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
    let create = flags & libc::O_CREAT != 0;
    let excl = create && flags & libc::O_EXCL != 0;
    let entry = match meta {
        Some(_) if excl => return Err(libc::EEXIST),
        // Not followed (O_NOFOLLOW), as the kernel says of one.
        Some(m) if m.kind == FileKind::Symlink => return Err(libc::ELOOP),
        // A pipe, device or socket needs the kernel behind it: only
        // `labios mount` opens one (Linux says ENXIO of a socket too).
        Some(m) if m.kind.is_special() => return Err(libc::ENXIO),
        Some(m) if m.kind == FileKind::Dir => {
            if excl {
                return Err(libc::EEXIST);
            }
            if writes {
                return Err(libc::EISDIR);
            }
            m
        }
        Some(m) => {
            if excl {
                return Err(libc::EEXIST);
            }
            if flags & libc::O_DIRECTORY != 0 {
                return Err(libc::ENOTDIR);
            }
            check_open(&path, &m, flags)?;
            if writes && flags & libc::O_TRUNC != 0 && m.size > 0 {
                attrs::changed(&path.ns);
                conn::with(&format!("truncate {}", path.full), |s| {
                    s.truncate(data_of(&path, &m), 0)
                })?;
            }
            m
        }
        None if !create => return Err(missing(&path.ns)),
        None => {
            attrs::changed(&path.ns);
            let mode = masked(mode);
            let made = conn::with(&format!("create {}", path.full), |s| {
                check_parent(s, &path.ns)?;
                s.create_mode(&path.ns, mode)
            })?;
            attrs::put([&made]);
            made
        }
    };
    fdtable::open(path, &entry, flags)
}

/// The permission check of an open of the existing file `m`, made by
/// `labios serve` as the kernel makes it at open; what it allows then
/// holds for the descriptor's reads and writes, whatever the mode becomes
/// ([`labios_client::Client::open_file`]). Root is not checked.
fn check_open(path: &Vpath, m: &FileMeta, flags: c_int) -> Result<(), Errno> {
    if unsafe { libc::geteuid() } == 0 || FileRef::Path(&path.ns).external().is_some() {
        return Ok(());
    }
    let access = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => labios_store::access::READ,
        libc::O_WRONLY => labios_store::access::WRITE,
        _ => labios_store::access::READ | labios_store::access::WRITE,
    };
    conn::with(&format!("open {}", path.full), |s| {
        s.run(s.client().open_file(m.id, access))
    })
    .map(drop)
}

/// What data calls on the file `meta`, found at `path`, name: the file
/// itself (by id), so that a rename or removal racing the call cannot send
/// it to another file; external storage by its path.
fn data_of<'a>(path: &'a Vpath, meta: &FileMeta) -> FileRef<'a> {
    match fdtable::id_of(path, meta) {
        Some(id) => FileRef::Id(id),
        None => FileRef::Path(&path.ns),
    }
}

/// Reads at `at`, or at the file position (then advanced) when `None`.
pub fn read(fd: c_int, f: &OpenFile, buf: &mut [u8], at: Option<i64>) -> Result<usize, Errno> {
    let data = read_bytes(fd, f, buf.len(), at, |_| Ok(()))?;
    buf[..data.len()].copy_from_slice(&data);
    Ok(data.len())
}

/// Reads up to `len` bytes at `at`, or at the file position, which
/// advances once `deliver` (which puts the bytes where the caller wants
/// them) succeeds.
pub fn read_bytes(
    fd: c_int,
    f: &OpenFile,
    len: usize,
    at: Option<i64>,
    deliver: impl FnOnce(&[u8]) -> Result<(), Errno>,
) -> Result<Bytes, Errno> {
    if f.dir {
        return Err(libc::EISDIR);
    }
    if !f.readable() {
        return Err(libc::EBADF);
    }
    let pos = at.unwrap_or_else(|| fdtable::position(fd));
    let pos = u64::try_from(pos).map_err(|_| libc::EINVAL)?;
    let data = conn::with(&format!("read {}", f.path.full), |s| {
        s.read(f.target(), pos, len as u64)
    })?;
    deliver(&data)?;
    if at.is_none() {
        fdtable::set_position(fd, (pos + data.len() as u64) as i64);
    }
    Ok(data)
}

/// Writes at `at`, or at the file position (then advanced). An O_APPEND
/// write goes to the end of the file as one atomic append (the inventory
/// decides the offset, so concurrent appenders never overwrite each
/// other), even a pwrite, as on Linux; a plain write then leaves the
/// position after it.
pub fn write(fd: c_int, f: &OpenFile, data: &[u8], at: Option<i64>) -> Result<usize, Errno> {
    write_bytes(fd, f, || Ok(Bytes::copy_from_slice(data)), at)
}

/// [`write`] of the bytes `take` copies from the caller (after the
/// descriptor's checks, as the kernel checks it before the buffer).
pub fn write_bytes(
    fd: c_int,
    f: &OpenFile,
    take: impl FnOnce() -> Result<Bytes, Errno>,
    at: Option<i64>,
) -> Result<usize, Errno> {
    if f.dir {
        return Err(libc::EISDIR);
    }
    if !f.writable() {
        return Err(libc::EBADF);
    }
    let bytes = take()?;
    let len = bytes.len();
    let what = format!("write {}", f.path.full);
    attrs::changed(&f.path.ns);
    if f.flags.load(std::sync::atomic::Ordering::Relaxed) & libc::O_APPEND != 0 {
        let pos = conn::with(&what, |s| s.append_in_mode(f.target(), bytes))?;
        if at.is_none() {
            fdtable::set_position(fd, (pos + len as u64) as i64);
        }
        return Ok(len);
    }
    let p = at.unwrap_or_else(|| fdtable::position(fd));
    let pos = u64::try_from(p).map_err(|_| libc::EINVAL)?;
    conn::with(&what, |s| s.write_in_mode(f.target(), pos, bytes))?;
    if at.is_none() {
        fdtable::set_position(fd, (pos + len as u64) as i64);
    }
    Ok(len)
}

pub fn size(f: &OpenFile) -> Result<u64, Errno> {
    conn::with(&format!("stat {}", f.path.full), |s| s.stat(f.target()))?
        .map(|m| m.size)
        .ok_or(libc::ENOENT)
}

pub fn seek(fd: c_int, f: &OpenFile, offset: i64, whence: c_int) -> Result<i64, Errno> {
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => fdtable::position(fd),
        libc::SEEK_END => size(f)? as i64,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            // No holes are reported: the whole file is data.
            let end = size(f)? as i64;
            if offset < 0 || offset >= end {
                return Err(libc::ENXIO);
            }
            let to = if whence == libc::SEEK_DATA {
                offset
            } else {
                end
            };
            return Ok(fdtable::set_position(fd, to));
        }
        _ => return Err(libc::EINVAL),
    };
    let to = base
        .checked_add(offset)
        .filter(|&p| p >= 0)
        .ok_or(libc::EINVAL)?;
    Ok(fdtable::set_position(fd, to))
}

/// One side of a copy: its descriptor, file and the caller's offset
/// pointer (NULL: the descriptor's position, which the copy advances).
pub type CopySide<'a> = (c_int, &'a OpenFile, *mut i64);

/// copy_file_range(2) between two LABIOS descriptors, with the kernel's
/// checks in its order.
pub fn copy_range(
    (fd_in, from, off_in): CopySide,
    (fd_out, to, off_out): CopySide,
    len: usize,
    flags: u32,
) -> Result<usize, Errno> {
    if flags != 0 {
        return Err(libc::EINVAL);
    }
    if !from.readable() || !to.writable() || to.flags.load(Ordering::Relaxed) & libc::O_APPEND != 0
    {
        return Err(libc::EBADF);
    }
    if from.dir || to.dir {
        return Err(libc::EISDIR);
    }
    let offset = |fd: c_int, p: *mut i64| -> Result<i64, Errno> {
        if p.is_null() {
            return Ok(fdtable::position(fd));
        }
        unsafe { crate::guard::mapped(p.cast(), std::mem::size_of::<i64>())? };
        let v = unsafe { p.read_unaligned() };
        if v < 0 {
            return Err(libc::EINVAL);
        }
        Ok(v)
    };
    let (src, dst) = (offset(fd_in, off_in)?, offset(fd_out, off_out)?);
    let what = format!("copy_file_range {} to {}", from.path.full, to.path.full);
    let n = conn::with(&what, |s| {
        s.run(s.client().copy_range(
            from.target(),
            src as u64,
            to.target(),
            dst as u64,
            len as u64,
        ))
    })? as i64;
    for (fd, p, at) in [(fd_in, off_in, src), (fd_out, off_out, dst)] {
        if p.is_null() {
            fdtable::set_position(fd, at + n);
        } else {
            unsafe { p.write_unaligned(at + n) };
        }
    }
    Ok(n as usize)
}

/// Closes a LABIOS descriptor; in asynchronous mode the writes in flight
/// complete first, and their failure is close's.
pub fn close(fd: c_int) -> Result<(), Errno> {
    let Some(f) = fdtable::get(fd) else {
        return Err(libc::EBADF);
    };
    crate::locks::closing(fd, &f);
    fdtable::remove(fd);
    let waited = if !f.dir && f.writable() {
        conn::with(&format!("close {}", f.path.full), |s| {
            if s.mode() == IoMode::Async {
                s.wait_all()
            } else {
                Ok(())
            }
        })
    } else {
        Ok(())
    };
    unsafe { fdtable::close_real(fd) };
    waited
}

pub fn fsync(f: &OpenFile) -> Result<(), Errno> {
    if f.dir {
        return Ok(());
    }
    conn::with(&format!("fsync {}", f.path.full), |s| s.flush(f.target()))
}

/// truncate(2): follows a link at the end, into LABIOS or out of it.
pub fn truncate(path: &Vpath, len: i64) -> Result<(), Errno> {
    let (target, meta) = follow(path.clone())?;
    let path = match target {
        Target::Labios(v) => v,
        Target::Real(None) => return Err(libc::ENOENT),
        Target::Real(Some(p)) => {
            return fdtable::done(unsafe {
                crate::real::real!(truncate64: fn(*const libc::c_char, i64) -> c_int)(
                    p.as_ptr(),
                    len,
                )
            });
        }
    };
    let path = &path;
    let len = u64::try_from(len).map_err(|_| libc::EINVAL)?;
    match meta {
        None => Err(missing(&path.ns)),
        Some(m) if m.kind == FileKind::Dir => Err(libc::EISDIR),
        Some(m) if m.kind.is_special() => Err(libc::EINVAL),
        Some(_) => {
            attrs::changed(&path.ns);
            conn::with(&format!("truncate {}", path.full), |s| {
                s.truncate(&path.ns, len)
            })
        }
    }
}

/// ftruncate(2): the size of the file the descriptor opened.
pub fn ftruncate(f: &OpenFile, len: i64) -> Result<(), Errno> {
    let len = u64::try_from(len).map_err(|_| libc::EINVAL)?;
    attrs::changed(&f.path.ns);
    conn::with(&format!("ftruncate {}", f.path.full), |s| {
        s.truncate(f.target(), len)
    })
}

/// fallocate(2) of an open file ([`labios_client::Client::fallocate`]).
pub fn fallocate(f: &OpenFile, mode: i32, offset: u64, len: u64) -> Result<(), Errno> {
    attrs::changed(&f.path.ns);
    conn::with(&format!("fallocate {}", f.path.full), |s| {
        s.fallocate(f.target(), mode, offset, len)
    })
}

/// The entry a descriptor opened (`None`: it lost its last name), from
/// the attribute cache when its path still names it there.
pub fn fstat(f: &OpenFile) -> Result<Option<FileMeta>, Errno> {
    if let Some(m) = attrs::get(&f.path.ns).filter(|m| Some(m.id) == f.id) {
        return Ok(Some(m));
    }
    conn::with(&format!("fstat {}", f.path.full), |s| s.stat(f.target()))
}

pub fn mkdir(path: &Vpath, mode: u32) -> Result<(), Errno> {
    attrs::changed(&path.ns);
    let mode = masked(mode);
    conn::with(&format!("mkdir {}", path.full), |s| {
        if s.stat(&path.ns)?.is_some() {
            return Err(labios_label::Error::AlreadyExists(path.ns.clone()));
        }
        check_parent(s, &path.ns)?;
        s.mkdir_mode(&path.ns, mode).map(|_| ())
    })
}

/// The process's umask as last set through the intercepted `umask`, or
/// [`UMASK_UNKNOWN`] until it is first needed and read from
/// /proc/self/status (setting it to read it back would race with other
/// threads' creates). A child after `fork` inherits it with the kernel's.
static UMASK: AtomicU32 = AtomicU32::new(UMASK_UNKNOWN);
const UMASK_UNKNOWN: u32 = u32::MAX;

/// The program set its umask to `mask`.
pub fn umask_set(mask: u32) {
    UMASK.store(mask & 0o777, Ordering::Relaxed);
}

/// mknod(2) of a LABIOS path: a FIFO, device or socket entry, or an empty
/// regular file; EEXIST if anything is there.
pub fn mknod(path: &Vpath, mode: u32, dev: u64) -> Result<(), Errno> {
    let kind = match mode & libc::S_IFMT {
        0 | libc::S_IFREG => None,
        libc::S_IFIFO => Some(FileKind::Fifo),
        libc::S_IFCHR => Some(FileKind::CharDevice),
        libc::S_IFBLK => Some(FileKind::BlockDevice),
        libc::S_IFSOCK => Some(FileKind::Socket),
        _ => return Err(libc::EINVAL),
    };
    attrs::changed(&path.ns);
    let perm = masked(mode);
    conn::with(&format!("mknod {}", path.full), |s| {
        check_parent(s, &path.ns)?;
        match kind {
            Some(kind) => s.mknod(&path.ns, kind, perm, dev).map(drop),
            None => match s.stat(&path.ns)? {
                Some(_) => Err(labios_label::Error::AlreadyExists(path.ns.clone())),
                None => s.create_mode(&path.ns, perm).map(drop),
            },
        }
    })
}

/// `mode`'s permission bits less the process's umask, as the kernel
/// applies it to open(O_CREAT) and mkdir.
fn masked(mode: u32) -> u32 {
    let mut umask = UMASK.load(Ordering::Relaxed);
    if umask == UMASK_UNKNOWN {
        let status = conn::inside(|| std::fs::read_to_string("/proc/self/status"));
        umask = status
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
            })
            .unwrap_or(0o022);
        let _ = UMASK.compare_exchange(UMASK_UNKNOWN, umask, Ordering::Relaxed, Ordering::Relaxed);
    }
    mode & 0o7777 & !umask
}

/// chmod, chown and utimensat of the entry at `path`, or of what the
/// symbolic links at its end lead to when `follow`.
pub fn set_attr(path: Vpath, follow_links: bool, attr: SetAttr) -> Result<(), Errno> {
    let path = if follow_links {
        match follow(path)? {
            (Target::Labios(v), Some(_)) => v,
            (Target::Labios(v), None) => return Err(missing(&v.ns)),
            // A link out of LABIOS: the host's entry is not ours to change.
            (Target::Real(_), _) => return Err(libc::EXDEV),
        }
    } else {
        path
    };
    attrs::changed(&path.ns);
    conn::with(&format!("set attributes of {}", path.full), |s| {
        s.set_attr(&path.ns, attr)
    })
    .map(|m| attrs::put([&m]))
}

/// fchmod, fchown and futimens: of the entry the descriptor opened.
pub fn set_attr_fd(f: &OpenFile, attr: SetAttr) -> Result<(), Errno> {
    attrs::changed(&f.path.ns);
    conn::with(&format!("set attributes of {}", f.path.full), |s| {
        s.set_attr(f.target(), attr)
    })
    .map(drop)
}

/// unlink (`dir` false) or rmdir (`dir` true).
pub fn remove(path: &Vpath, dir: bool) -> Result<(), Errno> {
    match lookup(path)? {
        None => Err(missing(&path.ns)),
        Some(m) if (m.kind == FileKind::Dir) != dir => {
            Err(if dir { libc::ENOTDIR } else { libc::EISDIR })
        }
        Some(_) if path.ns == "/" => Err(libc::EBUSY),
        Some(m) => {
            attrs::changed_tree(&path.ns);
            conn::with(&format!("remove {}", path.full), |s| s.remove_entry(m))
        }
    }
}

/// rename, or `renameat2` with its flags as `how`.
pub fn rename_as(from: &Vpath, to: &Vpath, how: RenameHow) -> Result<(), Errno> {
    match lookup(from)? {
        None => Err(missing(&from.ns)),
        // Onto a directory above it: the kernel's rename trap says
        // ENOTEMPTY before it compares the two kinds (EINVAL for an
        // exchange, which would put the directory inside itself).
        Some(_)
            if from
                .ns
                .starts_with(&format!("{}/", to.ns.trim_end_matches('/'))) =>
        {
            Err(if how == RenameHow::Exchange {
                libc::EINVAL
            } else {
                libc::ENOTEMPTY
            })
        }
        Some(_) => {
            attrs::changed_tree(&from.ns);
            attrs::changed_tree(&to.ns);
            conn::with(&format!("rename {} {}", from.full, to.full), |s| {
                check_parent(s, &to.ns)?;
                s.rename_as(&from.ns, &to.ns, how)
            })
        }
    }
}

pub fn symlink(target: &str, path: &Vpath) -> Result<(), Errno> {
    // The kernel resolves an empty path before it makes anything.
    if target.is_empty() {
        return Err(libc::ENOENT);
    }
    attrs::changed(&path.ns);
    conn::with(&format!("symlink {}", path.full), |s| {
        check_parent(s, &path.ns)?;
        s.symlink(target, &path.ns).map(|_| ())
    })
}

/// A hard link `to` of `from`, which is followed when it is a symbolic
/// link and `follow` (linkat's AT_SYMLINK_FOLLOW) says so. A link out of
/// LABIOS cannot get a LABIOS name: EXDEV, as between file systems.
pub fn link(from: Vpath, to: &Vpath, follow: bool) -> Result<(), Errno> {
    let from = if follow {
        match self::follow(from)? {
            (Target::Labios(v), _) => v,
            (Target::Real(_), _) => return Err(libc::EXDEV),
        }
    } else {
        from
    };
    match lookup(&from)? {
        None => return Err(libc::ENOENT),
        // The kernel makes the new name before it looks at the old one's
        // kind: a taken name is EEXIST even for a directory.
        Some(m) if m.kind == FileKind::Dir && lookup(to)?.is_some() => return Err(libc::EEXIST),
        Some(m) if m.kind == FileKind::Dir => return Err(libc::EPERM),
        Some(_) => {}
    }
    attrs::changed(&from.ns);
    attrs::changed(&to.ns);
    conn::with(&format!("link {} {}", from.full, to.full), |s| {
        check_parent(s, &to.ns)?;
        s.link(&from.ns, &to.ns).map(|_| ())
    })
}

/// The target of the link at `path`; EINVAL (quietly: `realpath` asks
/// of every component) when it is no link.
pub fn readlink(path: &Vpath) -> Result<String, Errno> {
    conn::with(&format!("readlink {}", path.full), |s| {
        match s.stat(&path.ns)? {
            Some(m) if m.kind == FileKind::Symlink => s.readlink(&path.ns).map(Some),
            Some(_) => Ok(None),
            None => Err(labios_label::Error::NotFound(path.ns.clone())),
        }
    })?
    .ok_or(libc::EINVAL)
}

/// The entry at `path`, not following a link at its end (lstat), but
/// through links among its directories, as the kernel walks a path.
pub fn stat(path: &Vpath) -> Result<FileMeta, Errno> {
    let mut path = path.clone();
    let mut hops = 0;
    loop {
        let why = match lookup(&path) {
            Ok(Some(m)) => return Ok(m),
            Ok(None) => missing(&path.ns),
            Err(e) => e,
        };
        match (why, through_links(&path, &mut hops)?) {
            (libc::ENOTDIR | libc::ENOENT, Some(Target::Labios(next))) => path = next,
            (why, _) => return Err(why),
        }
    }
}

/// Why nothing is at `ns`: ENOTDIR when the nearest existing ancestor is
/// not a directory (a path through a file), ENOENT otherwise, as the
/// kernel answers. Costs a look-up per missing ancestor, only on a miss;
/// a parent this process knows to be a directory costs none.
pub fn missing(ns: &str) -> Errno {
    let mut at = ns;
    while let Some(p) = parent(at) {
        if p == "/" || attrs::known_dir(p) {
            return libc::ENOENT;
        }
        match conn::with(&format!("stat {p}"), |s| s.stat(p)) {
            Ok(Some(m)) if m.kind == FileKind::Dir => {
                attrs::dir_seen(p);
                return libc::ENOENT;
            }
            Ok(Some(_)) => return libc::ENOTDIR,
            Ok(None) => at = p,
            Err(e) => return e,
        }
    }
    libc::ENOENT
}

/// The entry at `path` (`None`: nothing there), from the attribute cache
/// when this process looked it up within the lease.
pub fn lookup(path: &Vpath) -> Result<Option<FileMeta>, Errno> {
    if let Some(m) = attrs::get(&path.ns) {
        return Ok(Some(m));
    }
    let meta = conn::with(&format!("stat {}", path.full), |s| s.stat(&path.ns))?;
    if let Some(m) = &meta {
        attrs::put([m]);
    }
    Ok(meta)
}

/// Capacity and use of the whole deployment, once `path` is known to
/// exist: what `statfs` reports for any LABIOS path.
pub fn capacity(path: &Vpath) -> Result<(u64, u64), Errno> {
    exists(path)?;
    conn::with(&format!("statfs {}", path.full), |s| s.capacity())
}

/// Whether the entry exists (chmod and friends).
pub fn exists(path: &Vpath) -> Result<(), Errno> {
    stat(path).map(|_| ())
}

/// access(2) and its variants: whether this process may read, write or
/// execute (`mode`, of R_OK, W_OK, X_OK; F_OK: exists) the entry `path`
/// leads to, decided from its mode by the rules `labios serve` applies
/// (`Cred::permits`) with the process's real user and groups (`effective`:
/// its effective ones, as eaccess and AT_EACCESS), as the kernel does. It
/// answers only what a call would meet: every call that acts is checked
/// by the server again. `Some(host)`: a link leads out of LABIOS to
/// `host`, whose access libc decides.
pub fn access(
    path: &Vpath,
    mode: c_int,
    effective: bool,
    nofollow: bool,
) -> Result<Option<std::ffi::CString>, Errno> {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(libc::EINVAL);
    }
    let meta = if nofollow {
        stat(path)?
    } else {
        match follow(path.clone())? {
            (Target::Labios(_), Some(m)) => m,
            (Target::Labios(p), None) => return Err(missing(&p.ns)),
            (Target::Real(Some(host)), _) => return Ok(Some(host)),
            (Target::Real(None), _) => return Err(libc::ENOENT),
        }
    };
    if mode == libc::F_OK || process_cred(effective).permits(&meta, mode as u32) {
        Ok(None)
    } else {
        Err(libc::EACCES)
    }
}

/// This process's user, group and supplementary groups: the real ones,
/// or the effective ones.
fn process_cred(effective: bool) -> labios_store::access::Cred {
    // SAFETY: these calls only read the process's credentials; getgroups
    // writes at most `n` entries into a buffer of `n`.
    unsafe {
        let (uid, gid) = if effective {
            (libc::geteuid(), libc::getegid())
        } else {
            (libc::getuid(), libc::getgid())
        };
        let n = libc::getgroups(0, std::ptr::null_mut()).max(0);
        let mut groups = vec![0; n as usize];
        let got = libc::getgroups(n, groups.as_mut_ptr()).max(0);
        groups.truncate(got as usize);
        labios_store::access::Cred { uid, gid, groups }
    }
}
