//! Lets a client push a label right behind the put of its data, without
//! waiting a round trip for the put's answer first
//! (`Warehouse::put_ordered`). The server runs a connection's requests
//! concurrently, so a push read after a put could otherwise run before it
//! and publish a label whose data is not there yet. A push waits here for
//! the puts, read before it on the same connection, of the data its labels
//! name, and fails with the error of one that failed: a label is never
//! published over data that was not stored.

use super::proto::{QueueOp, Request};
use labios_label::{Error, Result};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::watch;

/// A put's outcome once known; `None` while it runs.
type Outcome = Option<Result<()>>;

/// Failed puts kept for the pushes that may name them, per connection. A
/// push whose data's failure was dropped past this runs and its label
/// fails at the worker on the missing data, which changes nothing; the
/// client had the put's error already.
const FAILED_KEPT: usize = 1024;

/// The write-data puts of one connection that are running (at most its
/// requests in flight), and the last [`FAILED_KEPT`] that failed and no
/// pushed label has named yet.
#[derive(Clone, Default)]
pub struct PutsInFlight(Arc<Mutex<Puts>>);

#[derive(Default)]
struct Puts {
    by_key: HashMap<String, Arc<watch::Sender<Outcome>>>,
    failed: VecDeque<(String, Arc<watch::Sender<Outcome>>)>,
}

impl Puts {
    /// Forgets `key` if `sender` is still its put: a later put of the same
    /// key is not an earlier one's to forget.
    fn forget(&mut self, key: &str, sender: &Arc<watch::Sender<Outcome>>) {
        if self.by_key.get(key).is_some_and(|s| Arc::ptr_eq(s, sender)) {
            self.by_key.remove(key);
        }
    }
}

/// A running put's place in [`PutsInFlight`], completed by [`Self::finish`].
/// Dropped unfinished (its task was cancelled), a push that waits for it
/// fails.
pub struct PutRunning {
    puts: PutsInFlight,
    key: String,
    sender: Arc<watch::Sender<Outcome>>,
    finished: bool,
}

/// The puts a push must wait for.
pub struct Awaited(Vec<(String, watch::Receiver<Outcome>)>);

impl PutsInFlight {
    /// Notes, in read order, that a put of `key` starts; a later put of the
    /// same key takes its place.
    pub fn begin(&self, key: String) -> PutRunning {
        let sender = Arc::new(watch::channel(None).0);
        self.0.lock().by_key.insert(key.clone(), sender.clone());
        PutRunning {
            puts: self.clone(),
            key,
            sender,
            finished: false,
        }
    }

    /// The puts of the data the labels `request` pushes name, in read
    /// order: each is named once and forgotten here.
    pub fn awaited(&self, request: &Request) -> Awaited {
        let Request::Labels(QueueOp::Push { items, .. }) = request else {
            return Awaited(Vec::new());
        };
        let mut puts = self.0.lock();
        Awaited(
            items
                .iter()
                .filter_map(|l| l.staged_key())
                .filter_map(|key| {
                    puts.by_key
                        .remove(key)
                        .map(|s| (key.to_string(), s.subscribe()))
                })
                .collect(),
        )
    }
}

impl PutRunning {
    /// Records the put's outcome. A stored entry is forgotten at once; a
    /// failure stays for the push that names it (the last
    /// [`FAILED_KEPT`]).
    pub fn finish(mut self, outcome: &Result<()>) {
        self.finished = true;
        self.done(outcome.clone());
    }

    fn done(&self, outcome: Result<()>) {
        let mut puts = self.puts.0.lock();
        if outcome.is_ok() {
            puts.forget(&self.key, &self.sender);
        } else {
            let Puts { by_key, failed } = &mut *puts;
            // Failures a push has named since are no longer kept.
            failed.retain(|(key, sender)| by_key.get(key).is_some_and(|s| Arc::ptr_eq(s, sender)));
            failed.push_back((self.key.clone(), self.sender.clone()));
            if failed.len() > FAILED_KEPT {
                if let Some((key, sender)) = failed.pop_front() {
                    puts.forget(&key, &sender);
                }
            }
        }
        self.sender.send_replace(Some(outcome));
    }
}

impl Drop for PutRunning {
    fn drop(&mut self) {
        if !self.finished {
            self.done(Err(Error::Unavailable(format!(
                "the put of {}, a label's data, ended without an answer",
                self.key
            ))));
        }
    }
}

impl Awaited {
    /// Waits until every put is done; the first failure, naming its key.
    pub async fn wait(self) -> Result<()> {
        for (key, mut rx) in self.0 {
            let outcome = rx.wait_for(Option::is_some).await.map(|o| o.clone());
            match outcome {
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(e))) => {
                    return Err(Error::Storage(format!(
                        "a label's data, {key}, was not stored: {e}"
                    )))
                }
                Ok(None) | Err(_) => {
                    return Err(Error::Unavailable(format!(
                        "the put of {key}, a label's data, ended without an answer"
                    )))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_label::{Label, LabelId, LabelKind, Pointer};

    fn push(keys: &[&str]) -> Request {
        let items = keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let mut l = Label::new(LabelId::from_u128(i as u128 + 1), LabelKind::Write, 3);
                l.source = Pointer::Warehouse {
                    key: key.to_string(),
                    len: 1,
                };
                l
            })
            .collect();
        Request::Labels(QueueOp::Push {
            queue: "q".into(),
            items,
        })
    }

    #[tokio::test]
    async fn a_push_waits_for_the_puts_of_its_data_and_fails_with_theirs() {
        let puts = PutsInFlight::default();
        let one = puts.begin("a3/w/1".into());
        let two = puts.begin("a3/w/2".into());
        let waiting = puts.awaited(&push(&["a3/w/1", "a3/w/2", "a3/w/9"]));
        assert_eq!(
            waiting.0.len(),
            2,
            "a key no put runs for is not waited for"
        );
        let wait = tokio::spawn(waiting.wait());
        one.finish(&Ok(()));
        tokio::task::yield_now().await;
        assert!(!wait.is_finished(), "one put still runs");
        two.finish(&Err(Error::Unavailable("full".into())));
        let e = wait.await.unwrap().unwrap_err().to_string();
        assert!(e.contains("a3/w/2") && e.contains("full"), "{e}");
        assert!(puts.0.lock().by_key.is_empty(), "each named once");
    }

    #[tokio::test]
    async fn a_stored_put_is_forgotten_and_a_failed_one_kept_for_its_push() {
        let puts = PutsInFlight::default();
        puts.begin("a3/w/1".into()).finish(&Ok(()));
        puts.begin("a3/w/2".into())
            .finish(&Err(Error::Storage("disk".into())));
        let first = puts.begin("a3/w/3".into());
        let again = puts.begin("a3/w/3".into());
        first.finish(&Ok(()));
        assert!(
            puts.0.lock().by_key.contains_key("a3/w/3"),
            "an earlier put does not forget the later one of its key"
        );
        drop(again);
        let waiting = puts.awaited(&push(&["a3/w/1", "a3/w/2", "a3/w/3"]));
        let e = waiting.wait().await.unwrap_err().to_string();
        assert!(e.contains("a3/w/2") && e.contains("disk"), "{e}");
        let e = puts
            .awaited(&push(&["a3/w/3"]))
            .wait()
            .await
            .map(|_| ())
            .err();
        assert!(
            e.is_none(),
            "named once: a second push finds nothing to wait for"
        );
    }

    #[tokio::test]
    async fn a_put_dropped_unfinished_fails_its_push() {
        let puts = PutsInFlight::default();
        let running = puts.begin("a3/w/1".into());
        let waiting = puts.awaited(&push(&["a3/w/1"]));
        drop(running);
        let e = waiting.wait().await.unwrap_err().to_string();
        assert!(
            e.contains("a3/w/1") && e.contains("without an answer"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn failures_no_push_names_are_kept_to_a_bound() {
        let puts = PutsInFlight::default();
        for i in 0..FAILED_KEPT + 10 {
            puts.begin(format!("a3/w/{i}"))
                .finish(&Err(Error::Storage("disk".into())));
        }
        let held = puts.0.lock().by_key.len();
        assert_eq!(held, FAILED_KEPT, "the oldest failures are dropped");
        assert!(puts.awaited(&push(&["a3/w/0"])).wait().await.is_ok());
        let last = format!("a3/w/{}", FAILED_KEPT + 9);
        assert!(puts.awaited(&push(&[&last])).wait().await.is_err());
        // A failure named since takes no room from those still unnamed:
        // the next failure drops none of them.
        puts.begin("a3/w/x".into())
            .finish(&Err(Error::Storage("disk".into())));
        assert_eq!(puts.0.lock().by_key.len(), FAILED_KEPT);
        assert!(puts.0.lock().by_key.contains_key("a3/w/10"));
        // A put dropped unanswered counts as a failure, bounded the same.
        drop(puts.begin("a3/w/y".into()));
        assert_eq!(puts.0.lock().by_key.len(), FAILED_KEPT);
        assert!(!puts.0.lock().by_key.contains_key("a3/w/10"));
        assert!(puts.awaited(&push(&["a3/w/y"])).wait().await.is_err());
    }
}
