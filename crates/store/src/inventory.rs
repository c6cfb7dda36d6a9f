//! The inventory (article 3.3.1c): file metadata (path -> stat, path ->
//! ordered extents -> worker), label status and label -> worker, worker
//! statuses (3.3.3b) and the application registry (3.3.2a).
//!
//! Extents record the id of the label that wrote them and a newer label
//! always wins over an older one, whatever order workers finish in: this is
//! what keeps write-after-write correct when labels run in parallel.

use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{AppId, Error, FileId, LabelId, LabelStatus, Result, WorkerId, WorkerStatus};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
    /// A symbolic link: its target is the extended attribute
    /// [`LINK_TARGET`], its size the target's length, and it holds no data.
    Symlink,
    /// Special files: names in the namespace that hold no data. The kernel
    /// serves what opening one does (a pipe, a device, a socket) on
    /// `labios mount`; a device's number is the extended attribute
    /// [`DEVICE_NUMBER`].
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
}

impl FileKind {
    /// A FIFO, device or socket.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::CharDevice | FileKind::BlockDevice | FileKind::Socket
        )
    }

    /// The kind in words, for messages.
    pub fn word(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "directory",
            FileKind::Symlink => "symbolic link",
            FileKind::Fifo => "FIFO",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
            FileKind::Socket => "socket",
        }
    }
}

/// The extended attribute holding a device's number (`st_rdev`, decimal).
pub const DEVICE_NUMBER: &str = "labios.rdev";

/// The extended attribute holding a symbolic link's target. Names starting
/// `labios.` are LABIOS's own: clients neither list nor set them.
pub const LINK_TARGET: &str = "labios.symlink";

/// Whether an extended attribute name is LABIOS's own (see [`LINK_TARGET`]).
pub fn reserved_xattr(name: &str) -> bool {
    name.starts_with("labios.")
}

/// Longest symbolic link target, as Linux's PATH_MAX.
pub const LINK_TARGET_MAX: usize = 4095;

/// Checks a symbolic link's target: a path of at most [`LINK_TARGET_MAX`]
/// bytes, not empty, without NUL. It may point anywhere, inside LABIOS or
/// not, and need not exist.
pub fn check_link_target(target: &str) -> Result<()> {
    if target.is_empty() || target.len() > LINK_TARGET_MAX || target.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "symbolic link target of {} bytes: give 1 to {LINK_TARGET_MAX} bytes without NUL",
            target.len()
        )));
    }
    Ok(())
}

/// A file's stat. Times are nanoseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    pub id: FileId,
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits (`0o7777`: set-user-ID, set-group-ID, sticky and
    /// rwx for owner, group and others); the kind is [`FileMeta::kind`].
    pub mode: u32,
    /// The application that made the entry (tenancy, README "Tenants").
    pub owner: AppId,
    /// The POSIX owner and group (permissions, README "Permissions").
    pub uid: u32,
    pub gid: u32,
    pub ctime: u64,
    pub mtime: u64,
    pub atime: u64,
    /// Names of the entry (hard links, at most [`LINK_MAX`]): `path` is the
    /// name it was asked by, or for [`Inventory::file`] its first name.
    /// Always 1 for a directory; 0 in what `remove` and `rename` return
    /// when they dropped the last name.
    pub nlink: u32,
}

impl FileMeta {
    /// Its application, user and group, for entries made on its behalf
    /// (the parents a rename or link creates).
    pub fn as_owner(&self) -> Owner {
        Owner {
            app: self.owner,
            uid: self.uid,
            gid: self.gid,
        }
    }
}

/// Who a new entry belongs to: the application that made it and the POSIX
/// user and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub app: AppId,
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    /// Application `app` as root: what trusted callers (tests, the
    /// runtime's own files) create with.
    pub fn root(app: AppId) -> Owner {
        Owner {
            app,
            uid: 0,
            gid: 0,
        }
    }
}

/// A time [`SetAttr`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    /// The inventory's clock at the change (`UTIME_NOW`).
    Now,
    /// Nanoseconds since the epoch.
    At(u64),
}

/// A change of attributes (chmod, chown, utimensat): what is `None` stays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// Permission bits a mode may carry.
pub const MODE_BITS: u32 = 0o7777;
const SET_UID: u32 = 0o4000;
const SET_GID: u32 = 0o2000;
const GROUP_EXEC: u32 = 0o010;

impl SetAttr {
    /// Refuses a mode with bits besides [`MODE_BITS`].
    pub fn check(&self) -> Result<()> {
        match self.mode {
            Some(m) if m & !MODE_BITS != 0 => Err(Error::InvalidArgument(format!(
                "mode {m:#o} has bits besides the permission bits {MODE_BITS:#o}"
            ))),
            _ => Ok(()),
        }
    }

    /// Applies the change to `meta` at time `now` (nanoseconds), with the
    /// rules every inventory shares: ctime is set; a new owner or group of
    /// a regular file drops its set-user-ID bit, and its set-group-ID bit
    /// when group execution is on (as Linux's chown does, for root too,
    /// so that a file cannot keep privileges meant for its old owner),
    /// unless the change gives the mode itself.
    pub fn apply(&self, meta: &mut FileMeta, now: u64) {
        if let Some(m) = self.mode {
            meta.mode = m;
        }
        let chown = self.uid.is_some() || self.gid.is_some();
        if chown && self.mode.is_none() && meta.kind == FileKind::File {
            meta.mode &= !SET_UID;
            if meta.mode & GROUP_EXEC != 0 {
                meta.mode &= !SET_GID;
            }
        }
        if let Some(u) = self.uid {
            meta.uid = u;
        }
        if let Some(g) = self.gid {
            meta.gid = g;
        }
        let at = |t: SetTime| match t {
            SetTime::Now => now,
            SetTime::At(n) => n,
        };
        if let Some(t) = self.atime {
            meta.atime = at(t);
        }
        if let Some(t) = self.mtime {
            meta.mtime = at(t);
        }
        meta.ctime = now;
    }
}

/// Most names one file may have, as ext4's limit.
pub const LINK_MAX: u32 = 65_000;

/// `len` bytes at `offset` of a file live on `worker`, written by `label`.
/// What a rename does with an entry at its destination: Linux's
/// `renameat2` flags, which programs use to move without clobbering and to
/// swap two trees atomically.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenameHow {
    /// Replaces it, as `rename(2)`.
    #[default]
    Replace,
    /// Refuses with `AlreadyExists` (`RENAME_NOREPLACE`).
    NoReplace,
    /// Swaps the two names, which must both exist; either may be a
    /// directory (`RENAME_EXCHANGE`). Nothing is removed.
    Exchange,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
    pub worker: WorkerId,
    pub label: LabelId,
}

/// An entry as a call names it: by path, looked up at the call, or by id
/// (an open file, which keeps its file whatever happens to the path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Named {
    Path(String),
    Id(FileId),
}

/// What a read asks of the inventory before it publishes labels: the
/// entry, and for a regular file its extents over the range read.
pub type ReadPlan = (FileMeta, Vec<Extent>);

/// The part of `[offset, offset + len)` of `meta` a read gets bytes from:
/// its length, when `meta` is a regular file and the range starts before
/// its end.
pub fn read_len(meta: &FileMeta, offset: u64, len: u64) -> Option<u64> {
    (meta.kind == FileKind::File && offset < meta.size && len > 0)
        .then(|| len.min(meta.size - offset))
}

/// Cuts `extents` to `[offset, end)`, leaving out any that do not overlap
/// it: what [`Inventory::extents`] answers, however an inventory found
/// them.
pub fn clip_to(extents: &mut Vec<Extent>, offset: u64, end: u64) {
    extents.retain(|e| e.offset < end && e.offset + e.len > offset);
    for e in extents {
        let e_end = e.offset + e.len;
        e.offset = e.offset.max(offset);
        e.len = e_end.min(end) - e.offset;
    }
}

/// A registered application (article 3.3.2a).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppRecord {
    pub id: AppId,
    pub name: String,
    /// Access key and secret the application presents.
    pub key: String,
    pub secret: String,
    /// Per-application settings (label sizes, sync mode, policy, ...).
    pub settings: Vec<(String, String)>,
}

/// Longest extended attribute name, in bytes (Linux's XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value, in bytes (Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX: usize = 65536;
/// Bytes of names and values one file may hold in all, so that no file's
/// metadata grows without bound.
pub const XATTR_TOTAL_MAX: usize = 64 << 10;
/// The most files one [`Inventory::xattrs_of`] asks about: a listing page
/// (S3's `max-keys` is at most 1,000). With [`XATTR_TOTAL_MAX`] a file,
/// its answer stays under the remote protocol's frame limit.
pub const XATTRS_BATCH_MAX: usize = 1000;

/// Refuses an [`Inventory::xattrs_of`] of more than [`XATTRS_BATCH_MAX`] files.
pub fn check_xattrs_batch(files: &[FileId]) -> Result<()> {
    if files.len() > XATTRS_BATCH_MAX {
        return Err(Error::InvalidArgument(format!(
            "extended attributes of {} files asked at once, more than {XATTRS_BATCH_MAX}",
            files.len()
        )));
    }
    Ok(())
}

/// Checks a `set_xattr(file, name, value)` against the limits, `others`
/// being the bytes (names and values) of the file's other attributes.
/// Removing (`None`) only needs a valid name. Every implementation calls
/// this, so that they refuse the same things with the same messages.
pub fn check_xattr(file: FileId, name: &str, value: Option<&[u8]>, others: usize) -> Result<()> {
    // Names come from users (S3 metadata keys): show a bounded prefix.
    let shown: String = name.chars().take(64).collect();
    let bad = |why: String| Err(Error::InvalidArgument(why));
    if name.is_empty() {
        return bad("extended attribute name is empty".into());
    }
    if name.len() > XATTR_NAME_MAX {
        return bad(format!(
            "extended attribute name {shown:?}... is {} bytes, more than {XATTR_NAME_MAX}",
            name.len()
        ));
    }
    if name.contains('\0') {
        return bad(format!(
            "extended attribute name {shown:?} contains a NUL byte"
        ));
    }
    let Some(value) = value else { return Ok(()) };
    if value.len() > XATTR_VALUE_MAX {
        return bad(format!(
            "value of extended attribute {shown:?} is {} bytes, more than {XATTR_VALUE_MAX}",
            value.len()
        ));
    }
    let total = others + name.len() + value.len();
    if total > XATTR_TOTAL_MAX {
        return bad(format!(
            "extended attributes of file id {file} would take {total} bytes (names and values), \
             more than {XATTR_TOTAL_MAX}"
        ));
    }
    Ok(())
}

/// Whether an extended attribute must be there for a change to it:
/// `setxattr(2)`'s `XATTR_REPLACE` and `removexattr(2)` need it
/// ([`Presence::Present`]), `XATTR_CREATE` needs it absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Presence {
    #[default]
    Any,
    Present,
    Absent,
    /// Both `XATTR_CREATE` and `XATTR_REPLACE`, which no attribute
    /// satisfies: refused as `Absent` is where it exists and as `Present`
    /// where not, as ext4 answers, after the same checks of the caller's
    /// rights as any change.
    Both,
}

/// What a change of an extended attribute requires of the file, checked
/// in the same transaction as the change: a check made by a separate read
/// before it could be overtaken by another client's change or write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XattrCond {
    pub presence: Presence,
    /// Only while the file holds no bytes (its size is 0): the hints that
    /// decide where a file's data goes change only before it has any.
    pub while_empty: bool,
}

/// How a change that needs an attribute the file does not have ends
/// (NotFound ending with this): the POSIX faces answer ENODATA, not the
/// ENOENT of a missing file.
pub const NO_ATTRIBUTE: &str = "no such attribute";

impl XattrCond {
    /// Refuses a change of attribute `name` of `file` that this condition
    /// forbids, given whether the attribute `exists` and the file's `size`.
    /// Every implementation calls this with what it found in the change's
    /// transaction, so that they refuse the same changes the same way.
    pub fn check(self, file: FileId, name: &str, exists: bool, size: u64) -> Result<()> {
        let shown: String = name.chars().take(64).collect();
        match (self.presence, exists) {
            (Presence::Present | Presence::Both, false) => {
                return Err(Error::NotFound(format!(
                    "extended attribute {shown} of file id {file}: {NO_ATTRIBUTE}"
                )))
            }
            (Presence::Absent | Presence::Both, true) => {
                return Err(Error::AlreadyExists(format!(
                    "extended attribute {shown} of file id {file}"
                )))
            }
            _ => {}
        }
        if self.while_empty && size > 0 {
            return Err(labios_label::hints::refused(format!(
                "hint {shown} of file id {file}: the file holds {size} bytes, and only \
                 replicas and replication change once a file holds data"
            )));
        }
        Ok(())
    }
}

/// Attempts [`record_status`] makes.
pub const STATUS_ATTEMPTS: u32 = 10;

/// Records a label's final status, trying again on failure: a status that
/// is never recorded leaves its caller waiting for the whole wait timeout,
/// so a transient error of the inventory must not lose it. Returns the
/// last error once [`STATUS_ATTEMPTS`] attempts (45 ms in all, no longer
/// than a worker's tries used to take, so that a worker retrying during an
/// outage does not stall its heartbeat) have failed.
pub async fn record_status(inventory: &dyn Inventory, status: &LabelStatus) -> Result<()> {
    let mut attempt = 1;
    loop {
        match inventory.set_status(status.clone()).await {
            Err(e) if attempt < STATUS_ATTEMPTS && !matches!(e, Error::InvalidArgument(_)) => {
                tokio::time::sleep(Duration::from_millis(u64::from(attempt))).await;
                attempt += 1;
            }
            r => return r,
        }
    }
}

#[async_trait]
pub trait Inventory: Send + Sync {
    // ---- namespace -------------------------------------------------------
    /// Creates a file (or directory) at a normalized path, creating missing
    /// parent directories; returns the existing entry if it is already there
    /// with the same kind, `AlreadyExists` if with another kind.
    async fn create(&self, path: &str, kind: FileKind, mode: u32, owner: Owner)
        -> Result<FileMeta>;
    /// Creates a symbolic link at `path` to `target` in one atomic step
    /// (missing parents are created); `AlreadyExists` if anything is there.
    async fn symlink(&self, path: &str, target: &str, owner: Owner) -> Result<FileMeta>;
    async fn lookup(&self, path: &str) -> Result<Option<FileMeta>>;
    /// Entries whose path starts with `prefix`, sorted by path.
    async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>>;
    /// Gives the file or symbolic link at `from` the further name `to` (a
    /// hard link: same id, data and attributes), creating missing parents.
    /// `AlreadyExists` if anything is at `to`; a directory is refused, and
    /// so is a name past [`LINK_MAX`].
    async fn link(&self, from: &str, to: &str) -> Result<FileMeta>;
    /// Removes a name of a file (or an empty directory). Returns the entry
    /// with its remaining `nlink` and, when that was its last name (`nlink`
    /// 0), the extents it had, so that the caller can reclaim worker
    /// storage; while other names remain, no extents.
    async fn remove(&self, path: &str) -> Result<(FileMeta, Vec<Extent>)>;
    /// Atomically moves a name; an existing destination name is replaced,
    /// and the file it named is returned with its extents when that was its
    /// last name. Two names of one file: nothing changes (as POSIX says).
    async fn rename(&self, from: &str, to: &str) -> Result<Option<(FileMeta, Vec<Extent>)>> {
        self.rename_as(from, to, RenameHow::Replace).await
    }
    /// [`Inventory::rename`] with `how` deciding about an entry at `to`:
    /// with [`RenameHow::NoReplace`] one is `AlreadyExists` (also another
    /// name of the same file), with [`RenameHow::Exchange`] a missing one
    /// is `NotFound`, either name inside the other `InvalidArgument`, and
    /// two names of one file change nothing.
    async fn rename_as(
        &self,
        from: &str,
        to: &str,
        how: RenameHow,
    ) -> Result<Option<(FileMeta, Vec<Extent>)>>;
    /// Sets the size (truncate/extend); extents past the new size are cut.
    async fn set_size(&self, file: FileId, size: u64) -> Result<()>;
    /// Changes mode, owner, group or times in one atomic step, by the rules
    /// of [`SetAttr::apply`], and returns the entry as it now is. A missing
    /// file is `NotFound`; a bad mode is `InvalidArgument` and changes
    /// nothing. Who may change what is decided above the inventory
    /// (`crate::access`).
    async fn set_attr(&self, file: FileId, attr: SetAttr) -> Result<FileMeta>;

    // ---- data placement --------------------------------------------------
    /// Records that `[offset, offset+len)` of `file` now lives on `worker`,
    /// written by `label`; only parts not already covered by a newer label
    /// are taken. Extends the size to `offset+len` and sets mtime.
    async fn commit_extent(&self, file: FileId, extent: Extent) -> Result<()>;
    /// Gives the `len` bytes past the end of `file` to one append and
    /// returns their offset: the size is read and extended by `len` in one
    /// atomic step where sizes are kept, so concurrent appends of any
    /// clients and processes (O_APPEND) get disjoint ranges and none
    /// overwrites another. The range reads as zeros until the append's
    /// label commits its extent. A directory is `InvalidArgument`, a
    /// missing file `NotFound`; an end past `u64::MAX` (or the engine's
    /// largest exact size) is `InvalidArgument` and changes nothing.
    async fn reserve_append(&self, file: FileId, len: u64) -> Result<u64>;
    /// Extents overlapping the range, clipped to it, sorted by offset.
    async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>>;
    /// The entry `named` names (`None`: nothing) and, for a regular file,
    /// its extents over `[offset, offset + len)` cut at its size
    /// ([`read_len`]): everything a read needs before it publishes labels,
    /// in one call. An inventory that can answers from one look at its
    /// state (the embedded one), and over `labios serve` it is one round
    /// trip instead of two, on every read. Here, two calls.
    async fn read_plan(&self, named: &Named, offset: u64, len: u64) -> Result<Option<ReadPlan>> {
        let meta = match named {
            Named::Path(path) => self.lookup(path).await?,
            Named::Id(id) => self.file(*id).await?,
        };
        let Some(meta) = meta else { return Ok(None) };
        let extents = match read_len(&meta, offset, len) {
            Some(len) => match self.extents(meta.id, offset, len).await {
                Ok(extents) => extents,
                // Removed between the two calls: it names nothing now.
                Err(Error::NotFound(_)) => return Ok(None),
                Err(e) => return Err(e),
            },
            None => Vec::new(),
        };
        Ok(Some((meta, extents)))
    }
    async fn file(&self, file: FileId) -> Result<Option<FileMeta>>;
    /// The file `file`, opened for `access` (`crate::access::READ` and
    /// `WRITE` bits). Where callers are checked (`labios serve`), the
    /// check is made now, as the kernel makes it at open, and what it
    /// allowed holds for the caller's data moves on the file from then on,
    /// whatever `chmod` does later (a descriptor keeps what its open gave).
    /// Elsewhere it is [`Inventory::file`]; a missing file is `NotFound`.
    async fn open(&self, file: FileId, _access: u32) -> Result<FileMeta> {
        self.file(file)
            .await?
            .ok_or_else(|| Error::NotFound(format!("file id {file}")))
    }

    // ---- open files ------------------------------------------------------
    /// Keeps the regular file `file` whole while `session` (a client) has
    /// it open, as POSIX keeps an unlinked file until its last close: when
    /// its last name goes meanwhile, it stays reachable by id with its data
    /// and `nlink` 0 until the last session holding it lets go. A session
    /// holds a file once however often it opens it (the client counts its
    /// own opens). A missing file is `NotFound`.
    ///
    /// `Ok(false)`: this inventory keeps no open files, a file goes with
    /// its last name.
    async fn hold(&self, _file: FileId, _session: u64) -> Result<bool> {
        Ok(false)
    }
    /// Ends `session`'s hold of `file`. A file this leaves without a name
    /// and without a holder goes now, and is returned: its bytes are the
    /// caller's to free (delete labels), as after a remove.
    async fn let_go(&self, _file: FileId, _session: u64) -> Result<Option<FileMeta>> {
        Ok(None)
    }
    /// Ends every hold of `session`, whose client is gone; returns the
    /// files that went, as [`Inventory::let_go`].
    async fn let_go_session(&self, _session: u64) -> Result<Vec<FileMeta>> {
        Ok(Vec::new())
    }
    /// Drops the files kept past their last name for sessions that ended
    /// without letting go (a killed client whose lease ran out) and returns
    /// them, for their bytes to be freed. Where sessions end only through
    /// [`Inventory::let_go_session`] (`labios serve` calls it when a
    /// connection closes), there are none.
    async fn drop_unheld(&self) -> Result<Vec<FileMeta>> {
        Ok(Vec::new())
    }

    // ---- extended attributes -------------------------------------------
    /// Sets extended attribute `name` of `file` to `value`, or removes it
    /// with `None` (removing an absent one is not an error). They keep what
    /// a file carries besides its bytes: an S3 object's ETag, content type
    /// and user metadata, so that files and objects are two views of the
    /// same data, and application hints for the storage. A directory may
    /// carry them too.
    ///
    /// A missing (or removed) file is `NotFound`; a name that is empty,
    /// longer than [`XATTR_NAME_MAX`] bytes or contains NUL, a value over
    /// [`XATTR_VALUE_MAX`] bytes, or a file whose names and values would
    /// exceed [`XATTR_TOTAL_MAX`] bytes is `InvalidArgument` and changes
    /// nothing (see [`check_xattr`]). A change sets the file's ctime, as
    /// setxattr(2) does; size and mtime stay. Attributes are as durable as
    /// the rest of the file's metadata, go with the file when it is
    /// renamed, and are dropped with it by `remove` or when `rename`
    /// replaces it.
    async fn set_xattr(&self, file: FileId, name: &str, value: Option<Bytes>) -> Result<()> {
        self.set_xattr_if(file, name, value, XattrCond::default())
            .await
    }
    /// [`Inventory::set_xattr`] only where `cond` holds, checked with the
    /// change ([`XattrCond::check`]); otherwise nothing changes.
    async fn set_xattr_if(
        &self,
        file: FileId,
        name: &str,
        value: Option<Bytes>,
        cond: XattrCond,
    ) -> Result<()>;
    /// The file's extended attributes, sorted by name; a missing file is
    /// `NotFound`.
    async fn xattrs(&self, file: FileId) -> Result<Vec<(String, Bytes)>>;
    /// The extended attributes of each of `files` (at most
    /// [`XATTRS_BATCH_MAX`], or `InvalidArgument`), in their order; `None`
    /// for a file that is gone. One call for a listing's page, where one
    /// per file costs a round trip each (10,000 for an S3 listing of
    /// 10,000 keys). The default asks [`Inventory::xattrs`] a few files
    /// at a time; a store that can answer at once overrides it.
    async fn xattrs_of(&self, files: &[FileId]) -> Result<Vec<Option<Vec<(String, Bytes)>>>> {
        use futures::{StreamExt, TryStreamExt};
        check_xattrs_batch(files)?;
        futures::stream::iter(files.iter().copied())
            .map(|f| async move {
                match self.xattrs(f).await {
                    Ok(v) => Ok(Some(v)),
                    Err(Error::NotFound(_)) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .buffered(32)
            .try_collect()
            .await
    }

    // ---- labels ----------------------------------------------------------
    async fn set_status(&self, status: LabelStatus) -> Result<()>;
    async fn status(&self, id: LabelId) -> Result<Option<LabelStatus>>;
    /// Waits until every label is final (complete or failed) or the timeout
    /// passes, then returns their statuses and reclaims the final ones: a
    /// label's status is kept until its owner has seen it, or for the
    /// reclaim period if nobody asks.
    async fn wait(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>>;
    /// [`Inventory::wait`] by a caller that takes the complete labels'
    /// results out of the warehouse next (a read's bytes, to hand them to
    /// the application). An inventory reached over a connection to
    /// `labios serve` brings small ones back with the statuses, and the
    /// warehouse of the same connection hands them over without a round
    /// trip. Never for results left in the warehouse for others to take
    /// (a copy's reads, whose results its writes take; a query's gathered
    /// parts, which its pipeline takes). Here, a plain wait.
    async fn wait_taking(&self, ids: &[LabelId], timeout: Duration) -> Result<Vec<LabelStatus>> {
        self.wait(ids, timeout).await
    }
    /// Label statuses held (for metrics and leak checks).
    async fn label_count(&self) -> Result<usize>;

    // ---- workers ---------------------------------------------------------
    async fn put_worker(&self, status: WorkerStatus) -> Result<()>;
    async fn workers(&self) -> Result<Vec<WorkerStatus>>;
    async fn remove_worker(&self, id: WorkerId) -> Result<()>;
    /// Asks worker `id` to run the stack `stack` (module names, the
    /// backend last): `labios stack set`. The worker takes the request at
    /// its next heartbeat; a newer request replaces one not yet taken.
    async fn ask_stack(&self, id: WorkerId, stack: Vec<String>) -> Result<()>;
    /// The stack asked of worker `id` and not yet taken, which this call
    /// takes: each request reaches the worker once.
    async fn take_stack(&self, id: WorkerId) -> Result<Option<Vec<String>>>;

    // ---- applications ----------------------------------------------------
    async fn put_app(&self, app: AppRecord) -> Result<()>;
    async fn app(&self, id: AppId) -> Result<Option<AppRecord>>;
    async fn apps(&self) -> Result<Vec<AppRecord>>;

    // ---- program repository (software-defined storage, 3.6.2d) ----------
    /// Registers application `app`'s function `name` (a WebAssembly module),
    /// replacing one of that name; `None` removes it. No other application
    /// can see or run it.
    async fn put_function(&self, app: AppId, name: &str, module: Option<Bytes>) -> Result<()>;
    async fn function(&self, app: AppId, name: &str) -> Result<Option<Bytes>>;
    /// Names of the application's functions, sorted.
    async fn functions(&self, app: AppId) -> Result<Vec<String>>;

    /// A fresh value of a named counter (file ids, client origins, app ids).
    async fn next_id(&self, counter: &str) -> Result<u64>;

    /// Makes everything recorded so far survive a crash.
    async fn sync(&self) -> Result<()>;
}
