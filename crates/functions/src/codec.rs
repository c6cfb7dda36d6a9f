//! Compression and decompression. Every codec writes its standard container
//! format (`.zst`, `.lz4` frames, `.gz`, `.bz2`), so data compressed at a
//! worker can be read back with the usual command-line tools.

use std::io::{Read, Write};
use std::ops::RangeInclusive;

use labios_label::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    Zstd,
    Lz4,
    Gzip,
    Bzip2,
}

/// Each codec with its compressing and decompressing function names.
pub(crate) const CODECS: [(Codec, &str, &str); 4] = [
    (Codec::Zstd, "zstd", "unzstd"),
    (Codec::Lz4, "lz4", "unlz4"),
    (Codec::Gzip, "gzip", "gunzip"),
    (Codec::Bzip2, "bzip2", "bunzip2"),
];

/// Decompressed output beyond this needs an explicit `limit`: a few bytes of
/// crafted input must not make a worker allocate without bound.
pub(crate) const DEFAULT_LIMIT: u64 = 1 << 30;

impl Codec {
    fn format(self) -> &'static str {
        match self {
            Codec::Zstd => "zstd",
            Codec::Lz4 => "LZ4 frame",
            Codec::Gzip => "gzip",
            Codec::Bzip2 => "bzip2",
        }
    }

    /// The accepted `level` values and the default; `None` for LZ4, which
    /// has a single speed.
    pub(crate) fn levels(self) -> Option<(RangeInclusive<i32>, i32)> {
        match self {
            Codec::Zstd => Some((zstd::compression_level_range(), 3)),
            Codec::Lz4 => None,
            Codec::Gzip => Some((0..=9, 6)),
            Codec::Bzip2 => Some((1..=9, 9)),
        }
    }

    /// `level` was checked against [`Codec::levels`] when the pipeline was
    /// parsed.
    pub(crate) fn compress(self, function: &str, input: &[u8], level: i32) -> Result<Vec<u8>> {
        let out = match self {
            Codec::Zstd => zstd::bulk::compress(input, level),
            Codec::Lz4 => {
                let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
                encoder
                    .write_all(input)
                    .and_then(|()| encoder.finish().map_err(std::io::Error::other))
            }
            Codec::Gzip => {
                let level = flate2::Compression::new(level.unsigned_abs());
                let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
                encoder.write_all(input).and_then(|()| encoder.finish())
            }
            Codec::Bzip2 => {
                let level = bzip2::Compression::new(level.unsigned_abs());
                let mut encoder = bzip2::write::BzEncoder::new(Vec::new(), level);
                encoder.write_all(input).and_then(|()| encoder.finish())
            }
        };
        out.map_err(|e| Error::Storage(format!("function {function}: {e}")))
    }

    /// Decompresses concatenated streams too (as `zcat` does), refusing
    /// output larger than `limit` bytes.
    pub(crate) fn decompress(self, function: &str, input: &[u8], limit: u64) -> Result<Vec<u8>> {
        let reader: Box<dyn Read + '_> = match self {
            Codec::Zstd => Box::new(zstd::stream::read::Decoder::new(input)?),
            Codec::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(input)),
            Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(input)),
            Codec::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(input)),
        };
        let out = read_capped(reader, limit.saturating_add(1)).map_err(|e| {
            Error::Malformed(format!(
                "function {function}: the input is not valid {} data: {e}",
                self.format()
            ))
        })?;
        if out.len() as u64 > limit {
            return Err(Error::Storage(format!(
                "function {function}: the output exceeds its limit of {limit} bytes (raise it with limit=BYTES)"
            )));
        }
        Ok(out)
    }
}

/// Reads at most `cap` bytes, never holding a buffer larger than `cap`:
/// `read_to_end` doubles its buffer, so output just past half the limit
/// could take twice the limit's memory.
fn read_capped(reader: impl Read, cap: u64) -> std::io::Result<Vec<u8>> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut reader = reader.take(cap as u64);
    let mut out = Vec::new();
    let mut chunk = vec![0u8; (64 << 10).min(cap)];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if out.capacity() - out.len() < n {
            let grown = (out.len() * 2).max(out.len() + n).min(cap);
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
    debug_assert!(out.capacity() <= cap.max(out.len()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::read_capped;

    /// Output a little past half the cap used to leave a buffer of twice
    /// the cap; it never holds more than the cap now, and stops there.
    #[test]
    fn reading_stops_at_the_cap_with_no_larger_buffer() {
        let data = vec![7u8; 3 << 20];
        for cap in [
            1,
            1000,
            (1 << 20) + 1,
            (1 << 20) + (1 << 19),
            3 << 20,
            4 << 20,
        ] {
            let out = read_capped(&data[..], cap).unwrap();
            assert_eq!(out.len() as u64, cap.min(data.len() as u64));
            assert!(
                out.capacity() as u64 <= cap,
                "cap {cap}: capacity {}",
                out.capacity()
            );
            assert!(out.iter().all(|&b| b == 7));
        }
    }
}
