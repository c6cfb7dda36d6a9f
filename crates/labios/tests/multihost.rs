//! The distributed deployment across hosts (article 3.4): four network
//! namespaces on this machine stand in for four hosts on one private LAN.
//!
//! ```text
//!              bridge namespace lb<pid>b: bridge br0
//!      ┌──────────────┬──────────┴───┬──────────────┐
//!   veth│          veth│          veth│          veth│
//!  lb<pid>s         lb<pid>w0      lb<pid>w1       lb<pid>c
//!  198.18.0.1       198.18.0.2     198.18.0.3      198.18.0.4
//!  nats-server      labios         labios          labios put/get/
//!  redis-server     worker 0       worker 1        stat/status
//!  labios dispatcher (data dir A)  (data dir B)    (client)
//! ```
//!
//! Addresses come from the RFC 2544 benchmarking range; no namespace has a
//! default route, so nothing can address anything outside this machine
//! (the test checks it). Namespaces (and with them the veths and the bridge)
//! are deleted in `Drop`, also when the test fails.
//!
//! Needs root, `ip` (iproute2), nats-server and redis-server:
//! `bash scripts/services.sh install`.

mod common;

use common::deploy::{spawn_service, BIN};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SERVICES_IP: &str = "198.18.0.1";
const NATS_PORT: u16 = 4222;
const REDIS_PORT: u16 = 6379;

/// Runs `ip ARGS`, failing the test with the command's stderr.
fn ip(args: &[&str]) {
    let out = match Command::new("ip").args(args).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`ip` is not installed: run `bash scripts/services.sh install` (installs iproute2)"
        ),
        Err(e) => panic!("cannot run ip: {e}"),
    };
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ip_out(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One simulated host: a network namespace with one veth on the LAN.
struct Host {
    ns: String,
    addr: String,
}

/// The namespaces, the processes running in them and their directories.
struct Lan {
    bridge_ns: String,
    hosts: Vec<Host>,
    procs: Vec<(String, Child)>,
    dir: tempfile::TempDir,
}

impl Lan {
    /// Services host, two worker hosts and a client host, bridged.
    fn build() -> Lan {
        let pid = std::process::id();
        let mut lan = Lan {
            bridge_ns: format!("lb{pid}b"),
            hosts: Vec::new(),
            procs: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        };
        // Registered before creation so that Drop removes whatever exists.
        for (i, name) in ["s", "w0", "w1", "c"].iter().enumerate() {
            lan.hosts.push(Host {
                ns: format!("lb{pid}{name}"),
                addr: format!("198.18.0.{}", i + 1),
            });
        }
        ip(&["netns", "add", &lan.bridge_ns]);
        ip(&["-n", &lan.bridge_ns, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &lan.bridge_ns, "link", "set", "br0", "up"]);
        for (i, h) in lan.hosts.iter().enumerate() {
            ip(&["netns", "add", &h.ns]);
            // Both ends are created directly inside their namespaces: nothing
            // ever appears in the machine's own network namespace.
            let (end, port) = ("eth0".to_string(), format!("p{i}"));
            ip(&[
                "-n",
                &h.ns,
                "link",
                "add",
                &end,
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &lan.bridge_ns,
            ]);
            ip(&["-n", &lan.bridge_ns, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &lan.bridge_ns, "link", "set", &port, "up"]);
            ip(&[
                "-n",
                &h.ns,
                "addr",
                "add",
                &format!("{}/24", h.addr),
                "dev",
                &end,
            ]);
            ip(&["-n", &h.ns, "link", "set", &end, "up"]);
            ip(&["-n", &h.ns, "link", "set", "lo", "up"]);
        }
        lan
    }

    fn ns(&self, host: usize) -> &str {
        &self.hosts[host].ns
    }

    /// The LABIOS configuration of a host: everything on the services host,
    /// data in the host's own directory.
    fn env(&self, data: &Path) -> Vec<(String, String)> {
        vec![
            ("LABIOS_DEPLOYMENT".into(), "distributed".into()),
            (
                "LABIOS_NATS__URL".into(),
                format!("nats://{SERVICES_IP}:{NATS_PORT}"),
            ),
            (
                "LABIOS_REDIS__URLS".into(),
                format!("[\"redis://{SERVICES_IP}:{REDIS_PORT}\"]"),
            ),
            (
                "LABIOS_DATA_DIR".into(),
                data.to_string_lossy().into_owned(),
            ),
            // Consecutive chunks of one file to different workers.
            ("LABIOS_DISPATCHER__POLICY".into(), "round-robin".into()),
        ]
    }

    /// `ip netns exec NS program args...` with a clean environment.
    fn command(
        &self,
        host: usize,
        program: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns(host), program])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    /// A long-running process on `host`, logging to the test directory.
    fn spawn(
        &mut self,
        name: &str,
        host: usize,
        program: &str,
        args: &[&str],
        env: &[(String, String)],
    ) {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let mut cmd = self.command(host, program, args, env);
        cmd.stdout(log.try_clone().unwrap()).stderr(log);
        let child = spawn_service(&mut cmd, program);
        self.procs.push((name.into(), child));
    }

    /// Waits until `addr:port` accepts connections as seen from `host`.
    fn wait_port(&self, host: usize, addr: &str, port: u16) {
        let t = Instant::now();
        loop {
            let ok = self
                .command(
                    host,
                    "bash",
                    &["-c", &format!("exec 3<>/dev/tcp/{addr}/{port}")],
                    &[],
                )
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success();
            if ok {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{addr}:{port} unreachable from {} after 20 s\n{}",
                self.ns(host),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs a `labios` client command on the client host.
    fn labios(&self, args: &[&str], env: &[(String, String)]) -> Output {
        self.command(3, BIN, args, env).output().unwrap()
    }

    fn ok(&self, args: &[&str], env: &[(String, String)]) -> String {
        let out = self.labios(args, env);
        assert!(
            out.status.success(),
            "labios {args:?} on the client host failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for (name, _) in &self.procs {
            let text = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
                .unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!(
                "--- {name}\n{}\n",
                lines[lines.len().saturating_sub(15)..].join("\n")
            ));
        }
        out
    }

    /// SIGTERM to every process, newest first; each must exit cleanly.
    fn stop(&mut self) {
        let mut failed = Vec::new();
        for (name, child) in std::mem::take(&mut self.procs).into_iter().rev() {
            let mut child = child;
            // SAFETY: plain kill(2) on our own unreaped child.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let t = Instant::now();
            let st = loop {
                if let Ok(Some(st)) = child.try_wait() {
                    break Some(st);
                }
                if t.elapsed() > Duration::from_secs(20) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            // LABIOS processes must exit 0 on SIGTERM; nats-server exits 1
            // after a clean shutdown, so the services only have to exit.
            let service = name == "nats" || name == "redis";
            if st.is_none() || !(service || st.is_some_and(|s| s.success())) {
                failed.push(format!("{name}: {st:?}"));
            }
        }
        assert!(failed.is_empty(), "unclean stop: {failed:?}");
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("process logs:\n{}", self.logs());
        }
        for (_, child) in &mut self.procs {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Deleting a namespace deletes its interfaces; a veth pair goes with
        // either end, the bridge with its namespace.
        for ns in self
            .hosts
            .iter()
            .map(|h| h.ns.clone())
            .chain([self.bridge_ns.clone()])
        {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn files_with_data(root: &Path) -> Vec<PathBuf> {
    common::files_under(root)
        .into_iter()
        .filter(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false))
        .collect()
}

#[test]
fn labels_and_data_cross_hosts() {
    let mut lan = Lan::build();
    // Private LAN only: one /24, no default route anywhere.
    for h in 0..4 {
        let routes = ip_out(&["-n", lan.ns(h), "route", "show"]);
        assert!(
            !routes.contains("default") && routes.contains("198.18.0.0/24"),
            "{}: unexpected routes {routes}",
            lan.ns(h)
        );
    }
    let base = lan.dir.path().to_path_buf();
    let svc = base.join("services");
    for d in [
        "nats",
        "redis",
        "dispatcher",
        "host-w0",
        "host-w1",
        "client",
    ] {
        std::fs::create_dir_all(svc.join(d)).unwrap();
    }

    // Services host: NATS JetStream, Redis and the dispatcher.
    let nats_dir = svc.join("nats");
    lan.spawn(
        "nats",
        0,
        "nats-server",
        &[
            "-js",
            "-a",
            SERVICES_IP,
            "-p",
            &NATS_PORT.to_string(),
            "-sd",
            nats_dir.to_str().unwrap(),
        ],
        &[],
    );
    let redis_dir = svc.join("redis");
    lan.spawn(
        "redis",
        0,
        "redis-server",
        &[
            "--bind",
            SERVICES_IP,
            "--port",
            &REDIS_PORT.to_string(),
            "--dir",
            redis_dir.to_str().unwrap(),
            // Clients come from other hosts of the private LAN, which
            // protected mode (no password) would refuse.
            "--protected-mode",
            "no",
            "--appendonly",
            "yes",
            "--save",
            "",
            "--daemonize",
            "no",
        ],
        &[],
    );
    // Reached from the client host: the services are on the LAN.
    lan.wait_port(3, SERVICES_IP, NATS_PORT);
    lan.wait_port(3, SERVICES_IP, REDIS_PORT);

    let client_env = lan.env(&svc.join("client"));
    // An application with credentials, registered from the client host.
    let created = lan.ok(&["app", "create", "multihost"], &client_env);
    let field = |name: &str| {
        created
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {name} in {created}"))
    };
    let mut client_env = client_env;
    client_env.push(("LABIOS_KEY".into(), field("key:")));
    client_env.push(("LABIOS_SECRET".into(), field("secret:")));

    let env = lan.env(&svc.join("dispatcher"));
    lan.spawn("dispatcher", 0, BIN, &["dispatcher"], &env);
    // Worker hosts: each stores in its own data directory.
    let w0 = svc.join("host-w0");
    let w1 = svc.join("host-w1");
    // Worker 0 is named as this machine (as a worker is by default), and
    // worker 1 by its namespace: `labios locate` tells them apart, and
    // `labios run --near` runs here or reaches the namespace.
    let this_machine = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let names = [this_machine.trim().to_string(), lan.ns(2).to_string()];
    for (i, dir) in [&w0, &w1].into_iter().enumerate() {
        let mut env = lan.env(dir);
        env.push(("LABIOS_WORKER__HOST".into(), names[i].clone()));
        lan.spawn(
            &format!("worker{i}"),
            i + 1,
            BIN,
            &["worker", &i.to_string()],
            &env,
        );
    }

    // Wait until both workers announced themselves in Redis.
    let t = Instant::now();
    loop {
        let status = lan.ok(&["status"], &client_env);
        let ids: Vec<&str> = status
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        if ids.contains(&"0") && ids.contains(&"1") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "workers never registered: {status}\n{}",
            lan.logs()
        );
    }

    // Files written from the client host, read back from it byte-exact.
    let sizes = [0usize, 1, 65_537, (5 << 20) + 3, 21 << 20];
    let input = svc.join("client");
    for (i, &size) in sizes.iter().enumerate() {
        let local = input.join(format!("in{i}"));
        std::fs::write(&local, common::data(i as u64, size)).unwrap();
        lan.ok(
            &["put", local.to_str().unwrap(), &format!("/lan/f{i}")],
            &client_env,
        );
    }
    for (i, &size) in sizes.iter().enumerate() {
        let back = input.join(format!("back{i}"));
        lan.ok(
            &["get", &format!("/lan/f{i}"), back.to_str().unwrap()],
            &client_env,
        );
        let got = std::fs::read(&back).unwrap();
        assert_eq!(got.len(), size, "/lan/f{i} length");
        assert!(
            got == common::data(i as u64, size).to_vec(),
            "/lan/f{i} differs"
        );
    }
    // The 21 MiB file is six labels, spread over both worker hosts.
    let stat = lan.ok(&["stat", "/lan/f4"], &client_env);
    assert!(
        stat.contains("on workers [0, 1]"),
        "the big file's extents are not on both workers: {stat}"
    );
    // `labios locate` names each extent's worker and its host.
    let located = lan.ok(&["locate", "/lan/f4"], &client_env);
    let mut covered = 0;
    for line in located.lines() {
        // Columns: offset len worker tier host.
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 5, "{located}");
        assert_eq!(cols[0].parse::<u64>().unwrap(), covered, "{located}");
        covered += cols[1].parse::<u64>().unwrap();
        let worker: usize = cols[2].parse().unwrap();
        assert_eq!(cols[4], names[worker], "{located}");
    }
    assert_eq!(covered, 21 << 20, "{located}");
    assert!(
        located.contains(&names[0]) && located.contains(&names[1]),
        "{located}"
    );
    // `labios run --near` starts a program on the host holding its input,
    // where it runs (its address says so) and reads the file: a file put
    // in a directory hinted to worker 0's tier runs here (the client's
    // namespace), one hinted to worker 1's in worker 1's namespace. The
    // path is given under the prefix, as a program names it.
    let mut near_env = client_env.clone();
    near_env.push((
        "LABIOS_RUN__LAUNCHER".into(),
        r#"["ip", "netns", "exec", "{host}"]"#.into(),
    ));
    let empty = input.join("empty");
    std::fs::write(&empty, b"").unwrap();
    for (worker, tier, ran_at) in [(0, "ram", 3), (1, "nvme", 2)] {
        let dir = format!("/lan/near{worker}");
        lan.ok(
            &["put", empty.to_str().unwrap(), &format!("{dir}/seed")],
            &client_env,
        );
        lan.ok(&["hint", "set", &dir, "tier", tier], &client_env);
        let local = input.join(format!("in-near{worker}"));
        std::fs::write(&local, common::data(40 + worker as u64, 300_000)).unwrap();
        let path = format!("{dir}/input");
        lan.ok(&["put", local.to_str().unwrap(), &path], &client_env);
        let located = lan.ok(&["locate", &path], &client_env);
        assert_eq!(
            located,
            format!("0 300000 {worker} {tier} {}\n", names[worker]),
            "{path}"
        );
        let script =
            format!("ip -4 -o addr show | grep -o '198[.]18[.]0[.][0-9]*'; wc -c < /labios{path}");
        let near = format!("/labios{path}");
        let out = lan.ok(
            &["run", "--near", &near, "--", "sh", "-c", &script],
            &near_env,
        );
        assert_eq!(
            out,
            format!("{}\n300000\n", lan.hosts[ran_at].addr),
            "{path} on worker {worker}"
        );
    }
    // Both workers executed labels...
    let status = lan.ok(&["status"], &client_env);
    eprintln!("labios stat /lan/f4 (client host):\n{stat}\nlabios status (client host):\n{status}");
    for id in ["0", "1"] {
        let row = status
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .unwrap_or_else(|| panic!("no worker {id} in {status}"));
        // Columns: id tier state speed energy score queued used labels stack.
        let labels: u64 = row.split_whitespace().nth(8).unwrap().parse().unwrap();
        assert!(labels > 0, "worker {id} executed no label: {status}");
    }
    // ...and stored the bytes on their own hosts' disks, nowhere else.
    let on_w0 = files_with_data(&w0.join("workers"));
    let on_w1 = files_with_data(&w1.join("workers"));
    assert!(
        !on_w0.is_empty() && !on_w1.is_empty(),
        "both worker hosts must hold data: {on_w0:?} {on_w1:?}"
    );
    assert!(
        on_w0
            .iter()
            .all(|p| p.starts_with(w0.join("workers/0-ram")))
            && on_w1
                .iter()
                .all(|p| p.starts_with(w1.join("workers/1-nvme"))),
        "worker data in the wrong place: {on_w0:?} {on_w1:?}"
    );
    assert!(
        files_with_data(&svc.join("client")).iter().all(|p| p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("in")
            || p.file_name().unwrap().to_string_lossy().starts_with("back")),
        "the client host stores no LABIOS data"
    );
    lan.stop();
}
