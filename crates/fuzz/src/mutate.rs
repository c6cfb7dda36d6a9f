//! Inputs derived from a target's seeds. Without coverage feedback (which
//! needs an instrumented nightly build), what finds bugs is starting from
//! valid encodings, so that most inputs get past the first checks, and
//! mutating them the ways decoders break: lengths and counts replaced by
//! extreme values (binary, varint and decimal), chunks repeated, cut or
//! spliced from another encoding, tokens of the format inserted.
//!
//! Input `i` of seed `s` depends on nothing else (not on earlier inputs or
//! their outcome), so any failure replays from `(s, i)` alone.

use fastrand::Rng;

/// Values that sit on the edges decoders check (or forget to).
const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    15,
    16,
    31,
    32,
    63,
    64,
    100,
    127,
    128,
    255,
    256,
    512,
    1000,
    1024,
    4096,
    32767,
    32768,
    65535,
    65536,
    1 << 20,
    16 << 20,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
    -128i64 as u64,
    -32768i64 as u64,
    i32::MIN as i64 as u64,
];

/// The same edges as text numbers, plus what number parsers trip on.
const INTERESTING_TEXT: &[&str] = &[
    "0",
    "1",
    "-1",
    "-0",
    "+1",
    "255",
    "256",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999",
    "1e308",
    "1e-308",
    "NaN",
    "inf",
    "-inf",
    "0.5",
    "0x10",
    "",
];

/// Single bytes with meaning in the formats under test.
const INTERESTING_BYTES: &[u8] = b"\0\x01\x7f\x80\xff \n\r\t\\\"'=:,|/.-_[]{}#0123456789";

/// A target's seeds and what mutations draw on.
pub struct Corpus {
    seeds: Vec<Vec<u8>>,
    dictionary: Vec<&'static [u8]>,
    /// Bytes the seeds use, for random inputs that look like the format.
    alphabet: Vec<u8>,
    max_len: usize,
}

impl Corpus {
    pub fn new(seeds: Vec<Vec<u8>>, dictionary: &[&'static [u8]], max_len: usize) -> Corpus {
        let mut seen = [false; 256];
        for b in seeds.iter().flatten() {
            seen[usize::from(*b)] = true;
        }
        let alphabet = (0..=255u8).filter(|&b| seen[usize::from(b)]).collect();
        Corpus {
            seeds,
            dictionary: dictionary.to_vec(),
            alphabet,
            max_len,
        }
    }

    /// Input `i` of the run with `seed`: the seeds themselves first (so
    /// every run checks that valid encodings decode), then mostly mutated
    /// seeds and some purely random bytes.
    pub fn input(&self, seed: u64, i: u64) -> Vec<u8> {
        if let Some(s) = usize::try_from(i).ok().and_then(|i| self.seeds.get(i)) {
            return s.clone();
        }
        let mut rng = Rng::with_seed(mix(seed ^ mix(i)));
        if self.seeds.is_empty() || rng.u8(..) < 16 {
            return self.random(&mut rng);
        }
        let mut data = self.seeds[rng.usize(..self.seeds.len())].clone();
        let mut rounds = 1;
        while rounds < 16 && rng.bool() {
            rounds += 1;
        }
        for _ in 0..rounds {
            self.mutate(&mut rng, &mut data);
        }
        data.truncate(self.max_len);
        data
    }

    fn random(&self, rng: &mut Rng) -> Vec<u8> {
        let len = match rng.u8(..4) {
            0 => rng.usize(..8),
            1 | 2 => rng.usize(..128),
            _ => rng.usize(..=self.max_len.min(4096)),
        };
        if !self.alphabet.is_empty() && rng.bool() {
            (0..len)
                .map(|_| self.alphabet[rng.usize(..self.alphabet.len())])
                .collect()
        } else {
            (0..len).map(|_| rng.u8(..)).collect()
        }
    }

    fn mutate(&self, rng: &mut Rng, data: &mut Vec<u8>) {
        let len = data.len();
        match rng.u8(..14) {
            // Bit flip.
            0 if len > 0 => data[rng.usize(..len)] ^= 1 << rng.u8(..8),
            // Random byte.
            1 if len > 0 => data[rng.usize(..len)] = rng.u8(..),
            // Meaningful byte.
            2 if len > 0 => data[rng.usize(..len)] = pick(rng, INTERESTING_BYTES),
            // Insert random bytes.
            3 => {
                let at = rng.usize(..=len);
                let n = rng.usize(1..=8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
                data.splice(at..at, bytes);
            }
            // Delete a range.
            4 if len > 0 => {
                let at = rng.usize(..len);
                let n = rng.usize(1..=(len - at).min(16));
                data.drain(at..at + n);
            }
            // Repeat a chunk (lists, nesting, long fields).
            5 if len > 0 => {
                let at = rng.usize(..len);
                let n = rng.usize(1..=(len - at).min(64));
                let times = if rng.bool() {
                    rng.usize(1..4)
                } else {
                    rng.usize(1..256)
                };
                let chunk = data[at..at + n].repeat(times);
                let room = self.max_len.saturating_sub(len);
                data.splice(at..at, chunk.into_iter().take(room));
            }
            // Splice with another seed: this one's head, its tail.
            6 if !self.seeds.is_empty() => {
                let other = &self.seeds[rng.usize(..self.seeds.len())];
                let cut = rng.usize(..=len);
                let from = rng.usize(..=other.len());
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            // Truncate.
            7 if len > 0 => data.truncate(rng.usize(..len)),
            // Interesting integer, 1 to 8 bytes, either byte order.
            8 => {
                let value = pick(rng, INTERESTING);
                let width = [1, 2, 4, 8][rng.usize(..4)];
                let bytes = if rng.bool() {
                    value.to_le_bytes()[..width].to_vec()
                } else {
                    value.to_be_bytes()[8 - width..].to_vec()
                };
                overwrite_or_insert(rng, data, &bytes);
            }
            // Interesting integer as a LEB128 varint (postcard's lengths
            // and integers).
            9 => {
                let bytes = varint(pick(rng, INTERESTING));
                overwrite_or_insert(rng, data, &bytes);
            }
            // A decimal number replaced by an interesting one.
            10 => replace_number(rng, data),
            // A token of the format.
            11 if !self.dictionary.is_empty() => {
                let token = pick(rng, &self.dictionary);
                overwrite_or_insert(rng, data, token);
            }
            // Copy a chunk over another place of the input.
            12 if len > 1 => {
                let from = rng.usize(..len);
                let n = rng.usize(1..=(len - from).min(32));
                let chunk = data[from..from + n].to_vec();
                let to = rng.usize(..len);
                let end = (to + n).min(len);
                data[to..end].copy_from_slice(&chunk[..end - to]);
            }
            // Insert a chunk of another seed.
            13 if !self.seeds.is_empty() => {
                let other = &self.seeds[rng.usize(..self.seeds.len())];
                if !other.is_empty() {
                    let from = rng.usize(..other.len());
                    let n = rng.usize(1..=(other.len() - from).min(64));
                    let at = rng.usize(..=len);
                    data.splice(at..at, other[from..from + n].iter().copied());
                }
            }
            _ => data.push(rng.u8(..)),
        }
    }
}

fn pick<T: Copy>(rng: &mut Rng, from: &[T]) -> T {
    from[rng.usize(..from.len())]
}

fn overwrite_or_insert(rng: &mut Rng, data: &mut Vec<u8>, bytes: &[u8]) {
    let at = rng.usize(..=data.len());
    if rng.bool() {
        let end = (at + bytes.len()).min(data.len());
        data.splice(at..end, bytes.iter().copied());
    } else {
        data.splice(at..at, bytes.iter().copied());
    }
}

fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Replaces a run of ASCII digits (the first at or after a random place,
/// else the first of all) by an interesting number; inserts one if there
/// is none.
fn replace_number(rng: &mut Rng, data: &mut Vec<u8>) {
    let number = pick(rng, INTERESTING_TEXT).as_bytes();
    let start = rng.usize(..=data.len());
    let found = data[start..]
        .iter()
        .position(u8::is_ascii_digit)
        .map(|p| start + p)
        .or_else(|| data.iter().position(u8::is_ascii_digit));
    match found {
        Some(at) => {
            let end = data[at..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .map_or(data.len(), |p| at + p);
            data.splice(at..end, number.iter().copied());
        }
        None => {
            data.splice(start..start, number.iter().copied());
        }
    }
}

/// SplitMix64's finalizer: neighbouring seeds and input numbers give
/// unrelated generators.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        Corpus::new(
            vec![b"size 4096\nseq 7\n".to_vec(), vec![0, 1, 2, 3]],
            &[b"seq"],
            256,
        )
    }

    #[test]
    fn inputs_depend_only_on_seed_and_number() {
        let (a, b) = (corpus(), corpus());
        for i in 0..2000 {
            assert_eq!(a.input(9, i), b.input(9, i));
            assert!(a.input(9, i).len() <= 256);
        }
        assert_ne!(
            (2..50).map(|i| a.input(1, i)).collect::<Vec<_>>(),
            (2..50).map(|i| a.input(2, i)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn seeds_come_first_unchanged() {
        let c = corpus();
        assert_eq!(c.input(5, 0), b"size 4096\nseq 7\n");
        assert_eq!(c.input(5, 1), [0, 1, 2, 3]);
    }

    #[test]
    fn varints_are_leb128() {
        assert_eq!(varint(0), [0]);
        assert_eq!(varint(300), [0xac, 0x02]);
        assert_eq!(varint(u64::MAX).len(), 10);
    }
}
