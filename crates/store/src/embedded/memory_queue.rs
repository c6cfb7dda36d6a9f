//! An in-process label queue: one bounded FIFO per name.

use crate::label_queue::{Delivery, LabelQueue};
use async_trait::async_trait;
use labios_label::{Error, Result};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Bounded in-memory queues, created by name on first use.
///
/// Pushers and pullers wake each other through [`Notify`] the moment items or
/// room appear, so a lone label crosses the queue in microseconds instead of
/// waiting out a polling interval. A batch no larger than the bound is
/// appended all at once or not at all, so a `Full` error loses nothing; a
/// batch larger than the bound is appended as room appears and the error
/// says how much of it went in.
pub struct MemoryQueue<T> {
    bound: usize,
    push_timeout: Duration,
    queues: RwLock<HashMap<String, Arc<Fifo<T>>>>,
}

struct Fifo<T> {
    state: Mutex<FifoState<T>>,
    /// Signalled when items arrive.
    filled: Notify,
    /// Signalled when items leave.
    drained: Notify,
}

struct FifoState<T> {
    items: VecDeque<T>,
    next_token: u64,
}

impl<T> MemoryQueue<T> {
    /// `bound` items per queue (at least 1); a push waits at most
    /// `push_timeout` for room.
    pub fn new(bound: usize, push_timeout: Duration) -> Self {
        MemoryQueue {
            bound: bound.max(1),
            push_timeout,
            queues: RwLock::new(HashMap::new()),
        }
    }

    fn fifo(&self, name: &str) -> Arc<Fifo<T>> {
        if let Some(q) = self.queues.read().get(name) {
            return q.clone();
        }
        self.queues
            .write()
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Fifo {
                    state: Mutex::new(FifoState {
                        items: VecDeque::new(),
                        next_token: 1,
                    }),
                    filled: Notify::new(),
                    drained: Notify::new(),
                })
            })
            .clone()
    }
}

#[async_trait]
impl<T: Send + 'static> LabelQueue<T> for MemoryQueue<T> {
    async fn push(&self, queue: &str, items: Vec<T>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let q = self.fifo(queue);
        let total = items.len();
        let all_or_nothing = total <= self.bound;
        let mut items = items.into_iter();
        let mut left = total;
        let deadline = Instant::now() + self.push_timeout;
        loop {
            let drained = q.drained.notified();
            tokio::pin!(drained);
            // Register before looking so that a pull between the look and the
            // wait still wakes us.
            drained.as_mut().enable();
            {
                let mut s = q.state.lock();
                let room = self.bound.saturating_sub(s.items.len());
                let take = if all_or_nothing {
                    if room >= left {
                        left
                    } else {
                        0
                    }
                } else {
                    room.min(left)
                };
                if take > 0 {
                    s.items.extend(items.by_ref().take(take));
                    left -= take;
                    drop(s);
                    q.filled.notify_waiters();
                    if left == 0 {
                        return Ok(());
                    }
                    continue;
                }
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                return Err(if left == total {
                    Error::Full(format!("queue {queue}"))
                } else {
                    Error::Full(format!(
                        "queue {queue} (only {} of {total} items were accepted)",
                        total - left
                    ))
                });
            }
        }
    }

    async fn pull(&self, queue: &str, max: usize, wait: Duration) -> Result<Vec<Delivery<T>>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let q = self.fifo(queue);
        let deadline = Instant::now() + wait;
        loop {
            let filled = q.filled.notified();
            tokio::pin!(filled);
            filled.as_mut().enable();
            {
                let mut s = q.state.lock();
                let n = max.min(s.items.len());
                if n > 0 {
                    let first = s.next_token;
                    s.next_token += n as u64;
                    let out: Vec<_> = s
                        .items
                        .drain(..n)
                        .zip(first..)
                        .map(|(item, token)| Delivery { item, token })
                        .collect();
                    drop(s);
                    q.drained.notify_waiters();
                    return Ok(out);
                }
            }
            if tokio::time::timeout_at(deadline, filled).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    /// Nothing to do: an in-memory queue dies with its process, consumers
    /// included, so there is never anyone left to redeliver to.
    async fn ack(&self, _queue: &str, _tokens: &[u64]) -> Result<()> {
        Ok(())
    }

    async fn depth(&self, queue: &str) -> Result<usize> {
        let q = self.queues.read().get(queue).cloned();
        Ok(q.map_or(0, |q| q.state.lock().items.len()))
    }

    async fn queues(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .queues
            .read()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        names.sort();
        Ok(names)
    }
}
