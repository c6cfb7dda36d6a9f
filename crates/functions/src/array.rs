//! Functions over arrays of little-endian numbers: `sort`, `stats`, `median`
//! and `filter`. Each is written once, generically over [`Elem`], and
//! instantiated per [`DType`] by [`with_dtype!`].

use std::cmp::Ordering;
use std::str::FromStr;

use labios_label::{Error, Result};
use serde::{Serialize, Serializer};

/// The element type of an array, named by the `dtype` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DType {
    I32,
    I64,
    U32,
    U64,
    F32,
    F64,
}

impl DType {
    pub(crate) const NAMES: &'static str = "i32|i64|u32|u64|f32|f64";

    pub(crate) fn parse(name: &str) -> Option<DType> {
        Some(match name {
            "i32" => DType::I32,
            "i64" => DType::I64,
            "u32" => DType::U32,
            "u64" => DType::U64,
            "f32" => DType::F32,
            "f64" => DType::F64,
            _ => return None,
        })
    }

    pub(crate) fn size(self) -> usize {
        match self {
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }
}

/// Runs `$body` with `$t` bound to the Rust type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::array::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::array::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::array::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::array::DType::U64 => {
                type $t = u64;
                $body
            }
            $crate::array::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::array::DType::F64 => {
                type $t = f64;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

/// A number in JSON output: integers stay exact (sums of 64-bit values need
/// 128 bits), `f32` values print as the `f32` they are, and non-finite
/// floats print as `null` since JSON has no NaN or infinity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i128),
    F32(f32),
    F64(f64),
}

impl Num {
    /// Half of an exact integer sum: exact when even, else `x.5`.
    fn half(sum: i128) -> Num {
        if sum % 2 == 0 {
            Num::Int(sum / 2)
        } else {
            Num::F64(sum as f64 / 2.0)
        }
    }

    fn to_f64(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::F32(v) => f64::from(v),
            Num::F64(v) => v,
        }
    }
}

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            Num::Int(v) => s.serialize_i128(v),
            Num::F32(v) => s.serialize_f32(v),
            Num::F64(v) => s.serialize_f64(v),
        }
    }
}

pub(crate) trait Elem: Copy + PartialOrd + FromStr {
    const NAME: &'static str;
    const SIZE: usize;
    fn read(bytes: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
    /// A total order: plain `Ord` for integers, IEEE 754 `totalOrder` for
    /// floats (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN).
    fn order(&self, other: &Self) -> Ordering;
    fn is_nan(self) -> bool;
    fn to_f64(self) -> f64;
    fn num(self) -> Num;
    fn midpoint(a: Self, b: Self) -> Num;
    fn sum(values: &[Self]) -> Num;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const NAME: &'static str = stringify!($t);
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("a chunk of SIZE bytes"))
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn order(&self, other: &Self) -> Ordering {
                self.cmp(other)
            }
            fn is_nan(self) -> bool {
                false
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn num(self) -> Num {
                Num::Int(i128::from(self))
            }
            fn midpoint(a: Self, b: Self) -> Num {
                Num::half(i128::from(a) + i128::from(b))
            }
            fn sum(values: &[Self]) -> Num {
                Num::Int(values.iter().map(|&v| i128::from(v)).sum())
            }
        }
    )*};
}
int_elem!(i32, i64, u32, u64);

macro_rules! float_elem {
    ($($t:ident => $num:ident),*) => {$(
        impl Elem for $t {
            const NAME: &'static str = stringify!($t);
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("a chunk of SIZE bytes"))
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn order(&self, other: &Self) -> Ordering {
                self.total_cmp(other)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
            fn num(self) -> Num {
                Num::$num(self)
            }
            fn midpoint(a: Self, b: Self) -> Num {
                let (a, b) = (f64::from(a), f64::from(b));
                let mid = (a + b) / 2.0;
                // a + b overflows for values near the type's maximum.
                let mid = if mid.is_finite() { mid } else { a / 2.0 + b / 2.0 };
                Num::$num(mid as $t)
            }
            fn sum(values: &[Self]) -> Num {
                Num::F64(values.iter().map(|&v| f64::from(v)).sum())
            }
        }
    )*};
}
float_elem!(f32 => F32, f64 => F64);

/// Decodes a whole array; a trailing partial value means the caller named the
/// wrong dtype or the data is cut, which must not pass silently.
pub(crate) fn decode<T: Elem>(function: &str, input: &[u8]) -> Result<Vec<T>> {
    if !input.len().is_multiple_of(T::SIZE) {
        return Err(Error::Malformed(format!(
            "function {function}: the input ({} bytes) is not a whole number of {} values ({} bytes each)",
            input.len(),
            T::NAME,
            T::SIZE
        )));
    }
    Ok(input.chunks_exact(T::SIZE).map(T::read).collect())
}

fn encode<T: Elem>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * T::SIZE);
    values.iter().for_each(|v| v.write(&mut out));
    out
}

pub(crate) fn sort<T: Elem>(function: &str, input: &[u8], descending: bool) -> Result<Vec<u8>> {
    let mut values = decode::<T>(function, input)?;
    if descending {
        values.sort_unstable_by(|a, b| b.order(a));
    } else {
        values.sort_unstable_by(T::order);
    }
    Ok(encode(&values))
}

/// The median of `values` (NaN-free), in O(n): the mean of the two middle
/// values when the count is even.
fn median<T: Elem>(values: &mut [T]) -> Option<Num> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (lower_half, upper, _) = values.select_nth_unstable_by(n / 2, T::order);
    let upper = *upper;
    if n % 2 == 1 {
        return Some(upper.num());
    }
    let lower = lower_half.iter().copied().max_by(T::order)?;
    Some(T::midpoint(lower, upper))
}

fn without_nan<T: Elem>(values: Vec<T>) -> Vec<T> {
    values.into_iter().filter(|v| !v.is_nan()).collect()
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::Storage(format!("cannot encode JSON: {e}")))
}

#[derive(Serialize)]
struct Stats {
    dtype: &'static str,
    /// Values the statistics cover: every value but NaNs.
    count: usize,
    nan: usize,
    sum: Num,
    min: Option<Num>,
    max: Option<Num>,
    mean: Option<f64>,
    median: Option<Num>,
    histogram: Histogram,
}

/// Equal-width bins over `[min, max]`; bin `i` covers
/// `[min + i * width, min + (i + 1) * width)`, the last one includes `max`.
#[derive(Serialize)]
struct Histogram {
    width: Option<f64>,
    counts: Vec<u64>,
}

pub(crate) fn stats<T: Elem>(function: &str, input: &[u8], bins: usize) -> Result<Vec<u8>> {
    let all = decode::<T>(function, input)?;
    let total = all.len();
    let mut values = without_nan(all);
    let count = values.len();
    let min = values.iter().copied().min_by(T::order);
    let max = values.iter().copied().max_by(T::order);
    let sum = T::sum(&values);
    let mut counts = vec![0u64; bins];
    let mut width = None;
    if let (Some(lo), Some(hi)) = (min, max) {
        let (lo, hi) = (lo.to_f64(), hi.to_f64());
        let w = (hi - lo) / bins as f64;
        width = Some(w);
        for v in &values {
            let v = v.to_f64();
            // The maximum (and any position lost to rounding) goes to the
            // last bin; a zero width puts every value in the first.
            let bin = if v >= hi && w > 0.0 {
                bins - 1
            } else if w > 0.0 {
                (((v - lo) / w) as usize).min(bins - 1)
            } else {
                0
            };
            counts[bin] += 1;
        }
    }
    let stats = Stats {
        dtype: T::NAME,
        count,
        nan: total - count,
        mean: (count > 0).then(|| sum.to_f64() / count as f64),
        sum,
        min: min.map(T::num),
        max: max.map(T::num),
        median: median(&mut values),
        histogram: Histogram { width, counts },
    };
    json(&stats)
}

/// The median as a bare JSON number (`null` for an empty array), so that
/// in-situ reads return a few bytes instead of the data.
pub(crate) fn median_json<T: Elem>(function: &str, input: &[u8]) -> Result<Vec<u8>> {
    let mut values = without_nan(decode::<T>(function, input)?);
    json(&median(&mut values))
}

/// Which values `filter` keeps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Filter {
    /// Values within `[min, max]` (either bound optional), kept as text and
    /// parsed as the dtype so that 64-bit integers compare exactly.
    Range {
        min: Option<String>,
        max: Option<String>,
    },
    /// Values at or above (or at or below) the `q`-quantile, by the
    /// nearest-rank method over the non-NaN values.
    Quantile { q: f64, above: bool },
}

/// Parses a filter bound as the array's own type.
pub(crate) fn bound<T: Elem>(function: &str, key: &str, text: &str) -> Result<T> {
    match text.parse::<T>() {
        Ok(v) if !v.is_nan() => Ok(v),
        _ => Err(Error::InvalidArgument(format!(
            "function {function}: {key}={text} is not a {} value",
            T::NAME
        ))),
    }
}

/// Keeps the selected values in their original order; NaNs never match.
pub(crate) fn filter<T: Elem>(function: &str, input: &[u8], spec: &Filter) -> Result<Vec<u8>> {
    let values = decode::<T>(function, input)?;
    let kept: Vec<T> = match spec {
        Filter::Range { min, max } => {
            let min = min
                .as_deref()
                .map(|m| bound::<T>(function, "min", m))
                .transpose()?;
            let max = max
                .as_deref()
                .map(|m| bound::<T>(function, "max", m))
                .transpose()?;
            values
                .into_iter()
                .filter(|v| min.is_none_or(|m| *v >= m) && max.is_none_or(|m| *v <= m))
                .collect()
        }
        Filter::Quantile { q, above } => {
            let mut ranked = without_nan(values.clone());
            let n = ranked.len();
            if n == 0 {
                Vec::new()
            } else {
                let k = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
                let threshold = *ranked.select_nth_unstable_by(k, T::order).1;
                values
                    .into_iter()
                    .filter(|v| {
                        if *above {
                            *v >= threshold
                        } else {
                            *v <= threshold
                        }
                    })
                    .collect()
            }
        }
    };
    Ok(encode(&kept))
}
