//! The `labios` binary as a user runs it: `labios serve` in one process, the
//! client commands in others, talking over the local endpoint.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::serve::{Server, BIN};

#[test]
fn put_get_ls_stat_rm_status_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data);
    let local = dir.path().join("input.bin");
    let bytes = common::data(42, (5 << 20) + 3);
    std::fs::write(&local, &bytes).unwrap();
    server.ok(None, &["put", local.to_str().unwrap(), "/sim/out.bin"]);
    server.ok(None, &["put", local.to_str().unwrap(), "/sim/copy.bin"]);
    let back = dir.path().join("back.bin");
    server.ok(None, &["get", "/sim/out.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == bytes.to_vec());
    let ls = server.ok(None, &["ls", "/sim"]);
    assert!(
        ls.contains("/sim/out.bin") && ls.contains("/sim/copy.bin"),
        "{ls}"
    );
    let stat = server.ok(None, &["stat", "/sim/out.bin"]);
    assert!(stat.contains(&format!("size:  {}", bytes.len())), "{stat}");
    server.ok(None, &["rm", "/sim/copy.bin"]);
    assert!(!server.ok(None, &["ls", "/sim"]).contains("copy.bin"));
    let status = server.ok(None, &["status"]);
    for tier in ["ram", "nvme", "ssd", "hdd"] {
        assert!(status.contains(tier), "status lacks tier {tier}: {status}");
    }
    assert!(status.contains("labels/s"), "{status}");
    // Each worker's row ends with the stack it runs (the default: file; the
    // `ram` worker's, a tier over files).
    let rows: Vec<&str> = status
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|id| id.parse::<u32>().is_ok())
        })
        .collect();
    assert_eq!(rows.len(), 4, "{status}");
    for row in rows {
        let stack = if row.split_whitespace().nth(1) == Some("ram") {
            "tier,file"
        } else {
            "file"
        };
        assert_eq!(row.split_whitespace().last(), Some(stack), "{status}");
    }
    server.stop();

    // Same data directory, new process: the file is still there, byte-exact.
    let server = Server::start(&data);
    let again = dir.path().join("again.bin");
    server.ok(None, &["get", "/sim/out.bin", again.to_str().unwrap()]);
    assert!(std::fs::read(&again).unwrap() == bytes.to_vec());
    server.stop();
}

/// A program under `labios run --async`, with no `labios serve` running
/// (so `labios run` runs the runtime itself), writes and exits without
/// closing its file: each write returned once its label was published,
/// and every byte is there afterwards, as README promises. (The stop of
/// the runtime once dropped labels still in its in-memory queues; the
/// test that catches that is `pipeline::a_clean_stop_loses_no_published_write`,
/// whose client publishes faster than this program can.)
#[test]
fn a_program_exiting_without_close_keeps_its_async_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Small writes, each its own label; every store call waits up to 2 ms
    // (an injected delay), and a label takes more of them to run than to
    // publish, so many are still queued when the program exits.
    let blocks = 1500;
    let block = 4096;
    let config = dir.path().join("labios.toml");
    std::fs::write(
        &config,
        "[faults]\nseed = 7\ndelay_ppm = 1000000\nmax_delay_ms = 2\n",
    )
    .unwrap();
    let program = format!(
        "import os\n\
         fd = os.open('/labios/x', os.O_WRONLY | os.O_CREAT, 0o644)\n\
         for i in range({blocks}):\n    os.write(fd, bytes([i % 256]) * {block})\n\
         os._exit(0)\n"
    );
    let labios_run = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("run")
            .args(args)
            .env("LABIOS_DATA_DIR", &data)
            .env_remove("LABIOS_ENDPOINT")
            .env("LABIOS_CONFIG", &config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "labios run {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    labios_run(&["--async", "--", "python3", "-c", &program]);
    let back = labios_run(&["--", "cat", "/labios/x"]);
    let want: Vec<u8> = (0..blocks)
        .flat_map(|i| vec![(i % 256) as u8; block])
        .collect();
    assert_eq!(
        back.len(),
        want.len(),
        "bytes back after the program exited"
    );
    assert!(back == want, "the bytes differ");
}

/// A client killed with `kill -9` while the server reads the bytes it put
/// through its shared region (README "Shared memory"): the server lets go
/// of the region once the labels it published ran and what it staged for
/// labels it never published is dropped, and serves on.
#[test]
fn a_killed_client_leaves_no_shared_region_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let local = dir.path().join("big.bin");
    let bytes = common::data(9, 256 << 20);
    std::fs::write(&local, &bytes).unwrap();
    let mut client = server
        .command(None, &["put", local.to_str().unwrap(), "/big.bin"])
        .env("LABIOS_CLIENT__SHARED_MEMORY", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = |what: &str, done: &dyn Fn(&[u64]) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let regions = server.shared_regions();
            if done(&regions) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {regions:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    until("the server reads from the client's region", &|r| {
        r.iter().any(|&touched| touched > 4096 + (1 << 20))
    });
    client.kill().unwrap();
    client.wait().unwrap();
    until("the server still maps the killed client's region", &|r| {
        r.is_empty()
    });
    let small = dir.path().join("small.bin");
    std::fs::write(&small, &bytes[..(3 << 20) + 1]).unwrap();
    server.ok(None, &["put", small.to_str().unwrap(), "/small.bin"]);
    let back = dir.path().join("back.bin");
    server.ok(None, &["get", "/small.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == bytes[..(3 << 20) + 1]);
    server.stop();
}

#[test]
fn clear_errors_for_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let e = server.err(
        None,
        &[
            "get",
            "/no/such/file",
            dir.path().join("x").to_str().unwrap(),
        ],
    );
    assert!(e.contains("not found"), "{e}");
    let e = server.err(None, &["put", "/definitely/not/here.bin", "/x"]);
    assert!(e.contains("not found"), "{e}");
    let local = dir.path().join("in");
    std::fs::write(&local, b"hi").unwrap();
    let e = server.err(None, &["put", local.to_str().unwrap(), "/../../etc/passwd"]);
    assert!(e.contains("escapes the namespace"), "{e}");
    let e = server.err(None, &["stat", "/missing"]);
    assert!(e.contains("not found"), "{e}");
    server.stop();

    let e = String::from_utf8(
        Command::new(BIN)
            .args(["ls"])
            .env("LABIOS_ENDPOINT", dir.path().join("nobody.sock"))
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert!(e.contains("cannot reach LABIOS"), "{e}");
    let e = String::from_utf8(
        Command::new(BIN)
            .args(["ls", "--endpoint", "127.0.0.1:1"])
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert!(e.contains("cannot reach LABIOS"), "{e}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[dispatcher]\nbatch_size = \"lots\"\n").unwrap();
    let e = String::from_utf8(
        Command::new(BIN)
            .args(["--config", bad.to_str().unwrap(), "ls"])
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert!(
        e.contains("batch_size"),
        "malformed config must name the field: {e}"
    );
    std::fs::write(&bad, "[worker]\nthreadz = 3\n").unwrap();
    let e = String::from_utf8(
        Command::new(BIN)
            .args(["--config", bad.to_str().unwrap(), "ls"])
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert!(e.contains("threadz"), "unknown field must be named: {e}");
    let e = String::from_utf8(
        Command::new(BIN)
            .args(["ls"])
            .env("LABIOS_DISPATCHER__POLICY", "fastest")
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert!(
        e.contains("policy"),
        "bad policy from the environment must be named: {e}"
    );
    // A setting LABIOS does not honour is refused, not ignored.
    let e = String::from_utf8(
        Command::new(BIN)
            .args(["ls"])
            .env("LABIOS_REDIS__NODE_LOCAL", "true")
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert!(e.contains("redis.node_local"), "{e}");
}

#[test]
fn demo_runs_and_verifies() {
    let out = Command::new(BIN).arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("all checkpoints read back byte-exact"),
        "{stdout}"
    );
    // The table (issue 11, finding 3): both phases count the labels their
    // writers published, and the labels per worker add up to them.
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("mode"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, mode) in rows.iter().zip(["sync", "async"]) {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields[0], mode, "{stdout}");
        let labels: u64 = fields[2].parse().unwrap();
        let per_worker: Vec<u64> = fields
            .iter()
            .filter_map(|f| f.strip_prefix('w'))
            .map(|f| f.split_once(':').unwrap().1.parse().unwrap())
            .collect();
        assert_eq!(per_worker.len(), 4, "{row}");
        assert_eq!(per_worker.iter().sum::<u64>(), labels, "{row}");
        // Every step's array is at least 7 labels of 1 MiB: 4 x 4 x 7.
        assert!(labels >= 112, "{row}");
        assert!(
            per_worker.iter().filter(|&&n| n > 0).count() >= 2,
            "labels should spread over the workers: {row}"
        );
    }
}

/// Software-defined storage from the command line: a compressed put, an
/// in-situ query, a user function, and clear errors.
#[test]
fn pipelines_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let local = dir.path().join("numbers.i64");
    let values: Vec<i64> = (1..=1001).rev().collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&local, &bytes).unwrap();
    let f = local.to_str().unwrap();
    server.ok(
        None,
        &["put", f, "/sds/n.zst", "--pipeline", "zstd:level=19"],
    );
    let stored = dir.path().join("stored.zst");
    server.ok(None, &["get", "/sds/n.zst", stored.to_str().unwrap()]);
    let stored = std::fs::read(&stored).unwrap();
    assert_eq!(&stored[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
    assert_eq!(
        server.ok(
            None,
            &[
                "query",
                "/sds/n.zst",
                "--pipeline",
                "unzstd|median:dtype=i64"
            ]
        ),
        "501"
    );
    server.ok(
        None,
        &[
            "put",
            f,
            "/sds/n.lz4",
            "--pipeline",
            "sort:dtype=i64",
            "--pipeline",
            "lz4",
            "--no-wait",
        ],
    );
    let wat = dir.path().join("upper.wat");
    std::fs::write(&wat, include_str!("../../functions/src/uppercase.wat")).unwrap();
    assert_eq!(
        server.ok(None, &["function", "add", "upper", wat.to_str().unwrap()]),
        "registered upper\n"
    );
    assert_eq!(server.ok(None, &["function", "ls"]), "upper\n");
    let text = dir.path().join("t.txt");
    std::fs::write(&text, "shout").unwrap();
    server.ok(None, &["put", text.to_str().unwrap(), "/sds/t.txt"]);
    assert_eq!(
        server.ok(None, &["query", "/sds/t.txt", "--pipeline", "upper"]),
        "SHOUT"
    );
    assert!(server.ok(None, &["function", "builtins"]).contains("zstd"));
    let e = server.err(None, &["query", "/sds/t.txt", "--pipeline", "nosuch"]);
    assert!(e.contains("unknown function nosuch"), "{e}");
    let e = server.err(None, &["query", "/sds/t.txt", "--pipeline", "zstd:level"]);
    assert!(e.contains("not KEY=VALUE"), "{e}");
    server.ok(None, &["function", "rm", "upper"]);
    let e = server.err(None, &["function", "rm", "upper"]);
    assert!(e.contains("not found: function upper"), "{e}");
    // The background put finishes on its own: sorted, then lz4, then back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = server.run(
            None,
            &[
                "query",
                "/sds/n.lz4",
                "--pipeline",
                "unlz4|median:dtype=i64",
            ],
        );
        if out.status.success() {
            assert_eq!(String::from_utf8(out.stdout).unwrap(), "501");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the background write never landed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.stop();
}

/// `labios stack set` changes a running worker's stack: `labios status`
/// shows it, files written before and after read back byte-exact on every
/// stack, and a malformed stack, another backend or an unknown worker are
/// refused naming what is wrong, changing nothing.
#[test]
fn stack_set_changes_a_running_workers_stack() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let env = vec![("LABIOS_DATA_DIR".to_string(), data.display().to_string())];
    let server = Server::start_with(&data, None, env);
    let put = |name: &str, bytes: &[u8]| {
        let local = dir.path().join(name);
        std::fs::write(&local, bytes).unwrap();
        server.ok(
            None,
            &["put", local.to_str().unwrap(), &format!("/st/{name}")],
        );
    };
    let check = |name: &str, bytes: &[u8]| {
        let back = dir.path().join(format!("{name}.back"));
        server.ok(
            None,
            &["get", &format!("/st/{name}"), back.to_str().unwrap()],
        );
        assert!(std::fs::read(&back).unwrap() == bytes, "{name}");
    };
    let row = |id: &str| {
        let status = server.ok(None, &["status"]);
        status
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .unwrap_or_else(|| panic!("no worker {id}: {status}"))
            .to_string()
    };
    // Runs a codec shrinks, and bytes it does not.
    let packed: Vec<u8> = (0..3 << 20).map(|i| (i / 100 % 7) as u8).collect();
    let random = common::data(7, (2 << 20) + 5).to_vec();
    put("before", &packed);
    let out = server.ok(None, &["stack", "set", "1", "metrics,checksum,zstd,file"]);
    assert!(
        out.contains("worker 1 runs metrics,checksum,zstd,file"),
        "{out}"
    );
    assert!(
        row("1").ends_with("metrics,checksum,zstd,file"),
        "{}",
        row("1")
    );
    assert!(row("0").ends_with(" tier,file"), "{}", row("0"));
    put("during", &packed);
    put("random", &random);
    // Worker 1's codec stored units: their records (file id bit 62).
    let records = common::unit_records(&data.join("workers"));
    assert!(records > 0, "no unit records under {}", data.display());
    // `metrics`: worker 1's table, a row per module it names, top first,
    // each row's time including the rows below it.
    let status = server.ok(None, &["status"]);
    let table: Vec<Vec<&str>> = status
        .lines()
        .skip_while(|l| !l.starts_with("worker 1 layers since its stack was set:"))
        .skip(2)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let names: Vec<&str> = table.iter().map(|r| r[0]).collect();
    assert_eq!(names, ["checksum", "zstd", "file"], "{status}");
    let number = |row: usize, col: usize| table[row][col].parse::<f64>().unwrap();
    assert!(
        number(0, 1) > 0.0 && number(0, 4) > 0.0,
        "writes, bytes: {status}"
    );
    assert!(number(2, 4) > 0.0, "{status}");
    assert!(
        number(0, 6) >= number(1, 6) && number(1, 6) >= number(2, 6),
        "{status}"
    );
    assert!(!status.contains("worker 2 layers"), "{status}");
    for (args, says) in [
        (
            &["stack", "set", "1", "zstd,lz4,file"][..],
            "do one layer's work",
        ),
        (
            &["stack", "set", "1", "snappy,file"][..],
            "unknown layer \"snappy\"",
        ),
        (
            &["stack", "set", "1", "cache:64XB,file"][..],
            "\"cache:64XB\": the cache's size",
        ),
        (&["stack", "set", "1", "kv"][..], "not its backend"),
        (&["stack", "set", "9", "file"][..], "no worker 9"),
    ] {
        let err = server.err(None, args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(
        row("1").ends_with("metrics,checksum,zstd,file"),
        "{}",
        row("1")
    );
    server.ok(None, &["stack", "set", "1", "file"]);
    assert!(row("1").ends_with(" file"), "{}", row("1"));
    for (name, bytes) in [
        ("before", &packed),
        ("during", &packed),
        ("random", &random),
    ] {
        check(name, bytes);
    }
    server.stop();
}

/// `labios hint`: hints are set, read, listed and removed as
/// `user.labios.*` attributes; an unknown hint, a bad value or a tier no
/// worker has is refused naming it, and on a file that holds data only
/// the hints of its copies change; a new file starts with its directory's
/// (issue 16).
#[test]
fn hints_are_set_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let put = |name: &str, bytes: &[u8]| {
        let local = dir.path().join(name.replace('/', "_"));
        std::fs::write(&local, bytes).unwrap();
        server.ok(
            None,
            &["put", local.to_str().unwrap(), &format!("/h/{name}")],
        );
    };
    let refused = |args: &[&str], says: &str| {
        let out = server.run(None, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    put("empty", b"");
    put("full", b"some bytes");
    server.ok(
        None,
        &["hint", "set", "/h/empty", "placement", "collocate:g1"],
    );
    server.ok(None, &["hint", "set", "/h/empty", "replicas", "2"]);
    server.ok(None, &["hint", "set", "/h/empty", "tier", "hdd"]);
    assert_eq!(
        server.ok(None, &["hint", "get", "/h/empty", "placement"]),
        "collocate:g1\n"
    );
    assert_eq!(
        server.ok(None, &["hint", "ls", "/h/empty"]),
        "placement collocate:g1\nreplicas 2\ntier hdd\n"
    );
    for (args, says) in [
        (
            ["/h/empty", "replicas", "9"],
            "hint replicas: \"9\" is not a value it takes (a number of copies, 1 to 8)",
        ),
        (
            ["/h/empty", "colour", "blue"],
            "user.labios.colour: no such hint",
        ),
        (["/h/empty", "tier", "tape"], "no worker serves \"tape\""),
        (
            ["/h/full", "placement", "local"],
            "/h/full: hint user.labios.placement of file id",
        ),
    ] {
        refused(&[&["hint", "set"][..], &args[..]].concat(), says);
    }
    server.ok(None, &["hint", "set", "/h/full", "replicas", "3"]);
    server.ok(None, &["hint", "set", "/h/full", "replication", "lazy"]);
    assert_eq!(
        server.ok(None, &["hint", "ls", "/h/full"]),
        "replicas 3\nreplication lazy\n"
    );
    server.ok(None, &["hint", "rm", "/h/empty", "placement"]);
    refused(
        &["hint", "get", "/h/empty", "placement"],
        "/h/empty has no hint placement",
    );
    // Nothing refused was stored.
    assert_eq!(
        server.ok(None, &["hint", "ls", "/h/empty"]),
        "replicas 2\ntier hdd\n"
    );
    // A directory's hints are where its new files start.
    put("d/seed", b"");
    server.ok(None, &["hint", "set", "/h/d", "placement", "scatter:2"]);
    put("d/new", b"new bytes");
    assert_eq!(
        server.ok(None, &["hint", "ls", "/h/d/new"]),
        "placement scatter:2\n"
    );
    assert_eq!(server.ok(None, &["hint", "ls", "/h/d/seed"]), "");
}
