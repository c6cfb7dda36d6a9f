//! Extended attributes through the client: by path, owner-checked for
//! files, only the user's names, refused for external paths. Only the inventory is involved, so
//! no worker runs.

use bytes::Bytes;
use labios_client::{Client, ClientConfig};
use labios_label::Error;
use labios_store::embedded::{MemoryQueue, MemoryWarehouse, RedbInventory};
use labios_store::Stores;
use std::sync::Arc;
use std::time::Duration;

fn stores() -> Stores {
    let t = Duration::from_millis(100);
    Stores {
        labels: Arc::new(MemoryQueue::new(64, t)),
        tasks: Arc::new(MemoryQueue::new(64, t)),
        warehouse: Arc::new(MemoryWarehouse::new(1 << 20, t)),
        inventory: Arc::new(RedbInventory::in_memory().unwrap()),
        locks: Arc::new(labios_store::locks::MemoryLocks::default()),
    }
}

#[tokio::test]
async fn xattrs_by_path() {
    let s = stores();
    let one = Client::new(s.clone(), 1, 1, ClientConfig::default()).unwrap();
    let two = Client::new(s, 2, 2, ClientConfig::default()).unwrap();
    one.create("/b/obj").await.unwrap();
    let v = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));

    one.set_xattr("/b/obj", "user.etag", v("\"1\""))
        .await
        .unwrap();
    one.set_xattr("b//obj", "user.content-type", v("text/plain"))
        .await
        .unwrap();
    let expect = vec![
        (
            "user.content-type".to_string(),
            Bytes::from_static(b"text/plain"),
        ),
        ("user.etag".to_string(), Bytes::from_static(b"\"1\"")),
    ];
    assert_eq!(one.xattrs("/b/obj").await.unwrap(), expect);
    assert_eq!(two.xattrs("/b/obj").await.unwrap(), expect, "readable");
    let err = two
        .set_xattr("/b/obj", "user.etag", None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
    one.set_xattr("/b/obj", "user.etag", None).await.unwrap();
    assert_eq!(one.xattrs("/b/obj").await.unwrap(), expect[..1]);

    // Only the user's names: others are refused, and the S3 gateway's own
    // (set_object_xattr) are not listed.
    let err = one.set_xattr("/b/obj", "etag", v("x")).await.unwrap_err();
    assert!(err.to_string().contains("only user. attributes"), "{err}");
    one.set_object_xattr("/b/obj", "s3.tagging", v("a=b"))
        .await
        .unwrap();
    assert_eq!(one.xattrs("/b/obj").await.unwrap(), expect[..1]);

    // Directories: any application.
    two.set_xattr("/b", "user.bucket", v("b")).await.unwrap();
    assert_eq!(one.xattrs("/b").await.unwrap().len(), 1);

    let err = one.xattrs("/b/none").await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    for err in [
        one.xattrs("ext:/x").await.unwrap_err(),
        one.set_xattr("ext:/x", "user.etag", None)
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("keeps its own metadata"), "{err}");
    }
}

/// `XATTR_CREATE` and `XATTR_REPLACE` are decided by the inventory with
/// the change: of racing creates of one attribute exactly one is stored,
/// the others get EEXIST, and a replace or removal of an attribute that
/// is not there gets ENODATA and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditioned_changes_are_decided_with_the_change() {
    use labios_client::errno_of;
    use labios_store::Presence;
    let client = Arc::new(Client::new(stores(), 1, 1, ClientConfig::default()).unwrap());
    client.create("/c/f").await.unwrap();
    let racers: Vec<_> = (0..16u8)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move {
                let value = Some(Bytes::from(vec![n]));
                client
                    .set_xattr_if("/c/f", "user.once", value, Presence::Absent)
                    .await
                    .map(|()| n)
            })
        })
        .collect();
    let mut won = Vec::new();
    for racer in racers {
        match racer.await.unwrap() {
            Ok(n) => won.push(n),
            Err(e) => assert_eq!(errno_of(&e), libc::EEXIST, "{e}"),
        }
    }
    assert_eq!(won.len(), 1, "creates stored: {won:?}");
    let stored = client.xattrs("/c/f").await.unwrap();
    assert_eq!(stored, vec![("user.once".into(), Bytes::from(won.clone()))]);

    let replaced = client
        .set_xattr_if("/c/f", "user.none", Some(Bytes::new()), Presence::Present)
        .await;
    let removed = client.remove_xattr("/c/f", "user.none").await;
    for err in [replaced.unwrap_err(), removed.unwrap_err()] {
        assert_eq!(errno_of(&err), libc::ENODATA, "{err}");
    }
    assert_eq!(client.xattrs("/c/f").await.unwrap(), stored);
    client.remove_xattr("/c/f", "user.once").await.unwrap();
    assert!(client.xattrs("/c/f").await.unwrap().is_empty());
}
