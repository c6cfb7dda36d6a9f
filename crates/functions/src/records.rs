//! Functions over records of any type: `dedup` and `sample`. A record is
//! either a fixed number of bytes (a value of some dtype, a struct) or a
//! newline-terminated line of text, and is compared bytewise.

use std::collections::HashSet;

use labios_label::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record {
    Bytes(usize),
    /// A line including its `\n`; a last line without one is a record too.
    Line,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Sampling {
    /// Records 0, k, 2k, ...
    Every(usize),
    /// Each record independently with this probability, from a PRNG seeded
    /// with `seed`, so that the same label always yields the same sample.
    Fraction { fraction: f64, seed: u64 },
}

fn for_each_record<'a>(
    function: &str,
    input: &'a [u8],
    record: Record,
    visit: impl FnMut(&'a [u8]),
) -> Result<()> {
    match record {
        Record::Bytes(size) => {
            if !input.len().is_multiple_of(size) {
                return Err(Error::Malformed(format!(
                    "function {function}: the input ({} bytes) is not a whole number of {size}-byte records",
                    input.len()
                )));
            }
            input.chunks_exact(size).for_each(visit);
        }
        Record::Line => input.split_inclusive(|&b| b == b'\n').for_each(visit),
    }
    Ok(())
}

/// Drops records seen before, keeping first occurrences in their order.
pub(crate) fn dedup(function: &str, input: &[u8], record: Record) -> Result<Vec<u8>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for_each_record(function, input, record, |r| {
        if seen.insert(r) {
            out.extend_from_slice(r);
        }
    })?;
    Ok(out)
}

pub(crate) fn sample(
    function: &str,
    input: &[u8],
    record: Record,
    sampling: Sampling,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    match sampling {
        Sampling::Every(k) => {
            let mut index = 0usize;
            for_each_record(function, input, record, |r| {
                if index.is_multiple_of(k) {
                    out.extend_from_slice(r);
                }
                index += 1;
            })?;
        }
        Sampling::Fraction { fraction, seed } => {
            let mut rng = fastrand::Rng::with_seed(seed);
            for_each_record(function, input, record, |r| {
                if rng.f64() < fraction {
                    out.extend_from_slice(r);
                }
            })?;
        }
    }
    Ok(out)
}
