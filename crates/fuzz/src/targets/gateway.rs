//! The S3 gateway's own handling of request input (not s3s's protocol
//! parsing, which is s3s's to fuzz): keys as LABIOS paths, Range headers
//! against an object's size, If-* conditions, continuation tokens, listing
//! parameters, multipart upload ids, part numbers and part lists.
//!
//! An input is lines: key, Range, object size, If-Match, If-None-Match,
//! If-Modified-Since, If-Unmodified-Since, the object's ETag, its mtime
//! (ns), a continuation token, a part list (`NUMBER:ETAG ...`), an upload
//! id, a listing prefix, a delimiter, max-keys, then the bucket's keys.
//! Header values go through s3s's parsers first, as in a request.

use crate::engine::Target;
use labios_gateway::fuzzing::{
    check_conditions, choose_parts, is_bucket_name, key_of, object_path, paginate, parse_md5,
    part_path, range_of, token, untoken, upload_dir, Found, ObjectMeta, Query,
};
use labios_store::{FileKind, FileMeta};
use s3s::dto::{CompletedPart, ETag, ETagCondition, Range, Timestamp, TimestampFormat};
use std::time::Duration;

pub static TARGET: Target = Target {
    name: "gateway",
    about: "S3 gateway: object_path, range_of, check_conditions, untoken, paginate, choose_parts",
    run,
    seeds,
    dictionary: &[
        b"bytes=",
        b"-",
        b"/",
        b"//",
        b"..",
        b"\"",
        b"W/\"",
        b"*",
        b"GMT",
        b"\n",
        b":",
        b" ",
        b"d41d8cd98f00b204e9800998ecf8427e",
    ],
    max_len: 4096,
    default_inputs: 10_000_000,
    smoke_inputs: 50_000,
    cost: 1,
    hang: Duration::from_secs(2),
};

const BUCKET: &str = "bucket";
/// The ETags of the stored parts 1, 2 and 5 (the last one not an MD5, as
/// when a part file was changed after its upload).
const PART_ETAGS: [(i32, &str); 3] = [
    (1, "0cc175b9c0f1b6a831c399e269772661"),
    (2, "92eb5ffee6ae2fec3ad71c777531578f"),
    (5, "derived-1"),
];

fn seeds() -> Vec<Vec<u8>> {
    [
        "photos/2026/a.jpg\nbytes=0-99\n4096\n\"0cc175b9c0f1b6a831c399e269772661\"\n\n\
         Wed, 21 Oct 2015 07:28:00 GMT\n\n0cc175b9c0f1b6a831c399e269772661\n1445412480000000000\n\
         70686f746f732f\n1:\"0cc175b9c0f1b6a831c399e269772661\" 2:92eb5ffee6ae2fec3ad71c777531578f\n\
         0123456789abcdef0123456789abcdef\nphotos/\n/\n2\nphotos/2026/a.jpg\nphotos/2026/b.jpg\n\
         photos/x\nphotos/y/z",
        "dir/\nbytes=-500\n1000\n*\n\"abc\"\n\nThu, 01 Jan 1970 00:00:00 GMT\nd41d8cd98f00b204e9800998ecf8427e\n0\n\
         \n1 2 5\n0123456789ABCDEF0123456789abcdef\n\n\n1000\na\nb",
        "a b+%.csv\nbytes=100-\n100\n\nW/\"x\"\n\n\n\n\n6162\n2:92eb5ffee6ae2fec3ad71c777531578f 1\n\
         nothex\na\n-\n0\na-b\na-c",
        "x/../y\nbytes=5-4\n18446744073709551615\n\n\n\n\n\n18446744073709551615\nzz\n5:derived-1\n\n\n\n-1",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').collect();
    let line = |i: usize| lines.get(i).copied();
    let field = |i: usize| line(i).unwrap_or_default();
    let key = field(0);
    keys(key);
    let size = field(2)
        .parse::<u64>()
        .unwrap_or(field(2).len() as u64 * 1000);
    if let Ok(range) = Range::parse(field(1)) {
        if let Ok((r, header)) = range_of(Some(&range), size) {
            assert!(
                r.start < r.end && r.end <= size,
                "range {range:?} of {size} bytes gave {r:?} ({header:?})"
            );
        }
    }
    conditions(&lines, size);
    let _ = untoken(field(9));
    assert_eq!(untoken(&token(key)).ok().as_deref(), Some(key));
    parts(field(10), field(11));
    let _ = parse_md5(field(7));
    listing(&lines);
}

fn keys(key: &str) {
    let _ = is_bucket_name(key);
    if let Ok(path) = object_path(BUCKET, key) {
        assert_eq!(
            key_of(BUCKET, &path),
            Some(key.strip_suffix('/').unwrap_or(key)),
            "key {key:?} does not come back from its path {path:?}"
        );
    }
}

fn conditions(lines: &[&str], size: u64) {
    let header = |i: usize| lines.get(i).filter(|l| !l.is_empty());
    let etag_condition =
        |i| header(i).and_then(|l| ETagCondition::parse_http_header(l.as_bytes()).ok());
    let date = |i| header(i).and_then(|l| Timestamp::parse(TimestampFormat::HttpDate, l).ok());
    let found = Found {
        path: format!("/{BUCKET}/object"),
        file: FileMeta {
            id: 9,
            path: format!("/{BUCKET}/object"),
            kind: FileKind::File,
            size,
            mode: 0o644,
            owner: 3,
            uid: 0,
            gid: 0,
            ctime: 0,
            mtime: lines.get(8).and_then(|l| l.parse().ok()).unwrap_or(0),
            atime: 0,
            nlink: 1,
        },
        meta: ObjectMeta {
            etag: lines.get(7).copied().unwrap_or_default().to_string(),
            ..ObjectMeta::default()
        },
    };
    let _ = check_conditions(
        &found,
        etag_condition(3).as_ref(),
        etag_condition(4).as_ref(),
        date(5).as_ref(),
        date(6).as_ref(),
    );
}

fn parts(list: &str, upload_id: &str) {
    let asked: Vec<CompletedPart> = list
        .split(' ')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (number, etag) = p.split_once(':').map_or((p, None), |(n, e)| (n, Some(e)));
            CompletedPart {
                part_number: number.parse().ok(),
                e_tag: etag.map(|e| {
                    ETag::parse_http_header(e.as_bytes()).unwrap_or_else(|_| ETag::Strong(e.into()))
                }),
                ..CompletedPart::default()
            }
        })
        .collect();
    let dir = upload_dir(upload_id).unwrap_or_else(|_| "/.s3-uploads/fuzz".into());
    let stored: Vec<(i32, FileMeta, ObjectMeta)> = PART_ETAGS
        .iter()
        .filter_map(|&(n, etag)| {
            let path = part_path(&dir, n).ok()?;
            let file = FileMeta {
                id: n as u64,
                path,
                kind: FileKind::File,
                size: 5 << 20,
                mode: 0o600,
                owner: 3,
                uid: 0,
                gid: 0,
                ctime: 0,
                mtime: 0,
                atime: 0,
                nlink: 1,
            };
            let meta = ObjectMeta {
                etag: etag.into(),
                ..ObjectMeta::default()
            };
            Some((n, file, meta))
        })
        .collect();
    for p in &asked {
        let _ = part_path(&dir, p.part_number.unwrap_or(0));
    }
    if let Ok(chosen) = choose_parts(&asked, &stored) {
        assert_eq!(chosen.len(), asked.len(), "parts {list:?}");
    }
}

fn listing(lines: &[&str]) {
    let prefix = lines.get(12).copied().unwrap_or_default();
    let mut keys: Vec<(String, ())> = lines
        .iter()
        .skip(15)
        .filter(|k| k.starts_with(prefix))
        .map(|k| (k.to_string(), ()))
        .collect();
    keys.sort();
    keys.dedup();
    let max_keys = lines.get(14).and_then(|l| l.parse::<i32>().ok());
    let q = Query {
        bucket: BUCKET,
        prefix,
        delimiter: lines.get(13).copied(),
        after: lines.get(9).and_then(|t| untoken(t).ok()),
        max_keys,
        url_encoded: lines.len().is_multiple_of(2),
        fetch_owner: false,
    };
    if let Ok(page) = paginate(keys, &q) {
        let shown = page.objects.len() + page.prefixes.len();
        let max = max_keys.map_or(1000, |m| m.clamp(0, 1000) as usize);
        assert!(
            shown <= max,
            "{shown} entries shown for max-keys {max_keys:?}"
        );
    }
}
