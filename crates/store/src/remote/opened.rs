//! What opens gave a connection's users: the kernel checks a descriptor's
//! access once, when it is opened (or created), and a later `chmod` does
//! not take it back: a program may create a file read-only (`git` writes
//! its objects so, `cp -p` and `tar` copy modes) and still write what it
//! opened. `labios serve` checks the caller at [`Request::Open`] and at a
//! file's creation, and remembers per connection which user may read or
//! write which file's data since; the data moves of that user on that file
//! then pass without asking the mode again.
//!
//! [`Request::Open`]: super::proto::Request::Open

use crate::access::{READ, WRITE};
use crate::FileMeta;
use labios_label::FileId;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Grants one connection keeps at most; past it new ones are not kept,
/// and data moves are checked against the mode, as without one.
pub const MAX_GRANTS: usize = 1 << 16;

/// What the answer to a checked request gives its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gives {
    Nothing,
    /// This access to the file answered, checked.
    Access(u32),
    /// Read and write of the file answered, if it is the caller's own: a
    /// file it made. (Another user's, made between the check and the
    /// creation, gets nothing.)
    Made,
}

#[derive(Default)]
pub struct Opened(Mutex<HashMap<(u32, FileId), u32>>);

impl Opened {
    /// User `uid` opened `file` for `access` (`crate::access` bits).
    pub fn allow(&self, uid: u32, file: FileId, access: u32) {
        let mut m = self.0.lock();
        if m.len() < MAX_GRANTS || m.contains_key(&(uid, file)) {
            *m.entry((uid, file)).or_default() |= access;
        }
    }

    /// User `uid` was answered `meta` to a request that `gives`.
    pub fn answered(&self, uid: u32, gives: Gives, meta: &FileMeta) {
        match gives {
            Gives::Access(a) => self.allow(uid, meta.id, a),
            Gives::Made if meta.uid == uid => self.allow(uid, meta.id, READ | WRITE),
            _ => {}
        }
    }

    /// Whether user `uid` opened `file` for every bit of `want`.
    pub fn allows(&self, uid: u32, file: FileId, want: u32) -> bool {
        self.0
            .lock()
            .get(&(uid, file))
            .is_some_and(|&a| a & want == want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FileKind;

    fn file(id: FileId, uid: u32) -> FileMeta {
        FileMeta {
            id,
            path: "/f".into(),
            kind: FileKind::File,
            size: 0,
            mode: 0o444,
            owner: 0,
            uid,
            gid: uid,
            ctime: 0,
            mtime: 0,
            atime: 0,
            nlink: 1,
        }
    }

    #[test]
    fn a_made_file_is_its_makers_and_only_if_it_is_theirs() {
        let o = Opened::default();
        o.answered(1000, Gives::Made, &file(1, 1000));
        assert!(o.allows(1000, 1, READ | WRITE));
        // Another user's file answered a create that found none.
        o.answered(1000, Gives::Made, &file(2, 0));
        assert!(!o.allows(1000, 2, READ));
        o.answered(1000, Gives::Access(WRITE), &file(3, 0));
        assert!(o.allows(1000, 3, WRITE) && !o.allows(1000, 3, READ));
        o.answered(1000, Gives::Nothing, &file(4, 1000));
        assert!(!o.allows(1000, 4, READ));
    }

    #[test]
    fn grants_are_per_user_and_file_and_add_up() {
        let o = Opened::default();
        o.allow(1000, 7, WRITE);
        assert!(o.allows(1000, 7, WRITE));
        assert!(!o.allows(1000, 7, READ));
        assert!(!o.allows(1001, 7, WRITE));
        assert!(!o.allows(1000, 8, WRITE));
        o.allow(1000, 7, READ);
        assert!(o.allows(1000, 7, READ | WRITE));
    }

    #[test]
    fn past_the_limit_nothing_new_is_kept() {
        let o = Opened::default();
        for f in 0..MAX_GRANTS as u64 {
            o.allow(1, f, READ);
        }
        o.allow(1, u64::MAX, READ);
        assert!(!o.allows(1, u64::MAX, READ));
        o.allow(1, 0, WRITE);
        assert!(o.allows(1, 0, READ | WRITE), "a kept grant still grows");
    }
}
