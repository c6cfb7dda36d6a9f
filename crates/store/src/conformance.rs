//! Contract tests for the three traits. Every implementation (embedded,
//! remote, distributed engines) runs the same suites, so they are written
//! against the traits only and use fresh names so that they can share an
//! instance with other users.

use crate::inventory::{
    LINK_TARGET, LINK_TARGET_MAX, XATTRS_BATCH_MAX, XATTR_NAME_MAX, XATTR_TOTAL_MAX,
    XATTR_VALUE_MAX,
};
use crate::warehouse::staged_bound;
use crate::{
    AppRecord, Extent, FileKind, Inventory, LabelQueue, Named, Owner, Presence, RenameHow, SetAttr,
    SetTime, Warehouse, XattrCond, NO_ATTRIBUTE,
};
use bytes::Bytes;
use labios_label::id::now_nanos;
use labios_label::{
    Error, FileId, Label, LabelId, LabelIdGen, LabelKind, LabelState, LabelStatus, WorkerSpec,
    WorkerStatus,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn unique(what: &str) -> String {
    format!("conf{what}{}", now_nanos())
}

fn labels(n: usize) -> Vec<Label> {
    let g = LabelIdGen::new(now_nanos());
    (0..n)
        .map(|_| Label::new(g.next(), LabelKind::Write, 1))
        .collect()
}

/// FIFO order, batching, tokens, prompt wake-up of a waiting puller.
pub async fn queue_suite(q: Arc<dyn LabelQueue<Label>>) {
    let name = unique("q.");
    assert_eq!(
        q.depth(&name).await.unwrap(),
        0,
        "unknown queue has depth 0"
    );

    let items = labels(5);
    q.push(&name, items[..3].to_vec()).await.unwrap();
    q.push(&name, items[3..].to_vec()).await.unwrap();
    q.push(&name, Vec::new()).await.unwrap();
    assert_eq!(q.depth(&name).await.unwrap(), 5);
    let first = q.pull(&name, 2, Duration::ZERO).await.unwrap();
    let rest = q.pull(&name, 10, Duration::from_secs(5)).await.unwrap();
    let got: Vec<Label> = first.iter().chain(&rest).map(|d| d.item.clone()).collect();
    assert_eq!(got, items, "items come out in push order");
    let tokens: Vec<u64> = first.iter().chain(&rest).map(|d| d.token).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens increase");
    q.ack(&name, &tokens).await.unwrap();
    assert_eq!(q.depth(&name).await.unwrap(), 0);
    assert!(q.pull(&name, 0, Duration::ZERO).await.unwrap().is_empty());

    // An empty queue waits for the timeout, then returns nothing.
    let t = Instant::now();
    assert!(q
        .pull(&name, 4, Duration::from_millis(50))
        .await
        .unwrap()
        .is_empty());
    assert!(t.elapsed() >= Duration::from_millis(40), "pull waited");

    // A waiting puller is woken by the push, long before its timeout.
    let pusher = {
        let (q, name) = (q.clone(), name.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            q.push(&name, labels(1)).await.unwrap();
        })
    };
    let t = Instant::now();
    let got = q.pull(&name, 8, Duration::from_secs(10)).await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(t.elapsed() < Duration::from_secs(5), "puller woken by push");
    pusher.await.unwrap();

    // Many batches keep their order while a concurrent puller drains them
    // (so any bound of at least 10 items works).
    let many = labels(1000);
    let pusher = {
        let (q, name, many) = (q.clone(), name.clone(), many.clone());
        tokio::spawn(async move {
            for chunk in many.chunks(10) {
                q.push(&name, chunk.to_vec()).await.unwrap();
            }
        })
    };
    let mut out = Vec::new();
    while out.len() < many.len() {
        let got = q.pull(&name, 300, Duration::from_secs(5)).await.unwrap();
        assert!(!got.is_empty(), "items went missing");
        out.extend(got.into_iter().map(|d| d.item));
    }
    assert_eq!(out, many);
    pusher.await.unwrap();

    let other = format!("{name}.b");
    q.push(&other, labels(1)).await.unwrap();
    assert_eq!(q.queues(&name).await.unwrap(), vec![name.clone(), other]);
}

/// Backpressure of a queue created with `bound` items and a push timeout
/// of `push_timeout` (which must be at least 100 ms for the test to observe
/// a waiting push).
pub async fn queue_backpressure_suite(
    q: Arc<dyn LabelQueue<Label>>,
    bound: usize,
    push_timeout: Duration,
) {
    let name = unique("bp.");
    q.push(&name, labels(bound)).await.unwrap();
    let waiting = {
        let (q, name) = (q.clone(), name.clone());
        tokio::spawn(async move { q.push(&name, labels(1)).await })
    };
    tokio::time::sleep(push_timeout / 4).await;
    assert!(!waiting.is_finished(), "push into a full queue waits");
    assert_eq!(q.depth(&name).await.unwrap(), bound, "bound holds");
    assert_eq!(q.pull(&name, 1, Duration::ZERO).await.unwrap().len(), 1);
    waiting.await.unwrap().expect("room made by the pull");
    assert_eq!(q.depth(&name).await.unwrap(), bound);

    let t = Instant::now();
    let err = q.push(&name, labels(1)).await.unwrap_err();
    assert!(matches!(err, Error::Full(_)), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    assert!(t.elapsed() >= push_timeout.mul_f32(0.8));
    assert_eq!(
        q.depth(&name).await.unwrap(),
        bound,
        "failed push added nothing"
    );
}

/// Values, replacement accounting, keys, take/delete.
pub async fn warehouse_suite(w: Arc<dyn Warehouse>) {
    let p = unique("w/");
    let base = w.usage().await.unwrap();
    w.put(&format!("{p}/b"), Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    assert_eq!(w.usage().await.unwrap(), base + 10);
    w.put(&format!("{p}/b"), Bytes::from_static(b"abcd"))
        .await
        .unwrap();
    assert_eq!(
        w.usage().await.unwrap(),
        base + 4,
        "replacement re-accounted"
    );
    let big: Bytes = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    w.put(&format!("{p}/a"), big.clone()).await.unwrap();
    assert_eq!(w.get(&format!("{p}/a")).await.unwrap(), Some(big.clone()));
    assert_eq!(
        w.keys(&p).await.unwrap(),
        vec![format!("{p}/a"), format!("{p}/b")]
    );
    assert_eq!(w.take(&format!("{p}/a")).await.unwrap(), Some(big));
    assert_eq!(w.take(&format!("{p}/a")).await.unwrap(), None);
    assert_eq!(
        w.get(&format!("{p}/b")).await.unwrap().as_deref(),
        Some(&b"abcd"[..])
    );
    assert!(w.delete(&format!("{p}/b")).await.unwrap());
    assert!(!w.delete(&format!("{p}/b")).await.unwrap());
    assert_eq!(w.get(&format!("{p}/b")).await.unwrap(), None);
    assert!(w.keys(&p).await.unwrap().is_empty());
    assert_eq!(w.usage().await.unwrap(), base);
}

/// Backpressure of an otherwise empty warehouse bounded at `max_bytes`
/// (at least 16) with a put timeout of at least 100 ms: staged data is held
/// to [`staged_bound`], results may use the rest.
pub async fn warehouse_backpressure_suite(
    w: Arc<dyn Warehouse>,
    max_bytes: u64,
    put_timeout: Duration,
) {
    let p = unique("wbp/");
    let staged = staged_bound(max_bytes);
    let bytes = |n: u64| Bytes::from(vec![1u8; n as usize]);
    let err = w
        .put(&format!("{p}/x"), bytes(staged + 1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Full(_)), "{err}");
    let err = w
        .put_result(&format!("{p}/x"), bytes(max_bytes + 1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Full(_)), "{err}");

    w.put(&format!("{p}/fill"), bytes(staged - 1))
        .await
        .unwrap();
    let waiting = {
        let (w, key) = (w.clone(), format!("{p}/late"));
        tokio::spawn(async move { w.put(&key, Bytes::from_static(b"xy")).await })
    };
    tokio::time::sleep(put_timeout / 4).await;
    assert!(!waiting.is_finished(), "put into a full warehouse waits");
    assert!(w.delete(&format!("{p}/fill")).await.unwrap());
    waiting.await.unwrap().expect("room made by the delete");
    assert_eq!(w.usage().await.unwrap(), 2);

    // Staged data full: a result still fits in the reserve, then waits too.
    w.put(&format!("{p}/fill"), bytes(staged - 2))
        .await
        .unwrap();
    let err = w
        .put(&format!("{p}/more"), Bytes::from_static(b"z"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Full(_)), "{err}");
    let reserve = max_bytes - staged;
    w.put_result(&format!("{p}/result"), bytes(reserve))
        .await
        .expect("a result uses the reserve");
    assert_eq!(w.usage().await.unwrap(), max_bytes);
    let err = w
        .put_result(&format!("{p}/more"), Bytes::from_static(b"z"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Full(_)), "{err}");
    for key in ["fill", "late", "result"] {
        w.delete(&format!("{p}/{key}")).await.unwrap();
    }
}

fn ext(offset: u64, len: u64, worker: u32, label: LabelId) -> Extent {
    Extent {
        offset,
        len,
        worker,
        label,
    }
}

/// Namespace, newest-label-wins extents, extended attributes, label
/// statuses, workers, apps.
pub async fn inventory_suite(i: Arc<dyn Inventory>) {
    let root = format!("/{}", unique("inv"));
    let f = i
        .create(
            &format!("{root}/a/b/f"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap();
    assert_eq!(
        (f.kind, f.size, f.mode, f.owner),
        (FileKind::File, 0, 0o644, 7)
    );
    let parent = i.lookup(&format!("{root}/a/b")).await.unwrap().unwrap();
    assert_eq!((parent.kind, parent.mode), (FileKind::Dir, 0o755));
    let again = i
        .create(
            &format!("{root}/a/b/f"),
            FileKind::File,
            0o600,
            Owner::root(7),
        )
        .await
        .unwrap();
    assert_eq!(again.id, f.id, "create returns the existing entry");
    let err = i
        .create(
            &format!("{root}/a/b/f"),
            FileKind::Dir,
            0o755,
            Owner::root(7),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    let err = i
        .create(
            &format!("{root}/a/b/f/x"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap_err();
    assert!(err.is_parent_not_dir(), "{err}");
    let listed: Vec<String> = i
        .list(&root)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.path)
        .collect();
    let expect: Vec<String> = ["", "/a", "/a/b", "/a/b/f"]
        .iter()
        .map(|s| format!("{root}{s}"))
        .collect();
    assert_eq!(listed, expect);

    // Newest label wins, whatever order the commits arrive in.
    let g = LabelIdGen::new(i.next_id("origin").await.unwrap());
    let l: Vec<LabelId> = (0..6).map(|_| g.next()).collect();
    i.commit_extent(f.id, ext(100, 100, 3, l[2])).await.unwrap();
    i.commit_extent(f.id, ext(0, 300, 1, l[0])).await.unwrap();
    let all = i.extents(f.id, 0, u64::MAX).await.unwrap();
    assert_eq!(
        all,
        vec![
            ext(0, 100, 1, l[0]),
            ext(100, 100, 3, l[2]),
            ext(200, 100, 1, l[0])
        ]
    );
    i.commit_extent(f.id, ext(50, 100, 2, l[1])).await.unwrap();
    i.commit_extent(f.id, ext(120, 10, 4, l[3])).await.unwrap();
    let all = i.extents(f.id, 0, 300).await.unwrap();
    assert_eq!(
        all,
        vec![
            ext(0, 50, 1, l[0]),
            ext(50, 50, 2, l[1]),
            ext(100, 20, 3, l[2]),
            ext(120, 10, 4, l[3]),
            ext(130, 70, 3, l[2]),
            ext(200, 100, 1, l[0]),
        ]
    );
    assert_eq!(
        i.extents(f.id, 60, 50).await.unwrap(),
        vec![ext(60, 40, 2, l[1]), ext(100, 10, 3, l[2])],
        "clipped to the range"
    );
    assert_eq!(i.file(f.id).await.unwrap().unwrap().size, 300);

    // Odd offsets, holes, zero-length commits.
    i.commit_extent(f.id, ext(1001, 7, 5, l[4])).await.unwrap();
    assert_eq!(i.file(f.id).await.unwrap().unwrap().size, 1008);
    assert_eq!(
        i.extents(f.id, 300, 703).await.unwrap(),
        vec![ext(1001, 2, 5, l[4])],
        "holes are absent"
    );
    assert!(i.extents(f.id, 300, 500).await.unwrap().is_empty());
    let before = i.extents(f.id, 0, u64::MAX).await.unwrap();
    i.commit_extent(f.id, ext(5, 0, 6, l[5])).await.unwrap();
    assert_eq!(i.extents(f.id, 0, u64::MAX).await.unwrap(), before);
    assert_eq!(i.file(f.id).await.unwrap().unwrap().size, 1008);
    let err = i
        .commit_extent(u64::MAX - 3, ext(0, 1, 1, l[5]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");

    // Truncation cuts extents.
    i.set_size(f.id, 150).await.unwrap();
    assert_eq!(i.file(f.id).await.unwrap().unwrap().size, 150);
    assert_eq!(
        i.extents(f.id, 0, u64::MAX).await.unwrap(),
        vec![
            ext(0, 50, 1, l[0]),
            ext(50, 50, 2, l[1]),
            ext(100, 20, 3, l[2]),
            ext(120, 10, 4, l[3]),
            ext(130, 20, 3, l[2]),
        ]
    );

    // Rename: moves, creates parents, replaces a file.
    let g_path = format!("{root}/c/g");
    assert!(i
        .rename(&format!("{root}/a/b/f"), &g_path)
        .await
        .unwrap()
        .is_none());
    assert!(i.lookup(&format!("{root}/a/b/f")).await.unwrap().is_none());
    assert_eq!(i.lookup(&g_path).await.unwrap().unwrap().id, f.id);
    assert_eq!(
        i.lookup(&format!("{root}/c")).await.unwrap().unwrap().kind,
        FileKind::Dir
    );
    let h = i
        .create(&format!("{root}/h"), FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    i.commit_extent(h.id, ext(0, 10, 9, l[5])).await.unwrap();
    let (old, old_extents) = i
        .rename(&format!("{root}/h"), &g_path)
        .await
        .unwrap()
        .expect("destination replaced");
    assert_eq!(old.id, f.id);
    assert_eq!(old_extents.len(), 5);
    assert_eq!(i.lookup(&g_path).await.unwrap().unwrap().id, h.id);
    assert!(i.file(f.id).await.unwrap().is_none());

    // Renaming a directory moves its children.
    i.create(
        &format!("{root}/a/b/k"),
        FileKind::File,
        0o644,
        Owner::root(7),
    )
    .await
    .unwrap();
    i.rename(&format!("{root}/a"), &format!("{root}/z"))
        .await
        .unwrap();
    assert!(i.lookup(&format!("{root}/a/b/k")).await.unwrap().is_none());
    assert!(i.lookup(&format!("{root}/z/b/k")).await.unwrap().is_some());
    let err = i
        .rename(&format!("{root}/z"), &format!("{root}/z/b/in"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");

    // Remove: files with their extents, only empty directories.
    let err = i.remove(&format!("{root}/z")).await.unwrap_err();
    assert!(err.to_string().contains(&format!("{root}/z")), "{err}");
    i.remove(&format!("{root}/z/b/k")).await.unwrap();
    i.remove(&format!("{root}/z/b")).await.unwrap();
    let (gone, extents) = i.remove(&g_path).await.unwrap();
    assert_eq!((gone.id, extents), (h.id, vec![ext(0, 10, 9, l[5])]));
    let err = i.remove(&g_path).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");

    xattr_cases(i.as_ref(), &root).await;

    // Label statuses: wait times out on unfinished labels, returns early on
    // completion and reclaims what it returned.
    let count = i.label_count().await.unwrap();
    i.set_status(LabelStatus::new(l[0], LabelState::Scheduled))
        .await
        .unwrap();
    assert_eq!(
        i.status(l[0]).await.unwrap().unwrap().state,
        LabelState::Scheduled
    );
    let t = Instant::now();
    let st = i.wait(&l[..2], Duration::from_millis(50)).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(40));
    assert_eq!(
        st.iter().map(|s| s.state).collect::<Vec<_>>(),
        vec![LabelState::Scheduled, LabelState::Queued]
    );
    let finisher = {
        let (i, l) = (i.clone(), l.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            i.set_status(LabelStatus::new(l[0], LabelState::Complete))
                .await
                .unwrap();
            let mut failed = LabelStatus::new(l[1], LabelState::Failed);
            failed.error = Some("disk on fire".into());
            i.set_status(failed).await.unwrap();
        })
    };
    let t = Instant::now();
    let st = i.wait(&l[..2], Duration::from_secs(20)).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "wait returns early");
    assert_eq!(st[0].state, LabelState::Complete);
    assert_eq!(st[1].state, LabelState::Failed);
    assert_eq!(st[1].error.as_deref(), Some("disk on fire"));
    finisher.await.unwrap();
    assert!(i.status(l[0]).await.unwrap().is_none(), "reclaimed");
    assert_eq!(i.label_count().await.unwrap(), count);
    assert!(i
        .wait(&[], Duration::from_secs(5))
        .await
        .unwrap()
        .is_empty());

    // Workers, applications, counters.
    let wid = (now_nanos() % 1_000_000) as u32 + 1_000_000;
    let w = WorkerStatus::new(WorkerSpec {
        id: wid,
        tier: "ram".into(),
        speed: 5,
        energy: 1,
        capacity: 1 << 30,
        max_queue: 64,
        functions: true,
    });
    i.put_worker(w.clone()).await.unwrap();
    assert!(i.workers().await.unwrap().contains(&w));
    i.remove_worker(wid).await.unwrap();
    assert!(!i.workers().await.unwrap().contains(&w));
    // A stack asked of a worker reaches it once; a newer request replaces
    // one not yet taken; other workers see none.
    let stack = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(i.take_stack(wid).await.unwrap(), None);
    i.ask_stack(wid, stack(&["zstd", "file"])).await.unwrap();
    i.ask_stack(wid, stack(&["checksum", "file"]))
        .await
        .unwrap();
    assert_eq!(i.take_stack(wid + 1).await.unwrap(), None);
    assert_eq!(
        i.take_stack(wid).await.unwrap(),
        Some(stack(&["checksum", "file"]))
    );
    assert_eq!(i.take_stack(wid).await.unwrap(), None);
    let app = AppRecord {
        id: wid,
        name: "conformance".into(),
        key: "k".into(),
        secret: "s".into(),
        settings: vec![("sync".into(), "true".into())],
    };
    i.put_app(app.clone()).await.unwrap();
    assert_eq!(i.app(wid).await.unwrap(), Some(app.clone()));
    assert!(i.apps().await.unwrap().contains(&app));
    // Program repository: per application, replaceable, removable.
    let other = wid + 1;
    let m1 = Bytes::from_static(b"\0asm module one");
    i.put_function(wid, "b-fn", Some(m1.clone())).await.unwrap();
    i.put_function(wid, "a-fn", Some(Bytes::from_static(b"x")))
        .await
        .unwrap();
    i.put_function(other, "b-fn", Some(Bytes::from_static(b"theirs")))
        .await
        .unwrap();
    assert_eq!(i.function(wid, "b-fn").await.unwrap(), Some(m1));
    assert_eq!(i.functions(wid).await.unwrap(), vec!["a-fn", "b-fn"]);
    i.put_function(wid, "b-fn", Some(Bytes::from_static(b"v2")))
        .await
        .unwrap();
    assert_eq!(
        i.function(wid, "b-fn").await.unwrap().as_deref(),
        Some(&b"v2"[..])
    );
    i.put_function(wid, "a-fn", None).await.unwrap();
    assert_eq!(i.functions(wid).await.unwrap(), vec!["b-fn"]);
    assert_eq!(i.function(wid, "a-fn").await.unwrap(), None);
    assert_eq!(
        i.function(other, "b-fn").await.unwrap().as_deref(),
        Some(&b"theirs"[..])
    );
    let counter = unique("ctr");
    let a = i.next_id(&counter).await.unwrap();
    let b = i.next_id(&counter).await.unwrap();
    assert!(b > a);
    append_cases(i.as_ref(), &root).await;
    read_plan_cases(i.as_ref(), &root).await;
    symlink_cases(i.as_ref(), &root).await;
    hard_link_cases(i.as_ref(), &root).await;
    open_file_cases(i.as_ref(), &root).await;
    attribute_cases(i.as_ref(), &root).await;
    special_cases(i.as_ref(), &root).await;
    directory_link_cases(i.as_ref(), &root).await;
    rename_how_cases(i.as_ref(), &root).await;
    i.sync().await.unwrap();
}

/// A read's entry and extents in one call: by path or id, the extents
/// cut at the file's size, none past it or for what is not a file, and
/// nothing for a name or id that names nothing.
async fn read_plan_cases(i: &dyn Inventory, root: &str) {
    let path = format!("{root}/plan/f");
    let f = i
        .create(&path, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    let g = LabelIdGen::new(i.next_id("origin").await.unwrap());
    let (a, b) = (g.next(), g.next());
    i.commit_extent(f.id, ext(0, 200, 1, a)).await.unwrap();
    i.commit_extent(f.id, ext(200, 100, 2, b)).await.unwrap();
    for named in [Named::Path(path.clone()), Named::Id(f.id)] {
        let plan = |offset, len| i.read_plan(&named, offset, len);
        let (meta, extents) = plan(150, 100).await.unwrap().unwrap();
        assert_eq!(
            (meta.id, meta.path.as_str(), meta.size),
            (f.id, &path[..], 300)
        );
        assert_eq!(extents, vec![ext(150, 50, 1, a), ext(200, 50, 2, b)]);
        let (_, extents) = plan(250, u64::MAX).await.unwrap().unwrap();
        assert_eq!(extents, vec![ext(250, 50, 2, b)], "cut at the size");
        for (offset, len) in [(300, 10), (10, 0), (u64::MAX, 1)] {
            let (meta, extents) = plan(offset, len).await.unwrap().unwrap();
            assert_eq!((meta.id, extents), (f.id, vec![]), "{offset}+{len}");
        }
    }
    let dir = format!("{root}/plan");
    let (meta, extents) = i
        .read_plan(&Named::Path(dir), 0, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((meta.kind, extents), (FileKind::Dir, vec![]));
    let gone = Named::Path(format!("{root}/plan/none"));
    assert_eq!(i.read_plan(&gone, 0, 10).await.unwrap(), None);
    // A second name shows as itself, with the same extents.
    let other = format!("{root}/plan/g");
    i.link(&path, &other).await.unwrap();
    i.remove(&path).await.unwrap();
    assert_eq!(i.read_plan(&Named::Path(path), 0, 10).await.unwrap(), None);
    let (meta, extents) = i
        .read_plan(&Named::Path(other.clone()), 0, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (meta.id, meta.path, extents),
        (f.id, other, vec![ext(0, 10, 1, a)])
    );
}

/// A directory's link count is 2 (its name and its `.`) plus one for
/// each subdirectory (its `..`), through every way a subdirectory comes,
/// goes or moves; other entries do not count.
async fn directory_link_cases(i: &dyn Inventory, root: &str) {
    let links = |path: String| async move { i.lookup(&path).await.unwrap().unwrap().nlink };
    let dir = |path: String| async move {
        i.create(&path, FileKind::Dir, 0o755, Owner::root(1))
            .await
            .unwrap()
    };
    let (n, m) = (format!("{root}/subdirs/n"), format!("{root}/subdirs/m"));
    assert_eq!(dir(n.clone()).await.nlink, 2, "a new directory");
    assert_eq!(links(format!("{root}/subdirs")).await, 3, "made with it");
    dir(format!("{n}/x")).await;
    assert_eq!(links(n.clone()).await, 3, "a subdirectory");
    i.create(&format!("{n}/y/z/f"), FileKind::File, 0o644, Owner::root(1))
        .await
        .unwrap();
    assert_eq!(links(n.clone()).await, 4, "a missing parent made");
    assert_eq!(
        (
            links(format!("{n}/y")).await,
            links(format!("{n}/y/z")).await
        ),
        (3, 2)
    );
    i.symlink(&format!("{n}/l"), "x", Owner::root(1))
        .await
        .unwrap();
    i.create(&format!("{n}/p"), FileKind::Fifo, 0o644, Owner::root(1))
        .await
        .unwrap();
    i.link(&format!("{n}/y/z/f"), &format!("{n}/h"))
        .await
        .unwrap();
    assert_eq!(
        links(n.clone()).await,
        4,
        "files, links and FIFOs do not count"
    );
    i.rename(&format!("{n}/x"), &format!("{m}/x"))
        .await
        .unwrap();
    assert_eq!(
        (links(n.clone()).await, links(m.clone()).await),
        (3, 3),
        "a subdirectory moved to a new parent"
    );
    i.rename(&format!("{n}/y"), &format!("{n}/w"))
        .await
        .unwrap();
    assert_eq!(links(n.clone()).await, 3, "renamed in place");
    assert_eq!(links(format!("{n}/w")).await, 3, "it keeps its own");
    let (gone, _) = i.remove(&format!("{m}/x")).await.unwrap();
    assert_eq!((gone.kind, gone.nlink), (FileKind::Dir, 0));
    assert_eq!(links(m.clone()).await, 2, "a subdirectory removed");
    i.rename(&m, &format!("{n}/w/z/m")).await.unwrap();
    assert_eq!(
        (
            links(format!("{root}/subdirs")).await,
            links(format!("{n}/w/z")).await
        ),
        (3, 3),
        "moved deeper"
    );
}

/// `renameat2`'s flags: no-replace refuses any entry at the destination,
/// and an exchange swaps two trees (a directory with a file, across
/// parents), keeping ids, hard links and link counts right.
async fn rename_how_cases(i: &dyn Inventory, root: &str) {
    let at = |p: &str| format!("{root}/how/{p}");
    let make =
        |p: String, kind| async move { i.create(&p, kind, 0o755, Owner::root(1)).await.unwrap() };
    let id = |p: String| async move { i.lookup(&p).await.unwrap().map(|m| m.id) };
    let links = |p: String| async move { i.lookup(&p).await.unwrap().unwrap().nlink };
    let f = make(at("x/f"), FileKind::File).await;
    let d = make(at("y/d"), FileKind::Dir).await;
    let inner = make(at("y/d/inner"), FileKind::File).await;
    // A second name of `f` inside `d`'s tree, and one of `inner` beside `f`.
    i.link(&at("x/f"), &at("y/d/f-too")).await.unwrap();
    i.link(&at("y/d/inner"), &at("x/inner-too")).await.unwrap();
    let g = make(at("x/g"), FileKind::File).await;

    let err = i
        .rename_as(&at("x/g"), &at("x/f"), RenameHow::NoReplace)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    let err = i
        .rename_as(&at("x/f"), &at("y/d/f-too"), RenameHow::NoReplace)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::AlreadyExists(_)),
        "another name: {err}"
    );
    i.rename_as(&at("x/g"), &at("x/h"), RenameHow::NoReplace)
        .await
        .unwrap();
    assert_eq!(id(at("x/h")).await, Some(g.id));

    let err = i
        .rename_as(&at("x/f"), &at("x/none"), RenameHow::Exchange)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    for (a, b) in [(at("y"), at("y/d")), (at("y/d"), at("y"))] {
        let err = i.rename_as(&a, &b, RenameHow::Exchange).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{a} {b}: {err}");
    }
    let (x, y) = (links(at("x")).await, links(at("y")).await);
    i.rename_as(&at("x/f"), &at("y/d"), RenameHow::Exchange)
        .await
        .unwrap();
    assert_eq!(
        id(at("x/f")).await,
        Some(d.id),
        "the directory took f's name"
    );
    assert_eq!(id(at("y/d")).await, Some(f.id), "the file took d's name");
    assert_eq!(
        id(at("x/f/inner")).await,
        Some(inner.id),
        "its tree with it"
    );
    assert_eq!(id(at("x/f/f-too")).await, Some(f.id));
    assert_eq!(id(at("y/d/inner")).await, None);
    assert_eq!(id(at("x/inner-too")).await, Some(inner.id));
    assert_eq!(
        (links(at("x")).await, links(at("y")).await),
        (x + 1, y - 1),
        "the subdirectory changed parents"
    );
    assert_eq!(links(at("y/d")).await, 2, "f keeps its two names");
    let mut names: Vec<_> = i
        .list(&at(""))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.path[at("").len()..].to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "x",
            "x/f",
            "x/f/f-too",
            "x/f/inner",
            "x/h",
            "x/inner-too",
            "y",
            "y/d"
        ]
    );
    // Two names of one file: nothing changes.
    i.rename_as(&at("y/d"), &at("x/f/f-too"), RenameHow::Exchange)
        .await
        .unwrap();
    assert_eq!(id(at("y/d")).await, Some(f.id));
    // And back, across the same parents: everything where it was.
    i.rename_as(&at("y/d"), &at("x/f"), RenameHow::Exchange)
        .await
        .unwrap();
    assert_eq!(id(at("x/f")).await, Some(f.id));
    assert_eq!(id(at("y/d/inner")).await, Some(inner.id));
    assert_eq!((links(at("x")).await, links(at("y")).await), (x, y));
}

/// FIFOs, devices and sockets are entries of their kind that hold no data
/// and no children.
async fn special_cases(i: &dyn Inventory, root: &str) {
    for kind in [
        FileKind::Fifo,
        FileKind::CharDevice,
        FileKind::BlockDevice,
        FileKind::Socket,
    ] {
        let path = format!("{root}/special-{}", kind.word().replace(' ', "-"));
        let m = i.create(&path, kind, 0o640, Owner::root(7)).await.unwrap();
        assert_eq!((m.kind, m.mode, m.size), (kind, 0o640, 0));
        assert_eq!(i.lookup(&path).await.unwrap().unwrap().kind, kind);
        let again = i.create(&path, FileKind::File, 0o644, Owner::root(7)).await;
        assert!(matches!(again, Err(Error::AlreadyExists(_))), "{again:?}");
        for err in [
            i.set_size(m.id, 5).await.unwrap_err(),
            i.commit_extent(m.id, ext(0, 3, 1, labels(1)[0].id))
                .await
                .unwrap_err(),
            i.reserve_append(m.id, 3).await.unwrap_err(),
        ] {
            assert!(err.to_string().contains("holds no data"), "{kind:?}: {err}");
        }
        let err = i
            .create(&format!("{path}/x"), FileKind::File, 0o644, Owner::root(7))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(kind.word()), "{kind:?}: {err}");
        i.rename(&path, &format!("{path}.moved")).await.unwrap();
        let (gone, extents) = i.remove(&format!("{path}.moved")).await.unwrap();
        assert_eq!((gone.kind, gone.nlink, extents.len()), (kind, 0, 0));
    }
}

/// Owners, modes and times: kept as given, changed by `set_attr` with
/// POSIX's side effects, and a directory's times follow its entries.
async fn attribute_cases(i: &dyn Inventory, root: &str) {
    let user = Owner {
        app: 7,
        uid: 1000,
        gid: 100,
    };
    let dir = format!("{root}/attrs");
    let d = i.create(&dir, FileKind::Dir, 0o2750, user).await.unwrap();
    assert_eq!((d.uid, d.gid, d.mode), (1000, 100, 0o2750));
    let path = format!("{dir}/f");
    let before = now_nanos();
    let f = i.create(&path, FileKind::File, 0o6755, user).await.unwrap();
    assert_eq!((f.uid, f.gid, f.mode, f.owner), (1000, 100, 0o6755, 7));
    let d = i.lookup(&dir).await.unwrap().unwrap();
    assert!(
        d.mtime >= before && d.ctime >= before,
        "create sets the directory's times"
    );
    assert_eq!(i.lookup(&path).await.unwrap().unwrap().uid, 1000);
    let nested = format!("{dir}/made/by/create");
    let n = i
        .create(&nested, FileKind::File, 0o600, user)
        .await
        .unwrap();
    let parent = i.lookup(&format!("{dir}/made")).await.unwrap().unwrap();
    assert_eq!((n.uid, parent.uid, parent.gid), (1000, 1000, 100));

    // A change of owner drops set-user-ID, and set-group-ID as group
    // execution is on; ctime moves, mtime stays.
    let chown = SetAttr {
        uid: Some(2000),
        gid: Some(200),
        ..SetAttr::default()
    };
    let m = i.set_attr(f.id, chown).await.unwrap();
    assert_eq!((m.uid, m.gid, m.mode), (2000, 200, 0o755));
    assert_eq!(m.mtime, f.mtime);
    assert!(m.ctime >= f.ctime);
    assert_eq!(i.file(f.id).await.unwrap().unwrap(), m);
    // Set-group-ID without group execution (mandatory locking) stays.
    let m = i
        .set_attr(
            f.id,
            SetAttr {
                mode: Some(0o2644),
                ..SetAttr::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(m.mode, 0o2644);
    let m = i.set_attr(f.id, chown).await.unwrap();
    assert_eq!(m.mode, 0o2644);
    // A mode given with the owner is taken as is.
    let m = i
        .set_attr(
            f.id,
            SetAttr {
                mode: Some(0o4711),
                uid: Some(3000),
                ..SetAttr::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((m.mode, m.uid, m.gid), (0o4711, 3000, 200));
    // A directory keeps its bits through a change of owner.
    let m = i.set_attr(d.id, chown).await.unwrap();
    assert_eq!(m.mode, 0o2750);

    let times = SetAttr {
        atime: Some(SetTime::At(1_000_000_007)),
        mtime: Some(SetTime::At(2_000_000_009)),
        ..SetAttr::default()
    };
    let m = i.set_attr(f.id, times).await.unwrap();
    assert_eq!((m.atime, m.mtime), (1_000_000_007, 2_000_000_009));
    let before = now_nanos();
    let m = i
        .set_attr(
            f.id,
            SetAttr {
                mtime: Some(SetTime::Now),
                ..SetAttr::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(m.atime, 1_000_000_007);
    assert!(m.mtime >= before && m.ctime >= before);

    let bad = SetAttr {
        mode: Some(0o10644),
        ..SetAttr::default()
    };
    let err = i.set_attr(f.id, bad).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(i.file(f.id).await.unwrap().unwrap().mode, 0o4711);
    let err = i.set_attr(u64::MAX - 3, times).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");

    // Writes and truncation set mtime and ctime.
    let m = i.set_attr(f.id, times).await.unwrap();
    i.set_size(f.id, 5).await.unwrap();
    let t = i.file(f.id).await.unwrap().unwrap();
    assert!(t.mtime > m.mtime && t.ctime >= m.ctime);
    let m = i.set_attr(f.id, times).await.unwrap();
    i.commit_extent(f.id, ext(0, 3, 1, labels(1)[0].id))
        .await
        .unwrap();
    let t = i.file(f.id).await.unwrap().unwrap();
    assert!(t.mtime > m.mtime && t.ctime >= m.ctime);

    // Remove, link and rename set the times of the directories involved.
    let other = format!("{root}/attrs2");
    i.create(&other, FileKind::Dir, 0o755, user).await.unwrap();
    let old = SetAttr {
        mtime: Some(SetTime::At(5)),
        ..SetAttr::default()
    };
    let touched = |path: String| async move {
        let m = i.lookup(&path).await.unwrap().unwrap();
        m.mtime > 5 && m.ctime == m.mtime
    };
    for (what, step) in [("link", 0), ("rename", 1), ("remove", 2)] {
        let d = i.lookup(&dir).await.unwrap().unwrap();
        let o = i.lookup(&other).await.unwrap().unwrap();
        i.set_attr(d.id, old).await.unwrap();
        i.set_attr(o.id, old).await.unwrap();
        match step {
            0 => drop(i.link(&path, &format!("{other}/l")).await.unwrap()),
            1 => drop(
                i.rename(&format!("{other}/l"), &format!("{dir}/l"))
                    .await
                    .unwrap(),
            ),
            _ => drop(i.remove(&format!("{dir}/l")).await.unwrap()),
        }
        assert!(touched(dir.clone()).await == (step != 0), "{what}: {dir}");
        assert!(
            touched(other.clone()).await == (step != 2),
            "{what}: {other}"
        );
    }
}

/// Appends of many tasks at once get disjoint ranges that tile the file;
/// bad appends change nothing.
async fn append_cases(i: &dyn Inventory, root: &str) {
    let f = i
        .create(
            &format!("{root}/log"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap();
    assert_eq!(i.reserve_append(f.id, 10).await.unwrap(), 0);
    let lens: Vec<u64> = (1..=64).collect();
    let mut offsets: Vec<(u64, u64)> =
        futures::future::join_all(lens.iter().map(|&len| i.reserve_append(f.id, len)))
            .await
            .into_iter()
            .zip(lens.iter().copied())
            .map(|(o, len)| (o.unwrap(), len))
            .collect();
    offsets.sort();
    let mut end = 10;
    for (offset, len) in offsets {
        assert_eq!(offset, end, "appends overlap or leave a gap");
        end += len;
    }
    assert_eq!(i.file(f.id).await.unwrap().unwrap().size, end);
    // Past the largest offset: refused, the size unchanged.
    let err = i.reserve_append(f.id, u64::MAX - 5).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(i.file(f.id).await.unwrap().unwrap().size, end);
    i.set_size(f.id, 3).await.unwrap();
    assert_eq!(i.reserve_append(f.id, 0).await.unwrap(), 3);
    let dir = i.lookup(root).await.unwrap().unwrap();
    let err = i.reserve_append(dir.id, 1).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    i.remove(&format!("{root}/log")).await.unwrap();
    let err = i.reserve_append(f.id, 1).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
}

async fn symlink_cases(i: &dyn Inventory, root: &str) {
    let path = format!("{root}/links/l");
    let l = i
        .symlink(&path, "../target/x", Owner::root(7))
        .await
        .unwrap();
    assert_eq!(
        (l.kind, l.size, l.mode, l.owner),
        (FileKind::Symlink, 11, 0o777, 7)
    );
    let parent = i.lookup(&format!("{root}/links")).await.unwrap().unwrap();
    assert_eq!(parent.kind, FileKind::Dir, "missing parents are made");
    assert_eq!(i.lookup(&path).await.unwrap().unwrap(), l);
    let target = vec![(LINK_TARGET.to_string(), Bytes::from_static(b"../target/x"))];
    assert_eq!(i.xattrs(l.id).await.unwrap(), target);
    // Whatever is at the path stays: another link, a file.
    let err = i.symlink(&path, "other", Owner::root(7)).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    let err = i
        .create(&path, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    // The inventory does not follow links: nothing is made under one.
    let err = i
        .create(&format!("{path}/f"), FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap_err();
    assert!(err.is_parent_not_dir(), "{err}");
    let bad = format!("{root}/links/bad");
    for target in ["", "a\0b", &"t".repeat(LINK_TARGET_MAX + 1)] {
        let err = i.symlink(&bad, target, Owner::root(7)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    assert!(
        i.lookup(&bad).await.unwrap().is_none(),
        "a refused link leaves nothing"
    );
    // A rename moves the link with its target; a file may replace it.
    let moved = format!("{root}/links/m");
    i.rename(&path, &moved).await.unwrap();
    let m = i.lookup(&moved).await.unwrap().unwrap();
    assert_eq!((m.id, m.kind), (l.id, FileKind::Symlink));
    assert_eq!(i.xattrs(m.id).await.unwrap(), target);
    let f = format!("{root}/links/f");
    i.create(&f, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    let (replaced, extents) = i.rename(&f, &moved).await.unwrap().unwrap();
    assert_eq!((replaced.id, extents.len()), (l.id, 0));
    assert_eq!(
        i.lookup(&moved).await.unwrap().unwrap().kind,
        FileKind::File
    );
    let n = i
        .symlink(&format!("{root}/links/n"), "/anywhere", Owner::root(7))
        .await
        .unwrap();
    let (removed, extents) = i.remove(&n.path).await.unwrap();
    assert_eq!((removed.id, extents.len()), (n.id, 0));
    assert!(i.lookup(&n.path).await.unwrap().is_none());
}

/// A hard link is another name of the same file: one id, size, extents
/// and attributes; the file goes with its last name.
/// A file held open outlives its last name (POSIX unlink of an open file),
/// by remove and by a rename over it, until its last holder lets go; a
/// file nobody holds goes with its last name. An inventory that keeps no
/// open files (`hold` says false) must still remove at once. One session
/// (a remote connection makes every session its own).
async fn open_file_cases(i: &dyn Inventory, root: &str) {
    let dir = format!("{root}/open");
    let (a, b) = (format!("{dir}/a"), format!("{dir}/b"));
    let s1 = now_nanos();
    let f = i
        .create(&a, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    let extent = ext(0, 10, 1, LabelIdGen::new(9).next());
    i.commit_extent(f.id, extent).await.unwrap();
    let missing = i.hold(u64::MAX - 3, s1).await;
    let keeps = i.hold(f.id, s1).await.unwrap();
    if keeps {
        assert!(
            matches!(missing, Err(Error::NotFound(_))),
            "hold of a missing file: {missing:?}"
        );
    }
    assert!(i.hold(f.id, s1).await.unwrap() == keeps, "held twice");
    let (gone, _) = i.remove(&a).await.unwrap();
    assert_eq!(gone.nlink, 0, "the name was its last");
    assert!(i.lookup(&a).await.unwrap().is_none());
    if !keeps {
        assert!(i.file(f.id).await.unwrap().is_none());
        return;
    }
    let kept = i.file(f.id).await.unwrap().expect("held open: kept");
    assert_eq!((kept.nlink, kept.size), (0, 10));
    assert!(!i
        .list(&format!("{dir}/"))
        .await
        .unwrap()
        .iter()
        .any(|m| m.id == f.id));
    // Still written and read by id.
    let more = ext(10, 5, 1, LabelIdGen::new(9).next());
    i.commit_extent(f.id, more).await.unwrap();
    assert_eq!(i.extents(f.id, 0, 100).await.unwrap(), vec![extent, more]);
    // A new file at the path is another file.
    let g = i
        .create(&a, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    assert_ne!(g.id, f.id);
    let dropped = i.let_go(f.id, s1).await.unwrap().expect("once per session");
    assert_eq!((dropped.id, dropped.nlink), (f.id, 0));
    assert!(i.file(f.id).await.unwrap().is_none());
    assert!(i.let_go(f.id, s1).await.unwrap().is_none(), "already gone");
    assert_eq!(i.lookup(&a).await.unwrap().unwrap().id, g.id, "untouched");

    // A rename over a held file keeps it; the session's end lets it go.
    let h = i
        .create(&b, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    i.hold(h.id, s1).await.unwrap();
    i.hold(g.id, s1).await.unwrap();
    i.rename(&a, &b).await.unwrap();
    assert_eq!(i.file(h.id).await.unwrap().unwrap().nlink, 0);
    assert_eq!(i.lookup(&b).await.unwrap().unwrap().id, g.id);
    let gone: Vec<FileId> = i
        .let_go_session(s1)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(gone, vec![h.id], "g keeps its name");
    assert!(i.file(h.id).await.unwrap().is_none());
    // A file held and let go with its names intact stays.
    assert_eq!(i.file(g.id).await.unwrap().unwrap().nlink, 1);
    i.remove(&b).await.unwrap();
    assert!(i.file(g.id).await.unwrap().is_none(), "nobody holds it now");
}

async fn hard_link_cases(i: &dyn Inventory, root: &str) {
    let dir = format!("{root}/hard");
    let a = format!("{dir}/a");
    let f = i
        .create(&a, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    let extent = ext(0, 10, 1, LabelIdGen::new(9).next());
    i.commit_extent(f.id, extent).await.unwrap();
    i.set_xattr(f.id, "user.k", Some(Bytes::from_static(b"v")))
        .await
        .unwrap();
    let b = format!("{dir}/sub/b");
    let linked = i.link(&a, &b).await.unwrap();
    assert_eq!(
        (linked.id, linked.path.as_str(), linked.nlink, linked.size),
        (f.id, b.as_str(), 2, 10)
    );
    let at_a = i.lookup(&a).await.unwrap().unwrap();
    assert_eq!((at_a.path.as_str(), at_a.nlink), (a.as_str(), 2));
    assert_eq!(i.file(f.id).await.unwrap().unwrap().path, a, "first name");
    let listed: Vec<(String, FileId, u32)> = i
        .list(&format!("{dir}/"))
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.kind == FileKind::File)
        .map(|m| (m.path, m.id, m.nlink))
        .collect();
    assert_eq!(listed, vec![(a.clone(), f.id, 2), (b.clone(), f.id, 2)]);
    // Refused: an existing name, a missing source, a directory.
    let err = i.link(&a, &b).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    let err = i.link(&format!("{dir}/none"), &format!("{dir}/x")).await;
    assert!(matches!(err, Err(Error::NotFound(_))), "{err:?}");
    let err = i.link(&dir, &format!("{root}/dirlink")).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("no hard link to a directory")),
        "{err}"
    );
    assert!(i
        .lookup(&format!("{root}/dirlink"))
        .await
        .unwrap()
        .is_none());
    // Renaming one name onto another of the same file changes nothing.
    assert!(i.rename(&a, &b).await.unwrap().is_none());
    assert_eq!(i.lookup(&a).await.unwrap().unwrap().nlink, 2);
    assert_eq!(i.lookup(&b).await.unwrap().unwrap().nlink, 2);
    // A moved directory carries the names in it; the others stay.
    let d = format!("{dir}/sub/d");
    assert_eq!(i.link(&a, &d).await.unwrap().nlink, 3);
    let moved = format!("{dir}/moved");
    i.rename(&format!("{dir}/sub"), &moved).await.unwrap();
    let (b, d) = (format!("{moved}/b"), format!("{moved}/d"));
    for name in [&a, &b, &d] {
        let m = i.lookup(name).await.unwrap().unwrap();
        assert_eq!((m.id, m.nlink, &m.path), (f.id, 3, name), "{name}");
    }
    // Removing the first name keeps the file, its data and attributes.
    let (gone, extents) = i.remove(&a).await.unwrap();
    assert_eq!((gone.id, gone.nlink, extents.len()), (f.id, 2, 0));
    assert!(i.lookup(&a).await.unwrap().is_none());
    let kept = i.file(f.id).await.unwrap().unwrap();
    assert!(
        kept.path == b || kept.path == d,
        "first name now {}",
        kept.path
    );
    assert_eq!(i.extents(f.id, 0, 10).await.unwrap(), vec![extent]);
    assert_eq!(i.xattrs(f.id).await.unwrap().len(), 1);
    // A file renamed over one name replaces that name only.
    let g = format!("{dir}/g");
    let other = i
        .create(&g, FileKind::File, 0o644, Owner::root(7))
        .await
        .unwrap();
    assert!(
        i.rename(&g, &b).await.unwrap().is_none(),
        "the file lives on"
    );
    assert_eq!(i.lookup(&b).await.unwrap().unwrap().id, other.id);
    assert_eq!(i.lookup(&d).await.unwrap().unwrap().nlink, 1);
    // The last name takes the file, with its extents to reclaim.
    let (gone, extents) = i.remove(&d).await.unwrap();
    assert_eq!((gone.id, gone.nlink, extents), (f.id, 0, vec![extent]));
    assert!(i.file(f.id).await.unwrap().is_none());
    // A symbolic link can have names too.
    let l = format!("{dir}/l");
    let link = i.symlink(&l, "/t", Owner::root(7)).await.unwrap();
    let l2 = i.link(&l, &format!("{dir}/l2")).await.unwrap();
    assert_eq!((l2.id, l2.kind, l2.nlink), (link.id, FileKind::Symlink, 2));
}

/// Final statuses nobody waits for disappear some time after
/// `reclaim_after`, while the inventory keeps being updated.
pub async fn inventory_reclaim_suite(i: Arc<dyn Inventory>, reclaim_after: Duration) {
    let g = LabelIdGen::new(i.next_id("origin").await.unwrap());
    let base = i.label_count().await.unwrap();
    for _ in 0..3000 {
        i.set_status(LabelStatus::new(g.next(), LabelState::Complete))
            .await
            .unwrap();
    }
    assert!(i.label_count().await.unwrap() >= base + 3000);
    tokio::time::sleep(reclaim_after + Duration::from_millis(50)).await;
    let fresh: Vec<LabelId> = (0..3000).map(|_| g.next()).collect();
    for id in &fresh {
        i.set_status(LabelStatus::new(*id, LabelState::Complete))
            .await
            .unwrap();
    }
    let count = i.label_count().await.unwrap();
    assert!(count < base + 6000, "expired statuses reclaimed ({count})");
    i.wait(&fresh, Duration::from_secs(5)).await.unwrap();
}

fn attrs(pairs: &[(&str, &[u8])]) -> Vec<(String, Bytes)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), Bytes::copy_from_slice(v)))
        .collect()
}

/// A new file starts with the hints (`user.labios.*`) of the nearest
/// directory above it that has any, and only those; directories, and
/// files made before a hint, do not change.
async fn inherited_hints(i: &dyn Inventory, root: &str) {
    let make = |path: String, kind| async move {
        i.create(&path, kind, 0o755, Owner::root(7)).await.unwrap()
    };
    let before = make(format!("{root}/h/before"), FileKind::File).await;
    let h = i.lookup(&format!("{root}/h")).await.unwrap().unwrap();
    let tier = ("user.labios.tier", &b"hdd"[..]);
    i.set_xattr(h.id, tier.0, Some(Bytes::from_static(tier.1)))
        .await
        .unwrap();
    i.set_xattr(h.id, "user.color", Some(Bytes::from_static(b"red")))
        .await
        .unwrap();
    let deep = make(format!("{root}/h/a/b/f"), FileKind::File).await;
    assert_eq!(i.xattrs(deep.id).await.unwrap(), attrs(&[tier]));
    let made_dir = i.lookup(&format!("{root}/h/a")).await.unwrap().unwrap();
    let sub = make(format!("{root}/h/sub"), FileKind::Dir).await;
    for id in [before.id, made_dir.id, sub.id] {
        assert!(i.xattrs(id).await.unwrap().is_empty(), "file id {id}");
    }
    // The nearest hinted directory's alone, not merged with those above.
    let copies = ("user.labios.replicas", &b"2"[..]);
    i.set_xattr(sub.id, copies.0, Some(Bytes::from_static(copies.1)))
        .await
        .unwrap();
    let g = make(format!("{root}/h/sub/g"), FileKind::File).await;
    assert_eq!(i.xattrs(g.id).await.unwrap(), attrs(&[copies]));
    // Creating what exists changes nothing; a file keeps its own hints
    // when its directory's change.
    make(format!("{root}/h/before"), FileKind::File).await;
    assert!(i.xattrs(before.id).await.unwrap().is_empty());
    i.set_xattr(h.id, tier.0, None).await.unwrap();
    assert_eq!(i.xattrs(deep.id).await.unwrap(), attrs(&[tier]));
    // The root's, where no directory below it has any.
    let top = i.lookup("/").await.unwrap().unwrap();
    i.set_xattr(top.id, tier.0, Some(Bytes::from_static(b"ssd")))
        .await
        .unwrap();
    let under_root = make(format!("{root}/h/a/under-root"), FileKind::File).await;
    i.set_xattr(top.id, tier.0, None).await.unwrap();
    assert_eq!(
        i.xattrs(under_root.id).await.unwrap(),
        attrs(&[(tier.0, b"ssd")])
    );
}

/// Changes of extended attributes under a condition (`XATTR_CREATE`,
/// `XATTR_REPLACE`, removal, hints only while the file is empty): each
/// is refused with the error the POSIX faces map, and a refused change
/// changes nothing. `dir` is a directory's id.
async fn xattr_conditions(i: &dyn Inventory, root: &str, dir: FileId) {
    let f = i
        .create(
            &format!("{root}/x/c"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap();
    let v = |b: &'static [u8]| Some(Bytes::from_static(b));
    let when = |presence, while_empty| XattrCond {
        presence,
        while_empty,
    };
    let set = |name: &'static str, value, cond| i.set_xattr_if(f.id, name, value, cond);
    set("user.a", v(b"1"), when(Presence::Absent, false))
        .await
        .unwrap();
    let err = set("user.a", v(b"2"), when(Presence::Absent, false))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    assert_eq!(i.xattrs(f.id).await.unwrap(), attrs(&[("user.a", b"1")]));
    // Both flags: what no attribute satisfies, refused either way.
    for (name, exists) in [("user.a", true), ("user.none", false)] {
        let err = set(name, v(b"b"), when(Presence::Both, false))
            .await
            .unwrap_err();
        let errno_like = match &err {
            Error::AlreadyExists(_) => true,
            Error::NotFound(m) if m.ends_with(NO_ATTRIBUTE) => false,
            _ => panic!("{name}: {err}"),
        };
        assert_eq!(errno_like, exists, "{name}: {err}");
    }
    assert_eq!(i.xattrs(f.id).await.unwrap(), attrs(&[("user.a", b"1")]));
    for (value, removal) in [(v(b"3"), false), (None, true)] {
        let err = set("user.none", value, when(Presence::Present, false))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::NotFound(m) if m.ends_with(NO_ATTRIBUTE)),
            "removal {removal}: {err}"
        );
    }
    // Unconditioned, the removal of an absent attribute is no error.
    set("user.none", None, XattrCond::default()).await.unwrap();
    // A bad name is refused as such, whatever the condition.
    let err = set("", v(b"1"), when(Presence::Present, false))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    set("user.a", v(b"4"), when(Presence::Present, true))
        .await
        .unwrap();
    assert_eq!(i.xattrs(f.id).await.unwrap(), attrs(&[("user.a", b"4")]));

    // Once the file holds bytes, a change that needs it empty is refused
    // as a hint is, and others go on.
    i.set_size(f.id, 5).await.unwrap();
    for value in [v(b"5"), None] {
        let err = set("user.a", value, when(Presence::Any, true))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.ends_with(labios_label::hints::REFUSED)),
            "{err}"
        );
        assert!(err.to_string().contains("holds 5 bytes"), "{err}");
    }
    assert_eq!(i.xattrs(f.id).await.unwrap(), attrs(&[("user.a", b"4")]));
    set("user.a", None, when(Presence::Present, false))
        .await
        .unwrap();
    assert!(i.xattrs(f.id).await.unwrap().is_empty());
    // A directory holds no bytes.
    i.set_xattr_if(dir, "user.e", v(b"d"), when(Presence::Absent, true))
        .await
        .unwrap();
    i.set_xattr(dir, "user.e", None).await.unwrap();
    i.remove(&format!("{root}/x/c")).await.unwrap();
}

/// Extended attributes: set, replace, remove, limits, and their fate when
/// the file is renamed, replaced or removed. Uses paths under `root`.
async fn xattr_cases(i: &dyn Inventory, root: &str) {
    let f = i
        .create(
            &format!("{root}/x/f"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap();
    assert!(i.xattrs(f.id).await.unwrap().is_empty());
    let before = i.file(f.id).await.unwrap().unwrap();
    i.set_xattr(f.id, "user.b", Some(Bytes::from_static(b"2")))
        .await
        .unwrap();
    i.set_xattr(f.id, "etag", Some(Bytes::from_static(b"\"abc\"")))
        .await
        .unwrap();
    i.set_xattr(f.id, "user.a", Some(Bytes::from_static(b"\0\xffbin")))
        .await
        .unwrap();
    assert_eq!(
        i.xattrs(f.id).await.unwrap(),
        attrs(&[
            ("etag", b"\"abc\""),
            ("user.a", b"\0\xffbin"),
            ("user.b", b"2")
        ]),
        "sorted by name, values binary-safe"
    );
    let after = i.file(f.id).await.unwrap().unwrap();
    assert_eq!((after.size, after.mtime), (before.size, before.mtime));
    assert!(after.ctime >= before.ctime, "ctime moves forward");
    i.set_xattr(f.id, "user.b", Some(Bytes::from_static(b"replaced")))
        .await
        .unwrap();
    i.set_xattr(f.id, "etag", None).await.unwrap();
    i.set_xattr(f.id, "never-set", None).await.unwrap();
    let kept = attrs(&[("user.a", b"\0\xffbin"), ("user.b", b"replaced")]);
    assert_eq!(i.xattrs(f.id).await.unwrap(), kept);
    // Many files' attributes in one call, in the order asked; a missing
    // file is None, not an error; over the bound is refused.
    let bare = i
        .create(
            &format!("{root}/x/bare"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap();
    let missing = f.id.max(bare.id) + 1_000_000;
    assert_eq!(
        i.xattrs_of(&[f.id, missing, bare.id, f.id]).await.unwrap(),
        vec![
            Some(kept.clone()),
            None,
            Some(Vec::new()),
            Some(kept.clone())
        ]
    );
    let most = vec![bare.id; XATTRS_BATCH_MAX];
    assert_eq!(i.xattrs_of(&most).await.unwrap().len(), XATTRS_BATCH_MAX);
    let err = i
        .xattrs_of(&vec![bare.id; XATTRS_BATCH_MAX + 1])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("more than 1000")),
        "{err}"
    );
    i.remove(&format!("{root}/x/bare")).await.unwrap();

    // Limits: refused with the reason, nothing changed.
    let long = "n".repeat(XATTR_NAME_MAX + 1);
    let max_name = "m".repeat(XATTR_NAME_MAX);
    let big = Bytes::from(vec![1u8; XATTR_VALUE_MAX + 1]);
    let refused: [(&str, Option<Bytes>, &str); 5] = [
        ("", Some(Bytes::new()), "empty"),
        (&long, Some(Bytes::new()), "bytes, more than"),
        ("a\0b", None, "NUL"),
        ("user.big", Some(big), "bytes, more than"),
        // Fits alone, not with the attributes already there.
        (
            "user.c",
            Some(Bytes::from(vec![2u8; XATTR_TOTAL_MAX - 6])),
            "would take",
        ),
    ];
    for (name, value, why) in refused {
        let err = i.set_xattr(f.id, name, value).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
    assert_eq!(
        i.xattrs(f.id).await.unwrap(),
        kept,
        "refusals change nothing"
    );
    // Exactly the total limit fits; replacing an attribute counts its new
    // value only.
    let used: usize = kept.iter().map(|(n, v)| n.len() + v.len()).sum();
    let fill = XATTR_TOTAL_MAX - used - max_name.len();
    i.set_xattr(f.id, &max_name, Some(Bytes::from(vec![3u8; fill])))
        .await
        .unwrap();
    let err = i
        .set_xattr(f.id, "z", Some(Bytes::new()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("would take"), "{err}");
    i.set_xattr(f.id, "user.b", Some(Bytes::from_static(b"12345678")))
        .await
        .unwrap();
    i.set_xattr(f.id, &max_name, None).await.unwrap();
    i.set_xattr(f.id, "user.b", Some(Bytes::from_static(b"replaced")))
        .await
        .unwrap();
    assert_eq!(i.xattrs(f.id).await.unwrap(), kept);

    // Missing files.
    let gone = u64::MAX - 3;
    for err in [
        i.set_xattr(gone, "user.a", Some(Bytes::new()))
            .await
            .unwrap_err(),
        i.set_xattr(gone, "user.a", None).await.unwrap_err(),
        i.xattrs(gone).await.unwrap_err(),
    ] {
        assert!(matches!(err, Error::NotFound(_)), "{err}");
        assert!(err.to_string().contains(&gone.to_string()), "{err}");
    }

    // Directories carry them too.
    let dir = i.lookup(&format!("{root}/x")).await.unwrap().unwrap();
    i.set_xattr(dir.id, "user.d", Some(Bytes::from_static(b"dir")))
        .await
        .unwrap();
    assert_eq!(
        i.xattrs(dir.id).await.unwrap(),
        attrs(&[("user.d", b"dir")])
    );

    xattr_conditions(i, root, dir.id).await;
    inherited_hints(i, root).await;

    // A moved file keeps them (renaming its directory too); a replaced one
    // loses them, and so does a removed one.
    let moved = format!("{root}/y/f");
    i.rename(&format!("{root}/x/f"), &moved).await.unwrap();
    assert_eq!(i.xattrs(f.id).await.unwrap(), kept);
    i.rename(&format!("{root}/y"), &format!("{root}/w"))
        .await
        .unwrap();
    assert_eq!(i.xattrs(f.id).await.unwrap(), kept);
    let moved = format!("{root}/w/f");
    let g = i
        .create(
            &format!("{root}/x/g"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap();
    i.set_xattr(g.id, "user.g", Some(Bytes::from_static(b"g")))
        .await
        .unwrap();
    let (replaced, _) = i
        .rename(&moved, &format!("{root}/x/g"))
        .await
        .unwrap()
        .expect("g replaced");
    assert_eq!(replaced.id, g.id);
    let err = i.xattrs(g.id).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    let err = i.set_xattr(g.id, "user.g", None).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    assert_eq!(i.xattrs(f.id).await.unwrap(), kept);
    i.remove(&format!("{root}/x/g")).await.unwrap();
    let err = i.xattrs(f.id).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    let err = i
        .set_xattr(f.id, "user.a", Some(Bytes::new()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    // A new file at the same path starts without any.
    let h = i
        .create(
            &format!("{root}/x/g"),
            FileKind::File,
            0o644,
            Owner::root(7),
        )
        .await
        .unwrap();
    assert_ne!(h.id, f.id);
    assert!(i.xattrs(h.id).await.unwrap().is_empty());
    i.remove(&format!("{root}/x/g")).await.unwrap();
    i.remove(&format!("{root}/w")).await.unwrap();
    i.remove(&format!("{root}/x")).await.unwrap();
    let err = i.xattrs(dir.id).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
}

/// File locks between two clients `a` and `b` (separate sessions: two
/// connections, or two handles of one table with the sessions `sa` and
/// `sb`): conflicts, shared reads, F_GETLK, splits, flock apart from fcntl,
/// release by owner and file, deadlock refused, and `b`'s session ended by
/// `end_b`, which must free what it held.
pub async fn locks_suite<F>(
    a: Arc<dyn crate::locks::Locks>,
    (sa, sb): (u64, u64),
    b: Arc<dyn crate::locks::Locks>,
    end_b: F,
) where
    F: std::future::Future<Output = ()>,
{
    use crate::locks::{Holder, LockKind, LockRequest, LockSpace, TO_EOF};
    let file = now_nanos();
    let req =
        |session: u64, owner: u64, kind: Option<LockKind>, start: u64, end: u64| LockRequest {
            file,
            space: LockSpace::Record,
            holder: Holder { session, owner },
            pid: owner as u32,
            kind,
            start,
            end,
            waiting: false,
        };
    let (r, w) = (Some(LockKind::Read), Some(LockKind::Write));
    let busy = |e: Result<(), Error>| matches!(e, Err(Error::Locked(_)));

    a.lock(&req(sa, 1, w, 0, 99)).await.unwrap();
    assert!(
        busy(b.lock(&req(sb, 2, w, 50, 59)).await),
        "overlap refused"
    );
    b.lock(&req(sb, 2, w, 100, 199)).await.unwrap();
    let held = b
        .conflict(&req(sb, 2, w, 0, TO_EOF))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((held.start, held.end, held.pid), (0, 99, 1));
    assert_eq!(held.kind, LockKind::Write);
    // Another owner of the same session conflicts too (OFD locks).
    assert!(busy(a.lock(&req(sa, 9, w, 10, 10)).await));
    // Downgrade, then shared reads.
    a.lock(&req(sa, 1, r, 0, 99)).await.unwrap();
    b.lock(&req(sb, 2, r, 10, 19)).await.unwrap();
    assert!(busy(b.lock(&req(sb, 2, w, 10, 19)).await));
    // Unlocking the middle splits the lock in two.
    a.lock(&req(sa, 1, None, 40, 59)).await.unwrap();
    b.lock(&req(sb, 2, w, 45, 54)).await.unwrap();
    let held = b
        .conflict(&req(sb, 2, w, 60, TO_EOF))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((held.start, held.end), (60, 99));
    // flock and fcntl do not see each other.
    let flock = LockRequest {
        space: LockSpace::Flock,
        ..req(sb, 2, w, 0, TO_EOF)
    };
    b.lock(&flock).await.unwrap();
    assert!(busy(
        a.lock(&LockRequest {
            space: LockSpace::Flock,
            ..req(sa, 1, r, 0, TO_EOF)
        })
        .await
    ));
    // Release of one owner on one file.
    a.release(sa, Some(1), Some(file)).await.unwrap();
    assert!(b.conflict(&req(sb, 2, w, 0, 99)).await.unwrap().is_none());
    // A wait that closes a cycle: b waits for a, then a for b.
    a.lock(&req(sa, 1, w, 500, 509)).await.unwrap();
    let waits = LockRequest {
        waiting: true,
        ..req(sb, 2, w, 500, 509)
    };
    assert!(busy(b.lock(&waits).await), "b waits");
    let cycle = LockRequest {
        waiting: true,
        ..req(sa, 1, w, 100, 109)
    };
    match a.lock(&cycle).await {
        Err(Error::Locked(m)) => assert!(m.ends_with(crate::locks::DEADLOCK), "{m}"),
        other => panic!("deadlock expected, got {other:?}"),
    }
    // A bad range is refused.
    assert!(matches!(
        a.lock(&req(sa, 1, w, 10, 5)).await,
        Err(Error::InvalidArgument(_))
    ));
    // b's end frees its locks (and its wait), at once or when noticed
    // (a lease running out).
    drop(b);
    end_b.await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let flock_a = LockRequest {
        space: LockSpace::Flock,
        ..req(sa, 1, w, 0, TO_EOF)
    };
    loop {
        match a.lock(&req(sa, 1, w, 0, TO_EOF)).await {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                assert!(busy(Err(e)));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the locks of an ended session stay: {e}"),
        }
    }
    a.lock(&flock_a).await.unwrap();
    a.release(sa, None, None).await.unwrap();
}
