//! Extended attributes as `setxattr(2)` and `getxattr(2)` see them: the
//! rules the FUSE mount and `labios run` share, so that a program meets
//! the same answers through either.

use labios_store::Presence;

/// The kernel's own attribute namespaces (capabilities, ACLs, SELinux
/// labels), which LABIOS does not keep: a read finds none and costs no
/// round trip (the kernel asks for `security.capability` before every
/// write through a mount), and a write is refused with `ENOTSUP`, as on a
/// file system without them.
pub fn kernel_namespace(name: &str) -> bool {
    ["security.", "system.", "trusted."]
        .iter()
        .any(|ns| name.starts_with(ns))
}

/// The longest attribute name and value Linux takes (`XATTR_NAME_MAX`,
/// `XATTR_SIZE_MAX`).
pub const NAME_MAX: usize = 255;
pub const SIZE_MAX: usize = 65_536;

/// How the refusal of a value larger than [`SIZE_MAX`] ends (E2BIG): a
/// computed one, such as a long file's location.
pub const TOO_LARGE: &str = "more than an attribute holds";

/// The errno the kernel gives a call naming `name` before any file system
/// sees it, if any: a name in no namespace is `ENOTSUP`, an empty or too
/// long one `ERANGE`. Only `user.` names reach LABIOS's store.
pub fn bad_name(name: &str) -> Option<i32> {
    if name.is_empty() || name.len() > NAME_MAX {
        Some(libc::ERANGE)
    } else if !name.starts_with("user.") && !kernel_namespace(name) {
        Some(libc::ENOTSUP)
    } else {
        None
    }
}

/// What a set (`removing` false) or removal of an attribute needs of it,
/// given `setxattr`'s `flags`: `XATTR_CREATE` that it is absent (else
/// `EEXIST`), `XATTR_REPLACE` or a removal that it is there (else
/// `ENODATA`), both flags what no attribute is ([`Presence::Both`]),
/// which the inventory checks with the change.
pub fn presence(flags: i32, removing: bool) -> Presence {
    let create = flags & libc::XATTR_CREATE != 0;
    let present = flags & libc::XATTR_REPLACE != 0 || removing;
    match (create, present) {
        (true, true) => Presence::Both,
        (true, false) => Presence::Absent,
        (false, true) => Presence::Present,
        (false, false) => Presence::Any,
    }
}

/// The names of `attrs` as `listxattr(2)` gives them: each followed by a
/// NUL.
pub fn name_list(attrs: &[(String, bytes::Bytes)]) -> Vec<u8> {
    let mut names = Vec::new();
    for (name, _) in attrs {
        names.extend_from_slice(name.as_bytes());
        names.push(0);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_decide_as_the_kernel_does() {
        assert_eq!(presence(0, false), Presence::Any);
        assert_eq!(presence(libc::XATTR_CREATE, false), Presence::Absent);
        assert_eq!(presence(libc::XATTR_REPLACE, false), Presence::Present);
        assert_eq!(presence(0, true), Presence::Present);
        let both = libc::XATTR_CREATE | libc::XATTR_REPLACE;
        assert_eq!(presence(both, false), Presence::Both);
        assert!(kernel_namespace("security.capability"));
        assert_eq!(bad_name("user.x"), None);
        assert_eq!(bad_name("trusted.x"), None);
        assert_eq!(bad_name("x"), Some(libc::ENOTSUP));
        assert_eq!(bad_name(""), Some(libc::ERANGE));
        assert_eq!(
            bad_name(&format!("user.{}", "n".repeat(251))),
            Some(libc::ERANGE)
        );
        assert!(!kernel_namespace("user.labios.placement"));
        let list = name_list(&[
            ("user.a".into(), bytes::Bytes::new()),
            ("user.b".into(), bytes::Bytes::new()),
        ]);
        assert_eq!(list, b"user.a\0user.b\0");
    }
}
