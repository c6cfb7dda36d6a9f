//! The S3-compatible face of LABIOS (IRIS, objectives A and B): the LABIOS
//! namespace served over the S3 REST API, so that data-analytics programs
//! (boto3, the aws CLI, rclone, pandas through s3fs) and HPC programs (POSIX
//! under `labios run`) share one copy of the data instead of copying it
//! between a file system and an object store.
//!
//! Buckets are top-level directories and objects are files
//! ([`names`]); an object's S3 metadata is kept as extended attributes of
//! its file ([`metadata`]). Requests are authenticated with SigV4 against
//! the tenant registry and run as that application's LABIOS client
//! ([`tenants`]), so a tenant reaches exactly what it could reach through
//! any other interface. The protocol itself is s3s's; this crate maps its
//! operations onto LABIOS.

mod buckets;
mod cors;
mod edge;
mod errors;
mod listing;
#[macro_use]
mod metadata;
#[macro_use]
mod objects;
mod multipart;
mod names;
mod object_buckets;
mod settings;
mod streams;
mod tagging;
mod tenants;
mod time;

pub use names::{STAGING, UPLOADS};
pub use object_buckets::{ObjectBucketConfig, ObjectBuckets, SIDECAR};
pub use tenants::Tenants;

/// The gateway's own parsers of request input (keys, ranges, conditions,
/// continuation tokens, listings, multipart uploads), public only for the
/// fuzz targets of `labios-fuzz`; not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::listing::{paginate, token, untoken, Paged, Query};
    pub use crate::metadata::{parse_md5, ObjectMeta};
    pub use crate::multipart::{choose_parts, part_path, upload_dir};
    pub use crate::names::{is_bucket_name, key_of, object_path};
    pub use crate::objects::{check_conditions, range_of, Found};
}

use async_trait::async_trait;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use listing::{encode, token, untoken, Query};
use s3s::dto::*;
use s3s::service::S3ServiceBuilder;
use s3s::{S3Request, S3Response, S3Result, S3};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tenants::{Auth, Directory, Tenant};
use tokio::net::TcpListener;

/// The version id S3 gives every object of a bucket that was never
/// versioned.
const NULL_VERSION: &str = "null";

/// How long open connections may take to finish their requests once the
/// gateway is asked to stop.
const DRAIN: Duration = Duration::from_secs(10);

/// The S3 operations over LABIOS.
pub struct Gateway {
    directory: Arc<Directory>,
}

impl Gateway {
    /// The hyper service answering S3 requests for the applications of
    /// `tenants`, with the namespace's buckets and the configured `objects`.
    pub fn service(tenants: Arc<dyn Tenants>, objects: ObjectBuckets) -> Service {
        let directory = Directory::new(tenants, Arc::new(objects));
        let mut builder = S3ServiceBuilder::new(Gateway {
            directory: directory.clone(),
        });
        builder.set_auth(Auth(directory.clone()));
        Service(edge::Edge {
            s3: builder.build(),
            directory,
        })
    }

    async fn tenant<T>(&self, req: &S3Request<T>) -> S3Result<Tenant> {
        self.directory.tenant(req.credentials.as_ref()).await
    }
}

/// The gateway's HTTP service: s3s's, inside the gateway's own handling
/// of each exchange ([`edge`]).
#[derive(Clone)]
pub struct Service(edge::Edge);

/// Serves S3 on `listener` until `stop` completes, then lets open requests
/// finish for a while.
pub async fn serve(
    listener: TcpListener,
    service: Service,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let http = ConnBuilder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let socket = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(e) => {
                    tracing::warn!("labios s3: accept: {e}");
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = socket.set_nodelay(true);
        let conn = http.serve_connection(TokioIo::new(socket), service.0.clone());
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("labios s3: connection: {e}");
            }
        });
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN) => tracing::warn!("labios s3: closing connections still busy after {DRAIN:?}"),
    }
    Ok(())
}

fn ok<T>(output: T) -> S3Result<S3Response<T>> {
    Ok(S3Response::new(output))
}

/// One page of a listing operation whose input `i` (ListObjectsV2,
/// ListObjects, ListObjectVersions name their fields alike) asks for the
/// keys after `after`: whether keys are URL-encoded, the prefix, the page.
macro_rules! listed {
    ($t:expr, $i:expr, $after:expr, $fetch_owner:expr) => {{
        let url_encoded = $i
            .encoding_type
            .as_ref()
            .is_some_and(|e| e.as_str() == EncodingType::URL);
        let prefix = $i.prefix.clone().unwrap_or_default();
        let query = Query {
            bucket: &$i.bucket,
            prefix: &prefix,
            delimiter: $i.delimiter.as_deref(),
            after: $after,
            max_keys: $i.max_keys,
            url_encoded,
            fetch_owner: $fetch_owner,
        };
        let page = listing::page(&$t, &query).await?;
        (url_encoded, prefix, page)
    }};
}

/// A listing's delimiter as its answer repeats it: an empty one is none.
fn echoed(delimiter: Option<String>, url_encoded: bool) -> Option<String> {
    delimiter
        .filter(|d| !d.is_empty())
        .map(|d| encode(url_encoded, &d))
}

#[async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        ok(buckets::list(&self.tenant(&req).await?, req.input).await?)
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let t = self.tenant(&req).await?;
        buckets::create(&t, &req.input.bucket).await?;
        ok(CreateBucketOutput {
            location: Some(format!("/{}", req.input.bucket)),
        })
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let t = self.tenant(&req).await?;
        buckets::delete(&t, &req.input.bucket).await?;
        ok(DeleteBucketOutput::default())
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let t = self.tenant(&req).await?;
        buckets::usable(&t, &req.input.bucket).await?;
        ok(HeadBucketOutput::default())
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let t = self.tenant(&req).await?;
        buckets::usable(&t, &req.input.bucket).await?;
        ok(GetBucketLocationOutput::default())
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        metadata::no_hints(req.input.metadata.as_ref())?;
        let t = self.tenant(&req).await?;
        let trailers = req.trailing_headers.as_ref();
        match buckets::object_bucket(&t, &req.input.bucket)? {
            Some(b) => ok(b.put(req.input, trailers).await?),
            None => ok(objects::put(&t, req.input, trailers).await?),
        }
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let t = self.tenant(&req).await?;
        match buckets::object_bucket(&t, &req.input.bucket)? {
            Some(b) => ok(b.get(req.input).await?),
            None => ok(objects::get(&t, req.input).await?),
        }
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let t = self.tenant(&req).await?;
        match buckets::object_bucket(&t, &req.input.bucket)? {
            Some(b) => ok(b.head(req.input).await?),
            None => ok(objects::head(&t, req.input).await?),
        }
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let t = self.tenant(&req).await?;
        objects::delete_any(&t, &req.input.bucket, &req.input.key).await?;
        ok(DeleteObjectOutput::default())
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let t = self.tenant(&req).await?;
        ok(objects::delete_many(&t, req.input).await?)
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        metadata::no_hints(req.input.metadata.as_ref())?;
        let t = self.tenant(&req).await?;
        ok(objects::copy(&t, req.input).await?)
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let t = self.tenant(&req).await?;
        let i = req.input;
        let after = match &i.continuation_token {
            Some(tok) => Some(untoken(tok)?),
            None => i.start_after.clone(),
        };
        let (url_encoded, prefix, page) = listed!(t, i, after, i.fetch_owner.unwrap_or(false));
        let key_count = (page.contents.len() + page.prefixes.len()) as i32;
        ok(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: Some(encode(url_encoded, &prefix)),
            delimiter: echoed(i.delimiter, url_encoded),
            start_after: i.start_after.map(|s| encode(url_encoded, &s)),
            max_keys: Some(i.max_keys.unwrap_or(1000)),
            encoding_type: i.encoding_type,
            continuation_token: i.continuation_token,
            next_continuation_token: page
                .truncated
                .then(|| page.last.as_deref().map(token))
                .flatten(),
            is_truncated: Some(page.truncated),
            key_count: Some(key_count),
            contents: Some(page.contents),
            common_prefixes: Some(page.prefixes),
            ..Default::default()
        })
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let t = self.tenant(&req).await?;
        let i = req.input;
        let after = i.marker.clone().filter(|m| !m.is_empty());
        let (url_encoded, prefix, page) = listed!(t, i, after, true);
        ok(ListObjectsOutput {
            name: Some(i.bucket),
            prefix: Some(encode(url_encoded, &prefix)),
            delimiter: echoed(i.delimiter, url_encoded),
            // ListObjects always names its marker, empty when none.
            marker: Some(encode(url_encoded, &i.marker.unwrap_or_default())),
            max_keys: Some(i.max_keys.unwrap_or(1000)),
            encoding_type: i.encoding_type,
            next_marker: page
                .truncated
                .then(|| page.last.as_deref().map(|l| encode(url_encoded, l)))
                .flatten(),
            is_truncated: Some(page.truncated),
            contents: Some(page.contents),
            common_prefixes: Some(page.prefixes),
            ..Default::default()
        })
    }

    /// No bucket of LABIOS has ever been versioned: S3 answers such a
    /// bucket's versioning with no status.
    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let t = self.tenant(&req).await?;
        buckets::usable(&t, &req.input.bucket).await?;
        ok(GetBucketVersioningOutput::default())
    }

    /// Every object of an unversioned bucket is its one version, `null`,
    /// as S3 lists them (tools empty a bucket by this listing). The key
    /// marker alone says where a page starts.
    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let t = self.tenant(&req).await?;
        let i = req.input;
        let after = i.key_marker.clone().filter(|m| !m.is_empty());
        let (url_encoded, prefix, page) = listed!(t, i, after, true);
        let versions = page
            .contents
            .into_iter()
            .map(|o| ObjectVersion {
                e_tag: o.e_tag,
                is_latest: Some(true),
                key: o.key,
                last_modified: o.last_modified,
                owner: o.owner,
                size: o.size,
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                version_id: Some(NULL_VERSION.into()),
                ..Default::default()
            })
            .collect();
        let next = page
            .truncated
            .then(|| page.last.as_deref().map(|l| encode(url_encoded, l)))
            .flatten();
        ok(ListObjectVersionsOutput {
            name: Some(i.bucket),
            prefix: Some(encode(url_encoded, &prefix)),
            delimiter: echoed(i.delimiter, url_encoded),
            key_marker: Some(encode(url_encoded, &i.key_marker.unwrap_or_default())),
            version_id_marker: i.version_id_marker,
            max_keys: Some(i.max_keys.unwrap_or(1000)),
            encoding_type: i.encoding_type,
            is_truncated: Some(page.truncated),
            next_version_id_marker: next.as_ref().map(|_| NULL_VERSION.into()),
            next_key_marker: next,
            versions: Some(versions),
            common_prefixes: Some(page.prefixes),
            ..Default::default()
        })
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let t = self.tenant(&req).await?;
        let tag_set = tagging::of_object(&t, &req.input.bucket, &req.input.key).await?;
        ok(GetObjectTaggingOutput {
            tag_set,
            version_id: None,
        })
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let t = self.tenant(&req).await?;
        let i = req.input;
        let tags = tagging::of_set(i.tagging.tag_set, tagging::MAX_OBJECT_TAGS)?;
        tagging::set_object(&t, &i.bucket, &i.key, tags).await?;
        ok(PutObjectTaggingOutput::default())
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let t = self.tenant(&req).await?;
        let i = req.input;
        tagging::set_object(&t, &i.bucket, &i.key, Default::default()).await?;
        ok(DeleteObjectTaggingOutput::default())
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let t = self.tenant(&req).await?;
        let tag_set = tagging::of_bucket(&t, &req.input.bucket).await?;
        ok(GetBucketTaggingOutput { tag_set })
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let t = self.tenant(&req).await?;
        tagging::set_bucket(&t, &req.input.bucket, Some(req.input.tagging)).await?;
        ok(PutBucketTaggingOutput::default())
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let t = self.tenant(&req).await?;
        tagging::set_bucket(&t, &req.input.bucket, None).await?;
        ok(DeleteBucketTaggingOutput::default())
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let t = self.tenant(&req).await?;
        ok(objects::attributes(&t, req.input).await?)
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let t = self.tenant(&req).await?;
        ok(multipart::upload_part_copy(&t, req.input).await?)
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        let t = self.tenant(&req).await?;
        ok(cors::get(&t, &req.input.bucket).await?)
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        let t = self.tenant(&req).await?;
        let i = req.input;
        cors::set(&t, &i.bucket, Some(i.cors_configuration)).await?;
        ok(PutBucketCorsOutput::default())
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        let t = self.tenant(&req).await?;
        cors::set(&t, &req.input.bucket, None).await?;
        ok(DeleteBucketCorsOutput::default())
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        metadata::no_hints(req.input.metadata.as_ref())?;
        let t = self.tenant(&req).await?;
        ok(multipart::create(&t, req.input).await?)
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let t = self.tenant(&req).await?;
        ok(multipart::upload_part(&t, req.input).await?)
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let t = self.tenant(&req).await?;
        ok(multipart::complete(&t, req.input).await?)
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let t = self.tenant(&req).await?;
        multipart::abort(&t, req.input).await?;
        ok(AbortMultipartUploadOutput::default())
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let t = self.tenant(&req).await?;
        ok(multipart::list_parts(&t, req.input).await?)
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let t = self.tenant(&req).await?;
        ok(multipart::list_uploads(&t, req.input).await?)
    }
}
