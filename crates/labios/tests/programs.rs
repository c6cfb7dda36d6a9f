//! Unmodified programs on LABIOS, through `labios run` (LD_PRELOAD) and
//! through `labios mount` (FUSE): each script runs once natively on a plain
//! directory and once on LABIOS, against a `labios serve` process and
//! against a cluster (NATS, Redis, dispatcher, manager, worker processes);
//! what it prints and the files it leaves must be byte-identical.
//!
//! Needs what `bash scripts/test.sh` installs: mpich, sqlite3, nats-server,
//! redis-server, and a Python with h5py (`LABIOS_TEST_PYTHON`, default the
//! project's venv /var/tmp/labios-venv/bin/python).

mod common;

use common::deploy::{env_of, Deployed, Kind};
use common::mount::Mounted;
use common::serve::{Server, BIN};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROGRAMS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs");

/// Where the programs' LABIOS files live: the default prefix.
const PREFIX: &str = "/labios";

enum Site {
    Serve(Server),
    Cluster(Box<Deployed>),
}

/// How programs reach LABIOS.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// `labios run`, synchronous or (`true`) asynchronous labels.
    Run(bool),
    /// `labios mount`, synchronous or (`true`) asynchronous labels.
    Mount(bool),
}

struct Bench {
    site: Site,
    via: Via,
    /// The `labios mount` of a [`Via::Mount`] bench.
    mounted: Option<Mounted>,
    /// Inputs, the native run's directory and the copies taken out.
    tmp: tempfile::TempDir,
    /// A directory of the LABIOS namespace of this test alone.
    ns_dir: String,
}

fn python() -> String {
    std::env::var("LABIOS_TEST_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/labios-venv/bin/python".to_string())
}

fn check(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

impl Bench {
    async fn start(kind: Kind, via: Via, name: &str) -> Bench {
        let tmp = tempfile::tempdir().unwrap();
        let site = match kind {
            Kind::Embedded => Site::Serve(Server::start(&tmp.path().join("data"))),
            Kind::Cluster => Site::Cluster(Box::new(Deployed::start(Kind::Cluster, |_| {}).await)),
        };
        for d in ["in", "native", "out"] {
            std::fs::create_dir(tmp.path().join(d)).unwrap();
        }
        let mut b = Bench {
            site,
            via,
            mounted: None,
            tmp,
            ns_dir: format!("{PREFIX}/{name}"),
        };
        if let Via::Mount(asynchronous) = via {
            let dir = b.tmp.path().join("mnt");
            let mut cmd = b.labios(&["mount"]);
            if asynchronous {
                cmd.arg("--async");
            }
            cmd.arg(&dir);
            b.mounted = Some(Mounted::start(cmd, &dir));
            b.ns_dir = format!("{}/{name}", dir.display());
        }
        b
    }

    /// A `labios` command against this test's deployment.
    fn labios(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args);
        cmd.env_remove("LABIOS_KEY").env_remove("LABIOS_SECRET");
        match &self.site {
            Site::Serve(s) => {
                cmd.env("LABIOS_ENDPOINT", &s.endpoint);
            }
            Site::Cluster(d) => {
                cmd.envs(env_of(d.config()));
            }
        }
        cmd
    }

    fn input(&self) -> PathBuf {
        self.tmp.path().join("in")
    }

    fn out(&self) -> PathBuf {
        self.tmp.path().join("out")
    }

    /// PROGRAM... on LABIOS: under `labios run [--async]`, or as it is
    /// with ROOT in the mount.
    fn on_labios(&self, program: &[&str]) -> Command {
        match self.via {
            Via::Run(asynchronous) => {
                let mut cmd = self.labios(&["run"]);
                if asynchronous {
                    cmd.arg("--async");
                }
                cmd.arg("--").args(program);
                cmd
            }
            Via::Mount(_) => {
                let mut cmd = Command::new(program[0]);
                cmd.args(&program[1..]);
                cmd
            }
        }
    }

    /// The environment for a script whose "other process" (its
    /// `OTHER_CMD`, `OTHER_ROOT`) must be another client: on the mount,
    /// `labios run` on the test's directory `name` in the namespace; under
    /// `labios run` every process already is one.
    fn other_client(&self, name: &str) -> Vec<(OsString, OsString)> {
        let mut env = Vec::new();
        if let Via::Mount(_) = self.via {
            let run = self.labios(&[]);
            env.extend(
                run.get_envs()
                    .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
            );
            env.push(("OTHER_CMD".into(), format!("{BIN} run --").into()));
            env.push(("OTHER_ROOT".into(), format!("{PREFIX}/{name}").into()));
        }
        env
    }

    /// Runs `script` with `sh`, once natively with ROOT a plain directory
    /// and once with ROOT in LABIOS; IN holds inputs and OUT receives
    /// copies. Returns both outputs after checking they match.
    fn same(&self, script: &str) -> String {
        self.same_with(script, &[])
    }

    /// [`Bench::same`] with `env` set for the run on LABIOS only.
    fn same_with(&self, script: &str, env: &[(OsString, OsString)]) -> String {
        let native_out = self.tmp.path().join("out-native");
        std::fs::create_dir_all(&native_out).unwrap();
        let native = Command::new("sh")
            .args(["-c", script])
            .env("ROOT", self.tmp.path().join("native"))
            .env("IN", self.input())
            .env("OUT", &native_out)
            .env("PROGRAMS", PROGRAMS)
            .output()
            .unwrap();
        let native = check(&native, "native run");
        let labios = self
            .on_labios(&["sh", "-c", script])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("ROOT", &self.ns_dir)
            .env("IN", self.input())
            .env("OUT", self.out())
            .env("PROGRAMS", PROGRAMS)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&labios.stderr).into_owned();
        let labios = check(&labios, "run on LABIOS");
        assert_same_output(&labios, &native, &stderr);
        assert_same_files(&native_out, &self.out());
        labios
    }

    async fn stop(self) {
        if let Some(m) = self.mounted {
            m.stop();
        }
        match self.site {
            Site::Serve(s) => s.stop(),
            Site::Cluster(d) => d.shutdown().await,
        }
    }
}

/// Every file under `a` is under `b` with the same bytes, and no others.
/// Fails unless a program printed the same on LABIOS as on a plain
/// directory, naming the lines only one of them printed.
fn assert_same_output(labios: &str, native: &str, stderr: &str) {
    if labios == native {
        return;
    }
    let only = |a: &str, b: &str| {
        let mut rest: Vec<&str> = b.lines().collect();
        let mut out = String::new();
        for line in a.lines() {
            match rest.iter().position(|l| *l == line) {
                Some(i) => {
                    rest.remove(i);
                }
                None => out.push_str(&format!("  {line}\n")),
            }
        }
        out
    };
    panic!(
        "program output on LABIOS differs from the plain directory's\n\
         only on LABIOS:\n{}only on the plain directory:\n{}\
         whole output on LABIOS:\n{labios}\nits stderr:\n{stderr}",
        only(labios, native),
        only(native, labios)
    );
}

fn assert_same_files(a: &Path, b: &Path) {
    let list = |root: &Path| {
        common::files_under(root)
            .into_iter()
            .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
            .collect::<Vec<_>>()
    };
    let (la, lb) = (list(a), list(b));
    assert_eq!(la, lb, "files taken out differ");
    for rel in la {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        if pa.is_symlink() || pb.is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).ok(),
                std::fs::read_link(&pb).ok(),
                "{} differs",
                rel.display()
            );
            continue;
        }
        assert!(
            std::fs::read(pa).unwrap() == std::fs::read(pb).unwrap(),
            "{} differs",
            rel.display()
        );
    }
}

fn write_input(dir: &Path, name: &str, data: &[u8]) {
    std::fs::write(dir.join(name), data).unwrap();
}

/// `count` lines of pseudo-random words, for sort.
fn lines(count: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for i in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(format!("{:016x} line {i} {}\n", x, x % 977).as_bytes());
    }
    out
}

/// For each `async fn name(kind: Kind, via: Via)`, a module `name` with
/// the tests `embedded` and `cluster` under `labios run`, and
/// `mount_embedded` and `mount_cluster` on `labios mount`.
macro_rules! everywhere {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::{Kind, Via};
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$name(Kind::Embedded, Via::Run(false)).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cluster() {
                super::$name(Kind::Cluster, Via::Run(false)).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mount_embedded() {
                super::$name(Kind::Embedded, Via::Mount(false)).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mount_cluster() {
                super::$name(Kind::Cluster, Via::Mount(false)).await
            }
        }
    )*};
}

/// Programs `labios run` cannot intercept (static binaries, io_uring,
/// libaio, mmap): only on `labios mount`, on both deployments.
macro_rules! mounted {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::{Kind, Via};
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mount_embedded() {
                super::$name(Kind::Embedded, Via::Mount(false)).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mount_cluster() {
                super::$name(Kind::Cluster, Via::Mount(false)).await
            }
        }
    )*};
}

everywhere!(
    conformance,
    open_files,
    unlinked_open,
    tree_exerciser,
    one_file_exerciser,
    copies,
    locks,
    sqlite_two_writers,
    special_files,
    directory_link_counts,
    fallocate_modes,
    unbuffered_stdio,
    owners_modes_times,
    bad_pointers,
    dot_names,
    directory_rename,
    own_changes_through_the_cache,
    extended_attributes,
    symlinks,
    hard_links,
    fio_engines,
    concurrent_appends,
    coreutils,
    descriptor_games,
    tar_tree,
    python_file_io,
    forked_children,
    sqlite,
    hdf5,
    mpi
);

const COREUTILS: &str = r#"
set -e
mkdir -p "$ROOT/c"
cp "$IN/big.bin" "$ROOT/c/big.bin"
cat "$ROOT/c/big.bin" | sha256sum
for bs in 4096 65536 1M; do
  dd if="$IN/big.bin" of="$ROOT/c/dd.$bs" bs=$bs status=none
done
dd if="$IN/big.bin" of="$ROOT/c/dd.512" bs=512 count=300 status=none
dd if="$IN/small.bin" of="$ROOT/c/dd.4096" bs=1000 seek=3 conv=notrunc status=none
dd if="$ROOT/c/dd.65536" of="$OUT/dd.back" bs=3000 status=none
cd "$ROOT/c"
sha256sum big.bin dd.*
sort "$IN/lines.txt" > sorted.txt
sort -r sorted.txt -o rsorted.txt
sha256sum < sorted.txt
head -c 300 rsorted.txt
echo
printf 'one\n' > log.txt
printf 'two\n' >> log.txt
cat log.txt
ls
wc -c big.bin sorted.txt
cp big.bin rsorted.txt "$OUT/"
mv log.txt renamed.txt
rm dd.512
ls
"#;

async fn coreutils(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "coreutils").await;
    write_input(&b.input(), "big.bin", &common::data(1, (2 << 20) + 4321));
    write_input(&b.input(), "small.bin", &common::data(2, 10_000));
    write_input(&b.input(), "lines.txt", &lines(40_000));
    let out = b.same(COREUTILS);
    assert!(out.contains("renamed.txt"), "{out}");
    b.stop().await;
}

/// The same programs with asynchronous labels: close waits for them.
async fn coreutils_async(via: Via) {
    let b = Bench::start(Kind::Embedded, via, "coreutils-async").await;
    write_input(&b.input(), "big.bin", &common::data(3, (2 << 20) + 17));
    write_input(&b.input(), "small.bin", &common::data(4, 10_000));
    write_input(&b.input(), "lines.txt", &lines(20_000));
    b.same(COREUTILS);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coreutils_async_run() {
    coreutils_async(Via::Run(true)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coreutils_async_mount() {
    coreutils_async(Via::Mount(true)).await
}

/// 4 processes append 2,000 records of 64 bytes each to one file, and 4
/// shell loops append lines with `>>`: every record and line is there
/// exactly once (issue 12: appends were a stat then a write, and lost
/// two thirds of the records).
async fn concurrent_appends(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "appends").await;
    let out = b.same(
        r#"
set -e
mkdir -p "$ROOT"
for w in 1 2 3 4; do python3 "$PROGRAMS/appender.py" write "$ROOT/records" $w 2000 & done
wait
python3 "$PROGRAMS/appender.py" check "$ROOT/records" 4 2000
for w in 1 2 3 4; do
  (i=0; while [ $i -lt 200 ]; do echo "loop $w line $i" >> "$ROOT/lines"; i=$((i+1)); done) &
done
wait
echo "lines $(wc -l < "$ROOT/lines") distinct $(sort -u "$ROOT/lines" | wc -l)"
"#,
    );
    assert!(
        out.contains("records 8000 missing 0 stray 0 twice 0\nlines 800 distinct 800"),
        "{out}"
    );
    b.stop().await;
}

/// `exec 3<>file` in dash and bash, redirections onto every low number,
/// and a program that closes every descriptor it does not know and dup2s
/// onto every number in use (issue 12: the session's runtime took number
/// 3, the shell dup2'ed the file onto it, and the write hung for ever).
async fn descriptor_games(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "fds").await;
    let out = b.same(
        r#"
set -e
mkdir -p "$ROOT"
for shell in sh bash; do
  $shell -c 'exec 3<>"$1/f"; printf X >&3; exec 3>&-; cat "$1/f"; echo' - "$ROOT"
  $shell -c 'for fd in 3 4 5 6 7 8 9; do eval "exec $fd>\"$1/g$fd\""; done
    for fd in 3 4 5 6 7 8 9; do eval "printf $fd >&$fd; exec $fd>&-"; done
    cat "$1/g3" "$1/g6" "$1/g9"; echo' - "$ROOT"
done
python3 "$PROGRAMS/fd_games.py" "$ROOT/h"
"#,
    );
    assert!(
        out.ends_with("X\n369\nX\n369\nbefore closed-all closerange dup2-everywhere\n"),
        "{out}"
    );
    b.stop().await;
}

async fn tar_tree(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "tar").await;
    let tree = b.input().join("tree");
    for (i, dir) in ["", "a", "a/b", "a/b/c", "empty", "d"].iter().enumerate() {
        std::fs::create_dir_all(tree.join(dir)).unwrap();
        for j in 0..3 {
            let len = [0, 1, 4096, 65_537, 300_001][(i + j) % 5];
            write_input(
                &tree.join(dir),
                &format!("f{j}.dat"),
                &common::data((i * 10 + j) as u64, len),
            );
        }
    }
    std::fs::remove_dir_all(tree.join("empty")).unwrap();
    std::fs::create_dir(tree.join("empty")).unwrap();
    let script = r#"
set -e
mkdir -p "$ROOT"
det="--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner"
tar -cf "$ROOT/t.tar" -C "$IN/tree" $det .
tar -tvf "$ROOT/t.tar"
mkdir -p "$ROOT/x"
tar -xf "$ROOT/t.tar" -C "$ROOT/x"
diff -r "$IN/tree" "$ROOT/x" && echo trees equal
tar -cf "$OUT/again.tar" -C "$ROOT/x" $det .
cp "$ROOT/t.tar" "$OUT/t.tar"
find "$ROOT/x" -type f | sed "s|$ROOT||" | sort
"#;
    let out = b.same(script);
    assert!(out.contains("trees equal"), "{out}");
    b.stop().await;
}

async fn python_file_io(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "python").await;
    let out = b.same(r#"python3 "$PROGRAMS/file_io.py" "$ROOT""#);
    assert!(
        out.contains("fork parent-before;child;parent-after"),
        "{out}"
    );
    b.stop().await;
}

/// Children forked by a process whose LABIOS runtime is running connect
/// anew; they once crashed or hung inheriting the parent's parked threads.
async fn forked_children(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "forks").await;
    for _ in 0..3 {
        let out = b.same(r#"python3 "$PROGRAMS/forks.py" "$ROOT""#);
        assert!(out.starts_with("failed children 0\n"), "{out}");
    }
    b.stop().await;
}

async fn sqlite(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "sqlite").await;
    let mut sql =
        String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);\nBEGIN;\n");
    for i in 0..10_000 {
        sql.push_str(&format!(
            "INSERT INTO t VALUES({i}, 'row-{i}-{}', {});\n",
            i * 7 % 13,
            i as f64 * 1.5
        ));
    }
    sql.push_str("COMMIT;\nCREATE INDEX t_name ON t(name);\n");
    write_input(&b.input(), "load.sql", sql.as_bytes());
    let script = r#"
set -e
mkdir -p "$ROOT/db"
sqlite3 "$ROOT/db/test.db" < "$IN/load.sql"
sqlite3 "$ROOT/db/test.db" "SELECT count(*), sum(v), min(name), max(name) FROM t;"
sqlite3 "$ROOT/db/test.db" "SELECT id % 13 AS k, count(*) FROM t GROUP BY k ORDER BY k;"
sqlite3 "$ROOT/db/test.db" "UPDATE t SET v = -v WHERE id < 100; DELETE FROM t WHERE id >= 9990;"
sqlite3 "$ROOT/db/test.db" "SELECT count(*), sum(v) FROM t WHERE name LIKE 'row-12%'; PRAGMA integrity_check;"
cp "$ROOT/db/test.db" "$OUT/copy.db"
sqlite3 "$OUT/copy.db" "SELECT count(*) FROM t;"
ls "$ROOT/db"
"#;
    let out = b.same(script);
    assert!(out.contains("10000|"), "{out}");
    assert!(out.contains("ok\n"), "{out}");
    b.stop().await;
}

async fn hdf5(kind: Kind, via: Via) {
    let py = python();
    let probe = Command::new(&py).args(["-c", "import h5py"]).output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "{py} cannot import h5py: run `bash scripts/python-tests.sh` or set LABIOS_TEST_PYTHON"
    );
    let b = Bench::start(kind, via, "hdf5").await;
    let script = format!(
        r#"set -e; mkdir -p "$ROOT/h5"; {py} "$PROGRAMS/h5.py" "$ROOT/h5"; cp "$ROOT/h5/data.h5" "$OUT/data.h5"; {py} -c "import h5py,sys; print(h5py.File(sys.argv[1])['sim/ids'][-1])" "$OUT/data.h5""#
    );
    let out = b.same(&script);
    assert!(out.contains("step 42 shape (400, 500)"), "{out}");
    b.stop().await;
}

async fn mpi(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "mpi").await;
    let exe = b.input().join("mpi_io");
    let cc = Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(format!("{PROGRAMS}/mpi_io.c"))
        .output()
        .expect("mpicc (mpich) is installed: bash scripts/services.sh install");
    check(&cc, "mpicc");
    let script = r#"
set -e
mkdir -p "$ROOT/mpi"
mpiexec -n 4 "$IN/mpi_io" "$ROOT/mpi"
ls "$ROOT/mpi"
cp "$ROOT/mpi/cm1.out" "$ROOT/mpi/hacc.3" "$ROOT/mpi/cm1.mpiio" "$OUT/"
"#;
    let out = b.same(script);
    assert!(
        out.contains("ranks 4,") && out.contains("mismatches 0"),
        "{out}"
    );
    b.stop().await;
}

/// A program that never touches a LABIOS path behaves exactly as without
/// the library, and does not even connect (the endpoint here is dead).
#[test]
fn programs_outside_labios_are_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"set -e; cd "$D"; printf 'x%.0s' $(seq 1 5000) > a; cp a b; sha256sum a b; ls -la /proc/self/fd | wc -l; sort -r a b | wc -c; python3 -c 'import os; print(sorted(os.listdir(".")))'; cat /nonexistent 2>&1 || true"#;
    let run = |preload: bool| {
        let d = tmp.path().join(if preload { "p" } else { "n" });
        std::fs::create_dir(&d).unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).env("D", &d);
        if preload {
            cmd.env("LD_PRELOAD", preload_library())
                .env("LABIOS_ENDPOINT", tmp.path().join("nobody-here.sock"));
        }
        let out = cmd.output().unwrap();
        (
            check(&out, "sh"),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (native, _) = run(false);
    let (preloaded, stderr) = run(true);
    assert_eq!(preloaded, native);
    assert_eq!(stderr, "", "the library printed something");
}

fn preload_library() -> PathBuf {
    let lib = Path::new(BIN).with_file_name("liblabios_preload.so");
    assert!(
        lib.is_file(),
        "{} is missing: `cargo build --workspace` builds it",
        lib.display()
    );
    lib
}

/// Without any `labios serve`, `labios run` starts the embedded runtime for
/// the program and stops it cleanly after; the data stays for the next run.
#[test]
fn run_starts_the_embedded_runtime_when_nothing_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = |script: &str| {
        Command::new(BIN)
            .args(["run", "--", "sh", "-c", script])
            .env("LABIOS_DATA_DIR", &data)
            .env_remove("LABIOS_ENDPOINT")
            .output()
            .unwrap()
    };
    let first = run("echo persisted > /labios/note.txt");
    check(&first, "first run");
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(
        said.contains("running an embedded runtime on") && said.contains(&*data.to_string_lossy()),
        "the fallback is said on stderr: {said}"
    );
    assert_eq!(
        check(&run("cat /labios/note.txt"), "second run"),
        "persisted\n"
    );
    let out = run("cat /labios/none.txt");
    assert_eq!(out.status.code(), Some(1), "exit status is the program's");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No such file or directory"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A named endpoint that nothing answers is an error, never a runtime
    // started elsewhere that would keep the program's data.
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let missing = tmp.path().join("no-such.sock");
    let refused = Command::new(BIN)
        .args(["run", "--", "sh", "-c", "echo lost > /labios/x"])
        .current_dir(&cwd)
        .env_remove("LABIOS_DATA_DIR")
        .env("LABIOS_ENDPOINT", &missing)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&format!("nothing answers at {}", missing.display())),
        "{said}"
    );
    assert_eq!(
        std::fs::read_dir(&cwd).unwrap().count(),
        0,
        "no data directory made"
    );
    let bad = Command::new(BIN)
        .args(["run", "--prefix", "relative", "--", "true"])
        .env("LABIOS_DATA_DIR", &data)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid prefix \"relative\""));
}

mounted!(
    git,
    sqlite_wal,
    static_busybox,
    memory_mapped,
    df,
    pipes_and_sockets
);

/// git init, add, commit, log, fsck and clone of a repository in LABIOS
/// (mmap of pack files and index; fixed dates make the hashes the same).
async fn git(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "git").await;
    let script = r#"
set -e
export GIT_AUTHOR_DATE=@1700000000 GIT_COMMITTER_DATE=@1700000000 HOME="$IN"
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@labios GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@labios
mkdir -p "$ROOT"
cd "$ROOT"
git init -q -b main repo
cd repo
for i in 1 2 3; do
  seq 1 $((i * 5000)) > "file$i.txt"
  mkdir -p "d$i" && cp "$IN/blob.bin" "d$i/blob.bin"
  git add -A && git commit -qm "commit $i"
done
git gc -q
git log --format='%H %s'
git fsck --full 2>&1
cd ..
git clone -q repo clone
git -C clone log --format='%H %s' | head -1
git -C clone ls-files
"#;
    write_input(&b.input(), "blob.bin", &common::data(7, 300_000));
    let out = b.same(script);
    assert!(
        out.contains("commit 3\n") && out.contains("d3/blob.bin"),
        "{out}"
    );
    b.stop().await;
}

/// SQLite in WAL mode (a shared memory map of the -shm file) with 10,000
/// rows, read by a second connection while a writer has the WAL open.
async fn sqlite_wal(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "wal").await;
    let script = r#"
set -e
mkdir -p "$ROOT"
sqlite3 "$ROOT/w.db" "PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<10000)
INSERT INTO t SELECT x, printf('value-%06d', x * 7) FROM c;"
sqlite3 "$ROOT/w.db" "PRAGMA journal_mode; UPDATE t SET v = 'changed' WHERE id % 100 = 0;
SELECT count(*), sum(id), count(DISTINCT v) FROM t; PRAGMA integrity_check;"
sqlite3 "$ROOT/w.db" "PRAGMA wal_checkpoint(TRUNCATE);" > /dev/null
cp "$ROOT/w.db" "$OUT/w.db"
sqlite3 "$OUT/w.db" "SELECT count(*) FROM t WHERE v = 'changed';"
"#;
    let out = b.same(script);
    assert!(out.contains("wal\n") && out.contains("10000|50005000|") && out.contains("ok\n"));
    b.stop().await;
}

/// fio writing random 4 KiB and 64 KiB blocks with crc32c verification (a
/// mismatch fails fio): psync, pvsync2 (preadv2/pwritev2) and libaio
/// everywhere, io_uring on the mount (under `labios run` it fails with
/// EPERM, which `raw_system_calls` checks).
async fn fio_engines(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "fio").await;
    let engines = match via {
        Via::Run(_) => "psync pvsync2 libaio",
        Via::Mount(_) => "psync pvsync2 libaio io_uring",
    };
    let script = format!(
        r#"
set -e
mkdir -p "$ROOT"
for engine in {engines}; do
  for job in 4k:1M 64k:4M; do
    bs=${{job%:*}}
    fio --name=v --filename="$ROOT/fio-$engine-$bs" --size=${{job#*:}} --bs=$bs --rw=randwrite \
      --ioengine=$engine --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1 \
      --output=/dev/null
    echo "$engine $bs verified $(stat -c %s "$ROOT/fio-$engine-$bs")"
  done
done
"#
    );
    let out = b.same(&script);
    assert_eq!(out.lines().count(), 2 * engines.split(' ').count(), "{out}");
    b.stop().await;
}

/// A statically linked program (no C library to intercept) copies, lists
/// and reads back files.
async fn static_busybox(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "busybox").await;
    write_input(&b.input(), "big.bin", &common::data(8, (1 << 20) + 333));
    let script = r#"
set -e
busybox mkdir -p "$ROOT/b"
busybox cp "$IN/big.bin" "$ROOT/b/big.bin"
busybox cat "$ROOT/b/big.bin" | sha256sum
busybox sh -c 'echo one > "$1/t"; echo two >> "$1/t"; busybox cat "$1/t"' - "$ROOT/b"
busybox ls "$ROOT/b"
busybox cp "$ROOT/b/big.bin" "$OUT/big.bin"
"#;
    let out = b.same(script);
    assert!(out.contains("one\ntwo\n"), "{out}");
    b.stop().await;
}

async fn memory_mapped(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "mmap").await;
    let script = format!(
        r#"set -e; {} "$PROGRAMS/mapped.py" "$ROOT"; cp "$ROOT/mapped.bin" "$ROOT/m.dat" "$OUT/""#,
        python()
    );
    let out = b.same(&script);
    assert!(out.contains("file keeps b'\\x00\\x01"), "{out}");
    assert!(
        out.contains("with an appender b'SHARED\\x06' b'\\xffEND' 256003"),
        "{out}"
    );
    b.stop().await;
}

/// `df` shows the worker pool: the deployment's capacity, named labios.
async fn df(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "df").await;
    let out = b
        .on_labios(&[
            "df",
            "-P",
            "-B1",
            &b.mounted.as_ref().unwrap().dir.to_string_lossy(),
        ])
        .output()
        .unwrap();
    let out = check(&out, "df");
    let fields: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(fields[0], "labios", "{out}");
    let size: u64 = fields[1].parse().unwrap();
    assert!(size > 0, "{out}");
    b.stop().await;
}

/// `labios mount` with nothing serving runs the embedded runtime for the
/// mount; `labios umount` ends it cleanly, and what was written is there
/// when it is mounted again. A mount point that is not a directory is an
/// error that names it.
#[test]
fn mount_ends_on_umount_and_keeps_what_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = tmp.path().join("mnt");
    let mount = || {
        let mut cmd = Command::new(BIN);
        cmd.arg("mount")
            .arg(&dir)
            .env("LABIOS_DATA_DIR", &data)
            .env_remove("LABIOS_ENDPOINT");
        Mounted::start(cmd, &dir)
    };
    let m = mount();
    assert!(
        m.log().contains("running an embedded runtime on"),
        "{}",
        m.log()
    );
    std::fs::write(dir.join("kept.txt"), b"kept across mounts\n").unwrap();
    let umount = Command::new(BIN).arg("umount").arg(&dir).output().unwrap();
    check(&umount, "labios umount");
    m.ended();
    let m = mount();
    assert_eq!(
        std::fs::read(dir.join("kept.txt")).unwrap(),
        b"kept across mounts\n"
    );
    m.stop();
    let file = tmp.path().join("plain");
    std::fs::write(&file, b"").unwrap();
    let refused = Command::new(BIN)
        .arg("mount")
        .arg(&file)
        .env("LABIOS_DATA_DIR", &data)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&format!("{} is not a directory", file.display())),
        "{said}"
    );
}

/// Calls that bypass the C library's functions (raw system calls) fail
/// on a LABIOS descriptor under `labios run` instead of reading its
/// placeholder as the file (issue 12: fio with libaio read `LABIOS-FD
/// 1...` as data), and preadv2/pwritev2 are intercepted.
async fn raw_system_calls(kind: Kind) {
    let b = Bench::start(kind, Via::Run(false), "raw").await;
    let out = b
        .on_labios(&["python3", &format!("{PROGRAMS}/raw_calls.py"), &b.ns_dir])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let out = check(&out, "raw_calls.py");
    assert_eq!(
        out,
        "raw read EBADF\nraw pread EBADF\nraw write EPERM\nposition 0\npwritev2 3\n\
         preadv2 12 b'LABios bytes'\nnowait EAGAIN\npreadv2 at the position 3 b'os ' 7\n\
         mmap ENODEV\nfile b'LABios bytes'\n"
    );
    assert!(
        said.contains("mmap of") && said.contains("labios mount"),
        "{said}"
    );
    // io_uring bypasses the C library: fio fails, and says why.
    let uring = b
        .on_labios(&[
            "fio",
            "--name=u",
            &format!("--filename={}/uring", b.ns_dir),
            "--size=256k",
            "--bs=64k",
            "--rw=write",
            "--ioengine=io_uring",
        ])
        .output()
        .unwrap();
    assert!(!uring.status.success());
    let said = String::from_utf8_lossy(&uring.stdout);
    assert!(said.contains("Operation not permitted"), "{said}");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_system_calls_embedded() {
    raw_system_calls(Kind::Embedded).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_system_calls_cluster() {
    raw_system_calls(Kind::Cluster).await
}

/// Symbolic links (to a file, to a directory, absolute to the host,
/// dangling): rsync -a of a tree with them into LABIOS and out again (rsync
/// walks to its destination from `/` with `openat`), tar of it and back,
/// and following them; compared with `diff -r --no-dereference` and
/// `find -printf`.
async fn symlinks(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "links").await;
    let tree = b.input().join("tree");
    std::fs::create_dir_all(tree.join("d/e")).unwrap();
    write_input(&tree.join("d"), "f.txt", b"through the link\n");
    write_input(&tree.join("d/e"), "g.bin", &common::data(9, 70_000));
    for (target, link) in [
        ("d/f.txt", "rel"),
        ("d", "dlink"),
        ("/etc/hostname", "abs"),
        ("nowhere", "dangling"),
        ("../f.txt", "d/e/up"),
    ] {
        std::os::unix::fs::symlink(target, tree.join(link)).unwrap();
    }
    let script = r#"
set -e
mkdir -p "$ROOT"
det="--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner"
rsync -a "$IN/tree/" "$ROOT/tree/"
rsync -a "$ROOT/tree/" "$OUT/tree/"
diff -r --no-dereference "$IN/tree" "$OUT/tree" && echo rsync trees equal
cd "$ROOT/tree"
find . -printf '%y %p %l\n' | sort
find . -type f -printf '%p %s\n' | sort
readlink rel dlink abs dangling d/e/up
cat rel $THROUGH d/e/up
test -L dangling && ! test -e dangling && echo dangling is a link to nothing
tar -cf "$OUT/t.tar" -C "$ROOT/tree" $det .
tar -tvf "$OUT/t.tar"
mkdir "$ROOT/x"
tar -xf "$OUT/t.tar" -C "$ROOT/x"
diff -r --no-dereference "$IN/tree" "$ROOT/x" && echo tar trees equal
mv rel renamed
readlink renamed
ln -sf d/e/g.bin renamed
cmp renamed "$IN/tree/d/e/g.bin" && echo replaced link followed
rm renamed dangling
ls
"#;
    // A link in the middle of a path is followed by the kernel (the
    // mount), not under `labios run`.
    let through = match via {
        Via::Mount(_) => "dlink/f.txt",
        Via::Run(_) => "d/f.txt",
    };
    let out = b.same(&script.replace("$THROUGH", through));
    assert!(
        out.contains("rsync trees equal") && out.contains("tar trees equal"),
        "{out}"
    );
    assert!(
        out.contains("through the link\nthrough the link\nthrough the link\n"),
        "{out}"
    );
    b.stop().await;
}

/// Directories rename in one step with everything in them, and replace
/// only an empty directory, with POSIX's errors otherwise (ENOTEMPTY,
/// ENOTDIR, EISDIR, EINVAL); `mv` of a directory works. Under `labios run`
/// a directory rename used to be EXDEV (issue 18).
async fn directory_rename(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "dirmv").await;
    let out = b.same(
        r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/dir_rename.py" "$ROOT/t"
mkdir -p "$ROOT/m/src/in" && echo x > "$ROOT/m/src/in/f" && mv "$ROOT/m/src" "$ROOT/m/dst" && cat "$ROOT/m/dst/in/f" && ls "$ROOT/m""#,
    );
    assert!(
        out.contains("rename moved empty ok\nrename empty full ENOTEMPTY\n"),
        "{out}"
    );
    assert!(
        out.contains("/renamed/b2/c [] ['deep']\n  deep deep\n"),
        "{out}"
    );
    assert!(out.ends_with("x\ndst\n"), "{out}");
    b.stop().await;
}

/// `rmdir`, `unlink` and `rename` of a path ending in `.` or `..` get the
/// kernel's errors (EINVAL, ENOTEMPTY, EISDIR, EBUSY) and change nothing:
/// `rmdir("d/e/.")` used to remove `d/e` under `labios run` (issue 18). A
/// path through a file is ENOTDIR and a name over 255 bytes ENAMETOOLONG
/// (they were ENOENT and EINVAL).
async fn dot_names(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "dots").await;
    let out = b.same(r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/dots.py" "$ROOT/t""#);
    assert!(out.contains("rmdir /empty/sub/. EINVAL\n"), "{out}");
    assert!(out.contains("/empty ['sub'] []\n"), "{out}");
    b.stop().await;
}

/// FIFOs, devices, sockets and mknod'ed files are names in the namespace
/// with their type, mode and device number, as a plain directory shows
/// them (programs/specials.py).
async fn special_files(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "specials").await;
    let out = b.same(r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/specials.py" "$ROOT/t""#);
    assert!(out.contains("null crw-r--r-- 1 1,3\n"), "{out}");
    assert!(out.contains("fifo prw-r--r-- 1 0\n"), "{out}");
    b.stop().await;
}

/// A directory's `st_nlink` is 2 plus its subdirectories, through mkdir,
/// mkdir -p, rename to another parent and rmdir, as in a plain directory;
/// files, FIFOs and symbolic links do not count.
async fn directory_link_counts(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "dirlinks").await;
    let out = b.same(
        r#"set -e
mkdir -p "$ROOT/a/b/c" "$ROOT/a/d"
cd "$ROOT"
links() { for d in "$@"; do printf '%s:%s ' "$d" "$(stat -c %h "$d")"; done; echo; }
links . a a/b a/b/c a/d
touch a/f && mkfifo a/p && ln -s b a/l && ln a/f a/g
links a
mv a/d a/b/
links a a/b
rmdir a/b/c
links a a/b
mv a/b e
links . a e
"#,
    );
    assert!(out.contains(".:3 a:4 a/b:3 a/b/c:2 a/d:2 \n"), "{out}");
    assert!(out.contains(".:4 a:2 e:3 \n"), "{out}");
    b.stop().await;
}

/// util-linux's fallocate(1) with every mode LABIOS implements: growth
/// (mode 0), space past the end (KEEP_SIZE), holes inside and across the
/// end (PUNCH_HOLE), zeroed ranges that grow the file or keep its size
/// (ZERO_RANGE), on a file written before; each leaves the size and bytes a
/// plain directory's file has.
async fn fallocate_modes(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "fallocate").await;
    let out = b.same(
        r#"set -e
mkdir -p "$ROOT" && cd "$ROOT"
yes abcdefghijklmnopq | head -c 300000 > f
at() { dd if=f bs=1 skip="$1" count=6 status=none | od -An -tx1 | tr -d ' '; }
show() { echo "$1: $(stat -c %s f) $(md5sum < f | cut -c1-16) $(at "$2")"; }
show written 4090
fallocate -l 400000 f; show grown 299998
fallocate -n -o 0 -l 1000000 f; show kept 0
fallocate -p -o 4096 -l 8192 f; show punched 4094
fallocate -p -o 299000 -l 200000 f; show "punched across the end" 298998
fallocate -z -o 100000 -l 5000 f; show zeroed 104998
fallocate -z -o 399000 -l 10000 f; show "zeroed past the end" 408994
fallocate -z -n -o 405000 -l 10000 f; show "zeroed, size kept" 404998
printf 'tail' >> f; show appended 408998
"#,
    );
    assert!(
        out.contains("punched: 400000 ") && out.contains(" 696a00000000\n"),
        "{out}"
    );
    assert!(out.contains("zeroed past the end: 409000 "), "{out}");
    b.stop().await;
}

/// The randomized tree exerciser (programs/tree.py): four processes at
/// once make, link, symlink, rename, chmod, truncate and remove in one
/// tree, each in its own part; every outcome and the whole tree (kinds,
/// modes, link counts, sizes, contents, link targets) must be what the
/// same seed makes on a plain directory. `EXERCISE_TREE_SEED` replays one.
async fn tree_exerciser(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "tree").await;
    let seed = exerciser_seed("tree exerciser", "EXERCISE_TREE_SEED", 1 << 32);
    let out = b.same(&format!(
        r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/tree.py" {seed} 4 300 "$ROOT/t""#
    ));
    assert!(out.starts_with("failed 0\n"), "{out}");
    b.stop().await;
}

/// An exerciser's seed: the variable `var` if set (replaying a run), else
/// a fresh one below `below`; printed, so that a failure can be replayed.
/// (Not `LABIOS_*`: those are configuration.)
fn exerciser_seed(what: &str, var: &str, below: u64) -> u64 {
    let seed = std::env::var(var)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| fastrand::u64(..below));
    println!("{what}: seed {seed} ({var}={seed} replays it)");
    seed
}

/// The randomized one-file exerciser (programs/exerciser.py): writes,
/// reads, truncates, fallocate modes, copy_file_range within the file and,
/// on the mount, writes through a shared mapping, each checked against a
/// model in memory; the same seed on a plain directory must print the same.
/// 100,000 operations on the embedded mount, 10,000 elsewhere; the seed is
/// printed and `EXERCISE_FILE_SEED` replays it.
async fn one_file_exerciser(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "exerciser").await;
    let seed = exerciser_seed("one-file exerciser", "EXERCISE_FILE_SEED", 1 << 48);
    let (count, mmap) = match (kind, via) {
        (Kind::Embedded, Via::Mount(_)) => (100_000, "mmap"),
        (_, Via::Mount(_)) => (10_000, "mmap"),
        _ => (10_000, ""),
    };
    let out = b.same(&format!(
        r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/exerciser.py" {seed} {count} "$ROOT/one" {mmap}"#
    ));
    assert!(out.contains("\nsize "), "{out}");
    b.stop().await;
}

/// copy_file_range between LABIOS files is a copy of labels
/// (programs/copies.py): whole files with holes, ranges, short counts,
/// one file, cp, and the kernel's errors, against a plain directory.
async fn copies(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "copies").await;
    let out = b.same(r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/copies.py" "$ROOT""#);
    assert!(
        out.contains("whole copied 3000012 3000012 22da54ee6374\n"),
        "{out}"
    );
    assert!(out.contains("same file overlapping EINVAL\n"), "{out}");
    b.stop().await;
}

/// The POSIX conformance suite, as root (programs/conformance.py): each
/// call's success effects and listed errors, identical to a plain
/// directory's. The program starts in an empty host directory and makes
/// links, a FIFO, a directory and a file by relative names after `cd` into
/// LABIOS: nothing may appear on the host.
async fn conformance(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "conformance").await;
    let host = b.tmp.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let out = b.same(&format!(
        r#"set -e
cd "{}"
mkdir -p "$ROOT"
python3 "$PROGRAMS/conformance.py" "$ROOT"
cd "$ROOT/open"
ln -s f rel-link
ln f rel-hard
mkfifo rel-fifo
mkdir rel-dir
touch rel-file
stat -c '%n %F %h' rel-*"#,
        host.display()
    ));
    for line in [
        "rmdir: dir/.: EINVAL",
        "rename: a file over a directory: EISDIR",
        "rename: a directory over a non-empty one: ENOTEMPTY",
        "open: a 256-byte name: ENAMETOOLONG",
        "open: through a file: ENOTDIR",
        "chown: set-id bits after: file 0o755 links 1 size 5 mine",
        "rel-fifo fifo 1",
        "rel-hard regular empty file 2",
        "rel-link symbolic link 1",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    let left: Vec<_> = std::fs::read_dir(&host).unwrap().collect();
    assert!(left.is_empty(), "the program left {left:?} on the host");
    b.stop().await;
}

const CONFORMANCE_AS_NOBODY: &str = r#"
set -e
mkdir -p "$ROOT/u"
chmod 777 "$ROOT/u"
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 "$PROGRAMS/conformance.py" "$ROOT/u/c"
"#;

/// The conformance suite as `nobody` (65534), whose requests `labios
/// serve` checks as that user's: chown to others, devices and root's group
/// are EPERM as on ext4.
async fn conformance_as_another_user(kind: Kind, mount: bool) {
    let out = same_for_other_users(kind, mount, CONFORMANCE_AS_NOBODY).await;
    for line in [
        "chown: to 1234:5678: EPERM",
        "chown: to root's group: EPERM",
        "mknod: a character device: EPERM",
        "open: O_WRONLY of a 0444 file: EACCES",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_as_another_user_under_run() {
    conformance_as_another_user(Kind::Embedded, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_as_another_user_on_mount() {
    conformance_as_another_user(Kind::Embedded, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_as_another_user_through_a_cluster_gateway() {
    conformance_as_another_user(Kind::Cluster, false).await
}

/// An open descriptor keeps naming the file it opened when another
/// process renames it, its directory, or removes another of its names and
/// puts a new file at the path (programs/open_files.py): reads, writes,
/// appends, fstat, ftruncate and fchmod go to the opened file, never to
/// the new one. On the mount the other process is another client (under
/// `labios run`), whose changes the mount learns only from LABIOS.
async fn open_files(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "open").await;
    let env = b.other_client("open");
    let script = r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/open_files.py" "$ROOT""#;
    let out = b.same_with(script, &env);
    for line in [
        "read after rename: b'first file\\n'",
        "  moved: b'FIRST fi' mode 0o600 links 1",
        "  log.old: b'line 1\\nline 2\\n' mode 0o644 links 1",
        "  h2: b'Linked\\n' mode 0o644 links 1",
        "  d2/f: b'in a directory!' mode 0o644 links 1",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    b.stop().await;
}

/// A file removed while open lives on until its last descriptor closes,
/// then its space is freed (programs/unlinked_open.py): removed by its own
/// process, by another (another client on the mount) and replaced by a
/// rename; fstat shows no link, reads and writes go on, a new file takes
/// the path.
async fn unlinked_open(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "unlinked").await;
    let workers = match &b.site {
        Site::Serve(_) => b.tmp.path().join("data").join("workers"),
        Site::Cluster(d) => d.data_dir().join("workers"),
    };
    let before = allocated(&workers);
    let env = b.other_client("unlinked");
    let script = r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/unlinked_open.py" "$ROOT""#;
    let out = b.same_with(script, &env);
    for line in [
        "fstat after unlink: links 0 size 1048576",
        "reads back: True",
        "written after unlink: 1048580 b'tail'",
        "through a dup after close: b'\\x00\\x01\\x02\\x03'",
        "after their unlink: links 0 b'KEPT while open\\n'",
        "after a rename over it: links 0 b'old a\\n'",
        "the child reads: b'inherited\\n' links 0",
        "left: []",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    // Every file is gone: the workers give their space back (deletes run
    // in the background after the last close).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let now = allocated(&workers);
        if now <= before + (64 << 10) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "workers still hold {now} bytes, {before} before the files were made"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    b.stop().await;
}

/// Bytes allocated to the files under `dir`.
fn allocated(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        total += if meta.is_dir() {
            allocated(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    total
}

/// fcntl, OFD and flock locks between processes (programs/locks.py):
/// conflicts, shared read locks, F_GETLK, splits, close releasing the
/// process's locks, a wait granted on release, EDEADLK, and the locks of a
/// killed process released.
async fn locks(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "locks").await;
    let out = b.same(r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/locks.py" "$ROOT""#);
    for line in [
        "helper W 50-59: EAGAIN",
        "helper GETLK W 0-: W 0 100 parent",
        "helper sees: released",
        "outcomes: ['EDEADLK', 'ok']",
        "OFD W 0-9 on another: EAGAIN",
        "parent SETLKW W 0-: ok",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    b.stop().await;
}

/// Two sqlite3 processes insert at once, each row its own transaction,
/// waiting on each other's locks (busy timeout): every row of both is
/// there and the database is intact. WAL on the mount (its index is a
/// shared memory map), a rollback journal under `labios run`.
async fn sqlite_two_writers(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "writers").await;
    let journal = match via {
        Via::Mount(_) => "WAL",
        Via::Run(_) => "DELETE",
    };
    let script = format!(
        r#"set -e
mkdir -p "$ROOT"
sqlite3 "$ROOT/two.db" "PRAGMA journal_mode={journal}; CREATE TABLE t(w INTEGER, i INTEGER);" > /dev/null
writer() {{
  for i in $(seq 1 150); do echo "INSERT INTO t VALUES($1, $i);"; done |
    sqlite3 -cmd ".timeout 120000" "$ROOT/two.db"
}}
writer 1 & a=$!
writer 2 & b=$!
wait $a
wait $b
sqlite3 "$ROOT/two.db" "SELECT w, count(*), sum(i) FROM t GROUP BY w; PRAGMA integrity_check;"
"#
    );
    let out = b.same(&script);
    assert_eq!(out, "1|150|11325\n2|150|11325\nok\n");
    b.stop().await;
}

/// `od -j N -N M` unbuffers its input stream and skips by reading: each
/// fread is one read of what it asks for (glibc reads an unbuffered
/// fopencookie stream a byte at a time: minutes for 300 KB), and two
/// programs sharing one descriptor each consume exactly their bytes.
async fn unbuffered_stdio(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "unbuffered").await;
    let out = b.same(
        r#"set -e
mkdir -p "$ROOT" && cd "$ROOT"
yes abcdefghijklmnopq | head -c 300000 > f
timeout 60 od -An -tx1 -j 299990 -N 6 f
(od -An -c -N 4; od -An -c -N 4) < f
printf abc > s && od -An -c -j 1 -N 10 s
"#,
    );
    assert!(out.starts_with(" 63 64 65 66 67 68\n"), "{out}");
    b.stop().await;
}

/// On the mount, the kernel serves what a FIFO or socket in LABIOS does:
/// bytes pass through a FIFO between two processes and over a Unix socket
/// bound to a LABIOS path, as in a plain directory.
async fn pipes_and_sockets(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "pipes").await;
    let out = b.same(
        r#"set -e
mkdir -p "$ROOT"
mkfifo "$ROOT/p"
(echo "through the FIFO" > "$ROOT/p") &
cat "$ROOT/p"
wait
python3 - "$ROOT/s" <<'PY'
import socket, sys, threading
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(1)
def serve():
    c, _ = srv.accept()
    c.sendall(c.recv(100).upper())
    c.close()
t = threading.Thread(target=serve)
t.start()
cli = socket.socket(socket.AF_UNIX)
cli.connect(sys.argv[1])
cli.sendall(b"over the socket")
print(cli.recv(100).decode())
t.join()
PY
ls -l "$ROOT" | awk '{print $1, $NF}'
"#,
    );
    assert!(out.contains("through the FIFO\nOVER THE SOCKET\n"), "{out}");
    b.stop().await;
}

/// Bad pointers get EFAULT from every intercepted call that takes a path
/// (and symlink's target), as from the kernel, instead of crashing the
/// program in the interception library (programs/bad_pointers.py).
async fn bad_pointers(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "badptr").await;
    let out = b.same(r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/bad_pointers.py" "$ROOT/t""#);
    assert!(out.contains("rmdir -1 EFAULT\n"), "{out}");
    assert!(out.contains("symlink -1 EFAULT\n"), "{out}");
    b.stop().await;
}

/// Modes under the umask, chmod, chown (dropping set-user-ID), lchown,
/// times given, omitted and set to now, and a directory's times following
/// its entries, as a plain directory shows them (programs/attrs.py).
async fn owners_modes_times(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "attrs").await;
    let out = b.same(r#"mkdir -p "$ROOT" && python3 "$PROGRAMS/attrs.py" "$ROOT/t""#);
    assert!(out.contains("chown 1000:1001: 0o755 1000 1001\n"), "{out}");
    assert!(out.contains("utime ns: 1000000007 2000000009\n"), "{out}");
    assert!(
        out.contains("remove moved the directory's mtime: True True\n"),
        "{out}"
    );
    b.stop().await;
}

/// Hard links: rsync -aH of a tree with them into LABIOS and out again
/// keeps them (link counts, one inode per file), data written through one
/// name is read through another, a file outlives all but its last name,
/// renaming one name onto another of the same file changes nothing (as
/// POSIX says), and tar stores and restores them; compared with the same
/// script on a plain directory.
async fn hard_links(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "hard").await;
    let tree = b.input().join("tree");
    std::fs::create_dir_all(tree.join("d")).unwrap();
    write_input(&tree, "a", &common::data(17, 50_000));
    write_input(&tree, "single", b"one name\n");
    std::fs::hard_link(tree.join("a"), tree.join("d/b")).unwrap();
    std::fs::hard_link(tree.join("a"), tree.join("c")).unwrap();
    let script = r#"
set -e
mkdir -p "$ROOT"
det="--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner"
rsync -aH "$IN/tree/" "$ROOT/tree/"
rsync -aH "$ROOT/tree/" "$OUT/tree/"
diff -r "$IN/tree" "$OUT/tree" && echo rsync trees equal
(cd "$OUT/tree" && find . -type f -printf '%n %p %s\n' | sort)
cd "$ROOT/tree"
find . -type f -printf '%n %p %s\n' | sort
test "$(stat -c %i a)" = "$(stat -c %i d/b)" && echo one inode
test "$(stat -c %i a)" != "$(stat -c %i single)" && echo another inode
echo more >> d/b
tail -c 5 a
rm a
cmp d/b c && stat -c '%h %s' d/b c
ln d/b e
python3 -c 'import os; os.rename("e", "d/b")'
stat -c '%h' d/b e
rm e
tar -cf "$OUT/t.tar" -C "$ROOT/tree" $det .
tar -tvf "$OUT/t.tar" | grep -c 'link to'
mkdir "$ROOT/x"
tar -xf "$OUT/t.tar" -C "$ROOT/x"
(cd "$ROOT/x" && find . -type f -printf '%n %p %s\n' | sort)
cmp "$ROOT/x/c" "$ROOT/x/d/b" && echo tar kept the data
"#;
    let out = b.same(script);
    assert!(
        out.contains("rsync trees equal") && out.contains("one inode\nanother inode\n"),
        "{out}"
    );
    assert!(
        out.contains("3 ./a 50000\n3 ./c 50000\n3 ./d/b 50000\n"),
        "{out}"
    );
    assert!(out.contains("2 50005\n2 50005\n3\n3\n1\n"), "{out}");
    b.stop().await;
}

/// Symbolic links under `labios run`: made with `ln -s`, read, followed
/// at the end of a path (to a LABIOS file, relative or absolute, and out
/// to the host), listed as links, archived by tar and removed.
async fn links_under_run(kind: Kind) {
    let b = Bench::start(kind, Via::Run(false), "runlinks").await;
    let script = r#"
set -e
mkdir -p "$ROOT/d"
echo payload > "$ROOT/d/f.txt"
cd "$ROOT"
ln -s d/f.txt rel
ln -s "$ROOT/d/f.txt" abs
ln -s "$IN/host.txt" out
ln -s nowhere dangling
ln -s rel chain
readlink rel out dangling chain
cat rel abs out chain
test -L dangling && ! test -e dangling && echo dangling is a link to nothing
find . -type l | sort
echo appended >> chain
cat d/f.txt
tar -cf "$OUT/t.tar" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner rel dangling d
tar -tvf "$OUT/t.tar" | sed 's/ .* / /'
mv rel moved && readlink moved
rm moved dangling chain
ls
"#;
    write_input(&b.input(), "host.txt", b"from the host\n");
    let out = b.same(script);
    assert!(
        out.contains("payload\npayload\nfrom the host\npayload\n"),
        "{out}"
    );
    assert!(out.contains("payload\nappended\n"), "{out}");
    // Hard links, FIFOs and device nodes are LABIOS entries; a link across
    // LABIOS and the host is not (EXDEV), nor a Unix socket bound in LABIOS
    // (EOPNOTSUPP: it needs a kernel inode). Nothing lands on the host disk
    // in the program's real working directory (issue 18 saw device nodes,
    // links and sockets made there).
    let host_cwd = b.tmp.path().join("host-cwd");
    std::fs::create_dir(&host_cwd).unwrap();
    let refused = b
        .on_labios(&[
            "sh",
            "-c",
            r#"cd "$ROOT"; for c in "ln d/f.txt hard" "ln $ROOT/d/f.txt $ROOT/hard2" "ln d/f.txt $HOST/across" "mkfifo fifo" "mknod node c 1 3"; do $c 2>/dev/null && echo "$c made" || echo "$c refused"; done; /usr/bin/python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind("sock")' 2>&1 | tail -1; ls"#,
        ])
        .env("ROOT", &b.ns_dir)
        .env("HOST", &host_cwd)
        .current_dir(&host_cwd)
        .output()
        .unwrap();
    assert_eq!(
        check(&refused, "refused entries"),
        format!(
            "ln d/f.txt hard made\nln {0}/d/f.txt {0}/hard2 made\n\
             ln d/f.txt {1}/across refused\nmkfifo fifo made\n\
             mknod node c 1 3 made\n\
             OSError: [Errno 95] Operation not supported\n\
             abs\nd\nfifo\nhard\nhard2\nnode\nout\n",
            b.ns_dir,
            host_cwd.display()
        )
    );
    assert_eq!(std::fs::read_dir(&host_cwd).unwrap().count(), 0);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_under_run_embedded() {
    links_under_run(Kind::Embedded).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_under_run_cluster() {
    links_under_run(Kind::Cluster).await
}

/// With an attribute lease of a minute, a process still sees each of its
/// own changes at once (the cache drops what this process changes).
async fn own_changes_through_the_cache(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "own").await;
    let out = b
        .same(r#"LABIOS_CLIENT__ATTR_CACHE_MS=60000 python3 "$PROGRAMS/own_changes.py" "$ROOT/c""#);
    assert!(
        out.contains("fstat after ftruncate 12\ntruncate 5\nO_TRUNC 0\n"),
        "{out}"
    );
    b.stop().await;
}

/// Extended attributes under `labios run` and on the mount are the
/// inventory's `user.*` ones, with the kernel's answers to every call
/// (by path, descriptor and link; flags, sizes, names in no namespace),
/// compared with a run on the host's file system; the kernel's namespaces
/// (asked before every write through the mount) are answered at once.
async fn extended_attributes(kind: Kind, via: Via) {
    let b = Bench::start(kind, via, "xattrs").await;
    let out = b.same(r#"python3 "$PROGRAMS/xattrs.py" "$ROOT/x""#);
    for line in [
        "get b'lab'\n",
        "create existing EEXIST\n",
        "both flags existing EEXIST\nboth flags missing ENODATA\n",
        "get created b'n'\nremove created ok\n",
        "fd list ['user.empty', 'user.fd', 'user.owner']\n",
        "set on link EPERM\n",
        "list after ['user.empty']\n",
        "kernel namespace ENODATA\n",
    ] {
        assert!(out.contains(line), "{line:?} missing:\n{out}");
    }
    // Hints are attributes LABIOS checks: a bad value (even one that reads
    // "not empty"), an unknown hint, a tier no worker has, and a placement
    // once the file holds data are EINVAL; the copies change by descriptor.
    let script = r#"
import errno, os, sys
p = os.path.join(sys.argv[1], "hinted")
open(p, "w").close()
os.setxattr(p, "user.labios.replicas", b"2")
def refused(name, value):
    try:
        os.setxattr(p, name, value)
    except OSError as e:
        print(errno.errorcode[e.errno])
refused("user.labios.replicas", b"9")
refused("user.labios.placement", b"not empty")
refused("user.labios.colour", b"blue")
refused("user.labios.tier", b"tape")
with open(p, "wb") as f:
    f.write(b"data")
refused("user.labios.placement", b"local")
fd = os.open(p, os.O_RDONLY)
os.setxattr(fd, "user.labios.replicas", b"3")
os.close(fd)
print(os.getxattr(p, "user.labios.replicas"))
"#;
    let out = b
        .on_labios(&["python3", "-c", script, &b.ns_dir])
        .output()
        .unwrap();
    assert_eq!(
        check(&out, "hints"),
        "EINVAL\nEINVAL\nEINVAL\nEINVAL\nEINVAL\nb'3'\n"
    );
    b.stop().await;
}

const PERMS: &str = r#"
set -e
python3 "$PROGRAMS/perms.py" setup "$ROOT/t"
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 "$PROGRAMS/perms.py" try "$ROOT/t"
python3 "$PROGRAMS/perms.py" show "$ROOT/t"
"#;

/// Runs `script` (sh, with ROOT and PROGRAMS) on a plain directory and on
/// a `labios serve` opened to every local user (`all_local_users`), under
/// `labios run` or on a root `labios mount --allow-other`; returns the
/// output after checking both match. The script switches to another user
/// itself (setpriv), so that requests reach LABIOS as that user's. On a
/// cluster, the `labios serve` is its node gateway, and every program
/// reaches the cluster through it.
async fn same_for_other_users(kind: Kind, mount: bool, script: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    // `nobody` must reach the socket, the mount and the plain directory.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = tmp.path().join("labios.toml");
    std::fs::write(&config, "all_local_users = true\n").unwrap();
    let cluster = match kind {
        Kind::Embedded => None,
        Kind::Cluster => Some(Deployed::start(Kind::Cluster, |_| {}).await),
    };
    let env = cluster
        .as_ref()
        .map(|d| env_of(d.config()))
        .unwrap_or_default();
    let server = Server::start_with(&tmp.path().join("data"), Some(&config), env.clone());
    let native_root = tmp.path().join("native");
    std::fs::create_dir(&native_root).unwrap();
    let native = Command::new("sh")
        .args(["-c", script])
        .env("ROOT", &native_root)
        .env("PROGRAMS", PROGRAMS)
        .output()
        .unwrap();
    let native = check(&native, "native run");
    let labios_cmd = |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .envs(env.iter().cloned())
            .env("LABIOS_ENDPOINT", &server.endpoint)
            .env_remove("LABIOS_KEY")
            .env_remove("LABIOS_SECRET");
        cmd
    };
    let mnt = tmp.path().join("mnt");
    let (mut cmd, mounted) = if mount {
        let mut m = labios_cmd(&["mount", "--allow-other"]);
        m.arg(&mnt);
        let mounted = Mounted::start(m, &mnt);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).env("ROOT", mnt.join("users"));
        (cmd, Some(mounted))
    } else {
        let mut cmd = labios_cmd(&["run", "--", "sh", "-c", script]);
        cmd.env("ROOT", format!("{PREFIX}/users"));
        (cmd, None)
    };
    let labios = cmd.env("PROGRAMS", PROGRAMS).output().unwrap();
    let stderr = String::from_utf8_lossy(&labios.stderr).into_owned();
    let labios = check(&labios, "run on LABIOS");
    assert_same_output(&labios, &native, &stderr);
    let mode = std::fs::metadata(&server.endpoint)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o666,
        "the socket is open to every local user"
    );
    drop(mounted);
    server.stop();
    if let Some(d) = cluster {
        d.shutdown().await;
    }
    labios
}

/// Another local user: what `nobody` may and may not do to root's files
/// and directories (modes, owners, times, search and read permission, the
/// sticky bit, protected hard links) and to its own, decided by the server
/// from the kernel's word on who connected (or, through a root mount, on
/// whose request it serves); compared with the same steps on a plain
/// directory (programs/perms.py).
async fn another_user(kind: Kind, mount: bool) {
    let labios = same_for_other_users(kind, mount, PERMS).await;
    assert!(labios.contains("chmod root's file: EPERM\n"), "{labios}");
    assert!(
        labios.contains("read root's private file: EACCES\n"),
        "{labios}"
    );
    assert!(
        labios.contains("  owner is me: True True 0o644\n"),
        "{labios}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_under_run() {
    another_user(Kind::Embedded, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_under_run_through_a_cluster_gateway() {
    another_user(Kind::Cluster, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_on_mount() {
    another_user(Kind::Embedded, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_on_mount_through_a_cluster_gateway() {
    another_user(Kind::Cluster, true).await
}
