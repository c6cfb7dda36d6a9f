//! Placement hints acted on by the dispatcher (issue 16, README "Hints"):
//! the writes of a file go where its `user.labios.placement` says, set on
//! the file or inherited from its directory, in both deployments.

mod common;

use bytes::Bytes;
use common::data;
use common::deploy::{Deployed, Kind};
use labios_label::WorkerId;

both!(hinted_writes_go_where_the_hints_say);

/// The worker of each extent of `path`, in offset order, with the
/// extents' offsets.
async fn placed(d: &Deployed, path: &str, len: u64) -> Vec<(u64, WorkerId)> {
    let inventory = d.stores().inventory;
    let meta = inventory.lookup(path).await.unwrap().unwrap();
    let extents = inventory.extents(meta.id, 0, len).await.unwrap();
    assert_eq!(extents.iter().map(|e| e.len).sum::<u64>(), len, "{path}");
    extents.iter().map(|e| (e.offset, e.worker)).collect()
}

/// Labels of 64 KiB over the four default workers: the files of a
/// directory hinted `collocate:r1` are all on one worker, a file hinted
/// `scatter:2` with 256 KiB blocks has its stripes (four labels each)
/// alternate between two, and a `tier` keeps a file on workers of
/// that tier; every byte reads back.
async fn hinted_writes_go_where_the_hints_say(kind: Kind) {
    let d = Deployed::start(kind, |c| c.client.max_label_size = 64 << 10).await;
    let c = d.client().await;
    let hint = |v: &'static str| Some(Bytes::from_static(v.as_bytes()));
    c.mkdir("/reduce").await.unwrap();
    c.set_xattr("/reduce", "user.labios.placement", hint("collocate:r1"))
        .await
        .unwrap();
    let files: Vec<(String, Bytes)> = (0..4u64)
        .map(|i| (format!("/reduce/part-{i}"), data(i, 300_000)))
        .collect();
    for (path, bytes) in &files {
        c.write_at_sync(path.as_str(), 0, bytes.clone())
            .await
            .unwrap();
    }
    let mut holders = std::collections::BTreeSet::new();
    for (path, bytes) in &files {
        let extents = placed(&d, path, bytes.len() as u64).await;
        assert!(extents.len() >= 4, "{path}: {extents:?}");
        holders.extend(extents.iter().map(|(_, w)| *w));
    }
    assert_eq!(holders.len(), 1, "a group on one worker: {holders:?}");

    c.create("/wide").await.unwrap();
    c.set_xattr("/wide", "user.labios.placement", hint("scatter:2"))
        .await
        .unwrap();
    c.set_xattr("/wide", "user.labios.block_size", hint("256KiB"))
        .await
        .unwrap();
    let wide = data(9, 1 << 20);
    c.write_at_sync("/wide", 0, wide.clone()).await.unwrap();
    let extents = placed(&d, "/wide", wide.len() as u64).await;
    assert_eq!(extents.len(), 16, "{extents:?}");
    let (even, odd) = (extents[0].1, extents[4].1);
    assert_ne!(even, odd, "{extents:?}");
    for (i, (offset, worker)) in extents.iter().enumerate() {
        assert_eq!(*offset, (i as u64) << 16);
        let stripe = i / 4;
        let want = if stripe % 2 == 0 { even } else { odd };
        assert_eq!(*worker, want, "extent {i}, stripe {stripe}");
    }

    // Each extent's worker, tier and host, as the locate call and the
    // attribute user.labios.location give them.
    let config = d.config();
    // Each stripe's four extents on one worker are one run.
    let located = c.locate("/wide").await.unwrap();
    assert_eq!(located.len(), 4, "{located:?}");
    for (i, l) in located.iter().enumerate() {
        let worker = extents[i * 4].1;
        assert_eq!(
            (l.offset, l.len, l.worker),
            ((i as u64) << 18, 256 << 10, worker)
        );
        assert_eq!(l.tier, config.workers[worker as usize].tier);
        assert!(!l.host.is_empty(), "{l:?}");
    }
    let text = c.xattr("/wide", "user.labios.location").await.unwrap();
    assert_eq!(
        text.unwrap(),
        Bytes::from(labios_client::Location::lines(&located))
    );
    assert_eq!(
        c.xattr("/reduce", "user.labios.location").await.unwrap(),
        None
    );
    // A link is refused, not located as nothing.
    c.symlink("/wide", "/wide-link").await.unwrap();
    let err = c.locate("/wide-link").await.unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");

    // A tier: `COLD` is the pool's slow worker (hdd) alone; `HOT` with
    // `scatter:2` two of its fast ones.
    let tier_of = |w: WorkerId| config.workers[w as usize].tier.as_str();
    let mut tiered = Vec::new();
    for (path, hints) in [
        ("/cold", &[("tier", "COLD")][..]),
        ("/hot", &[("tier", "HOT"), ("placement", "scatter:2")][..]),
    ] {
        c.create(path).await.unwrap();
        for (name, value) in hints {
            let name = format!("user.labios.{name}");
            c.set_xattr(path, &name, hint(value)).await.unwrap();
        }
        let bytes = data(path.len() as u64, 3 << 20);
        c.write_at_sync(path, 0, bytes.clone()).await.unwrap();
        let on: std::collections::BTreeSet<&str> = placed(&d, path, bytes.len() as u64)
            .await
            .iter()
            .map(|(_, w)| tier_of(*w))
            .collect();
        tiered.push((path.to_string(), bytes, on));
    }
    assert_eq!(tiered[0].2, ["hdd"].into(), "COLD");
    assert_eq!(tiered[1].2.len(), 2, "HOT over two: {:?}", tiered[1].2);
    assert!(!tiered[1].2.contains("hdd"), "HOT: {:?}", tiered[1].2);

    let tiered = tiered.into_iter().map(|(p, b, _)| (p, b));
    for (path, bytes) in files
        .iter()
        .cloned()
        .chain([("/wide".to_string(), wide)])
        .chain(tiered)
    {
        assert_eq!(c.read(path.as_str()).await.unwrap(), bytes, "{path}");
    }
    d.shutdown().await;
}
