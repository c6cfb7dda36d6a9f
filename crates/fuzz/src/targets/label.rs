//! Labels and tasks as they arrive from the queues (`labios_label::codec`),
//! then their signatures as the dispatcher and the workers check them
//! (`labios_label::auth`). Besides not panicking, a decoded label must
//! re-encode to itself, and must verify only if it is one the test signed:
//! anything else verifying would be a forgery.

use crate::engine::Target;
use labios_label::{
    auth, decode, encode, Label, LabelId, LabelKind, Operation, Pointer, Segment, StateFlags, Task,
};
use std::sync::OnceLock;
use std::time::Duration;

/// The application secret the seed labels are signed with.
pub(crate) const SECRET: &[u8] = b"fuzz application secret";

pub static TARGET: Target = Target {
    name: "label",
    about: "labios_label::decode of a Label and a Task, then auth::verify of each label",
    run,
    seeds,
    dictionary: &[
        b"LB\x02",
        b"/data/out.bin",
        b"s3://bucket/key",
        b"zstd",
        b"level",
    ],
    max_len: 4096,
    default_inputs: 10_000_000,
    smoke_inputs: 50_000,
    cost: 1,
    hang: Duration::from_secs(2),
};

/// Signed labels of every kind and pointer, with operations and an index.
pub(crate) fn signed_labels() -> &'static [Label] {
    static LABELS: OnceLock<Vec<Label>> = OnceLock::new();
    LABELS.get_or_init(|| {
        let id = |n: u64| LabelId {
            nanos: 1_700_000_000_000_000_000 + n,
            origin: 42,
        };
        let file = |len| Pointer::File {
            path: "/data/out.bin".into(),
            file: 9,
            offset: 1 << 20,
            len,
        };
        let mut write = Label::new(id(1), LabelKind::Write, 3);
        write.source = Pointer::Warehouse {
            key: "a3/w/1".into(),
            len: 4096,
        };
        write.destination = file(4096);
        write.index = vec![
            Segment {
                file_offset: 0,
                buf_offset: 0,
                len: 10,
            },
            Segment {
                file_offset: 100,
                buf_offset: 10,
                len: 4086,
            },
        ];
        write.flags = StateFlags::default().with(StateFlags::QUEUED);
        write.sync = true;
        let mut read = Label::new(id(2), LabelKind::Read, 3);
        read.source = file(65536);
        read.destination = Pointer::Buffer { len: 65536 };
        read.operations = vec![
            Operation {
                function: "sort".into(),
                args: vec![("dtype".into(), "i64".into())],
            },
            Operation {
                function: "zstd".into(),
                args: vec![("level".into(), "3".into())],
            },
        ];
        read.priority = 7;
        read.holder = Some(2);
        let mut rename = Label::new(id(3), LabelKind::Rename, 4);
        rename.source = file(0);
        rename.destination = Pointer::File {
            path: "/data/renamed".into(),
            file: 9,
            offset: 0,
            len: 0,
        };
        let mut external = Label::new(id(4), LabelKind::Read, 4);
        external.source = Pointer::Uri {
            uri: "s3://bucket/key".into(),
            offset: 10,
            len: 20,
        };
        external.destination = Pointer::Room {
            app: 5,
            name: "shared".into(),
        };
        let mut delete = Label::new(id(5), LabelKind::Delete, 3);
        delete.source = Pointer::Worker(2);
        let flush = Label::new(id(6), LabelKind::Flush, 3);
        let mut composite = Label::new(id(7), LabelKind::Composite, 3);
        composite.operations = vec![Operation {
            function: "my-filter".into(),
            args: vec![("threshold".into(), "0.5".into())],
        }];
        let mut listing = Label::new(id(8), LabelKind::List, 3);
        listing.source = Pointer::Uri {
            uri: "pfs:/runs/".into(),
            offset: 0,
            len: 0,
        };
        listing.destination = Pointer::Warehouse {
            key: "a3/r/8".into(),
            len: 0,
        };
        let mut labels = vec![
            write, read, rename, external, delete, flush, composite, listing,
        ];
        for l in &mut labels {
            auth::sign(l, SECRET);
        }
        labels
    })
}

fn seeds() -> Vec<Vec<u8>> {
    let labels = signed_labels();
    let mut seeds: Vec<Vec<u8>> = labels.iter().map(encode).collect();
    seeds.push(encode(&Task::single(labels[0].clone())));
    seeds.push(encode(&Task {
        labels: labels.to_vec(),
        aggregated: true,
        supertask: false,
    }));
    seeds.push(encode(&Task {
        labels: labels[..2].to_vec(),
        aggregated: false,
        supertask: true,
    }));
    seeds.push(encode(&Task::wake_up()));
    seeds
}

fn run(data: &[u8]) {
    if let Ok(label) = decode::<Label>(data) {
        check(&label);
    }
    if let Ok(task) = decode::<Task>(data) {
        let again: Task = decode(&encode(&task)).expect("a re-encoded task decodes");
        assert_eq!(again, task, "re-encoding changed the task");
        task.labels.iter().for_each(check);
    }
}

fn check(label: &Label) {
    let again: Label = decode(&encode(label)).expect("a re-encoded label decodes");
    assert_eq!(&again, label, "re-encoding changed the label");
    if auth::verify(label, SECRET).is_ok() {
        assert!(
            signed_labels().contains(label),
            "a label nobody signed verifies: {label:?}"
        );
    }
    assert!(
        auth::verify(label, b"another application's secret").is_err(),
        "a label verifies under a secret it was not signed with: {label:?}"
    );
}
