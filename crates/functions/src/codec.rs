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
        let mut out = Vec::new();
        reader
            .take(limit.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| {
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
