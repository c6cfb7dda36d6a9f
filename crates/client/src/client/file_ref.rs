//! What a data call names: a path, looked up at the call, or a file id.
//!
//! An open descriptor must keep reaching the file it opened, as on any
//! POSIX file system: after another process renames that file away, or
//! removes it and makes a new one at the path, the descriptor's reads and
//! writes still go to the file it opened, never into the new one (which
//! would hand one file's bytes out as another's). So `labios run` and
//! `labios mount` address open files by id.

use super::Client;
use labios_label::{normalize_path, Error, FileId, Result};
use labios_store::{FileKind, FileMeta, Named};

/// A file by path (looked up at each call) or by id (an open file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileRef<'a> {
    Path(&'a str),
    Id(FileId),
}

impl<'a> From<&'a str> for FileRef<'a> {
    fn from(path: &'a str) -> Self {
        FileRef::Path(path)
    }
}

impl<'a> From<&'a String> for FileRef<'a> {
    fn from(path: &'a String) -> Self {
        FileRef::Path(path)
    }
}

impl<'a> FileRef<'a> {
    /// As the inventory names it: the path normalized, or the id.
    pub fn named(self) -> Result<Named> {
        match self {
            FileRef::Path(p) => Ok(Named::Path(normalize_path(p)?)),
            FileRef::Id(id) => Ok(Named::Id(id)),
        }
    }

    /// The path, when it names external storage (IRIS mounts), which has
    /// no file ids.
    pub fn external(self) -> Option<&'a str> {
        match self {
            FileRef::Path(p) if labios_mounts::is_external(p) => Some(p),
            _ => None,
        }
    }
}

impl std::fmt::Display for FileRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileRef::Path(p) => f.write_str(p),
            FileRef::Id(id) => write!(f, "file id {id}"),
        }
    }
}

impl Client {
    /// Opens the file with id `file` for `access` (`labios_store::access`
    /// `READ` and `WRITE` bits), as a descriptor is opened: `labios serve`
    /// checks the caller's permission now, and what it allowed holds for
    /// the caller's reads and writes of the file afterwards, as the
    /// kernel's check at open does (a file created or made read-only since
    /// stays writable through what was opened for writing).
    pub async fn open_file(&self, file: FileId, access: u32) -> Result<FileMeta> {
        self.inner.catalog.inventory().open(file, access).await
    }

    /// The entry `file` names now. A file id whose file lost its last name
    /// is `NotFound`, unless a client holds it open ([`Client::hold`]).
    pub(super) async fn entry(&self, file: FileRef<'_>) -> Result<FileMeta> {
        match file {
            FileRef::Path(p) => self.inner.catalog.stat(p).await,
            FileRef::Id(id) => self.inner.catalog.file(id).await,
        }
    }

    /// The file `file` names now, created if a path names nothing. A path
    /// is asked of the inventory every time: a path another client renamed
    /// or removed names another file (or none) from then on, and a cached
    /// answer would put this write into the file that moved away (found by
    /// the model checker).
    pub(super) async fn file_for_write(&self, file: FileRef<'_>, mode: u32) -> Result<FileMeta> {
        let meta = match file {
            FileRef::Path(path) => {
                let norm = normalize_path(path)?;
                self.inner.catalog.open_or_create(&norm, mode).await?
            }
            FileRef::Id(id) => self
                .inner
                .catalog
                .owned(self.inner.catalog.file(id).await?)?,
        };
        match meta.kind {
            FileKind::File => Ok(meta),
            FileKind::Dir => Err(Error::InvalidArgument(format!(
                "{} is a directory",
                meta.path
            ))),
            other => Err(Error::InvalidArgument(format!(
                "{} is a {}, it holds no data",
                meta.path,
                other.word()
            ))),
        }
    }
}
