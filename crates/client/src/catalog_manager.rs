//! Catalog manager (article 3.3.1c): file stat, the file -> extents -> worker
//! map and label status, all kept in the inventory. Paths are normalized
//! here, so nothing past this point sees a path that escapes the namespace.

use bytes::Bytes;
use labios_label::{normalize_path, AppId, Error, FileId, Result};
use labios_store::inventory::{DEVICE_NUMBER, LINK_TARGET};
use labios_store::{Extent, FileKind, FileMeta, Inventory, Named, Owner, ReadPlan};
use std::sync::Arc;

#[derive(Clone)]
pub struct CatalogManager {
    inventory: Arc<dyn Inventory>,
    app: AppId,
    /// Who new entries belong to: this application and the process's
    /// effective user and group. `labios serve` puts the user the kernel
    /// names for a connection in their place (README "Permissions").
    owner: Owner,
}

impl CatalogManager {
    pub fn new(inventory: Arc<dyn Inventory>, app: AppId) -> Self {
        // SAFETY: geteuid and getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let owner = Owner { app, uid, gid };
        CatalogManager {
            inventory,
            app,
            owner,
        }
    }

    pub fn inventory(&self) -> &Arc<dyn Inventory> {
        &self.inventory
    }

    /// The file at `path`, created (with parents) if absent with the
    /// permission bits `mode`.
    pub async fn open_or_create(&self, path: &str, mode: u32) -> Result<FileMeta> {
        let path = normalize_path(path)?;
        if path == "/" {
            return Err(Error::InvalidPath {
                path,
                reason: "the root is a directory".into(),
            });
        }
        let meta = self
            .inventory
            .create(&path, FileKind::File, mode, self.owner)
            .await?;
        self.owned(meta)
    }

    /// `meta` if this application owns it, else permission denied: files
    /// belong to the application that created them (README "Tenants").
    pub fn owned(&self, meta: FileMeta) -> Result<FileMeta> {
        if meta.kind == FileKind::File && meta.owner != self.app {
            return Err(Error::PermissionDenied(format!(
                "{} belongs to another application",
                meta.path
            )));
        }
        Ok(meta)
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<FileMeta> {
        let path = normalize_path(path)?;
        self.inventory
            .create(&path, FileKind::Dir, mode, self.owner)
            .await
    }

    /// A symbolic link at `path` to `target` (anything: inside LABIOS or
    /// not, existing or not), owned by this application.
    pub async fn symlink(&self, target: &str, path: &str) -> Result<FileMeta> {
        let path = normalize_path(path)?;
        self.inventory.symlink(&path, target, self.owner).await
    }

    /// A FIFO, device or socket at `path`, with permission bits `mode` and,
    /// for a device, its number `rdev`; `AlreadyExists` if anything is
    /// there (mknod(2)).
    pub async fn mknod(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<FileMeta> {
        if !kind.is_special() {
            return Err(Error::InvalidArgument(format!(
                "mknod makes FIFOs, devices and sockets, not a {}",
                kind.word()
            )));
        }
        let path = normalize_path(path)?;
        if let Some(m) = self.inventory.lookup(&path).await? {
            return Err(Error::AlreadyExists(format!(
                "{path} exists as a {:?}",
                m.kind
            )));
        }
        let meta = self.inventory.create(&path, kind, mode, self.owner).await?;
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            let number = Bytes::from(rdev.to_string());
            self.inventory
                .set_xattr(meta.id, DEVICE_NUMBER, Some(number))
                .await?;
        }
        Ok(meta)
    }

    /// The number of the device `meta` (0 for anything else).
    pub async fn device_number(&self, meta: &FileMeta) -> Result<u64> {
        if !matches!(meta.kind, FileKind::CharDevice | FileKind::BlockDevice) {
            return Ok(0);
        }
        Ok(self
            .inventory
            .xattrs(meta.id)
            .await?
            .into_iter()
            .find(|(n, _)| n == DEVICE_NUMBER)
            .and_then(|(_, v)| std::str::from_utf8(&v).ok()?.parse().ok())
            .unwrap_or(0))
    }

    /// The target of the symbolic link at `path`.
    pub async fn readlink(&self, path: &str) -> Result<String> {
        let meta = self.stat(path).await?;
        if meta.kind != FileKind::Symlink {
            return Err(Error::InvalidArgument(format!(
                "{} is not a symbolic link",
                meta.path
            )));
        }
        let target = self
            .inventory
            .xattrs(meta.id)
            .await?
            .into_iter()
            .find(|(n, _)| n == LINK_TARGET)
            .ok_or_else(|| Error::Storage(format!("symbolic link {} has no target", meta.path)))?;
        String::from_utf8(target.1.to_vec())
            .map_err(|_| Error::Storage(format!("target of {} is not UTF-8", meta.path)))
    }

    pub async fn stat(&self, path: &str) -> Result<FileMeta> {
        let norm = normalize_path(path)?;
        self.inventory
            .lookup(&norm)
            .await?
            .ok_or(Error::NotFound(norm))
    }

    /// Entries under `prefix`: a directory's descendants, or paths that start
    /// with the prefix string.
    pub async fn list(&self, prefix: &str) -> Result<Vec<FileMeta>> {
        let norm = normalize_path(prefix)?;
        if let Some(meta) = self.inventory.lookup(&norm).await? {
            if meta.kind == FileKind::File {
                return Ok(vec![meta]);
            }
            let dir = if norm == "/" {
                norm
            } else {
                format!("{norm}/")
            };
            return self.inventory.list(&dir).await;
        }
        let all = self.inventory.list(&norm).await?;
        if all.is_empty() && prefix.ends_with('/') {
            return Err(Error::NotFound(norm));
        }
        Ok(all)
    }

    pub async fn file(&self, id: FileId) -> Result<FileMeta> {
        self.inventory
            .file(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("file id {id}")))
    }

    /// The entry `named` names and its extents over the part of
    /// `[offset, offset + len)` a read gets ([`Inventory::read_plan`]).
    pub async fn read_plan(&self, named: Named, offset: u64, len: u64) -> Result<ReadPlan> {
        self.inventory
            .read_plan(&named, offset, len)
            .await?
            .ok_or_else(|| {
                Error::NotFound(match named {
                    Named::Path(path) => path,
                    Named::Id(id) => format!("file id {id}"),
                })
            })
    }

    pub async fn extents(&self, file: FileId, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.inventory.extents(file, offset, len).await
    }
}
