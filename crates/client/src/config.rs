//! Client settings (article 3.3.1a: label size range, sync/async mode).

use labios_label::{Error, Result};
use labios_mounts::MountConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// A call returns when its labels are complete.
    Sync,
    /// A call returns once its labels are published; wait on handles.
    Async,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Requests below this size are cached per file and aggregated into one
    /// indexed label (async mode); 0 disables the small-I/O cache.
    pub min_label_size: u64,
    /// Requests above this size are split into several labels.
    pub max_label_size: u64,
    pub mode: IoMode,
    /// How long a synchronous call or a wait may take before it times out.
    pub wait_timeout_ms: u64,
    /// Labels one client may have in flight before a write waits for the
    /// oldest ones (bounds client memory and warehouse use).
    pub max_in_flight: usize,
    /// Attempts for a read whose data moved between lookup and execution.
    pub read_retries: u32,
    /// How long `labios run`'s interception library may answer `stat` of
    /// an entry from what it last looked up. 0 (the default) never does:
    /// every stat sees every client's completed changes, which the model
    /// checker holds LABIOS to. With a lease another client's change shows
    /// after at most this, the process's own at once.
    pub attr_cache_ms: u64,
    /// Puts write data through a memory region shared with a `labios
    /// serve` on the same host (a Unix socket endpoint) instead of the
    /// socket: one copy, none of the bytes on the socket.
    pub shared_memory: bool,
    /// External storage the client may name (the configuration's top-level
    /// `[mounts.NAME]` tables, shared with the workers).
    #[serde(skip)]
    pub mounts: BTreeMap<String, MountConfig>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            min_label_size: 64 * 1024,
            max_label_size: 1024 * 1024,
            mode: IoMode::Sync,
            wait_timeout_ms: 600_000,
            max_in_flight: 8192,
            read_retries: 8,
            attr_cache_ms: 0,
            shared_memory: true,
            mounts: BTreeMap::new(),
        }
    }
}

pub use labios_label::LABEL_SIZE_LIMIT;

impl ClientConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.max_label_size == 0 || self.max_label_size > LABEL_SIZE_LIMIT {
            return bad(format!(
                "client.max_label_size must be between 1 and {LABEL_SIZE_LIMIT}, got {}",
                self.max_label_size
            ));
        }
        if self.min_label_size > self.max_label_size {
            return bad(format!(
                "client.min_label_size ({}) must not exceed client.max_label_size ({})",
                self.min_label_size, self.max_label_size
            ));
        }
        if self.max_in_flight == 0 {
            return bad("client.max_in_flight must be at least 1".into());
        }
        Ok(())
    }
}
