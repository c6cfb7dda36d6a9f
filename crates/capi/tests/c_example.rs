//! The C API as its users build and run it: the examples under
//! `crates/capi/examples` compiled with the system `cc`, `c++` and
//! `gfortran` against `labios.pc` (`scripts/install-capi.sh --dev`, pointing
//! at the header in the tree and at `liblabios_c.so` in the cargo target
//! directory), then run against a real `labios serve`.
//!
//! Needs `labios` built in the same target directory and profile as this
//! test (`cargo build -p labios`; `cargo test --workspace` builds it), and
//! `cc`, `c++`, `gfortran` and `pkg-config` (`bash scripts/services.sh
//! install`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The sizes checkpoint.c writes: step 0 synchronously, step 1 as one slab
/// per rank, asynchronously.
const SYNC_BYTES: usize = 3 * 1024 * 1024 + 12345;
const SLAB_BYTES: usize = 768 * 1024;

/// How long one example may run before it counts as hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn examples_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// `target/<profile>` of this test binary (`target/<profile>/deps/c_example-…`):
/// where cargo puts `liblabios_c.so` and the `labios` binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    assert_eq!(
        deps.file_name().and_then(|n| n.to_str()),
        Some("deps"),
        "unexpected test binary location {}",
        exe.display()
    );
    deps.parent().unwrap().to_path_buf()
}

/// The directory of the `liblabios_c.so` built with this test. `cargo test`
/// builds the cdylib into `target/<profile>/deps` and copies it up to
/// `target/<profile>` only for `cargo build`, so `deps` holds the current one.
fn lib_dir() -> PathBuf {
    let profile = profile_dir();
    for dir in [profile.join("deps"), profile.clone()] {
        if dir.join("liblabios_c.so").is_file() {
            return dir;
        }
    }
    panic!(
        "no liblabios_c.so in {0}/deps or {0} (cargo build -p labios-capi)",
        profile.display()
    )
}

fn labios_bin() -> PathBuf {
    let bin = profile_dir().join("labios");
    assert!(
        bin.is_file(),
        "no labios binary at {}: build it with `cargo build -p labios` \
         (same CARGO_TARGET_DIR and profile as this test; `cargo test --workspace` builds it)",
        bin.display()
    );
    bin
}

/// The bytes checkpoint.c's `fill` makes (xorshift64 from the seed).
fn fill(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A directory of this test's own, removed at the end; kept (and named) if
/// the test fails, for its logs and binaries.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("labios-capi-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A command with no LABIOS_* settings from the environment of the test.
fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LABIOS_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

fn require_tool(name: &str) {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{name}` is needed to build the C API examples: `bash scripts/services.sh install` \
         (Debian packages gcc, g++, gfortran, pkg-config)"
    );
}

/// What a finished program printed.
struct Run {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Runs `cmd` with its output in files under `dir` (no pipe to fill up),
/// killing it if it runs longer than RUN_TIMEOUT.
fn run(mut cmd: Command, dir: &Path, tag: &str) -> Run {
    let out_path = dir.join(format!("{tag}.stdout"));
    let err_path = dir.join(format!("{tag}.stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish in {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
    }
}

/// The example programs, compiled and linked as a user would.
struct Examples {
    dir: PathBuf,
}

#[derive(Clone, Copy)]
enum Lang {
    C,
    Cpp,
    Fortran,
}

impl Examples {
    /// Generates the dev labios.pc into `dir/pc` and compiles `sources`
    /// (relative to examples/) into `dir`, each named by its file stem
    /// (`_cpp`, `_f` appended for C++ and Fortran).
    fn build(dir: &Path, sources: &[(Lang, &str)]) -> Examples {
        require_tool("pkg-config");
        let lib_dir = lib_dir();
        let pc_dir = dir.join("pc");
        let script = repo().join("scripts/install-capi.sh");
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .arg("--dev")
            .arg(&pc_dir)
            .arg("--libdir")
            .arg(&lib_dir);
        let r = run(cmd, dir, "install-capi");
        assert!(
            r.status.success(),
            "install-capi.sh --dev failed ({}):\n{}{}",
            r.status,
            r.out(),
            r.stderr
        );

        let pkg_config = |args: &[&str]| {
            let out = Command::new("pkg-config")
                .args(args)
                .arg("labios")
                .env("PKG_CONFIG_PATH", &pc_dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "pkg-config {args:?} labios: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        assert_eq!(
            pkg_config(&["--modversion"]),
            env!("CARGO_PKG_VERSION"),
            "labios.pc carries the crate's version"
        );
        let libdir = PathBuf::from(pkg_config(&["--variable=libdir"]));
        assert_eq!(
            libdir.canonicalize().unwrap(),
            lib_dir.canonicalize().unwrap(),
            "labios.pc points at the library of this build"
        );
        let includedir = PathBuf::from(pkg_config(&["--variable=includedir"]));
        assert!(includedir.join("labios.h").is_file());
        let flags: Vec<String> = pkg_config(&["--cflags", "--libs"])
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert!(flags.iter().any(|f| f == "-llabios_c"), "{flags:?}");
        let rpath = format!("-Wl,-rpath,{}", libdir.display());

        for &(lang, source) in sources {
            let (compiler, std_flags): (&str, &[&str]) = match lang {
                // C99 and C11, pedantic: the header is plain C.
                Lang::C if source.ends_with("labios_cat.c") => (
                    "cc",
                    &["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"],
                ),
                Lang::C => (
                    "cc",
                    &["-std=c11", "-pedantic", "-Wall", "-Wextra", "-Werror"],
                ),
                Lang::Cpp => (
                    "c++",
                    &["-std=c++17", "-pedantic", "-Wall", "-Wextra", "-Werror"],
                ),
                Lang::Fortran => ("gfortran", &["-std=f2008", "-Wall"]),
            };
            require_tool(compiler);
            let src = examples_src().join(source);
            let stem = src.file_stem().unwrap().to_str().unwrap();
            let name = match lang {
                Lang::C => stem.to_string(),
                Lang::Cpp => format!("{stem}_cpp"),
                Lang::Fortran => format!("{stem}_f"),
            };
            let exe = dir.join(&name);
            let mut cmd = Command::new(compiler);
            cmd.args(std_flags).arg(&src).arg("-o").arg(&exe);
            if let Lang::Fortran = lang {
                cmd.arg("-J").arg(dir); // the module file
            }
            cmd.args(&flags).arg(&rpath);
            let r = run(cmd, dir, &format!("build-{name}"));
            assert!(
                r.status.success(),
                "{compiler} {source} failed ({}):\n{}{}",
                r.status,
                r.out(),
                r.stderr
            );
        }
        Examples {
            dir: dir.to_path_buf(),
        }
    }

    fn exe(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// `labios serve` on a data directory; stopped (SIGTERM, then SIGKILL if it
/// hangs) when dropped, also when the test panics.
struct Server {
    child: Child,
    endpoint: PathBuf,
    log: PathBuf,
    dir: PathBuf,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let bin = labios_bin();
        let data = dir.join("data");
        let endpoint = data.join("labios.sock");
        let log = dir.join("serve.log");
        let child = clean_command(&bin)
            .args(["serve", "--data-dir"])
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(File::create(&log).unwrap())
            .stderr(File::create(dir.join("serve.stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut server = Server {
            child,
            endpoint,
            log,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let printed = std::fs::read_to_string(&server.log).unwrap_or_default();
            if printed.contains("listening on") && server.endpoint.exists() {
                break;
            }
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("labios serve exited with {status}:\n{}", server.logs());
            }
            assert!(
                Instant::now() < deadline,
                "labios serve did not listen within 60 s:\n{}",
                server.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn logs(&self) -> String {
        format!(
            "{}{}",
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            std::fs::read_to_string(self.dir.join("serve.stderr")).unwrap_or_default()
        )
    }

    /// Runs an example (or any program) as the application with `creds`
    /// (None: the default application), LABIOS_ENDPOINT set to this server.
    fn run(&self, exe: &Path, args: &[&str], creds: Option<(&str, &str)>, tag: &str) -> Run {
        let mut cmd = clean_command(exe);
        cmd.args(args).env("LABIOS_ENDPOINT", &self.endpoint);
        if let Some((key, secret)) = creds {
            cmd.env("LABIOS_KEY", key).env("LABIOS_SECRET", secret);
        }
        run(cmd, &self.dir, tag)
    }

    /// A `labios` CLI command that must succeed; its standard output.
    fn labios(&self, args: &[&str]) -> Vec<u8> {
        let tag = format!("labios-{}", args.join("-").replace('/', "_"));
        let r = self.run(&labios_bin(), args, None, &tag);
        assert!(
            r.status.success(),
            "labios {args:?} failed ({}): {}",
            r.status,
            r.stderr
        );
        r.stdout
    }

    /// `labios app create NAME`: the new application's key and secret.
    fn create_app(&self, name: &str) -> (String, String) {
        let out = String::from_utf8(self.labios(&["app", "create", name])).unwrap();
        let field = |label: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(label))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| panic!("no `{label}` in `labios app create` output:\n{out}"))
        };
        (field("key:"), field("secret:"))
    }

    /// SIGTERM, and the server must stop cleanly.
    fn stop(mut self) {
        self.signal(libc::SIGTERM);
        let status = self.wait_exit(Duration::from_secs(30));
        let logs = self.logs();
        assert!(
            status.is_some_and(|s| s.success()),
            "labios serve exited with {status:?}:\n{logs}"
        );
        assert!(logs.contains("stopped cleanly"), "{logs}");
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, sig);
        }
    }

    fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGTERM);
            if self.wait_exit(Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

fn assert_ok(r: &Run, what: &str) -> String {
    let out = r.out();
    assert!(
        r.status.success(),
        "{what} exited with {}\nstdout:\n{out}\nstderr:\n{}",
        r.status,
        r.stderr
    );
    out
}

/// A C program whose asynchronous writes (small ones cached to be merged,
/// a large one published) are not waited for and whose handle is never
/// disconnected, exiting with `exit(0)`: the library's exit handler lands
/// them, as `exit()` writes a stdio stream's buffered bytes. A child it
/// forks, which has no share in its parent's handle, exits at once. The
/// small writes were once lost: they never left the process.
#[test]
fn a_program_exiting_without_disconnect_keeps_its_async_writes() {
    let tmp = TempDir::new("exit");
    let src = tmp.0.join("exit_early.c");
    std::fs::write(
        &src,
        r#"#include <labios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    labios_t *h = NULL;
    labios_ticket_t t;
    static char big[1 << 20];
    char line[32];
    int i, status;
    if (labios_connect(NULL, NULL, NULL, &h) != LABIOS_OK) {
        fprintf(stderr, "connect: %s\n", labios_last_error());
        return 1;
    }
    for (i = 0; i < 10; i++) {
        snprintf(line, sizeof line, "line %02d\n", i);
        if (labios_write_async(h, "/exit/small", (uint64_t)i * 8, line, 8, &t) != LABIOS_OK) {
            fprintf(stderr, "write: %s\n", labios_last_error());
            return 1;
        }
    }
    memset(big, 'x', sizeof big);
    if (labios_write_async(h, "/exit/big", 0, big, sizeof big, &t) != LABIOS_OK) {
        fprintf(stderr, "write: %s\n", labios_last_error());
        return 1;
    }
    if (fork() == 0) {
        exit(0);
    }
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the forked child did not exit cleanly\n");
        return 1;
    }
    exit(0);
}
"#,
    )
    .unwrap();
    let examples = Examples::build(&tmp.0, &[(Lang::C, src.to_str().unwrap())]);
    let server = Server::start(&tmp.0);
    let r = server.run(&examples.exe("exit_early"), &[], None, "exit-early");
    assert_ok(&r, "exit_early");
    let small: String = (0..10).map(|i| format!("line {i:02}\n")).collect();
    assert_eq!(
        String::from_utf8(server.labios(&["get", "/exit/small", "-"])).unwrap(),
        small
    );
    assert!(server.labios(&["get", "/exit/big", "-"]) == vec![b'x'; 1 << 20]);
    server.stop();
}

#[test]
fn c_checkpoint_example_round_trips_through_labios_serve() {
    let tmp = TempDir::new("checkpoint");
    let examples = Examples::build(&tmp.0, &[(Lang::C, "c/checkpoint.c")]);
    let server = Server::start(&tmp.0);
    let endpoint = server.endpoint.to_str().unwrap().to_string();
    let checkpoint = examples.exe("checkpoint");

    // Endpoint on the command line; LABIOS_ENDPOINT names a socket that does
    // not exist, so success shows -e was used.
    let mut cmd = clean_command(&checkpoint);
    cmd.args(["-e", &endpoint, "-d", "/sim/run-1", "-r", "4"])
        .env("LABIOS_ENDPOINT", tmp.0.join("nothing-here.sock"));
    let out = assert_ok(&run(cmd, &tmp.0, "checkpoint-1"), "checkpoint");
    for line in [
        format!("step 0: wrote {SYNC_BYTES} bytes synchronously to /sim/run-1/step-0000.ckpt"),
        format!("step 1: published 4 asynchronous writes of {SLAB_BYTES} bytes"),
        "step 1: all 4 writes complete".to_string(),
        format!("verified /sim/run-1/step-0000.ckpt: {SYNC_BYTES} bytes identical"),
        format!(
            "verified /sim/run-1/step-0001.ckpt: {} bytes identical",
            4 * SLAB_BYTES
        ),
        "short read at end of file: 100 bytes".to_string(),
        format!("stat /sim/run-1/step-0000.ckpt: size {SYNC_BYTES}, mode 644"),
        "ls /sim/run-1:\n  step-0000.ckpt\n  step-0001.ckpt\n".to_string(),
        "reading /sim/run-1/step-9999.ckpt fails as it should: not found (-1): \
         not found: /sim/run-1/step-9999.ckpt"
            .to_string(),
    ] {
        assert!(out.contains(&line), "missing {line:?} in:\n{out}");
    }
    assert!(out.ends_with("checkpoint: OK\n"), "{out}");

    // What the C program wrote is what another client reads: the CLI.
    let step0 = server.labios(&["get", "/sim/run-1/step-0000.ckpt", "-"]);
    assert!(
        step0 == fill(SYNC_BYTES, 0),
        "step 0 differs from the C program's state"
    );
    let step1 = server.labios(&["get", "/sim/run-1/step-0001.ckpt", "-"]);
    let want1: Vec<u8> = (0..4).flat_map(|r| fill(SLAB_BYTES, 1000 + r)).collect();
    assert!(step1 == want1, "step 1 differs from the ranks' slabs");

    // Endpoint from LABIOS_ENDPOINT, more ranks, a second run directory.
    let out = assert_ok(
        &server.run(
            &checkpoint,
            &["-d", "/sim/run-2", "-r", "9"],
            None,
            "checkpoint-2",
        ),
        "checkpoint -r 9",
    );
    assert!(out.contains("step 1: all 9 writes complete"), "{out}");
    assert!(out.ends_with("checkpoint: OK\n"), "{out}");
    let ls = String::from_utf8(server.labios(&["ls", "/sim"])).unwrap();
    assert!(ls.contains("/sim/run-1/step-0001.ckpt"), "{ls}");
    assert!(ls.contains("/sim/run-2/step-0001.ckpt"), "{ls}");

    // No server there: the connect error, with its code and message.
    let mut cmd = clean_command(&checkpoint);
    let nowhere = tmp.0.join("nothing-here.sock");
    cmd.args(["-e", nowhere.to_str().unwrap()]);
    let r = run(cmd, &tmp.0, "checkpoint-nowhere");
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "checkpoint: connect: LABIOS unavailable (-9): unavailable: cannot reach LABIOS"
        ),
        "{}",
        r.stderr
    );

    server.stop();
}

/// Hints from C: `labios_setxattr`, `labios_getxattr`, `labios_listxattr`
/// and `labios_removexattr`, a refused value naming the hint.
#[test]
fn c_sets_reads_and_removes_hints() {
    let tmp = TempDir::new("hints");
    let examples = Examples::build(&tmp.0, &[(Lang::C, "c/hints.c")]);
    let server = Server::start(&tmp.0);
    let out = assert_ok(
        &server.run(&examples.exe("hints"), &["/c/hinted"], None, "hints"),
        "hints",
    );
    assert_eq!(
        out,
        "names: user.labios.placement user.labios.replicas\n\
         placement collocate:g1\n\
         refused: invalid argument (-3): invalid argument: hint replicas: \"nine\" is not a \
         value it takes (a number of copies, 1 to 8); see README \"Hints\"\n\
         removed: success (0), then not found (-1)\n"
    );
    server.stop();
}

/// `labios_stack_set`: an administrator's C program changes a running
/// worker's stack (as `labios stack set` does), only with the service's
/// secret, and its refusals carry the status code and the reason.
#[test]
fn c_stack_set_changes_a_running_workers_stack() {
    let tmp = TempDir::new("stack-set");
    let examples = Examples::build(&tmp.0, &[(Lang::C, "c/stack_set.c")]);
    let server = Server::start(&tmp.0);
    let data = tmp.0.join("data");
    let stack_set = |data_dir: &Path, args: &[&str], tag: &str| {
        let mut cmd = clean_command(examples.exe("stack_set"));
        cmd.args(args)
            .env("LABIOS_ENDPOINT", &server.endpoint)
            .env("LABIOS_DATA_DIR", data_dir);
        run(cmd, &tmp.0, tag)
    };
    let before = b"written before the change".to_vec();
    let file = tmp.0.join("before");
    std::fs::write(&file, &before).unwrap();
    server.labios(&["put", file.to_str().unwrap(), "/st/before"]);

    let status = || String::from_utf8(server.labios(&["status"])).unwrap();
    stack_set_and_refusals(|args, tag| stack_set(&data, args, tag), status);
    assert!(server.labios(&["get", "/st/before", "-"]) == before);

    // Without the service's secret.
    let elsewhere = tmp.0.join("not-the-data-dir");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let r = stack_set(&elsewhere, &["1", "file"], "refused");
    assert_eq!(r.status.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("permission denied (-4): permission denied: only the service changes stacks"),
        "{}",
        r.stderr
    );
    server.stop();
}

/// The same C program on the distributed deployment: it reaches the
/// worker processes through Redis, as `labios stack set` does there
/// (whoever holds the deployment's Redis is its service).
#[test]
fn c_stack_set_changes_a_worker_process_of_the_cluster() {
    let tmp = TempDir::new("stack-set-cluster");
    let examples = Examples::build(&tmp.0, &[(Lang::C, "c/stack_set.c")]);
    let cluster = Cluster::start(&tmp.0, 2);
    let status = || {
        let r = run(
            cluster.command(&labios_bin(), &["status"]),
            &tmp.0,
            "status",
        );
        assert!(r.status.success(), "labios status: {}", r.stderr);
        r.out()
    };
    stack_set_and_refusals(
        |args, tag| {
            run(
                cluster.command(&examples.exe("stack_set"), args),
                &tmp.0,
                tag,
            )
        },
        status,
    );
}

/// Changes worker 1's stack with `stack_set` (the C example, given its
/// arguments and an output tag), checks `status` shows it, then what the
/// service refuses: an unknown layer, another backend, a missing worker.
fn stack_set_and_refusals(stack_set: impl Fn(&[&str], &str) -> Run, status: impl Fn() -> String) {
    let out = assert_ok(&stack_set(&["1", "checksum,zstd,file"], "set"), "stack_set");
    assert_eq!(out, "worker 1 runs checksum,zstd,file\n");
    let status = status();
    let row = status
        .lines()
        .find(|l| l.split_whitespace().next() == Some("1"))
        .unwrap_or_else(|| panic!("no worker 1: {status}"));
    assert!(row.ends_with("checksum,zstd,file"), "{row}");
    for (args, wanted) in [
        (
            &["1", "snappy,file"][..],
            "invalid argument (-3): invalid argument: stack: unknown layer \"snappy\"",
        ),
        (&["1", "kv"][..], "not its backend"),
        (&["9", "file"][..], "not found (-1): not found: no worker 9"),
    ] {
        let r = stack_set(args, "refused");
        assert_eq!(r.status.code(), Some(1), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(wanted), "{args:?}: {}", r.stderr);
    }
}

/// A distributed deployment on this machine: nats-server and redis-server
/// on free loopback ports and `labios worker` processes of the default
/// pool, all killed on drop.
struct Cluster {
    env: Vec<(&'static str, String)>,
    children: Vec<Child>,
}

impl Cluster {
    fn start(dir: &Path, workers: usize) -> Cluster {
        let (nats, nats_port) =
            labios_ports::start_service("nats-server", &dir.join("nats.log"), |port| {
                let mut c = Command::new("nats-server");
                c.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                    .arg(dir.join("nats"));
                c
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let mut cluster = Cluster {
            env: Vec::new(),
            children: vec![nats],
        };
        std::fs::create_dir_all(dir.join("redis")).unwrap();
        let (redis, redis_port) =
            labios_ports::start_service("redis-server", &dir.join("redis.log"), |port| {
                let mut c = Command::new("redis-server");
                c.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
                    .arg(dir.join("redis"))
                    .args(["--save", "", "--appendonly", "no"]);
                c
            })
            .unwrap_or_else(|e| panic!("{e}"));
        cluster.children.push(redis);
        labios_ports::await_redis(redis_port).unwrap_or_else(|e| panic!("{e}"));
        cluster.env = vec![
            ("LABIOS_DEPLOYMENT", "distributed".into()),
            ("LABIOS_NATS__URL", format!("nats://127.0.0.1:{nats_port}")),
            (
                "LABIOS_REDIS__URLS",
                format!("[\"redis://127.0.0.1:{redis_port}\"]"),
            ),
            ("LABIOS_DATA_DIR", dir.join("data").display().to_string()),
        ];
        for i in 0..workers {
            let mut cmd = cluster.command(&labios_bin(), &["worker", &i.to_string()]);
            let log = File::create(dir.join(format!("worker-{i}.log"))).unwrap();
            cmd.stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log);
            cluster.children.push(cmd.spawn().unwrap());
        }
        // Up once every worker has reported its status to Redis.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = run(
                cluster.command(&labios_bin(), &["status"]),
                dir,
                "status-up",
            );
            let out = r.out();
            let up = (0..workers).all(|i| {
                out.lines()
                    .any(|l| l.split_whitespace().next() == Some(&i.to_string()))
            });
            if r.status.success() && up {
                return cluster;
            }
            assert!(
                Instant::now() < deadline,
                "the workers did not report within 60 s: {out}{}",
                r.stderr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `program args` with this deployment's settings and no others.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = clean_command(program);
        cmd.args(args).envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn cpp_and_fortran_use_the_header_as_it_is() {
    let tmp = TempDir::new("cpp-fortran");
    let examples = Examples::build(
        &tmp.0,
        &[
            (Lang::Cpp, "cpp/hello.cpp"),
            (Lang::Fortran, "fortran/hello.f90"),
        ],
    );
    let server = Server::start(&tmp.0);
    let endpoint = server.endpoint.to_str().unwrap().to_string();

    let out = assert_ok(
        &server.run(&examples.exe("hello_cpp"), &[&endpoint], None, "hello-cpp"),
        "hello.cpp",
    );
    assert!(
        out.contains("38 bytes through /hello/cpp-")
            && out.contains("Hello from C++ through LABIOS labels!")
            && out.ends_with("hello.cpp: OK\n"),
        "{out}"
    );
    let cpp_path = out
        .split_whitespace()
        .find(|w| w.starts_with("/hello/cpp-"))
        .unwrap()
        .trim_end_matches(':')
        .to_string();
    assert_eq!(
        server.labios(&["get", &cpp_path, "-"]),
        b"Hello from C++ through LABIOS labels!\n"
    );

    // Fortran, endpoint from the environment.
    let out = assert_ok(
        &server.run(&examples.exe("hello_f"), &[], None, "hello-fortran"),
        "hello.f90",
    );
    assert!(
        out.contains("hello.f90: 41 bytes back: Hello from Fortran through LABIOS labels!"),
        "{out}"
    );
    assert!(
        out.contains("hello.f90: missing file: not found: not found: /hello/no-such-file"),
        "{out}"
    );
    assert!(out.ends_with("hello.f90: OK\n"), "{out}");
    assert_eq!(
        server.labios(&["get", "/hello/fortran.txt", "-"]),
        b"Hello from Fortran through LABIOS labels!"
    );

    server.stop();
}

#[test]
fn another_application_cannot_read_through_the_c_api() {
    let tmp = TempDir::new("isolation");
    let examples = Examples::build(
        &tmp.0,
        &[(Lang::C, "c/checkpoint.c"), (Lang::C, "c/labios_cat.c")],
    );
    let server = Server::start(&tmp.0);
    let alpha = server.create_app("alpha");
    let beta = server.create_app("beta");
    assert_ne!(alpha.0, beta.0);
    let as_alpha = Some((alpha.0.as_str(), alpha.1.as_str()));
    let as_beta = Some((beta.0.as_str(), beta.1.as_str()));
    let cat = examples.exe("labios_cat");
    let file = "/alpha/run/step-0000.ckpt";

    // alpha checkpoints with its credentials on the command line...
    let out = assert_ok(
        &server.run(
            &examples.exe("checkpoint"),
            &["-k", &alpha.0, "-s", &alpha.1, "-d", "/alpha/run"],
            None,
            "checkpoint-alpha",
        ),
        "checkpoint as alpha",
    );
    assert!(out.ends_with("checkpoint: OK\n"), "{out}");

    // ...and reads it back with them from the environment.
    let r = server.run(&cat, &[file], as_alpha, "cat-alpha");
    assert_ok(&r, "labios_cat as alpha");
    assert!(
        r.stdout == fill(SYNC_BYTES, 0),
        "alpha reads its own checkpoint"
    );

    // beta may not: LABIOS_EPERM and a message that says why.
    let r = server.run(&cat, &[file], as_beta, "cat-beta");
    assert_eq!(r.status.code(), Some(1), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "beta got {} bytes", r.stdout.len());
    assert_eq!(labios_c::LABIOS_EPERM, -4);
    let want = format!(
        "labios_cat: {file}: LABIOS_EPERM (-4, permission denied): \
         permission denied: {file} belongs to another application"
    );
    assert!(r.stderr.contains(&want), "{}", r.stderr);

    // Nor can beta write into alpha's directory.
    let r = server.run(
        &examples.exe("checkpoint"),
        &["-d", "/alpha/run/beta"],
        as_beta,
        "checkpoint-beta",
    );
    assert_eq!(r.status.code(), Some(2), "{}{}", r.out(), r.stderr);
    assert!(
        r.stderr.contains(
            "permission denied (-4): permission denied: /alpha belongs to another application"
        ),
        "{}",
        r.stderr
    );

    // A wrong secret is refused at connect.
    let r = server.run(
        &cat,
        &[file],
        Some((&beta.0, "not-the-secret")),
        "cat-badsecret",
    );
    assert_eq!(r.status.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("labios_cat: connect: LABIOS_EPERM (-4, permission denied): permission denied: invalid credentials"),
        "{}",
        r.stderr
    );

    // alpha's data is intact after beta's attempts.
    let r = server.run(&cat, &[file], as_alpha, "cat-alpha-again");
    assert_ok(&r, "labios_cat as alpha, again");
    assert!(r.stdout == fill(SYNC_BYTES, 0));

    server.stop();
}

#[test]
fn c_pipelines_run_at_the_workers() {
    let tmp = TempDir::new("pipeline");
    let examples = Examples::build(&tmp.0, &[(Lang::C, "c/pipeline.c")]);
    let server = Server::start(&tmp.0);
    let wat = repo().join("crates/functions/src/uppercase.wat");
    let r = server.run(
        &examples.exe("pipeline"),
        &["/c-pipeline/values.i64", wat.to_str().unwrap()],
        None,
        "pipeline",
    );
    let out = assert_ok(&r, "pipeline");
    // The values are a permutation of -50000..=50000.
    assert!(out.contains("median: 0\n"), "{out}");
    assert!(out.contains("stored fewer bytes of 800008\n"), "{out}");
    assert!(out.contains("upper: HELLO FROM C\n"), "{out}");
    assert!(
        out.contains("nosuch: invalid argument: invalid argument: unknown function nosuch"),
        "{out}"
    );
    server.stop();
}

/// What a section name lists in a file: `readelf -S` of `file`.
fn sections(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-S")
        .arg("-W")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "readelf -S {}", file.display());
    String::from_utf8(out.stdout).unwrap()
}

/// `install-capi.sh PREFIX` as a user runs it: the library a program loads
/// carries no debug information, which waits beside it in `lib/.debug` for
/// gdb and perf; a program built against the installed `labios.pc` runs,
/// and its client reads the configuration as the `labios` command does
/// (a misspelled section is refused by name, through the C error path).
#[test]
fn the_installed_library_is_stripped_and_its_debug_information_kept_beside_it() {
    require_tool("pkg-config");
    let tmp = TempDir::new("install");
    let prefix = tmp.0.join("prefix");
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/install-capi.sh"))
        .arg("--libdir")
        .arg(lib_dir())
        .arg(&prefix)
        .env_remove("DESTDIR");
    assert_ok(&run(cmd, &tmp.0, "install"), "install-capi.sh");

    let lib = prefix.join("lib/liblabios_c.so");
    let debug = prefix.join("lib/.debug/liblabios_c.so.debug");
    let installed = sections(&lib);
    assert!(!installed.contains(".debug_info"), "{installed}");
    assert!(installed.contains(".gnu_debuglink"), "{installed}");
    assert!(sections(&debug).contains(".debug_info"));
    let link = Command::new("objcopy")
        .arg("--dump-section")
        .arg(format!(".gnu_debuglink={}", tmp.0.join("link").display()))
        .arg(&lib)
        .arg(tmp.0.join("scratch.so"))
        .status()
        .unwrap();
    assert!(link.success());
    let named = std::fs::read(tmp.0.join("link")).unwrap();
    assert!(
        named.starts_with(b"liblabios_c.so.debug\0"),
        "the debug link names {:?}",
        String::from_utf8_lossy(&named)
    );
    assert!(
        std::fs::metadata(&lib).unwrap().len()
            < std::fs::metadata(lib_dir().join("liblabios_c.so"))
                .unwrap()
                .len(),
        "the installed library is smaller than the built one"
    );

    let source = tmp.0.join("bad_config.c");
    std::fs::write(
        &source,
        r#"#include <labios.h>
#include <stdio.h>
int main(int argc, char **argv) {
    labios_t *h = NULL;
    int rc = labios_connect_config(argv[1], NULL, NULL, &h);
    printf("%d %s\n", rc, rc == LABIOS_OK ? "" : labios_last_error());
    return rc == LABIOS_EINVAL ? 0 : 1;
}
"#,
    )
    .unwrap();
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "labios"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .unwrap();
    assert!(flags.status.success());
    let mut cc = Command::new("cc");
    cc.arg(&source)
        .arg("-o")
        .arg(tmp.0.join("bad_config"))
        .args(String::from_utf8(flags.stdout).unwrap().split_whitespace())
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()));
    assert_ok(&run(cc, &tmp.0, "cc"), "cc bad_config.c");
    let config = tmp.0.join("bad.toml");
    std::fs::write(&config, "[dispatchr]\npolicy = \"random\"\n").unwrap();
    // Without cargo's LD_LIBRARY_PATH, which names the build's own library
    // and would come before the program's run path.
    let mut program = clean_command(tmp.0.join("bad_config"));
    program.arg(&config).env_remove("LD_LIBRARY_PATH");
    let out = assert_ok(&run(program, &tmp.0, "bad_config"), "bad_config");
    assert!(out.contains("dispatchr"), "{out}");
}
