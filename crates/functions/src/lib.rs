//! The functions LABIOS workers apply to a label's data (article 3.6.2d):
//! software-defined storage, so that data is sorted, compressed, encrypted
//! or summarized where it lives instead of crossing to the client.
//!
//! A label carries a pipeline of [`Operation`]s; [`validate`] checks it when
//! the label is submitted, [`apply`] runs it at the worker, each function's
//! output feeding the next. A function is a built-in ([`builtins`]) or a
//! WebAssembly module the application registered, run in a [`Sandbox`].
//!
//! # Data conventions
//!
//! Arrays are little-endian values of one `dtype`: `i32`, `i64`, `u32`,
//! `u64`, `f32` or `f64`; input whose length is not a multiple of the value
//! size is an error. Floats sort in IEEE 754 total order (negative NaN
//! first, positive NaN last); statistics, medians and filters skip NaNs.
//! `dedup` and `sample` work on records: `dtype=T` (values of that size),
//! `record=BYTES`, or `record=line` (newline-terminated text), compared
//! bytewise. Summaries (`stats`, `median`, `wordcount`) are JSON; checksums
//! are lowercase hex text.
//!
//! # Errors
//!
//! - [`Error::InvalidArgument`]: an unknown function or argument, a bad
//!   argument value, an invalid module or one that does not follow the ABI.
//! - [`Error::Malformed`]: input the function cannot take (misaligned
//!   array, corrupt compressed data, failed decryption, non-UTF-8 text).
//! - [`Error::PermissionDenied`]: `encrypt`/`decrypt` without a key.
//! - [`Error::Unavailable`]: a user function where no sandbox runs.
//! - [`Error::Storage`]: a function that failed while running (a module out
//!   of fuel, time or memory, trapped, or returning an error code;
//!   decompressed output over its limit).
//!
//! Every message names the function.
//!
//! # User functions: the module ABI
//!
//! A module imports nothing and exports:
//!
//! - `memory`: its linear memory (32-bit);
//! - `labios_alloc(len: i32) -> i32`: returns the address of `len` free
//!   bytes, where the host copies data;
//! - `labios_run(in_ptr: i32, in_len: i32, args_ptr: i32, args_len: i32) -> i64`:
//!   runs the function on the input and arguments the host placed with
//!   `labios_alloc`, and returns `(out_ptr << 32) | out_len`, the output in
//!   its memory (below 2 GiB); a negative value reports failure, and the
//!   label fails with that error code.
//!
//! Arguments arrive as UTF-8 `key=value` lines, each ending in `\n`. Every
//! call runs in a fresh instance, so a bump allocator that never frees is
//! enough. A module that exceeds its fuel, time or memory limit
//! ([`SandboxLimits`]) or traps fails its label only. This module uppercases
//! ASCII text:
//!
//! ```wat
#![doc = include_str!("uppercase.wat")]
//! ```
//!
//! `apply` is CPU-bound and synchronous: async callers run it on a blocking
//! thread.

mod array;
mod codec;
mod crypto;
mod module;
mod pipeline;
mod records;
mod sandbox;
mod text;

use std::collections::HashMap;

use bytes::Bytes;
pub use labios_label::{AppId, Error, Operation, Result};

pub use crate::crypto::app_key;
pub use crate::module::check_module;
use crate::pipeline::Step;
pub use crate::sandbox::{Sandbox, SandboxLimits};

/// What a pipeline runs with, on behalf of one application.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// The application whose label this is; named in errors.
    pub app: AppId,
    /// The application's key for `encrypt`/`decrypt` ([`app_key`]).
    pub key: Option<[u8; 32]>,
    /// The application's registered modules by function name, already
    /// fetched: only its own, so no application runs another's functions.
    /// A built-in's name always means the built-in, so registration should
    /// refuse those names.
    pub modules: &'a HashMap<String, Bytes>,
    /// `None` where user functions may not run.
    pub sandbox: Option<&'a Sandbox>,
}

pub(crate) const BUILTINS: &[(&str, &str)] = &[
    ("zstd", "compress with Zstandard (level up to 22, negative for speed, default 3)"),
    ("unzstd", "decompress Zstandard (limit=max output bytes, default 1 GiB)"),
    ("lz4", "compress to the LZ4 frame format"),
    ("unlz4", "decompress the LZ4 frame format (limit=max output bytes, default 1 GiB)"),
    ("gzip", "compress with gzip (level=0..9, default 6)"),
    ("gunzip", "decompress gzip (limit=max output bytes, default 1 GiB)"),
    ("bzip2", "compress with bzip2 (level=1..9, default 9)"),
    ("bunzip2", "decompress bzip2 (limit=max output bytes, default 1 GiB)"),
    ("sort", "sort an array (dtype=i32|i64|u32|u64|f32|f64, order=asc|desc)"),
    ("dedup", "drop repeated records, keeping first occurrences in order (dtype=T or record=BYTES|line)"),
    ("stats", "count, sum, min, max, mean, median and histogram of an array as JSON (dtype=T, bins=10)"),
    ("median", "the median of an array as a JSON number (dtype=T)"),
    ("filter", "keep array values in [min, max], or above/below the q-quantile (dtype=T, min=, max= | q=, keep=above|below)"),
    ("wordcount", "bytes, lines, words and the top words of UTF-8 text as JSON (top=10)"),
    ("encrypt", "encrypt with AES-256-GCM and the application's key (random nonce prepended)"),
    ("decrypt", "decrypt and authenticate what encrypt produced"),
    ("crc32c", "CRC-32C checksum as hex text"),
    ("xxh3", "XXH3 64-bit hash as hex text"),
    ("sha256", "SHA-256 digest as hex text"),
    ("sample", "every k-th record or a seeded random fraction (dtype=T or record=BYTES|line; every=K | fraction=F, seed=0)"),
];

/// The built-in functions, name and one-line description.
pub fn builtins() -> &'static [(&'static str, &'static str)] {
    BUILTINS
}

/// Whether `name` is a built-in (which always wins over a user function).
pub fn is_builtin(name: &str) -> bool {
    BUILTINS.iter().any(|(b, _)| *b == name)
}

/// Checks function names and arguments, so that a label with a bad pipeline
/// is refused when submitted. A name that is not a built-in passes only if
/// `user_functions_allowed` (whether it is registered is known at the worker).
pub fn validate(ops: &[Operation], user_functions_allowed: bool) -> Result<()> {
    ops.iter()
        .try_for_each(|op| pipeline::parse(op, user_functions_allowed).map(drop))
}

/// Runs the pipeline in its declared order; the input comes back unchanged
/// for an empty one. Every function is resolved before any runs.
pub fn apply(ops: &[Operation], input: Bytes, ctx: &Context) -> Result<Bytes> {
    let steps = ops
        .iter()
        .map(|op| pipeline::parse(op, true))
        .collect::<Result<Vec<_>>>()?;
    for step in &steps {
        if let Step::User(op) = step {
            module(op, ctx)?;
        }
    }
    steps.iter().try_fold(input, |data, step| {
        let out = match step {
            Step::Builtin(name, builtin) => builtin.run(name, &data, ctx)?,
            Step::User(op) => {
                let (sandbox, wasm) = module(op, ctx)?;
                sandbox.run(&op.function, wasm, &data, &op.args)?
            }
        };
        Ok(Bytes::from(out))
    })
}

fn module<'a>(op: &Operation, ctx: &Context<'a>) -> Result<(&'a Sandbox, &'a Bytes)> {
    let wasm = ctx.modules.get(&op.function).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown function {} (not a built-in and not registered by application {})",
            op.function, ctx.app
        ))
    })?;
    let sandbox = ctx.sandbox.ok_or_else(|| {
        Error::Unavailable(format!(
            "function {} is a user function, and this worker runs none",
            op.function
        ))
    })?;
    Ok((sandbox, wasm))
}
