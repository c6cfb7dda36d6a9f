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

use labios_label::FileId;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Grants one connection keeps at most; past it new ones are not kept,
/// and data moves are checked against the mode, as without one.
pub const MAX_GRANTS: usize = 1 << 16;

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
    use crate::access::{READ, WRITE};

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
