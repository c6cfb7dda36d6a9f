//! Shared by the store's integration tests: requests sent as raw frames,
//! as a client that does not follow the client library's order, or forges
//! what it would never send, would send them.

use labios_label::Result;
use labios_store::remote::proto::{
    decode_frame, frame, read_frame, Reply, Request, RequestFrame, ResponseFrame,
};
use std::collections::BTreeMap;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Sends `requests` at once (ids from 1, in order), then reads an answer to
/// each: the answers by id.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    requests: Vec<Request>,
) -> BTreeMap<u64, Result<Reply>> {
    let n = requests.len();
    for (id, request) in (1..).zip(requests) {
        let bytes = frame(&RequestFrame { id, request }, 0).unwrap();
        stream.write_all(&bytes).await.unwrap();
    }
    let mut answers = BTreeMap::new();
    while answers.len() < n {
        let body = read_frame(stream).await.unwrap().unwrap();
        let r: ResponseFrame = decode_frame(&body).unwrap();
        answers.insert(r.id, r.result);
    }
    answers
}
