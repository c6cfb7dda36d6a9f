//! Cross-origin resource sharing of buckets (PutBucketCors and the
//! browser's preflight `OPTIONS`), so that a web page served from another
//! origin can upload to a bucket and read from it, as S3 allows. A
//! bucket's rules are one of its settings ([`crate::settings`]), stored as
//! JSON; the gateway answers a preflight, which is never signed, by
//! reading them as the bucket's owner, and adds the `Access-Control-*`
//! headers to the answers of cross-origin requests that a rule allows.

use crate::settings::{self, Setting};
use crate::tenants::Tenant;
use bytes::Bytes;
use s3s::dto::{CORSConfiguration, CORSRule, GetBucketCorsOutput};
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// S3's limit of rules per bucket.
const MAX_RULES: usize = 100;
/// The methods a rule may allow.
const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];
/// How long rules read for a preflight are reused before being read
/// again; a change through this gateway is seen at once.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// One CORS rule, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    origins: Vec<String>,
    methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    expose: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_age: Option<i32>,
}

/// `pattern` (with at most one `*`, matching any run of characters)
/// against `value`.
fn matches(pattern: &str, value: &str, ignore_case: bool) -> bool {
    let (p, v) = if ignore_case {
        (pattern.to_ascii_lowercase(), value.to_ascii_lowercase())
    } else {
        (pattern.to_string(), value.to_string())
    };
    match p.split_once('*') {
        Some((head, tail)) => {
            v.len() >= head.len() + tail.len() && v.starts_with(head) && v.ends_with(tail)
        }
        None => p == v,
    }
}

impl Rule {
    /// Whether the rule lets `origin` use `method` sending `headers`.
    fn allows(&self, origin: &str, method: &str, headers: &[String]) -> bool {
        self.origins.iter().any(|o| matches(o, origin, false))
            && self.methods.iter().any(|m| m == method)
            && headers
                .iter()
                .all(|h| self.headers.iter().any(|a| matches(a, h, true)))
    }

    fn of(r: CORSRule) -> S3Result<Rule> {
        let rule = Rule {
            id: r.id,
            origins: r.allowed_origins,
            methods: r.allowed_methods,
            headers: r.allowed_headers.unwrap_or_default(),
            expose: r.expose_headers.unwrap_or_default(),
            max_age: r.max_age_seconds,
        };
        if rule.origins.is_empty() || rule.methods.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "a CORS rule needs at least one AllowedOrigin and one AllowedMethod"
            ));
        }
        if let Some(m) = rule.methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
            return Err(s3_error!(
                InvalidRequest,
                "AllowedMethod {m:?} is not one of {}",
                METHODS.join(", ")
            ));
        }
        let wild = rule.origins.iter().chain(&rule.headers);
        if let Some(w) = wild.into_iter().find(|w| w.matches('*').count() > 1) {
            return Err(s3_error!(
                InvalidRequest,
                "{w:?} has more than one wildcard (*)"
            ));
        }
        if rule.max_age.is_some_and(|a| a < 0) {
            return Err(s3_error!(
                InvalidArgument,
                "MaxAgeSeconds may not be negative"
            ));
        }
        Ok(rule)
    }

    fn to_dto(&self) -> CORSRule {
        CORSRule {
            id: self.id.clone(),
            allowed_origins: self.origins.clone(),
            allowed_methods: self.methods.clone(),
            allowed_headers: (!self.headers.is_empty()).then(|| self.headers.clone()),
            expose_headers: (!self.expose.is_empty()).then(|| self.expose.clone()),
            max_age_seconds: self.max_age,
        }
    }
}

/// The rules of a PutBucketCors, checked as S3 does.
pub fn of_config(c: CORSConfiguration) -> S3Result<Vec<Rule>> {
    if c.cors_rules.is_empty() || c.cors_rules.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "a CORS configuration holds 1 to {MAX_RULES} rules, not {}",
            c.cors_rules.len()
        ));
    }
    c.cors_rules.into_iter().map(Rule::of).collect()
}

/// Stored rules; anything unreadable reads as none.
fn parse(stored: Option<Bytes>) -> Vec<Rule> {
    stored
        .and_then(|v| serde_json::from_slice(&v).ok())
        .unwrap_or_default()
}

/// GetBucketCors: S3 answers `NoSuchCORSConfiguration` for a bucket
/// without rules.
pub async fn get(t: &Tenant, bucket: &str) -> S3Result<GetBucketCorsOutput> {
    let rules = parse(settings::read(t, bucket, Setting::Cors).await?);
    if rules.is_empty() {
        return Err(s3_error!(
            NoSuchCORSConfiguration,
            "bucket {bucket} has no CORS configuration"
        ));
    }
    Ok(GetBucketCorsOutput {
        cors_rules: Some(rules.iter().map(Rule::to_dto).collect()),
    })
}

/// PutBucketCors (`Some`) and DeleteBucketCors (`None`).
pub async fn set(t: &Tenant, bucket: &str, config: Option<CORSConfiguration>) -> S3Result<()> {
    let value = match config {
        Some(c) => Some(Bytes::from(
            serde_json::to_vec(&of_config(c)?).expect("CORS rules serialize"),
        )),
        None => None,
    };
    settings::write(t, bucket, Setting::Cors, value).await?;
    t.cors().forget(bucket);
    Ok(())
}

/// A bucket's rules, shared by the requests that read them.
pub type Rules = Arc<Vec<Rule>>;

/// The rules of buckets lately asked for by cross-origin requests, with
/// when they were read.
#[derive(Default)]
pub struct Cache {
    entries: Mutex<HashMap<String, (Instant, Rules)>>,
}

impl Cache {
    pub fn fresh(&self, bucket: &str) -> Option<Rules> {
        let entries = self.entries.lock().unwrap();
        let (read, rules) = entries.get(bucket)?;
        (read.elapsed() < FRESH_FOR).then(|| rules.clone())
    }

    pub fn keep(&self, bucket: &str, rules: Rules) {
        let mut entries = self.entries.lock().unwrap();
        entries.retain(|_, (read, _)| read.elapsed() < FRESH_FOR);
        entries.insert(bucket.to_string(), (Instant::now(), rules));
    }

    pub fn forget(&self, bucket: &str) {
        self.entries.lock().unwrap().remove(bucket);
    }
}

/// The rules of `bucket` as its owner `t` stored them.
pub async fn rules_of(t: &Tenant, bucket: &str) -> S3Result<Vec<Rule>> {
    Ok(parse(settings::read(t, bucket, Setting::Cors).await?))
}

/// A cross-origin request as the browser describes it.
pub struct Request {
    pub origin: String,
    pub method: String,
    /// `Access-Control-Request-Headers` of a preflight, lowercase.
    pub headers: Vec<String>,
}

/// The `Access-Control-*` headers that answer `req` under the first rule
/// that allows it, or none.
pub fn grant(rules: &[Rule], req: &Request) -> Option<Vec<(&'static str, String)>> {
    let rule = rules
        .iter()
        .find(|r| r.allows(&req.origin, &req.method, &req.headers))?;
    let any = rule.origins.iter().any(|o| o == "*");
    let mut out = vec![
        (
            "access-control-allow-origin",
            if any {
                "*".to_string()
            } else {
                req.origin.clone()
            },
        ),
        ("access-control-allow-methods", rule.methods.join(", ")),
        (
            "vary",
            "Origin, Access-Control-Request-Headers, Access-Control-Request-Method".into(),
        ),
    ];
    if !any {
        out.push(("access-control-allow-credentials", "true".into()));
    }
    if !req.headers.is_empty() {
        out.push(("access-control-allow-headers", req.headers.join(", ")));
    }
    if !rule.expose.is_empty() {
        out.push(("access-control-expose-headers", rule.expose.join(", ")));
    }
    if let Some(age) = rule.max_age {
        out.push(("access-control-max-age", age.to_string()));
    }
    Some(out)
}

/// S3's answer to a preflight no rule allows.
pub fn forbidden() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("AccessForbidden".into()),
        "CORSResponse: this CORS request is not allowed: no CORS rule of the bucket allows its \
         origin, method (Access-Control-Request-Method) and headers (Access-Control-Request-Headers)",
    );
    e.set_status_code(http::StatusCode::FORBIDDEN);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CORSRule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        CORSRule {
            allowed_origins: v(origins),
            allowed_methods: v(methods),
            allowed_headers: Some(v(headers)),
            ..Default::default()
        }
    }

    fn req(origin: &str, method: &str, headers: &[&str]) -> Request {
        Request {
            origin: origin.into(),
            method: method.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
        }
    }

    #[test]
    fn a_rule_allows_what_it_names_and_nothing_else() {
        let rules = of_config(CORSConfiguration {
            cors_rules: vec![rule(
                &["https://*.example.org"],
                &["PUT", "GET"],
                &["content-*", "x-amz-*"],
            )],
        })
        .unwrap();
        let granted = grant(
            &rules,
            &req("https://app.example.org", "PUT", &["content-type"]),
        )
        .unwrap();
        assert!(granted.contains(&(
            "access-control-allow-origin",
            "https://app.example.org".into()
        )));
        assert!(granted.contains(&("access-control-allow-headers", "content-type".into())));
        assert!(grant(&rules, &req("https://example.com", "PUT", &[])).is_none());
        assert!(grant(&rules, &req("https://app.example.org", "DELETE", &[])).is_none());
        assert!(grant(
            &rules,
            &req("https://app.example.org", "PUT", &["authorization"])
        )
        .is_none());
    }

    #[test]
    fn bad_rules_are_refused_naming_what_is_wrong() {
        let refused = |r: CORSRule| {
            of_config(CORSConfiguration {
                cors_rules: vec![r],
            })
            .unwrap_err()
            .message()
            .unwrap()
            .to_string()
        };
        assert!(refused(rule(&["*"], &["PATCH"], &[])).contains("PATCH"));
        assert!(refused(rule(&["*.*"], &["GET"], &[])).contains("more than one wildcard"));
        assert!(refused(rule(&[], &["GET"], &[])).contains("AllowedOrigin"));
        assert!(of_config(CORSConfiguration { cors_rules: vec![] }).is_err());
    }
}
