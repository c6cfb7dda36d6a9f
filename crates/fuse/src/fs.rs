//! The FUSE operations, each one or a few LABIOS client calls. The kernel's
//! page cache sits in front (so `mmap`, readahead and small reads work as on
//! any file system), writes go through it to LABIOS at once (no write-back
//! cache: a write the kernel acknowledged is a label published, and in the
//! synchronous mode one completed), and a file's cached pages are dropped
//! when it is opened again or its size changes (close-to-open consistency,
//! as NFS gives).

use crate::nodes::{child, node_of, Nodes};
use bytes::Bytes;
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use labios_client::{errno_of, xattr, Client, FileRef, IoMode, LockCall};
use labios_label::Error;
use labios_label::FileId;
use labios_store::access::{Cred, READ, WRITE};
use labios_store::locks::{LockKind, LockSpace, TO_EOF};
use labios_store::remote::acting_as;
use labios_store::RenameHow;
use labios_store::{FileKind, FileMeta, SetAttr, SetTime};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One label's worth of data per call: programs size their buffers by
/// `st_blksize`, and the kernel sends writes of up to this much.
const BLOCK: u32 = 1 << 20;
/// The block size `statfs` counts in.
const STATFS_BLOCK: u32 = 4096;
/// A file handle whose writes are appends (opened with `O_APPEND`).
/// The bit of a handle opened with O_APPEND; the other bits number the
/// opens (one handle per open, so that its locks can go with it).
const APPEND: u64 = 1;

thread_local! {
    /// The caller of the request this FUSE thread serves (see
    /// [`LabiosFs::caller`]).
    static CALLER: std::cell::RefCell<Option<Cred>> = const { std::cell::RefCell::new(None) };
}

/// How the mount behaves.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long the kernel may trust an entry or its attributes before it
    /// asks again: what another client changed shows after at most this.
    pub cache_timeout: Duration,
}

/// One directory listing, taken at `opendir`, so that offsets stay valid
/// while a program reads it in several calls.
type Listing = Vec<(INodeNo, FileType, String)>;

pub struct LabiosFs {
    client: Client,
    runtime: tokio::runtime::Handle,
    settings: Settings,
    nodes: Nodes,
    listings: Mutex<HashMap<u64, Listing>>,
    next_listing: AtomicU64,
    next_handle: AtomicU64,
    lock_owners: crate::locks::Owners,
    /// The file each open handle holds ([`Client::hold`]): an unlinked
    /// file lives, by its node, until its last handle is released.
    held: Mutex<HashMap<u64, FileId>>,
}

impl LabiosFs {
    /// `runtime` runs the client's calls; the FUSE threads block on it.
    pub fn new(client: Client, runtime: tokio::runtime::Handle, settings: Settings) -> LabiosFs {
        LabiosFs {
            client,
            runtime,
            settings,
            nodes: Nodes::default(),
            listings: Mutex::new(HashMap::new()),
            next_listing: AtomicU64::new(1),
            next_handle: AtomicU64::new(1),
            lock_owners: crate::locks::Owners::default(),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// A handle for an open of `meta`, which holds a regular file until
    /// the handle is released.
    fn open_handle(&self, meta: &FileMeta, flags: i32) -> Result<(FileHandle, FopenFlags), Errno> {
        let (fh, open) = self.handle(flags);
        if meta.kind == FileKind::File {
            self.call("open", &meta.path, self.client.hold(meta.id))?;
            self.held.lock().insert(fh.0, meta.id);
        }
        Ok((fh, open))
    }

    /// Notes who made the request this thread now serves: a caller other
    /// than root has its requests checked by `labios serve` as its own
    /// ([`labios_store::remote::acting_as`]); root's go as the mount's.
    fn caller(&self, req: &Request) {
        let cred = (req.uid() != 0).then(|| {
            let pid = i32::try_from(req.pid()).ok();
            Cred::of_process(req.uid(), req.gid(), pid)
        });
        CALLER.with(|c| *c.borrow_mut() = cred);
    }

    /// Runs one client call, on behalf of the request's caller; a failure
    /// becomes its errno, and the ones the errno alone does not explain are
    /// logged with the operation and path.
    fn call<T>(
        &self,
        what: &str,
        path: &str,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Errno> {
        let result = match CALLER.with(|c| c.borrow().clone()) {
            Some(cred) => self.runtime.block_on(acting_as(cred, work)),
            None => self.runtime.block_on(work),
        };
        result.map_err(|e| {
            let errno = errno_of(&e);
            if !matches!(
                errno,
                libc::ENOENT
                    | libc::EEXIST
                    | libc::ENOTEMPTY
                    | libc::EISDIR
                    | libc::ENOTDIR
                    | libc::EAGAIN
                    | libc::EDEADLK
                    | libc::EINTR
                    // An attribute XATTR_REPLACE or a removal needs.
                    | libc::ENODATA
            ) {
                tracing::warn!("{what} {path}: {e}");
            }
            Errno::from_i32(errno)
        })
    }

    /// A new handle for an open with `flags`; appends bypass the page
    /// cache, whose pages have places, not an end.
    fn handle(&self, flags: i32) -> (FileHandle, FopenFlags) {
        let n = self.next_handle.fetch_add(1, Ordering::Relaxed) << 1;
        if flags & libc::O_APPEND != 0 {
            (FileHandle(n | APPEND), FopenFlags::FOPEN_DIRECT_IO)
        } else {
            (FileHandle(n), FopenFlags::empty())
        }
    }

    /// The LABIOS file behind node `ino`.
    fn file_of(&self, ino: INodeNo) -> Result<FileId, Errno> {
        if ino == INodeNo::ROOT {
            return Ok(self.stat("/")?.id);
        }
        Ok(ino.0.wrapping_sub(2))
    }

    /// Node `ino` as data calls and getattr name it: its file by id, so
    /// that whatever another client renamed or put at its path since the
    /// kernel's lookup never answers for it.
    fn target(&self, ino: INodeNo) -> FileRef<'static> {
        if ino == INodeNo::ROOT {
            FileRef::Path("/")
        } else {
            FileRef::Id(ino.0.wrapping_sub(2))
        }
    }

    /// A lock call of the kernel's (`typ` F_RDLCK, F_WRLCK or F_UNLCK).
    fn lock_call(
        &self,
        ino: INodeNo,
        owner: LockOwner,
        (start, end): (u64, u64),
        typ: i32,
        pid: u32,
    ) -> Result<LockCall, Errno> {
        let kind = match typ {
            libc::F_RDLCK => Some(LockKind::Read),
            libc::F_WRLCK => Some(LockKind::Write),
            libc::F_UNLCK => None,
            _ => return Err(Errno::EINVAL),
        };
        Ok(LockCall {
            file: self.file_of(ino)?,
            space: LockSpace::Record,
            owner: owner.0,
            pid,
            kind,
            start,
            end: if end >= i64::MAX as u64 { TO_EOF } else { end },
        })
    }

    /// Releases `owner`'s locks on `file`, logging a failure (a close
    /// reports none of it).
    fn unlock(&self, file: FileId, owner: u64) {
        if let Err(e) = self.runtime.block_on(self.client.unlock_owner(owner, file)) {
            tracing::warn!("releasing the locks of owner {owner:#x} on file {file}: {e}");
        }
    }

    fn stat(&self, path: &str) -> Result<FileMeta, Errno> {
        self.call("stat", path, self.client.stat(path))
    }

    fn attr(&self, m: &FileMeta) -> FileAttr {
        let time = |ns: u64| UNIX_EPOCH + Duration::from_nanos(ns);
        FileAttr {
            ino: node_of(m),
            size: m.size,
            blocks: m.size.div_ceil(512),
            atime: time(m.atime),
            mtime: time(m.mtime),
            ctime: time(m.ctime),
            crtime: time(m.ctime),
            kind: kind_of(m),
            perm: (m.mode & 0o7777) as u16,
            nlink: m.nlink,
            uid: m.uid,
            gid: m.gid,
            rdev: self.device_number(m),
            blksize: BLOCK,
            flags: 0,
        }
    }

    /// A device's number (`st_rdev`), 0 for anything else; only devices
    /// cost a look-up.
    fn device_number(&self, m: &FileMeta) -> u32 {
        if !matches!(m.kind, FileKind::CharDevice | FileKind::BlockDevice) {
            return 0;
        }
        self.call("stat", &m.path, self.client.device_number(&m.path))
            .ok()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    }

    /// The path of entry `name` in directory node `parent`.
    fn child_of(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        child(&self.nodes.path(parent)?, name)
    }

    /// A node whose name went while the file keeps others (hard links)
    /// goes on under the one the inventory names first.
    fn name_left(&self, node: Option<INodeNo>) {
        let Some(node) = node else { return };
        let id = node.0 - 2;
        if let Ok(meta) = self.call("stat", "", self.client.catalog().file(id)) {
            self.nodes.renamed_to(&meta);
        }
    }

    /// Replies with an entry the kernel now holds a reference to.
    fn entry(&self, meta: &FileMeta, reply: ReplyEntry) {
        self.nodes.remember(meta);
        reply.entry(
            &self.settings.cache_timeout,
            &self.attr(meta),
            Generation(0),
        );
    }

    /// The path of `node`, checked to still be the file the kernel means:
    /// another client may have removed or replaced it since the lookup.
    fn current(&self, node: INodeNo) -> Result<(String, FileMeta), Errno> {
        let path = self.nodes.path(node)?;
        let meta = self.stat(&path)?;
        if node_of(&meta) != node {
            return Err(Errno::ESTALE);
        }
        Ok((path, meta))
    }

    fn listing(&self, dir: &str) -> Result<Listing, Errno> {
        let all = self.call("readdir", dir, self.client.list(dir))?;
        let parent = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        let mut out = vec![
            (INodeNo::ROOT, FileType::Directory, ".".to_string()),
            (INodeNo::ROOT, FileType::Directory, "..".to_string()),
        ];
        out.extend(all.iter().filter_map(|m| {
            let name = m.path.strip_prefix(&parent)?;
            (!name.is_empty() && !name.contains('/') && m.path != dir)
                .then(|| (node_of(m), kind_of(m), name.to_string()))
        }));
        Ok(out)
    }

    fn xattr(&self, path: &str, name: &str) -> Result<Option<Bytes>, Errno> {
        self.call("getxattr", path, self.client.xattr(path, name))
    }

    fn set_xattr(
        &self,
        node: INodeNo,
        name: &OsStr,
        value: Option<&[u8]>,
        flags: i32,
    ) -> Result<(), Errno> {
        let path = self.nodes.path(node)?;
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        if let Some(errno) = xattr::bad_name(name) {
            return Err(Errno::from_i32(errno));
        }
        if xattr::kernel_namespace(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let presence = xattr::presence(flags, value.is_none());
        let value = value.map(Bytes::copy_from_slice);
        let change = self.client.set_xattr_if(&path, name, value, presence);
        self.call("setxattr", &path, change)
    }
}

fn kind_of(m: &FileMeta) -> FileType {
    match m.kind {
        FileKind::Dir => FileType::Directory,
        FileKind::File => FileType::RegularFile,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

/// An xattr reply: its size when asked for the size (0), ERANGE when the
/// caller's buffer is too small, the bytes otherwise.
fn reply_xattr(bytes: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(bytes.len() as u32);
    } else if (size as usize) < bytes.len() {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(bytes);
    }
}

macro_rules! reply_with {
    ($reply:ident, $result:expr, |$v:pat_param| $ok:expr) => {
        match $result {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for LabiosFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Writes of one label; the kernel may not allow as much.
        let _ = config.set_max_write(BLOCK);
        let _ = config.set_max_readahead(BLOCK);
        // fcntl locks held by LABIOS, across hosts (a kernel without it
        // keeps them itself, for this mount only).
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS) {
            tracing::warn!("the kernel keeps fcntl locks itself ({missing:?} unsupported)");
        }
        Ok(())
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        if let Some((file, owners)) = self.lock_owners.released(fh.0) {
            for owner in owners {
                self.unlock(file, owner);
            }
        }
        let held = self.held.lock().remove(&fh.0);
        if let Some(file) = held {
            // The kernel's release has no error to give: the session's end
            // lets go of what a failure here left held.
            let _ = self.call("release", &file.to_string(), self.client.let_go(file));
        }
        reply.ok()
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.caller(req);
        let result = self
            .lock_call(ino, lock_owner, (start, end), typ, pid)
            .and_then(|c| self.call("getlk", "", self.client.lock_conflict(c)));
        reply_with!(reply, result, |got| match got {
            None => reply.locked(start, end, libc::F_UNLCK, pid),
            Some(h) => reply.locked(
                h.start,
                if h.end == TO_EOF {
                    i64::MAX as u64
                } else {
                    h.end
                },
                match h.kind {
                    LockKind::Read => libc::F_RDLCK,
                    LockKind::Write => libc::F_WRLCK,
                },
                h.pid,
            ),
        })
    }

    /// A lock that waits is answered when granted, from the runtime: a
    /// FUSE thread is never held by it.
    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        let c = match self.lock_call(ino, lock_owner, (start, end), typ, pid) {
            Ok(c) => c,
            Err(e) => return reply.error(e),
        };
        if c.kind.is_some() {
            self.lock_owners.took(c.file, fh.0, c.owner);
        }
        if !sleep {
            let result = self.call("setlk", "", self.client.lock(c, false));
            return reply_with!(reply, result, |()| reply.ok());
        }
        let client = self.client.clone();
        let cred = CALLER.with(|c| c.borrow().clone());
        self.runtime.spawn(async move {
            let work = client.lock(c, true);
            let result = match cred {
                Some(cred) => acting_as(cred, work).await,
                None => work.await,
            };
            match result {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(errno_of(&e))),
            }
        });
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.caller(req);
        let result = self.child_of(parent, name).and_then(|p| self.stat(&p));
        reply_with!(reply, result, |meta| self.entry(&meta, reply))
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.caller(req);
        self.nodes.forget(ino, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.caller(req);
        let file = self.target(ino);
        let result = self.call("getattr", &file.to_string(), self.client.stat(file));
        reply_with!(reply, result, |m| reply
            .attr(&self.settings.cache_timeout, &self.attr(&m)))
    }

    /// Mode, owner, group and times go to the inventory in one change
    /// (`labios serve` decides whether the caller may), then the size.
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.caller(req);
        let time = |t: Option<TimeOrNow>| match t {
            None => Ok(None),
            Some(TimeOrNow::Now) => Ok(Some(SetTime::Now)),
            Some(TimeOrNow::SpecificTime(t)) => t
                .duration_since(UNIX_EPOCH)
                .ok()
                .and_then(|d| u64::try_from(d.as_nanos()).ok())
                .map(|n| Some(SetTime::At(n)))
                .ok_or(Errno::EINVAL),
        };
        let attr = time(atime).and_then(|atime| {
            Ok(SetAttr {
                mode: mode.map(|m| m & 0o7777),
                uid,
                gid,
                atime,
                mtime: time(mtime)?,
            })
        });
        let file = self.target(ino);
        let shown = file.to_string();
        let result = attr.and_then(|attr| {
            let meta = if attr == SetAttr::default() {
                self.call("stat", &shown, self.client.stat(file))?
            } else {
                self.call("setattr", &shown, self.client.set_attr(file, attr))?
            };
            match size {
                Some(_) if meta.kind == FileKind::Dir => Err(Errno::EISDIR),
                Some(size) => {
                    self.call("truncate", &shown, self.client.truncate(file, size))?;
                    self.call("stat", &shown, self.client.stat(file))
                }
                None => Ok(meta),
            }
        });
        reply_with!(reply, result, |m| reply
            .attr(&self.settings.cache_timeout, &self.attr(&m)))
    }

    /// Regular files, FIFOs, devices and sockets: the special ones are
    /// names in the inventory, served by the kernel when opened.
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.caller(req);
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG => None,
            libc::S_IFIFO => Some(FileKind::Fifo),
            libc::S_IFCHR => Some(FileKind::CharDevice),
            libc::S_IFBLK => Some(FileKind::BlockDevice),
            libc::S_IFSOCK => Some(FileKind::Socket),
            _ => return reply.error(Errno::EINVAL),
        };
        let perm = mode & 0o7777 & !umask;
        let result = self.child_of(parent, name).and_then(|p| match kind {
            None => self.call("create", &p, self.client.create_mode(&p, perm)),
            Some(kind) => self.call(
                "mknod",
                &p,
                self.client.mknod(&p, kind, perm, u64::from(rdev)),
            ),
        });
        reply_with!(reply, result, |meta| self.entry(&meta, reply))
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.caller(req);
        let result = self.child_of(parent, link_name).and_then(|p| {
            let target = target.to_str().ok_or(Errno::EINVAL)?;
            self.call("symlink", &p, self.client.symlink(target, &p))
        });
        reply_with!(reply, result, |meta| self.entry(&meta, reply))
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.caller(req);
        let result = self
            .nodes
            .path(ino)
            .and_then(|p| self.call("readlink", &p, self.client.readlink(&p)));
        reply_with!(reply, result, |target| reply.data(target.as_bytes()))
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.caller(req);
        let mode = mode & 0o7777 & !umask;
        let result = self
            .child_of(parent, name)
            .and_then(|p| self.call("mkdir", &p, self.client.mkdir_mode(&p, mode)));
        reply_with!(reply, result, |meta| self.entry(&meta, reply))
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.caller(req);
        let result = self.child_of(parent, name).and_then(|p| {
            self.call("unlink", &p, self.client.remove(&p))?;
            self.name_left(self.nodes.removed(&p));
            Ok(())
        });
        reply_with!(reply, result, |()| reply.ok())
    }

    /// A hard link: the kernel's node of `ino` gets the further name.
    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.caller(req);
        let result = self.nodes.path(ino).and_then(|from| {
            let to = self.child_of(newparent, newname)?;
            self.call("link", &to, self.client.link(&from, &to))
        });
        reply_with!(reply, result, |meta| self.entry(&meta, reply))
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.caller(req);
        self.unlink(req, parent, name, reply)
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        let result = (|| {
            let from = self.child_of(parent, name)?;
            let to = self.child_of(newparent, newname)?;
            let exchange = RenameFlags::RENAME_EXCHANGE;
            let how = match (
                flags.contains(exchange),
                flags.contains(RenameFlags::RENAME_NOREPLACE),
            ) {
                (true, true) => return Err(Errno::EINVAL),
                (true, false) => RenameHow::Exchange,
                (false, true) => RenameHow::NoReplace,
                (false, false) => RenameHow::Replace,
            };
            self.call("rename", &from, self.client.rename_as(&from, &to, how))?;
            if how == RenameHow::Exchange {
                self.nodes.exchanged(&from, &to);
            } else {
                self.name_left(self.nodes.renamed(&from, &to));
            }
            Ok(())
        })();
        reply_with!(reply, result, |()| reply.ok())
    }

    /// A file opened for appending bypasses the page cache: its writes go
    /// where the inventory decides (atomically, across every client), not
    /// where the kernel believes the end is. `labios serve` checks the
    /// caller at open, as the kernel does, and what it allowed holds for
    /// the handle's reads and writes (`Client::open_file`).
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.caller(req);
        let access = match flags.0 & libc::O_ACCMODE {
            libc::O_RDONLY => READ,
            libc::O_WRONLY => WRITE,
            _ => READ | WRITE,
        };
        let file = self.target(ino);
        let opened = match file {
            FileRef::Id(id) => {
                self.call("open", &file.to_string(), self.client.open_file(id, access))
            }
            FileRef::Path(_) => self.call("open", &file.to_string(), self.client.stat(file)),
        };
        let result = opened.and_then(|meta| {
            if meta.kind == FileKind::Dir {
                return Err(Errno::EISDIR);
            }
            self.open_handle(&meta, flags.0)
        });
        reply_with!(reply, result, |(fh, open)| reply.opened(fh, open))
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.caller(req);
        let file = self.target(ino);
        let result = self.call(
            "read",
            &file.to_string(),
            self.client.read_at(file, offset, u64::from(size)),
        );
        reply_with!(reply, result, |data| reply.data(&data))
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.caller(req);
        let len = data.len() as u32;
        let data = Bytes::copy_from_slice(data);
        // Page write-back (a shared mapping) may come through any handle
        // open for writing, an appending one too: its pages have their
        // place, so it is always a positional write.
        let append = fh.0 & APPEND != 0 && !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let file = self.target(ino);
        let shown = file.to_string();
        let result = if append {
            self.call("append", &shown, self.client.append(file, data))
                .map(|_| ())
        } else {
            self.call("write", &shown, self.client.write_at(file, offset, data))
        };
        reply_with!(reply, result, |()| reply.written(len))
    }

    /// `close`: in the asynchronous mode, waits for what was published, so
    /// that close reports a write that failed (as the NFS client does).
    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        if let Ok(file) = self.file_of(ino) {
            if self.lock_owners.closed(file, fh.0, lock_owner.0) {
                self.unlock(file, lock_owner.0);
            }
        }
        if self.client.config().mode == IoMode::Sync {
            return reply.ok();
        }
        let shown = self.target(ino).to_string();
        let result = self.call("close", &shown, self.client.wait_all());
        reply_with!(reply, result, |()| reply.ok())
    }

    /// Waits for the file's writes and makes them durable on the workers.
    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        let file = self.target(ino);
        let result = self.call("fsync", &file.to_string(), self.client.flush(file));
        reply_with!(reply, result, |()| reply.ok())
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.caller(req);
        let result = self.nodes.path(ino).and_then(|p| self.listing(&p));
        reply_with!(reply, result, |listing| {
            let fh = self.next_listing.fetch_add(1, Ordering::Relaxed);
            self.listings.lock().insert(fh, listing);
            reply.opened(FileHandle(fh), FopenFlags::empty())
        })
    }

    fn readdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.caller(req);
        let listings = self.listings.lock();
        let Some(listing) = listings.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (node, kind, name)) in listing.iter().enumerate().skip(offset as usize) {
            if reply.add(*node, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn releasedir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        self.listings.lock().remove(&fh.0);
        reply.ok()
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        // The inventory commits each namespace change before answering.
        reply.ok()
    }

    /// The worker pool's capacity and use: `df` shows the deployment.
    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.caller(req);
        let workers = self.call("statfs", "/", self.client.catalog().inventory().workers());
        reply_with!(reply, workers, |workers| {
            let (cap, used) = workers.iter().fold((0u64, 0u64), |(c, u), w| {
                (c.saturating_add(w.spec.capacity), u.saturating_add(w.used))
            });
            let block = u64::from(STATFS_BLOCK);
            let free = cap.saturating_sub(used) / block;
            reply.statfs(
                cap / block,
                free,
                free,
                u64::MAX / 2,
                u64::MAX / 2,
                STATFS_BLOCK,
                255,
                STATFS_BLOCK,
            )
        })
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        let result = self.set_xattr(ino, name, Some(value), flags);
        reply_with!(reply, result, |()| reply.ok())
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.caller(req);
        let result = self.nodes.path(ino).and_then(|path| {
            let name = name.to_str().ok_or(Errno::NO_XATTR)?;
            if let Some(errno) = xattr::bad_name(name) {
                return Err(Errno::from_i32(errno));
            }
            if xattr::kernel_namespace(name) {
                return Err(Errno::NO_XATTR);
            }
            self.xattr(&path, name)?.ok_or(Errno::NO_XATTR)
        });
        reply_with!(reply, result, |value| reply_xattr(&value, size, reply))
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.caller(req);
        let result = self
            .nodes
            .path(ino)
            .and_then(|path| self.call("listxattr", &path, self.client.xattrs(&path)));
        reply_with!(reply, result, |all| reply_xattr(
            &xattr::name_list(&all),
            size,
            reply
        ))
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.caller(req);
        let result = self.set_xattr(ino, name, None, 0);
        reply_with!(reply, result, |()| reply.ok())
    }

    /// access(2) by the permission bits, with the rules `labios serve`
    /// applies (the kernel asks only without `default_permissions`).
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.caller(req);
        let result = self.current(ino).and_then(|(_, meta)| {
            let pid = i32::try_from(req.pid()).ok();
            let cred = Cred::of_process(req.uid(), req.gid(), pid);
            let want = (mask.bits() as u32) & 0o7;
            if cred.permits(&meta, want) {
                Ok(())
            } else {
                Err(Errno::EACCES)
            }
        });
        reply_with!(reply, result, |()| reply.ok())
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.caller(req);
        let mode = mode & 0o7777 & !umask;
        let result = self
            .child_of(parent, name)
            .and_then(|p| self.call("create", &p, self.client.create_mode(&p, mode)))
            .and_then(|meta| Ok((self.open_handle(&meta, flags)?, meta)));
        reply_with!(reply, result, |((fh, open), meta)| {
            self.nodes.remember(&meta);
            reply.created(
                &self.settings.cache_timeout,
                &self.attr(&meta),
                Generation(0),
                fh,
                open,
            )
        })
    }

    /// A copy of labels: the bytes go from worker to worker, not through
    /// the kernel or this process.
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.caller(req);
        let (from, to) = (self.target(ino_in), self.target(ino_out));
        let result = self.call(
            "copy_file_range",
            &from.to_string(),
            self.client
                .copy_range(from, offset_in, to, offset_out, len.min(u32::MAX.into())),
        );
        // The kernel's answer is a 32-bit count; copies are far shorter.
        reply_with!(reply, result, |n| reply.written(n as u32))
    }

    /// No device controls: a terminal probe (`isatty`) is told no.
    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        self.caller(req);
        reply.error(Errno::ENOTTY)
    }

    /// The kernel has checked the descriptor, range and mode combination;
    /// the modes are `Client::fallocate`'s (holes and zeroed ranges are
    /// labels that carry no data).
    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.caller(req);
        let file = self.target(ino);
        let result = self.call(
            "fallocate",
            &file.to_string(),
            self.client.fallocate(file, mode, offset, length),
        );
        reply_with!(reply, result, |()| reply.ok())
    }
}

/// Mounts `fs` at `mountpoint`; `allow_other` lets every user in (with
/// the kernel checking the permission bits LABIOS reports).
pub fn session(
    fs: LabiosFs,
    mountpoint: &Path,
    allow_other: bool,
) -> std::io::Result<fuser::Session<LabiosFs>> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("labios".to_string()),
        fuser::MountOption::Subtype("labios".to_string()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if allow_other {
        config.acl = fuser::SessionACL::All;
        config
            .mount_options
            .push(fuser::MountOption::DefaultPermissions);
    }
    // Calls wait on the network (workers, NATS, Redis); several threads
    // keep one slow call from holding every program up.
    config.n_threads = Some(4);
    config.clone_fd = true;
    fuser::Session::new(fs, mountpoint, &config)
}
