//! The built-in functions and pipelines, through the public API.

use std::collections::HashMap;

use bytes::Bytes;
use labios_functions::{app_key, apply, builtins, validate, Context, Error, Operation};
use serde_json::Value;

fn op(function: &str, args: &[(&str, &str)]) -> Operation {
    Operation {
        function: function.into(),
        args: args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn run_with(ops: &[Operation], input: &[u8], key: Option<[u8; 32]>) -> Result<Vec<u8>, Error> {
    let modules = HashMap::new();
    let ctx = Context {
        app: 7,
        key,
        modules: &modules,
        sandbox: None,
    };
    apply(ops, Bytes::copy_from_slice(input), &ctx).map(|b| b.to_vec())
}

fn run(ops: &[Operation], input: &[u8]) -> Result<Vec<u8>, Error> {
    run_with(ops, input, None)
}

fn run1(function: &str, args: &[(&str, &str)], input: &[u8]) -> Result<Vec<u8>, Error> {
    run(&[op(function, args)], input)
}

fn json(function: &str, args: &[(&str, &str)], input: &[u8]) -> Value {
    serde_json::from_slice(&run1(function, args, input).unwrap()).unwrap()
}

fn bytes_of<T: Copy, const N: usize>(values: &[T], to_le: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| to_le(v)).collect()
}

fn i64s(values: &[i64]) -> Vec<u8> {
    bytes_of(values, i64::to_le_bytes)
}

fn f64s(values: &[f64]) -> Vec<u8> {
    bytes_of(values, f64::to_le_bytes)
}

fn read_i64s(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn read_f64s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn assert_invalid(result: Result<impl std::fmt::Debug, Error>, expected: &str) {
    match result {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains(expected), "{message:?} lacks {expected:?}")
        }
        other => panic!("expected InvalidArgument containing {expected:?}, got {other:?}"),
    }
}

fn assert_malformed(result: Result<Vec<u8>, Error>, expected: &str) {
    match result {
        Err(Error::Malformed(message)) => {
            assert!(message.contains(expected), "{message:?} lacks {expected:?}")
        }
        other => panic!("expected Malformed containing {expected:?}, got {other:?}"),
    }
}

/// Compressible but not trivial: text with some variety.
fn sample_text() -> Vec<u8> {
    (0..5000)
        .map(|i| format!("line {i}: the quick brown fox {}\n", i % 37))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn compressors_round_trip_in_their_standard_formats() {
    let data = sample_text();
    let codecs = [
        ("zstd", "unzstd", &[0x28, 0xb5, 0x2f, 0xfd][..]),
        ("lz4", "unlz4", &[0x04, 0x22, 0x4d, 0x18][..]),
        ("gzip", "gunzip", &[0x1f, 0x8b][..]),
        ("bzip2", "bunzip2", &b"BZh"[..]),
    ];
    for (compress, decompress, magic) in codecs {
        let packed = run1(compress, &[], &data).unwrap();
        assert!(packed.starts_with(magic), "{compress} magic");
        assert!(packed.len() < data.len() / 4, "{compress} compresses");
        assert_eq!(run1(decompress, &[], &packed).unwrap(), data, "{compress}");
        let empty = run1(compress, &[], b"").unwrap();
        assert_eq!(run1(decompress, &[], &empty).unwrap(), b"", "{compress}");
        assert_malformed(run1(decompress, &[], b"not compressed at all"), decompress);
        match run1(decompress, &[("limit", "100")], &packed) {
            Err(Error::Storage(m)) => assert!(m.contains("limit of 100 bytes"), "{m}"),
            other => panic!("{decompress} over its limit: {other:?}"),
        }
    }
    for (codec, level) in [
        ("zstd", "19"),
        ("zstd", "-5"),
        ("gzip", "1"),
        ("bzip2", "1"),
    ] {
        let packed = run1(codec, &[("level", level)], &data).unwrap();
        let back = format!("un{codec}")
            .replace("ungzip", "gunzip")
            .replace("unbzip2", "bunzip2");
        assert_eq!(run1(&back, &[], &packed).unwrap(), data);
    }
}

#[test]
fn concatenated_streams_decompress_whole() {
    let mut packed = run1("gzip", &[], b"hello ").unwrap();
    packed.extend(run1("gzip", &[], b"world").unwrap());
    assert_eq!(run1("gunzip", &[], &packed).unwrap(), b"hello world");
    let mut packed = run1("zstd", &[], b"hello ").unwrap();
    packed.extend(run1("zstd", &[], b"world").unwrap());
    assert_eq!(run1("unzstd", &[], &packed).unwrap(), b"hello world");
}

#[test]
fn sort_integers_with_negatives_both_ways() {
    let values = [5, -3, i64::MIN, 0, i64::MAX, -3, 42];
    let asc = read_i64s(&run1("sort", &[("dtype", "i64")], &i64s(&values)).unwrap());
    assert_eq!(asc, [i64::MIN, -3, -3, 0, 5, 42, i64::MAX]);
    let desc = run1(
        "sort",
        &[("dtype", "i64"), ("order", "desc")],
        &i64s(&values),
    )
    .unwrap();
    assert_eq!(read_i64s(&desc), [i64::MAX, 42, 5, 0, -3, -3, i64::MIN]);

    let small = bytes_of(&[3i32, -1, 2], i32::to_le_bytes);
    let sorted = run1("sort", &[("dtype", "i32")], &small).unwrap();
    assert_eq!(sorted, bytes_of(&[-1i32, 2, 3], i32::to_le_bytes));
    // The same bytes as unsigned: -1 is the largest.
    let sorted = run1("sort", &[("dtype", "u32")], &small).unwrap();
    assert_eq!(sorted, bytes_of(&[2i32, 3, -1], i32::to_le_bytes));
    let big = bytes_of(&[u64::MAX, 1, 1 << 63], u64::to_le_bytes);
    let sorted = run1("sort", &[("dtype", "u64")], &big).unwrap();
    assert_eq!(sorted, bytes_of(&[1, 1 << 63, u64::MAX], u64::to_le_bytes));
}

#[test]
fn sort_floats_in_total_order() {
    let values = [
        2.5,
        f64::NAN,
        -0.0,
        f64::NEG_INFINITY,
        0.0,
        -f64::NAN,
        -7.25,
        f64::INFINITY,
    ];
    let sorted = read_f64s(&run1("sort", &[("dtype", "f64")], &f64s(&values)).unwrap());
    assert!(sorted[0].is_nan() && sorted[0].is_sign_negative());
    assert_eq!(&sorted[1..3], [f64::NEG_INFINITY, -7.25]);
    assert!(sorted[3] == 0.0 && sorted[3].is_sign_negative());
    assert!(sorted[4] == 0.0 && sorted[4].is_sign_positive());
    assert_eq!(&sorted[5..7], [2.5, f64::INFINITY]);
    assert!(sorted[7].is_nan() && sorted[7].is_sign_positive());

    let f32s = bytes_of(&[1.5f32, -2.0, f32::NAN, 0.25], f32::to_le_bytes);
    let sorted = run1("sort", &[("dtype", "f32"), ("order", "desc")], &f32s).unwrap();
    let sorted: Vec<f32> = sorted
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(sorted[0].is_nan());
    assert_eq!(&sorted[1..], [1.5, 0.25, -2.0]);
}

#[test]
fn misaligned_arrays_are_refused() {
    for (function, args) in [
        ("sort", vec![("dtype", "i64")]),
        ("stats", vec![("dtype", "f64")]),
        ("median", vec![("dtype", "u64")]),
        ("filter", vec![("dtype", "i64"), ("min", "0")]),
        ("dedup", vec![("dtype", "i64")]),
        ("sample", vec![("record", "8"), ("every", "2")]),
    ] {
        assert_malformed(run1(function, &args, &[0u8; 12]), "12 bytes");
    }
    assert_malformed(run1("sort", &[("dtype", "i32")], &[0u8; 6]), "i32");
}

/// Statistics computed the obvious way, to check the fast ones against.
fn naive_stats(values: &[i64], bins: usize) -> (i128, i64, i64, f64, f64, Vec<u64>) {
    let mut sorted = values.to_vec();
    sorted.sort();
    let n = sorted.len();
    let sum: i128 = values.iter().map(|&v| v as i128).sum();
    let median = if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    };
    let (min, max) = (sorted[0], sorted[n - 1]);
    let width = (max - min) as f64 / bins as f64;
    let mut counts = vec![0u64; bins];
    for &v in values {
        let bin = ((((v - min) as f64) / width) as usize).min(bins - 1);
        counts[bin] += 1;
    }
    (sum, min, max, sum as f64 / n as f64, median, counts)
}

#[test]
fn stats_match_a_naive_computation() {
    let mut rng = fastrand::Rng::with_seed(11);
    for n in [1usize, 2, 7, 1000, 1001] {
        let values: Vec<i64> = (0..n).map(|_| rng.i64(-1_000_000..1_000_000)).collect();
        let stats = json("stats", &[("dtype", "i64"), ("bins", "7")], &i64s(&values));
        let (sum, min, max, mean, median, counts) = naive_stats(&values, 7);
        assert_eq!(stats["dtype"], "i64");
        assert_eq!(stats["count"], n);
        assert_eq!(stats["nan"], 0);
        assert_eq!(stats["sum"].as_i64().unwrap() as i128, sum);
        assert_eq!(stats["min"], min);
        assert_eq!(stats["max"], max);
        assert!((stats["mean"].as_f64().unwrap() - mean).abs() < 1e-6);
        assert_eq!(stats["median"].as_f64().unwrap(), median);
        let got: Vec<u64> = stats["histogram"]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        if n > 1 {
            assert_eq!(got, counts, "n={n}");
        } else {
            assert_eq!(got, [1, 0, 0, 0, 0, 0, 0]);
        }
    }
}

#[test]
fn stats_sums_exactly_and_skips_nan() {
    let big = bytes_of(&[u64::MAX, u64::MAX], u64::to_le_bytes);
    let out = run1("stats", &[("dtype", "u64")], &big).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\"sum\":36893488147419103230"), "{text}");

    let stats = json(
        "stats",
        &[("dtype", "f64"), ("bins", "2")],
        &f64s(&[1.0, f64::NAN, 3.0]),
    );
    assert_eq!(stats["count"], 2);
    assert_eq!(stats["nan"], 1);
    assert_eq!(stats["sum"], 4.0);
    assert_eq!(stats["mean"], 2.0);
    assert_eq!(stats["median"], 2.0);
    assert_eq!(stats["histogram"]["width"], 1.0);
    assert_eq!(stats["histogram"]["counts"], serde_json::json!([1, 1]));

    let empty = json("stats", &[("dtype", "i32")], b"");
    assert_eq!(empty["count"], 0);
    assert_eq!(empty["sum"], 0);
    for field in ["min", "max", "mean", "median"] {
        assert!(empty[field].is_null(), "{field}");
    }
    assert_eq!(empty["histogram"]["counts"].as_array().unwrap().len(), 10);
}

#[test]
fn median_of_an_integer_file() {
    // The article's Figure 10: the median of an integer file, in situ.
    let values: Vec<i32> = (1..=1001).rev().collect();
    let file = bytes_of(&values, i32::to_le_bytes);
    assert_eq!(run1("median", &[("dtype", "i32")], &file).unwrap(), b"501");

    assert_eq!(
        run1("median", &[("dtype", "i64")], &i64s(&[4, 1, 3, 2])).unwrap(),
        b"2.5"
    );
    assert_eq!(
        run1("median", &[("dtype", "i64")], &i64s(&[5, 1, 3, 9])).unwrap(),
        b"4"
    );
    // Exact for integers beyond f64's 53 bits.
    let huge = i64s(&[i64::MAX, i64::MAX - 2]);
    let expected = (i64::MAX - 1).to_string();
    assert_eq!(
        run1("median", &[("dtype", "i64")], &huge).unwrap(),
        expected.as_bytes()
    );
    let f32s = bytes_of(&[0.1f32, f32::NAN, 0.7, -3.0], f32::to_le_bytes);
    assert_eq!(run1("median", &[("dtype", "f32")], &f32s).unwrap(), b"0.1");
    assert_eq!(run1("median", &[("dtype", "f64")], b"").unwrap(), b"null");
}

#[test]
fn filter_by_range_keeps_order_and_bounds() {
    let values = i64s(&[5, -10, 3, 8, 0, 3, 12]);
    let kept = run1(
        "filter",
        &[("dtype", "i64"), ("min", "0"), ("max", "8")],
        &values,
    );
    assert_eq!(read_i64s(&kept.unwrap()), [5, 3, 8, 0, 3]);
    let kept = run1("filter", &[("dtype", "i64"), ("min", "4")], &values).unwrap();
    assert_eq!(read_i64s(&kept), [5, 8, 12]);
    let kept = run1("filter", &[("dtype", "i64"), ("max", "-1")], &values).unwrap();
    assert_eq!(read_i64s(&kept), [-10]);

    let floats = f64s(&[0.5, f64::NAN, -0.0, 2.0, f64::INFINITY]);
    let kept = run1(
        "filter",
        &[("dtype", "f64"), ("min", "0"), ("max", "inf")],
        &floats,
    );
    let kept = read_f64s(&kept.unwrap());
    assert_eq!(kept, [0.5, -0.0, 2.0, f64::INFINITY]);
}

#[test]
fn filter_by_quantile() {
    let values: Vec<i64> = (1..=100).rev().collect();
    let data = i64s(&values);
    let top = run1("filter", &[("dtype", "i64"), ("q", "0.9")], &data).unwrap();
    assert_eq!(read_i64s(&top), (90..=100).rev().collect::<Vec<_>>());
    let args = [("dtype", "i64"), ("q", "0.1"), ("keep", "below")];
    let bottom = run1("filter", &args, &data).unwrap();
    assert_eq!(read_i64s(&bottom), (1..=10).rev().collect::<Vec<_>>());
    let all = run1("filter", &[("dtype", "i64"), ("q", "0")], &data).unwrap();
    assert_eq!(all, data);
    let max = run1("filter", &[("dtype", "i64"), ("q", "1")], &data).unwrap();
    assert_eq!(read_i64s(&max), [100]);
    let floats = f64s(&[f64::NAN, 1.0, 2.0, 3.0, 4.0]);
    let kept = run1("filter", &[("dtype", "f64"), ("q", "0.5")], &floats).unwrap();
    assert_eq!(read_f64s(&kept), [2.0, 3.0, 4.0]);
    assert_eq!(
        run1("filter", &[("dtype", "f64"), ("q", "0.5")], b"").unwrap(),
        b""
    );
}

#[test]
fn filter_arguments_are_checked() {
    let check = |args: &[(&str, &str)]| validate(&[op("filter", args)], false);
    assert_invalid(check(&[("dtype", "i64")]), "needs min and/or max, or q");
    assert_invalid(
        check(&[("dtype", "i64"), ("min", "5"), ("max", "1")]),
        "min=5 is above max=1",
    );
    assert_invalid(
        check(&[("dtype", "i64"), ("min", "1.5")]),
        "min=1.5 is not a i64 value",
    );
    assert_invalid(check(&[("dtype", "f64"), ("max", "nan")]), "max=nan");
    assert_invalid(
        check(&[("dtype", "i64"), ("q", "0.5"), ("min", "1")]),
        "not both",
    );
    assert_invalid(
        check(&[("dtype", "i64"), ("q", "1.5")]),
        "q=1.5 is out of range",
    );
    assert_invalid(
        check(&[("dtype", "i64"), ("min", "1"), ("keep", "above")]),
        "keep applies to q",
    );
    assert_invalid(
        check(&[("dtype", "i64"), ("q", "0.5"), ("keep", "up")]),
        "keep=up is not above or below",
    );
}

#[test]
fn wordcount_summarizes_text() {
    let text = "The cat saw the dog.\nThe DOG ran; a cat, the end\nlast line without newline";
    let summary = json("wordcount", &[("top", "3")], text.as_bytes());
    assert_eq!(summary["bytes"], text.len());
    assert_eq!(summary["lines"], 3);
    assert_eq!(summary["words"], 16);
    assert_eq!(summary["distinct"], 11);
    assert_eq!(
        summary["top"],
        serde_json::json!([
            {"word": "the", "count": 4},
            {"word": "cat", "count": 2},
            {"word": "dog", "count": 2},
        ])
    );
    let unicode = json("wordcount", &[], "héllo wörld héllo\n".as_bytes());
    assert_eq!(unicode["words"], 3);
    assert_eq!(unicode["lines"], 1);
    assert_eq!(
        unicode["top"][0],
        serde_json::json!({"word": "héllo", "count": 2})
    );
    let empty = json("wordcount", &[], b"");
    assert_eq!(
        (empty["words"].as_u64(), empty["lines"].as_u64()),
        (Some(0), Some(0))
    );
    assert_malformed(
        run1("wordcount", &[], b"ok \xff\xfe"),
        "not UTF-8 text (invalid byte at offset 3)",
    );
}

#[test]
fn encryption_round_trips_and_detects_tampering() {
    let key = app_key("secret of app 7");
    let data = sample_text();
    let sealed = run_with(&[op("encrypt", &[])], &data, Some(key)).unwrap();
    assert_eq!(sealed.len(), data.len() + 12 + 16);
    assert!(
        !sealed.windows(32).any(|w| w == &data[..32]),
        "plaintext visible"
    );
    let again = run_with(&[op("encrypt", &[])], &data, Some(key)).unwrap();
    assert_ne!(sealed[..12], again[..12], "nonces must differ");
    assert_eq!(
        run_with(&[op("decrypt", &[])], &sealed, Some(key)).unwrap(),
        data
    );
    let empty = run_with(&[op("encrypt", &[])], b"", Some(key)).unwrap();
    assert_eq!(
        run_with(&[op("decrypt", &[])], &empty, Some(key)).unwrap(),
        b""
    );

    for position in [0, 12, sealed.len() / 2, sealed.len() - 1] {
        let mut tampered = sealed.clone();
        tampered[position] ^= 1;
        assert_malformed(
            run_with(&[op("decrypt", &[])], &tampered, Some(key)),
            "authentication failed",
        );
    }
    let other = app_key("another secret");
    assert_malformed(
        run_with(&[op("decrypt", &[])], &sealed, Some(other)),
        "authentication failed",
    );
    assert_malformed(
        run_with(&[op("decrypt", &[])], &sealed[..20], Some(key)),
        "too short",
    );
    for function in ["encrypt", "decrypt"] {
        match run_with(&[op(function, &[])], &sealed, None) {
            Err(Error::PermissionDenied(m)) => {
                assert!(
                    m.contains(function) && m.contains("key of application 7"),
                    "{m}"
                )
            }
            other => panic!("{function} without a key: {other:?}"),
        }
    }
}

#[test]
fn app_keys_are_derived_deterministically() {
    assert_eq!(app_key("s3cret"), app_key("s3cret"));
    assert_ne!(app_key("s3cret"), app_key("s3cret2"));
    assert_ne!(app_key(""), [0u8; 32]);
}

#[test]
fn checksums_match_known_vectors() {
    let cases: [(&str, &[u8], &str); 6] = [
        ("crc32c", b"123456789", "e3069283"),
        ("crc32c", b"", "00000000"),
        ("xxh3", b"", "2d06800538d394c2"),
        (
            "sha256",
            b"abc",
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ),
        (
            "sha256",
            b"",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ),
        ("xxh3", b"abc", "78af5f94892f3950"),
    ];
    for (function, input, hex) in cases {
        assert_eq!(
            run1(function, &[], input).unwrap(),
            hex.as_bytes(),
            "{function}"
        );
    }
}

#[test]
fn sampling_is_deterministic_for_a_seed() {
    let values: Vec<i64> = (0..10_000).collect();
    let data = i64s(&values);
    let every = run1("sample", &[("dtype", "i64"), ("every", "1000")], &data).unwrap();
    assert_eq!(
        read_i64s(&every),
        (0..10).map(|i| i * 1000).collect::<Vec<_>>()
    );

    let args = [("dtype", "i64"), ("fraction", "0.1"), ("seed", "42")];
    let first = run1("sample", &args, &data).unwrap();
    assert_eq!(run1("sample", &args, &data).unwrap(), first);
    let kept = read_i64s(&first);
    assert!((800..1200).contains(&kept.len()), "{} kept", kept.len());
    assert!(kept.windows(2).all(|w| w[0] < w[1]), "order preserved");
    let other = run1(
        "sample",
        &[("dtype", "i64"), ("fraction", "0.1"), ("seed", "43")],
        &data,
    );
    assert_ne!(other.unwrap(), first);
    assert_eq!(
        run1("sample", &[("dtype", "i64"), ("fraction", "0")], &data).unwrap(),
        b""
    );
    assert_eq!(
        run1("sample", &[("dtype", "i64"), ("fraction", "1")], &data).unwrap(),
        data
    );

    let lines = run1(
        "sample",
        &[("record", "line"), ("every", "2")],
        b"a\nb\nc\nd",
    );
    assert_eq!(lines.unwrap(), b"a\nc\n");
}

#[test]
fn dedup_keeps_first_occurrences() {
    let data = i64s(&[3, 1, 3, 2, 1, 3]);
    assert_eq!(
        read_i64s(&run1("dedup", &[("dtype", "i64")], &data).unwrap()),
        [3, 1, 2]
    );
    let data = b"ab cd ab ef cd ";
    assert_eq!(
        run1("dedup", &[("record", "3")], data).unwrap(),
        b"ab cd ef "
    );
    let text = b"x\ny\nx\nz\ny\nx";
    assert_eq!(
        run1("dedup", &[("record", "line")], text).unwrap(),
        b"x\ny\nz\nx"
    );
    assert_invalid(validate(&[op("dedup", &[])], false), "needs dtype=");
    assert_invalid(
        validate(&[op("dedup", &[("dtype", "i64"), ("record", "8")])], false),
        "not both",
    );
    assert_invalid(
        validate(&[op("dedup", &[("record", "0")])], false),
        "record=0 is out of range",
    );
}

#[test]
fn pipelines_run_in_declared_order() {
    let values = [9i64, -4, 7, 0, 7, 100, -50];
    let ops = [
        op("sort", &[("dtype", "i64")]),
        op("zstd", &[("level", "5")]),
        op("unzstd", &[]),
    ];
    let out = run(&ops, &i64s(&values)).unwrap();
    assert_eq!(read_i64s(&out), [-50, -4, 0, 7, 7, 9, 100]);

    // Filter, then summarize what is left.
    let ops = [
        op("filter", &[("dtype", "i64"), ("min", "0")]),
        op("dedup", &[("dtype", "i64")]),
        op("stats", &[("dtype", "i64")]),
    ];
    let stats: Value = serde_json::from_slice(&run(&ops, &i64s(&values)).unwrap()).unwrap();
    assert_eq!(
        (stats["count"].as_u64(), stats["sum"].as_i64()),
        (Some(4), Some(116))
    );

    // Compress before encrypting, the order that makes compression useful.
    let key = app_key("k");
    let data = sample_text();
    let sealed = run_with(&[op("lz4", &[]), op("encrypt", &[])], &data, Some(key)).unwrap();
    assert!(sealed.len() < data.len() / 2);
    let opened = run_with(&[op("decrypt", &[]), op("unlz4", &[])], &sealed, Some(key));
    assert_eq!(opened.unwrap(), data);

    assert_eq!(run(&[], b"unchanged").unwrap(), b"unchanged");
}

#[test]
fn a_failing_step_names_its_function() {
    // zstd's output is not a whole number of i64 values here.
    let ops = [op("zstd", &[]), op("sort", &[("dtype", "i64")])];
    assert_malformed(run(&ops, b"abc"), "function sort");
}

#[test]
fn validation_refuses_bad_pipelines_with_clear_messages() {
    let refuse = |ops: &[Operation], expected: &str| assert_invalid(validate(ops, false), expected);
    refuse(
        &[op("zstd", &[]), op("frobnicate", &[])],
        "unknown function frobnicate (the built-ins are zstd, unzstd,",
    );
    refuse(
        &[op("zstd", &[("lvl", "3")])],
        "function zstd has no argument `lvl` (it takes: level)",
    );
    refuse(
        &[op("lz4", &[("level", "3")])],
        "function lz4 has no argument `level` (it takes: no arguments)",
    );
    refuse(
        &[op("zstd", &[("level", "99")])],
        "level=99 is out of range",
    );
    refuse(
        &[op("gzip", &[("level", "fast")])],
        "level=fast is not a number",
    );
    refuse(
        &[op("sort", &[])],
        "function sort needs dtype=i32|i64|u32|u64|f32|f64",
    );
    refuse(
        &[op("sort", &[("dtype", "i16")])],
        "dtype=i16 is not one of",
    );
    refuse(
        &[op("sort", &[("dtype", "i64"), ("order", "up")])],
        "order=up is not asc or desc",
    );
    refuse(
        &[op("sort", &[("dtype", "i64"), ("dtype", "i32")])],
        "argument `dtype` is given twice",
    );
    refuse(
        &[op("stats", &[("dtype", "i64"), ("bins", "0")])],
        "bins=0 is out of range",
    );
    refuse(
        &[op("sample", &[("dtype", "i64")])],
        "needs every=K or fraction=F",
    );
    refuse(
        &[op(
            "sample",
            &[("dtype", "i64"), ("every", "2"), ("fraction", "0.5")],
        )],
        "not both",
    );
    refuse(
        &[op(
            "sample",
            &[("dtype", "i64"), ("every", "2"), ("seed", "1")],
        )],
        "seed applies to fraction",
    );
    refuse(
        &[op("sample", &[("dtype", "i64"), ("every", "0")])],
        "every=0 is out of range",
    );
    refuse(
        &[op("sha256", &[("salt", "x")])],
        "function sha256 has no argument `salt`",
    );
    // apply refuses the same pipelines before running anything.
    assert_invalid(
        run(&[op("zstd", &[("lvl", "3")])], b"x"),
        "no argument `lvl`",
    );
}

#[test]
fn every_listed_builtin_is_accepted() {
    let args: HashMap<&str, Vec<(&str, &str)>> = HashMap::from([
        ("sort", vec![("dtype", "i64")]),
        ("dedup", vec![("dtype", "i64")]),
        ("stats", vec![("dtype", "i64")]),
        ("median", vec![("dtype", "i64")]),
        ("filter", vec![("dtype", "i64"), ("q", "0.5")]),
        ("sample", vec![("dtype", "i64"), ("every", "2")]),
    ]);
    assert_eq!(builtins().len(), 20);
    for (name, description) in builtins() {
        assert!(!description.is_empty());
        let given = args.get(name).cloned().unwrap_or_default();
        validate(&[op(name, &given)], false).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn user_function_names_and_arguments_are_checked() {
    validate(&[op("my_fn-2.v1", &[("k", "v")])], true).unwrap();
    assert_invalid(
        validate(&[op("my fn", &[])], true),
        "function name \"my fn\" is not valid",
    );
    assert_invalid(validate(&[op("", &[])], true), "is not valid");
    assert_invalid(
        validate(&[op("f", &[("a=b", "c")])], true),
        "key=value line",
    );
    assert_invalid(
        validate(&[op("f", &[("a", "multi\nline")])], true),
        "key=value line",
    );
    assert_invalid(
        validate(&[op("f", &[])], false),
        "user functions are not allowed here",
    );
}

#[test]
fn unregistered_user_functions_fail_before_anything_runs() {
    let ops = [op("zstd", &[]), op("private_fn", &[])];
    assert_invalid(
        run(&ops, b"data"),
        "unknown function private_fn (not a built-in and not registered by application 7)",
    );
}
