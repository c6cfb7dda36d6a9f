//! Pipeline specs: the text the CLI, the C API and the Python package take
//! (`Operation::parse_pipeline`), then the check the client runs before
//! submitting and the worker runs before executing
//! (`labios_functions::validate`), with and without user functions. The
//! same bytes are also read as operations built field by field, as they
//! arrive inside a decoded label (any strings, no parsing): lines of
//! `FUNCTION\tKEY\tVALUE\t...`.

use crate::engine::Target;
use labios_label::Operation;
use std::time::Duration;

pub static TARGET: Target = Target {
    name: "pipeline",
    about: "Operation::parse_pipeline + labios_functions::validate",
    run,
    seeds,
    dictionary: &[
        b"|",
        b":",
        b",",
        b"=",
        b"\t",
        b"\n",
        b"dtype",
        b"level",
        b"limit",
        b"order",
        b"bins",
        b"min",
        b"max",
        b"q",
        b"keep",
        b"top",
        b"record",
        b"every",
        b"fraction",
        b"seed",
        b"i32",
        b"u64",
        b"f32",
        b"f64",
        b"line",
        b"desc",
        b"above",
    ],
    max_len: 1024,
    default_inputs: 10_000_000,
    smoke_inputs: 60_000,
    cost: 1,
    hang: Duration::from_secs(2),
};

fn seeds() -> Vec<Vec<u8>> {
    [
        "sort:dtype=i64,order=desc | zstd:level=19",
        "zstd",
        "unzstd:limit=1048576|gunzip:limit=10",
        "lz4|unlz4|gzip:level=9|bzip2:level=1|bunzip2",
        "dedup:record=line|sample:record=16,fraction=0.25,seed=7",
        "sample:dtype=u32,every=3",
        "stats:dtype=f64,bins=100|median:dtype=i32",
        "filter:dtype=f32,min=-1.5,max=2.5",
        "filter:dtype=u64,q=0.9,keep=below",
        "wordcount:top=5|encrypt|decrypt|crc32c|xxh3|sha256",
        "my-func.v2:threshold=0.5,mode=fast|sort:dtype=u32",
        "upper\tmode\tfast\nsort\tdtype\ti32",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn run(data: &[u8]) {
    let spec = String::from_utf8_lossy(data);
    if let Ok(ops) = Operation::parse_pipeline(&spec) {
        check(&ops);
    }
    let fields: Vec<Operation> = spec
        .split('\n')
        .map(|line| {
            let mut parts = line.split('\t');
            let function = parts.next().unwrap_or_default().to_string();
            let rest: Vec<&str> = parts.collect();
            Operation {
                function,
                args: rest
                    .chunks(2)
                    .map(|kv| (kv[0].to_string(), kv.get(1).unwrap_or(&"").to_string()))
                    .collect(),
            }
        })
        .collect();
    check(&fields);
}

fn check(ops: &[Operation]) {
    let builtins_only = labios_functions::validate(ops, false);
    let with_user = labios_functions::validate(ops, true);
    assert!(
        builtins_only.is_err() || with_user.is_ok(),
        "a pipeline of built-ins is refused once user functions are allowed: {ops:?}: {with_user:?}"
    );
}
