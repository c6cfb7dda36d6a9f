//! Buckets are the top-level directories of the namespace, and belong to
//! the application that created them (with `CreateBucket`, `labios run --
//! mkdir /labios/b` or any write under `/b`). Only the owner sees and uses a
//! bucket; anyone else gets AccessDenied.

use crate::names::{bucket_path, is_bucket_name};
use crate::object_buckets::ObjectBucket;
use crate::tenants::Tenant;
use crate::time::timestamp;
use labios_label::Error;
use labios_store::{FileKind, FileMeta};
use s3s::dto::{Bucket, ListBucketsInput, ListBucketsOutput};
use s3s::{s3_error, S3ErrorCode, S3Result};
use std::sync::Arc;

/// The object bucket `bucket` (declared in `[s3.buckets]`), if it is one
/// and `t` owns it; another application's is AccessDenied.
pub fn object_bucket(t: &Tenant, bucket: &str) -> S3Result<Option<Arc<ObjectBucket>>> {
    match t.objects.get(bucket) {
        Some(b) => {
            b.check(t)?;
            Ok(Some(b.clone()))
        }
        None => Ok(None),
    }
}

/// Whether `t` may use `bucket`, of either kind.
pub async fn usable(t: &Tenant, bucket: &str) -> S3Result<()> {
    if object_bucket(t, bucket)?.is_none() {
        owned(t, bucket).await?;
    }
    Ok(())
}

/// The directory of `bucket` if `t` owns it.
pub async fn owned(t: &Tenant, bucket: &str) -> S3Result<FileMeta> {
    match lookup(t, &bucket_path(bucket)).await? {
        Some(m) if m.kind == FileKind::Dir && m.owner == t.app => Ok(m),
        Some(m) if m.kind == FileKind::Dir => Err(s3_error!(
            AccessDenied,
            "bucket {bucket} belongs to another application"
        )),
        _ => Err(s3_error!(NoSuchBucket, "there is no bucket {bucket}")),
    }
}

/// The entry at `path`, if any.
pub async fn lookup(t: &Tenant, path: &str) -> S3Result<Option<FileMeta>> {
    t.client
        .catalog()
        .inventory()
        .lookup(path)
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchKey))
}

pub async fn create(t: &Tenant, bucket: &str) -> S3Result<()> {
    if let Some(b) = t.objects.get(bucket) {
        return Err(if b.owner == t.name {
            s3_error!(
                BucketAlreadyOwnedByYou,
                "bucket {bucket} is configured and yours"
            )
        } else {
            s3_error!(
                BucketAlreadyExists,
                "bucket {bucket} is configured for another application"
            )
        });
    }
    let path = bucket_path(bucket);
    match lookup(t, &path).await? {
        Some(m) if m.kind == FileKind::Dir && m.owner == t.app => Err(s3_error!(
            BucketAlreadyOwnedByYou,
            "bucket {bucket} already exists and is yours"
        )),
        Some(_) => Err(s3_error!(
            BucketAlreadyExists,
            "{path} already exists in LABIOS and belongs to another application or is a file"
        )),
        None => match t.client.mkdir(&path).await {
            Ok(_) => Ok(()),
            // Another request created it first.
            Err(Error::PermissionDenied(_)) => Err(s3_error!(BucketAlreadyExists)),
            Err(e) => Err(t.fail(e, S3ErrorCode::NoSuchBucket)),
        },
    }
}

pub async fn delete(t: &Tenant, bucket: &str) -> S3Result<()> {
    if object_bucket(t, bucket)?.is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "bucket {bucket} is declared in the configuration ([s3.buckets.{bucket}]): remove it there"
        ));
    }
    let dir = owned(t, bucket).await?;
    let inside = t
        .client
        .catalog()
        .inventory()
        .list(&format!("{}/", dir.path))
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))?;
    if !inside.is_empty() {
        return Err(s3_error!(
            BucketNotEmpty,
            "bucket {bucket} still holds {} entries",
            inside.len()
        ));
    }
    t.client
        .remove(&dir.path)
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))
}

/// S3's largest ListBuckets page.
const MAX_BUCKETS: i32 = 10_000;

/// The tenant's buckets: the top-level directories it owns whose names are
/// valid bucket names, and its object buckets, by name; a page of them
/// when the request asks for `max-buckets`.
pub async fn list(t: &Tenant, input: ListBucketsInput) -> S3Result<ListBucketsOutput> {
    let max = match input.max_buckets {
        Some(n) if !(1..=MAX_BUCKETS).contains(&n) => {
            return Err(s3_error!(
                InvalidArgument,
                "max-buckets must be between 1 and {MAX_BUCKETS}, not {n}"
            ))
        }
        Some(n) => n as usize,
        None => usize::MAX,
    };
    let after = input
        .continuation_token
        .as_deref()
        .map(crate::listing::untoken)
        .transpose()?;
    let all = t
        .client
        .catalog()
        .inventory()
        .list("/")
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))?;
    let mut buckets: Vec<Bucket> = all
        .into_iter()
        .filter(|m| m.kind == FileKind::Dir && m.owner == t.app)
        .filter_map(|m| {
            let name = m.path.strip_prefix('/')?;
            (is_bucket_name(name) && t.objects.get(name).is_none()).then(|| Bucket {
                name: Some(name.to_string()),
                creation_date: Some(timestamp(m.ctime)),
                bucket_region: None,
            })
        })
        .collect();
    buckets.extend(
        t.objects
            .all()
            .filter(|b| b.owner == t.name)
            .map(|b| b.bucket()),
    );
    let prefix = input.prefix.unwrap_or_default();
    buckets.retain(|b| {
        let name = b.name.as_deref().unwrap_or_default();
        name.starts_with(&prefix) && after.as_deref().is_none_or(|a| name > a)
    });
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    let more = buckets.len() > max;
    buckets.truncate(max);
    let next = more
        .then(|| {
            buckets
                .last()
                .and_then(|b| b.name.as_deref())
                .map(crate::listing::token)
        })
        .flatten();
    Ok(ListBucketsOutput {
        buckets: Some(buckets),
        continuation_token: next,
        prefix: (!prefix.is_empty()).then_some(prefix),
        ..Default::default()
    })
}
