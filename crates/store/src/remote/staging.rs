//! Write data a connection staged in the warehouse and has not yet named in
//! a label it pushed. A client killed between the two (or one that never
//! pushes) would leave those entries forever, held against the warehouse's
//! bound, and with them the memory of its shared region (`super::region`):
//! the server deletes them when the connection closes. Puts are noted as
//! they are read; a put of a key the connection may not put (another
//! application's) is not noted. Data a pushed label names is forgotten
//! once the push succeeded: a push that failed, or was still running when
//! the connection closed, leaves its data to the sweep (its client saw no
//! answer; a label it published anyway fails on the missing data, which
//! changes nothing). A published write's data is left to its worker, which
//! releases it once the label ran.

use super::proto::{QueueOp, Request};
use crate::Warehouse;
use std::collections::HashSet;

/// The keys of one connection's write data not yet named by a label.
#[derive(Debug, Default)]
pub struct Staging(HashSet<String>);

impl Staging {
    /// Notes that this connection puts `key`.
    pub fn stored(&mut self, key: String) {
        self.0.insert(key);
    }

    /// Forgets the data of labels a push made public.
    pub fn named(&mut self, keys: &[String]) {
        for key in keys {
            self.0.remove(key);
        }
    }

    /// Deletes the entries stored and never named; what fails to go is
    /// logged.
    pub async fn sweep(self, w: &dyn Warehouse) {
        for key in self.0 {
            if let Err(e) = w.delete(&key).await {
                tracing::warn!("write data a closed connection staged, {key}, stays: {e}");
            }
        }
    }
}

/// The write data the labels `request` pushes name.
pub fn names(request: &Request) -> Vec<String> {
    match request {
        Request::Labels(QueueOp::Push { items, .. }) => items
            .iter()
            .filter_map(|l| l.staged_key())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// The key of the write data `request` puts, if it puts any: in its frame
/// or in a slot of the shared region, for itself or another user (`As`).
pub fn write_data(request: &Request) -> Option<String> {
    match request {
        Request::Put { key, .. } | Request::PutShared { key, .. } if is_write_data(key) => {
            Some(key.clone())
        }
        Request::As { request, .. } => write_data(request),
        _ => None,
    }
}

/// A write label's data as clients name it: `a<app>/w/<label>`.
pub fn is_write_data(key: &str) -> bool {
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
    use labios_label::{Label, LabelId, LabelKind, Pointer};

    #[test]
    fn only_write_data_no_pushed_label_names_is_left() {
        let mut s = Staging::default();
        for key in ["a3/w/1", "a3/w/2", "a3/r/9", "room/3/x", "ab/w/1", "a/w/1"] {
            let put = Request::Put {
                key: key.into(),
                data: Bytes::from_static(b"x"),
            };
            if let Some(key) = write_data(&put) {
                s.stored(key);
            }
        }
        let mut label = Label::new(LabelId::from_u128(1), LabelKind::Write, 3);
        label.source = Pointer::Warehouse {
            key: "a3/w/1".into(),
            len: 1,
        };
        s.named(&names(&Request::Labels(QueueOp::Push {
            queue: "q".into(),
            items: vec![label],
        })));
        assert_eq!(s.0, HashSet::from(["a3/w/2".to_string()]));
    }
}
