//! An in-process warehouse: a byte-bounded map.

use crate::warehouse::{staged_bound, Warehouse};
use async_trait::async_trait;
use bytes::Bytes;
use labios_label::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A map from key to bytes that never holds more than `max_bytes` of values
/// (staged data at most [`staged_bound`] of them).
///
/// A put that does not fit waits until a take, delete or smaller replacement
/// frees room (woken, not polled), so producers slow down to the pace of
/// consumers instead of growing memory.
pub struct MemoryWarehouse {
    max_bytes: u64,
    put_timeout: Duration,
    state: Mutex<State>,
    freed: Notify,
}

#[derive(Default)]
struct State {
    map: HashMap<String, Bytes>,
    used: u64,
}

impl MemoryWarehouse {
    pub fn new(max_bytes: u64, put_timeout: Duration) -> Self {
        MemoryWarehouse {
            max_bytes,
            put_timeout,
            state: Mutex::new(State::default()),
            freed: Notify::new(),
        }
    }
}

impl MemoryWarehouse {
    /// Stores `data` once the values held, with it, stay within `limit`.
    async fn put_within(&self, key: &str, data: Bytes, limit: u64) -> Result<()> {
        let len = data.len() as u64;
        if len > limit {
            return Err(Error::Full(format!(
                "warehouse (a {len}-byte value exceeds its {limit}-byte bound)"
            )));
        }
        let deadline = Instant::now() + self.put_timeout;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut s = self.state.lock();
                let old = s.map.get(key).map_or(0, |v| v.len() as u64);
                if s.used - old + len <= limit {
                    s.used = s.used - old + len;
                    assert!(s.used <= self.max_bytes, "warehouse over its bound");
                    s.map.insert(key.to_string(), data);
                    drop(s);
                    if old > len {
                        self.freed.notify_waiters();
                    }
                    return Ok(());
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(Error::Full(format!(
                    "warehouse (no room for {len} bytes under key {key:?} within {:?})",
                    self.put_timeout
                )));
            }
        }
    }
}

#[async_trait]
impl Warehouse for MemoryWarehouse {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.put_within(key, data, staged_bound(self.max_bytes))
            .await
    }

    async fn put_result(&self, key: &str, data: Bytes) -> Result<()> {
        self.put_within(key, data, self.max_bytes).await
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        Ok(self.state.lock().map.get(key).cloned())
    }

    async fn take(&self, key: &str) -> Result<Option<Bytes>> {
        let taken = {
            let mut s = self.state.lock();
            let v = s.map.remove(key);
            if let Some(v) = &v {
                s.used -= v.len() as u64;
            }
            v
        };
        if taken.is_some() {
            self.freed.notify_waiters();
        }
        Ok(taken)
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        Ok(self.take(key).await?.is_some())
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let mut keys: Vec<String> = self
            .state
            .lock()
            .map
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.sort();
        Ok(keys)
    }

    async fn usage(&self) -> Result<u64> {
        Ok(self.state.lock().used)
    }
}
