//! Who may do what to an entry: the POSIX rules of owner, group and other
//! bits, decided in this one place on the server side (README
//! "Permissions"), so that no client is trusted to check itself.

use crate::inventory::{FileKind, FileMeta, Owner, SetAttr, SetTime, MODE_BITS};
use labios_label::{AppId, Error, Result};
use serde::{Deserialize, Serialize};

/// The end of every message of a refusal that is EPERM (an operation only
/// an owner or root may do) rather than EACCES (a missing permission bit).
pub const NOT_PERMITTED: &str = "operation not permitted";

/// Most supplementary groups kept for one caller (Linux's NGROUPS_MAX).
pub const GROUPS_MAX: usize = 65_536;

/// The user a request acts as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// Bits of a permission check (as `access(2)`'s R_OK, W_OK, X_OK).
pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

const SET_GID: u32 = 0o2000;
const STICKY: u32 = 0o1000;

impl Cred {
    pub fn root() -> Cred {
        Cred {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// The process `pid` (the peer of a Unix socket, from SO_PEERCRED, or
    /// the caller of a FUSE request), with the supplementary groups the
    /// kernel lists for it; without them if the process is already gone.
    pub fn of_process(uid: u32, gid: u32, pid: Option<i32>) -> Cred {
        let groups = pid
            .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
            .map(|status| groups_in(&status))
            .unwrap_or_default();
        Cred { uid, gid, groups }
    }

    /// Whether the bits `want` (of [`READ`], [`WRITE`], [`EXEC`]) are
    /// granted on `meta`: by the owner's bits if the caller owns it, else by
    /// the group's if in its group, else by the others'. Root has read and
    /// write always, and execute where anyone has it or on a directory.
    pub fn permits(&self, meta: &FileMeta, want: u32) -> bool {
        if self.is_root() {
            let any_exec = meta.mode & 0o111 != 0 || meta.kind == FileKind::Dir;
            return want & EXEC == 0 || any_exec;
        }
        let bits = if self.uid == meta.uid {
            meta.mode >> 6
        } else if self.in_group(meta.gid) {
            meta.mode >> 3
        } else {
            meta.mode
        };
        bits & want & 0o7 == want
    }

    /// [`Cred::permits`] or EACCES naming the path and what was missing.
    pub fn check(&self, meta: &FileMeta, want: u32) -> Result<()> {
        if self.permits(meta, want) {
            return Ok(());
        }
        let names: Vec<&str> = [(READ, "read"), (WRITE, "write"), (EXEC, "search")]
            .iter()
            .filter(|(bit, _)| want & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        Err(Error::PermissionDenied(format!(
            "user {} has no {} permission on {} (mode {:o}, owner {}:{})",
            self.uid,
            names.join("+"),
            meta.path,
            meta.mode,
            meta.uid,
            meta.gid
        )))
    }

    /// May this caller remove or rename the entry `victim` out of directory
    /// `dir`: write and search on `dir`, and with the sticky bit on `dir`
    /// only the owner of the entry or of the directory (or root).
    pub fn check_unlink(&self, dir: &FileMeta, victim: &FileMeta) -> Result<()> {
        self.check(dir, WRITE | EXEC)?;
        if dir.mode & STICKY != 0
            && !self.is_root()
            && self.uid != dir.uid
            && self.uid != victim.uid
        {
            return Err(Error::PermissionDenied(format!(
                "{} is in sticky directory {} and belongs to user {}: {NOT_PERMITTED}",
                victim.path, dir.path, victim.uid
            )));
        }
        Ok(())
    }

    /// May this caller give `meta` a further name (a hard link)? As Linux
    /// with `protected_hardlinks`: its owner, root, or anyone who may read
    /// and write a regular file that carries no set-user-ID or
    /// set-group-ID-with-execute, so that nobody pins another user's
    /// privileged or private file.
    pub fn check_link_source(&self, meta: &FileMeta) -> Result<()> {
        let privileged =
            meta.mode & 0o4000 != 0 || meta.mode & (SET_GID | 0o010) == SET_GID | 0o010;
        let safe = meta.kind == FileKind::File && !privileged && self.permits(meta, READ | WRITE);
        if self.is_root() || self.uid == meta.uid || safe {
            return Ok(());
        }
        Err(Error::PermissionDenied(format!(
            "user {} may not link to {} of user {}: {NOT_PERMITTED}",
            self.uid, meta.path, meta.uid
        )))
    }

    /// Who a new entry made by this caller in directory `dir` belongs to,
    /// and its mode: the caller's user and group, except in a set-group-ID
    /// directory, whose group the entry takes (and whose set-group-ID bit a
    /// new directory inherits).
    pub fn new_entry(
        &self,
        app: AppId,
        dir: Option<&FileMeta>,
        kind: FileKind,
        mode: u32,
    ) -> (Owner, u32) {
        let mut owner = Owner {
            app,
            uid: self.uid,
            gid: self.gid,
        };
        let mut mode = mode & MODE_BITS;
        if let Some(d) = dir.filter(|d| d.mode & SET_GID != 0) {
            owner.gid = d.gid;
            if kind == FileKind::Dir {
                mode |= SET_GID;
            }
        }
        (owner, mode)
    }

    /// Checks that the caller may make an entry of `kind` at `path` (its
    /// directory's permission is checked apart): only root makes a device
    /// (Linux's CAP_MKNOD), EPERM for anyone else.
    pub fn check_make(&self, kind: FileKind, path: &str) -> Result<()> {
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) && !self.is_root() {
            return Err(Error::PermissionDenied(format!(
                "user {} may not make the {} {path}: {NOT_PERMITTED}",
                self.uid,
                kind.word()
            )));
        }
        Ok(())
    }

    /// Checks a change of attributes of `meta` by this caller, as chmod(2),
    /// chown(2) and utimensat(2) say, and returns it as it may be applied:
    /// a mode given by a caller outside the file's group, not root, loses
    /// its set-group-ID bit (as Linux does), rather than failing.
    pub fn check_set_attr(&self, meta: &FileMeta, attr: SetAttr) -> Result<SetAttr> {
        let mut attr = attr;
        let owner = self.is_root() || self.uid == meta.uid;
        let not_permitted = |what: &str| {
            Err(Error::PermissionDenied(format!(
                "user {} may not {what} to {} (owner {}:{}): {NOT_PERMITTED}",
                self.uid, meta.path, meta.uid, meta.gid
            )))
        };
        if let Some(mode) = attr.mode.as_mut() {
            if !owner {
                return not_permitted("give a mode");
            }
            let group = attr.gid.unwrap_or(meta.gid);
            if !self.is_root() && !self.in_group(group) {
                *mode &= !SET_GID;
            }
        }
        // As Linux's chown_ok and chgrp_ok: the owner may keep its user and
        // pick a group of its own; anything else needs root.
        if let Some(u) = attr.uid {
            if !(self.is_root() || (self.uid == meta.uid && u == meta.uid)) {
                return not_permitted(&format!("give user {u}"));
            }
        }
        if let Some(g) = attr.gid {
            let own_group = g == meta.gid || self.in_group(g);
            if !(self.is_root() || (self.uid == meta.uid && own_group)) {
                return not_permitted(&format!("give group {g}"));
            }
        }
        let explicit = |t: Option<SetTime>| matches!(t, Some(SetTime::At(_)));
        if explicit(attr.atime) || explicit(attr.mtime) {
            if !owner {
                return not_permitted("give times");
            }
        } else if (attr.atime.is_some() || attr.mtime.is_some()) && !owner {
            // Both times to now: anyone who may write the file.
            self.check(meta, WRITE)?;
        }
        Ok(attr)
    }
}

/// The supplementary groups on the `Groups:` line of a /proc status file,
/// at most [`GROUPS_MAX`].
fn groups_in(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .take(GROUPS_MAX)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(mode: u32, uid: u32, gid: u32, kind: FileKind) -> FileMeta {
        FileMeta {
            id: 7,
            path: "/d/f".into(),
            kind,
            size: 0,
            mode,
            owner: 1,
            uid,
            gid,
            ctime: 0,
            mtime: 0,
            atime: 0,
            nlink: 1,
        }
    }

    fn user(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn the_class_that_matches_first_decides_even_when_it_grants_less() {
        let f = meta(0o047, 10, 20, FileKind::File);
        // The owner gets the owner's bits (none), not the group's or others'.
        assert!(!user(10, 20, &[]).permits(&f, READ));
        // A member of the group gets the group's (read), not the others'.
        assert!(user(11, 20, &[]).permits(&f, READ));
        assert!(!user(11, 30, &[20]).permits(&f, WRITE));
        assert!(user(12, 30, &[]).permits(&f, READ | WRITE | EXEC));
        let err = user(11, 20, &[]).check(&f, WRITE).unwrap_err().to_string();
        assert!(err.contains("no write permission on /d/f"), "{err}");
    }

    #[test]
    fn only_root_makes_devices() {
        for kind in [FileKind::CharDevice, FileKind::BlockDevice] {
            assert!(Cred::root().check_make(kind, "/d/dev").is_ok());
            let e = user(10, 20, &[]).check_make(kind, "/d/dev").unwrap_err();
            assert!(e.to_string().ends_with(NOT_PERMITTED), "{e}");
        }
        for kind in [
            FileKind::File,
            FileKind::Dir,
            FileKind::Fifo,
            FileKind::Socket,
        ] {
            assert!(user(10, 20, &[]).check_make(kind, "/d/x").is_ok());
        }
    }

    #[test]
    fn root_reads_and_writes_anything_but_executes_only_what_someone_may() {
        let root = Cred::root();
        assert!(root.permits(&meta(0, 10, 20, FileKind::File), READ | WRITE));
        assert!(!root.permits(&meta(0o600, 10, 20, FileKind::File), EXEC));
        assert!(root.permits(&meta(0o601, 10, 20, FileKind::File), EXEC));
        assert!(root.permits(&meta(0, 10, 20, FileKind::Dir), EXEC));
    }

    #[test]
    fn only_the_owner_or_root_changes_the_mode_and_only_root_the_owner() {
        let f = meta(0o644, 10, 20, FileKind::File);
        let chmod = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        assert!(user(10, 20, &[]).check_set_attr(&f, chmod).is_ok());
        let e = user(11, 20, &[]).check_set_attr(&f, chmod).unwrap_err();
        assert!(e.to_string().ends_with(NOT_PERMITTED), "{e}");
        let give = SetAttr {
            uid: Some(11),
            ..SetAttr::default()
        };
        assert!(user(10, 20, &[]).check_set_attr(&f, give).is_err());
        assert!(Cred::root().check_set_attr(&f, give).is_ok());
        // chown to oneself, unchanged: allowed (chown(f, getuid(), -1)).
        let same = SetAttr {
            uid: Some(10),
            ..SetAttr::default()
        };
        assert!(user(10, 20, &[]).check_set_attr(&f, same).is_ok());
    }

    #[test]
    fn the_owner_gives_only_a_group_it_belongs_to() {
        let f = meta(0o644, 10, 20, FileKind::File);
        let to = |g| SetAttr {
            gid: Some(g),
            ..SetAttr::default()
        };
        assert!(user(10, 20, &[30]).check_set_attr(&f, to(30)).is_ok());
        assert!(user(10, 20, &[30]).check_set_attr(&f, to(40)).is_err());
        assert!(user(11, 30, &[20]).check_set_attr(&f, to(30)).is_err());
    }

    #[test]
    fn a_mode_outside_the_files_group_loses_set_group_id() {
        let f = meta(0o644, 10, 20, FileKind::File);
        let chmod = SetAttr {
            mode: Some(0o2755),
            ..SetAttr::default()
        };
        let got = user(10, 30, &[]).check_set_attr(&f, chmod).unwrap();
        assert_eq!(got.mode, Some(0o755));
        let got = user(10, 30, &[20]).check_set_attr(&f, chmod).unwrap();
        assert_eq!(got.mode, Some(0o2755));
    }

    #[test]
    fn times_to_now_need_write_permission_and_given_times_ownership() {
        let f = meta(0o646, 10, 20, FileKind::File);
        let now = SetAttr {
            atime: Some(SetTime::Now),
            mtime: Some(SetTime::Now),
            ..SetAttr::default()
        };
        let given = SetAttr {
            mtime: Some(SetTime::At(5)),
            ..SetAttr::default()
        };
        assert!(user(12, 30, &[]).check_set_attr(&f, now).is_ok());
        assert!(user(11, 20, &[]).check_set_attr(&f, now).is_err());
        assert!(user(12, 30, &[]).check_set_attr(&f, given).is_err());
        assert!(user(10, 20, &[]).check_set_attr(&f, given).is_ok());
    }

    #[test]
    fn only_owners_link_files_they_may_not_read_and_write() {
        let me = user(10, 10, &[]);
        assert!(me
            .check_link_source(&meta(0o600, 10, 10, FileKind::File))
            .is_ok());
        assert!(me
            .check_link_source(&meta(0o644, 0, 0, FileKind::File))
            .is_err());
        assert!(me
            .check_link_source(&meta(0o666, 0, 0, FileKind::File))
            .is_ok());
        assert!(me
            .check_link_source(&meta(0o4777, 0, 0, FileKind::File))
            .is_err());
        assert!(me
            .check_link_source(&meta(0o777, 0, 0, FileKind::Symlink))
            .is_err());
        assert!(Cred::root()
            .check_link_source(&meta(0o600, 10, 10, FileKind::File))
            .is_ok());
    }

    #[test]
    fn the_sticky_bit_keeps_others_entries() {
        let dir = meta(0o1777, 0, 0, FileKind::Dir);
        let theirs = meta(0o644, 10, 10, FileKind::File);
        assert!(user(10, 10, &[]).check_unlink(&dir, &theirs).is_ok());
        assert!(user(11, 11, &[]).check_unlink(&dir, &theirs).is_err());
        assert!(Cred::root().check_unlink(&dir, &theirs).is_ok());
        let open = meta(0o777, 0, 0, FileKind::Dir);
        assert!(user(11, 11, &[]).check_unlink(&open, &theirs).is_ok());
    }

    #[test]
    fn a_set_group_id_directory_gives_its_group_and_the_bit_to_new_dirs() {
        let dir = meta(0o2775, 0, 50, FileKind::Dir);
        let me = user(10, 20, &[]);
        let (o, m) = me.new_entry(3, Some(&dir), FileKind::File, 0o644);
        assert_eq!((o.uid, o.gid, m), (10, 50, 0o644));
        let (o, m) = me.new_entry(3, Some(&dir), FileKind::Dir, 0o755);
        assert_eq!((o.gid, m), (50, 0o2755));
        let (o, _) = me.new_entry(3, None, FileKind::File, 0o644);
        assert_eq!(o.gid, 20);
    }

    #[test]
    fn groups_are_read_from_a_proc_status_file() {
        let status = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(groups_in(status), vec![4, 24, 27]);
        assert_eq!(groups_in("Name:\tx\n"), Vec::<u32>::new());
    }
}
