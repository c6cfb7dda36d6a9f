//! The label (article 3.2.1): a tuple of operations and pointers to the data
//! they act on, plus state flags, priority and owner. Labels are immutable once
//! published; the live status of a published label is kept in the inventory
//! ([`crate::LabelStatus`]), never by mutating the label.

use crate::id::{AppId, FileId, LabelId, WorkerId};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LabelKind {
    Write,
    Read,
    Delete,
    /// Move/rename a file: source and destination are both `Pointer::File`.
    Rename,
    /// Make everything previously written to the source file durable.
    Flush,
    /// A pipeline of operations (software-defined storage).
    Composite,
    /// The metadata of one external path (source `Pointer::Uri`), put in
    /// the destination warehouse entry. External metadata is asked of a
    /// worker, not of the client's own connection to the external system:
    /// the worker's mount holds merged writes and relaxed metadata that
    /// the external system does not show yet.
    Stat,
    /// The entries under an external path, as [`LabelKind::Stat`] does for
    /// one.
    List,
}

/// Where data comes from or goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pointer {
    None,
    /// The application's own memory; the bytes travel with the request.
    Buffer {
        len: u64,
    },
    /// An entry of the warehouse.
    Warehouse {
        key: String,
        len: u64,
    },
    /// A byte range of a file in the LABIOS namespace.
    File {
        path: String,
        file: FileId,
        offset: u64,
        len: u64,
    },
    /// A specific worker (routing hint or placement).
    Worker(WorkerId),
    /// An ephemeral room: data handed to another application, never to storage.
    Room {
        app: AppId,
        name: String,
    },
    /// A byte range of external storage, named by mount (`pfs:/a/b`) or
    /// URI (`s3://bucket/key`); see `labios-bridge`.
    Uri {
        uri: String,
        offset: u64,
        len: u64,
    },
    /// `len` zero bytes, made by the worker that writes them: the source
    /// of a write that zeroes a range (fallocate's hole punching and range
    /// zeroing), so that no bytes travel through the client or the
    /// warehouse. At most [`LABEL_SIZE_LIMIT`].
    Zeros {
        len: u64,
    },
}

/// The largest label the warehouse and the wire protocol carry
/// comfortably, and the most zeros one label makes.
pub const LABEL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

impl Pointer {
    pub fn len(&self) -> u64 {
        match self {
            Pointer::Buffer { len }
            | Pointer::Warehouse { len, .. }
            | Pointer::File { len, .. }
            | Pointer::Uri { len, .. }
            | Pointer::Zeros { len } => *len,
            _ => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn file(&self) -> Option<(FileId, u64, u64)> {
        match self {
            Pointer::File {
                file, offset, len, ..
            } => Some((*file, *offset, *len)),
            _ => None,
        }
    }
}

/// A reference to a named function of the program repository, with arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub function: String,
    pub args: Vec<(String, String)>,
}

impl Operation {
    /// A pipeline written as text: functions separated by `|`, each
    /// `NAME` or `NAME:KEY=VALUE,KEY=VALUE` (`sort:dtype=i64|zstd:level=19`),
    /// as the CLI, the C API and the Python package take it.
    pub fn parse_pipeline(spec: &str) -> crate::Result<Vec<Operation>> {
        spec.split('|')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|op| {
                let (function, args) = op.split_once(':').unwrap_or((op, ""));
                let args = args
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(|a| {
                        a.split_once('=')
                            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                            .ok_or_else(|| {
                                crate::Error::InvalidArgument(format!(
                                    "pipeline {spec:?}: argument {a:?} of {function} is not KEY=VALUE"
                                ))
                            })
                    })
                    .collect::<crate::Result<Vec<_>>>()?;
                Ok(Operation {
                    function: function.trim().to_string(),
                    args,
                })
            })
            .collect()
    }
}

/// Warehouse key of part `i` of a gathered read: a read label with
/// operations and an index assembles its input from these parts (one per
/// index segment, left by earlier reads on the workers holding the bytes)
/// instead of reading its own device, so that a pipeline can run on data
/// spread over several workers without it ever reaching the client.
pub fn part_key(result_key: &str, i: usize) -> String {
    format!("{result_key}.{i}")
}

/// One piece of an indexed (aggregated) label: `len` bytes at `buf_offset` of
/// the label's data go to `file_offset` of the destination file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub file_offset: u64,
    pub buf_offset: u64,
    pub len: u64,
}

/// State flags (article 3.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct StateFlags(pub u8);

impl StateFlags {
    pub const QUEUED: u8 = 1;
    pub const SCHEDULED: u8 = 1 << 1;
    pub const PENDING: u8 = 1 << 2;
    pub const CACHED: u8 = 1 << 3;
    pub const INVALIDATED: u8 = 1 << 4;
    pub const COMPLETE: u8 = 1 << 5;
    pub const FAILED: u8 = 1 << 6;

    pub fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }
    pub fn with(self, flag: u8) -> Self {
        StateFlags(self.0 | flag)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub id: LabelId,
    pub kind: LabelKind,
    pub source: Pointer,
    pub destination: Pointer,
    /// Functions applied in declared order (empty for plain I/O).
    pub operations: Vec<Operation>,
    /// For indexed labels built from several small requests; empty otherwise.
    pub index: Vec<Segment>,
    pub flags: StateFlags,
    /// Higher runs earlier among labels of one batch.
    pub priority: u8,
    pub owner: AppId,
    /// Completion means durable on the worker's device (fdatasync), not just written.
    pub sync: bool,
    /// HMAC-SHA256 of the label by its owner's secret ([`crate::auth`]);
    /// empty until the client signs it.
    pub auth: Vec<u8>,
    /// A read: the worker the client's read plan found holding every byte
    /// of its range, so that the dispatcher sends it there without looking
    /// the extents up again (article 3.3.2c, read locality). Only a hint:
    /// the worker checks the extents it reads, and bytes moved meanwhile
    /// fail the label as "moved:", which the client retries with a new plan.
    pub holder: Option<WorkerId>,
}

impl Label {
    pub fn new(id: LabelId, kind: LabelKind, owner: AppId) -> Self {
        Label {
            id,
            kind,
            source: Pointer::None,
            destination: Pointer::None,
            operations: Vec::new(),
            index: Vec::new(),
            flags: StateFlags::default(),
            priority: 0,
            owner,
            sync: false,
            auth: Vec::new(),
            holder: None,
        }
    }

    /// The file this label touches and its byte range, if any.
    pub fn file_range(&self) -> Option<(FileId, u64, u64)> {
        match self.kind {
            LabelKind::Write => self.destination.file(),
            _ => self.source.file(),
        }
    }

    /// Bytes of data the label moves.
    pub fn size(&self) -> u64 {
        match self.kind {
            LabelKind::Write => self.source.len(),
            LabelKind::Read => self.source.len(),
            _ => 0,
        }
    }

    /// The warehouse entry holding the bytes a write label carries, staged
    /// there by its client. Nothing reads it once the label has ended, so
    /// whoever ends it (a worker, or a dispatcher failing it, or the client
    /// whose publish failed) releases it: an entry left behind would hold
    /// warehouse room for good, and a full warehouse stops every write.
    pub fn staged_key(&self) -> Option<&str> {
        match (&self.kind, &self.source) {
            (LabelKind::Write, Pointer::Warehouse { key, .. }) => Some(key),
            _ => None,
        }
    }

    /// The warehouse entry a read label's worker puts the bytes in, for its
    /// client to take. A failed label's entry is released by its worker
    /// (a put whose reply was lost may have stored it).
    pub fn result_key(&self) -> Option<&str> {
        match (&self.kind, &self.destination) {
            (
                LabelKind::Read | LabelKind::Stat | LabelKind::List,
                Pointer::Warehouse { key, .. },
            ) => Some(key),
            _ => None,
        }
    }

    /// Whether the label changes stored data (for dependency tracking).
    pub fn mutates(&self) -> bool {
        !matches!(
            self.kind,
            LabelKind::Read | LabelKind::Stat | LabelKind::List
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Operation;

    #[test]
    fn pipelines_parse_from_text() {
        let ops = Operation::parse_pipeline("sort:dtype=i64,order=desc | zstd").unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].function, "sort");
        assert_eq!(
            ops[0].args,
            vec![
                ("dtype".into(), "i64".into()),
                ("order".into(), "desc".into())
            ]
        );
        assert_eq!(ops[1].function, "zstd");
        assert!(ops[1].args.is_empty());
        let e = Operation::parse_pipeline("zstd:level").unwrap_err();
        assert!(
            e.to_string().contains("\"level\" of zstd is not KEY=VALUE"),
            "{e}"
        );
    }
}
