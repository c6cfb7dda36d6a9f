//! Buckets and keys as LABIOS paths: bucket `b` is the top-level directory
//! `/b`, object `k` of it the file `/b/k`, so an object and a file are one
//! entry of the namespace seen two ways (IRIS 3.4.1, objects over files).
//!
//! A key must map to exactly one path: keys that LABIOS would normalize into
//! another name (`a//b`, `./a`, `a/../b`) are refused rather than silently
//! aliased. A key ending in `/` is a directory ("folder" object).

use labios_label::path::MAX_NAME;
use s3s::{s3_error, S3Result};

/// Where objects being uploaded are kept until they replace their key in
/// one rename, so that no reader ever sees half an object. A name no bucket
/// can have (bucket names start with a letter or digit).
pub const STAGING: &str = "/.s3-staging";
/// Multipart uploads in progress: a directory per upload holding its parts.
pub const UPLOADS: &str = "/.s3-uploads";

pub fn bucket_path(bucket: &str) -> String {
    format!("/{bucket}")
}

/// The path of `key` in `bucket` (without the trailing `/` of a folder
/// key), or `InvalidArgument` naming why the key has no path of its own.
pub fn object_path(bucket: &str, key: &str) -> S3Result<String> {
    let name = key.strip_suffix('/').unwrap_or(key);
    let bad = |why: &str| {
        Err(s3_error!(
            InvalidArgument,
            "key {key:?} cannot be a LABIOS path: {why}"
        ))
    };
    if name.is_empty() {
        return bad("it names the bucket itself");
    }
    if name.contains('\0') {
        return bad("it contains a NUL byte");
    }
    for part in name.split('/') {
        match part {
            "" => return bad("it has an empty component (// or a leading /)"),
            "." | ".." => return bad("it has a . or .. component"),
            p if p.len() > MAX_NAME => return bad("a component is longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(format!("/{bucket}/{name}"))
}

/// The key of a path inside `/bucket/` (no leading `/`).
pub fn key_of<'a>(bucket: &str, path: &'a str) -> Option<&'a str> {
    path.strip_prefix('/')?
        .strip_prefix(bucket)?
        .strip_prefix('/')
}

/// S3's bucket naming rules (3 to 63 lowercase letters, digits, `-` and `.`,
/// starting and ending with a letter or digit): top-level directories with
/// other names are not shown as buckets.
pub fn is_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (3..=63).contains(&b.len())
        && edge(b[0])
        && edge(b[b.len() - 1])
        && b.iter().all(|&c| edge(c) || c == b'-' || c == b'.')
        && !name.contains("..")
}

/// A fresh random name for staged data (128 bits, hex).
pub fn fresh_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_one_path() {
        assert_eq!(object_path("b", "a/c.txt").unwrap(), "/b/a/c.txt");
        assert_eq!(object_path("b", "dir/").unwrap(), "/b/dir");
        assert_eq!(object_path("b", "sp ace+%.csv").unwrap(), "/b/sp ace+%.csv");
        for bad in ["", "/", "a//b", "/a", "./a", "a/../b", "..", "a\0b"] {
            let e = object_path("b", bad).unwrap_err();
            assert!(
                e.message().unwrap().contains("cannot be a LABIOS path"),
                "{bad:?}: {e:?}"
            );
        }
        assert!(object_path("b", &"x".repeat(256)).is_err());
    }

    #[test]
    fn keys_come_back_from_paths() {
        assert_eq!(key_of("b", "/b/a/c"), Some("a/c"));
        assert_eq!(key_of("b", "/bb/a"), None);
        assert_eq!(key_of("b", "/b"), None);
    }

    #[test]
    fn bucket_names_follow_s3() {
        for good in ["abc", "my-data.2026", "0bucket"] {
            assert!(is_bucket_name(good), "{good}");
        }
        for bad in [
            "ab",
            "Upper",
            ".s3-staging",
            "a..b",
            "-ab",
            "ab-",
            &"x".repeat(64),
        ] {
            assert!(!is_bucket_name(bad), "{bad}");
        }
    }
}
