//! Application hints (WOSS; issue 16): what a program tells LABIOS about
//! how a file will be used, as extended attributes `user.labios.NAME` of
//! the file or of a directory above it, settable through every interface
//! that sets attributes (`setxattr` under `labios run` and on the mount,
//! `labios hint set`, the Rust, C and Python APIs). This module is their
//! one vocabulary: every interface refuses what it refuses, with the same
//! message naming the hint.

use crate::{Error, Result};

/// The attribute names of hints begin so.
pub const PREFIX: &str = "user.labios.";

/// How every refusal of a hint ends: the one place the POSIX faces look
/// to answer EINVAL whatever a refused value or path says (a value "not
/// empty" must not read as ENOTEMPTY).
pub const REFUSED: &str = "; see README \"Hints\"";

/// A refusal of a hint: InvalidArgument ending with [`REFUSED`].
pub fn refused(why: String) -> Error {
    Error::InvalidArgument(format!("{why}{REFUSED}"))
}

/// The hints there are, by name (after [`PREFIX`]).
pub const NAMES: [&str; 7] = [
    "placement",
    "replicas",
    "replication",
    "block_size",
    "cache_size",
    "tier",
    "route",
];

/// Copies a file may have: enough for any placement a site runs, few
/// enough that a typo (`replicas=30`) is caught.
pub const MAX_REPLICAS: u32 = 8;
/// Workers a file may be striped over.
pub const MAX_SCATTER: u32 = 1024;
/// Bounds of `block_size`: a page, and the largest label.
pub const MIN_BLOCK: u64 = 4 << 10;
pub const MAX_BLOCK: u64 = 1 << 30;
/// Bound of `cache_size`: a client's cache for one file.
pub const MAX_CACHE: u64 = 64 << 30;
/// HDFS's storage policies, which `tier` takes besides a worker tier.
pub const POLICIES: [&str; 6] = ["HOT", "WARM", "COLD", "ALL_SSD", "ONE_SSD", "LAZY_PERSIST"];

/// Where a file's labels go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A worker on the writing client's host.
    Local,
    /// Every file of the group on one worker, so that a later reduce
    /// reads locally.
    Collocate(String),
    /// Stripes over this many workers.
    Scatter(u32),
}

/// When a write with copies is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// Copies written in parallel, acknowledged after all of them.
    Eager,
    /// Copies chained, acknowledged after the first.
    Lazy,
}

/// IRIS's hybrid mode: files on one side of a size go to an external
/// object store mount, the others to worker storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Files below `size` bytes go to the mount (`true`), or files of
    /// `size` bytes and more (`false`).
    pub below: bool,
    pub size: u64,
    pub mount: String,
}

/// One hint with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    Placement(Placement),
    Replicas(u32),
    Replication(Replication),
    BlockSize(u64),
    CacheSize(u64),
    /// A worker tier (`ram`, `hdd`, ...) or one of [`POLICIES`].
    Tier(String),
    Route(Route),
}

/// Whether attribute `name` is a hint's (valid or not).
pub fn is_hint(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// A size: a positive number of bytes, or of KiB, MiB or GiB (`64MiB`).
pub fn parse_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale: u64 = match unit {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)?
        .checked_mul(scale)
}

/// A name of a group, a tier or a mount: letters, digits, `-`, `_`, `.`.
fn word(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Hint {
    /// The hint attribute `name` (with [`PREFIX`]) set to `value`, or an
    /// error naming the hint and saying what it takes.
    pub fn parse(name: &str, value: &[u8]) -> Result<Hint> {
        let hint = name.strip_prefix(PREFIX).unwrap_or(name);
        let bad = |takes: &str| {
            refused(format!(
                "hint {hint}: {:?} is not a value it takes ({takes})",
                String::from_utf8_lossy(value)
            ))
        };
        let text = std::str::from_utf8(value).map_err(|_| bad("text"))?;
        // Digits only: a value is stored as written, so "+2" or "2\n" would
        // be a second spelling of 2.
        let number = |text: &str, max: u32| {
            Some(text)
                .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse::<u32>().ok())
                .filter(|n| (1..=max).contains(n))
        };
        let count = |max: u32, takes: &str| number(text, max).ok_or_else(|| bad(takes));
        let size = |min: u64, max: u64, takes: &str| {
            parse_size(text)
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| bad(takes))
        };
        Ok(match hint {
            "placement" => Hint::Placement(match text.split_once(':') {
                None if text == "local" => Placement::Local,
                Some(("collocate", group)) if word(group) => Placement::Collocate(group.into()),
                Some(("scatter", n)) => Placement::Scatter(
                    number(n, MAX_SCATTER)
                        .ok_or_else(|| bad("local, collocate:GROUP or scatter:N, N 1 to 1024"))?,
                ),
                _ => return Err(bad("local, collocate:GROUP or scatter:N, N 1 to 1024")),
            }),
            "replicas" => Hint::Replicas(count(MAX_REPLICAS, "a number of copies, 1 to 8")?),
            "replication" => Hint::Replication(match text {
                "eager" => Replication::Eager,
                "lazy" => Replication::Lazy,
                _ => return Err(bad("eager or lazy")),
            }),
            "block_size" => Hint::BlockSize(size(MIN_BLOCK, MAX_BLOCK, "a size, 4KiB to 1GiB")?),
            "cache_size" => Hint::CacheSize(size(1, MAX_CACHE, "a size, up to 64GiB")?),
            "tier" if word(text) => Hint::Tier(text.into()),
            "tier" => {
                return Err(bad(
                    "a worker tier or HOT, WARM, COLD, ALL_SSD, ONE_SSD, LAZY_PERSIST",
                ))
            }
            "route" => {
                let takes = "<SIZE:MOUNT (files below SIZE to the mount) or >SIZE:MOUNT";
                let (below, rest) = match text.chars().next() {
                    Some('<') => (true, &text[1..]),
                    Some('>') => (false, &text[1..]),
                    _ => return Err(bad(takes)),
                };
                let (size, mount) = rest.split_once(':').ok_or_else(|| bad(takes))?;
                match (parse_size(size), word(mount)) {
                    (Some(size), true) => Hint::Route(Route {
                        below,
                        size,
                        mount: mount.into(),
                    }),
                    _ => return Err(bad(takes)),
                }
            }
            _ => {
                return Err(refused(format!(
                    "{name}: no such hint (hints: {})",
                    NAMES.join(", ")
                )))
            }
        })
    }

    /// Whether the hint may change once its file holds data: only how
    /// many copies there are and how they are made; a placement, block
    /// size or tier changed afterwards would describe bytes placed by
    /// another.
    pub fn changes_with_data(&self) -> bool {
        matches!(self, Hint::Replicas(_) | Hint::Replication(_))
    }

    /// Whether a `Tier` hint is served by one of `workers` (their tiers
    /// and speed classes, [`tier_serves`]); every other hint names none.
    pub fn tier_known<'a>(&self, mut workers: impl Iterator<Item = (&'a str, u8)>) -> bool {
        match self {
            Hint::Tier(t) => workers.any(|(tier, speed)| tier_serves(t, tier, speed)),
            _ => true,
        }
    }
}

/// Whether a worker of tier `tier` and speed class `speed` (1, slowest,
/// to 5) serves hint value `wanted`: a tier by its name, or a policy in
/// the manner of HDFS's storage policies: `HOT` the fast tiers (speed 3
/// and up), `WARM` the middle ones (2 and 3), `COLD` the slow ones (1 and
/// 2), `ALL_SSD` and `ONE_SSD` the `ssd` and `nvme` tiers, `LAZY_PERSIST`
/// memory (`ram`, written back to a device in the background).
pub fn tier_serves(wanted: &str, tier: &str, speed: u8) -> bool {
    match wanted {
        "HOT" => speed >= 3,
        "WARM" => (2..=3).contains(&speed),
        "COLD" => speed <= 2,
        "ALL_SSD" | "ONE_SSD" => matches!(tier, "ssd" | "nvme"),
        "LAZY_PERSIST" => tier == "ram",
        _ => wanted == tier,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, value: &str) -> Result<Hint> {
        Hint::parse(&format!("{PREFIX}{name}"), value.as_bytes())
    }

    #[test]
    fn every_hint_parses_its_values() {
        assert_eq!(
            parse("placement", "local").unwrap(),
            Hint::Placement(Placement::Local)
        );
        assert_eq!(
            parse("placement", "collocate:reduce-1").unwrap(),
            Hint::Placement(Placement::Collocate("reduce-1".into()))
        );
        assert_eq!(
            parse("placement", "scatter:4").unwrap(),
            Hint::Placement(Placement::Scatter(4))
        );
        assert_eq!(parse("replicas", "2").unwrap(), Hint::Replicas(2));
        assert_eq!(
            parse("replication", "lazy").unwrap(),
            Hint::Replication(Replication::Lazy)
        );
        assert_eq!(
            parse("block_size", "1MiB").unwrap(),
            Hint::BlockSize(1 << 20)
        );
        assert_eq!(
            parse("cache_size", "65536").unwrap(),
            Hint::CacheSize(65536)
        );
        assert_eq!(
            parse("tier", "ALL_SSD").unwrap(),
            Hint::Tier("ALL_SSD".into())
        );
        assert_eq!(
            parse("route", "<64KiB:objects").unwrap(),
            Hint::Route(Route {
                below: true,
                size: 64 << 10,
                mount: "objects".into()
            })
        );
        assert!(parse("route", ">1GiB:pfs").is_ok());
    }

    #[test]
    fn bad_values_and_unknown_hints_are_refused_naming_them() {
        for (name, value, says) in [
            ("placement", "near", "hint placement: \"near\""),
            ("placement", "scatter:0", "scatter:N, N 1 to 1024"),
            ("placement", "collocate:", "collocate:GROUP"),
            ("replicas", "0", "hint replicas: \"0\""),
            ("replicas", "9", "1 to 8"),
            ("replication", "sometimes", "eager or lazy"),
            ("block_size", "100", "4KiB to 1GiB"),
            ("block_size", "2GiB", "4KiB to 1GiB"),
            ("cache_size", "1TiB", "up to 64GiB"),
            ("tier", "fast disk", "a worker tier"),
            ("route", "64KiB:objects", "<SIZE:MOUNT"),
            ("colour", "blue", "user.labios.colour: no such hint"),
        ] {
            let e = parse(name, value).unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument(_)),
                "{name}={value}: {e}"
            );
            assert!(e.to_string().contains(says), "{name}={value}: {e}");
        }
        assert!(Hint::parse("user.labios.replicas", &[0xff]).is_err());
        for spelling in ["+2", "2\n", " 2", ""] {
            assert!(parse("replicas", spelling).is_err(), "{spelling:?}");
        }
        let e = parse("placement", "not empty").unwrap_err().to_string();
        assert!(e.ends_with(REFUSED), "{e}");
    }

    #[test]
    fn only_copies_change_with_data_and_tiers_are_checked_against_workers() {
        assert!(parse("replicas", "3").unwrap().changes_with_data());
        assert!(parse("replication", "eager").unwrap().changes_with_data());
        assert!(!parse("placement", "local").unwrap().changes_with_data());
        let workers = [("ram", 5), ("hdd", 1)];
        assert!(parse("tier", "hdd")
            .unwrap()
            .tier_known(workers.into_iter()));
        assert!(parse("tier", "COLD")
            .unwrap()
            .tier_known(workers.into_iter()));
        assert!(parse("tier", "LAZY_PERSIST")
            .unwrap()
            .tier_known(workers.into_iter()));
        assert!(!parse("tier", "tape")
            .unwrap()
            .tier_known(workers.into_iter()));
        assert!(!parse("tier", "WARM")
            .unwrap()
            .tier_known(workers.into_iter()));
        assert!(!parse("tier", "ALL_SSD")
            .unwrap()
            .tier_known(workers.into_iter()));
        assert!(tier_serves("HOT", "nvme", 4) && !tier_serves("HOT", "hdd", 1));
        assert!(tier_serves("ONE_SSD", "ssd", 3) && !tier_serves("ONE_SSD", "ram", 5));
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("1TiB"), None);
    }
}
