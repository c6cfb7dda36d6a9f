//! The `labios serve` wire protocol as the server reads it from a socket:
//! the bytes are a stream of length-prefixed frames, each read with the
//! server's `read_frame` and decoded with `decode_frame` as a request (what
//! the server does) and as a response (what a client does with the
//! server's answers).

use crate::engine::Target;
use bytes::Bytes;
use labios_label::{LabelId, LabelState, LabelStatus, Task};
use labios_store::remote::proto::{
    decode_frame, frame, read_frame, QueueOp, Reply, Request, RequestFrame, ResponseFrame, PROTOCOL,
};
use labios_store::{AppRecord, Extent, FileKind, Named, Presence, XattrCond};
use std::time::Duration;

pub static TARGET: Target = Target {
    name: "frames",
    about: "labios serve frames: remote::proto::read_frame + decode_frame (requests and responses)",
    run,
    seeds,
    dictionary: &[b"LB\x02", b"labels.3", b"a3/", b"/data/f"],
    max_len: 8192,
    default_inputs: 10_000_000,
    smoke_inputs: 100_000,
    cost: 1,
    hang: Duration::from_secs(2),
};

fn request(id: u64, request: Request) -> Vec<u8> {
    frame(&RequestFrame { id, request }, 0).expect("a seed request fits a frame")
}

fn seeds() -> Vec<Vec<u8>> {
    let labels = super::label::signed_labels();
    let label_id = LabelId {
        nanos: 1_700_000_000_000_000_000,
        origin: 42,
    };
    let requests = vec![
        Request::Hello {
            key: Some("AKIDFUZZ".into()),
            secret: Some("fuzz application secret".into()),
            protocol: PROTOCOL,
        },
        Request::Labels(QueueOp::Push {
            queue: "labels.3".into(),
            items: labels.to_vec(),
        }),
        Request::Labels(QueueOp::Pull {
            queue: "labels.3".into(),
            max: 32,
            wait: Duration::from_millis(250),
        }),
        Request::Tasks(QueueOp::Push {
            queue: "worker.1".into(),
            items: vec![Task::single(labels[1].clone())],
        }),
        Request::Tasks(QueueOp::Ack {
            queue: "worker.1".into(),
            tokens: vec![1, 2, 300],
        }),
        Request::Put {
            key: "a3/w/1".into(),
            data: Bytes::from_static(b"0123456789abcdef"),
        },
        Request::Get {
            key: "a3/w/1".into(),
        },
        Request::PutShared {
            key: "a3/w/2".into(),
            slot: 31,
            len: 1 << 20,
        },
        Request::Create {
            path: "/data/f".into(),
            kind: FileKind::File,
            mode: 0o644,
            owner: labios_store::Owner {
                app: 3,
                uid: 1000,
                gid: 1000,
            },
        },
        Request::SetAttr {
            file: 9,
            attr: labios_store::SetAttr {
                mode: Some(0o600),
                mtime: Some(labios_store::SetTime::At(5)),
                ..Default::default()
            },
        },
        Request::Rename {
            from: "/data/f".into(),
            to: "/data/g".into(),
            how: labios_store::RenameHow::Exchange,
        },
        Request::CommitExtent {
            file: 9,
            extent: Extent {
                offset: 4096,
                len: 4096,
                worker: 1,
                label: label_id,
            },
        },
        Request::Extents {
            file: 9,
            offset: 0,
            len: u64::MAX,
        },
        Request::ReadPlan {
            named: Named::Path("/a/b".into()),
            offset: 4096,
            len: u64::MAX,
        },
        Request::SetStatus(LabelStatus {
            error: Some("failed".into()),
            result_key: Some("a3/r/1".into()),
            ..LabelStatus::new(label_id, LabelState::Failed)
        }),
        Request::Wait {
            ids: vec![label_id, label_id],
            timeout: Duration::from_secs(600),
        },
        Request::WaitInline {
            ids: vec![label_id],
            timeout: Duration::from_secs(600),
            inline: 4096,
            budget: u64::MAX,
            prefix: "a3/r/".into(),
        },
        Request::PutApp(AppRecord {
            id: 3,
            name: "fuzz".into(),
            key: "AKIDFUZZ".into(),
            secret: "s".into(),
            settings: vec![("mode".into(), "async".into())],
        }),
        Request::PutFunction {
            app: 3,
            name: "upper".into(),
            module: Some(Bytes::from_static(b"(module)")),
        },
        Request::SetXattr {
            file: 9,
            name: "user.color".into(),
            value: Some(Bytes::from_static(b"blue")),
            cond: XattrCond {
                presence: Presence::Absent,
                while_empty: true,
            },
        },
        Request::NextId("origin".into()),
        Request::Sync,
    ];
    let frames: Vec<Vec<u8>> = requests
        .into_iter()
        .enumerate()
        .map(|(i, r)| request(i as u64 + 1, r))
        .collect();
    let replies = [
        ResponseFrame {
            id: 1,
            result: Ok(Reply::Labels(vec![(labels[0].clone(), 7)])),
        },
        ResponseFrame {
            id: 2,
            result: Ok(Reply::Data(Some(Bytes::from_static(b"data")))),
        },
        ResponseFrame {
            id: 3,
            result: Ok(Reply::Waited(
                vec![LabelStatus::new(label_id, LabelState::Complete)],
                vec![("a3/r/1".into(), Bytes::from_static(b"result"))],
            )),
        },
        ResponseFrame {
            id: 4,
            result: Ok(Reply::DataShared {
                slot: 3,
                len: 1 << 20,
            }),
        },
        ResponseFrame {
            id: 0,
            result: Err(labios_label::Error::Protocol("bad frame".into())),
        },
    ];
    let mut seeds = frames.clone();
    seeds.extend(
        replies
            .iter()
            .map(|r| frame(r, 0).expect("a seed reply fits a frame")),
    );
    // A connection's first frames, as one stream.
    seeds.push(frames[..3].concat());
    seeds
}

fn run(data: &[u8]) {
    let mut stream = data;
    // Each frame consumes at least its 4-byte length, so this ends.
    while let Ok(Some(body)) = futures::executor::block_on(read_frame(&mut stream)) {
        let _ = decode_frame::<RequestFrame>(&body);
        let _ = decode_frame::<ResponseFrame>(&body);
    }
}
