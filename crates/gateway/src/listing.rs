//! Bucket listings (ListObjectsV2 and the original ListObjects): the files
//! under the bucket's directory in key order, with S3's prefix, delimiter
//! and paging rules. An empty directory is listed as a folder object
//! (`key/`), so folders made by S3 clients or by `mkdir` both survive a
//! round trip; a directory with files in it is only the prefix of their
//! keys, as in S3.

use crate::buckets;
use crate::metadata::ObjectMeta;
use crate::names::key_of;
use crate::tenants::Tenant;
use crate::time::timestamp;
use labios_store::{FileKind, FileMeta};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use s3s::dto::*;
use s3s::{s3_error, S3ErrorCode, S3Result};

/// S3's page size limit, and its default.
const MAX_KEYS: usize = 1000;

/// What `encoding-type=url` leaves as it is: unreserved characters and `/`.
pub const KEY_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// A listing request, whichever version asked.
pub struct Query<'a> {
    pub bucket: &'a str,
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    /// Only keys (and common prefixes) after this one.
    pub after: Option<String>,
    pub max_keys: Option<i32>,
    pub url_encoded: bool,
    pub fetch_owner: bool,
}

/// One page of a listing, ready for either ListObjects version.
pub struct Page {
    pub contents: Vec<Object>,
    pub prefixes: Vec<CommonPrefix>,
    pub truncated: bool,
    /// The last key or common prefix of the page: where the next starts.
    pub last: Option<String>,
}

/// The objects of a page (still to be described) and its common prefixes.
pub struct Paged<T> {
    pub objects: Vec<(String, T)>,
    pub prefixes: Vec<CommonPrefix>,
    pub truncated: bool,
    pub last: Option<String>,
}

enum Entry<T> {
    Object(T),
    Prefix,
}

pub fn encode(url_encoded: bool, text: &str) -> String {
    if url_encoded {
        utf8_percent_encode(text, KEY_SET).to_string()
    } else {
        text.to_string()
    }
}

/// S3's prefix, delimiter and paging rules over `keys`, which are in key
/// order and all start with the query's prefix.
pub fn paginate<T>(keys: Vec<(String, T)>, q: &Query<'_>) -> S3Result<Paged<T>> {
    let max = match q.max_keys {
        Some(n) if n < 0 => {
            return Err(s3_error!(InvalidArgument, "max-keys must not be negative"))
        }
        Some(n) => (n as usize).min(MAX_KEYS),
        None => MAX_KEYS,
    };
    let mut entries: Vec<(String, Entry<T>)> = Vec::new();
    let mut truncated = false;
    // A page of no keys says nothing of what follows: S3 answers it as
    // complete.
    let keys = if max == 0 { Vec::new() } else { keys };
    for (key, item) in keys {
        if q.after.as_deref().is_some_and(|a| key.as_str() <= a) {
            continue;
        }
        let rest = &key[q.prefix.len()..];
        let entry = match q.delimiter.filter(|d| !d.is_empty()).and_then(|d| {
            rest.find(d)
                .map(|i| key[..q.prefix.len() + i + d.len()].to_string())
        }) {
            Some(prefix) => {
                let seen = entries.last().is_some_and(|(k, _)| *k == prefix)
                    || q.after.as_deref().is_some_and(|a| prefix.as_str() <= a);
                if seen {
                    continue;
                }
                (prefix, Entry::Prefix)
            }
            None => (key, Entry::Object(item)),
        };
        if entries.len() == max {
            truncated = true;
            break;
        }
        entries.push(entry);
    }
    let last = entries.last().map(|(k, _)| k.clone());
    let mut prefixes = Vec::new();
    let mut objects = Vec::new();
    for (key, entry) in entries {
        match entry {
            Entry::Prefix => prefixes.push(CommonPrefix {
                prefix: Some(encode(q.url_encoded, &key)),
            }),
            Entry::Object(item) => objects.push((key, item)),
        }
    }
    Ok(Paged {
        objects,
        prefixes,
        truncated,
        last,
    })
}

/// A listed object as S3 shows it.
pub fn object(
    q: &Query<'_>,
    key: &str,
    size: u64,
    mtime: u64,
    etag: String,
    owner: &str,
) -> Object {
    Object {
        key: Some(encode(q.url_encoded, key)),
        size: Some(size as i64),
        last_modified: Some(timestamp(mtime)),
        e_tag: Some(ETag::Strong(etag)),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        owner: q.fetch_owner.then(|| Owner {
            id: Some(owner.to_string()),
            display_name: None,
        }),
        ..Default::default()
    }
}

/// A page of a bucket of either kind.
pub async fn page(t: &Tenant, q: &Query<'_>) -> S3Result<Page> {
    match buckets::object_bucket(t, q.bucket)? {
        Some(b) => b.list(q).await,
        None => namespace_page(t, q).await,
    }
}

/// A page of a bucket of the namespace.
async fn namespace_page(t: &Tenant, q: &Query<'_>) -> S3Result<Page> {
    let dir = buckets::owned(t, q.bucket).await?;
    let inventory = t.client.catalog().inventory();
    let under = inventory
        .list(&format!("{}/{}", dir.path, q.prefix))
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))?;
    let paged = paginate(keys(q.bucket, under), q)?;
    // The page's ETags in one inventory call (a page is at most 1,000 keys,
    // the batch's bound); an object removed since the listing is left out.
    let ids: Vec<_> = paged.objects.iter().map(|(_, file)| file.id).collect();
    let xattrs = inventory
        .xattrs_of(&ids)
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))?;
    let contents = paged
        .objects
        .into_iter()
        .zip(xattrs)
        .filter_map(|((key, file), xattrs)| {
            let meta = ObjectMeta::from_xattrs(&file, &xattrs?);
            let size = if file.kind == FileKind::Dir {
                0
            } else {
                file.size
            };
            let owner = file.owner.to_string();
            Some(object(q, &key, size, file.mtime, meta.etag, &owner))
        })
        .collect();
    Ok(Page {
        contents,
        prefixes: paged.prefixes,
        truncated: paged.truncated,
        last: paged.last,
    })
}

/// The bucket's entries under the prefix as (key, entry) in key order:
/// files by their key, empty directories as `key/`.
fn keys(bucket: &str, under: Vec<FileMeta>) -> Vec<(String, FileMeta)> {
    let paths: Vec<&str> = under.iter().map(|m| m.path.as_str()).collect();
    let has_children = |dir: &str| {
        let inside = format!("{dir}/");
        let at = paths.partition_point(|p| *p < inside.as_str());
        paths.get(at).is_some_and(|p| p.starts_with(&inside))
    };
    let mut out: Vec<(String, FileMeta)> = Vec::with_capacity(under.len());
    for m in &under {
        let Some(key) = key_of(bucket, &m.path) else {
            continue;
        };
        let key = match m.kind {
            FileKind::File => key.to_string(),
            FileKind::Dir if has_children(&m.path) => continue,
            FileKind::Dir => format!("{key}/"),
            // S3 has no symbolic links or special files: not listed.
            _ => continue,
        };
        out.push((key, m.clone()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Continuation tokens are opaque to clients: the hex of the last key.
pub fn token(last: &str) -> String {
    last.bytes().map(|b| format!("{b:02x}")).collect()
}

pub fn untoken(token: &str) -> S3Result<String> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "the continuation token is not one this gateway gave"
        )
    };
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
        .collect::<S3Result<Vec<u8>>>()?;
    String::from_utf8(bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(path: &str, kind: FileKind) -> FileMeta {
        FileMeta {
            id: 1,
            path: path.into(),
            kind,
            size: 0,
            mode: 0o644,
            owner: 1,
            uid: 0,
            gid: 0,
            ctime: 0,
            mtime: 0,
            atime: 0,
            nlink: 1,
        }
    }

    #[test]
    fn keys_are_in_key_order_with_empty_folders() {
        let under = vec![
            meta("/b/a", FileKind::Dir),
            meta("/b/a-b", FileKind::File),
            meta("/b/a/x", FileKind::File),
            meta("/b/e", FileKind::Dir),
            meta("/b/z", FileKind::File),
        ];
        let keys: Vec<String> = keys("b", under).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a-b", "a/x", "e/", "z"]);
    }

    #[test]
    fn tokens_round_trip_and_garbage_is_refused() {
        for k in ["", "a/b c", "ünï/😀"] {
            assert_eq!(untoken(&token(k)).unwrap(), k);
        }
        for bad in ["abc", "zz", "ff"] {
            assert!(untoken(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn url_encoding_keeps_slashes() {
        assert_eq!(encode(true, "a b/c+d%"), "a%20b/c%2Bd%25");
        assert_eq!(encode(false, "a b"), "a b");
    }
}
