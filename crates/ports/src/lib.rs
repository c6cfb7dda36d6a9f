//! A free loopback port for a service started as a separate program (NATS,
//! Redis, the S3 gateway), which binds it a moment after it was chosen.
//!
//! Asking the kernel for port 0 and handing that number on is racy: the
//! port lies in the ephemeral range, and in the moment before the service
//! binds it any outgoing connection of any process (tests open hundreds)
//! may be given it as its local port, and the service then exits with
//! "address in use". Ports here come from below the ephemeral range, which
//! the kernel never hands out by itself, so only another program that
//! picks ports this way can compete for them: each process walks the range
//! from its own starting point and skips ports something is bound to.
//!
//! [`start_service`] starts such a service and returns it once the service
//! itself listens, so that a port another program took first is noticed
//! and a different one tried, never mistaken for the service.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Lowest port handed out: clear of well-known services' ports.
const FIRST: u32 = 10_000;

/// First port of the kernel's ephemeral range (Linux's default when the
/// range cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port on 127.0.0.1 nothing is bound to, outside the ephemeral range,
/// not handed out before by this process.
///
/// # Panics
/// When every port of the range is taken, or the ephemeral range leaves
/// none below it.
pub fn service_port() -> u16 {
    service_port_with(0)
}

/// A port as [`service_port`] whose companion `port + offset` is free and
/// outside the ephemeral range too (a Redis cluster node's bus port).
pub fn service_port_with(offset: u16) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let end = ephemeral_start().min(u32::from(u16::MAX) + 1) - u32::from(offset);
    assert!(
        end > FIRST + 1_000,
        "ports {FIRST}..{end} leave no room below the ephemeral range for service ports \
         (with companions {offset} above)"
    );
    let span = end - FIRST;
    // Concurrent test processes start far apart (a prime stride of pids).
    let start = std::process::id().wrapping_mul(7_919) % span;
    let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (start + n) % span).expect("below 65536");
        if free(port) && (offset == 0 || free(port + offset)) {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{end} on 127.0.0.1");
}

/// Why a service did not come up.
#[derive(Debug)]
pub struct ServiceError(String);

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServiceError {}

/// How long a service may take to listen: generous, for a busy machine.
const LISTEN_WITHIN: Duration = Duration::from_secs(30);

/// How many ports a service is tried on before its start fails: each
/// retry follows another program taking the port first.
const PORT_TRIES: usize = 5;

/// Starts the service `command(port)` builds on a port from
/// [`service_port`], its stdout and stderr appended to `log`, and returns
/// it once it listens on that port itself.
///
/// Ports are chosen without a lock shared between processes, so another
/// program may bind the port between the choice and the service's bind;
/// the service then exits saying "address already in use", and it is
/// started again on another port. Any other failure is an error naming
/// the service and quoting its log, and leaves no process running.
pub fn start_service(
    what: &str,
    log: &Path,
    mut command: impl FnMut(u16) -> Command,
) -> Result<(Child, u16), ServiceError> {
    let mut said = String::new();
    for _ in 0..PORT_TRIES {
        let port = service_port();
        match start(what, log, port, &mut command(port)) {
            Ok(child) => return Ok((child, port)),
            Err(Failed::PortTaken(e)) => said = e.0,
            Err(Failed::Other(e)) => return Err(e),
        }
    }
    Err(ServiceError(format!(
        "{what} found its port taken {PORT_TRIES} times; the last time: {said}"
    )))
}

/// Starts `command` (a service configured to listen on `port`) with its
/// stdout and stderr appended to `log`, and returns it once it listens on
/// `port` itself: a restart on the port the service had, or a port chosen
/// with a companion ([`service_port_with`]). A failure leaves no process
/// running.
pub fn start_service_on(
    what: &str,
    log: &Path,
    port: u16,
    command: &mut Command,
) -> Result<Child, ServiceError> {
    start(what, log, port, command).map_err(|f| match f {
        Failed::PortTaken(e) | Failed::Other(e) => e,
    })
}

/// Why a start failed: the port was another program's (worth another
/// port), or anything else.
enum Failed {
    PortTaken(ServiceError),
    Other(ServiceError),
}

/// One start: the service, listening, or no process left behind.
fn start(what: &str, log: &Path, port: u16, command: &mut Command) -> Result<Child, Failed> {
    let (mut child, from) = spawn_logged(command, what, log, port).map_err(Failed::Other)?;
    match await_listener(&mut child, port, what, log) {
        Ok(()) => Ok(child),
        Err(e) => {
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            let _ = child.kill();
            let _ = child.wait();
            let said = std::fs::read(log)
                .map(|all| String::from_utf8_lossy(&all[from.min(all.len())..]).to_lowercase())
                .unwrap_or_default();
            if exited && said.contains("address already in use") {
                Err(Failed::PortTaken(e))
            } else {
                Err(Failed::Other(e))
            }
        }
    }
}

/// Spawns `command` with its output appended to `log` after a line
/// naming this start (a restart keeps what the run before said); also
/// where in the log this start's output begins.
fn spawn_logged(
    command: &mut Command,
    what: &str,
    log: &Path,
    port: u16,
) -> Result<(Child, usize), ServiceError> {
    let cannot = |e: std::io::Error| ServiceError(format!("cannot write {}: {e}", log.display()));
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(cannot)?;
    writeln!(out, "--- {what} starting on port {port} ---").map_err(cannot)?;
    let from = usize::try_from(out.metadata().map_err(cannot)?.len()).unwrap_or(usize::MAX);
    let err = out.try_clone().map_err(cannot)?;
    let child = command
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => ServiceError(format!(
                "{what} is not installed (not on PATH): run `bash scripts/services.sh install`"
            )),
            _ => ServiceError(format!("cannot start {what}: {e}")),
        })?;
    Ok((child, from))
}

/// Waits until `child` itself holds a listening socket on `port`.
///
/// A TCP connect succeeding is no proof: when the child lost the port to
/// another program, that program's listener answers, and the test talks to
/// a stranger until it goes away ("connection refused" in the middle of a
/// test). So the listener's socket must be one of the child's open files.
fn await_listener(
    child: &mut Child,
    port: u16,
    what: &str,
    log: &Path,
) -> Result<(), ServiceError> {
    let quote = || std::fs::read_to_string(log).unwrap_or_default();
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(ServiceError(format!(
                "{what} exited ({status}) before listening on 127.0.0.1:{port}; its log {}:\n{}",
                log.display(),
                quote()
            )));
        }
        if listens(child.id(), port) {
            return Ok(());
        }
        if start.elapsed() > LISTEN_WITHIN {
            return Err(ServiceError(format!(
                "{what} (pid {}) did not listen on 127.0.0.1:{port} within {LISTEN_WITHIN:?}; \
                 its log {}:\n{}",
                child.id(),
                log.display(),
                quote()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the Redis on `port` answers PING (PONG, or NOAUTH when it
/// wants a password): it listens before it has loaded its append-only file
/// and refuses commands until then.
pub fn await_redis(port: u16) -> Result<(), ServiceError> {
    let start = Instant::now();
    while start.elapsed() < LISTEN_WITHIN {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            // A listener that never answers is asked again, not waited on.
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            let mut buf = [0u8; 64];
            if s.write_all(b"PING\r\n").is_ok() {
                if let Ok(n) = s.read(&mut buf) {
                    if buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH") {
                        return Ok(());
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(ServiceError(format!(
        "the Redis on 127.0.0.1:{port} did not answer PING within {LISTEN_WITHIN:?}"
    )))
}

/// Whether process `pid` has a TCP socket listening on `port` open.
fn listens(pid: u32, port: u16) -> bool {
    let listeners = listening_inodes(port);
    if listeners.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']'))
                .is_some_and(|inode| listeners.iter().any(|l| l == inode))
        })
    })
}

/// Inodes of the sockets listening on `port` (IPv4 or IPv6), from the
/// kernel's socket tables.
fn listening_inodes(port: u16) -> Vec<String> {
    /// `st` of a socket in the LISTEN state.
    const LISTEN: &str = "0A";
    let port = format!("{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    let local_port = f.get(1)?.rsplit(':').next()?;
                    (local_port == port && *f.get(3)? == LISTEN)
                        .then(|| f.get(9).map(|s| s.to_string()))?
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let held: Vec<(u16, TcpListener)> = (0..50)
            .map(|_| {
                let p = service_port();
                (
                    p,
                    TcpListener::bind(("127.0.0.1", p)).expect("handed out free"),
                )
            })
            .collect();
        let mut ports: Vec<u16> = held.iter().map(|(p, _)| *p).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50, "a port was handed out twice");
        let end = ephemeral_start();
        assert!(ports
            .iter()
            .all(|&p| u32::from(p) >= FIRST && u32::from(p) < end));
    }

    #[test]
    fn a_companion_port_is_free_and_below_the_ephemeral_range() {
        let p = service_port_with(10_000);
        assert!(u32::from(p) + 10_000 < ephemeral_start());
        let _main = TcpListener::bind(("127.0.0.1", p)).unwrap();
        let _bus = TcpListener::bind(("127.0.0.1", p + 10_000)).unwrap();
    }

    /// A command listening on `port` until killed.
    fn listener(port: u16) -> Command {
        let mut c = Command::new("python3");
        c.args([
            "-c",
            "import socket,sys,time\n\
             s=socket.socket()\n\
             s.bind(('127.0.0.1',int(sys.argv[1])))\n\
             s.listen()\n\
             print('listening',flush=True)\n\
             time.sleep(120)",
            &port.to_string(),
        ]);
        c
    }

    /// A directory of this test process, removed on drop.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("labios-ports-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn stop(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_listener_counts_only_for_the_process_that_holds_it() {
        let port = service_port();
        let _ours = TcpListener::bind(("127.0.0.1", port)).unwrap();
        assert!(listens(std::process::id(), port));
        let other = Command::new("sleep").arg("60").spawn().unwrap();
        assert!(
            !listens(other.id(), port),
            "a process was taken for the listener another one holds"
        );
        stop(other);
    }

    #[test]
    fn a_service_is_returned_once_it_listens_itself() {
        let dir = Scratch::new("a");
        let (child, port) = start_service("listener", &dir.0.join("log"), listener).unwrap();
        assert!(listens(child.id(), port));
        stop(child);
    }

    #[test]
    fn a_service_that_finds_its_port_taken_is_started_on_another() {
        let dir = Scratch::new("b");
        let taken = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        let mut given = Vec::new();
        let (child, port) = start_service("listener", &dir.0.join("log"), |port| {
            given.push(port);
            // The first start loses its port to another program.
            listener(if given.len() == 1 { taken_port } else { port })
        })
        .unwrap();
        assert_eq!(given.len(), 2, "one retry after the taken port");
        assert_eq!(port, given[1]);
        assert!(listens(child.id(), port));
        stop(child);
    }

    #[test]
    fn a_service_that_fails_otherwise_is_an_error_quoting_its_log() {
        let dir = Scratch::new("c");
        let e = start_service("broken", &dir.0.join("log"), |_| {
            let mut c = Command::new("sh");
            c.args(["-c", "echo no such configuration >&2; exit 3"]);
            c
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("broken exited"), "{e}");
        assert!(e.contains("no such configuration"), "{e}");
    }

    #[test]
    fn a_missing_program_says_how_to_install_it() {
        let dir = Scratch::new("d");
        let e = start_service("nothing", &dir.0.join("log"), |_| {
            Command::new("labios-no-such-program")
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("scripts/services.sh install"), "{e}");
    }
}
