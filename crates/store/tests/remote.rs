mod common;

use bytes::Bytes;
use labios_label::Error;
use labios_store::conformance::*;
use labios_store::embedded::{MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::remote::{connect, serve, AuthFn, Endpoint, Grant, Listener};
use labios_store::{FileKind, Stores};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOUND: usize = 64;
const TIMEOUT: Duration = Duration::from_millis(200);
const WAREHOUSE: u64 = 64 << 20;

fn stores() -> Stores {
    Stores {
        labels: Arc::new(MemoryQueue::new(BOUND, TIMEOUT)),
        tasks: Arc::new(MemoryQueue::new(BOUND, TIMEOUT)),
        warehouse: Arc::new(MemoryWarehouse::new(WAREHOUSE, TIMEOUT)),
        inventory: Arc::new(RedbInventory::in_memory().unwrap()),
        locks: Arc::new(labios_store::locks::MemoryLocks::default()),
    }
}

fn auth() -> AuthFn {
    Arc::new(|key, secret| {
        Box::pin(async move {
            match (key.as_deref(), secret.as_deref()) {
                (Some("k"), Some("s")) => Ok(Grant::service(7)),
                _ => Err(Error::PermissionDenied("bad key or secret".into())),
            }
        })
    })
}

/// A server at the Unix socket `path` whose clients with the key `one`,
/// `two` or `seven` are tenants of applications 1, 2 and 7, and any other
/// the service; it serves until the test ends.
async fn with_tenants(path: &std::path::Path) -> Endpoint {
    let listener = Listener::bind(&Endpoint::Unix(path.into())).await.unwrap();
    let ep = listener.endpoint().unwrap();
    let auth: AuthFn = Arc::new(|key, _| {
        Box::pin(async move {
            match key.as_deref() {
                Some("one") => Ok(Grant::tenant(1, "s1")),
                Some("two") => Ok(Grant::tenant(2, "s2")),
                Some("seven") => Ok(Grant::tenant(7, "s7")),
                _ => Ok(Grant::service(0)),
            }
        })
    });
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _running = stop;
        serve(listener, stores(), auth, rx).await
    });
    ep
}

async fn start(endpoint: Endpoint) -> (Endpoint, tokio::sync::watch::Sender<bool>) {
    let listener = Listener::bind(&endpoint).await.unwrap();
    let endpoint = listener.endpoint().unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(serve(listener, stores(), auth(), rx));
    (endpoint, tx)
}

async fn suites(endpoint: &Endpoint) {
    let (s, session) = connect(endpoint, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    assert_eq!(session.app, 7);
    let (_, other) = connect(endpoint, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    assert_ne!(session.origin, other.origin, "unique origins");
    queue_suite(s.labels.clone()).await;
    queue_backpressure_suite(s.labels.clone(), BOUND, TIMEOUT).await;
    warehouse_suite(s.warehouse.clone()).await;
    inventory_suite(s.inventory.clone()).await;
    // Locks of two connections; the end of the second (its runtime shut
    // down, as when its process dies) frees its locks.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let ep = endpoint.clone();
    let (b, _) = rt
        .spawn(async move { connect(&ep, Some("k".into()), Some("s".into())).await })
        .await
        .unwrap()
        .unwrap();
    locks_suite(s.locks.clone(), (0, 0), b.locks.clone(), async move {
        rt.shutdown_background();
    })
    .await;
}

#[tokio::test]
async fn conformance_over_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start(Endpoint::Unix(dir.path().join("labios.sock"))).await;
    suites(&ep).await;
    let err = Listener::bind(&ep).await.err().unwrap();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
}

#[tokio::test]
async fn conformance_over_tcp() {
    let (ep, _stop) = start(Endpoint::Tcp("127.0.0.1:0".into())).await;
    suites(&ep).await;
}

#[tokio::test]
async fn endpoints_parse() {
    assert_eq!(
        Endpoint::parse("/run/labios.sock").unwrap(),
        Endpoint::Unix("/run/labios.sock".into())
    );
    assert_eq!(
        Endpoint::parse("l.sock").unwrap(),
        Endpoint::Unix("l.sock".into())
    );
    assert_eq!(Endpoint::parse("h:7000").unwrap().to_string(), "h:7000");
    for bad in ["", "host", ":80", "h:99999", "h:x"] {
        let e = Endpoint::parse(bad).unwrap_err();
        assert!(e.to_string().contains("HOST:PORT"), "{e}");
    }
}

#[tokio::test]
async fn unreachable_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ep = Endpoint::Unix(dir.path().join("none.sock"));
    let err = connect(&ep, None, None).await.err().unwrap();
    assert!(matches!(err, Error::Unavailable(_)));
    assert!(
        err.to_string().contains("is `labios serve` running?"),
        "{err}"
    );

    let (ep, stop) = start(Endpoint::Unix(dir.path().join("s.sock"))).await;
    let err = connect(&ep, Some("k".into()), Some("wrong".into()))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");

    // A dropped server fails pending and later calls instead of hanging.
    let (s, _) = connect(&ep, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    let pending = {
        let q = s.labels.clone();
        tokio::spawn(async move { q.pull("idle", 1, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    stop.send(true).unwrap();
    let err = pending.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let err = s.warehouse.usage().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
}

#[tokio::test]
async fn bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let (ep, _stop) = start(Endpoint::Unix(path.clone())).await;
    let (good, _) = connect(&ep, Some("k".into()), Some("s".into()))
        .await
        .unwrap();

    for frame in [
        (200u32 << 20).to_le_bytes().to_vec(),
        [&5u32.to_le_bytes()[..], b"junk!"].concat(),
    ] {
        let mut raw = tokio::net::UnixStream::connect(&path).await.unwrap();
        raw.write_all(&frame).await.unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut reply))
            .await
            .expect("server closes the bad connection")
            .unwrap();
        let text = String::from_utf8_lossy(&reply).to_string();
        assert!(text.contains("limit") || text.contains("magic"), "{text}");
    }
    assert_eq!(
        good.warehouse.usage().await.unwrap(),
        0,
        "others unaffected"
    );
}

/// A tenant reads any file's extended attributes but sets only those of
/// its own files (README "Tenants").
#[tokio::test]
async fn tenants_set_only_their_own_files_xattrs() {
    let dir = tempfile::tempdir().unwrap();
    let ep = with_tenants(&dir.path().join("t.sock")).await;
    let (one, _) = connect(&ep, Some("one".into()), None).await.unwrap();
    let (two, _) = connect(&ep, Some("two".into()), None).await.unwrap();
    let (one, two) = (one.inventory, two.inventory);

    let f = one
        .create(
            "/t/one",
            FileKind::File,
            0o644,
            labios_store::Owner::root(1),
        )
        .await
        .unwrap();
    let etag = vec![("etag".to_string(), Bytes::from_static(b"\"1\""))];
    one.set_xattr(f.id, "etag", Some(etag[0].1.clone()))
        .await
        .unwrap();
    assert_eq!(two.xattrs(f.id).await.unwrap(), etag, "readable by others");
    for value in [Some(Bytes::from_static(b"theirs")), None] {
        let err = two.set_xattr(f.id, "etag", value).await.unwrap_err();
        assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
        assert!(err.to_string().contains("/t/one"), "{err}");
    }
    assert_eq!(one.xattrs(f.id).await.unwrap(), etag, "unchanged");
    let g = two
        .create(
            "/t/two",
            FileKind::File,
            0o644,
            labios_store::Owner::root(2),
        )
        .await
        .unwrap();
    two.set_xattr(g.id, "user.mine", Some(Bytes::from_static(b"yes")))
        .await
        .unwrap();
    let err = two.set_xattr(u64::MAX - 3, "x", None).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
}

/// Round-trip and bandwidth printouts (run with --nocapture).
#[tokio::test]
async fn measure_remote() {
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start(Endpoint::Unix(dir.path().join("m.sock"))).await;
    let (s, _) = connect(&ep, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    for _ in 0..100 {
        s.warehouse.usage().await.unwrap();
    }
    let n = 5000;
    let t = Instant::now();
    for _ in 0..n {
        s.warehouse.usage().await.unwrap();
    }
    println!(
        "remote unix round trip: {:.1} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let data = Bytes::from(vec![7u8; 1 << 20]);
    let n = 200;
    let t = Instant::now();
    for _ in 0..n {
        s.warehouse.put("big", data.clone()).await.unwrap();
    }
    println!(
        "remote unix 1 MiB put: {:.0} MiB/s",
        n as f64 / t.elapsed().as_secs_f64()
    );
}

/// A root connection's requests on behalf of another user (as a root
/// `labios mount` sends its callers') are checked as that user's: new
/// entries are theirs, and what the permission bits refuse them is
/// refused; root's own requests are not.
#[tokio::test]
async fn requests_on_behalf_of_a_user_are_checked_as_theirs() {
    use labios_store::access::{Cred, NOT_PERMITTED};
    use labios_store::remote::acting_as;
    use labios_store::{Named, Owner, SetAttr};
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, _stop) = start(Endpoint::Unix(dir.path().join("s.sock"))).await;
    let (s, _) = connect(&endpoint, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    let i = s.inventory.clone();
    let nobody = Cred {
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    };
    let root_dir = i
        .create("/closed", FileKind::Dir, 0o755, Owner::root(7))
        .await
        .unwrap();
    let roots = i
        .create("/closed/f", FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    let open = i
        .create("/open", FileKind::Dir, 0o777, Owner::root(7))
        .await
        .unwrap();
    assert_eq!((root_dir.uid, open.mode), (0, 0o777));

    let chmod = SetAttr {
        mode: Some(0o777),
        ..SetAttr::default()
    };
    let err = acting_as(nobody.clone(), i.set_attr(roots.id, chmod))
        .await
        .unwrap_err();
    assert!(err.to_string().ends_with(NOT_PERMITTED), "{err}");
    let err = acting_as(nobody.clone(), i.remove("/closed/f"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
    let err = acting_as(nobody.clone(), i.set_size(roots.id, 0))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
    // Claimed as root's by the client, made as nobody's by the server.
    let mine = acting_as(
        nobody.clone(),
        i.create("/open/mine", FileKind::File, 0o600, Owner::root(7)),
    )
    .await
    .unwrap();
    assert_eq!((mine.uid, mine.gid, mine.mode), (65534, 65534, 0o600));
    // A look-up through a directory the user may not search is refused,
    // alone or with the extents a read asks for with it.
    i.create("/hidden", FileKind::Dir, 0o700, Owner::root(7))
        .await
        .unwrap();
    i.create("/hidden/f", FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    let err = acting_as(nobody.clone(), i.lookup("/hidden/f"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
    let plan = Named::Path("/hidden/f".into());
    let err = acting_as(nobody.clone(), i.read_plan(&plan, 0, 10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
    assert!(i.read_plan(&plan, 0, 10).await.unwrap().is_some());
    // Root as a caller is the connection itself.
    let root = acting_as(Cred::root(), i.set_attr(roots.id, chmod))
        .await
        .unwrap();
    assert_eq!(root.mode, 0o777);
    assert!(i.file(roots.id).await.unwrap().is_some());
}

/// A user's request is checked and carried out in one step: a `chmod`
/// racing with it lands wholly before (and the request is refused) or
/// wholly after (and the request was allowed on what was true). Every
/// inventory call waits a random while first (seeded), so that without
/// the server's order the chmod would often land between a create's
/// check and the create. A create after the chmod shows as a directory
/// whose mtime (set by the create) is not older than its ctime (set by
/// both).
#[tokio::test]
async fn a_check_and_its_change_are_one_step() {
    use labios_store::access::Cred;
    use labios_store::faults::{wrap, FaultConfig};
    use labios_store::remote::acting_as;
    use labios_store::{Owner, SetAttr};
    let dir = tempfile::tempdir().unwrap();
    let config = FaultConfig {
        seed: 18,
        delay_ppm: 1_000_000,
        max_delay_ms: 3,
        ..FaultConfig::default()
    };
    let (slow, _) = wrap(stores(), &config);
    let listener = Listener::bind(&Endpoint::Unix(dir.path().join("s.sock")))
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(serve(listener, slow, auth(), stopped));
    let (s, _) = connect(&endpoint, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    let i = s.inventory.clone();
    let nobody = Cred {
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    };
    let close = SetAttr {
        mode: Some(0o755),
        ..SetAttr::default()
    };
    let (mut before, mut after) = (0, 0);
    for round in 0..160 {
        let d = i
            .create(&format!("/d{round}"), FileKind::Dir, 0o777, Owner::root(7))
            .await
            .unwrap();
        let x = format!("/d{round}/x");
        let make = acting_as(
            nobody.clone(),
            i.create(&x, FileKind::File, 0o644, Owner::root(7)),
        );
        // Sent first in even rounds, second in odd ones; in even rounds the
        // chmod follows at a varying distance, to fall anywhere in the
        // create's check.
        let (made, closed) = if round % 2 == 0 {
            let stagger = Duration::from_micros(250 * (round as u64 / 2 % 24));
            let chmod = async {
                tokio::time::sleep(stagger).await;
                i.set_attr(d.id, close).await
            };
            tokio::join!(make, chmod)
        } else {
            let (closed, made) = tokio::join!(i.set_attr(d.id, close), make);
            (made, closed)
        };
        closed.unwrap();
        let d = i.file(d.id).await.unwrap().unwrap();
        match made {
            Ok(_) => {
                assert!(
                    d.mtime < d.ctime,
                    "round {round}: nobody's create in /d{round} landed after the chmod to 0755 \
                     that should have refused it (mtime {} ctime {})",
                    d.mtime,
                    d.ctime
                );
                before += 1;
            }
            Err(Error::PermissionDenied(_)) => after += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
    }
    // Both orders were tried, or the test showed nothing.
    assert!(before > 0 && after > 0, "before {before} after {after}");
}

/// Only requests whose checks read what namespace changes change take
/// part in the order: a user's wait for label statuses, which may last
/// its whole timeout, holds up no create of another client.
#[tokio::test]
async fn a_long_wait_of_a_user_holds_up_no_namespace_change() {
    use labios_store::access::Cred;
    use labios_store::remote::acting_as;
    use labios_store::Owner;
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, _stop) = start(Endpoint::Unix(dir.path().join("s.sock"))).await;
    let (s, _) = connect(&endpoint, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    let i = s.inventory.clone();
    let nobody = Cred {
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    };
    let unknown = [labios_label::LabelIdGen::new(99).next()];
    let wait = acting_as(nobody, i.wait(&unknown, Duration::from_secs(60)));
    let mut wait = std::pin::pin!(wait);
    // The wait is on the server before the create is sent.
    let not_yet = tokio::time::timeout(Duration::from_millis(100), &mut wait).await;
    assert!(not_yet.is_err(), "the wait returned early: {not_yet:?}");
    // Ready in milliseconds; a create held up by the wait would take its
    // whole minute.
    let create = i.create("/after-the-wait", FileKind::File, 0o644, Owner::root(7));
    tokio::time::timeout(Duration::from_secs(20), create)
        .await
        .expect("the create waited for another user's wait")
        .unwrap();
}

/// A session's small read results come back with the statuses of a wait
/// whose caller takes them next (`wait_taking`): the wait takes them out of
/// the server's warehouse, and the warehouse calls that follow (get, take,
/// delete) are answered from what came back. A large result, a failed
/// label's and an entry that is not a read result stay on the server, for
/// calls of their own; so does every result after a plain wait (a copy's
/// reads, whose results its writes take on the server).
#[tokio::test]
async fn small_read_results_come_back_with_their_statuses() {
    use labios_label::{LabelIdGen, LabelState, LabelStatus};
    use labios_store::remote::proto::INLINE_MAX;
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind(&Endpoint::Unix(dir.path().join("s.sock")))
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let server = stores();
    let (_stop, rx) = tokio::sync::watch::channel(false);
    // The application's session is confined to application 7, as a
    // tenant's is.
    let auth: AuthFn = Arc::new(|_, _| Box::pin(async { Ok(Grant::tenant(7, "s")) }));
    tokio::spawn(serve(listener, server.clone(), auth, rx));
    let (app, session) = connect(&endpoint, Some("k".into()), Some("s".into()))
        .await
        .unwrap();
    let ids = LabelIdGen::new(session.origin);
    let labelled = |len: u64, state: LabelState, key: String| {
        let id = ids.next();
        let data = Bytes::from(vec![id.to_string().len() as u8; len as usize]);
        let status = LabelStatus {
            result_key: Some(key),
            result_len: len,
            ..LabelStatus::new(id, state)
        };
        (status, data)
    };
    let small = labelled(4096, LabelState::Complete, "a7/r/small".into());
    let large = labelled(INLINE_MAX + 1, LabelState::Complete, "a7/r/large".into());
    let failed = labelled(10, LabelState::Failed, "a7/r/failed".into());
    let staged = labelled(10, LabelState::Complete, "a7/w/staged".into());
    let all = [&small, &large, &failed, &staged];
    for (status, data) in all {
        let key = status.result_key.as_deref().unwrap();
        server.warehouse.put(key, data.clone()).await.unwrap();
        server.inventory.set_status(status.clone()).await.unwrap();
    }
    let wanted: Vec<_> = all.iter().map(|(s, _)| s.id).collect();
    let on_server = |key: &'static str| {
        let w = server.warehouse.clone();
        async move { w.get(key).await.unwrap().is_some() }
    };
    let statuses = all.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>();
    let copied = labelled(4096, LabelState::Complete, "a7/r/copied".into());
    server.warehouse.put("a7/r/copied", copied.1).await.unwrap();
    server.inventory.set_status(copied.0.clone()).await.unwrap();
    let plain = app
        .inventory
        .wait(&[copied.0.id], Duration::from_secs(10))
        .await;
    assert_eq!(plain.unwrap(), vec![copied.0]);
    assert!(on_server("a7/r/copied").await, "a plain wait leaves it");
    let taking = app.inventory.wait_taking(&wanted, Duration::from_secs(10));
    assert_eq!(taking.await.unwrap(), statuses);
    assert!(!on_server("a7/r/small").await, "the small result came back");
    for key in ["a7/r/large", "a7/r/failed", "a7/w/staged"] {
        assert!(on_server(key).await, "{key} stays on the server");
    }
    let w = &app.warehouse;
    assert_eq!(w.get("a7/r/small").await.unwrap(), Some(small.1.clone()));
    assert_eq!(w.take("a7/r/small").await.unwrap(), Some(small.1.clone()));
    assert_eq!(w.take("a7/r/small").await.unwrap(), None, "taken once");
    assert_eq!(w.take("a7/r/large").await.unwrap(), Some(large.1.clone()));
    assert!(!on_server("a7/r/large").await);

    // A wait that ends with a label unfinished (its caller's error)
    // brings nothing back.
    let done = labelled(100, LabelState::Complete, "a7/r/done".into());
    server
        .warehouse
        .put("a7/r/done", done.1.clone())
        .await
        .unwrap();
    server.inventory.set_status(done.0.clone()).await.unwrap();
    let unfinished = ids.next();
    let short = app
        .inventory
        .wait_taking(&[done.0.id, unfinished], Duration::from_millis(50))
        .await
        .unwrap();
    assert!(!short[1].state.is_final());
    assert!(on_server("a7/r/done").await, "nothing inlined");

    // A result that came back and is then let go is gone everywhere.
    let again = labelled(100, LabelState::Complete, "a7/r/again".into());
    server
        .warehouse
        .put("a7/r/again", again.1.clone())
        .await
        .unwrap();
    server.inventory.set_status(again.0.clone()).await.unwrap();
    app.inventory
        .wait_taking(&[again.0.id], Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!on_server("a7/r/again").await);
    assert!(w.delete("a7/r/again").await.unwrap());
    assert_eq!(w.get("a7/r/again").await.unwrap(), None);
    assert!(!w.delete("a7/r/again").await.unwrap());
}

/// Write data a connection staged for a label it never pushed (its client
/// was killed between the two), or whose push was refused, is dropped when
/// the connection closes; data a pushed label names stays for the label's
/// worker, and so does what is not a write label's data, and what the
/// connection's puts did not store (another application's entry, which a
/// tenant may not put).
#[tokio::test]
async fn a_closed_connection_drops_the_write_data_no_label_names() {
    use labios_label::{Label, LabelId, LabelKind, Pointer};
    use labios_store::remote::proto::{QueueOp, Request, PROTOCOL};
    let dir = tempfile::tempdir().unwrap();
    let ep = with_tenants(&dir.path().join("s.sock")).await;
    let (service, _) = connect(&ep, None, None).await.unwrap();
    service
        .warehouse
        .put("a4/w/9", Bytes::from_static(b"theirs"))
        .await
        .unwrap();

    let mut named = Label::new(LabelId::from_u128(2), LabelKind::Write, 7);
    named.source = Pointer::Warehouse {
        key: "a7/w/2".into(),
        len: 1,
    };
    let mut refused = Label::new(LabelId::from_u128(5), LabelKind::Write, 7);
    refused.source = Pointer::Warehouse {
        key: "a7/w/5".into(),
        len: 1,
    };
    let put = |key: &str| Request::Put {
        key: key.into(),
        data: Bytes::from_static(b"x"),
    };
    let requests = [
        Request::Hello {
            key: Some("seven".into()),
            secret: None,
            protocol: PROTOCOL,
        },
        put("a7/w/1"),
        put("a7/w/2"),
        put("a7/x/3"),
        put("a4/w/9"),
        Request::Labels(QueueOp::Push {
            queue: labios_store::client_queue(7),
            items: vec![named],
        }),
        put("a7/w/5"),
        Request::Labels(QueueOp::Push {
            queue: labios_store::client_queue(4),
            items: vec![refused],
        }),
    ];
    let Endpoint::Unix(path) = &ep else {
        unreachable!()
    };
    let mut raw = tokio::net::UnixStream::connect(path).await.unwrap();
    // Every request answered, then the client is gone.
    let answers = common::exchange(&mut raw, requests.into()).await;
    let ok: Vec<bool> = answers.values().map(Result::is_ok).collect();
    assert_eq!(
        ok,
        [true, true, true, true, false, true, true, false],
        "a4/w/9 and the push to another application's queue refused"
    );
    drop(raw);
    let deadline = Instant::now() + Duration::from_secs(10);
    let gone = |key: &'static str| {
        let w = service.warehouse.clone();
        async move { w.get(key).await.unwrap().is_none() }
    };
    while !(gone("a7/w/1").await && gone("a7/w/5").await) {
        assert!(Instant::now() < deadline, "unnamed write data stayed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut kept = service.warehouse.keys("a").await.unwrap();
    kept.sort();
    assert_eq!(kept, ["a4/w/9", "a7/w/2", "a7/x/3"]);
}

/// A client of another release's wire protocol is refused at its Hello with
/// an error naming both protocols, not left to misread later frames.
#[tokio::test]
async fn a_client_of_another_wire_protocol_is_refused_naming_both() {
    use labios_store::remote::proto::{Request, PROTOCOL};
    let dir = tempfile::tempdir().unwrap();
    let ep = with_tenants(&dir.path().join("s.sock")).await;
    let Endpoint::Unix(path) = &ep else {
        unreachable!()
    };
    let mut raw = tokio::net::UnixStream::connect(path).await.unwrap();
    let hello = Request::Hello {
        key: None,
        secret: None,
        protocol: PROTOCOL + 1,
    };
    let answers = common::exchange(&mut raw, vec![hello]).await;
    let e = answers[&1].as_ref().expect_err("refused").to_string();
    assert!(
        e.contains(&format!("wire protocol {}", PROTOCOL + 1))
            && e.contains(&format!("speaks {PROTOCOL}")),
        "{e}"
    );
}

/// A Hello of a client from before the protocol number (no `protocol`
/// field) cannot be decoded; the answer says the client library is older.
#[tokio::test]
async fn a_hello_from_an_older_client_library_is_refused_as_such() {
    use labios_store::remote::proto::{decode_frame, frame, read_frame, ResponseFrame};
    #[derive(serde::Serialize)]
    enum OldRequest {
        Hello {
            key: Option<String>,
            secret: Option<String>,
        },
    }
    #[derive(serde::Serialize)]
    struct OldFrame {
        id: u64,
        request: OldRequest,
    }
    let dir = tempfile::tempdir().unwrap();
    let ep = with_tenants(&dir.path().join("s.sock")).await;
    let Endpoint::Unix(path) = &ep else {
        unreachable!()
    };
    let mut raw = tokio::net::UnixStream::connect(path).await.unwrap();
    let old = OldFrame {
        id: 1,
        request: OldRequest::Hello {
            key: None,
            secret: None,
        },
    };
    raw.write_all(&frame(&old, 0).unwrap()).await.unwrap();
    let body = read_frame(&mut raw).await.unwrap().unwrap();
    let answer: ResponseFrame = decode_frame(&body).unwrap();
    assert_eq!(answer.id, 0, "an unreadable frame is answered as a whole");
    let e = answer.result.expect_err("refused").to_string();
    assert!(e.contains("older LABIOS release"), "{e}");
    assert!(read_frame(&mut raw).await.unwrap().is_none(), "then closed");
}

/// A server that cannot read this client's Hello (an older `labios serve`)
/// makes `connect` fail with an error that names this client's protocol and
/// release beside the server's own words.
#[tokio::test]
async fn a_refused_hello_names_the_clients_protocol() {
    use labios_store::remote::proto::{frame, ResponseFrame, PROTOCOL};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 64];
        let _ = s.read(&mut first).await.unwrap();
        let refusal = ResponseFrame {
            id: 0,
            result: Err(Error::Protocol(
                "malformed encoding: 4 trailing bytes".into(),
            )),
        };
        s.write_all(&frame(&refusal, 0).unwrap()).await.unwrap();
    });
    let e = connect(&Endpoint::Unix(path), None, None)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains(&format!("wire protocol {PROTOCOL}"))
            && e.contains(env!("CARGO_PKG_VERSION"))
            && e.contains("trailing bytes"),
        "{e}"
    );
}

/// A label pushed right behind the put of its data, without its client
/// waiting for the put's answer (`Warehouse::put_ordered`), is published
/// only once the data is stored, however slow the put; one whose data's
/// put failed is refused with an error naming the data, and never
/// published. (The server runs a connection's requests concurrently: the
/// push once overtook such a put.)
#[tokio::test]
async fn a_push_waits_for_the_puts_of_the_data_it_names() {
    use async_trait::async_trait;
    use labios_label::{Label, LabelId, LabelKind, Pointer, Result};
    use labios_store::label_queue::{Delivery, LabelQueue};
    use labios_store::remote::proto::{QueueOp, Request, PROTOCOL};
    use labios_store::Warehouse;
    type Log = Arc<parking_lot::Mutex<Vec<String>>>;
    /// A warehouse whose puts take a while, and a queue, that log what
    /// they did in the order it was done.
    struct Slow(MemoryWarehouse, Log);
    #[async_trait]
    impl Warehouse for Slow {
        async fn put(&self, key: &str, data: Bytes) -> Result<()> {
            tokio::time::sleep(Duration::from_millis(300)).await;
            self.0.put(key, data).await?;
            self.1.lock().push(format!("stored {key}"));
            Ok(())
        }
        async fn put_result(&self, key: &str, data: Bytes) -> Result<()> {
            self.0.put_result(key, data).await
        }
        async fn get(&self, key: &str) -> Result<Option<Bytes>> {
            self.0.get(key).await
        }
        async fn take(&self, key: &str) -> Result<Option<Bytes>> {
            self.0.take(key).await
        }
        async fn delete(&self, key: &str) -> Result<bool> {
            self.0.delete(key).await
        }
        async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
            self.0.keys(prefix).await
        }
        async fn usage(&self) -> Result<u64> {
            self.0.usage().await
        }
    }
    struct Logged(MemoryQueue<Label>, Log);
    #[async_trait]
    impl LabelQueue<Label> for Logged {
        async fn push(&self, queue: &str, items: Vec<Label>) -> Result<()> {
            let named: Vec<_> = items.iter().filter_map(|l| l.staged_key()).collect();
            self.1.lock().push(format!("pushed {}", named.join(",")));
            self.0.push(queue, items).await
        }
        async fn pull(
            &self,
            queue: &str,
            max: usize,
            wait: Duration,
        ) -> Result<Vec<Delivery<Label>>> {
            self.0.pull(queue, max, wait).await
        }
        async fn ack(&self, queue: &str, tokens: &[u64]) -> Result<()> {
            self.0.ack(queue, tokens).await
        }
        async fn depth(&self, queue: &str) -> Result<usize> {
            self.0.depth(queue).await
        }
        async fn queues(&self, prefix: &str) -> Result<Vec<String>> {
            self.0.queues(prefix).await
        }
    }
    let log = Log::default();
    let stores = Stores {
        labels: Arc::new(Logged(MemoryQueue::new(BOUND, TIMEOUT), log.clone())),
        warehouse: Arc::new(Slow(MemoryWarehouse::new(1024, TIMEOUT), log.clone())),
        ..stores()
    };
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind(&Endpoint::Unix(dir.path().join("s.sock")))
        .await
        .unwrap();
    let Endpoint::Unix(path) = listener.endpoint().unwrap() else {
        unreachable!()
    };
    let any: AuthFn = Arc::new(|_, _| Box::pin(async { Ok(Grant::service(7)) }));
    let (_stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(serve(listener, stores, any, rx));

    let label = |id: u128, key: &str| {
        let mut l = Label::new(LabelId::from_u128(id), LabelKind::Write, 7);
        l.source = Pointer::Warehouse {
            key: key.into(),
            len: 1,
        };
        Request::Labels(QueueOp::Push {
            queue: "labels".into(),
            items: vec![l],
        })
    };
    let put = |key: &str, len: usize| Request::Put {
        key: key.into(),
        data: Bytes::from(vec![7u8; len]),
    };
    let requests = vec![
        Request::Hello {
            key: None,
            secret: None,
            protocol: PROTOCOL,
        },
        put("a7/w/1", 10),
        label(1, "a7/w/1"),
        // More than the whole warehouse: refused after the delay.
        put("a7/w/2", 4096),
        label(2, "a7/w/2"),
    ];
    let mut raw = tokio::net::UnixStream::connect(&path).await.unwrap();
    let answers = common::exchange(&mut raw, requests).await;
    assert!(answers[&2].is_ok() && answers[&3].is_ok(), "{answers:?}");
    assert!(answers[&4].is_err(), "the oversized put is refused");
    let e = answers[&5].as_ref().expect_err("its label is refused");
    assert!(e.to_string().contains("a7/w/2"), "{e}");
    assert_eq!(
        *log.lock(),
        ["stored a7/w/1", "pushed a7/w/1"],
        "each label published after its data was stored, none over missing data"
    );
}
