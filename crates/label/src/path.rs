//! The LABIOS namespace. Every path a user names is normalized here, once, so
//! that no component ever sees a path that could climb out of the namespace
//! (`/../etc`), hide a NUL byte, or exceed the limits a POSIX program expects.

use crate::{Error, Result};

pub const MAX_PATH: usize = 4096;
pub const MAX_NAME: usize = 255;

/// Returns the canonical form of `path`: absolute, `/`-separated, without
/// `.`/`..`/empty components and without a trailing slash (`/` for the root).
pub fn normalize(path: &str) -> Result<String> {
    let refuse = |reason: &str| Error::InvalidPath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if path.is_empty() {
        return Err(refuse("empty path"));
    }
    if path.len() > MAX_PATH {
        return Err(refuse("longer than 4096 bytes"));
    }
    if path.contains('\0') {
        return Err(refuse("contains a NUL byte"));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(refuse("escapes the namespace root"));
                }
            }
            name if name.len() > MAX_NAME => {
                return Err(refuse("a component is longer than 255 bytes"))
            }
            name => parts.push(name),
        }
    }
    let mut out = String::with_capacity(path.len() + 1);
    for p in &parts {
        out.push('/');
        out.push_str(p);
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Parent directory of a normalized path (`None` for the root).
pub fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        assert_eq!(normalize("a/b").unwrap(), "/a/b");
        assert_eq!(normalize("/a//b/./c/").unwrap(), "/a/b/c");
        assert_eq!(normalize("/a/../b").unwrap(), "/b");
        assert_eq!(normalize("/").unwrap(), "/");
    }

    #[test]
    fn refuses_escapes_and_garbage() {
        for bad in ["/../etc/passwd", "..", "a/../../b", "", "a\0b"] {
            let e = normalize(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidPath { .. }), "{bad:?} gave {e}");
        }
        assert!(normalize(&"x".repeat(300)).is_err());
    }

    #[test]
    fn parents() {
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
    }
}
