//! The warehouse (article 3.3.1b): a key-value map that holds data in transit
//! between applications and workers, and ephemeral rooms shared between
//! applications. Bounded in bytes: a put into a full warehouse waits for
//! space (backpressure) rather than growing memory.

use async_trait::async_trait;
use bytes::Bytes;
use labios_label::Result;
use std::time::Duration;

/// The part of a warehouse's byte bound that only results may use
/// ([`Warehouse::put_result`]): an eighth. A worker runs a read on one of
/// its lanes and puts the bytes read before the lane is free again. Were
/// results held to the same bound as staged data, writes waiting in the
/// queues could fill the warehouse while every lane runs a read, and the
/// reads would wait for room that only those queued writes free once they
/// run (the soak in BENCHMARKS.md stopped that way). Staged data never
/// takes the reserve, so a result waits at most for applications to take
/// earlier results.
pub const fn result_reserve(max_bytes: u64) -> u64 {
    max_bytes / 8
}

/// The bound staged data is held to: `max_bytes` less the results'
/// reserve.
pub const fn staged_bound(max_bytes: u64) -> u64 {
    max_bytes - result_reserve(max_bytes)
}

#[async_trait]
pub trait Warehouse: Send + Sync {
    /// Stores `data` under `key`, replacing any previous value. Waits while
    /// the warehouse holds more than [`staged_bound`] of its bound;
    /// `Error::Full` if that lasts past the put timeout or `data` alone
    /// exceeds that.
    async fn put(&self, key: &str, data: Bytes) -> Result<()>;
    /// Stores a worker's result (the bytes of a read) like [`Self::put`],
    /// but up to the whole bound: see [`result_reserve`].
    async fn put_result(&self, key: &str, data: Bytes) -> Result<()>;
    async fn get(&self, key: &str) -> Result<Option<Bytes>>;
    /// Removes and returns the value.
    async fn take(&self, key: &str) -> Result<Option<Bytes>>;
    async fn delete(&self, key: &str) -> Result<bool>;
    /// Keys starting with `prefix`.
    async fn keys(&self, prefix: &str) -> Result<Vec<String>>;
    /// Bytes currently held.
    async fn usage(&self) -> Result<u64>;
    /// [`Self::put`] in two steps, for a write's data (`a<app>/w/<label>`)
    /// whose label is pushed next: once this returns, a push of a label
    /// naming `key` to the label queue of the same [`crate::Stores`] waits
    /// for the put (and fails if it failed), so the caller may push at
    /// once and take the put's answer, the returned future, afterwards.
    /// Over `labios serve`'s socket this saves a write one round trip; the
    /// default stores first.
    async fn put_ordered(&self, key: &str, data: Bytes) -> Result<PutAnswer> {
        self.put(key, data).await?;
        Ok(Box::pin(std::future::ready(Ok(()))))
    }
}

/// The answer to a put still under way ([`Warehouse::put_ordered`]).
pub type PutAnswer = futures::future::BoxFuture<'static, Result<()>>;

/// Attempts [`release`] makes.
pub const RELEASE_ATTEMPTS: u32 = 5;

/// Deletes entries nobody will read again (see
/// `labios_label::Label::staged_key`), trying each again on a transient
/// failure: an entry that stays holds warehouse room until the service
/// restarts. Best effort: what is still there after [`RELEASE_ATTEMPTS`]
/// is logged, and the caller's outcome does not change.
pub async fn release<K: AsRef<str> + Sync>(warehouse: &dyn Warehouse, keys: &[K]) {
    for key in keys {
        let key = key.as_ref();
        let mut attempt = 1;
        loop {
            match warehouse.delete(key).await {
                Ok(_) => break,
                Err(e) if attempt >= RELEASE_ATTEMPTS => {
                    tracing::warn!("warehouse entry {key} not released: {e}");
                    break;
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(u64::from(attempt))).await;
                    attempt += 1;
                }
            }
        }
    }
}
