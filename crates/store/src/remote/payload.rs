//! Byte fields decoded without a copy. A frame arrives whole in one buffer
//! ([`super::proto::read_frame`]); a large byte field of the value in it
//! (a `Put`'s data, a `Data` reply: a label's bytes, up to its 1 MiB) is
//! handed on as a slice of that buffer instead of a copy of the slice.
//! That copy was 3.7 % of a 1 MiB S3 GET's CPU in the gateway (BENCHMARKS
//! "A GET's copy"), and every write of a local client paid it in `labios
//! serve`.
//!
//! serde gives a field's deserializer the bytes, not the buffer they lie
//! in, so [`decoding`] lends the frame to the fields of one decode through
//! a thread-local; a field decoded outside it, or from bytes that are not
//! the frame's, is copied as before.

use bytes::Bytes;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use std::cell::RefCell;
use std::fmt;

thread_local! {
    static FRAME: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Runs `decode` on `frame` with the frame lent to the byte fields it
/// decodes.
pub fn decoding<T>(frame: &Bytes, decode: impl FnOnce(&[u8]) -> T) -> T {
    /// Gives back the frame lent before this one (a decode inside a
    /// decode), even if `decode` panics.
    struct Lent(Option<Bytes>);
    impl Drop for Lent {
        fn drop(&mut self) {
            let before = self.0.take();
            FRAME.with(|f| *f.borrow_mut() = before);
        }
    }
    let _lent = Lent(FRAME.with(|f| f.borrow_mut().replace(frame.clone())));
    decode(frame)
}

/// `bytes` as a slice of the frame lent, if they lie in it; else a copy.
fn of(bytes: &[u8]) -> Bytes {
    FRAME.with(|f| match &*f.borrow() {
        Some(frame) if within(frame, bytes) => frame.slice_ref(bytes),
        _ => Bytes::copy_from_slice(bytes),
    })
}

fn within(frame: &[u8], part: &[u8]) -> bool {
    let (start, end) = (
        frame.as_ptr() as usize,
        frame.as_ptr() as usize + frame.len(),
    );
    let at = part.as_ptr() as usize;
    start <= at && at + part.len() <= end
}

/// `#[serde(deserialize_with = "payload::bytes")]`.
pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    d.deserialize_bytes(BytesVisitor)
}

/// `#[serde(deserialize_with = "payload::maybe_bytes")]`.
pub fn maybe_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
    d.deserialize_option(MaybeVisitor)
}

struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Bytes;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("bytes")
    }

    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Bytes, E> {
        Ok(of(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
        Ok(Bytes::copy_from_slice(v))
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
        Ok(Bytes::from(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(Bytes::from(out))
    }
}

struct MaybeVisitor;

impl<'de> Visitor<'de> for MaybeVisitor {
    type Value = Option<Bytes>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("bytes or nothing")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<Bytes>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<Bytes>, D::Error> {
        bytes(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Carrier {
        name: String,
        #[serde(deserialize_with = "bytes")]
        data: Bytes,
        #[serde(deserialize_with = "maybe_bytes")]
        more: Option<Bytes>,
    }

    /// Decoded from a lent frame, the fields point into it; decoded
    /// elsewhere, they are copies with the same bytes.
    #[test]
    fn byte_fields_of_a_lent_frame_are_slices_of_it() {
        let value = Carrier {
            name: "k".into(),
            data: Bytes::from(vec![7u8; 100_000]),
            more: Some(Bytes::from_static(b"tail")),
        };
        let frame = Bytes::from(labios_label::codec::encode(&value));
        let got: Carrier = decoding(&frame, |b| labios_label::decode(b).unwrap());
        assert_eq!(got, value);
        assert!(within(&frame, &got.data) && within(&frame, got.more.as_ref().unwrap()));
        let copied: Carrier = labios_label::decode(&frame).unwrap();
        assert_eq!(copied, value);
        assert!(!within(&frame, &copied.data));
        let none = Carrier {
            more: None,
            ..value
        };
        let frame = Bytes::from(labios_label::codec::encode(&none));
        assert_eq!(
            decoding(&frame, |b| labios_label::decode::<Carrier>(b).unwrap()),
            none
        );
    }
}
