//! An object's S3 metadata kept as the file's extended attributes, so that
//! it stays with the data whichever view (file or object) moves or reads
//! it: the ETag, the standard headers a client set (Content-Type, ...) and
//! user metadata (`x-amz-meta-NAME` as `user.NAME`, the POSIX namespace of
//! user attributes).
//!
//! The ETag is the MD5 of the bytes (S3's own rule, which clients such as
//! rclone and s3cmd check after an upload), stored with the size and mtime
//! it was computed for. A file written or changed by a POSIX program has no
//! MD5 LABIOS could vouch for without reading it all, so it gets an ETag
//! derived from its identity, size and mtime, in the `HASH-1` form that
//! clients know not to compare with an MD5.

use bytes::Bytes;
use labios_store::{FileKind, FileMeta};
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::{Checksum, ChecksumType, Timestamp, TimestampFormat};
use std::collections::{BTreeMap, HashMap};

const ETAG: &str = "s3.etag";
/// The checksums a client had verified at upload, with the size and mtime
/// they were computed for.
const CHECKSUMS: &str = "s3.checksums";
/// The sizes of the parts a multipart upload made the object of, with the
/// size and mtime of the object they describe.
const PARTS: &str = "s3.parts";
/// The object's tags, as a URL query (`k=v&...`). Not stamped: tags
/// belong to the object, not to one version of its bytes.
pub const TAGGING: &str = "s3.tagging";
const USER: &str = "user.";

/// Refuses user metadata that would land among a file's hints
/// (`x-amz-meta-labios.NAME` is `user.labios.NAME`): hints are checked
/// where they are set (README "Hints"), which an S3 request is not.
pub fn no_hints(metadata: Option<&s3s::dto::Metadata>) -> s3s::S3Result<()> {
    let hint = labios_label::hints::PREFIX
        .strip_prefix(USER)
        .unwrap_or_default();
    match metadata
        .into_iter()
        .flatten()
        .find(|(k, _)| k.to_lowercase().starts_with(hint))
    {
        Some((k, _)) => Err(s3s::s3_error!(
            InvalidArgument,
            "x-amz-meta-{k}: metadata named {hint}* would be a LABIOS hint; set hints with \
             `labios hint set` or setxattr (README \"Hints\")"
        )),
        None => Ok(()),
    }
}

/// The standard headers kept, by attribute name.
const HEADERS: [&str; 6] = [
    "s3.content-type",
    "s3.content-encoding",
    "s3.content-disposition",
    "s3.content-language",
    "s3.cache-control",
    "s3.expires",
];

/// The content coding of SigV4 streaming uploads: how the body travelled,
/// not what the object is.
const AWS_CHUNKED: &str = "aws-chunked";

/// MD5 of no bytes: the ETag of an empty object or folder.
pub const EMPTY_MD5: &str = "d41d8cd98f00b204e9800998ecf8427e";

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectMeta {
    /// Without quotes.
    pub etag: String,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    /// The `Expires` header, as an HTTP date.
    pub expires: Option<String>,
    /// `x-amz-meta-*`, names lowercase without the prefix.
    pub user: HashMap<String, String>,
    /// The multipart upload that made the object, kept with the ETag and
    /// valid as long as it is: a CompleteMultipartUpload repeated by a
    /// client whose first answer was lost gets the same answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<String>,
    /// Full-object checksums verified at upload (`x-amz-checksum-*`), by
    /// algorithm (`CRC32`, ...), valid as long as the ETag is: a GET or
    /// HEAD with `x-amz-checksum-mode: ENABLED` answers with them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checksums: BTreeMap<String, String>,
    /// The sizes of the parts of a multipart upload, in order, valid as
    /// long as the ETag is: GET and HEAD with `partNumber` read one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<u64>,
    /// S3 tags (`x-amz-tagging`, PutObjectTagging).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: crate::tagging::Tags,
}

/// The metadata a PutObject, CopyObject or CreateMultipartUpload request
/// sets: their inputs name the standard headers and user metadata alike.
macro_rules! headers_of {
    ($input:expr) => {
        $crate::metadata::ObjectMeta {
            content_type: $input.content_type,
            content_encoding: $crate::metadata::stored_encoding($input.content_encoding),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires: $input
                .expires
                .as_ref()
                .and_then($crate::metadata::http_date),
            user: $input.metadata.unwrap_or_default(),
            tags: $crate::tagging::of_header($input.tagging.as_deref())?,
            ..$crate::metadata::ObjectMeta::default()
        }
    };
}

impl ObjectMeta {
    fn headers(&self) -> [&Option<String>; 6] {
        [
            &self.content_type,
            &self.content_encoding,
            &self.content_disposition,
            &self.content_language,
            &self.cache_control,
            &self.expires,
        ]
    }

    fn headers_mut(&mut self) -> [&mut Option<String>; 6] {
        [
            &mut self.content_type,
            &mut self.content_encoding,
            &mut self.content_disposition,
            &mut self.content_language,
            &mut self.cache_control,
            &mut self.expires,
        ]
    }

    /// Records the full-object checksums `c` holds.
    pub fn set_checksums(&mut self, c: &Checksum) {
        self.checksums = [
            ("CRC32", &c.checksum_crc32),
            ("CRC32C", &c.checksum_crc32c),
            ("CRC64NVME", &c.checksum_crc64nvme),
            ("SHA1", &c.checksum_sha1),
            ("SHA256", &c.checksum_sha256),
        ]
        .into_iter()
        .filter_map(|(a, v)| Some((a.to_string(), v.clone()?)))
        .collect();
    }

    /// The stored checksums as a GET or HEAD answers with them.
    pub fn checksum(&self) -> Checksum {
        let of = |a: &str| self.checksums.get(a).cloned();
        Checksum {
            checksum_crc32: of("CRC32"),
            checksum_crc32c: of("CRC32C"),
            checksum_crc64nvme: of("CRC64NVME"),
            checksum_sha1: of("SHA1"),
            checksum_sha256: of("SHA256"),
            checksum_type: (!self.checksums.is_empty())
                .then(|| ChecksumType::from_static(ChecksumType::FULL_OBJECT)),
        }
    }

    /// The metadata of a copy of the object this describes: bytes of ETag
    /// `etag` with tags `tags`, made by no multipart upload.
    pub fn copied(self, etag: String, tags: crate::tagging::Tags) -> ObjectMeta {
        ObjectMeta {
            etag,
            tags,
            upload: None,
            parts: Vec::new(),
            ..self
        }
    }

    /// GetObject's `x-amz-tagging-count`: none for an object without tags.
    pub fn tag_count(&self) -> Option<i32> {
        (!self.tags.is_empty()).then_some(self.tags.len() as i32)
    }

    /// The stored `Expires` as the timestamp a GET or HEAD answers with.
    pub fn expires_at(&self) -> Option<Timestamp> {
        Timestamp::parse(TimestampFormat::HttpDate, self.expires.as_deref()?).ok()
    }

    /// The attributes that record this metadata for a file of `size`
    /// bytes last modified at `mtime`.
    pub fn to_xattrs(&self, size: u64, mtime: u64) -> Vec<(String, Bytes)> {
        let mut stamp = format!("{} {size} {mtime}", self.etag);
        if let Some(upload) = &self.upload {
            stamp.push(' ');
            stamp.push_str(upload);
        }
        let mut out = vec![(ETAG.to_string(), Bytes::from(stamp))];
        if !self.checksums.is_empty() {
            let sums = self.checksums.iter().map(|(a, v)| format!("{a}={v}"));
            out.push((CHECKSUMS.to_string(), stamped(size, mtime, sums)));
        }
        if !self.parts.is_empty() {
            let parts = self.parts.iter().map(u64::to_string);
            out.push((PARTS.to_string(), stamped(size, mtime, parts)));
        }
        if !self.tags.is_empty() {
            let tags = crate::tagging::to_query(&self.tags);
            out.push((TAGGING.to_string(), Bytes::from(tags)));
        }
        for (name, value) in HEADERS.iter().zip(self.headers()) {
            if let Some(v) = value {
                out.push((name.to_string(), Bytes::from(v.clone())));
            }
        }
        for (k, v) in &self.user {
            out.push((
                format!("{USER}{}", k.to_lowercase()),
                Bytes::from(v.clone()),
            ));
        }
        out
    }

    /// The metadata of `meta` from its attributes. The stored ETag counts
    /// only if the file still has the size and mtime it was computed for.
    pub fn from_xattrs(meta: &FileMeta, xattrs: &[(String, Bytes)]) -> Self {
        let mut out = ObjectMeta::default();
        for (name, value) in xattrs {
            let Ok(value) = std::str::from_utf8(value) else {
                continue;
            };
            if name == ETAG {
                let mut parts = value.split(' ');
                let (etag, size, mtime) = (parts.next(), parts.next(), parts.next());
                if size == Some(&meta.size.to_string()) && mtime == Some(&meta.mtime.to_string()) {
                    out.etag = etag.unwrap_or_default().to_string();
                    out.upload = parts.next().map(str::to_string);
                }
            } else if name == CHECKSUMS {
                out.checksums = still_held(meta, value)
                    .filter_map(|p| p.split_once('='))
                    .map(|(a, v)| (a.to_string(), v.to_string()))
                    .collect();
            } else if name == PARTS {
                out.parts = still_held(meta, value)
                    .map_while(|p| p.parse().ok())
                    .collect();
            } else if name == TAGGING {
                out.tags = crate::tagging::of_query(value);
            } else if name.starts_with(labios_label::hints::PREFIX) {
                // Hints are not user metadata: a copy would carry them onto
                // an object whose bytes they did not place, unchecked.
            } else if let Some(user) = name.strip_prefix(USER) {
                out.user.insert(user.to_string(), value.to_string());
            } else if let Some(i) = HEADERS.iter().position(|h| h == name) {
                *out.headers_mut()[i] = Some(value.to_string());
            }
        }
        if out.etag.is_empty() {
            let size = if meta.kind == FileKind::Dir {
                0
            } else {
                meta.size
            };
            out.etag = derived_etag(&format!("{}:{}:{}", meta.id, meta.size, meta.mtime), size);
        }
        out
    }
}

/// `size mtime ITEM...`: a record of the file as it was at that size and
/// mtime.
fn stamped(size: u64, mtime: u64, items: impl Iterator<Item = String>) -> Bytes {
    let mut out = format!("{size} {mtime}");
    for item in items {
        out.push(' ');
        out.push_str(&item);
    }
    Bytes::from(out)
}

/// The items of a [`stamped`] record, none if the file changed since.
fn still_held<'a>(meta: &FileMeta, record: &'a str) -> impl Iterator<Item = &'a str> {
    let mut items = record.split(' ');
    let (size, mtime) = (items.next(), items.next());
    let held = size == Some(&meta.size.to_string()) && mtime == Some(&meta.mtime.to_string());
    items.filter(move |_| held)
}

/// A request's Content-Encoding as the object keeps it: without
/// `aws-chunked`, which only says how the body was sent (S3 drops it too);
/// none if nothing else is left.
pub fn stored_encoding(sent: Option<String>) -> Option<String> {
    let kept: Vec<&str> = sent
        .as_deref()?
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case(AWS_CHUNKED))
        .collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

/// `t` as an HTTP date, the form the `Expires` header is sent in.
pub fn http_date(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// S3's ETag of a single-part object: the hex MD5 of its bytes.
pub fn md5_etag(md5: &[u8; 16]) -> String {
    hex(md5)
}

/// S3's ETag of a multipart object: the MD5 of the parts' MD5s, then `-N`.
pub fn multipart_etag(parts: &[[u8; 16]]) -> String {
    let mut all = Md5::new();
    for p in parts {
        all.update(p);
    }
    format!("{}-{}", hex(&all.finalize()), parts.len())
}

/// Parses a hex MD5 (a part's ETag) back into bytes.
pub fn parse_md5(etag: &str) -> Option<[u8; 16]> {
    let etag = etag.trim_matches('"');
    if etag.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(etag.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The ETag of data with no MD5 on record: a hash of what identifies this
/// version of it (`stamp`), in the form clients do not take for an MD5.
pub fn derived_etag(stamp: &str, size: u64) -> String {
    if size == 0 {
        return EMPTY_MD5.to_string();
    }
    format!("{}-1", hex(&Md5::checksum(stamp.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: u64, mtime: u64) -> FileMeta {
        FileMeta {
            id: 7,
            path: "/b/k".into(),
            kind: FileKind::File,
            size,
            mode: 0o644,
            owner: 1,
            uid: 0,
            gid: 0,
            ctime: mtime,
            mtime,
            atime: mtime,
            nlink: 1,
        }
    }

    #[test]
    fn metadata_round_trips_through_attributes() {
        let m = ObjectMeta {
            etag: md5_etag(&Md5::checksum(b"hello")),
            content_type: Some("text/plain".into()),
            cache_control: Some("no-cache".into()),
            user: HashMap::from([("mtime".into(), "1700000000".into())]),
            upload: Some("0123456789abcdef0123456789abcdef".into()),
            checksums: BTreeMap::from([("CRC32".into(), "NhCmhg==".into())]),
            parts: vec![3, 2],
            ..ObjectMeta::default()
        };
        assert_eq!(m.etag, "5d41402abc4b2a76b9719d911017c592");
        let back = ObjectMeta::from_xattrs(&file(5, 9), &m.to_xattrs(5, 9));
        assert_eq!(back, m);
    }

    /// A file's hints are not its user metadata: HEAD does not show them
    /// and a copy does not carry them.
    #[test]
    fn hints_are_not_user_metadata() {
        let xattrs = [
            ("user.color".to_string(), Bytes::from_static(b"red")),
            (
                "user.labios.placement".to_string(),
                Bytes::from_static(b"local"),
            ),
        ];
        let m = ObjectMeta::from_xattrs(&file(0, 1), &xattrs);
        assert_eq!(m.user, HashMap::from([("color".into(), "red".into())]));
    }

    #[test]
    fn a_changed_file_loses_its_md5() {
        let m = ObjectMeta {
            etag: md5_etag(&Md5::checksum(b"hello")),
            ..ObjectMeta::default()
        };
        let xattrs = ObjectMeta {
            upload: Some("0123456789abcdef0123456789abcdef".into()),
            ..m.clone()
        }
        .to_xattrs(5, 9);
        let changed = ObjectMeta::from_xattrs(&file(5, 10), &xattrs);
        assert!(changed.etag.ends_with("-1"), "{}", changed.etag);
        assert_eq!(changed.upload, None, "the upload no longer made the object");
        let mut summed = m.clone();
        summed.set_checksums(&Checksum {
            checksum_sha256: Some("x".into()),
            ..Default::default()
        });
        let stale = ObjectMeta::from_xattrs(&file(5, 10), &summed.to_xattrs(5, 9));
        assert!(stale.checksums.is_empty(), "{:?}", stale.checksums);
        summed.parts = vec![5];
        let stale = ObjectMeta::from_xattrs(&file(5, 10), &summed.to_xattrs(5, 9));
        assert!(stale.parts.is_empty(), "{:?}", stale.parts);
        assert_ne!(changed.etag, m.etag);
        let plain = ObjectMeta::from_xattrs(&file(5, 10), &[]);
        assert_eq!(plain.etag, changed.etag);
        assert_eq!(ObjectMeta::from_xattrs(&file(0, 1), &[]).etag, EMPTY_MD5);
    }

    #[test]
    fn aws_chunked_is_how_a_body_travelled_not_its_coding() {
        let stored = |s: &str| stored_encoding(Some(s.to_string()));
        assert_eq!(stored("aws-chunked"), None);
        assert_eq!(stored("aws-chunked,gzip"), Some("gzip".into()));
        assert_eq!(stored("gzip, AWS-CHUNKED"), Some("gzip".into()));
        assert_eq!(stored("br"), Some("br".into()));
        assert_eq!(stored_encoding(None), None);
    }

    #[test]
    fn expires_round_trips_as_an_http_date() {
        let t =
            Timestamp::parse(TimestampFormat::HttpDate, "Wed, 21 Oct 2026 07:28:00 GMT").unwrap();
        let m = ObjectMeta {
            expires: http_date(&t),
            ..ObjectMeta::default()
        };
        assert_eq!(m.expires.as_deref(), Some("Wed, 21 Oct 2026 07:28:00 GMT"));
        let back = ObjectMeta::from_xattrs(&file(0, 1), &m.to_xattrs(0, 1));
        assert_eq!(back.expires_at(), Some(t));
    }

    #[test]
    fn multipart_etags_are_s3s() {
        let a = Md5::checksum(b"a");
        let b = Md5::checksum(b"b");
        let e = multipart_etag(&[a, b]);
        assert!(e.ends_with("-2"));
        assert_eq!(parse_md5(&format!("\"{}\"", md5_etag(&a))), Some(a));
        assert_eq!(parse_md5("nope"), None);
    }
}
