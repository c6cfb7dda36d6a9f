//! The label queue (article 3.3.2b): bounded, concurrent, ordered per
//! producer; several dispatchers may pull from one queue and one dispatcher
//! from several. Deliveries are acknowledged so that a distributed queue can
//! redeliver what a crashed consumer never finished.

use async_trait::async_trait;
use labios_label::Result;
use std::time::Duration;

/// One item taken from a queue; `token` acknowledges it.
#[derive(Debug)]
pub struct Delivery<T> {
    pub item: T,
    pub token: u64,
}

#[async_trait]
pub trait LabelQueue<T: Send + 'static>: Send + Sync {
    /// Appends items in order. Waits while the queue is at its bound
    /// (backpressure); fails with `Error::Full` if it stays full for the
    /// queue's push timeout.
    async fn push(&self, queue: &str, items: Vec<T>) -> Result<()>;

    /// Takes up to `max` items in order. Returns at once with whatever is
    /// available; only when the queue is empty does it wait, up to `wait`,
    /// for the first item (an empty result means none came).
    async fn pull(&self, queue: &str, max: usize, wait: Duration) -> Result<Vec<Delivery<T>>>;

    /// Marks deliveries done; unacknowledged ones may be redelivered after a
    /// consumer failure by implementations that survive one.
    async fn ack(&self, queue: &str, tokens: &[u64]) -> Result<()>;

    /// Items waiting in the queue.
    async fn depth(&self, queue: &str) -> Result<usize>;

    /// Names of existing queues that start with `prefix`.
    async fn queues(&self, prefix: &str) -> Result<Vec<String>>;
}
