//! What the gateway does to every HTTP exchange around s3s: a request id
//! on every answer, the limits of presigned URLs that s3s leaves to the
//! server, bodies sent without a length, closing a connection whose
//! request body was left unread, and CORS (the browser's preflight, which
//! s3s does not route, and the headers that let a page read an answer).

use crate::cors;
use crate::tenants::Directory;
use s3s::service::S3Service;
use s3s::{S3Error, S3ErrorCode};
use std::sync::Arc;

/// S3's longest validity of a presigned URL: 7 days, in seconds.
pub const MAX_PRESIGNED_EXPIRES: i64 = 604_800;

/// The most a body sent without Content-Length (`Transfer-Encoding:
/// chunked`) may hold: s3s needs every plain body's length up front, so
/// such a body is read into memory first. Larger uploads send their length
/// or go in parts.
pub const UNSIZED_BODY_LIMIT: usize = 32 << 20;

/// The S3 service behind the gateway's own handling of each exchange.
#[derive(Clone)]
pub struct Edge {
    pub s3: S3Service,
    pub directory: Arc<Directory>,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Edge {
    type Response = s3s::HttpResponse;
    type Error = s3s::HttpError;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let id = request_id();
        let directory = self.directory.clone();
        let cross = cross_origin(&req);
        if req.method() == http::Method::OPTIONS {
            return Box::pin(async move {
                let mut resp = match cross {
                    Ok((bucket, asked)) => preflight(&directory, &bucket, &asked).await?,
                    Err(refused) => answer_with(refused)?,
                };
                identify(&mut resp, &id);
                Ok(resp)
            });
        }
        let headers = req.headers();
        // An operation refused before it read its body (a bad key, another
        // tenant's bucket, an object over the size limit) leaves the rest
        // of the body unread, and on a kept-alive connection those bytes
        // would be parsed as the start of the next request.
        let has_body = headers.contains_key(http::header::TRANSFER_ENCODING)
            || headers
                .get(http::header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() != b"0");
        let req = req.map(s3s::Body::from);
        let answer: Self::Future = match presigned_limits(req.uri().query(), req.headers()) {
            Some(refused) => Box::pin(std::future::ready(answer_with(refused))),
            None if without_length(&req) => {
                let service = self.s3.clone();
                Box::pin(async move {
                    match sized(req).await {
                        Ok(req) => service.call(req).await,
                        Err(refused) => answer_with(refused),
                    }
                })
            }
            None => {
                let service = self.s3.clone();
                Box::pin(async move { service.call(req).await })
            }
        };
        Box::pin(async move {
            let mut resp = answer.await?;
            let status = resp.status();
            if has_body && (status.is_client_error() || status.is_server_error()) {
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            if let Ok((bucket, asked)) = cross {
                let rules = directory.cors_rules(&bucket).await;
                allow(&mut resp, cors::grant(&rules, &asked).unwrap_or_default());
            }
            identify(&mut resp, &id);
            Ok(resp)
        })
    }
}

/// The bucket and what the browser asks of a cross-origin request: its
/// `Origin` and its method (for a preflight, the method and headers it
/// asks about). A request without `Origin` is not cross-origin.
fn cross_origin<B>(req: &http::Request<B>) -> Result<(String, cors::Request), S3Error> {
    let h = req.headers();
    let text = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let bad = |msg: &'static str| S3Error::with_message(S3ErrorCode::InvalidRequest, msg);
    let origin = text("origin")
        .ok_or_else(|| bad("Insufficient information. Origin request header needed."))?;
    let (method, headers) = if req.method() == http::Method::OPTIONS {
        let method = text("access-control-request-method")
            .ok_or_else(|| bad("Invalid Access-Control-Request-Method: none given"))?;
        let headers = text("access-control-request-headers")
            .map(|l| {
                l.split(',')
                    .map(|h| h.trim().to_ascii_lowercase())
                    .filter(|h| !h.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        (method, headers)
    } else {
        (req.method().to_string(), Vec::new())
    };
    let bucket = req
        .uri()
        .path()
        .trim_start_matches('/')
        .split('/')
        .next()
        .filter(|b| !b.is_empty())
        .ok_or_else(|| bad("a CORS request names a bucket"))?;
    Ok((
        bucket.to_string(),
        cors::Request {
            origin,
            method,
            headers,
        },
    ))
}

/// A preflight's answer: 200 with what the bucket's first matching rule
/// allows, or 403.
async fn preflight(
    directory: &Arc<Directory>,
    bucket: &str,
    asked: &cors::Request,
) -> Result<s3s::HttpResponse, s3s::HttpError> {
    let rules = directory.cors_rules(bucket).await;
    match cors::grant(&rules, asked) {
        Some(granted) => {
            let mut resp = http::Response::new(s3s::Body::from(bytes::Bytes::new()));
            allow(&mut resp, granted);
            Ok(resp)
        }
        None => answer_with(cors::forbidden()),
    }
}

fn allow(resp: &mut s3s::HttpResponse, granted: Vec<(&'static str, String)>) {
    for (name, value) in granted {
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            resp.headers_mut().insert(name, v);
        }
    }
}

fn answer_with(refused: S3Error) -> Result<s3s::HttpResponse, s3s::HttpError> {
    refused
        .to_http_response()
        .map_err(|e| s3s::HttpError::new(Box::new(e)))
}

/// A plain body sent without its length (an aws-chunked upload names its
/// decoded length in a header of its own).
fn without_length(req: &s3s::HttpRequest) -> bool {
    let h = req.headers();
    h.contains_key(http::header::TRANSFER_ENCODING)
        && !h.contains_key(http::header::CONTENT_LENGTH)
        && !h.contains_key("x-amz-decoded-content-length")
}

/// `req` with its body read, up to [`UNSIZED_BODY_LIMIT`], and its length
/// named.
async fn sized(req: s3s::HttpRequest) -> Result<s3s::HttpRequest, S3Error> {
    let (mut parts, mut body) = req.into_parts();
    let bytes = body
        .store_all_limited(UNSIZED_BODY_LIMIT)
        .await
        .map_err(|e| {
            S3Error::with_message(
                S3ErrorCode::MissingContentLength,
                format!(
                    "a body sent without Content-Length is read whole first, up to {UNSIZED_BODY_LIMIT} bytes: {e}; \
                     send its length, or upload it in parts"
                ),
            )
        })?;
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    parts.headers.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(bytes.len()),
    );
    Ok(http::Request::from_parts(parts, s3s::Body::from(bytes)))
}

/// A request id as S3 writes them: 16 uppercase hex digits.
fn request_id() -> String {
    format!("{:016X}", fastrand::u64(..))
}

/// Names the exchange `id` in the `x-amz-request-id` header and, for an
/// error, in its body's `RequestId`, which is what a user quotes to an
/// operator and what the gateway's log lines name.
fn identify(resp: &mut s3s::HttpResponse, id: &str) {
    if let Ok(v) = http::HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-amz-request-id", v);
    }
    if resp.status().is_success() {
        return;
    }
    let Some(body) = resp.body().bytes() else {
        return;
    };
    let Some(end) = find(&body, b"</Error>") else {
        return;
    };
    if find(&body, b"<RequestId>").is_some() {
        return;
    }
    let mut out = Vec::with_capacity(body.len() + id.len() + 24);
    out.extend_from_slice(&body[..end]);
    out.extend_from_slice(format!("<RequestId>{id}</RequestId>").as_bytes());
    out.extend_from_slice(&body[end..]);
    let len = out.len();
    *resp.body_mut() = s3s::Body::from(bytes::Bytes::from(out));
    if let Ok(v) = http::HeaderValue::from_str(&len.to_string()) {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, v);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The refusal of a SigV4 presigned URL S3 would not take: its
/// `X-Amz-Expires` not a number, negative, or over 7 days, or an `x-amz-*`
/// header sent with it that its `X-Amz-SignedHeaders` does not name (so
/// that whoever holds the URL cannot add metadata, tags or an ACL to what
/// its signer allowed). s3s checks the signature and the expiry itself,
/// but takes any validity, answers a negative one with a puzzling
/// "missing fields", and lets unsigned headers through.
pub fn presigned_limits(query: Option<&str>, headers: &http::HeaderMap) -> Option<S3Error> {
    let query = query?;
    let mut signed = false;
    let mut expires = None;
    let mut signed_headers = "";
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "X-Amz-Signature" => signed = true,
            "X-Amz-Expires" => expires = Some(value),
            "X-Amz-SignedHeaders" => signed_headers = value,
            _ => {}
        }
    }
    let expires = expires.filter(|_| signed)?;
    let problem = match expires.parse::<i64>() {
        Err(_) => format!("X-Amz-Expires {expires:?} is not a number of seconds"),
        Ok(n) if n < 0 => format!("X-Amz-Expires must be non-negative, not {n}"),
        Ok(n) if n > MAX_PRESIGNED_EXPIRES => format!(
            "X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGNED_EXPIRES}, not {n}"
        ),
        Ok(_) => return unsigned_headers(signed_headers, headers),
    };
    Some(S3Error::with_message(
        S3ErrorCode::AuthorizationQueryParametersError,
        problem,
    ))
}

/// S3's refusal of `x-amz-*` headers a presigned URL's signature does not
/// cover (`signed` is its `X-Amz-SignedHeaders`, `;` percent-encoded or
/// not).
fn unsigned_headers(signed: &str, headers: &http::HeaderMap) -> Option<S3Error> {
    let signed = signed.replace("%3B", ";").replace("%3b", ";");
    let signed: Vec<&str> = signed.split(';').collect();
    let mut unsigned: Vec<&str> = headers
        .keys()
        .map(|name| name.as_str())
        .filter(|name| name.starts_with("x-amz-") && !signed.contains(name))
        .collect();
    if unsigned.is_empty() {
        return None;
    }
    unsigned.sort_unstable();
    unsigned.dedup();
    Some(S3Error::with_message(
        S3ErrorCode::AccessDenied,
        format!(
            "There were headers present in the request which were not signed: {}",
            unsigned.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(query: &str) -> Option<String> {
        presigned_limits(Some(query), &http::HeaderMap::new())
            .map(|e| e.message().unwrap_or_default().to_string())
    }

    #[test]
    fn presigned_urls_are_valid_for_at_most_a_week() {
        let url = |e: &str| {
            format!("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires={e}&X-Amz-Signature=ab")
        };
        assert_eq!(refusal(&url("60")), None);
        assert_eq!(refusal(&url("604800")), None);
        assert!(refusal(&url("604801"))
            .unwrap()
            .contains("less than a week"));
        assert!(refusal(&url("-5")).unwrap().contains("non-negative"));
        assert!(refusal(&url("soon")).unwrap().contains("not a number"));
        // Not a presigned URL: a listing's own parameters, or no signature.
        assert_eq!(refusal("list-type=2&prefix=a"), None);
        assert_eq!(refusal("X-Amz-Expires=-5"), None);
        assert_eq!(
            presigned_limits(None, &http::HeaderMap::new()).map(|_| ()),
            None
        );
    }

    #[test]
    fn presigned_urls_refuse_x_amz_headers_they_do_not_sign() {
        let url = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=60&X-Amz-Signature=ab\
                   &X-Amz-SignedHeaders=host%3Bx-amz-meta-signed";
        let mut headers = http::HeaderMap::new();
        headers.insert("x-amz-meta-signed", "yes".parse().unwrap());
        headers.insert("content-type", "text/csv".parse().unwrap());
        assert_eq!(presigned_limits(Some(url), &headers).map(|_| ()), None);
        headers.insert("x-amz-meta-owner", "mallory".parse().unwrap());
        headers.insert("x-amz-tagging", "a=b".parse().unwrap());
        let e = presigned_limits(Some(url), &headers).unwrap();
        assert_eq!(*e.code(), S3ErrorCode::AccessDenied);
        assert!(
            e.message()
                .unwrap()
                .ends_with(": x-amz-meta-owner, x-amz-tagging"),
            "{e:?}"
        );
        // A request signed in its Authorization header is not presigned.
        assert_eq!(
            presigned_limits(Some("uploads"), &headers).map(|_| ()),
            None
        );
    }

    fn chunked(body: Vec<u8>) -> s3s::HttpRequest {
        http::Request::put("/b/k")
            .header(http::header::TRANSFER_ENCODING, "chunked")
            .body(s3s::Body::from(body))
            .unwrap()
    }

    #[tokio::test]
    async fn a_body_without_its_length_is_read_whole_up_to_the_bound() {
        let req = chunked(vec![7; 1000]);
        assert!(without_length(&req));
        let req = sized(req).await.unwrap();
        assert!(!without_length(&req));
        assert_eq!(req.headers()[http::header::CONTENT_LENGTH], "1000");
        assert_eq!(req.body().bytes().unwrap().len(), 1000);
        let e = sized(chunked(vec![0; UNSIZED_BODY_LIMIT + 1]))
            .await
            .unwrap_err();
        assert_eq!(*e.code(), S3ErrorCode::MissingContentLength);
        assert!(e.message().unwrap().contains("send its length"));
    }

    #[test]
    fn every_answer_names_its_request() {
        let e = S3Error::with_message(S3ErrorCode::NoSuchKey, "gone");
        let mut resp = e.to_http_response().unwrap();
        identify(&mut resp, "0123456789ABCDEF");
        assert_eq!(resp.headers()["x-amz-request-id"], "0123456789ABCDEF");
        let body = resp.body().bytes().unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(
            text.contains("<RequestId>0123456789ABCDEF</RequestId></Error>"),
            "{text}"
        );
        assert_eq!(
            resp.headers()[http::header::CONTENT_LENGTH],
            body.len().to_string()
        );
    }
}
