//! The compact, versioned binary encoding of everything that crosses a
//! process boundary. A frame is `MAGIC (2 bytes) | VERSION (1) | postcard body`.
//! postcard is varint-based (a 4 KiB write label is ~60 bytes) and its decoder
//! is bounds-checked: malformed or truncated input yields an error, never a
//! panic or an unbounded allocation.

use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};

pub const MAGIC: [u8; 2] = *b"LB";
/// The layout of the encoded types; a frame of another is refused by name
/// ("unsupported encoding version"), not decoded as garbage. Raised with
/// every change of an encoded type (2: labels carry `holder`), so the
/// label and task queues are drained before LABIOS is upgraded.
pub const VERSION: u8 = 2;

/// Encode with the versioned header.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    postcard::to_io(value, &mut out).expect("writing to a Vec cannot fail");
    out
}

/// Decode a value produced by [`encode`]; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    if bytes.len() < 3 {
        return Err(Error::Malformed(format!(
            "{} bytes is shorter than the 3-byte header",
            bytes.len()
        )));
    }
    if bytes[..2] != MAGIC {
        return Err(Error::Malformed("bad magic: not a LABIOS encoding".into()));
    }
    if bytes[2] != VERSION {
        return Err(Error::Malformed(format!(
            "unsupported encoding version {} (this build reads {VERSION})",
            bytes[2]
        )));
    }
    let (value, rest) =
        postcard::take_from_bytes(&bytes[3..]).map_err(|e| Error::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(Error::Malformed(format!("{} trailing bytes", rest.len())));
    }
    Ok(value)
}

/// Types that travel between processes (queues, inventory records).
pub trait Codec: Sized + Send + Sync + 'static {
    fn to_bytes(&self) -> Vec<u8>;
    fn from_bytes(bytes: &[u8]) -> Result<Self>;
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Codec for T {
    fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self> {
        decode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;

    fn sample() -> Label {
        let g = LabelIdGen::new(42);
        let mut l = Label::new(g.next(), LabelKind::Write, 3);
        l.source = Pointer::Warehouse {
            key: "w/1".into(),
            len: 4096,
        };
        l.destination = Pointer::File {
            path: "/data/out.bin".into(),
            file: 9,
            offset: 1 << 20,
            len: 4096,
        };
        l.operations.push(Operation {
            function: "zstd".into(),
            args: vec![("level".into(), "3".into())],
        });
        l.index.push(Segment {
            file_offset: 0,
            buf_offset: 0,
            len: 10,
        });
        l.flags = StateFlags::default().with(StateFlags::QUEUED);
        l.sync = true;
        l
    }

    #[test]
    fn round_trip() {
        let l = sample();
        let bytes = encode(&l);
        assert_eq!(decode::<Label>(&bytes).unwrap(), l);
        let t = Task {
            labels: vec![l.clone(), l],
            aggregated: true,
            supertask: false,
        };
        assert_eq!(Task::from_bytes(&t.to_bytes()).unwrap(), t);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = encode(&sample());
        for cut in 0..bytes.len() {
            assert!(
                decode::<Label>(&bytes[..cut]).is_err(),
                "prefix of {cut} bytes decoded"
            );
        }
    }

    #[test]
    fn header_is_checked() {
        let mut bytes = encode(&sample());
        bytes[2] = 9;
        assert!(decode::<Label>(&bytes)
            .unwrap_err()
            .to_string()
            .contains("version 9"));
        bytes[0] = b'X';
        assert!(decode::<Label>(&bytes)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut long = encode(&sample());
        long.push(0);
        assert!(decode::<Label>(&long)
            .unwrap_err()
            .to_string()
            .contains("trailing"));
    }

    #[test]
    fn random_garbage_never_panics() {
        let mut rng = fastrand::Rng::with_seed(1);
        let good = encode(&sample());
        for _ in 0..20_000 {
            let mut bytes = good.clone();
            for _ in 0..rng.usize(1..6) {
                let i = rng.usize(0..bytes.len());
                bytes[i] = rng.u8(..);
            }
            let _ = decode::<Label>(&bytes);
            let len = rng.usize(0..64);
            let noise: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
            let mut framed = MAGIC.to_vec();
            framed.push(VERSION);
            framed.extend(noise);
            let _ = decode::<Task>(&framed);
        }
    }
}
