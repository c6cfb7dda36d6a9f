//! The shared data region of a client on the server's host (issue 14, README
//! "Shared memory"). A test process of its own: it counts the process's
//! mappings of regions, the client's and the server's.

use bytes::Bytes;
use labios_store::embedded::{MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::remote::{connect, connect_sharing, serve, AuthFn, Endpoint, Grant, Listener};
use labios_store::Stores;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLOT: usize = 1 << 20;

fn stores() -> Stores {
    let timeout = Duration::from_millis(200);
    Stores {
        labels: Arc::new(MemoryQueue::new(64, timeout)),
        tasks: Arc::new(MemoryQueue::new(64, timeout)),
        warehouse: Arc::new(MemoryWarehouse::new(256 << 20, timeout)),
        inventory: Arc::new(RedbInventory::in_memory().unwrap()),
        locks: Arc::new(labios_store::locks::MemoryLocks::default()),
    }
}

/// Mappings of shared regions in this process.
fn mapped() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("memfd:labios-region"))
        .count()
}

async fn until_mapped(n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while mapped() != n {
        assert!(Instant::now() < deadline, "{what}: {} mapped", mapped());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client not sharing maps nothing. More puts at once than a region has slots, of every size up to a slot
/// and past it: every value comes back whole and kept apart from the
/// others, whether it went through a slot or over the socket; and once the
/// client is gone and its values dropped, the server maps its region no
/// more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_go_through_the_shared_region_and_it_is_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind(&Endpoint::Unix(dir.path().join("s.sock")))
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let auth: AuthFn = Arc::new(|_, _| Box::pin(async { Ok(Grant::service(7)) }));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(serve(listener, stores(), auth, rx));
    assert_eq!(mapped(), 0);

    // A client told not to share memory puts over the socket.
    let (plain, _) = connect_sharing(&endpoint, None, None, false).await.unwrap();
    let v = Bytes::from(vec![3u8; SLOT]);
    plain.warehouse.put("plain", v.clone()).await.unwrap();
    assert_eq!(plain.warehouse.take("plain").await.unwrap(), Some(v));
    assert_eq!(mapped(), 0, "a client not sharing mapped a region");

    let (s, _) = connect(&endpoint, None, None).await.unwrap();
    assert_eq!(mapped(), 2, "the client's mapping and the server's");
    let values: Vec<(String, Bytes)> = (0..48u32)
        .map(|i| {
            let len = [SLOT, 4096, SLOT + 1, 1][i as usize % 4];
            let fill: Vec<u8> = (0..len).map(|b| (b as u32 ^ i) as u8).collect();
            (format!("k{i}"), Bytes::from(fill))
        })
        .collect();
    futures::future::try_join_all(values.iter().map(|(k, v)| s.warehouse.put(k, v.clone())))
        .await
        .unwrap();
    for (k, v) in &values {
        assert_eq!(s.warehouse.get(k).await.unwrap().as_ref(), Some(v), "{k}");
    }
    // Slots freed by dropped values serve later puts.
    for (k, _) in &values {
        assert!(s.warehouse.delete(k).await.unwrap());
    }
    for round in 0..3u8 {
        let v = Bytes::from(vec![round; SLOT]);
        s.warehouse.put("again", v.clone()).await.unwrap();
        assert_eq!(s.warehouse.take("again").await.unwrap(), Some(v));
    }

    stop.send(true).unwrap();
    server.await.unwrap().unwrap();
    until_mapped(1, "the server's mapping outlived the connection").await;
    drop(s);
    until_mapped(0, "the client's mapping outlived the client").await;
}

/// A put naming a slot on a connection that handed over no region (a TCP
/// client, or one that forged the request) is refused with the reason,
/// and the connection serves on.
#[tokio::test]
async fn a_shared_put_without_a_region_is_refused() {
    use labios_store::remote::proto::{frame, read_frame, Request, RequestFrame, ResponseFrame};
    use tokio::io::AsyncWriteExt;
    let listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".into()))
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let auth: AuthFn = Arc::new(|_, _| Box::pin(async { Ok(Grant::service(7)) }));
    let (_stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(serve(listener, stores(), auth, rx));
    let Endpoint::Tcp(addr) = &endpoint else {
        unreachable!()
    };
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    let requests = [
        Request::Hello {
            key: None,
            secret: None,
        },
        Request::PutShared {
            key: "k".into(),
            slot: 0,
            len: 5,
        },
        Request::Usage,
    ];
    for (id, request) in requests.into_iter().enumerate() {
        let bytes = frame(
            &RequestFrame {
                id: id as u64 + 1,
                request,
            },
            0,
        )
        .unwrap();
        raw.write_all(&bytes).await.unwrap();
    }
    let mut answers = Vec::new();
    for _ in 0..3 {
        let body = read_frame(&mut raw).await.unwrap().unwrap();
        let r: ResponseFrame = labios_store::remote::proto::decode_frame(&body).unwrap();
        answers.push((r.id, format!("{:?}", r.result)));
    }
    answers.sort();
    assert!(answers[1].1.contains("handed over none"), "{answers:?}");
    assert!(answers[2].1.contains("Count(0)"), "{answers:?}");
}
