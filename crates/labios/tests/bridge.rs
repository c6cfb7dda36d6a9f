//! External storage behind workers (article 3.3.3a, 3.6.1, 4.2.7): data in
//! a real S3 server (versitygw) and in a shared directory, read in place
//! and written through labels, and `labios cp` staging between LABIOS,
//! local files and external storage.

mod common;

use bytes::Bytes;
use common::deploy::{Deployed, Kind};
use common::s3::S3Server;
use common::serve::Server;
use labios_bridge::MountConfig;
use labios_label::Error;
use labios_store::FileKind;
use std::path::Path;

both!(
    external_data_is_read_in_place_and_written_by_workers,
    files_over_objects_are_laid_out_by_their_mount_mapping,
);

fn fs_mount(dir: &Path) -> MountConfig {
    std::fs::create_dir_all(dir).unwrap();
    MountConfig {
        uri: format!("fs://{}", dir.display()),
        ..Default::default()
    }
}

/// A data set another program put into the object store (the K-means
/// input of 4.2.7): CSV parts of points.
fn points(part: u64) -> Bytes {
    let data = common::data(part, 300_000);
    let text: String = data
        .chunks(3)
        .map(|c| {
            format!(
                "{},{},{}\n",
                c[0],
                c.get(1).unwrap_or(&0),
                c.get(2).unwrap_or(&0)
            )
        })
        .collect();
    Bytes::from(text)
}

async fn external_data_is_read_in_place_and_written_by_workers(kind: Kind) {
    let s3 = S3Server::start();
    s3.bucket("lake");
    let pfs = tempfile::tempdir().unwrap();
    let inputs = tempfile::tempdir().unwrap();
    let mut parts = Vec::new();
    for i in 0..3 {
        let p = inputs.path().join(format!("part-{i}.csv"));
        std::fs::write(&p, points(i)).unwrap();
        let out = s3.aws(&[
            "s3",
            "cp",
            p.to_str().unwrap(),
            &format!("s3://lake/points/part-{i}.csv"),
        ]);
        assert!(
            out.status.success(),
            "aws s3 cp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        parts.push(points(i));
    }
    let d = Deployed::start(kind, |c| {
        c.client.max_label_size = 256 << 10;
        c.mounts.insert("lake".into(), s3.mount("s3://lake"));
        c.mounts.insert("pfs".into(), fs_mount(pfs.path()));
    })
    .await;
    let c = d.client().await;

    // Read in place, whole and by ranges spanning several labels.
    for (i, part) in parts.iter().enumerate() {
        let uri = format!("s3://lake/points/part-{i}.csv");
        assert_eq!(c.read(&uri).await.unwrap(), part);
        assert_eq!(c.stat(&uri).await.unwrap().size, part.len() as u64);
    }
    let uri = "lake:/points/part-1.csv";
    let got = c.read_at(uri, 100_000, 600_000).await.unwrap();
    assert_eq!(got, parts[1].slice(100_000..700_000));
    let tail = c
        .read_at(uri, parts[1].len() as u64 - 10, 1000)
        .await
        .unwrap();
    assert_eq!(tail, parts[1].slice(parts[1].len() - 10..));
    let listed: Vec<_> = c
        .list("s3://lake/points")
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.path, m.size))
        .collect();
    let expected: Vec<_> = (0..3)
        .map(|i| {
            (
                format!("s3://lake/points/part-{i}.csv"),
                parts[i].len() as u64,
            )
        })
        .collect();
    assert_eq!(listed, expected);
    // Nothing was ingested: the LABIOS namespace is still empty.
    let namespace = c.list("/").await.unwrap();
    assert!(namespace.iter().all(|m| m.path == "/"), "{namespace:?}");

    // Writes are labels too; the result is a plain file and object.
    let result = common::data(9, 700_000);
    c.write_at_sync("pfs:/out/centroids.bin", 0, result.clone())
        .await
        .unwrap();
    c.write_at_sync("pfs:/out/centroids.bin", 1000, Bytes::from_static(b"PATCH"))
        .await
        .unwrap();
    let mut expected = result.to_vec();
    expected[1000..1005].copy_from_slice(b"PATCH");
    assert_eq!(
        std::fs::read(pfs.path().join("out/centroids.bin")).unwrap(),
        expected
    );
    c.write_at_sync(
        "s3://lake/results/summary.txt",
        0,
        Bytes::from_static(b"k=3\n"),
    )
    .await
    .unwrap();
    let out = s3.aws(&["s3", "cp", "s3://lake/results/summary.txt", "-"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "k=3\n");
    let dir = c.stat("pfs:/out").await.unwrap();
    assert_eq!(dir.kind, FileKind::Dir);

    // Clear errors, nothing touched outside the mounts.
    let e = c.read("s3://elsewhere/x").await.unwrap_err().to_string();
    assert!(
        e.contains("no mount declares the bucket") && e.contains("lake"),
        "{e}"
    );
    assert!(matches!(
        c.read("lake:/points/missing.csv").await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        c.read("pfs:/../etc/passwd").await,
        Err(Error::InvalidPath { .. })
    ));
    let e = c.read("nfs:/x").await.unwrap_err().to_string();
    assert!(
        e.contains("mount \"nfs\"") && e.contains("pfs: fs://"),
        "{e}"
    );
    c.remove("s3://lake/results/summary.txt").await.unwrap();
    assert!(matches!(
        c.stat("s3://lake/results/summary.txt").await,
        Err(Error::NotFound(_))
    ));
    d.shutdown().await;
}

/// Keys of the objects under `prefix` in `bucket`, as the aws CLI lists them.
fn keys(s3: &S3Server, bucket: &str, prefix: &str) -> Vec<String> {
    let out = s3.aws(&[
        "s3api",
        "list-objects-v2",
        "--bucket",
        bucket,
        "--prefix",
        prefix,
        "--query",
        "Contents[].Key",
        "--output",
        "text",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut keys: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .filter(|k| *k != "None")
        .map(String::from)
        .collect();
    keys.sort();
    keys
}

/// IRIS files over objects through labels: a balanced mount keeps a file
/// as fixed-size bucket objects, updated in place bucket by bucket; a
/// cached mount reads the same bytes; on the embedded deployment, a
/// write-optimized mount with merged writes and relaxed metadata turns
/// many small writes into few objects once flushed.
async fn files_over_objects_are_laid_out_by_their_mount_mapping(kind: Kind) {
    let s3 = S3Server::start();
    s3.bucket("lake");
    let embedded = kind == Kind::Embedded;
    let d = Deployed::start(kind, |c| {
        c.mounts.insert(
            "blk".into(),
            MountConfig {
                mapping: labios_bridge::Mapping::Balanced,
                bucket_size: Some(64 << 10),
                cache_bytes: 4 << 20,
                cache_block: Some(64 << 10),
                ..s3.mount("s3://lake/blk")
            },
        );
        if embedded {
            c.mounts.insert(
                "wlog".into(),
                MountConfig {
                    mapping: labios_bridge::Mapping::WriteOptimized,
                    metadata: labios_bridge::MetadataMode::Relaxed,
                    aggregate_bytes: 1 << 20,
                    ..s3.mount("s3://lake/wlog")
                },
            );
        }
    })
    .await;
    let c = d.client().await;

    let mut expected = common::data(4, 200_000).to_vec();
    c.write_at_sync("blk:/f.bin", 0, Bytes::from(expected.clone()))
        .await
        .unwrap();
    c.write_at_sync("blk:/f.bin", 70_000, Bytes::from_static(b"in place"))
        .await
        .unwrap();
    expected[70_000..70_008].copy_from_slice(b"in place");
    assert_eq!(c.read("blk:/f.bin").await.unwrap(), expected);
    assert_eq!(
        c.read_at("blk:/f.bin", 65_000, 10_000).await.unwrap(),
        expected[65_000..75_000]
    );
    assert_eq!(c.stat("blk:/f.bin").await.unwrap().size, 200_000);
    let listed: Vec<_> = c
        .list("blk:/")
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.path, m.size))
        .collect();
    assert_eq!(listed, [("blk:/f.bin".to_string(), 200_000)]);
    // 200 000 bytes in 64 KiB buckets: 4 bucket objects and the metadata.
    assert_eq!(
        keys(&s3, "lake", "blk/f.bin/"),
        [
            "blk/f.bin/.labios/0",
            "blk/f.bin/.labios/1",
            "blk/f.bin/.labios/2",
            "blk/f.bin/.labios/3",
            "blk/f.bin/.labios/meta"
        ]
    );
    c.remove("blk:/f.bin").await.unwrap();
    assert!(keys(&s3, "lake", "blk/").is_empty());

    if embedded {
        let mut log = Vec::new();
        for i in 0..50u32 {
            let line = format!("event {i:04}\n");
            c.write_at_sync(
                "wlog:/events.log",
                log.len() as u64,
                Bytes::from(line.clone()),
            )
            .await
            .unwrap();
            log.extend_from_slice(line.as_bytes());
        }
        c.flush("wlog:/events.log").await.unwrap();
        let objects = keys(&s3, "lake", "wlog/events.log/.labios/log/");
        assert!(
            !objects.is_empty() && objects.len() < 5,
            "50 small writes should be merged into a few objects: {objects:?}"
        );
        assert_eq!(c.read("wlog:/events.log").await.unwrap(), log);
        assert_eq!(
            c.stat("wlog:/events.log").await.unwrap().size,
            log.len() as u64
        );
    }
    d.shutdown().await;
}

/// A client in another process than `labios serve` (a program under
/// `labios run`, the CLI, Python) sees an external file as the workers'
/// mount holds it: writes merged but not yet stored and relaxed metadata
/// count in its stat, list and read, and a removal takes them too. Each
/// client once asked the external system itself, through a mount of its
/// own, and an acknowledged append was missing from stat and list (the
/// file was not found) until the mount stored it, up to a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_in_another_process_sees_what_the_workers_mount_holds() {
    let dir = tempfile::tempdir().unwrap();
    let ext = dir.path().join("ext");
    let mount = MountConfig {
        mapping: labios_bridge::Mapping::WriteOptimized,
        metadata: labios_bridge::MetadataMode::Relaxed,
        aggregate_bytes: 1 << 20,
        ..fs_mount(&ext)
    };
    // Two directory mounts, one inside the other: `raw:/sub/x` and
    // `inner:/x` are one file.
    let plain = dir.path().join("plain");
    let toml = dir.path().join("labios.toml");
    std::fs::write(
        &toml,
        format!(
            "[mounts.wlog]\nuri = \"{}\"\nmapping = \"write-optimized\"\nmetadata = \"relaxed\"\naggregate_bytes = {}\n\
             [mounts.raw]\nuri = \"{}\"\n[mounts.inner]\nuri = \"{}\"\n",
            mount.uri,
            mount.aggregate_bytes,
            fs_mount(&plain).uri,
            fs_mount(&plain.join("sub")).uri
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start_configured(&data, Some(&toml));
    let mut config = labios::Config {
        data_dir: data,
        ..Default::default()
    };
    config.mounts.insert("wlog".into(), mount);
    config.mounts.insert("raw".into(), fs_mount(&plain));
    config
        .mounts
        .insert("inner".into(), fs_mount(&plain.join("sub")));
    let c = labios_connect::connect_client(&config.connection(), None, None)
        .await
        .unwrap();

    let mut log = Vec::new();
    for i in 0..3u32 {
        append_event(&c, "wlog:/x.log", &mut log, i).await;
        assert_eq!(
            c.stat("wlog:/x.log").await.unwrap().size,
            log.len() as u64,
            "stat after acknowledged write {i}"
        );
    }
    let listed: Vec<_> = c
        .list("wlog:/")
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.path, m.size, m.kind))
        .collect();
    assert_eq!(
        listed,
        [("wlog:/x.log".to_string(), log.len() as u64, FileKind::File)]
    );
    assert_eq!(c.read("wlog:/x.log").await.unwrap(), log);
    let stat = server.ok(None, &["stat", "wlog:/x.log"]);
    assert!(stat.contains(&format!("size:  {}", log.len())), "{stat}");

    c.remove("wlog:/x.log").await.unwrap();
    assert!(matches!(
        c.stat("wlog:/x.log").await,
        Err(Error::NotFound(_))
    ));
    assert!(c.list("wlog:/").await.unwrap().is_empty());
    assert!(
        matches!(c.remove("wlog:/x.log").await, Err(Error::NotFound(_))),
        "a second removal finds nothing"
    );
    assert!(
        matches!(c.stat("wlog:/../x").await, Err(Error::InvalidPath { .. })),
        "a path leaving its mount is refused before any label"
    );

    // `labios cp` onto a mapped file replaces it: a longer old file once
    // kept its tail (`XYZ` over 20 bytes read back `XYZ3456789...`).
    let long = dir.path().join("long.txt");
    let short = dir.path().join("short.txt");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&long, b"0123456789abcdefghij").unwrap();
    std::fs::write(&short, b"XYZ").unwrap();
    std::fs::write(&empty, b"").unwrap();
    for (from, expected) in [
        (&long, "0123456789abcdefghij"),
        (&short, "XYZ"),
        (&empty, ""),
    ] {
        server.ok(None, &["cp", from.to_str().unwrap(), "wlog:/t.txt"]);
        assert_eq!(server.ok(None, &["get", "wlog:/t.txt", "-"]), expected);
        assert_eq!(c.read("wlog:/t.txt").await.unwrap(), expected.as_bytes());
    }
    // A copy onto its own source, under another spelling, is refused: it
    // would empty the file before reading it.
    server.ok(None, &["cp", long.to_str().unwrap(), "wlog:/t.txt"]);
    for dst in ["wlog:/./t.txt", "wlog:t.txt", "wlog:/"] {
        let err = server.err(None, &["cp", "wlog:/t.txt", dst]);
        assert!(err.contains("are the same file"), "{dst}: {err}");
    }
    assert_eq!(
        c.read("wlog:/t.txt").await.unwrap(),
        b"0123456789abcdefghij".as_slice()
    );
    c.write_at_sync("/own.txt", 0, Bytes::from_static(b"mine"))
        .await
        .unwrap();
    let err = server.err(None, &["cp", "labios:/own.txt", "labios:/./own.txt"]);
    assert!(err.contains("are the same file"), "{err}");
    assert_eq!(c.read("/own.txt").await.unwrap(), b"mine".as_slice());
    // The same file through two mounts, or as a local path and through a
    // directory mount; a tree copied into itself.
    server.ok(None, &["cp", long.to_str().unwrap(), "raw:/sub/x.txt"]);
    let local_x = plain.join("sub/x.txt");
    for (from, to) in [
        ("raw:/sub/x.txt", "inner:/x.txt"),
        ("inner:/x.txt", "raw:/sub/x.txt"),
        (local_x.to_str().unwrap(), "inner:/x.txt"),
        ("raw:/sub/x.txt", local_x.to_str().unwrap()),
    ] {
        let err = server.err(None, &["cp", from, to]);
        assert!(err.contains("are the same file"), "{from} -> {to}: {err}");
    }
    assert_eq!(std::fs::read(&local_x).unwrap(), b"0123456789abcdefghij");
    let err = server.err(None, &["cp", "-r", "raw:/sub", "raw:/sub/deeper"]);
    assert!(err.contains("into itself"), "{err}");
    let err = server.err(None, &["cp", "-r", "labios:/", "labios:/copy"]);
    assert!(err.contains("into itself"), "{err}");
    server.stop();
}

/// A clean stop of `labios serve` stores what its mounts acknowledged but
/// held in memory: merged writes and relaxed metadata. The model checker
/// found a restart of the server losing the last byte of a file on a
/// relaxed mount (its size was stored by the write that created the file;
/// the write that extended it was held) until the held state was stored
/// within the second. The mounts hold for an hour here, so only the stop
/// stores: without it, the objects still show the file as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_stores_what_the_mounts_held_back() {
    let dir = tempfile::tempdir().unwrap();
    let hold = Some(labios_bridge::MAX_HOLD_MS);
    let mounts = std::collections::BTreeMap::from([
        (
            "wlog".to_string(),
            MountConfig {
                mapping: labios_bridge::Mapping::WriteOptimized,
                metadata: labios_bridge::MetadataMode::Relaxed,
                aggregate_bytes: 1 << 20,
                hold_ms: hold,
                ..fs_mount(&dir.path().join("wlog"))
            },
        ),
        (
            "bal".to_string(),
            MountConfig {
                mapping: labios_bridge::Mapping::Balanced,
                metadata: labios_bridge::MetadataMode::Relaxed,
                bucket_size: Some(4096),
                hold_ms: hold,
                ..fs_mount(&dir.path().join("bal"))
            },
        ),
    ]);
    let toml = dir.path().join("labios.toml");
    let declared: String = mounts
        .iter()
        .map(|(name, m)| {
            format!(
                "[mounts.{name}]\nuri = \"{}\"\nmapping = \"{}\"\nmetadata = \"relaxed\"\n\
                 aggregate_bytes = {}\nhold_ms = {}\n{}",
                m.uri,
                if name == "wlog" {
                    "write-optimized"
                } else {
                    "balanced"
                },
                m.aggregate_bytes,
                m.hold_ms.unwrap(),
                m.bucket_size
                    .map(|b| format!("bucket_size = {b}\n"))
                    .unwrap_or_default(),
            )
        })
        .collect();
    std::fs::write(&toml, declared).unwrap();
    let data = dir.path().join("data");
    let server = Server::start_configured(&data, Some(&toml));
    let config = labios::Config {
        data_dir: data,
        mounts: mounts.clone(),
        ..Default::default()
    };
    let c = labios_connect::connect_client(&config.connection(), None, None)
        .await
        .unwrap();

    let mut log = Vec::new();
    for i in 0..3u32 {
        append_event(&c, "wlog:/x.log", &mut log, i).await;
    }
    // Created by the first write (stored at once), extended by the second
    // (held): the end of the file is only in the server's memory.
    let big = common::data(7, 10_000);
    c.write_at_sync("bal:/y", 0, big.slice(..6000))
        .await
        .unwrap();
    c.write_at_sync("bal:/y", 6000, big.slice(6000..))
        .await
        .unwrap();

    // What another process finds in the store, through mounts of its own.
    let stored = |path: &'static str| {
        let mounts = mounts.clone();
        async move {
            let fresh = labios_bridge::Mounts::new(&mounts).unwrap();
            let e = fresh.resolve(path).unwrap();
            match e.mapper().stat(&e.path).await.unwrap() {
                Some(st) => e.mapper().read(&e.path, 0, st.size).await.unwrap().to_vec(),
                None => Vec::new(),
            }
        }
    };
    assert_eq!(stored("bal:/y").await, &big[..6000], "held before the stop");
    assert_ne!(stored("wlog:/x.log").await, log, "held before the stop");

    server.stop();
    assert_eq!(stored("wlog:/x.log").await, log);
    assert_eq!(stored("bal:/y").await, big);
}

/// Merged writes and relaxed metadata live in one process: the
/// distributed deployment refuses them, naming the mount.
#[test]
fn process_local_mount_state_is_refused_on_a_cluster() {
    let mut config = labios::Config {
        deployment: labios::config::Deployment::Distributed,
        ..Default::default()
    };
    config.mounts.insert(
        "wlog".into(),
        MountConfig {
            uri: "memory://".into(),
            mapping: labios_bridge::Mapping::WriteOptimized,
            aggregate_bytes: 4096,
            ..Default::default()
        },
    );
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("mounts.wlog") && e.contains("embedded"), "{e}");
}

/// `labios cp` stages a tree from the object store into LABIOS and a file
/// back out to the shared directory and to a local file, byte for byte.
#[test]
fn cp_stages_in_and_out() {
    let s3 = S3Server::start();
    s3.bucket("lake");
    let dir = tempfile::tempdir().unwrap();
    let pfs = dir.path().join("pfs");
    let mut config = labios::Config::default();
    config.mounts.insert("lake".into(), s3.mount("s3://lake"));
    config.mounts.insert("pfs".into(), fs_mount(&pfs));
    let toml = dir.path().join("labios.toml");
    let mut text = String::new();
    for (name, m) in &config.mounts {
        text.push_str(&format!("[mounts.{name}]\nuri = \"{}\"\n", m.uri));
        if let Some(e) = &m.endpoint {
            text.push_str(&format!(
                "endpoint = \"{e}\"\naccess_key = \"{}\"\nsecret_key = \"{}\"\n",
                s3.key, s3.secret
            ));
        }
    }
    std::fs::write(&toml, text).unwrap();
    let server = Server::start_configured(&dir.path().join("data"), Some(&toml));

    let local = dir.path().join("in");
    std::fs::create_dir_all(local.join("sub")).unwrap();
    let big = common::data(1, 20 << 20);
    std::fs::write(local.join("big.bin"), &big).unwrap();
    std::fs::write(local.join("sub/small.txt"), b"small\n").unwrap();
    std::fs::write(local.join("empty"), b"").unwrap();
    let local_s = local.to_str().unwrap();

    // Local tree -> object store -> LABIOS -> shared directory -> local.
    let err = server.err(None, &["cp", local_s, "s3://lake/in"]);
    assert!(err.contains("is a directory (use -r"), "{err}");
    server.ok(None, &["cp", "-r", local_s, "s3://lake/in"]);
    let out = s3.aws(&["s3", "ls", "--recursive", "s3://lake/in/"]);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("in/big.bin") && listing.contains("in/sub/small.txt"),
        "{listing}"
    );
    let staged = server.run(None, &["cp", "-r", "s3://lake/in", "labios:/staged"]);
    assert!(
        staged.status.success(),
        "{}",
        String::from_utf8_lossy(&staged.stderr)
    );
    let summary = String::from_utf8_lossy(&staged.stderr);
    assert!(summary.contains("copied 3 files"), "{summary}");
    assert!(server
        .ok(None, &["ls", "/staged/sub"])
        .contains("/staged/sub/small.txt"));
    server.ok(None, &["cp", "labios:/staged/big.bin", "pfs:/out/"]);
    assert!(
        std::fs::read(pfs.join("out")).is_err(),
        "pfs:/out/ names a directory"
    );
    server.ok(None, &["cp", "labios:/staged/big.bin", "pfs:/out/big.bin"]);
    assert_eq!(std::fs::read(pfs.join("out/big.bin")).unwrap(), big);
    let back = dir.path().join("back.bin");
    server.ok(None, &["cp", "pfs:/out/big.bin", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(&back).unwrap(), big);
    assert_eq!(
        server.ok(None, &["get", "/staged/sub/small.txt", "-"]),
        "small\n"
    );
    assert_eq!(
        server.ok(None, &["get", "s3://lake/in/sub/small.txt", "-"]),
        "small\n"
    );
    let stat = server.ok(None, &["stat", "s3://lake/in/big.bin"]);
    assert!(
        stat.contains(&format!("size:  {}", big.len())) && stat.contains("externally"),
        "{stat}"
    );
    assert_eq!(
        server
            .ok(None, &["stat", "/staged/empty"])
            .lines()
            .find(|l| l.starts_with("size")),
        Some("size:  0")
    );

    // A missing source and an undeclared bucket fail with their names.
    let err = server.err(None, &["cp", "s3://lake/nope", "labios:/x"]);
    assert!(
        err.contains("s3://lake/nope") && err.contains("not found"),
        "{err}"
    );
    let big_s = local.join("big.bin");
    let err = server.err(None, &["cp", big_s.to_str().unwrap(), "s3://other/x"]);
    assert!(err.contains("no mount declares the bucket"), "{err}");
    server.stop();
}

/// Appends line `i` of an event log to `path` synchronously, and to `log`,
/// what the file must then hold.
async fn append_event(c: &labios_client::Client, path: &str, log: &mut Vec<u8>, i: u32) {
    let line = format!("event {i:04}\n");
    c.write_at_sync(path, log.len() as u64, Bytes::from(line.clone()))
        .await
        .unwrap();
    log.extend_from_slice(line.as_bytes());
}
