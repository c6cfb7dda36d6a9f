//! Tenants (README "Tenants"): a file, its warehouse data and its labels
//! belong to the application that created them. Another application's
//! credentials cannot read, overwrite, delete or rename them — not through
//! the client API, not through `labios serve`, and not with labels pushed
//! straight into a queue (the dispatcher and the workers verify label
//! signatures and file ownership).

mod common;

use bytes::Bytes;
use labios::serve::session_auth;
use labios_client::Client;
use labios_label::{
    auth, Error, Label, LabelIdGen, LabelKind, LabelState, LabelStatus, Pointer, Task,
};
use labios_store::remote::{connect, serve, Endpoint, Listener};
use labios_store::{client_queue, worker_queue, AppRecord, Stores};
use std::time::Duration;

use common::serve::Server;
const A_DATA: &[u8] = b"application A's bytes, not to be touched";

fn denied<T: std::fmt::Debug>(r: labios_label::Result<T>, what: &str) -> String {
    let e = r.expect_err(what);
    let text = e.to_string();
    assert!(
        text.contains("permission denied"),
        "{what}: expected permission denied, got {text}"
    );
    text
}

/// A session of `app` over the socket, as `labios` clients open it.
async fn session(endpoint: &Endpoint, app: &AppRecord) -> (Client, Stores) {
    let (stores, s) = connect(endpoint, Some(app.key.clone()), Some(app.secret.clone()))
        .await
        .unwrap();
    assert_eq!(s.app, app.id);
    let client = Client::with_secret(
        stores.clone(),
        s.app,
        &s.secret,
        s.origin,
        Default::default(),
    )
    .unwrap();
    (client, stores)
}

/// Pushes forged labels past every client check and returns their final
/// statuses.
async fn forged(stores: &Stores, queue: &str, labels: Vec<Label>) -> Vec<LabelStatus> {
    let ids: Vec<_> = labels.iter().map(|l| l.id).collect();
    if queue.starts_with("worker.") {
        let tasks = labels.into_iter().map(Task::single).collect();
        stores.tasks.push(queue, tasks).await.unwrap();
    } else {
        stores.labels.push(queue, labels).await.unwrap();
    }
    let statuses = stores
        .inventory
        .wait(&ids, Duration::from_secs(20))
        .await
        .unwrap();
    assert!(statuses.iter().all(|s| s.state.is_final()), "{statuses:?}");
    statuses
}

fn failed_with(status: &LabelStatus, text: &str) {
    assert_eq!(status.state, LabelState::Failed, "{status:?}");
    let error = status.error.as_deref().unwrap_or_default();
    assert!(error.contains(text), "expected {text:?} in {error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn applications_cannot_touch_each_others_files() {
    let dir = tempfile::tempdir().unwrap();
    let rt = common::start(dir.path()).await;
    let a = rt.admin.create_app("alpha").await.unwrap();
    let b = rt.admin.create_app("beta").await.unwrap();

    // A writes through its in-process client.
    let ca = rt.client(a.id).await.unwrap();
    ca.write_at("/a/data", 0, Bytes::from_static(A_DATA))
        .await
        .unwrap();
    let file = ca.stat("/a/data").await.unwrap();
    assert_eq!(file.owner, a.id);

    // B in process: the client API refuses.
    let cb = rt.client(b.id).await.unwrap();
    denied(cb.read("/a/data").await, "B reads A's file");
    denied(
        cb.write_at("/a/data", 0, Bytes::from_static(b"overwrite"))
            .await,
        "B overwrites A's file",
    );
    denied(cb.remove("/a/data").await, "B removes A's file");
    denied(
        cb.rename("/a/data", "/b/stolen").await,
        "B renames A's file",
    );
    denied(cb.flush("/a/data").await, "B flushes A's file");

    // B over `labios serve`.
    let sock = dir.path().join("tenants.sock");
    let listener = Listener::bind(&Endpoint::Unix(sock.clone())).await.unwrap();
    let endpoint = listener.endpoint().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(serve(
        listener,
        rt.stores.clone(),
        session_auth(rt.admin.clone(), None),
        stopped,
    ));
    let (rb, sb) = session(&endpoint, &b).await;
    denied(rb.read("/a/data").await, "B reads A's file over serve");
    denied(
        rb.write_at("/a/data", 0, Bytes::from_static(b"overwrite"))
            .await,
        "B overwrites A's file over serve",
    );
    denied(rb.remove("/a/data").await, "B removes over serve");
    denied(rb.rename("/a/data", "/b/x").await, "B renames over serve");
    // ... and the raw store operations behind those calls.
    denied(sb.inventory.remove("/a/data").await, "raw remove");
    denied(sb.inventory.rename("/a/data", "/b/x").await, "raw rename");
    denied(
        sb.inventory.rename("/b/y", "/a/data").await,
        "rename onto A's file",
    );
    denied(sb.inventory.set_size(file.id, 0).await, "raw set_size");
    denied(
        sb.inventory
            .create(
                "/a/other",
                labios_store::FileKind::File,
                0o644,
                labios_store::Owner::root(a.id),
            )
            .await,
        "create a file for A",
    );
    denied(
        sb.warehouse.get(&format!("a{}/w/x", a.id)).await,
        "get A's warehouse key",
    );
    denied(
        sb.warehouse.take(&format!("a{}/r/x", a.id)).await,
        "take A's read result",
    );
    denied(
        sb.warehouse
            .put(&format!("a{}/w/x", a.id), Bytes::from_static(b"x"))
            .await,
        "put under A's prefix",
    );
    denied(sb.warehouse.keys("a").await, "list every key");
    let ids = LabelIdGen::new(1 << 40);
    let mut own = Label::new(ids.next(), LabelKind::Read, b.id);
    auth::sign(&mut own, b.secret.as_bytes());
    denied(
        sb.labels.push(&client_queue(a.id), vec![own.clone()]).await,
        "push into A's queue",
    );
    let mut claims_a = Label::new(ids.next(), LabelKind::Read, a.id);
    auth::sign(&mut claims_a, b.secret.as_bytes());
    denied(
        sb.labels.push(&client_queue(b.id), vec![claims_a]).await,
        "push a label claiming A",
    );
    denied(
        sb.labels.pull(&client_queue(a.id), 1, Duration::ZERO).await,
        "pull from A's queue",
    );
    denied(
        sb.tasks
            .push(&worker_queue(1), vec![Task::single(own)])
            .await,
        "push into a worker queue",
    );
    // Other applications' secrets are not shown.
    let apps = sb.inventory.apps().await.unwrap();
    let seen_a = apps.iter().find(|x| x.id == a.id).unwrap();
    assert!(seen_a.secret.is_empty(), "A's secret leaked to B");
    assert_eq!(
        sb.inventory.app(b.id).await.unwrap().unwrap().secret,
        b.secret
    );
    let mut stolen = seen_a.clone();
    stolen.secret = "mine now".into();
    denied(sb.inventory.put_app(stolen).await, "rewrite A's record");

    // Forged labels pushed straight into the queues (past `labios serve`,
    // as a process holding the queue's service credentials could).
    let ids = LabelIdGen::new(1 << 41);
    let read_a = |owner| {
        let mut l = Label::new(ids.next(), LabelKind::Read, owner);
        l.source = Pointer::File {
            path: "/a/data".into(),
            file: file.id,
            offset: 0,
            len: A_DATA.len() as u64,
        };
        l.destination = Pointer::Warehouse {
            key: format!("a{owner}/r/{}", l.id),
            len: A_DATA.len() as u64,
        };
        l
    };
    let unsigned = read_a(a.id);
    let mut wrong_key = read_a(a.id);
    auth::sign(&mut wrong_key, b.secret.as_bytes());
    let mut b_own = read_a(b.id);
    auth::sign(&mut b_own, b.secret.as_bytes());
    let mut delete = Label::new(ids.next(), LabelKind::Delete, b.id);
    delete.source = Pointer::File {
        path: "/a/data".into(),
        file: file.id,
        offset: 0,
        len: 0,
    };
    auth::sign(&mut delete, b.secret.as_bytes());
    let mut rename = Label::new(ids.next(), LabelKind::Rename, b.id);
    rename.source = delete.source.clone();
    rename.destination = Pointer::File {
        path: "/b/stolen".into(),
        file: 0,
        offset: 0,
        len: 0,
    };
    auth::sign(&mut rename, b.secret.as_bytes());
    let mut overwrite = Label::new(ids.next(), LabelKind::Write, b.id);
    let key = format!("a{}/w/{}", b.id, overwrite.id);
    rt.stores
        .warehouse
        .put(&key, Bytes::from_static(b"XXXX"))
        .await
        .unwrap();
    overwrite.source = Pointer::Warehouse { key, len: 4 };
    overwrite.destination = Pointer::File {
        path: "/a/data".into(),
        file: file.id,
        offset: 0,
        len: 4,
    };
    auth::sign(&mut overwrite, b.secret.as_bytes());

    let via_dispatcher = forged(
        &rt.stores,
        &client_queue(a.id),
        vec![unsigned.clone(), wrong_key.clone()],
    )
    .await;
    let msg = format!("label signature does not match application {}", a.id);
    failed_with(&via_dispatcher[0], &msg);
    failed_with(&via_dispatcher[1], &msg);
    denied(
        sb.inventory.status(unsigned.id).await,
        "read A's label status",
    );
    denied(
        sb.inventory
            .wait(&[wrong_key.id], Duration::from_millis(10))
            .await,
        "wait on A's label",
    );
    let by_owner = forged(
        &rt.stores,
        &client_queue(b.id),
        vec![
            b_own.clone(),
            delete.clone(),
            rename.clone(),
            overwrite.clone(),
        ],
    )
    .await;
    for s in &by_owner {
        failed_with(
            s,
            "permission denied: /a/data belongs to another application",
        );
    }
    // Straight into a worker queue, past the dispatcher: the worker checks.
    let mut again = vec![read_a(a.id), read_a(b.id)];
    auth::sign(&mut again[1], b.secret.as_bytes());
    let at_worker = forged(&rt.stores, &worker_queue(1), again).await;
    failed_with(&at_worker[0], &msg);
    failed_with(&at_worker[1], "belongs to another application");

    // A's bytes are intact; B's own files work, over serve too.
    assert_eq!(ca.read("/a/data").await.unwrap(), A_DATA);
    assert_eq!(ca.stat("/a/data").await.unwrap().owner, a.id);
    rb.write_at("/b/data", 0, Bytes::from_static(b"B's own"))
        .await
        .unwrap();
    assert_eq!(rb.read("/b/data").await.unwrap(), &b"B's own"[..]);
    rb.rename("/b/data", "/b/moved").await.unwrap();
    assert_eq!(rb.read("/b/moved").await.unwrap(), &b"B's own"[..]);
    rb.remove("/b/moved").await.unwrap();
    cb.write_at("/b/in-process", 0, Bytes::from_static(b"ok"))
        .await
        .unwrap();
    assert_eq!(cb.read("/b/in-process").await.unwrap(), &b"ok"[..]);

    // Wrong credentials are refused at connect.
    let e = connect(&endpoint, Some(b.key.clone()), Some("wrong".into()))
        .await
        .err()
        .expect("wrong secret refused");
    assert!(matches!(e, Error::PermissionDenied(_)), "{e}");
    let e = connect(&endpoint, Some(a.key.clone()), Some(b.secret.clone()))
        .await
        .err()
        .expect("another app's secret refused");
    assert!(matches!(e, Error::PermissionDenied(_)), "{e}");

    let _ = stop.send(true);
    let _ = server.await;
    rt.shutdown().await.unwrap();
}

/// A read of all of `/a/data` (file `file`) claiming `owner`.
fn read_label(ids: &LabelIdGen, owner: u32, file: u64) -> Label {
    let mut l = Label::new(ids.next(), LabelKind::Read, owner);
    l.source = Pointer::File {
        path: "/a/data".into(),
        file,
        offset: 0,
        len: A_DATA.len() as u64,
    };
    l.destination = Pointer::Warehouse {
        key: format!("a{owner}/r/{}", l.id),
        len: A_DATA.len() as u64,
    };
    l
}

/// The distributed deployment: real nats-server and redis-server, and
/// `labios dispatcher` / `labios worker` processes, which verify labels
/// themselves (needs `bash scripts/services.sh install`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distributed_dispatcher_and_workers_refuse_forged_labels() {
    use common::deploy::{Deployed, Kind};
    use labios_connect::connect_client;
    let d = Deployed::start(Kind::Cluster, |_| {}).await;
    let stores = d.stores();
    let admin = labios_core::administrator::Administrator::new(stores.inventory.clone());
    let a = admin.create_app("alpha").await.unwrap();
    let b = admin.create_app("beta").await.unwrap();
    let creds = |x: &AppRecord| (Some(x.key.clone()), Some(x.secret.clone()));
    let (k, s) = creds(&a);
    let ca = connect_client(&d.config().connection(), k, s)
        .await
        .unwrap();
    let (k, s) = creds(&b);
    let cb = connect_client(&d.config().connection(), k, s)
        .await
        .unwrap();
    ca.write_at("/a/data", 0, Bytes::from_static(A_DATA))
        .await
        .unwrap();
    let file = ca.stat("/a/data").await.unwrap();
    denied(cb.read("/a/data").await, "B reads A's file");
    denied(
        cb.write_at("/a/data", 0, Bytes::from_static(b"overwrite"))
            .await,
        "B overwrites A's file",
    );
    denied(cb.remove("/a/data").await, "B removes A's file");
    denied(cb.rename("/a/data", "/b/x").await, "B renames A's file");

    let ids = LabelIdGen::new(1 << 42);
    let unsigned = read_label(&ids, a.id, file.id);
    let mut wrong_key = read_label(&ids, a.id, file.id);
    auth::sign(&mut wrong_key, b.secret.as_bytes());
    let msg = format!("label signature does not match application {}", a.id);
    let st = forged(&stores, &client_queue(a.id), vec![unsigned, wrong_key]).await;
    failed_with(&st[0], &msg);
    failed_with(&st[1], &msg);
    let mut b_own = read_label(&ids, b.id, file.id);
    auth::sign(&mut b_own, b.secret.as_bytes());
    let st = forged(&stores, &client_queue(b.id), vec![b_own]).await;
    failed_with(
        &st[0],
        "permission denied: /a/data belongs to another application",
    );
    let mut at_worker = vec![
        read_label(&ids, a.id, file.id),
        read_label(&ids, b.id, file.id),
    ];
    auth::sign(&mut at_worker[1], b.secret.as_bytes());
    let st = forged(&stores, &worker_queue(1), at_worker).await;
    failed_with(&st[0], &msg);
    failed_with(&st[1], "belongs to another application");

    assert_eq!(ca.read("/a/data").await.unwrap(), A_DATA);
    cb.write_at("/b/data", 0, Bytes::from_static(b"B's own"))
        .await
        .unwrap();
    assert_eq!(cb.read("/b/data").await.unwrap(), &b"B's own"[..]);
    let e = connect_client(
        &d.config().connection(),
        Some(b.key.clone()),
        Some("wrong".into()),
    )
    .await
    .err()
    .expect("wrong secret refused");
    assert!(e.to_string().contains("invalid credentials"), "{e}");
    d.shutdown().await;
}

/// `labios app create NAME` -> (key, secret).
fn create_app(server: &Server, name: &str) -> (String, String) {
    let out = server.ok(None, &["app", "create", name]);
    let field = |f: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(f))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {f} in {out}"))
    };
    (field("key:"), field("secret:"))
}

#[test]
fn cli_credentials_confine_put_and_get() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let (ka, sa) = create_app(&server, "alpha");
    let (kb, sb) = create_app(&server, "beta");
    let a = Some((ka.as_str(), sa.as_str()));
    let b = Some((kb.as_str(), sb.as_str()));
    let local = dir.path().join("in.txt");
    std::fs::write(&local, b"alpha's file").unwrap();
    let local = local.to_str().unwrap();
    server.ok(a, &["put", local, "/alpha/f"]);
    assert_eq!(server.ok(a, &["get", "/alpha/f", "-"]), "alpha's file");

    let e = server.err(b, &["get", "/alpha/f", "-"]);
    assert!(e.contains("permission denied"), "{e}");
    let e = server.err(b, &["put", local, "/alpha/f"]);
    assert!(e.contains("permission denied"), "{e}");
    let e = server.err(b, &["rm", "/alpha/f"]);
    assert!(e.contains("permission denied"), "{e}");
    // The default application (no credentials) is a tenant like any other.
    let e = server.err(None, &["get", "/alpha/f", "-"]);
    assert!(e.contains("permission denied"), "{e}");
    let e = server.err(Some((ka.as_str(), "wrong")), &["get", "/alpha/f", "-"]);
    assert!(e.contains("invalid credentials"), "{e}");

    assert_eq!(server.ok(a, &["get", "/alpha/f", "-"]), "alpha's file");
    server.ok(b, &["put", local, "/beta/f"]);
    assert_eq!(server.ok(b, &["get", "/beta/f", "-"]), "alpha's file");
    // Status shows every queue's depth to any tenant (no data in it).
    server.ok(a, &["status"]);
}

/// An application's session over `labios serve` reads small ranges, whose
/// results come back with the statuses of its wait, and copies small
/// ranges, whose read results must stay in the warehouse for the copy's
/// writes to take (an earlier build brought those back too, and every
/// copy of a range under 64 KiB failed: "data for label ... is missing
/// from the warehouse", found by the model checker through an S3
/// CompleteMultipartUpload). Every byte reads back, and nothing is left
/// in the warehouse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_over_serve_reads_and_copies_small_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let rt = common::start(dir.path()).await;
    let a = rt.admin.create_app("alpha").await.unwrap();
    let listener = Listener::bind(&Endpoint::Unix(dir.path().join("s.sock")))
        .await
        .unwrap();
    let endpoint = listener.endpoint().unwrap();
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(serve(
        listener,
        rt.stores.clone(),
        session_auth(rt.admin.clone(), None),
        stopped,
    ));
    let (client, _) = session(&endpoint, &a).await;
    let data = common::data(7, 300 << 10);
    client.write_at("/a/src", 0, data.clone()).await.unwrap();
    let zeros = Bytes::from(vec![0; data.len()]);
    client.write_at("/a/dst", 0, zeros).await.unwrap();
    for (at, len) in [(0, 1), (4095, 2), (100_000, 3835), (250_000, 50_000)] {
        let got = client.read_at("/a/src", at, len).await.unwrap();
        assert!(got[..] == data[at as usize..][..len as usize], "{at}+{len}");
        let copied = client
            .copy_range("/a/src", at, "/a/dst", at, len)
            .await
            .unwrap();
        assert_eq!(copied, len);
        let back = client.read_at("/a/dst", at, len).await.unwrap();
        assert!(back == got, "copy of {at}+{len}");
    }
    assert_eq!(rt.stores.warehouse.usage().await.unwrap(), 0);
}
