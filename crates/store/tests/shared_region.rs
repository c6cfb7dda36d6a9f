//! The shared data region of a client on the server's host (issue 14, README
//! "Shared memory"). A test process of its own: it counts the process's
//! mappings of regions, the client's and the server's.

mod common;

use bytes::Bytes;
use labios_store::embedded::{MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::remote::{connect, connect_sharing, serve, AuthFn, Endpoint, Grant, Listener};
use labios_store::{Stores, Warehouse};
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

/// Address ranges of the shared regions mapped in this process.
fn regions() -> Vec<(usize, usize)> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("memfd:labios-region"))
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let hex = |x: &str| usize::from_str_radix(x, 16).unwrap();
            (hex(a), hex(b))
        })
        .collect()
}

/// Whether the server's entry `key` lies in a shared region: the put
/// went through a slot, and the server took its bytes without a copy.
async fn in_a_region(server: &dyn Warehouse, key: &str) -> bool {
    let data = server.get(key).await.unwrap().unwrap();
    let at = data.as_ptr() as usize;
    regions()
        .iter()
        .any(|&(a, b)| a <= at && at + data.len() <= b)
}

/// A client not sharing maps nothing. A sharing one puts write data
/// through its region's slots (the server's entries are the slots' bytes)
/// until all are held, then over the socket; other entries and puts larger
/// than a slot go over the socket; every value comes back whole and kept
/// apart; slots freed by dropped entries serve later puts; and once the
/// client is gone and its values dropped, nothing stays mapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_go_through_the_shared_region_and_it_is_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind(&Endpoint::Unix(dir.path().join("s.sock")))
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let auth: AuthFn = Arc::new(|_, _| Box::pin(async { Ok(Grant::service(7)) }));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let stores = stores();
    let server_w = stores.warehouse.clone();
    let server = tokio::spawn(serve(listener, stores, auth, rx));
    assert_eq!(mapped(), 0);

    // A client told not to share memory puts over the socket.
    let (plain, _) = connect_sharing(&endpoint, None, None, false).await.unwrap();
    let v = Bytes::from(vec![3u8; SLOT]);
    plain.warehouse.put("a7/w/plain", v.clone()).await.unwrap();
    assert_eq!(plain.warehouse.take("a7/w/plain").await.unwrap(), Some(v));
    assert_eq!(mapped(), 0, "a client not sharing mapped a region");

    let (s, _) = connect(&endpoint, None, None).await.unwrap();
    assert_eq!(mapped(), 2, "the client's mapping and the server's");
    let value = |i: u32, len: usize| -> Bytes {
        (0..len)
            .map(|b| (b as u32 ^ i) as u8)
            .collect::<Vec<u8>>()
            .into()
    };
    // Every slot, at once, with sizes from one byte to a whole slot.
    let slots: Vec<(String, Bytes)> = (0..32u32)
        .map(|i| {
            (
                format!("a7/w/{i}"),
                value(i, [SLOT, 4096, 1, 777][i as usize % 4]),
            )
        })
        .collect();
    futures::future::try_join_all(slots.iter().map(|(k, v)| s.warehouse.put(k, v.clone())))
        .await
        .unwrap();
    for (k, _) in &slots {
        assert!(in_a_region(server_w.as_ref(), k).await, "{k} not in a slot");
    }
    // None free: over the socket; so are other entries and larger puts.
    let others = [
        ("a7/w/full".to_string(), value(90, 5000)),
        ("room/7/share".to_string(), value(91, 5000)),
        ("a7/w/large".to_string(), value(92, SLOT + 1)),
    ];
    for (k, v) in &others {
        s.warehouse.put(k, v.clone()).await.unwrap();
        assert!(!in_a_region(server_w.as_ref(), k).await, "{k} in a slot");
    }
    for (k, v) in slots.iter().chain(&others) {
        assert_eq!(s.warehouse.get(k).await.unwrap().as_ref(), Some(v), "{k}");
    }
    // Dropped entries give their slots back.
    for (k, _) in slots.iter().chain(&others) {
        assert!(s.warehouse.delete(k).await.unwrap());
    }
    for (k, v) in &slots {
        s.warehouse.put(k, v.clone()).await.unwrap();
        assert!(
            in_a_region(server_w.as_ref(), k).await,
            "{k} not in a slot again"
        );
        assert_eq!(s.warehouse.take(k).await.unwrap().as_ref(), Some(v));
    }
    // Puts and answers share the slots: many at once, each value its own.
    let s = Arc::new(s);
    let rounds = futures::future::join_all((0..12u32).map(|t| {
        let s = s.clone();
        async move {
            for round in 0..8u32 {
                let (k, v) = (
                    format!("a7/w/t{t}"),
                    value(t * 100 + round, SLOT - t as usize),
                );
                s.warehouse
                    .put(&k, v.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                if s.warehouse
                    .get(&k)
                    .await
                    .map_err(|e| e.to_string())?
                    .as_ref()
                    != Some(&v)
                {
                    return Err(format!("{k} round {round}: get gave other bytes"));
                }
                if s.warehouse
                    .take(&k)
                    .await
                    .map_err(|e| e.to_string())?
                    .as_ref()
                    != Some(&v)
                {
                    return Err(format!("{k} round {round}: take gave other bytes"));
                }
            }
            Ok::<_, String>(())
        }
    }))
    .await;
    for r in rounds {
        r.unwrap();
    }
    let s = Arc::into_inner(s).unwrap();
    // Answers whose calls are dropped before they come back still give
    // their slots back: afterwards every slot takes a put again.
    let big = value(7, SLOT);
    s.warehouse.put("a7/w/big", big.clone()).await.unwrap();
    for _ in 0..50 {
        let _ = tokio::time::timeout(Duration::ZERO, s.warehouse.get("a7/w/big")).await;
    }
    assert_eq!(s.warehouse.take("a7/w/big").await.unwrap(), Some(big));
    futures::future::try_join_all(slots.iter().map(|(k, v)| s.warehouse.put(k, v.clone())))
        .await
        .unwrap();
    for (k, _) in &slots {
        assert!(
            in_a_region(server_w.as_ref(), k).await,
            "{k} not in a slot: a slot was lost"
        );
        assert!(s.warehouse.delete(k).await.unwrap());
    }

    stop.send(true).unwrap();
    server.await.unwrap().unwrap();
    until_mapped(1, "the server's mapping outlived the connection").await;
    drop(s);
    until_mapped(0, "the client's mapping outlived the client").await;
}

/// A put naming a slot on a connection that handed over no region (a TCP
/// client, or one that forged the request) is refused with the reason, a
/// label pushed right behind it over that data is refused too (never
/// published over data that was not stored), and the connection serves on.
#[tokio::test]
async fn a_shared_put_without_a_region_is_refused() {
    use labios_label::{Label, LabelId, LabelKind, Pointer};
    use labios_store::remote::proto::{QueueOp, Request, PROTOCOL};
    let listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".into()))
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let auth: AuthFn = Arc::new(|_, _| Box::pin(async { Ok(Grant::service(7)) }));
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let stores = stores();
    let labels = stores.labels.clone();
    tokio::spawn(serve(listener, stores, auth, rx));
    let Endpoint::Tcp(addr) = &endpoint else {
        unreachable!()
    };
    let mut label = Label::new(LabelId::from_u128(1), LabelKind::Write, 7);
    label.source = Pointer::Warehouse {
        key: "a7/w/1".into(),
        len: 5,
    };
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    let requests = [
        Request::Hello {
            key: None,
            secret: None,
            protocol: PROTOCOL,
        },
        Request::PutShared {
            key: "a7/w/1".into(),
            slot: 0,
            len: 5,
        },
        Request::Labels(QueueOp::Push {
            queue: "labels".into(),
            items: vec![label],
        }),
        Request::Usage,
    ];
    let answers = common::exchange(&mut raw, requests.into()).await;
    let answers: Vec<String> = answers.values().map(|r| format!("{r:?}")).collect();
    assert!(answers[1].contains("handed over none"), "{answers:?}");
    assert!(
        answers[2].contains("Err") && answers[2].contains("a7/w/1"),
        "{answers:?}"
    );
    assert!(answers[3].contains("Count(0)"), "{answers:?}");
    assert_eq!(
        labels.depth("labels").await.unwrap(),
        0,
        "nothing published"
    );
}
