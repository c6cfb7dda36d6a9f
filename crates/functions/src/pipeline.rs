//! Parsing operations into typed steps, once, so that validation at submit
//! time and execution at the worker accept exactly the same pipelines.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::str::FromStr;

use labios_label::{Error, Operation, Result};

use crate::array::{self, with_dtype, DType, Filter};
use crate::codec::{Codec, CODECS, DEFAULT_LIMIT};
use crate::crypto::{self, Checksum};
use crate::records::{self, Record, Sampling};
use crate::{text, Context, BUILTINS};

/// Largest `bins` of a histogram: the JSON stays small.
const MAX_BINS: usize = 1 << 16;
/// Longest user function name.
const MAX_NAME: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Builtin {
    Compress(Codec, i32),
    Decompress(Codec, u64),
    Sort(DType, bool),
    Dedup(Record),
    Stats(DType, usize),
    Median(DType),
    Filter(DType, Filter),
    Wordcount(usize),
    Encrypt,
    Decrypt,
    Checksum(Checksum),
    Sample(Record, Sampling),
}

pub(crate) enum Step<'a> {
    Builtin(&'a str, Builtin),
    /// A function from the application's program repository.
    User(&'a Operation),
}

/// The arguments of one operation, checked against the names the function
/// takes so that a misspelt argument is an error rather than ignored.
struct Args<'a> {
    function: &'a str,
    pairs: &'a [(String, String)],
}

impl<'a> Args<'a> {
    fn new(op: &'a Operation, takes: &[&str]) -> Result<Self> {
        let function = op.function.as_str();
        for (i, (key, _)) in op.args.iter().enumerate() {
            if !takes.contains(&key.as_str()) {
                let takes = if takes.is_empty() {
                    "no arguments".to_string()
                } else {
                    takes.join(", ")
                };
                return Err(invalid(format!(
                    "function {function} has no argument `{key}` (it takes: {takes})"
                )));
            }
            if op.args[..i].iter().any(|(k, _)| k == key) {
                return Err(invalid(format!(
                    "function {function}: argument `{key}` is given twice"
                )));
            }
        }
        Ok(Args {
            function,
            pairs: &op.args,
        })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn number<T: FromStr + PartialOrd + Display>(
        &self,
        key: &str,
        range: RangeInclusive<T>,
    ) -> Result<Option<T>> {
        let Some(text) = self.get(key) else {
            return Ok(None);
        };
        let value = text.parse::<T>().map_err(|_| {
            invalid(format!(
                "function {}: {key}={text} is not a number",
                self.function
            ))
        })?;
        if !range.contains(&value) {
            return Err(invalid(format!(
                "function {}: {key}={text} is out of range ({}..={})",
                self.function,
                range.start(),
                range.end()
            )));
        }
        Ok(Some(value))
    }

    fn dtype(&self) -> Result<Option<DType>> {
        self.get("dtype")
            .map(|name| {
                DType::parse(name).ok_or_else(|| {
                    invalid(format!(
                        "function {}: dtype={name} is not one of {}",
                        self.function,
                        DType::NAMES
                    ))
                })
            })
            .transpose()
    }

    fn required_dtype(&self) -> Result<DType> {
        self.dtype()?.ok_or_else(|| {
            invalid(format!(
                "function {} needs dtype={}",
                self.function,
                DType::NAMES
            ))
        })
    }

    /// `dtype=T` (records of its size) or `record=BYTES|line`.
    fn record(&self) -> Result<Record> {
        match (self.dtype()?, self.get("record")) {
            (Some(_), Some(_)) => Err(invalid(format!(
                "function {}: give dtype or record, not both",
                self.function
            ))),
            (Some(dtype), None) => Ok(Record::Bytes(dtype.size())),
            (None, Some("line")) => Ok(Record::Line),
            (None, Some(_)) => Ok(Record::Bytes(
                self.number("record", 1..=usize::MAX)?
                    .expect("record is present"),
            )),
            (None, None) => Err(invalid(format!(
                "function {} needs dtype={} or record=BYTES|line",
                self.function,
                DType::NAMES
            ))),
        }
    }

    fn choice(&self, key: &str, choices: [&str; 2]) -> Result<bool> {
        match self.get(key) {
            None => Ok(false),
            Some(v) if v == choices[0] => Ok(false),
            Some(v) if v == choices[1] => Ok(true),
            Some(v) => Err(invalid(format!(
                "function {}: {key}={v} is not {} or {}",
                self.function, choices[0], choices[1]
            ))),
        }
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

fn builtin(op: &Operation) -> Result<Option<Builtin>> {
    let name = op.function.as_str();
    if let Some(&(codec, _, _)) = CODECS.iter().find(|c| c.1 == name) {
        let Some((range, default)) = codec.levels() else {
            Args::new(op, &[])?;
            return Ok(Some(Builtin::Compress(codec, 0)));
        };
        let level = Args::new(op, &["level"])?.number("level", range)?;
        return Ok(Some(Builtin::Compress(codec, level.unwrap_or(default))));
    }
    if let Some(&(codec, _, _)) = CODECS.iter().find(|c| c.2 == name) {
        let limit = Args::new(op, &["limit"])?.number("limit", 0..=u64::MAX)?;
        return Ok(Some(Builtin::Decompress(
            codec,
            limit.unwrap_or(DEFAULT_LIMIT),
        )));
    }
    Ok(Some(match name {
        "sort" => {
            let args = Args::new(op, &["dtype", "order"])?;
            Builtin::Sort(
                args.required_dtype()?,
                args.choice("order", ["asc", "desc"])?,
            )
        }
        "dedup" => Builtin::Dedup(Args::new(op, &["dtype", "record"])?.record()?),
        "stats" => {
            let args = Args::new(op, &["dtype", "bins"])?;
            let bins = args.number("bins", 1..=MAX_BINS)?.unwrap_or(10);
            Builtin::Stats(args.required_dtype()?, bins)
        }
        "median" => Builtin::Median(Args::new(op, &["dtype"])?.required_dtype()?),
        "filter" => {
            let args = Args::new(op, &["dtype", "min", "max", "q", "keep"])?;
            let dtype = args.required_dtype()?;
            Builtin::Filter(dtype, filter(&args, dtype)?)
        }
        "wordcount" => {
            let top = Args::new(op, &["top"])?.number("top", 0..=usize::MAX)?;
            Builtin::Wordcount(top.unwrap_or(10))
        }
        "encrypt" => {
            Args::new(op, &[])?;
            Builtin::Encrypt
        }
        "decrypt" => {
            Args::new(op, &[])?;
            Builtin::Decrypt
        }
        "crc32c" | "xxh3" | "sha256" => {
            Args::new(op, &[])?;
            Builtin::Checksum(match name {
                "crc32c" => Checksum::Crc32c,
                "xxh3" => Checksum::Xxh3,
                _ => Checksum::Sha256,
            })
        }
        "sample" => {
            let args = Args::new(op, &["dtype", "record", "every", "fraction", "seed"])?;
            Builtin::Sample(args.record()?, sampling(&args)?)
        }
        _ => return Ok(None),
    }))
}

fn filter(args: &Args, dtype: DType) -> Result<Filter> {
    let (min, max) = (args.get("min"), args.get("max"));
    let q = args.number("q", 0.0..=1.0)?;
    match q {
        Some(_) if min.is_some() || max.is_some() => Err(invalid(format!(
            "function {}: give min/max or q, not both",
            args.function
        ))),
        Some(q) => Ok(Filter::Quantile {
            q,
            above: !args.choice("keep", ["above", "below"])?,
        }),
        None if args.get("keep").is_some() => Err(invalid(format!(
            "function {}: keep applies to q only",
            args.function
        ))),
        None if min.is_none() && max.is_none() => Err(invalid(format!(
            "function {} needs min and/or max, or q (a quantile in 0..=1)",
            args.function
        ))),
        None => {
            // Parse now, so that a bad bound is refused at submit time.
            with_dtype!(dtype, T => {
                let lo = min.map(|m| array::bound::<T>(args.function, "min", m)).transpose()?;
                let hi = max.map(|m| array::bound::<T>(args.function, "max", m)).transpose()?;
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    if lo > hi {
                        return Err(invalid(format!(
                            "function {}: min={} is above max={}",
                            args.function,
                            min.unwrap_or_default(),
                            max.unwrap_or_default()
                        )));
                    }
                }
            });
            Ok(Filter::Range {
                min: min.map(str::to_string),
                max: max.map(str::to_string),
            })
        }
    }
}

fn sampling(args: &Args) -> Result<Sampling> {
    let every = args.number("every", 1..=usize::MAX)?;
    let fraction = args.number("fraction", 0.0..=1.0)?;
    let seed = args.number("seed", 0..=u64::MAX)?;
    match (every, fraction) {
        (Some(_), Some(_)) => Err(invalid(format!(
            "function {}: give every or fraction, not both",
            args.function
        ))),
        (Some(_), None) if seed.is_some() => Err(invalid(format!(
            "function {}: seed applies to fraction only",
            args.function
        ))),
        (Some(every), None) => Ok(Sampling::Every(every)),
        (None, Some(fraction)) => Ok(Sampling::Fraction {
            fraction,
            seed: seed.unwrap_or(0),
        }),
        (None, None) => Err(invalid(format!(
            "function {} needs every=K or fraction=F",
            args.function
        ))),
    }
}

/// Arguments reach a module as `key=value` lines, so neither may break that
/// framing.
fn check_user(op: &Operation) -> Result<()> {
    let name = &op.function;
    let valid_name = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if !valid_name {
        return Err(invalid(format!(
            "function name {name:?} is not valid (1 to {MAX_NAME} letters, digits, `_`, `-` or `.`)"
        )));
    }
    for (key, value) in &op.args {
        if key.is_empty() || key.contains(['=', '\n']) || value.contains('\n') {
            return Err(invalid(format!(
                "function {name}: argument {key:?}={value:?} cannot be passed as a key=value line"
            )));
        }
    }
    Ok(())
}

pub(crate) fn parse(op: &Operation, user_functions_allowed: bool) -> Result<Step<'_>> {
    if let Some(builtin) = builtin(op)? {
        return Ok(Step::Builtin(&op.function, builtin));
    }
    if !user_functions_allowed {
        let names: Vec<&str> = BUILTINS.iter().map(|(name, _)| *name).collect();
        return Err(invalid(format!(
            "unknown function {} (the built-ins are {}; user functions are not allowed here)",
            op.function,
            names.join(", ")
        )));
    }
    check_user(op)?;
    Ok(Step::User(op))
}

impl Builtin {
    pub(crate) fn run(&self, function: &str, input: &[u8], ctx: &Context) -> Result<Vec<u8>> {
        let f = function;
        match self {
            Builtin::Compress(codec, level) => codec.compress(f, input, *level),
            Builtin::Decompress(codec, limit) => codec.decompress(f, input, *limit),
            Builtin::Sort(dtype, descending) => {
                with_dtype!(*dtype, T => array::sort::<T>(f, input, *descending))
            }
            Builtin::Dedup(record) => records::dedup(f, input, *record),
            Builtin::Stats(dtype, bins) => {
                with_dtype!(*dtype, T => array::stats::<T>(f, input, *bins))
            }
            Builtin::Median(dtype) => with_dtype!(*dtype, T => array::median_json::<T>(f, input)),
            Builtin::Filter(dtype, spec) => {
                with_dtype!(*dtype, T => array::filter::<T>(f, input, spec))
            }
            Builtin::Wordcount(top) => text::wordcount(input, *top),
            Builtin::Encrypt => crypto::encrypt(ctx.app, ctx.key.as_ref(), input),
            Builtin::Decrypt => crypto::decrypt(ctx.app, ctx.key.as_ref(), input),
            Builtin::Checksum(kind) => Ok(crypto::checksum(*kind, input)),
            Builtin::Sample(record, sampling) => records::sample(f, input, *record, *sampling),
        }
    }
}
