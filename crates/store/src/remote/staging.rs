//! Write data a connection staged in the warehouse and has not yet named in
//! a label it pushed. A client killed between the two (or one that never
//! pushes) would leave those entries forever, held against the warehouse's
//! bound, and with them the memory of its shared region (`super::region`):
//! the server deletes them when the connection closes. Data a pushed label
//! names is left to the label's worker, which releases it once the label
//! ran, so an acknowledged or published write is never touched.

use super::proto::{QueueOp, Request};
use crate::Warehouse;
use std::collections::HashSet;

/// The keys of one connection's write data not yet named by a label.
#[derive(Debug, Default)]
pub struct Staging(HashSet<String>);

impl Staging {
    /// Notes what `request` stages or names, in the order the connection
    /// sent its requests (a label is pushed after the put of its data was
    /// answered).
    pub fn saw(&mut self, request: &Request) {
        match request {
            Request::Put { key, .. } if is_write_data(key) => {
                self.0.insert(key.clone());
            }
            Request::Labels(QueueOp::Push { items, .. }) => {
                for key in items.iter().filter_map(|l| l.staged_key()) {
                    self.0.remove(key);
                }
            }
            _ => {}
        }
    }

    /// Deletes the entries staged and never named; what fails to go is
    /// logged.
    pub async fn sweep(self, w: &dyn Warehouse) {
        for key in self.0 {
            if let Err(e) = w.delete(&key).await {
                tracing::warn!("write data a closed connection staged, {key}, stays: {e}");
            }
        }
    }
}

/// A write label's data as clients name it: `a<app>/w/<label>`.
fn is_write_data(key: &str) -> bool {
    key.strip_prefix('a')
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(app, rest)| {
            !app.is_empty() && app.bytes().all(|b| b.is_ascii_digit()) && rest.starts_with("w/")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use labios_label::{Label, LabelKind, Pointer};

    fn put(key: &str) -> Request {
        Request::Put {
            key: key.into(),
            data: Bytes::from_static(b"x"),
        }
    }

    #[test]
    fn only_write_data_no_pushed_label_names_is_left() {
        let mut s = Staging::default();
        for key in ["a3/w/1", "a3/w/2", "a3/r/9", "room/3/x", "ab/w/1", "a/w/1"] {
            s.saw(&put(key));
        }
        let mut label = Label::new(labios_label::LabelId::from_u128(1), LabelKind::Write, 3);
        label.source = Pointer::Warehouse {
            key: "a3/w/1".into(),
            len: 1,
        };
        s.saw(&Request::Labels(QueueOp::Push {
            queue: "q".into(),
            items: vec![label],
        }));
        assert_eq!(s.0, HashSet::from(["a3/w/2".to_string()]));
    }
}
