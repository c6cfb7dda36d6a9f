//! Multipart uploads. An upload is a directory under [`UPLOADS`] owned by
//! the application, its target and metadata kept as attributes and each
//! part a file; so uploads survive a restart of the gateway and can be
//! resumed from another gateway process. Completing one copies the parts
//! into a staged file that replaces the key in one rename, as a PUT; the
//! copies are labels that move the bytes from worker to worker, so a
//! completion sends none of them through the gateway.

use crate::buckets::{self, lookup};
use crate::metadata::{multipart_etag, parse_md5, ObjectMeta};
use crate::names::{fresh_id, object_path, UPLOADS};
use crate::objects::{commit, copy_into, discard, stage};
use crate::streams::read_body;
use crate::tenants::Tenant;
use crate::time::timestamp;
use bytes::Bytes;
use futures::{stream, StreamExt, TryStreamExt};
use labios_store::{FileKind, FileMeta};
use s3s::checksum::ChecksumHasher;
use s3s::dto::*;
use s3s::{s3_error, S3ErrorCode, S3Result};

const BUCKET: &str = "s3.upload.bucket";
const KEY: &str = "s3.upload.key";
/// S3's limits on part numbers and on parts listed per page.
const MAX_PART: i32 = 10_000;
const MAX_PARTS_LISTED: usize = 1000;
/// S3's smallest part, but for the last.
const MIN_PART_SIZE: u64 = 5 << 20;
/// Parts a completion copies side by side: each copy holds its labels'
/// bytes in the warehouse, so this bounds a completion's share of it.
const PARTS_COPIED_AT_ONCE: usize = 4;

struct Upload {
    dir: FileMeta,
    bucket: String,
    key: String,
    meta: ObjectMeta,
}

pub fn upload_dir(id: &str) -> S3Result<String> {
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(format!("{UPLOADS}/{id}"))
    } else {
        Err(s3_error!(
            NoSuchUpload,
            "{id:?} is not an upload id of this gateway"
        ))
    }
}

pub fn part_path(dir: &str, number: i32) -> S3Result<String> {
    if (1..=MAX_PART).contains(&number) {
        Ok(format!("{dir}/{number:05}"))
    } else {
        Err(s3_error!(
            InvalidArgument,
            "part number {number} is outside 1..={MAX_PART}"
        ))
    }
}

fn text(xattrs: &[(String, Bytes)], name: &str) -> String {
    xattrs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default()
}

/// The upload `id` of `t`, for `bucket`/`key`.
async fn open(t: &Tenant, bucket: &str, key: &str, id: &str) -> S3Result<Upload> {
    buckets::usable(t, bucket).await?;
    let path = upload_dir(id)?;
    let missing = || {
        s3_error!(
            NoSuchUpload,
            "there is no upload {id} of {key:?} in bucket {bucket}"
        )
    };
    let dir = lookup(t, &path).await?.ok_or_else(missing)?;
    if dir.kind != FileKind::Dir {
        return Err(missing());
    }
    if dir.owner != t.app {
        return Err(s3_error!(
            AccessDenied,
            "upload {id} belongs to another application"
        ));
    }
    let xattrs = t.xattrs(dir.id, S3ErrorCode::NoSuchUpload).await?;
    let upload = Upload {
        meta: ObjectMeta::from_xattrs(&dir, &xattrs),
        bucket: text(&xattrs, BUCKET),
        key: text(&xattrs, KEY),
        dir,
    };
    if upload.bucket != bucket || upload.key != key {
        return Err(missing());
    }
    Ok(upload)
}

pub async fn create(
    t: &Tenant,
    input: CreateMultipartUploadInput,
) -> S3Result<CreateMultipartUploadOutput> {
    match buckets::object_bucket(t, &input.bucket)? {
        Some(b) => b.check_key(&input.key)?,
        None => {
            buckets::owned(t, &input.bucket).await?;
            object_path(&input.bucket, &input.key)?;
        }
    }
    if input.key.ends_with('/') {
        return Err(s3_error!(
            InvalidArgument,
            "a folder key (ending in /) takes no data"
        ));
    }
    let id = fresh_id();
    let path = upload_dir(&id)?;
    let fail = |e| t.fail(e, S3ErrorCode::NoSuchUpload);
    let dir = t.client.mkdir(&path).await.map_err(fail)?;
    let meta = headers_of!(input);
    let mut xattrs = meta.to_xattrs(0, 0);
    xattrs.push((BUCKET.into(), Bytes::from(input.bucket.clone())));
    xattrs.push((KEY.into(), Bytes::from(input.key.clone())));
    let inventory = t.client.catalog().inventory();
    for (name, value) in xattrs {
        inventory
            .set_xattr(dir.id, &name, Some(value))
            .await
            .map_err(fail)?;
    }
    Ok(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        checksum_algorithm: input.checksum_algorithm,
        upload_id: Some(id),
        ..Default::default()
    })
}

pub async fn upload_part(t: &Tenant, input: UploadPartInput) -> S3Result<UploadPartOutput> {
    let upload = open(t, &input.bucket, &input.key, &input.upload_id).await?;
    let part = part_path(&upload.dir.path, input.part_number)?;
    let body = input
        .body
        .ok_or_else(|| s3_error!(IncompleteBody, "UploadPart without a body"))?;
    let (staged, written) = stage(t, body, ChecksumHasher::default()).await?;
    if let Some(md5) = &input.content_md5 {
        let sent = base64_simd::STANDARD.decode_to_vec(md5).ok();
        if sent.as_deref() != Some(written.md5.as_slice()) {
            discard(t, &staged).await;
            return Err(s3_error!(BadDigest, "Content-MD5 does not match the part"));
        }
    }
    let meta = ObjectMeta {
        etag: crate::metadata::md5_etag(&written.md5),
        ..ObjectMeta::default()
    };
    commit(t, &staged, &part, &meta).await?;
    Ok(UploadPartOutput {
        e_tag: Some(ETag::Strong(meta.etag)),
        ..Default::default()
    })
}

/// A part copied from a range of another object (or all of it), of
/// either kind of bucket, streamed through the gateway like a PUT.
pub async fn upload_part_copy(
    t: &Tenant,
    input: UploadPartCopyInput,
) -> S3Result<UploadPartCopyOutput> {
    let upload = open(t, &input.bucket, &input.key, &input.upload_id).await?;
    let part = part_path(&upload.dir.path, input.part_number)?;
    let (src_bucket, src_key) = crate::objects::source_of(&input.copy_source)?;
    let src = crate::objects::find_any(t, &src_bucket, &src_key).await?;
    copy_conditions!(&src, input)?;
    let size = src.size();
    let range = match input.copy_source_range.as_deref() {
        Some(text) => copied_range(text, size)?,
        None => 0..size,
    };
    let body = match buckets::object_bucket(t, &src_bucket)? {
        Some(b) => b.read_range(&src_key, range.start, range.end).await?,
        None => read_body(t, &src.path, range.start, range.end).await?,
    };
    let (staged, written) = stage(t, body, ChecksumHasher::default()).await?;
    let meta = ObjectMeta {
        etag: crate::metadata::md5_etag(&written.md5),
        ..ObjectMeta::default()
    };
    let file = commit(t, &staged, &part, &meta).await?;
    Ok(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(ETag::Strong(meta.etag)),
            last_modified: Some(timestamp(file.mtime)),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The bytes `x-amz-copy-source-range` names in a source of `size` bytes:
/// S3 takes only the form `bytes=FIRST-LAST`, inside the object.
pub fn copied_range(text: &str, size: u64) -> S3Result<std::ops::Range<u64>> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "x-amz-copy-source-range {text:?} must be bytes=FIRST-LAST within the source's {size} bytes"
        )
    };
    let (first, last) = text
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let (first, last): (u64, u64) = (
        first.parse().map_err(|_| bad())?,
        last.parse().map_err(|_| bad())?,
    );
    if first > last || last >= size {
        return Err(if first <= last {
            s3_error!(
                InvalidRange,
                "x-amz-copy-source-range {text:?} ends past the source's {size} bytes"
            )
        } else {
            bad()
        });
    }
    Ok(first..last + 1)
}

/// The stored parts of an upload, by part number.
async fn parts(t: &Tenant, upload: &Upload) -> S3Result<Vec<(i32, FileMeta, ObjectMeta)>> {
    let inventory = t.client.catalog().inventory();
    let files = inventory
        .list(&format!("{}/", upload.dir.path))
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchUpload))?;
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let Some(number) = f.path.rsplit('/').next().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let xattrs = t.xattrs(f.id, S3ErrorCode::NoSuchUpload).await?;
        let meta = ObjectMeta::from_xattrs(&f, &xattrs);
        out.push((number, f, meta));
    }
    Ok(out)
}

/// Removes the upload's parts and directory.
async fn remove(t: &Tenant, upload: &Upload) -> S3Result<()> {
    for (_, f, _) in parts(t, upload).await? {
        t.client
            .remove(&f.path)
            .await
            .map_err(|e| t.fail(e, S3ErrorCode::NoSuchUpload))?;
    }
    t.client
        .remove(&upload.dir.path)
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchUpload))
}

/// The ETag of `key` if upload `id` made it and it has not changed since.
async fn completed(t: &Tenant, bucket: &str, key: &str, id: &str) -> S3Result<Option<String>> {
    let found = match buckets::object_bucket(t, bucket)? {
        Some(b) => b.find(key).await,
        None => crate::objects::find(t, bucket, key).await,
    };
    match found {
        Ok(f) => Ok((f.meta.upload.as_deref() == Some(id)).then_some(f.meta.etag)),
        Err(e) if *e.code() == S3ErrorCode::NoSuchKey => Ok(None),
        Err(e) => Err(e),
    }
}

fn completion(bucket: String, key: String, etag: String) -> CompleteMultipartUploadOutput {
    CompleteMultipartUploadOutput {
        bucket: Some(bucket),
        key: Some(key),
        e_tag: Some(ETag::Strong(etag)),
        ..Default::default()
    }
}

/// Completes an upload; completing it again, as a client does whose first
/// answer was lost, answers as the first time did while the object is
/// unchanged (S3's own behaviour).
pub async fn complete(
    t: &Tenant,
    input: CompleteMultipartUploadInput,
) -> S3Result<CompleteMultipartUploadOutput> {
    let upload = match open(t, &input.bucket, &input.key, &input.upload_id).await {
        Ok(upload) => upload,
        Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => {
            return match completed(t, &input.bucket, &input.key, &input.upload_id).await? {
                Some(etag) => Ok(completion(input.bucket, input.key, etag)),
                None => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let asked = input
        .multipart_upload
        .and_then(|m| m.parts)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| s3_error!(InvalidRequest, "CompleteMultipartUpload names no parts"))?;
    let stored = parts(t, &upload).await?;
    let chosen = choose_parts(&asked, &stored)?;
    let md5s: Vec<[u8; 16]> = chosen.iter().map(|(_, m)| *m).collect();
    let meta = ObjectMeta {
        etag: multipart_etag(&md5s),
        upload: Some(input.upload_id.clone()),
        parts: chosen.iter().map(|(f, _)| f.size).collect(),
        ..upload.meta.clone()
    };
    match buckets::object_bucket(t, &input.bucket)? {
        Some(b) => {
            let size: u64 = chosen.iter().map(|(f, _)| f.size).sum();
            if size > b.limit() {
                return Err(s3_error!(
                    EntityTooLarge,
                    "the parts add up to {size} bytes; objects of bucket {} are limited to {}",
                    input.bucket,
                    b.limit()
                ));
            }
            let mut whole = bytes::BytesMut::with_capacity(size as usize);
            for (file, _) in &chosen {
                let data = t
                    .client
                    .read_at(&file.path, 0, file.size)
                    .await
                    .map_err(|e| t.fail(e, S3ErrorCode::NoSuchUpload))?;
                whole.extend_from_slice(&data);
            }
            b.store(&input.key, whole.freeze(), meta.clone()).await?;
        }
        None => {
            let path = object_path(&input.bucket, &input.key)?;
            concatenate(t, &chosen, &path, &meta).await?;
        }
    }
    remove(t, &upload).await?;
    Ok(completion(input.bucket, input.key, meta.etag))
}

/// The stored parts a CompleteMultipartUpload request lists, with their
/// MD5s: in strictly ascending order, each uploaded, with the ETag it was
/// given if the request names one, each but the last at least
/// [`MIN_PART_SIZE`] bytes.
pub fn choose_parts(
    asked: &[CompletedPart],
    stored: &[(i32, FileMeta, ObjectMeta)],
) -> S3Result<Vec<(FileMeta, [u8; 16])>> {
    let mut chosen = Vec::with_capacity(asked.len());
    let mut previous = 0;
    for p in asked {
        let number = p.part_number.unwrap_or(0);
        if number <= previous {
            return Err(s3_error!(
                InvalidPartOrder,
                "part {number} follows part {previous}: parts must be listed in ascending order"
            ));
        }
        previous = number;
        let (_, file, meta) = stored
            .iter()
            .find(|(n, _, _)| *n == number)
            .ok_or_else(|| s3_error!(InvalidPart, "part {number} was not uploaded"))?;
        let sent = p.e_tag.as_ref().map(|e| e.value().trim_matches('"'));
        if sent.is_some_and(|e| e != meta.etag) {
            return Err(s3_error!(
                InvalidPart,
                "part {number} has ETag {}, not {}",
                meta.etag,
                sent.unwrap_or_default()
            ));
        }
        let md5 = parse_md5(&meta.etag)
            .ok_or_else(|| s3_error!(InvalidPart, "part {number} changed after its upload"))?;
        chosen.push((file.clone(), md5));
    }
    if let Some((small, _)) = chosen[..chosen.len().saturating_sub(1)]
        .iter()
        .find(|(f, _)| f.size < MIN_PART_SIZE)
    {
        return Err(s3_error!(
            EntityTooSmall,
            "part {} has {} bytes; every part but the last needs at least {MIN_PART_SIZE}",
            small
                .path
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .trim_start_matches('0'),
            small.size
        ));
    }
    Ok(chosen)
}

/// The parts, in order, into a staged file renamed over `path`.
async fn concatenate(
    t: &Tenant,
    chosen: &[(FileMeta, [u8; 16])],
    path: &str,
    meta: &ObjectMeta,
) -> S3Result<()> {
    let empty = StreamingBlob::from(s3s::Body::empty());
    let (staged, _) = stage(t, empty, ChecksumHasher::default()).await?;
    let mut pieces = Vec::with_capacity(chosen.len());
    let mut start = 0;
    for (file, _) in chosen {
        pieces.push((file.path.clone(), start, file.size));
        start += file.size;
    }
    let staged = &staged;
    let copied = stream::iter(pieces)
        .map(|(part, start, size)| async move { copy_into(t, &part, staged, start, size).await })
        .buffer_unordered(PARTS_COPIED_AT_ONCE)
        .try_collect::<()>()
        .await;
    if let Err(e) = copied {
        discard(t, staged).await;
        return Err(e);
    }
    commit(t, staged, path, meta).await?;
    Ok(())
}

pub async fn abort(t: &Tenant, input: AbortMultipartUploadInput) -> S3Result<()> {
    let upload = open(t, &input.bucket, &input.key, &input.upload_id).await?;
    remove(t, &upload).await
}

pub async fn list_parts(t: &Tenant, input: ListPartsInput) -> S3Result<ListPartsOutput> {
    let upload = open(t, &input.bucket, &input.key, &input.upload_id).await?;
    let after = input.part_number_marker.unwrap_or(0);
    let max = input.max_parts.map_or(MAX_PARTS_LISTED, |m| {
        (m.max(0) as usize).min(MAX_PARTS_LISTED)
    });
    let mut all: Vec<_> = parts(t, &upload)
        .await?
        .into_iter()
        .filter(|(n, _, _)| *n > after)
        .collect();
    all.sort_by_key(|(n, _, _)| *n);
    let truncated = all.len() > max;
    all.truncate(max);
    let next = all.last().map(|(n, _, _)| *n);
    Ok(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: next,
        max_parts: Some(max as i32),
        is_truncated: Some(truncated),
        parts: Some(
            all.into_iter()
                .map(|(n, f, m)| Part {
                    part_number: Some(n),
                    size: Some(f.size as i64),
                    e_tag: Some(ETag::Strong(m.etag)),
                    last_modified: Some(timestamp(f.mtime)),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    })
}

pub async fn list_uploads(
    t: &Tenant,
    input: ListMultipartUploadsInput,
) -> S3Result<ListMultipartUploadsOutput> {
    buckets::usable(t, &input.bucket).await?;
    let inventory = t.client.catalog().inventory();
    let dirs = inventory
        .list(&format!("{UPLOADS}/"))
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let mut uploads = Vec::new();
    for d in dirs {
        let is_upload =
            d.kind == FileKind::Dir && d.owner == t.app && d.path[UPLOADS.len() + 1..].len() == 32;
        if !is_upload {
            continue;
        }
        let xattrs = t.xattrs(d.id, S3ErrorCode::NoSuchBucket).await?;
        let key = text(&xattrs, KEY);
        if text(&xattrs, BUCKET) != input.bucket || !key.starts_with(&prefix) {
            continue;
        }
        uploads.push(MultipartUpload {
            key: Some(key),
            upload_id: Some(d.path[UPLOADS.len() + 1..].to_string()),
            initiated: Some(timestamp(d.ctime)),
            ..Default::default()
        });
    }
    uploads.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        is_truncated: Some(false),
        uploads: Some(uploads),
        ..Default::default()
    })
}
