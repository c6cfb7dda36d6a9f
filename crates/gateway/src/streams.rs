//! Object bodies to and from LABIOS files, streamed: an upload becomes
//! asynchronous write labels as its bytes arrive and a download reads ahead
//! of the HTTP connection, each with a fixed bound on the bytes held, so an
//! object of any size passes through the gateway in bounded memory.

use crate::tenants::Tenant;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use labios_client::{Client, Handle};
use labios_label::Error;
use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum, Md5};
use s3s::dto::StreamingBlob;
use s3s::{s3_error, S3ErrorCode, S3Result};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Bytes handed to the client per call; it splits them into labels of
/// `max_label_size`.
const CHUNK: usize = 4 << 20;
/// Chunks of one upload in flight, and chunks a download reads ahead.
const WRITES_IN_FLIGHT: usize = 4;
const READ_AHEAD: usize = 2;
/// Body pieces (as the connection delivered them) an upload's hashing may
/// lag behind its writes.
const PIECES_UNHASHED: usize = 64;

/// What an upload stored.
pub struct Written {
    pub size: u64,
    pub md5: [u8; 16],
    pub checksum: s3s::dto::Checksum,
}

/// Writes `body` into the file at `path` from `offset` and returns once
/// every byte is stored, with the MD5 and the checksums `hasher` asked for.
pub async fn write_body(
    tenant: &Tenant,
    path: &str,
    mut offset: u64,
    mut body: StreamingBlob,
    hasher: ChecksumHasher,
) -> S3Result<Written> {
    let client = &tenant.client;
    let digests = Digests::start(hasher);
    let mut pending: VecDeque<Handle> = VecDeque::new();
    let mut buf = BytesMut::new();
    let start = offset;
    let fail = |e| tenant.fail(e, S3ErrorCode::NoSuchKey);
    loop {
        let next = body.next().await;
        let done = next.is_none();
        if let Some(piece) = next {
            let piece = piece
                .map_err(|e| s3_error!(IncompleteBody, "the request body ended early: {e}"))?;
            buf.extend_from_slice(&piece);
            digests.add(piece).await;
        }
        while buf.len() >= CHUNK || (done && !buf.is_empty()) {
            let data = buf.split_to(buf.len().min(CHUNK)).freeze();
            let len = data.len() as u64;
            pending.push_back(
                client
                    .write_at_async(path, offset, data)
                    .await
                    .map_err(fail)?,
            );
            offset += len;
            if pending.len() > WRITES_IN_FLIGHT {
                let oldest = pending.pop_front().expect("more than the bound");
                client.wait(&oldest).await.map_err(fail)?;
            }
        }
        if done {
            break;
        }
    }
    let pending: Vec<Handle> = pending.into();
    client.wait_many(&pending).await.map_err(fail)?;
    let (md5, checksum) = digests.finish().await?;
    Ok(Written {
        size: offset - start,
        md5,
        checksum,
    })
}

/// The MD5 and checksums of an upload, computed on a thread of their own
/// while its labels are written: hashing a MiB costs about 2 ms, which in
/// line would delay every label of the upload by as much.
struct Digests {
    pieces: mpsc::Sender<Bytes>,
    done: tokio::task::JoinHandle<([u8; 16], s3s::dto::Checksum)>,
}

impl Digests {
    fn start(mut hasher: ChecksumHasher) -> Self {
        let (pieces, mut rx) = mpsc::channel::<Bytes>(PIECES_UNHASHED);
        let done = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            while let Some(piece) = rx.blocking_recv() {
                md5.update(&piece);
                hasher.update(&piece);
            }
            (md5.finalize(), hasher.finalize())
        });
        Digests { pieces, done }
    }

    /// Waits while [`PIECES_UNHASHED`] pieces are queued, so that a body
    /// arriving faster than it is hashed is held back by the connection.
    async fn add(&self, piece: Bytes) {
        // The thread receives until `pieces` is dropped, in `finish`.
        let _ = self.pieces.send(piece).await;
    }

    async fn finish(self) -> S3Result<([u8; 16], s3s::dto::Checksum)> {
        drop(self.pieces);
        self.done
            .await
            .map_err(|e| s3_error!(InternalError, "hashing the upload failed: {e}"))
    }
}

/// Where a download reads from: a LABIOS file or a mapped object.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// Exactly the bytes `start..end`, or an error.
    async fn read(&self, start: u64, end: u64) -> Result<Bytes, Error>;
}

/// A LABIOS file, read through read labels.
pub struct FileSource {
    pub client: Client,
    pub path: String,
}

#[async_trait]
impl Source for FileSource {
    async fn read(&self, start: u64, end: u64) -> Result<Bytes, Error> {
        if start == end {
            return Ok(Bytes::new());
        }
        let data = self.client.read_at(&self.path, start, end - start).await?;
        if (data.len() as u64) < end - start {
            return Err(Error::Storage(format!(
                "{} shrank to {} bytes while it was being read",
                self.path,
                start + data.len() as u64
            )));
        }
        Ok(data)
    }
}

/// Bytes `start..end` of the file at `path` as a response body.
pub async fn read_body(
    tenant: &Tenant,
    path: &str,
    start: u64,
    end: u64,
) -> S3Result<StreamingBlob> {
    let source = FileSource {
        client: tenant.client.clone(),
        path: path.to_string(),
    };
    stream(Arc::new(source), start, end)
        .await
        .map_err(|e| tenant.fail(e, S3ErrorCode::NoSuchKey))
}

/// Bytes `start..end` of `source` as a response body. Small ranges are
/// read at once; larger ones by a task that keeps `READ_AHEAD` chunks ahead
/// of the connection and stops when the client goes away.
pub async fn stream(source: Arc<dyn Source>, start: u64, end: u64) -> Result<StreamingBlob, Error> {
    if end - start <= CHUNK as u64 {
        let data = source.read(start, end).await?;
        return Ok(StreamingBlob::from(s3s::Body::from(data)));
    }
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    tokio::spawn(async move {
        let mut pos = start;
        while pos < end {
            let upto = end.min(pos + CHUNK as u64);
            let data = source.read(pos, upto).await;
            let failed = data.is_err();
            if tx.send(data).await.is_err() || failed {
                return;
            }
            pos = upto;
        }
    });
    Ok(StreamingBlob::wrap(Chunks(rx)))
}

/// The receiving end of a download's read-ahead.
struct Chunks(mpsc::Receiver<Result<Bytes, Error>>);

impl Stream for Chunks {
    type Item = Result<Bytes, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}
