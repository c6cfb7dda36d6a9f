//! Tags of objects and buckets (S3 tagging): key-value pairs data users
//! put on objects to find, bill or expire them later. An object's tags are
//! part of its metadata ([`crate::metadata::ObjectMeta::tags`]), kept with
//! the file as an extended attribute or in an object bucket's sidecar, so
//! they survive a gateway restart and move with the file; a PUT or a copy
//! sets them anew, as in S3. A bucket's tags are one of its settings
//! ([`crate::settings`]).

use crate::buckets;
use crate::objects::find_any;
use crate::settings::{self, Setting};
use crate::tenants::Tenant;
use bytes::Bytes;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet};
use s3s::dto::{Tag, TagSet, Tagging, TaggingDirective};
use s3s::{s3_error, S3ErrorCode, S3Result};
use std::collections::BTreeMap;

/// Tags by key.
pub type Tags = BTreeMap<String, String>;

/// S3's limits: tags per object and per bucket, and the lengths (in
/// characters) of a key and a value.
pub const MAX_OBJECT_TAGS: usize = 10;
pub const MAX_BUCKET_TAGS: usize = 50;
const MAX_KEY: usize = 128;
const MAX_VALUE: usize = 256;

/// What the stored form (a URL query, as the `x-amz-tagging` header sends
/// it) leaves unescaped: what a listing's keys do, but for `/`.
const KEPT: &AsciiSet = &crate::listing::KEY_SET.add(b'/');

/// Checks tags as S3 does: at most `most`, keys of 1 to 128 characters
/// not starting with the reserved `aws:`, values of up to 256, each key
/// once.
fn checked(pairs: Vec<(String, String)>, most: usize) -> S3Result<Tags> {
    if pairs.len() > most {
        return Err(s3_error!(
            InvalidTag,
            "{} tags given; at most {most} are allowed",
            pairs.len()
        ));
    }
    let mut tags = Tags::new();
    for (k, v) in pairs {
        let (klen, vlen) = (k.chars().count(), v.chars().count());
        if !(1..=MAX_KEY).contains(&klen) {
            return Err(s3_error!(
                InvalidTag,
                "tag key {k:?} has {klen} characters; 1 to {MAX_KEY} are allowed"
            ));
        }
        if vlen > MAX_VALUE {
            return Err(s3_error!(
                InvalidTag,
                "the value of tag {k:?} has {vlen} characters; at most {MAX_VALUE} are allowed"
            ));
        }
        if k.starts_with("aws:") {
            return Err(s3_error!(
                InvalidTag,
                "tag key {k:?}: keys starting with aws: are reserved"
            ));
        }
        if tags.insert(k.clone(), v).is_some() {
            return Err(s3_error!(InvalidTag, "tag key {k:?} is given twice"));
        }
    }
    Ok(tags)
}

/// The tags of a request's tag set, checked.
pub fn of_set(set: TagSet, most: usize) -> S3Result<Tags> {
    let pairs = set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect();
    checked(pairs, most)
}

/// `tags` as an answer's tag set.
pub fn to_set(tags: &Tags) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// The pairs of a URL query (`k1=v1&k2=v2`); `None` if one is not UTF-8.
fn pairs_of(query: &str) -> Option<Vec<(String, String)>> {
    let decode = |s: &str| {
        percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .ok()
            .map(|s| s.into_owned())
    };
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((decode(k)?, decode(v)?))
        })
        .collect()
}

/// The tags of an `x-amz-tagging` header (PUT, copy, multipart upload),
/// checked; none without the header.
pub fn of_header(header: Option<&str>) -> S3Result<Tags> {
    let Some(header) = header else {
        return Ok(Tags::new());
    };
    let pairs = pairs_of(header).ok_or_else(|| {
        s3_error!(
            InvalidArgument,
            "x-amz-tagging {header:?} is not a URL-encoded query of UTF-8 text"
        )
    })?;
    checked(pairs, MAX_OBJECT_TAGS)
}

/// The stored form of `tags`, the query an `x-amz-tagging` header sends.
pub fn to_query(tags: &Tags) -> String {
    tags.iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, KEPT),
                utf8_percent_encode(v, KEPT)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The tags of a stored query (as written by [`to_query`]; anything else
/// reads as no tags).
pub fn of_query(query: &str) -> Tags {
    pairs_of(query).unwrap_or_default().into_iter().collect()
}

/// The tags a copy gives its destination: the source's, or with
/// `x-amz-tagging-directive: REPLACE` those of the request.
pub fn of_copy(
    directive: Option<&TaggingDirective>,
    header: Option<&str>,
    source: Tags,
) -> S3Result<Tags> {
    match directive {
        Some(d) if d.as_str() == TaggingDirective::REPLACE => of_header(header),
        _ => Ok(source),
    }
}

/// The tags of object `key`.
pub async fn of_object(t: &Tenant, bucket: &str, key: &str) -> S3Result<TagSet> {
    Ok(to_set(&find_any(t, bucket, key).await?.meta.tags))
}

/// Replaces the tags of object `key` (none: removes them).
pub async fn set_object(t: &Tenant, bucket: &str, key: &str, tags: Tags) -> S3Result<()> {
    match buckets::object_bucket(t, bucket)? {
        Some(b) => b.retag(key, tags).await,
        None => {
            let found = crate::objects::find(t, bucket, key).await?;
            let value = (!tags.is_empty()).then(|| Bytes::from(to_query(&tags)));
            t.client
                .set_object_xattr(&found.path, crate::metadata::TAGGING, value)
                .await
                .map_err(|e| t.fail(e, S3ErrorCode::NoSuchKey))
        }
    }
}

/// The tags of a bucket; S3 answers `NoSuchTagSet` for a bucket without.
pub async fn of_bucket(t: &Tenant, bucket: &str) -> S3Result<TagSet> {
    match settings::read(t, bucket, Setting::Tagging).await? {
        Some(query) => Ok(to_set(&of_query(&String::from_utf8_lossy(&query)))),
        None => Err(s3_error!(NoSuchTagSet, "bucket {bucket} has no tags")),
    }
}

/// Replaces the tags of a bucket (none: removes them).
pub async fn set_bucket(t: &Tenant, bucket: &str, tagging: Option<Tagging>) -> S3Result<()> {
    let value = match tagging {
        Some(tagging) => {
            let tags = of_set(tagging.tag_set, MAX_BUCKET_TAGS)?;
            (!tags.is_empty()).then(|| Bytes::from(to_query(&tags)))
        }
        None => None,
    };
    settings::write(t, bucket, Setting::Tagging, value).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_survive_their_stored_form() {
        let tags: Tags = [
            ("project".to_string(), "climate run 7".to_string()),
            ("a&b=c".to_string(), "é/%+".to_string()),
            ("empty".to_string(), String::new()),
        ]
        .into();
        assert_eq!(of_query(&to_query(&tags)), tags);
        assert_eq!(of_header(Some(&to_query(&tags))).unwrap(), tags);
    }

    #[test]
    fn bad_tags_are_refused_naming_what_is_wrong() {
        let err = |h: &str| {
            of_header(Some(h))
                .unwrap_err()
                .message()
                .unwrap()
                .to_string()
        };
        assert!(err("k=1&k=2").contains("given twice"));
        assert!(err("=v").contains("1 to 128"));
        assert!(err(&format!("k={}", "v".repeat(257))).contains("at most 256"));
        assert!(err("aws%3Aname=v").contains("reserved"));
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        assert!(err(&eleven.join("&")).contains("at most 10"));
        assert!(err("k=%FF").contains("UTF-8"));
        assert_eq!(of_header(None).unwrap(), Tags::new());
    }
}
