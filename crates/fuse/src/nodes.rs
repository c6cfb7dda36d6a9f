//! The kernel names files by node number, LABIOS by path. A node number is
//! the file id plus 2 (1 is the root), so `st_ino` is stable across renames
//! and the same under `labios mount` for every client of a deployment. The
//! table keeps each number's current path while the kernel holds it.

use fuser::{Errno, INodeNo};
use labios_store::{FileKind, FileMeta};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;

/// The node number of an inventory entry.
pub fn node_of(meta: &FileMeta) -> INodeNo {
    if meta.path == "/" {
        INodeNo::ROOT
    } else {
        INodeNo(meta.id.wrapping_add(2))
    }
}

/// `name` inside directory `parent`; a name LABIOS cannot hold (not UTF-8,
/// a slash) is refused, and one over 255 bytes is too long, as on ext4.
pub fn child(parent: &str, name: &OsStr) -> Result<String, Errno> {
    let name = name.to_str().ok_or(Errno::EINVAL)?;
    if name.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Errno::EINVAL);
    }
    Ok(if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    })
}

struct Node {
    /// `None` once the entry was removed through this mount: a program
    /// holding it open must not reach a new file created at its old path.
    path: Option<String>,
    lookups: u64,
    /// The file's names when last seen: with more than one, removing
    /// `path` leaves the node alive under another. A directory has one
    /// (its other links are `.` and its subdirectories' `..`).
    names: u32,
}

#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<String, u64>,
}

#[derive(Default)]
pub struct Nodes {
    table: Mutex<Table>,
}

impl Table {
    /// Node `node` is reached by `meta.path` now.
    fn name(&mut self, node: INodeNo, meta: &FileMeta) {
        if let Some(old) = self.by_path.insert(meta.path.clone(), node.0) {
            if old != node.0 {
                // Another client replaced the entry at this path.
                if let Some(n) = self.nodes.get_mut(&old) {
                    n.path = None;
                }
            }
        }
        let entry = self.nodes.entry(node.0).or_insert(Node {
            path: None,
            lookups: 0,
            names: 1,
        });
        entry.names = if meta.kind == FileKind::Dir {
            1
        } else {
            meta.nlink
        };
        if let Some(previous) = entry.path.replace(meta.path.clone()) {
            if previous != meta.path {
                // Renamed by another client (or named by another of its
                // links): its old path is no longer how it is reached.
                self.by_path.remove(&previous);
            }
        }
    }
}

impl Nodes {
    /// The path of a node the kernel holds; ENOENT for one removed since
    /// (an open, unlinked file: LABIOS keeps no data for it), ESTALE for a
    /// number the kernel should not have.
    pub fn path(&self, node: INodeNo) -> Result<String, Errno> {
        if node == INodeNo::ROOT {
            return Ok("/".to_string());
        }
        match self.table.lock().nodes.get(&node.0) {
            Some(Node { path: Some(p), .. }) => Ok(p.clone()),
            Some(Node { path: None, .. }) => Err(Errno::ENOENT),
            None => Err(Errno::ESTALE),
        }
    }

    /// One more kernel reference to the node of `meta` (a lookup, a create).
    pub fn remember(&self, meta: &FileMeta) -> INodeNo {
        let node = node_of(meta);
        if node == INodeNo::ROOT {
            return node;
        }
        let mut t = self.table.lock();
        t.name(node, meta);
        t.nodes.get_mut(&node.0).expect("named above").lookups += 1;
        node
    }

    /// The node of `meta`, if the kernel holds it, is now named
    /// `meta.path` (the name left after another was removed).
    pub fn renamed_to(&self, meta: &FileMeta) {
        let node = node_of(meta);
        let mut t = self.table.lock();
        if t.nodes.contains_key(&node.0) {
            t.name(node, meta);
        }
    }
    /// The kernel dropped `count` references.
    pub fn forget(&self, node: INodeNo, count: u64) {
        let mut t = self.table.lock();
        let Some(n) = t.nodes.get_mut(&node.0) else {
            return;
        };
        n.lookups = n.lookups.saturating_sub(count);
        if n.lookups == 0 {
            let n = t.nodes.remove(&node.0).expect("present above");
            if let Some(p) = n.path {
                if t.by_path.get(&p) == Some(&node.0) {
                    t.by_path.remove(&p);
                }
            }
        }
    }

    /// The entry at `path` was removed. Returns its node when the file
    /// had other names: it lives on, and [`Nodes::renamed_to`] gives it
    /// the name left.
    pub fn removed(&self, path: &str) -> Option<INodeNo> {
        let mut t = self.table.lock();
        let node = t.by_path.remove(path)?;
        let n = t.nodes.get_mut(&node)?;
        n.path = None;
        (n.names > 1).then_some(INodeNo(node))
    }

    /// `from` (and, for a directory, everything under it) is now `to`;
    /// whatever was at `to` was replaced. Returns the replaced node when
    /// its file has other names (see [`Nodes::removed`]).
    pub fn renamed(&self, from: &str, to: &str) -> Option<INodeNo> {
        let replaced = self.removed(to);
        let mut t = self.table.lock();
        let moves = t.moves(from, to);
        t.apply(moves);
        replaced
    }

    /// The entries at `a` and `b` swapped names (`RENAME_EXCHANGE`), with
    /// the trees under them.
    pub fn exchanged(&self, a: &str, b: &str) {
        let mut t = self.table.lock();
        let mut moves = t.moves(a, b);
        moves.extend(t.moves(b, a));
        t.apply(moves);
    }
}

impl Table {
    /// What a move of `from` to `to` renames: the node known at `from`
    /// and those under it, as (old path, new path, node).
    fn moves(&self, from: &str, to: &str) -> Vec<(String, String, u64)> {
        let inside = format!("{from}/");
        self.by_path
            .iter()
            .filter(|(p, _)| *p == from || p.starts_with(&inside))
            .map(|(p, n)| (p.clone(), format!("{to}{}", &p[from.len()..]), *n))
            .collect()
    }

    /// Makes `moves`, every old path going before a new one is taken.
    fn apply(&mut self, moves: Vec<(String, String, u64)>) {
        for (old, _, _) in &moves {
            self.by_path.remove(old);
        }
        for (_, new, node) in moves {
            self.by_path.insert(new.clone(), node);
            if let Some(n) = self.nodes.get_mut(&node) {
                n.path = Some(new);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_store::FileKind;

    fn meta(id: u64, path: &str) -> FileMeta {
        FileMeta {
            id,
            path: path.to_string(),
            kind: FileKind::File,
            size: 0,
            mode: 0o644,
            owner: 0,
            uid: 0,
            gid: 0,
            ctime: 0,
            mtime: 0,
            atime: 0,
            nlink: 1,
        }
    }

    #[test]
    fn a_renamed_directory_carries_its_children() {
        let nodes = Nodes::default();
        let d = nodes.remember(&meta(5, "/d"));
        let f = nodes.remember(&meta(6, "/d/f"));
        let other = nodes.remember(&meta(7, "/dx"));
        nodes.renamed("/d", "/e");
        assert_eq!(nodes.path(d).unwrap(), "/e");
        assert_eq!(nodes.path(f).unwrap(), "/e/f");
        assert_eq!(
            nodes.path(other).unwrap(),
            "/dx",
            "a sibling sharing a prefix stays"
        );
    }

    #[test]
    fn exchanged_trees_swap_their_paths() {
        let nodes = Nodes::default();
        let d = nodes.remember(&meta(5, "/x/d"));
        let inner = nodes.remember(&meta(6, "/x/d/inner"));
        let f = nodes.remember(&meta(7, "/y/f"));
        nodes.exchanged("/x/d", "/y/f");
        assert_eq!(nodes.path(d).unwrap(), "/y/f");
        assert_eq!(nodes.path(inner).unwrap(), "/y/f/inner");
        assert_eq!(nodes.path(f).unwrap(), "/x/d");
    }

    #[test]
    fn a_removed_node_never_reaches_a_new_file_at_its_path() {
        let nodes = Nodes::default();
        let old = nodes.remember(&meta(5, "/f"));
        nodes.removed("/f");
        let new = nodes.remember(&meta(9, "/f"));
        assert_ne!(old, new);
        assert_eq!(nodes.path(old), Err(Errno::ENOENT));
        assert_eq!(nodes.path(new).unwrap(), "/f");
    }

    #[test]
    fn a_replaced_destination_is_gone_and_forgotten_nodes_are_dropped() {
        let nodes = Nodes::default();
        let a = nodes.remember(&meta(5, "/a"));
        let b = nodes.remember(&meta(6, "/b"));
        nodes.renamed("/a", "/b");
        assert_eq!(nodes.path(a).unwrap(), "/b");
        assert_eq!(nodes.path(b), Err(Errno::ENOENT));
        nodes.remember(&meta(5, "/b"));
        nodes.forget(a, 1);
        assert_eq!(nodes.path(a).unwrap(), "/b", "one reference is left");
        nodes.forget(a, 1);
        assert_eq!(nodes.path(a), Err(Errno::ESTALE));
        assert_eq!(nodes.path(INodeNo::ROOT).unwrap(), "/");
    }

    #[test]
    fn a_node_with_other_names_outlives_the_removal_of_one() {
        let nodes = Nodes::default();
        let linked = FileMeta {
            nlink: 2,
            ..meta(5, "/b")
        };
        let node = nodes.remember(&linked);
        assert_eq!(nodes.removed("/b"), Some(node), "another name remains");
        nodes.renamed_to(&FileMeta {
            nlink: 1,
            ..meta(5, "/a")
        });
        assert_eq!(nodes.path(node).unwrap(), "/a");
        assert_eq!(nodes.removed("/a"), None, "its last name");
        assert_eq!(nodes.path(node), Err(Errno::ENOENT));
    }

    #[test]
    fn names_are_checked_as_a_kernel_file_system_would() {
        assert_eq!(child("/", OsStr::new("a")).unwrap(), "/a");
        assert_eq!(child("/d", OsStr::new("a")).unwrap(), "/d/a");
        assert_eq!(
            child("/d", OsStr::new(&"x".repeat(256))),
            Err(Errno::ENAMETOOLONG)
        );
        assert_eq!(child("/d", OsStr::new("a/b")), Err(Errno::EINVAL));
    }
}
