//! Extended attributes as `setxattr(2)` and `getxattr(2)` see them: the
//! rules the FUSE mount and `labios run` share, so that a program meets
//! the same answers through either.

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

/// The errno a set (`removing` false) or removal of an attribute gets, if
/// any, given `setxattr`'s `flags` and whether the attribute `exists`:
/// `XATTR_CREATE` of one that exists is `EEXIST`, `XATTR_REPLACE` or a
/// removal of one that does not is `ENODATA`.
pub fn refusal(flags: i32, exists: bool, removing: bool) -> Option<i32> {
    if flags & libc::XATTR_CREATE != 0 && exists {
        Some(libc::EEXIST)
    } else if (flags & libc::XATTR_REPLACE != 0 || removing) && !exists {
        Some(libc::ENODATA)
    } else {
        None
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
        assert_eq!(refusal(0, false, false), None);
        assert_eq!(refusal(0, true, false), None);
        assert_eq!(refusal(libc::XATTR_CREATE, true, false), Some(libc::EEXIST));
        assert_eq!(refusal(libc::XATTR_CREATE, false, false), None);
        assert_eq!(
            refusal(libc::XATTR_REPLACE, false, false),
            Some(libc::ENODATA)
        );
        assert_eq!(refusal(libc::XATTR_REPLACE, true, false), None);
        assert_eq!(refusal(0, false, true), Some(libc::ENODATA));
        assert_eq!(refusal(0, true, true), None);
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
