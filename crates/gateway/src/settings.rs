//! Settings of a bucket as a whole (its tags, its CORS rules), kept with
//! the bucket so that they survive a gateway restart and go when the
//! bucket goes: extended attributes of a namespace bucket's directory, or
//! files in the folder of an object bucket's directory that no mapping
//! lists.

use crate::buckets;
use crate::tenants::Tenant;
use bytes::Bytes;
use s3s::{S3ErrorCode, S3Result};

/// One setting of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Tagging,
    Cors,
}

impl Setting {
    /// The attribute (namespace) or file name (object bucket) holding it.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Tagging => "s3.bucket.tagging",
            Setting::Cors => "s3.bucket.cors",
        }
    }
}

/// The setting's stored value, if the bucket (which `t` owns) has one.
pub async fn read(t: &Tenant, bucket: &str, s: Setting) -> S3Result<Option<Bytes>> {
    if let Some(b) = buckets::object_bucket(t, bucket)? {
        return b.setting(s).await;
    }
    let dir = buckets::owned(t, bucket).await?;
    let xattrs = t.xattrs(dir.id, S3ErrorCode::NoSuchBucket).await?;
    Ok(xattrs
        .into_iter()
        .find_map(|(name, value)| (name == s.name()).then_some(value)))
}

/// Stores (`Some`) or removes (`None`) the setting of a bucket `t` owns.
pub async fn write(t: &Tenant, bucket: &str, s: Setting, value: Option<Bytes>) -> S3Result<()> {
    if let Some(b) = buckets::object_bucket(t, bucket)? {
        return b.set_setting(s, value).await;
    }
    let dir = buckets::owned(t, bucket).await?;
    t.client
        .set_object_xattr(&dir.path, s.name(), value)
        .await
        .map_err(|e| t.fail(e, S3ErrorCode::NoSuchBucket))
}
