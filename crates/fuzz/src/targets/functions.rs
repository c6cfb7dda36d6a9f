//! The built-in functions on a user's data (`labios_functions::apply`): a
//! worker feeds a label's pipeline the bytes of a file, whatever they are,
//! so every built-in that parses its input (the decompressors, `decrypt`,
//! the array and record functions, `wordcount`, the checksums) meets
//! untrusted bytes. The first byte of an input picks a valid pipeline (see
//! [`PIPELINES`]), the rest is the data, run with the context a worker
//! builds. A decompression bomb must stop at its `limit` (or the default
//! one) within the engine's allocation limit, and compressing or
//! encrypting then reversing must give the data back.
//!
//! The seeds are sample data that each pipeline's first function accepts,
//! compressed by the built-ins themselves and encrypted in `encrypt`'s
//! format, so that mutations explore near-valid frames.

use crate::engine::Target;
use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use bytes::Bytes;
use labios_functions::{app_key, apply, AppId, Context, Error, Operation};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

/// Longest input: the selector and up to 4 KiB of data, past which mutated
/// seeds are cut. This also bounds what a bomb without a `limit` expands
/// to, since the default limit (1 GiB) is above the engine's allocation
/// limit: 4 KiB of zstd RLE blocks (128 KiB from 4 bytes) make 128 MiB.
/// bzip2 is denser (45 MB from a block of about 40 bytes), but each block
/// carries a CRC that mutations do not get right, so a stream ends in an
/// error after its first corrupted block.
const MAX_LEN: usize = 4097;

pub static TARGET: Target = Target {
    name: "functions",
    about: "labios_functions::apply of built-in pipelines on untrusted data (a user's file)",
    run,
    seeds,
    dictionary: &[
        // Magic numbers: zstd, zstd skippable frame, LZ4 frame, gzip,
        // bzip2 stream, block and end of stream.
        b"\x28\xb5\x2f\xfd",
        b"\x50\x2a\x4d\x18",
        b"\x04\x22\x4d\x18",
        b"\x1f\x8b\x08\x00",
        b"BZh9",
        b"\x31\x41\x59\x26\x53\x59",
        b"\x17\x72\x45\x38\x50\x90",
        // zstd RLE blocks of 128 KiB (not last, last): the densest bomb.
        b"\x02\x00\x10a",
        b"\x03\x00\x10a",
        // NaNs, infinities and -0 of f32 and f64.
        b"\x00\x00\xc0\x7f",
        b"\x00\x00\x80\xff",
        b"\x00\x00\x00\x80",
        b"\x00\x00\x00\x00\x00\x00\xf8\x7f",
        b"\x01\x00\x00\x00\x00\x00\xf0\xff",
        b"\x00\x00\x00\x00\x00\x00\xf0\x7f",
        b"\x00\x00\x00\x00\x00\x00\x00\x80",
        b"\n",
        b"Stra\xc3\x9fe",
        b"\xe6\x9d\xb1\xe4\xba\xac",
    ],
    max_len: MAX_LEN,
    default_inputs: 10_000_000,
    smoke_inputs: 10_000,
    // A fifth of the pipeline target's rate.
    cost: 5,
    // The slowest inputs, 128 MiB zstd bombs and streams of corrupted bzip2
    // blocks, take a tenth of a second; the rest a few microseconds.
    hang: Duration::from_secs(5),
};

/// Pipelines run as the worker runs them: with the application's key if
/// they use `encrypt` or `decrypt`, without otherwise. Each dtype and
/// record option of the functions that parse arrays and records appears,
/// and each decompressor without `limit` (the default bound), with
/// `limit=1000` (below most samples) and `limit=65536` (below the bomb).
const PIPELINES: &[&str] = &[
    "unzstd",
    "unzstd:limit=1000",
    "unzstd:limit=65536",
    "unlz4",
    "unlz4:limit=1000",
    "unlz4:limit=65536",
    "gunzip",
    "gunzip:limit=1000",
    "gunzip:limit=65536",
    "bunzip2",
    "bunzip2:limit=1000",
    "bunzip2:limit=65536",
    "decrypt",
    "decrypt|unzstd:limit=65536",
    "decrypt|wordcount",
    "sort:dtype=i32",
    "sort:dtype=i64,order=desc",
    "sort:dtype=u32,order=desc",
    "sort:dtype=u64,order=asc",
    "sort:dtype=f32",
    "sort:dtype=f64,order=desc",
    "filter:dtype=i32,min=-100,max=100",
    "filter:dtype=i64,min=-9223372036854775808",
    "filter:dtype=u32,max=4000000000",
    "filter:dtype=u64,q=0.5",
    "filter:dtype=f32,min=-1.5,max=2.5",
    "filter:dtype=f64,q=0.9,keep=below",
    "filter:dtype=f64,q=0,keep=above",
    "filter:dtype=i32,q=1",
    "stats:dtype=i32",
    "stats:dtype=i64,bins=1",
    "stats:dtype=u32,bins=65536",
    "stats:dtype=u64,bins=7",
    "stats:dtype=f32,bins=100",
    "stats:dtype=f64",
    "median:dtype=i32",
    "median:dtype=i64",
    "median:dtype=u32",
    "median:dtype=u64",
    "median:dtype=f32",
    "median:dtype=f64",
    "sample:dtype=i32,every=3",
    "sample:dtype=f64,fraction=0.25",
    "sample:record=line,fraction=0.5,seed=7",
    "sample:record=3,every=2",
    "sample:record=1,fraction=1",
    "dedup:dtype=u32",
    "dedup:dtype=i64",
    "dedup:record=line",
    "dedup:record=5",
    "wordcount",
    "wordcount:top=0",
    "wordcount:top=100000",
    "crc32c",
    "xxh3",
    "sha256",
    // Compressed files analysed in situ.
    "gunzip|wordcount:top=3",
    "unzstd:limit=65536|sort:dtype=f64,order=desc",
    "unlz4:limit=65536|stats:dtype=i32,bins=16",
    "bunzip2:limit=65536|dedup:record=line",
];

/// Pipelines run without the key they need: whatever the data, they must be
/// refused with `PermissionDenied`.
const WITHOUT_KEY: &[&str] = &["decrypt", "decrypt|gunzip"];

/// Pipelines whose output must be their input.
const ROUND_TRIPS: &[&str] = &[
    "zstd:level=-5|unzstd",
    // The longest data: output exactly at the limit passes.
    "zstd:level=19|unzstd:limit=4096",
    "lz4|unlz4",
    "gzip:level=0|gunzip",
    "gzip:level=9|gunzip",
    "bzip2:level=1|bunzip2",
    "encrypt|decrypt",
];

/// The application the data belongs to.
const APP: AppId = 3;
/// Its secret, from which the worker derives its key.
const SECRET: &str = "fuzz application secret";

/// What a pipeline must do besides not panicking.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Any output or error.
    Anything,
    /// Give back its input.
    Input,
    /// Refuse for the missing key.
    Denied,
}

/// A pipeline ready to run.
struct Case {
    spec: &'static str,
    ops: Vec<Operation>,
    /// The application's key, where the worker would pass it.
    key: Option<[u8; 32]>,
    expect: Expect,
}

/// [`PIPELINES`], [`WITHOUT_KEY`] and [`ROUND_TRIPS`], parsed once: the
/// first byte of an input indexes them, modulo their number.
fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let key = app_key(SECRET);
        let case = |spec: &'static str, expect: Expect| {
            let ops = Operation::parse_pipeline(spec).expect("a valid pipeline");
            labios_functions::validate(&ops, false).expect("built-ins only");
            // What the worker does: the key only for functions that use it.
            let needs_key = ops
                .iter()
                .any(|op| matches!(op.function.as_str(), "encrypt" | "decrypt"));
            Case {
                spec,
                ops,
                key: (needs_key && expect != Expect::Denied).then_some(key),
                expect,
            }
        };
        let cases: Vec<Case> = PIPELINES
            .iter()
            .map(|s| case(s, Expect::Anything))
            .chain(WITHOUT_KEY.iter().map(|s| case(s, Expect::Denied)))
            .chain(ROUND_TRIPS.iter().map(|s| case(s, Expect::Input)))
            .collect();
        assert!(cases.len() <= 256, "one byte selects a pipeline");
        cases
    })
}

/// Runs `ops` as a worker does: with the application's registered modules
/// (none, since these are built-ins) and the worker's sandbox.
fn execute(
    ops: &[Operation],
    key: Option<[u8; 32]>,
    data: &[u8],
) -> labios_functions::Result<Bytes> {
    let modules = HashMap::new();
    let ctx = Context {
        app: APP,
        key,
        modules: &modules,
        sandbox: Some(super::wasm::sandbox()),
    };
    apply(ops, Bytes::copy_from_slice(data), &ctx)
}

fn run(input: &[u8]) {
    let Some((&selector, data)) = input.split_first() else {
        return;
    };
    let cases = cases();
    let case = &cases[usize::from(selector) % cases.len()];
    let out = execute(&case.ops, case.key, data);
    match (case.expect, out) {
        (Expect::Anything, _) | (Expect::Denied, Err(Error::PermissionDenied(_))) => {}
        (Expect::Input, Ok(out)) => assert!(
            out == data,
            "{}: {} bytes came back as {} different ones",
            case.spec,
            data.len(),
            out.len()
        ),
        (_, Ok(out)) => panic!("{}: {} bytes were not refused", case.spec, out.len()),
        (_, Err(e)) => panic!("{}: {e}", case.spec),
    }
}

/// The output of a seed-building pipeline.
fn output(spec: &str, data: &[u8]) -> Vec<u8> {
    let ops = Operation::parse_pipeline(spec).expect("a valid pipeline");
    let key = Some(app_key(SECRET));
    execute(&ops, key, data)
        .unwrap_or_else(|e| panic!("{spec} builds a seed: {e}"))
        .to_vec()
}

/// Text with repeated lines and words, in several scripts.
fn text() -> Vec<u8> {
    let mut text = String::new();
    for i in 0..40 {
        text.push_str(match i % 4 {
            0 => "the quick brown fox jumps over the lazy dog\n",
            1 => "Straße ΣΊΣΥΦΟΣ naïve café 東京 2024-01-01\n",
            2 => "The Quick Brown Fox\n",
            _ => "",
        });
        text.push_str(&format!("line {} of 40\n", i % 7));
    }
    text.push_str("no newline at the end");
    text.into_bytes()
}

/// 240 `i32` values with repeats and the extremes: 960 bytes, also read as
/// the other dtypes and as 3- and 5-byte records.
fn ints() -> Vec<u8> {
    (0..240i32)
        .map(|i| match i % 16 {
            0 => i32::MIN,
            1 => i32::MAX,
            2 => -1,
            3 => 0,
            _ => (i * 7919) % 1000 - 500,
        })
        .flat_map(i32::to_le_bytes)
        .collect()
}

/// 128 `f64` values with NaNs of both signs, infinities, zeros of both
/// signs, subnormals and repeats.
fn floats() -> Vec<u8> {
    let special = [
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        f64::MIN_POSITIVE / 4.0,
        f64::MAX,
        f64::MIN,
    ];
    (0..128)
        .map(|i| {
            special
                .get(i % 32)
                .copied()
                .unwrap_or(i as f64 * 0.37 - 20.0)
        })
        .flat_map(f64::to_le_bytes)
        .collect()
}

/// `encrypt`'s format (nonce, ciphertext, tag) with a fixed nonce:
/// `encrypt` draws a random one, and seeds that change from run to run
/// change the inputs derived from them, which would then no longer replay
/// from their seed and number.
fn sealed(plain: &[u8]) -> Vec<u8> {
    let nonce = [7u8; 12];
    let cipher = Aes256Gcm::new(&app_key(SECRET).into());
    let sealed = cipher
        .encrypt(Nonce::from_slice(&nonce), plain)
        .expect("a seed fits AES-GCM");
    let out = [&nonce[..], &sealed].concat();
    assert_eq!(
        output("decrypt", &out),
        plain,
        "seeds follow encrypt's format"
    );
    out
}

/// The compressing pipelines of the samples, each with the function that
/// reads their output: each level takes its own paths through the format
/// (stored and Huffman blocks, window and block sizes).
const COMPRESSORS: &[(&str, &str)] = &[
    ("zstd:level=-5", "unzstd"),
    ("zstd", "unzstd"),
    ("zstd:level=19", "unzstd"),
    ("lz4", "unlz4"),
    ("gzip:level=0", "gunzip"),
    ("gzip:level=1", "gunzip"),
    ("gzip:level=9", "gunzip"),
    ("bzip2:level=1", "bunzip2"),
    ("bzip2", "bunzip2"),
];

/// Sample data, each with the function that reads its format (`None`:
/// plain data, which the other functions read).
fn samples() -> Vec<(Option<&'static str>, Vec<u8>)> {
    // Compresses to a few bytes, and expands past every `limit` of PIPELINES.
    let bomb = vec![b'a'; 256 << 10];
    let plain = [text(), ints(), floats()];
    let mut samples: Vec<_> = plain.iter().map(|p| (None, p.clone())).collect();
    for &(compress, reader) in COMPRESSORS {
        let compressed: Vec<Vec<u8>> = plain
            .iter()
            .chain([&bomb])
            .map(|data| output(compress, data))
            .collect();
        // Concatenated streams, which the decompressors read as one.
        let concatenated = [&compressed[0][..], &compressed[3]].concat();
        samples.extend(
            compressed
                .into_iter()
                .chain([concatenated])
                .map(|c| (Some(reader), c)),
        );
    }
    for data in [&plain[0], &plain[2], &output("zstd", &plain[0])] {
        samples.push((Some("decrypt"), sealed(data)));
    }
    samples
}

/// Each pipeline's selector followed by the samples in the format its
/// first function reads that this function accepts (or refuses only for
/// exceeding a `limit`). Functions that read any bytes (checksums,
/// compressors) get only the plain samples, so that their seeds do not
/// outnumber those of the decoders.
fn seeds() -> Vec<Vec<u8>> {
    let samples = samples();
    let mut seeds = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        let selector = u8::try_from(i).expect("one byte selects a pipeline");
        let first = case.ops[0].function.as_str();
        let format = samples
            .iter()
            .any(|(reader, _)| *reader == Some(first))
            .then_some(first);
        for (_, data) in samples.iter().filter(|(reader, _)| *reader == format) {
            if data.len() >= MAX_LEN {
                continue;
            }
            match execute(&case.ops[..1], case.key, data) {
                Ok(_) | Err(Error::Storage(_)) => seeds.push([&[selector][..], data].concat()),
                Err(_) => {}
            }
        }
    }
    seeds
}
