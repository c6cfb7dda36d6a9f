//! Objects over files: every mapping answers the object calls the same
//! way, keeps its objects across a restart, and the container mappings
//! give back the space of replaced and deleted objects.

use bytes::Bytes;
use labios_bridge::containers::{ContainerOptions, Containers};
use labios_bridge::{object_mapper, ObjectInfo, ObjectMapper, ObjectMapping};
use labios_label::Error;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const ALL: [ObjectMapping; 4] = [
    ObjectMapping::OneToOne,
    ObjectMapping::NToOne,
    ObjectMapping::NToM,
    ObjectMapping::HashedNToM,
];

/// Small containers, so that N-to-M rolls over; no background compactor
/// unless a test asks.
fn options() -> ContainerOptions {
    ContainerOptions {
        container_size: 100,
        containers: 4,
        compact_every: None,
        ..Default::default()
    }
}

fn open(mapping: ObjectMapping, dir: &Path) -> Arc<dyn ObjectMapper> {
    object_mapper(mapping, dir, &options()).unwrap()
}

fn keys(infos: &[ObjectInfo]) -> Vec<&str> {
    infos.iter().map(|i| i.key.as_str()).collect()
}

async fn object_semantics(name: &str, s: &dyn ObjectMapper) {
    s.put("a/1", Bytes::from_static(b"first")).await.unwrap();
    s.put("a/2", Bytes::from(vec![2u8; 70])).await.unwrap();
    s.put("b", Bytes::from_static(b"bee")).await.unwrap();
    assert_eq!(s.get("a/1", None).await.unwrap(), &b"first"[..], "{name}");
    assert_eq!(
        s.get("a/1", Some(1..3)).await.unwrap(),
        &b"ir"[..],
        "{name}"
    );
    assert_eq!(
        s.get("a/1", Some(3..99)).await.unwrap(),
        &b"st"[..],
        "{name}: range cut at the end"
    );
    assert!(
        s.get("a/1", Some(9..12)).await.unwrap().is_empty(),
        "{name}"
    );
    // Replacing is whole-object.
    s.put("a/1", Bytes::from_static(b"second!")).await.unwrap();
    assert_eq!(s.get("a/1", None).await.unwrap(), &b"second!"[..], "{name}");
    assert_eq!(s.head("a/1").await.unwrap().unwrap().size, 7, "{name}");
    assert_eq!(s.head("zzz").await.unwrap(), None, "{name}");
    assert_eq!(keys(&s.list("a/").await.unwrap()), ["a/1", "a/2"], "{name}");
    assert_eq!(
        keys(&s.list("").await.unwrap()),
        ["a/1", "a/2", "b"],
        "{name}"
    );
    assert_eq!(keys(&s.list("a/2").await.unwrap()), ["a/2"], "{name}");
    assert!(s.list("c").await.unwrap().is_empty(), "{name}");
    s.delete("b").await.unwrap();
    assert!(
        matches!(s.get("b", None).await, Err(Error::NotFound(_))),
        "{name}"
    );
    assert!(
        matches!(s.delete("b").await, Err(Error::NotFound(_))),
        "{name}"
    );
    assert!(s.put("", Bytes::new()).await.is_err(), "{name}: empty key");
    // An empty object is an object.
    s.put("empty", Bytes::new()).await.unwrap();
    assert_eq!(s.head("empty").await.unwrap().unwrap().size, 0, "{name}");
}

#[tokio::test]
async fn every_object_mapping_answers_alike_and_survives_a_restart() {
    for mapping in ALL {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("{mapping:?}");
        object_semantics(&name, open(mapping, dir.path()).as_ref()).await;
        // Another process (or the next run) opens the same directory.
        let s = open(mapping, dir.path());
        assert_eq!(
            keys(&s.list("").await.unwrap()),
            ["a/1", "a/2", "empty"],
            "{name}"
        );
        assert_eq!(s.get("a/1", None).await.unwrap(), &b"second!"[..], "{name}");
        assert_eq!(s.get("a/2", None).await.unwrap(), vec![2u8; 70], "{name}");
    }
}

#[tokio::test]
async fn one_to_one_objects_are_plain_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("old/set")).unwrap();
    std::fs::write(dir.path().join("old/set/x.csv"), "1,2\n").unwrap();
    let s = open(ObjectMapping::OneToOne, dir.path());
    // Files others wrote are objects at once, and objects are files.
    assert_eq!(s.get("old/set/x.csv", None).await.unwrap(), &b"1,2\n"[..]);
    s.put("new/y", Bytes::from_static(b"y")).await.unwrap();
    assert_eq!(std::fs::read(dir.path().join("new/y")).unwrap(), b"y");
    // Deleting the last object of a folder removes the folder.
    s.delete("new/y").await.unwrap();
    assert!(!dir.path().join("new").exists());
    for bad in ["../x", "/abs", "a//b", "a/./b", ".labios/x", "dir/"] {
        assert!(s.put(bad, Bytes::new()).await.is_err(), "{bad}");
    }
}

/// A put beside deletes that empty its folder: each delete of the folder's
/// last object removes the folder, and a put that made the folder before
/// the delete and renames into it after once failed (`No such file or
/// directory`, an HTTP 500 at the S3 gateway).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_survives_deletes_emptying_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(ObjectMapping::OneToOne, dir.path());
    let churn = {
        let s = s.clone();
        tokio::spawn(async move {
            for _ in 0..2000 {
                s.put("d/churn", Bytes::from_static(b"c")).await.unwrap();
                s.delete("d/churn").await.unwrap();
            }
        })
    };
    for i in 0..2000u32 {
        let key = format!("d/kept-{}", i % 2);
        s.put(&key, Bytes::from(i.to_le_bytes().to_vec()))
            .await
            .unwrap_or_else(|e| panic!("put {i} beside deletes: {e}"));
        s.delete(&key).await.unwrap();
    }
    churn.await.unwrap();
    assert!(!dir.path().join("d").exists());
}

#[tokio::test]
async fn containers_are_few_files() {
    let dir = tempfile::tempdir().unwrap();
    let n_to_one = open(ObjectMapping::NToOne, &dir.path().join("one"));
    let n_to_m = open(ObjectMapping::NToM, &dir.path().join("m"));
    let hashed = open(ObjectMapping::HashedNToM, &dir.path().join("h"));
    for i in 0..50 {
        let data = Bytes::from(vec![i as u8; 10]);
        for s in [&n_to_one, &n_to_m, &hashed] {
            s.put(&format!("k{i}"), data.clone()).await.unwrap();
        }
    }
    let count = |d: &str| {
        std::fs::read_dir(dir.path().join(d).join("containers"))
            .unwrap()
            .count()
    };
    assert_eq!(count("one"), 1);
    // 500 bytes in containers of 100.
    assert_eq!(count("m"), 5);
    assert_eq!(count("h"), 4);
    for s in [&n_to_one, &n_to_m, &hashed] {
        assert_eq!(s.get("k42", None).await.unwrap(), vec![42u8; 10]);
    }
}

#[test]
fn compaction_gives_back_space_and_keeps_data() {
    for mapping in [
        ObjectMapping::NToOne,
        ObjectMapping::NToM,
        ObjectMapping::HashedNToM,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let s = Containers::open(dir.path(), mapping, &options()).unwrap();
        rt.block_on(async {
            // 40 keys written 5 times over, then half of them deleted.
            for round in 0..5u8 {
                for i in 0..40 {
                    s.put(&format!("k{i}"), Bytes::from(vec![round; 20]))
                        .await
                        .unwrap();
                }
            }
            for i in (0..40).step_by(2) {
                s.delete(&format!("k{i}")).await.unwrap();
            }
        });
        let before = s.disk_usage();
        assert_eq!(before, 5 * 40 * 20, "{mapping:?}");
        let done = s.compact(0.0).unwrap();
        assert_eq!(
            s.disk_usage(),
            20 * 20,
            "{mapping:?}: only the live objects stay"
        );
        assert_eq!(done.reclaimed, before - 20 * 20, "{mapping:?}");
        let on_disk: u64 = std::fs::read_dir(dir.path().join("containers"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(on_disk, 20 * 20, "{mapping:?}");
        let check = |s: &Arc<Containers>| {
            rt.block_on(async {
                for i in 0..40 {
                    let got = s.get(&format!("k{i}"), None).await;
                    if i % 2 == 0 {
                        assert!(matches!(got, Err(Error::NotFound(_))), "{mapping:?} k{i}");
                    } else {
                        assert_eq!(got.unwrap(), vec![4u8; 20], "{mapping:?} k{i}");
                    }
                }
            })
        };
        check(&s);
        // Writes after a compaction go on, and all of it survives a restart.
        rt.block_on(s.put("after", Bytes::from_static(b"compaction")))
            .unwrap();
        drop(s);
        let s = Containers::open(dir.path(), mapping, &options()).unwrap();
        check(&s);
        assert_eq!(
            rt.block_on(s.get("after", None)).unwrap(),
            &b"compaction"[..]
        );
        // Nothing left to do.
        assert_eq!(s.compact(0.0).unwrap().reclaimed, 0);
    }
}

#[tokio::test]
async fn the_background_compactor_runs_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options();
    // Any dead byte is worth reclaiming here, so that the test can wait
    // for exactly the live bytes.
    o.compact_ratio = 0.0;
    let s = Containers::open(dir.path(), ObjectMapping::HashedNToM, &o).unwrap();
    s.spawn_compactor(Duration::from_millis(20));
    for round in 0..4u8 {
        for i in 0..20 {
            s.put(&format!("k{i}"), Bytes::from(vec![round; 50]))
                .await
                .unwrap();
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.disk_usage() > 20 * 50 {
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction: {} bytes",
            s.disk_usage()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..20 {
        assert_eq!(s.get(&format!("k{i}"), None).await.unwrap(), vec![3u8; 50]);
    }
}

#[tokio::test]
async fn a_put_torn_by_a_crash_is_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(ObjectMapping::NToM, dir.path());
    s.put("kept", Bytes::from_static(b"kept")).await.unwrap();
    drop(s);
    // A crash in the middle of an index line, and an interrupted
    // compaction's container that no line names.
    use std::io::Write;
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("index.log"))
        .unwrap();
    log.write_all(b"P 0 4 4 tor").unwrap();
    std::fs::write(dir.path().join("containers/99.dat"), b"orphan").unwrap();
    let s = open(ObjectMapping::NToM, dir.path());
    assert_eq!(keys(&s.list("").await.unwrap()), ["kept"]);
    assert!(!dir.path().join("containers/99.dat").exists());
    s.put("next", Bytes::from_static(b"next")).await.unwrap();
    drop(s);
    let s = open(ObjectMapping::NToM, dir.path());
    assert_eq!(keys(&s.list("").await.unwrap()), ["kept", "next"]);
    // A corrupt line in the middle is an error, not silent loss.
    std::fs::write(dir.path().join("index.log"), "garbage\nC 0 0\n").unwrap();
    let err = object_mapper(ObjectMapping::NToM, dir.path(), &options()).unwrap_err();
    assert!(matches!(err, Error::Malformed(_)), "{err}");
}

#[test]
fn bad_container_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options();
    o.container_size = 0;
    assert!(Containers::open(dir.path(), ObjectMapping::NToM, &o).is_err());
    let mut o = options();
    o.containers = 0;
    assert!(Containers::open(dir.path(), ObjectMapping::HashedNToM, &o).is_err());
    let mut o = options();
    o.compact_ratio = 2.0;
    assert!(Containers::open(dir.path(), ObjectMapping::NToOne, &o).is_err());
}
