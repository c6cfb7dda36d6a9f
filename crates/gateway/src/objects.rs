//! Objects as files. A PUT streams its body into a staged file and then
//! renames it over the key in one label, so readers see the old object or
//! the new one, never a mix; the file is then an ordinary LABIOS file, which
//! a program under `labios run` opens like any other. A file such a program
//! wrote is likewise an object: GET reads it through labels, wherever its
//! extents are.

use crate::buckets::{self, lookup};
use crate::metadata::{md5_etag, ObjectMeta, EMPTY_MD5};
use crate::names::{fresh_id, object_path, STAGING};
use crate::streams::{read_body, write_body, Written};
use crate::tenants::Tenant;
use crate::time::{timestamp, timestamp_secs};
use futures::future::try_join_all;
use labios_store::{FileKind, FileMeta};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};

/// An existing object: its path, stat and S3 metadata.
pub struct Found {
    pub path: String,
    pub file: FileMeta,
    pub meta: ObjectMeta,
}

impl Found {
    /// A folder (directory) is an empty object.
    pub fn size(&self) -> u64 {
        match self.file.kind {
            FileKind::File => self.file.size,
            _ => 0,
        }
    }
}

/// The conditions of a GetObject or HeadObject request (whose inputs name
/// them alike) on `found`.
macro_rules! conditions {
    ($found:expr, $input:expr) => {
        $crate::objects::check_conditions(
            &$found,
            $input.if_match.as_ref(),
            $input.if_none_match.as_ref(),
            $input.if_modified_since.as_ref(),
            $input.if_unmodified_since.as_ref(),
        )
    };
}

/// A GetObject or HeadObject output describing `found`, `len` bytes of it,
/// with its stored checksums if `sums`, plus the given fields.
macro_rules! described {
    ($ty:ident, $found:expr, $len:expr, $sums:expr, { $($field:ident: $value:expr),* $(,)? }) => {{
        let m = $found.meta;
        let expires = m.expires_at();
        let c = if $sums { m.checksum() } else { Default::default() };
        $ty {
            checksum_crc32: c.checksum_crc32,
            checksum_crc32c: c.checksum_crc32c,
            checksum_crc64nvme: c.checksum_crc64nvme,
            checksum_sha1: c.checksum_sha1,
            checksum_sha256: c.checksum_sha256,
            checksum_type: c.checksum_type,
            content_length: Some($len as i64),
            accept_ranges: Some("bytes".into()),
            last_modified: Some(timestamp($found.file.mtime)),
            e_tag: Some(ETag::Strong(m.etag)),
            content_type: m.content_type,
            content_encoding: m.content_encoding,
            content_disposition: m.content_disposition,
            content_language: m.content_language,
            expires,
            cache_control: m.cache_control,
            metadata: (!m.user.is_empty()).then_some(m.user),
            $($field: $value,)*
            ..Default::default()
        }
    }};
}

/// The object `key` of a bucket `t` owns, of either kind of bucket.
pub async fn find_any(t: &Tenant, bucket: &str, key: &str) -> S3Result<Found> {
    match buckets::object_bucket(t, bucket)? {
        Some(b) => b.find(key).await,
        None => find(t, bucket, key).await,
    }
}

/// The object `key` of a bucket `t` owns. A directory is an object only
/// when asked for as a folder (`key/`).
pub async fn find(t: &Tenant, bucket: &str, key: &str) -> S3Result<Found> {
    buckets::owned(t, bucket).await?;
    let path = object_path(bucket, key)?;
    let missing = || s3_error!(NoSuchKey, "there is no object {key:?} in bucket {bucket}");
    let file = lookup(t, &path).await?.ok_or_else(missing)?;
    // A symbolic link is no object: S3 has none.
    if file.kind == FileKind::Symlink || (file.kind == FileKind::Dir) != key.ends_with('/') {
        return Err(missing());
    }
    let xattrs = t.xattrs(file.id, S3ErrorCode::NoSuchKey).await?;
    let meta = ObjectMeta::from_xattrs(&file, &xattrs);
    Ok(Found { path, file, meta })
}

/// Whether a GET or HEAD (whose inputs name it alike) asks for the stored
/// checksums: S3 gives them for the whole object only.
macro_rules! wants_checksums {
    ($input:expr) => {
        $input.range.is_none()
            && $input.part_number.is_none()
            && $input
                .checksum_mode
                .as_ref()
                .is_some_and(|m| m.as_str() == ChecksumMode::ENABLED)
    };
}

/// If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since of a
/// GET or HEAD, in RFC 7232's order.
pub fn check_conditions(
    found: &Found,
    if_match: Option<&IfMatch>,
    if_none_match: Option<&IfNoneMatch>,
    if_modified_since: Option<&IfModifiedSince>,
    if_unmodified_since: Option<&IfUnmodifiedSince>,
) -> S3Result<()> {
    let etag = ETag::Strong(found.meta.etag.clone());
    let mtime = timestamp_secs(found.file.mtime);
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag.value(),
    };
    if let Some(c) = if_match {
        if !matches(c) {
            return Err(s3_error!(
                PreconditionFailed,
                "the ETag is {}",
                found.meta.etag
            ));
        }
    } else if let Some(t) = if_unmodified_since {
        if mtime > *t {
            return Err(s3_error!(PreconditionFailed, "modified since then"));
        }
    }
    if let Some(c) = if_none_match {
        if matches(c) {
            return Err(not_modified(found));
        }
    } else if let Some(t) = if_modified_since {
        if mtime <= *t {
            return Err(not_modified(found));
        }
    }
    Ok(())
}

/// 304 Not Modified with the ETag and Last-Modified a cache revalidates
/// against (RFC 7232 4.1: the headers a 200 would have sent).
fn not_modified(found: &Found) -> S3Error {
    let mut e = S3Error::new(S3ErrorCode::NotModified);
    let mut headers = http::HeaderMap::new();
    let etag = format!("\"{}\"", found.meta.etag);
    if let Ok(v) = http::HeaderValue::from_str(&etag) {
        headers.insert(http::header::ETAG, v);
    }
    let mut date = Vec::new();
    if timestamp(found.file.mtime)
        .format(TimestampFormat::HttpDate, &mut date)
        .is_ok()
    {
        if let Ok(v) = http::HeaderValue::from_bytes(&date) {
            headers.insert(http::header::LAST_MODIFIED, v);
        }
    }
    e.set_headers(headers);
    e
}

/// The `x-amz-copy-source-if-*` conditions of a CopyObject or an
/// UploadPartCopy (their inputs name them alike) on its source `src`.
macro_rules! copy_conditions {
    ($src:expr, $input:expr) => {
        $crate::objects::source_conditions(
            $src,
            $input.copy_source_if_match.as_ref(),
            $input.copy_source_if_none_match.as_ref(),
            $input.copy_source_if_modified_since.as_ref(),
            $input.copy_source_if_unmodified_since.as_ref(),
        )
    };
}

/// Conditions on a copy's source. A copy has no 304: every failed
/// condition is 412.
pub fn source_conditions(
    src: &Found,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    modified_since: Option<&Timestamp>,
    unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    check_conditions(
        src,
        if_match,
        if_none_match,
        modified_since,
        unmodified_since,
    )
    .map_err(|e| match e.code() {
        S3ErrorCode::NotModified => s3_error!(
            PreconditionFailed,
            "the copy source has ETag {} and is not modified since",
            src.meta.etag
        ),
        _ => e,
    })
}

/// If-Match and If-None-Match of a PUT: `existing` (looked up only when
/// the request has a condition) must be, or must not be, there.
pub async fn put_conditions(
    input: &PutObjectInput,
    existing: impl std::future::Future<Output = S3Result<Found>>,
) -> S3Result<()> {
    if input.if_match.is_none() && input.if_none_match.is_none() {
        return Ok(());
    }
    match existing.await {
        Ok(found) => check_conditions(
            &found,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            None,
            None,
        )
        .map_err(|e| match e.code() {
            S3ErrorCode::NotModified => {
                s3_error!(PreconditionFailed, "{} already exists", input.key)
            }
            _ => e,
        }),
        Err(e) if *e.code() == S3ErrorCode::NoSuchKey && input.if_match.is_some() => Err(
            s3_error!(PreconditionFailed, "{} does not exist", input.key),
        ),
        Err(e) if *e.code() == S3ErrorCode::NoSuchKey => Ok(()),
        Err(e) => Err(e),
    }
}

/// A checksum hasher for the algorithms the request names.
fn hasher(
    algorithm: Option<&ChecksumAlgorithm>,
    given: [Option<&String>; 5],
) -> S3Result<ChecksumHasher> {
    let mut h = ChecksumHasher::default();
    let [crc32, crc32c, sha1, sha256, crc64] = given;
    let want = |a: &str| algorithm.is_some_and(|x| x.as_str() == a);
    if crc32.is_some() || want(ChecksumAlgorithm::CRC32) {
        h.crc32 = Some(Default::default());
    }
    if crc32c.is_some() || want(ChecksumAlgorithm::CRC32C) {
        h.crc32c = Some(Default::default());
    }
    if sha1.is_some() || want(ChecksumAlgorithm::SHA1) {
        h.sha1 = Some(Default::default());
    }
    if sha256.is_some() || want(ChecksumAlgorithm::SHA256) {
        h.sha256 = Some(Default::default());
    }
    if crc64.is_some() || want(ChecksumAlgorithm::CRC64NVME) {
        h.crc64nvme = Some(Default::default());
    }
    if let Some(a) = algorithm {
        let known = [
            ChecksumAlgorithm::CRC32,
            ChecksumAlgorithm::CRC32C,
            ChecksumAlgorithm::SHA1,
            ChecksumAlgorithm::SHA256,
            ChecksumAlgorithm::CRC64NVME,
        ];
        if !known.contains(&a.as_str()) {
            return Err(s3_error!(
                InvalidArgument,
                "unknown checksum algorithm {}",
                a.as_str()
            ));
        }
    }
    Ok(h)
}

/// The checksums a request carries, in headers or in aws-chunked trailers.
pub struct Claimed {
    pub md5: Option<String>,
    pub checksum: Checksum,
}

impl Claimed {
    /// The checksums a PutObject request claims (taken out of `input`),
    /// and the hasher that computes them over its body.
    pub fn of_put(input: &mut PutObjectInput) -> S3Result<(Claimed, ChecksumHasher)> {
        let hasher = hasher(
            input.checksum_algorithm.as_ref(),
            [
                input.checksum_crc32.as_ref(),
                input.checksum_crc32c.as_ref(),
                input.checksum_sha1.as_ref(),
                input.checksum_sha256.as_ref(),
                input.checksum_crc64nvme.as_ref(),
            ],
        )?;
        let claimed = Claimed {
            md5: input.content_md5.take(),
            checksum: Checksum {
                checksum_crc32: input.checksum_crc32.take(),
                checksum_crc32c: input.checksum_crc32c.take(),
                checksum_sha1: input.checksum_sha1.take(),
                checksum_sha256: input.checksum_sha256.take(),
                checksum_crc64nvme: input.checksum_crc64nvme.take(),
                ..Default::default()
            },
        };
        Ok((claimed, hasher))
    }

    pub fn take_trailers(&mut self, trailers: Option<&s3s::TrailingHeaders>) -> S3Result<()> {
        let Some(headers) = trailers.and_then(|t| t.take()) else {
            return Ok(());
        };
        let c = &mut self.checksum;
        for (name, slot) in [
            ("x-amz-checksum-crc32", &mut c.checksum_crc32),
            ("x-amz-checksum-crc32c", &mut c.checksum_crc32c),
            ("x-amz-checksum-sha1", &mut c.checksum_sha1),
            ("x-amz-checksum-sha256", &mut c.checksum_sha256),
            ("x-amz-checksum-crc64nvme", &mut c.checksum_crc64nvme),
        ] {
            if let Some(v) = headers.get(name) {
                let v = v
                    .to_str()
                    .map_err(|_| s3_error!(InvalidArgument, "{name} is not text"))?;
                *slot = Some(v.to_string());
            }
        }
        Ok(())
    }

    /// BadDigest unless what was stored has the checksums the client sent.
    pub fn verify(&self, written: &Written) -> S3Result<()> {
        if let Some(md5) = &self.md5 {
            let sent = base64_md5(md5)
                .ok_or_else(|| s3_error!(InvalidDigest, "Content-MD5 is not a base64 MD5"))?;
            if sent != written.md5 {
                return Err(s3_error!(BadDigest, "Content-MD5 does not match the body"));
            }
        }
        let (got, sent) = (&written.checksum, &self.checksum);
        for (name, g, s) in [
            ("crc32", &got.checksum_crc32, &sent.checksum_crc32),
            ("crc32c", &got.checksum_crc32c, &sent.checksum_crc32c),
            ("sha1", &got.checksum_sha1, &sent.checksum_sha1),
            ("sha256", &got.checksum_sha256, &sent.checksum_sha256),
            (
                "crc64nvme",
                &got.checksum_crc64nvme,
                &sent.checksum_crc64nvme,
            ),
        ] {
            if let Some(s) = s {
                if g.as_ref() != Some(s) {
                    return Err(s3_error!(
                        BadDigest,
                        "the {name} checksum sent ({s}) does not match the body"
                    ));
                }
            }
        }
        Ok(())
    }
}

fn base64_md5(text: &str) -> Option<[u8; 16]> {
    base64_simd::STANDARD
        .decode_to_vec(text)
        .ok()?
        .try_into()
        .ok()
}

/// Stages `body` for `path`: the bytes go to a fresh file under
/// [`STAGING`], which [`commit`] later renames over `path`.
pub async fn stage(
    t: &Tenant,
    body: StreamingBlob,
    hasher: ChecksumHasher,
) -> S3Result<(String, Written)> {
    let staged = format!("{STAGING}/{}", fresh_id());
    t.client
        .create(&staged)
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))?;
    match write_body(t, &staged, 0, body, hasher).await {
        Ok(w) => Ok((staged, w)),
        Err(e) => {
            discard(t, &staged).await;
            Err(e)
        }
    }
}

/// Copies all `len` bytes of file `from` to offset `at` of file `to` with
/// [`labios_client::Client::copy_range`]: read and write labels that move
/// the bytes between workers without the gateway. A source that ends
/// early changed since the caller looked at it.
pub async fn copy_into(t: &Tenant, from: &str, to: &str, at: u64, len: u64) -> S3Result<()> {
    let mut done = 0;
    while done < len {
        let n = t
            .client
            .copy_range(from, done, to, at + done, len - done)
            .await
            .map_err(|e| t.fail(e, S3ErrorCode::NoSuchKey))?;
        if n == 0 {
            return Err(s3_error!(
                InvalidRequest,
                "{from} has {done} bytes, not the {len} it had when the copy began; it changed meanwhile"
            ));
        }
        done += n;
    }
    Ok(())
}

/// Best effort: a staged file left behind is garbage under [`STAGING`]
/// that nothing lists.
pub async fn discard(t: &Tenant, staged: &str) {
    if let Err(e) = t.client.remove(staged).await {
        tracing::warn!("cannot remove staged upload {staged}: {e}");
    }
}

/// Records `meta` on the staged file and renames it over `path`.
pub async fn commit(t: &Tenant, staged: &str, path: &str, meta: &ObjectMeta) -> S3Result<FileMeta> {
    let result = async {
        if let Some(existing) = lookup(t, path).await? {
            if existing.kind == FileKind::Dir {
                return Err(crate::errors::conflict(
                    crate::errors::EXISTING_IS_DIRECTORY,
                    format!("{path} is a directory in LABIOS (objects exist under its name followed by /); a file system cannot hold both"),
                ));
            }
        }
        let fail = |e| t.fail(e, S3ErrorCode::NoSuchKey);
        let file = t.client.stat(staged).await.map_err(fail)?;
        let inventory = t.client.catalog().inventory();
        try_join_all(
            meta.to_xattrs(file.size, file.mtime)
                .into_iter()
                .map(|(name, value)| async move {
                    inventory.set_xattr(file.id, &name, Some(value)).await
                }),
        )
        .await
        .map_err(fail)?;
        t.client.rename(staged, path).await.map_err(fail)?;
        Ok(file)
    }
    .await;
    if result.is_err() {
        discard(t, staged).await;
    }
    result
}

/// A folder object: a directory (its parents created as needed).
async fn put_folder(t: &Tenant, path: &str, body: Option<StreamingBlob>) -> S3Result<()> {
    if let Some(mut body) = body {
        use futures::StreamExt;
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(|e| s3_error!(IncompleteBody, "{e}"))?;
            if !piece.is_empty() {
                return Err(s3_error!(
                    InvalidArgument,
                    "a key ending in / is a folder and takes no data"
                ));
            }
        }
    }
    t.client
        .mkdir(path)
        .await
        .map(drop)
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchKey))
}

pub async fn put(
    t: &Tenant,
    mut input: PutObjectInput,
    trailers: Option<&s3s::TrailingHeaders>,
) -> S3Result<PutObjectOutput> {
    buckets::owned(t, &input.bucket).await?;
    let path = object_path(&input.bucket, &input.key)?;
    put_conditions(&input, find(t, &input.bucket, &input.key)).await?;
    if input.key.ends_with('/') {
        put_folder(t, &path, input.body).await?;
        return Ok(PutObjectOutput {
            e_tag: Some(ETag::Strong(EMPTY_MD5.to_string())),
            ..Default::default()
        });
    }
    let body = input
        .body
        .take()
        .ok_or_else(|| s3_error!(IncompleteBody, "PUT without a body"))?;
    let (mut claimed, hasher) = Claimed::of_put(&mut input)?;
    let (staged, written) = stage(t, body, hasher).await?;
    if let Err(e) = claimed
        .take_trailers(trailers)
        .and_then(|()| claimed.verify(&written))
    {
        discard(t, &staged).await;
        return Err(e);
    }
    let mut meta = ObjectMeta {
        etag: md5_etag(&written.md5),
        ..headers_of!(input)
    };
    meta.set_checksums(&written.checksum);
    commit(t, &staged, &path, &meta).await?;
    let c = written.checksum;
    Ok(PutObjectOutput {
        e_tag: Some(ETag::Strong(meta.etag)),
        size: Some(written.size as i64),
        checksum_crc32: c.checksum_crc32,
        checksum_crc32c: c.checksum_crc32c,
        checksum_sha1: c.checksum_sha1,
        checksum_sha256: c.checksum_sha256,
        checksum_crc64nvme: c.checksum_crc64nvme,
        ..Default::default()
    })
}

/// The bytes a Range header asks of an object of `size` bytes, and the
/// Content-Range of the answer.
/// The bytes a GET or HEAD asks for: a `Range`, a `partNumber` (S3's
/// part of a multipart object; part 1 of any other object is all of it),
/// or the whole object.
pub struct Selection {
    pub range: std::ops::Range<u64>,
    pub content_range: Option<String>,
    pub parts_count: Option<i32>,
}

pub fn select(range: Option<&Range>, part: Option<i32>, found: &Found) -> S3Result<Selection> {
    let size = found.size();
    let Some(n) = part else {
        let (range, content_range) = range_of(range, size)?;
        return Ok(Selection {
            range,
            content_range,
            parts_count: None,
        });
    };
    if range.is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "a request names a Range or a partNumber, not both"
        ));
    }
    let parts = &found.meta.parts;
    let (sizes, count) = if parts.is_empty() {
        (vec![size], None)
    } else {
        (parts.clone(), i32::try_from(parts.len()).ok())
    };
    let index = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .filter(|i| *i < sizes.len())
        .ok_or_else(|| {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InvalidPartNumber".into()),
                format!("the object has {} part(s), not a part {n}", sizes.len()),
            );
            e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
            e
        })?;
    let start: u64 = sizes[..index].iter().sum();
    let range = start..start + sizes[index];
    let content_range = (count.is_some() && !range.is_empty())
        .then(|| format!("bytes {}-{}/{size}", range.start, range.end - 1));
    Ok(Selection {
        range,
        content_range,
        parts_count: count,
    })
}

pub fn range_of(
    range: Option<&Range>,
    size: u64,
) -> S3Result<(std::ops::Range<u64>, Option<String>)> {
    let Some(r) = range else {
        return Ok((0..size, None));
    };
    // s3s takes a suffix range of an empty object for an empty range; it
    // has no bytes to name in a Content-Range either.
    let range = r
        .check(size)
        .ok()
        .filter(|range| !range.is_empty())
        .ok_or_else(|| {
            s3_error!(
                InvalidRange,
                "range {} is outside the object's {size} bytes",
                r.to_header_string()
            )
        })?;
    let header = format!("bytes {}-{}/{size}", range.start, range.end - 1);
    Ok((range, Some(header)))
}

pub async fn get(t: &Tenant, input: GetObjectInput) -> S3Result<GetObjectOutput> {
    let found = find(t, &input.bucket, &input.key).await?;
    conditions!(found, input)?;
    let s = select(input.range.as_ref(), input.part_number, &found)?;
    let body = read_body(t, &found.path, s.range.start, s.range.end).await?;
    let tag_count = found.meta.tag_count();
    Ok(
        described!(GetObjectOutput, found, s.range.end - s.range.start, wants_checksums!(input), {
            body: Some(body),
            content_range: s.content_range,
            parts_count: s.parts_count,
            tag_count: tag_count,
        }),
    )
}

pub async fn head(t: &Tenant, input: HeadObjectInput) -> S3Result<HeadObjectOutput> {
    let found = find(t, &input.bucket, &input.key).await?;
    conditions!(found, input)?;
    let s = select(None, input.part_number, &found)?;
    Ok(
        described!(HeadObjectOutput, found, s.range.end - s.range.start, wants_checksums!(input), {
            content_range: s.content_range,
            parts_count: s.parts_count,
        }),
    )
}

/// S3's most parts in one GetObjectAttributes answer.
const MAX_PARTS_DESCRIBED: i32 = 1000;

/// GetObjectAttributes: what the request names of the object, in one
/// answer (tools use it to check an upload without reading it): its ETag,
/// checksums, size, storage class, and a page of its parts if a multipart
/// upload made it.
pub async fn attributes(
    t: &Tenant,
    input: GetObjectAttributesInput,
) -> S3Result<GetObjectAttributesOutput> {
    let found = find_any(t, &input.bucket, &input.key).await?;
    // One header names them all, comma-separated; s3s hands it over whole.
    let wants = |a: &str| {
        input
            .object_attributes
            .iter()
            .flat_map(|x| x.as_str().split(','))
            .any(|x| x.trim() == a)
    };
    let max_parts = match input.max_parts {
        Some(n) if !(0..=MAX_PARTS_DESCRIBED).contains(&n) => {
            return Err(s3_error!(
                InvalidArgument,
                "max-parts must be between 0 and {MAX_PARTS_DESCRIBED}, not {n}"
            ))
        }
        Some(n) => n,
        None => MAX_PARTS_DESCRIBED,
    };
    let object_parts = (wants(ObjectAttributes::OBJECT_PARTS) && !found.meta.parts.is_empty())
        .then(|| {
            let after = input.part_number_marker.unwrap_or(0).max(0) as usize;
            let parts: Vec<ObjectPart> = found
                .meta
                .parts
                .iter()
                .enumerate()
                .skip(after)
                .take(max_parts as usize)
                .map(|(i, size)| ObjectPart {
                    part_number: Some(i as i32 + 1),
                    size: Some(*size as i64),
                    ..Default::default()
                })
                .collect();
            let last = parts.last().and_then(|p| p.part_number);
            let truncated = last.is_some_and(|l| (l as usize) < found.meta.parts.len());
            GetObjectAttributesParts {
                is_truncated: Some(truncated),
                max_parts: Some(max_parts),
                next_part_number_marker: last,
                part_number_marker: input.part_number_marker,
                parts: Some(parts),
                total_parts_count: Some(found.meta.parts.len() as i32),
            }
        });
    let checksum = (wants(ObjectAttributes::CHECKSUM) && !found.meta.checksums.is_empty())
        .then(|| found.meta.checksum());
    Ok(GetObjectAttributesOutput {
        checksum,
        e_tag: wants(ObjectAttributes::ETAG).then(|| ETag::Strong(found.meta.etag.clone())),
        last_modified: Some(timestamp(found.file.mtime)),
        object_parts,
        object_size: wants(ObjectAttributes::OBJECT_SIZE).then(|| found.size() as i64),
        storage_class: wants(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        ..Default::default()
    })
}

/// Deletes one object; a missing one is no error (S3's DELETE is
/// idempotent). Directories left empty up to the bucket go too, as the
/// prefix of the last object under it disappears in S3.
pub async fn delete(t: &Tenant, bucket: &str, key: &str) -> S3Result<()> {
    let dir = buckets::owned(t, bucket).await?;
    let path = object_path(bucket, key)?;
    let Some(file) = lookup(t, &path).await? else {
        return Ok(());
    };
    match (file.kind, key.ends_with('/')) {
        (FileKind::File, false) | (FileKind::Dir, true) => {}
        _ => return Ok(()),
    }
    match t.client.remove(&path).await {
        Ok(()) | Err(labios_label::Error::NotFound(_)) => {}
        // A folder that still holds objects: its marker is already gone
        // from listings (only empty directories are shown as folders).
        Err(labios_label::Error::InvalidArgument(_)) if file.kind == FileKind::Dir => return Ok(()),
        Err(e) => return Err(t.fail(e, S3ErrorCode::NoSuchKey)),
    }
    let mut parent = labios_label::path::parent(&path);
    while let Some(p) = parent.filter(|p| *p != dir.path) {
        if t.client.remove(p).await.is_err() {
            break;
        }
        parent = labios_label::path::parent(p);
    }
    Ok(())
}

/// Deletes one object of a bucket of either kind.
pub async fn delete_any(t: &Tenant, bucket: &str, key: &str) -> S3Result<()> {
    match buckets::object_bucket(t, bucket)? {
        Some(b) => b.delete(key).await,
        None => delete(t, bucket, key).await,
    }
}

/// S3's most keys in one DeleteObjects request.
const MAX_DELETES: usize = 1000;

pub async fn delete_many(t: &Tenant, input: DeleteObjectsInput) -> S3Result<DeleteObjectsOutput> {
    let asked = input.delete.objects.len();
    if asked > MAX_DELETES {
        return Err(s3_error!(
            MalformedXML,
            "DeleteObjects names {asked} keys; at most {MAX_DELETES} are allowed"
        ));
    }
    buckets::usable(t, &input.bucket).await?;
    let quiet = input.delete.quiet.unwrap_or(false);
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for id in input.delete.objects {
        match delete_any(t, &input.bucket, &id.key).await {
            Ok(()) if !quiet => deleted.push(DeletedObject {
                key: Some(id.key),
                ..Default::default()
            }),
            Ok(()) => {}
            Err(e) => errors.push(Error {
                code: Some(e.code().as_str().to_string()),
                message: e.message().map(str::to_string),
                key: Some(id.key),
                version_id: None,
            }),
        }
    }
    Ok(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: Some(errors),
        ..Default::default()
    })
}

/// The bucket and key of a copy's `x-amz-copy-source`.
pub fn source_of(source: &CopySource) -> S3Result<(String, String)> {
    match source {
        CopySource::Bucket { bucket, key, .. } => Ok((bucket.to_string(), key.to_string())),
        _ => Err(s3_error!(
            NotImplemented,
            "only bucket/key copy sources are supported"
        )),
    }
}

pub async fn copy(t: &Tenant, input: CopyObjectInput) -> S3Result<CopyObjectOutput> {
    let (src_bucket, src_key) = source_of(&input.copy_source)?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    if (src_bucket.as_str(), src_key.as_str()) == (input.bucket.as_str(), input.key.as_str())
        && !replace
    {
        return Err(s3_error!(
            InvalidRequest,
            "copying an object onto itself needs new metadata (x-amz-metadata-directive: REPLACE)"
        ));
    }
    let from = buckets::object_bucket(t, &src_bucket)?;
    let into = buckets::object_bucket(t, &input.bucket)?;
    if from.is_none() && into.is_none() {
        return copy_in_namespace(t, &src_bucket, &src_key, replace, input).await;
    }
    // The destination is checked before any byte is read.
    let into = match into {
        Some(b) => {
            b.check_key(&input.key)?;
            CopyTarget::Objects(b)
        }
        None => {
            buckets::owned(t, &input.bucket).await?;
            CopyTarget::Namespace(object_path(&input.bucket, &input.key)?)
        }
    };
    // One side keeps whole objects in memory: the copy goes through it.
    let limit = match &into {
        CopyTarget::Objects(b) => b.limit(),
        CopyTarget::Namespace(_) => u64::MAX,
    };
    let (data, src_meta) = match &from {
        Some(b) => {
            copy_conditions!(&b.find(&src_key).await?, input)?;
            b.read_all(&src_key, limit).await?
        }
        None => {
            let src = find(t, &src_bucket, &src_key).await?;
            copy_conditions!(&src, input)?;
            if src.size() > limit {
                return Err(s3_error!(
                    EntityTooLarge,
                    "{src_key} has {} bytes, more than bucket {} takes",
                    src.size(),
                    input.bucket
                ));
            }
            let data = t
                .client
                .read_at(&src.path, 0, src.size())
                .await
                .map_err(|e| t.fail(e, S3ErrorCode::NoSuchKey))?;
            (data, src.meta)
        }
    };
    let key = input.key.clone();
    let tags = copied_tags(&input, &src_meta)?;
    let meta = if replace {
        headers_of!(input)
    } else {
        src_meta
    };
    let meta = meta.copied(md5_etag(&Md5::checksum(&data)), tags);
    let etag = match into {
        CopyTarget::Objects(b) => b.store(&key, data, meta).await?,
        CopyTarget::Namespace(path) => {
            let body = StreamingBlob::from(s3s::Body::from(data));
            let (staged, _) = stage(t, body, ChecksumHasher::default()).await?;
            commit(t, &staged, &path, &meta).await?;
            meta.etag
        }
    };
    Ok(copied(etag, crate::time::now()))
}

/// The tags of a copy of an object whose metadata is `src`.
fn copied_tags(input: &CopyObjectInput, src: &ObjectMeta) -> S3Result<crate::tagging::Tags> {
    crate::tagging::of_copy(
        input.tagging_directive.as_ref(),
        input.tagging.as_deref(),
        src.tags.clone(),
    )
}

/// Where a copy goes.
enum CopyTarget {
    Objects(std::sync::Arc<crate::object_buckets::ObjectBucket>),
    Namespace(String),
}

fn copied(etag: String, when: Timestamp) -> CopyObjectOutput {
    CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(ETag::Strong(etag)),
            last_modified: Some(when),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A copy between buckets of the namespace, streamed through the gateway.
async fn copy_in_namespace(
    t: &Tenant,
    src_bucket: &str,
    src_key: &str,
    replace: bool,
    input: CopyObjectInput,
) -> S3Result<CopyObjectOutput> {
    let src = find(t, src_bucket, src_key).await?;
    copy_conditions!(&src, input)?;
    buckets::owned(t, &input.bucket).await?;
    let path = object_path(&input.bucket, &input.key)?;
    let tags = copied_tags(&input, &src.meta)?;
    let meta = if replace {
        headers_of!(input)
    } else {
        src.meta.clone()
    };
    if src.file.kind == FileKind::Dir {
        put_folder(t, &path, None).await?;
        return Ok(copied(src.meta.etag, crate::time::now()));
    }
    let body = read_body(t, &src.path, 0, src.file.size).await?;
    let (staged, written) = stage(t, body, ChecksumHasher::default()).await?;
    let meta = meta.copied(md5_etag(&written.md5), tags);
    let file = commit(t, &staged, &path, &meta).await?;
    Ok(copied(meta.etag, timestamp(file.mtime)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_md5_is_base64() {
        let md5 = Md5::checksum(b"hello");
        // base64 of the MD5 of "hello", as a client sends it.
        assert_eq!(base64_md5("XUFAKrxLKna5cZ2REBfFkg=="), Some(md5));
        assert_eq!(base64_md5("not base64!"), None);
        assert_eq!(base64_md5("AAAA"), None);
    }

    #[test]
    fn ranges_of_an_empty_object_are_invalid() {
        // Found by labios-fuzz (target gateway): `Range: bytes=-5` on an
        // empty object overflowed computing its Content-Range.
        let suffix = Range::parse("bytes=-5").unwrap();
        let e = range_of(Some(&suffix), 0).unwrap_err();
        assert_eq!(*e.code(), S3ErrorCode::InvalidRange);
        assert_eq!(
            range_of(Some(&suffix), 100).unwrap(),
            (95..100, Some("bytes 95-99/100".to_string()))
        );
        assert_eq!(range_of(None, 0).unwrap(), (0..0, None));
    }
}
