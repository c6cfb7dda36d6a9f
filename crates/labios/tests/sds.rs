//! Software-defined storage end to end (article 3.5.3, 3.6.2d): pipelines
//! in labels run at the workers, on the embedded runtime and on a cluster
//! of processes (NATS, Redis, dispatcher, manager, workers).

mod common;

use bytes::Bytes;
use common::deploy::{Deployed, Kind};
use labios_client::Client;
use labios_label::Operation;

both!(
    in_situ_results_come_back_without_the_data,
    writes_are_stored_through_their_pipeline,
    user_functions_run_sandboxed_and_privately,
);

fn ops(spec: &str) -> Vec<Operation> {
    Operation::parse_pipeline(spec).unwrap()
}

/// Little-endian i64 values, a deterministic shuffle of -n/2..n/2.
fn i64s(n: i64) -> (Vec<i64>, Bytes) {
    let mut v: Vec<i64> = (-n / 2..n - n / 2).map(|i| i * 7).collect();
    let mut rng = fastrand::Rng::with_seed(5);
    rng.shuffle(&mut v);
    let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    (v, Bytes::from(bytes))
}

/// What coreutils' sha256sum says of `data`.
fn sha256sum(data: &[u8]) -> String {
    use std::io::Write;
    let mut p = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(data).unwrap();
    let out = p.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

async fn start(kind: Kind) -> Deployed {
    Deployed::start(kind, |c| {
        // Spreads a file's labels over the workers, so that queries gather.
        c.dispatcher.policy = "round-robin".into();
        c.worker.function_fuel = 300_000_000;
        c.worker.function_timeout_ms = 3_000;
        c.worker.function_memory_bytes = 32 << 20;
    })
    .await
}

async fn in_situ_results_come_back_without_the_data(kind: Kind) {
    let d = start(kind).await;
    let c = d.client().await;
    // 3 MiB in 1 MiB labels lands on several workers: gathered in the
    // warehouse, worker to worker, for one of them to run the pipeline.
    let (mut values, data) = i64s(3 * 131_072 + 5);
    // Separate writes, separate batches: round robin puts them apart.
    for at in (0..data.len()).step_by(1 << 20) {
        let piece = data.slice(at..(at + (1 << 20)).min(data.len()));
        c.write_at_sync("/ana/big.i64", at as u64, piece)
            .await
            .unwrap();
    }
    let holders: std::collections::BTreeSet<_> = c
        .catalog()
        .extents(
            c.stat("/ana/big.i64").await.unwrap().id,
            0,
            data.len() as u64,
        )
        .await
        .unwrap()
        .iter()
        .map(|e| e.worker)
        .collect();
    assert!(holders.len() > 1, "the file is spread: {holders:?}");
    values.sort_unstable();
    let median = c
        .query("/ana/big.i64", ops("median:dtype=i64"))
        .await
        .unwrap();
    let n = values.len();
    let expected = if n % 2 == 1 {
        values[n / 2].to_string()
    } else {
        let m = (values[n / 2 - 1] as f64 + values[n / 2] as f64) / 2.0;
        serde_json::to_string(&m).unwrap()
    };
    assert_eq!(String::from_utf8(median.to_vec()).unwrap(), expected);
    let stats: serde_json::Value = serde_json::from_slice(
        &c.query("/ana/big.i64", ops("stats:dtype=i64,bins=4"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stats["count"], n as u64);
    assert_eq!(stats["min"], values[0]);
    assert_eq!(stats["max"], values[n - 1]);
    // A filter then a sort: only the kept values come back, in order.
    let kept = c
        .query(
            "/ana/big.i64",
            ops("filter:dtype=i64,min=0,max=700|sort:dtype=i64"),
        )
        .await
        .unwrap();
    let expected: Vec<u8> = values
        .iter()
        .filter(|v| (0..=700).contains(*v))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert!(kept == expected);
    // A small file on one worker is processed where it is.
    let text = "the quick brown fox jumps over the lazy dog the end\n";
    c.write_at_sync("/ana/words.txt", 0, Bytes::from(text))
        .await
        .unwrap();
    let wc: serde_json::Value = serde_json::from_slice(
        &c.query("/ana/words.txt", ops("wordcount:top=1"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(wc["words"], 11);
    assert_eq!(wc["top"][0]["word"], "the");
    let sum = c.query("/ana/words.txt", ops("sha256")).await.unwrap();
    assert_eq!(
        String::from_utf8(sum.to_vec()).unwrap(),
        sha256sum(text.as_bytes())
    );
    // Clear errors for bad pipelines, before anything runs.
    let e = c.query("/ana/words.txt", ops("nosuch")).await.unwrap_err();
    assert!(e.to_string().contains("nosuch"), "{e}");
    let e = c
        .query("/ana/words.txt", ops("median:dtype=i64"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("median"), "{e}");
    d.shutdown().await;
}

async fn writes_are_stored_through_their_pipeline(kind: Kind) {
    let d = start(kind).await;
    let c = d.client().await;
    let original = Bytes::from(b"abcdefgh".repeat(100_000));
    let h = c
        .write_through("/cs/data.zst", 0, original.clone(), ops("zstd:level=5"))
        .await
        .unwrap();
    c.wait(&h).await.unwrap();
    let stored = c.read("/cs/data.zst").await.unwrap();
    assert!(
        stored.len() < original.len() / 10,
        "stored {}",
        stored.len()
    );
    assert_eq!(&stored[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
    assert!(c.query("/cs/data.zst", ops("unzstd")).await.unwrap() == original);
    // Sorted at the worker; read back in order.
    let (mut values, data) = i64s(10_000);
    let h = c
        .write_through("/cs/sorted.i64", 0, data, ops("sort:dtype=i64"))
        .await
        .unwrap();
    c.wait(&h).await.unwrap();
    values.sort_unstable();
    let expect: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert!(c.read("/cs/sorted.i64").await.unwrap() == expect);
    // Encrypted with the application's key: ciphertext at rest, the
    // original back through decrypt.
    let secret = Bytes::from_static(b"patient records, not for other eyes");
    let h = c
        .write_through("/cs/secret.bin", 0, secret.clone(), ops("encrypt"))
        .await
        .unwrap();
    c.wait(&h).await.unwrap();
    let at_rest = c.read("/cs/secret.bin").await.unwrap();
    assert!(!at_rest.windows(7).any(|w| w == b"patient"));
    assert_eq!(
        c.query("/cs/secret.bin", ops("decrypt")).await.unwrap(),
        secret
    );
    // A pipeline failing at the worker (corrupt input for unzstd) fails
    // its label with the reason; the worker goes on.
    let h = c
        .write_through("/cs/bad", 0, Bytes::from_static(b"not zstd"), ops("unzstd"))
        .await
        .unwrap();
    let e = c.wait(&h).await.unwrap_err();
    assert!(e.to_string().contains("unzstd"), "{e}");
    assert!(c.query("/cs/data.zst", ops("unzstd")).await.unwrap() == original);
    d.shutdown().await;
}

const UPPER: &str = include_str!("../../functions/src/uppercase.wat");

const SPIN: &str = r#"(module (memory (export "memory") 1)
  (func (export "labios_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "labios_run") (param i32 i32 i32 i32) (result i64)
    (loop $l (br $l)) (i64.const 0)))"#;

const HOG: &str = r#"(module (memory (export "memory") 1)
  (func (export "labios_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "labios_run") (param i32 i32 i32 i32) (result i64)
    (loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    (unreachable)))"#;

const TRAP: &str = r#"(module (memory (export "memory") 1)
  (func (export "labios_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "labios_run") (param i32 i32 i32 i32) (result i64) (unreachable)))"#;

async fn other_app(d: &Deployed, name: &str) -> Client {
    let stores = d.stores();
    let admin = labios_core::administrator::Administrator::new(stores.inventory.clone());
    let app = admin.create_app(name).await.unwrap();
    let origin = stores.inventory.next_id("origin").await.unwrap();
    Client::with_secret(
        stores,
        app.id,
        &app.secret,
        origin,
        d.config().client.clone(),
    )
    .unwrap()
}

async fn user_functions_run_sandboxed_and_privately(kind: Kind) {
    let d = start(kind).await;
    let c = d.client().await;
    c.write_at_sync("/fn/in.txt", 0, Bytes::from_static(b"hello, labios"))
        .await
        .unwrap();
    for (name, wat) in [
        ("upper", UPPER),
        ("spin", SPIN),
        ("hog", HOG),
        ("trap", TRAP),
    ] {
        c.register_function(name, Bytes::from(wat)).await.unwrap();
    }
    assert_eq!(
        c.functions().await.unwrap(),
        ["hog", "spin", "trap", "upper"]
    );
    assert_eq!(
        c.query("/fn/in.txt", ops("upper")).await.unwrap(),
        Bytes::from_static(b"HELLO, LABIOS")
    );
    // User functions mix with built-ins in one pipeline.
    let crc = c.query("/fn/in.txt", ops("upper|crc32c")).await.unwrap();
    assert_eq!(crc.len(), 8, "hex crc32c: {crc:?}");
    for (name, why) in [
        ("spin", "fuel"),
        ("hog", "memory limit"),
        ("trap", "trapped"),
    ] {
        let e = c
            .query("/fn/in.txt", ops(name))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(name) && e.contains(why), "{name}: {e}");
        // The worker goes on serving.
        assert_eq!(
            c.query("/fn/in.txt", ops("upper")).await.unwrap(),
            Bytes::from_static(b"HELLO, LABIOS")
        );
    }
    // Bad modules and names are refused at registration.
    let e = c
        .register_function("broken", Bytes::from_static(b"(module"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("broken"), "{e}");
    let e = c
        .register_function("zstd", Bytes::from(UPPER))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("built-in"), "{e}");
    // Another application neither sees nor runs them, even on its own data.
    let b = other_app(&d, "beta").await;
    assert!(b.functions().await.unwrap().is_empty());
    b.write_at_sync("/b/in.txt", 0, Bytes::from_static(b"beta data"))
        .await
        .unwrap();
    let e = b.query("/b/in.txt", ops("upper")).await.unwrap_err();
    assert!(e.to_string().contains("unknown function upper"), "{e}");
    // Its own function of the same name is its own.
    b.register_function("upper", Bytes::from(TRAP))
        .await
        .unwrap();
    assert_eq!(
        c.query("/fn/in.txt", ops("upper")).await.unwrap(),
        Bytes::from_static(b"HELLO, LABIOS")
    );
    c.remove_function("spin").await.unwrap();
    assert_eq!(c.functions().await.unwrap(), ["hog", "trap", "upper"]);
    d.shutdown().await;
}

/// Workers that decline functions are never given pipelines; with none
/// left, the failure says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelines_go_only_to_workers_that_run_functions() {
    let d = Deployed::start(Kind::Embedded, |c| {
        for w in c.workers.iter_mut().skip(1) {
            w.functions = false;
        }
    })
    .await;
    let c = d.client().await;
    let (_, data) = i64s(400_000);
    c.write_at_sync("/cap/x.i64", 0, data).await.unwrap();
    for _ in 0..4 {
        c.query("/cap/x.i64", ops("stats:dtype=i64")).await.unwrap();
        let h = c
            .write_through(
                "/cap/y.zst",
                0,
                Bytes::from(vec![7u8; 100_000]),
                ops("zstd"),
            )
            .await
            .unwrap();
        c.wait(&h).await.unwrap();
    }
    let y = c.stat("/cap/y.zst").await.unwrap();
    let holders: Vec<_> = c
        .catalog()
        .extents(y.id, 0, y.size)
        .await
        .unwrap()
        .iter()
        .map(|e| e.worker)
        .collect();
    assert_eq!(
        holders,
        [0],
        "written by the only worker that runs functions"
    );
    d.shutdown().await;
    let d = Deployed::start(Kind::Embedded, |c| {
        for w in c.workers.iter_mut() {
            w.functions = false;
        }
    })
    .await;
    let c = d.client().await;
    c.write_at_sync("/cap/t", 0, Bytes::from_static(b"text"))
        .await
        .unwrap();
    let e = c.query("/cap/t", ops("sha256")).await.unwrap_err();
    assert!(e.to_string().contains("does not run functions"), "{e}");
    d.shutdown().await;
}
