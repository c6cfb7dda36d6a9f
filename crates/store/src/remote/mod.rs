//! Reaching the embedded runtime of a `labios serve` process over a Unix
//! socket or TCP. One connection carries many requests at once: each has an
//! id and its response is matched by id, so a long `pull` or `wait` never
//! holds up other calls.

mod client;
mod opened;
mod order;
mod payload;
/// Public only for the fuzz targets of `labios-fuzz`, which feed the
/// server's frame reader and decoder untrusted bytes; not an API.
#[doc(hidden)]
pub mod proto;
mod put_order;
mod region;
mod server;
mod staging;

pub use client::{acting_as, connect, connect_sharing};
pub use proto::{Session, MAX_FRAME};
pub use server::{serve, AuthFn, Grant, Listener};

use labios_label::{Error, Result};
use std::fmt;
use std::path::PathBuf;

/// Where a `labios serve` process listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

impl Endpoint {
    /// Anything containing `/` or ending in `.sock` is a Unix socket path,
    /// anything else must be `HOST:PORT`.
    pub fn parse(s: &str) -> Result<Self> {
        if s.contains('/') || s.ends_with(".sock") {
            return Ok(Endpoint::Unix(PathBuf::from(s)));
        }
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "endpoint {s:?}: {why}; expected a Unix socket path (containing '/' or \
                 ending in .sock) or HOST:PORT"
            ))
        };
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        port.parse::<u16>().map_err(|_| bad("bad port"))?;
        Ok(Endpoint::Tcp(s.to_string()))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp(a) => f.write_str(a),
        }
    }
}
