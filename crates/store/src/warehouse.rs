//! The warehouse (article 3.3.1b): a key-value map that holds data in transit
//! between applications and workers, and ephemeral rooms shared between
//! applications. Bounded in bytes: a put into a full warehouse waits for
//! space (backpressure) rather than growing memory.

use async_trait::async_trait;
use bytes::Bytes;
use labios_label::Result;

#[async_trait]
pub trait Warehouse: Send + Sync {
    /// Stores `data` under `key`, replacing any previous value. Waits while
    /// the warehouse is over its byte bound; `Error::Full` if that lasts past
    /// the put timeout or `data` alone exceeds the bound.
    async fn put(&self, key: &str, data: Bytes) -> Result<()>;
    async fn get(&self, key: &str) -> Result<Option<Bytes>>;
    /// Removes and returns the value.
    async fn take(&self, key: &str) -> Result<Option<Bytes>>;
    async fn delete(&self, key: &str) -> Result<bool>;
    /// Keys starting with `prefix`.
    async fn keys(&self, prefix: &str) -> Result<Vec<String>>;
    /// Bytes currently held.
    async fn usage(&self) -> Result<u64>;
}
