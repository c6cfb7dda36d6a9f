//! Faults of a distributed deployment, with real processes: a real
//! `nats-server -js` and `redis-server --appendonly yes` on free loopback
//! ports, and the `labios` binary as dispatcher, manager and three workers,
//! all configured through `LABIOS_*` variables. Processes are killed with
//! SIGKILL (a crash: nothing flushed, nothing said goodbye) and restarted.
//! Every test checks that each write that returned Ok reads back
//! byte-exact afterwards; the last one runs the model checker
//! (`common/model.rs`) across such crashes and NATS and Redis restarts.
//!
//! Needs `nats-server` and `redis-server`: `bash scripts/services.sh install`.

mod common;

use bytes::Bytes;
use common::model_client::{self, ClientApi};
use labios::config::Deployment;
use labios::Config;
use labios_client::Client;
use labios_core::administrator::Administrator;
use labios_distributed::nats_queue::NatsConfig;
use labios_distributed::redis_store::RedisConfig;
use labios_label::{WorkerId, WorkerState, WorkerStatus};
use labios_store::Stores;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_labios");
const WORKERS: usize = 3;
const KIB: usize = 1024;

fn spawn_or_explain(cmd: &mut Command, what: &str) -> Child {
    match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("{what} is not installed (not on PATH): run `bash scripts/services.sh install`")
        }
        Err(e) => panic!("cannot start {what}: {e}"),
    }
}

fn kill9(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// SIGTERM, escalating to SIGKILL after 10 s.
fn terminate(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn service_command(kind: &str, port: u16, dir: &Path) -> Command {
    let port = port.to_string();
    let mut cmd = Command::new(kind);
    if kind == "nats-server" {
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &port, "-sd"])
            .arg(dir);
    } else {
        cmd.args(["--port", &port, "--bind", "127.0.0.1", "--dir"])
            .arg(dir)
            .args(["--appendonly", "yes", "--save", "", "--daemonize", "no"]);
    }
    cmd
}

/// A nats-server or redis-server on a fixed port and data directory, so it
/// can be restarted in place.
struct Service {
    kind: &'static str,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Service {
    fn start(kind: &'static str, dir: PathBuf) -> Service {
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{kind}.log"));
        let (child, port) =
            labios_ports::start_service(kind, &log, |port| service_command(kind, port, &dir))
                .unwrap_or_else(|e| panic!("{e}"));
        let s = Service {
            kind,
            port,
            dir,
            child: Some(child),
        };
        s.wait_ready();
        s
    }

    /// Starts the service again on its port and data directory.
    fn spawn(&mut self) {
        let log = self.dir.join(format!("{}.log", self.kind));
        let mut command = service_command(self.kind, self.port, &self.dir);
        let child = labios_ports::start_service_on(self.kind, &log, self.port, &mut command)
            .unwrap_or_else(|e| panic!("{e}"));
        self.child = Some(child);
        self.wait_ready();
    }

    /// Until Redis answers PING; nats-server is ready once it listens.
    fn wait_ready(&self) {
        if self.kind == "redis-server" {
            labios_ports::await_redis(self.port).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// Graceful restart on the same port and data directory.
    fn restart(&mut self) {
        terminate(&mut self.child);
        self.spawn();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        kill9(&mut self.child);
    }
}

/// One cluster at a time: each runs seven processes, and several at once on
/// a small machine starve workers of CPU long enough to miss heartbeats,
/// which is a different test.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Dispatcher, manager and workers as `labios` processes over one NATS and
/// one Redis, all killed on drop.
struct Cluster {
    // Killed in `Drop`, before the services and the directory go.
    dispatcher: Option<Child>,
    manager: Option<Child>,
    workers: Vec<Option<Child>>,
    nats: Service,
    redis: Service,
    env: Vec<(String, String)>,
    config: Config,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts everything; `extra` adds or overrides `LABIOS_*` variables.
    fn start(extra: &[(&str, &str)]) -> Cluster {
        Cluster::start_with_reserve(extra, 0)
    }

    /// Like [`Cluster::start`], with the last `reserve` workers started
    /// suspended (`labios worker INDEX --suspended`, an elastic reserve).
    fn start_with_reserve(extra: &[(&str, &str)], reserve: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let nats = Service::start("nats-server", dir.path().join("nats"));
        let redis = Service::start("redis-server", dir.path().join("redis"));
        let data = dir.path().join("data");
        let nats_url = format!("nats://127.0.0.1:{}", nats.port);
        let redis_url = format!("redis://127.0.0.1:{}", redis.port);
        let mut env: Vec<(String, String)> = [
            ("LABIOS_DEPLOYMENT", "distributed".to_string()),
            ("LABIOS_DATA_DIR", data.display().to_string()),
            ("LABIOS_NATS__URL", nats_url.clone()),
            ("LABIOS_NATS__ACK_WAIT_MS", "1000".into()),
            ("LABIOS_REDIS__URLS", format!("[\"{redis_url}\"]")),
            ("LABIOS_MANAGER__DEAD_AFTER_MS", "1000".into()),
            ("LABIOS_WORKER__SCORE_INTERVAL_MS", "200".into()),
            (
                "LABIOS_WORKERS",
                format!(
                    "[{}]",
                    (0..WORKERS)
                        .map(|i| format!("{{tier=\"t{i}\",speed=3,energy=3,capacity=1073741824}}"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ),
            ("LABIOS_LOG", "info".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((k.to_string(), v.to_string()));
        }
        let config = Config {
            deployment: Deployment::Distributed,
            data_dir: data,
            nats: NatsConfig {
                url: nats_url,
                ack_wait_ms: 1000,
                ..NatsConfig::default()
            },
            redis: RedisConfig {
                urls: vec![redis_url],
                ..RedisConfig::default()
            },
            ..Config::default()
        };
        let mut c = Cluster {
            dispatcher: None,
            manager: None,
            workers: (0..WORKERS).map(|_| None).collect(),
            nats,
            redis,
            env,
            config,
            dir,
        };
        c.dispatcher = Some(c.spawn("dispatcher", &["dispatcher"]));
        c.manager = Some(c.spawn("manager", &["manager"]));
        for i in 0..WORKERS {
            if i + reserve >= WORKERS {
                c.workers[i] = Some(c.spawn(
                    &format!("worker-{i}"),
                    &["worker", &i.to_string(), "--suspended"],
                ));
            } else {
                c.start_worker(i);
            }
        }
        c
    }

    /// Runs `labios ARGS` with the cluster's environment, output appended
    /// to `logs/NAME.log` in the test directory.
    fn spawn(&self, name: &str, args: &[&str]) -> Child {
        let logs = self.dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("{name}.log")))
            .unwrap();
        let mut cmd = Command::new(BIN);
        for (k, _) in std::env::vars() {
            if k.starts_with("LABIOS_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        spawn_or_explain(&mut cmd, BIN)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join("logs").join(format!("{name}.log")))
            .unwrap_or_default()
    }

    fn start_worker(&mut self, i: usize) {
        self.workers[i] = Some(self.spawn(&format!("worker-{i}"), &["worker", &i.to_string()]));
    }

    /// Bytes allocated to the files of every worker's device.
    fn allocated(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        (0..WORKERS)
            .flat_map(|i| common::files_under(&self.worker_dir(i).join("files")))
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.blocks() * 512)
            .sum()
    }

    fn worker_dir(&self, i: usize) -> PathBuf {
        self.config
            .data_dir
            .join("workers")
            .join(format!("{i}-t{i}"))
    }

    async fn stores(&self) -> Stores {
        labios_connect::distributed_stores(&self.config.connection())
            .await
            .unwrap()
    }

    /// A client of the default application (created on first use).
    async fn client(&self) -> Client {
        let stores = self.stores().await;
        Administrator::new(stores.inventory.clone())
            .ensure_default_app()
            .await
            .unwrap();
        labios_connect::connect_client(&self.config.connection(), None, None)
            .await
            .unwrap()
    }

    async fn statuses(stores: &Stores) -> Vec<WorkerStatus> {
        stores.inventory.workers().await.unwrap_or_default()
    }

    /// Waits until worker `id` is published in `state` (and, with
    /// `fresh_after`, with a heartbeat newer than that).
    async fn wait_worker(
        &self,
        stores: &Stores,
        id: WorkerId,
        state: WorkerState,
        fresh_after: Option<u64>,
        timeout: Duration,
    ) -> WorkerStatus {
        let t = Instant::now();
        loop {
            let found = Self::statuses(stores)
                .await
                .into_iter()
                .find(|w| w.spec.id == id);
            if let Some(w) = &found {
                if w.state == state && fresh_after.is_none_or(|h| w.heartbeat > h) {
                    return w.clone();
                }
            }
            assert!(
                t.elapsed() < timeout,
                "worker {id} not {state:?} within {timeout:?}: {found:?}\nmanager log:\n{}",
                self.log("manager")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every worker is Active (started and registered), then
    /// until the dispatcher has surely seen them (it refreshes its view of
    /// the pool every 100 ms; a label finding no worker fails).
    async fn wait_all_active(&self, stores: &Stores) {
        for i in 0..WORKERS {
            self.wait_worker(
                stores,
                i as WorkerId,
                WorkerState::Active,
                None,
                Duration::from_secs(20),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl Drop for Cluster {
    /// Kills every process (a `Child` does not die with its handle); a
    /// failed test leaves its process logs behind for a post-mortem.
    fn drop(&mut self) {
        kill9(&mut self.dispatcher);
        kill9(&mut self.manager);
        for w in &mut self.workers {
            kill9(w);
        }
        if std::thread::panicking() {
            let keep = std::env::temp_dir().join(format!(
                "cluster_faults-logs-{}-{}",
                std::process::id(),
                self.nats.port
            ));
            let _ = std::fs::create_dir_all(&keep);
            if let Ok(entries) = std::fs::read_dir(self.dir.path().join("logs")) {
                for e in entries.flatten() {
                    let _ = std::fs::copy(e.path(), keep.join(e.file_name()));
                }
            }
            eprintln!("process logs kept in {}", keep.display());
        }
    }
}

/// Deterministic bytes for write `i`.
fn payload(i: usize, len: usize) -> Bytes {
    let mut rng = fastrand::Rng::with_seed(i as u64 + 7);
    Bytes::from((0..len).map(|_| rng.u8(..)).collect::<Vec<u8>>())
}

/// Reads every `(path, offset, bytes)` back and compares byte for byte.
async fn verify(client: &Client, written: &[(String, u64, Bytes)]) {
    for (path, offset, data) in written {
        let got = client
            .read_at(path, *offset, data.len() as u64)
            .await
            .unwrap_or_else(|e| panic!("reading {path}@{offset}: {e}"));
        assert!(
            got == *data,
            "{path}@{offset}: {} bytes read back differ from the {} written",
            got.len(),
            data.len()
        );
    }
}

const LABEL: usize = 256 * KIB;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_worker_labels_finish_elsewhere_and_its_data_returns() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Declared down only after 3 s: long enough for the dispatcher to queue
    // part of the stream to the dead worker, even on a loaded machine.
    let mut cluster = Cluster::start(&[("LABIOS_MANAGER__DEAD_AFTER_MS", "3000")]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let client = cluster.client().await;
    let mut written = Vec::new();
    for f in 0..4 {
        let path = format!("/k/{f}");
        client.catalog().open_or_create(&path, 0o644).await.unwrap();
    }
    let mut handles = Vec::new();
    for i in 0..96 {
        let path = format!("/k/{}", i % 4);
        let offset = (i / 4 * LABEL) as u64;
        let data = payload(i, LABEL);
        handles.push(
            client
                .write_at_async(&path, offset, data.clone())
                .await
                .unwrap(),
        );
        written.push((path, offset, data));
        // Early: labels are in flight on it and, until the manager declares
        // it down, the dispatcher keeps queueing to it.
        if i == 8 {
            kill9(&mut cluster.workers[1]);
        }
    }
    let dead_since = Cluster::statuses(&stores)
        .await
        .iter()
        .find(|w| w.spec.id == 1)
        .map(|w| w.heartbeat)
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), client.wait_many(&handles))
        .await
        .expect("labels of the killed worker did not finish elsewhere within 30 s")
        .expect("no label may fail because a worker died");
    cluster
        .wait_worker(
            &stores,
            1,
            WorkerState::Decommissioned,
            None,
            Duration::from_secs(10),
        )
        .await;
    let log = cluster.log("manager");
    eprintln!(
        "manager: {} tasks re-dispatched, {} labels found already done",
        log.matches("re-dispatched").count(),
        log.matches("had already run").count()
    );
    assert!(
        log.contains("re-dispatched"),
        "the manager moved none of the dead worker's tasks:\n{}",
        cluster.log("manager")
    );
    cluster.start_worker(1);
    cluster
        .wait_worker(
            &stores,
            1,
            WorkerState::Active,
            Some(dead_since),
            Duration::from_secs(20),
        )
        .await;
    verify(&client, &written).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dispatcher_crash_and_restart_executes_queued_labels_once() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(&[]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let client = cluster.client().await;
    let path = "/d/stream";
    client.catalog().open_or_create(path, 0o644).await.unwrap();
    let mut written = Vec::new();
    let mut handles = Vec::new();
    let total = 120;
    for i in 0..total {
        let offset = (i * 64 * KIB) as u64;
        let data = payload(1000 + i, 64 * KIB);
        handles.push(
            client
                .write_at_async(path, offset, data.clone())
                .await
                .unwrap(),
        );
        written.push((path.to_string(), offset, data));
        if i == total / 3 {
            kill9(&mut cluster.dispatcher);
        }
        if i == 2 * total / 3 {
            cluster.dispatcher = Some(cluster.spawn("dispatcher", &["dispatcher"]));
        }
    }
    tokio::time::timeout(Duration::from_secs(40), client.wait_many(&handles))
        .await
        .expect("queued labels did not run after the dispatcher restarted")
        .expect("no label may fail because the dispatcher crashed");
    let replayed: usize = (0..WORKERS)
        .map(|i| {
            cluster
                .log(&format!("worker-{i}"))
                .matches("had already run")
                .count()
        })
        .sum();
    eprintln!("labels delivered again after the crash and found already done: {replayed}");
    let whole = client.read(path).await.unwrap();
    assert_eq!(whole.len(), total * 64 * KIB);
    verify(&client, &written).await;
    // Exactly once: every label ran, none twice into a different place;
    // the workers' counts add up to at least the labels published.
    let done: u64 = Cluster::statuses(&stores)
        .await
        .iter()
        .map(|w| w.labels_done)
        .sum();
    assert!(
        done >= total as u64,
        "only {done} labels executed of {total}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarted_worker_reregisters_and_serves_new_labels() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(&[]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let client = cluster.client().await;
    let before = cluster
        .wait_worker(
            &stores,
            2,
            WorkerState::Active,
            None,
            Duration::from_secs(5),
        )
        .await;
    kill9(&mut cluster.workers[2]);
    cluster
        .wait_worker(
            &stores,
            2,
            WorkerState::Decommissioned,
            None,
            Duration::from_secs(10),
        )
        .await;
    assert!(
        cluster.log("manager").contains("worker is down"),
        "the manager must report the dead worker"
    );
    cluster.start_worker(2);
    cluster
        .wait_worker(
            &stores,
            2,
            WorkerState::Active,
            Some(before.heartbeat),
            Duration::from_secs(20),
        )
        .await;
    // Round robin over the active workers: the restarted one gets its share.
    let mut written = Vec::new();
    for i in 0..24 {
        let path = format!("/r/{i}");
        let data = payload(2000 + i, LABEL);
        client.write_at_sync(&path, 0, data.clone()).await.unwrap();
        written.push((path, 0, data));
    }
    let t = Instant::now();
    loop {
        let w2 = Cluster::statuses(&stores)
            .await
            .into_iter()
            .find(|w| w.spec.id == 2)
            .unwrap();
        if w2.labels_done > 0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the restarted worker executed no new label: {w2:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    verify(&client, &written).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_and_redis_restart_lose_no_acknowledged_write() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(&[]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let client = cluster.client().await;
    let mut written = Vec::new();
    let mut failures = Vec::new();
    let mut ok_after_restart = 0;
    for i in 0..60 {
        if i == 20 {
            cluster.nats.restart();
        }
        if i == 35 {
            cluster.redis.restart();
        }
        let path = format!("/s/{i}");
        let data = payload(3000 + i, 64 * KIB);
        let attempt = async {
            client.catalog().open_or_create(&path, 0o644).await?;
            client.write_at_sync(&path, 0, data.clone()).await
        };
        match tokio::time::timeout(Duration::from_secs(20), attempt).await {
            Ok(Ok(())) => {
                if i >= 40 {
                    ok_after_restart += 1;
                }
                written.push((path, 0, data));
            }
            Ok(Err(e)) => {
                let msg = e.to_string();
                assert!(!msg.is_empty(), "an outage error must say something");
                failures.push(format!("write {i}: {msg}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => failures.push(format!("write {i}: no answer within 20 s")),
        }
    }
    eprintln!(
        "{} writes acknowledged, {} failed during the outages: {failures:#?}",
        written.len(),
        failures.len()
    );
    assert!(
        ok_after_restart >= 10,
        "services did not recover: only {ok_after_restart} of 20 writes after both restarts succeeded; {failures:#?}"
    );
    verify(&client, &written).await;
}

/// Regression: a Redis that stopped answering for longer than
/// `dead_after_ms` held up the workers' heartbeats and the manager's read
/// of them alike; the read, answered after the stall, showed every
/// heartbeat from before it, and the manager declared live workers down.
/// A read of their data in the next moments then failed with "worker N is
/// down" (seen once in CI after a Redis restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inventory_stall_declares_no_live_worker_down() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(&[]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let client = cluster.client().await;
    let mut written = Vec::new();
    for i in 0..6 {
        let path = format!("/stall/{i}");
        let data = payload(5000 + i, 64 * KIB);
        client.catalog().open_or_create(&path, 0o644).await.unwrap();
        client.write_at_sync(&path, 0, data.clone()).await.unwrap();
        written.push((path, 0, data));
    }
    let redis = cluster.redis.child.as_ref().unwrap().id().to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &redis])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {redis} failed");
    };
    // The fault: Redis answers nobody for 1.6 s (dead_after is 1 s).
    signal("-STOP");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    signal("-CONT");
    let resumed = labios_label::id::now_nanos();
    for i in 0..WORKERS {
        cluster
            .wait_worker(
                &stores,
                i as WorkerId,
                WorkerState::Active,
                Some(resumed),
                Duration::from_secs(20),
            )
            .await;
    }
    verify(&client, &written).await;
    // A declaration comes at the latest one dead_after after the stall.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let log = cluster.log("manager");
    assert!(
        !log.contains("worker is down"),
        "the manager declared a live worker down after the stall:\n{log}"
    );
    verify(&client, &written).await;
}

/// A client killed while it holds open a file it removed (a file removed
/// while open lives until its last close) never lets go of it: once its
/// hold's lease lapses, the manager drops the file and frees its bytes on
/// the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_a_killed_client_kept_open_is_freed_by_the_manager() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(&[("LABIOS_REDIS__HOLD_LEASE_MS", "1000")]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let _app = cluster.client().await;
    let allocated = || cluster.allocated();
    let before = allocated();
    let script = "import os, time\n\
        fd = os.open('/labios/kept', os.O_RDWR | os.O_CREAT, 0o644)\n\
        os.write(fd, b'x' * (1 << 20))\n\
        os.unlink('/labios/kept')\n\
        print('holding', os.getpid(), flush=True)\n\
        time.sleep(600)\n";
    let mut run = Some(cluster.spawn("holder", &["run", "--", "python3", "-c", script]));
    let t = Instant::now();
    let pid = loop {
        let log = cluster.log("holder");
        if let Some(pid) = log.lines().find_map(|l| l.strip_prefix("holding ")) {
            break pid.trim().to_string();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "holder log:\n{log}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        allocated() >= before + (1 << 20),
        "the open file's bytes are kept"
    );
    let killed = Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    assert!(killed.success());
    kill9(&mut run);
    let t = Instant::now();
    while allocated() > before + (64 << 10) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "workers still hold {} bytes, {before} before; manager log:\n{}",
            allocated(),
            cluster.log("manager")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cluster
        .log("manager")
        .contains("freed a file its dead client left open"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_label_is_retried_then_reported_and_the_app_goes_on() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(&[("LABIOS_WORKER__RETRIES", "2")]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let client = cluster.client().await;
    let bad = "/f/bad";
    client.catalog().open_or_create(bad, 0o644).await.unwrap();
    let file = client.catalog().stat(bad).await.unwrap().id;
    // A device that refuses every write (ENOSPC), on every worker, for this
    // one file: whichever worker gets the label fails it after retries. A
    // symlink works where chmod does not (tests may run as root).
    for i in 0..WORKERS {
        let files = cluster.worker_dir(i).join("files");
        std::fs::create_dir_all(&files).unwrap();
        std::os::unix::fs::symlink("/dev/full", files.join(format!("{file:016x}"))).unwrap();
    }
    let err = client
        .write_at_sync(bad, 0, payload(4000, LABEL))
        .await
        .expect_err("a write to a failing device must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("No space left on device") || msg.contains("space"),
        "the error must name the cause: {msg}"
    );
    let retried: usize = (0..WORKERS)
        .map(|i| {
            cluster
                .log(&format!("worker-{i}"))
                .matches("local I/O failed, retrying")
                .count()
        })
        .sum();
    assert!(
        retried >= 2,
        "the label was retried {retried} times, expected 2"
    );
    // The application keeps running: its next writes succeed.
    let mut written = Vec::new();
    for i in 0..6 {
        let path = format!("/f/good{i}");
        let data = payload(4100 + i, LABEL);
        client.write_at_sync(&path, 0, data.clone()).await.unwrap();
        written.push((path, 0, data));
    }
    verify(&client, &written).await;
}

/// Elastic allocation across processes holds the suspended reserve back,
/// as the in-process manager does: the dispatcher gives work only to active
/// workers, and a reserve worker joins once woken (here by the activation
/// message the manager sends when load builds).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn elastic_reserve_gets_no_work_until_woken() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start_with_reserve(
        &[
            ("LABIOS_MANAGER__ALLOCATION", "elastic"),
            ("LABIOS_MANAGER__MIN_ACTIVE", "1"),
            // No load-driven wake-up: the test wakes the reserve itself.
            ("LABIOS_MANAGER__WAKE_THRESHOLD", "1000000000"),
        ],
        2,
    );
    let stores = cluster.stores().await;
    let long = Duration::from_secs(20);
    cluster
        .wait_worker(&stores, 0, WorkerState::Active, None, long)
        .await;
    for id in [1, 2] {
        cluster
            .wait_worker(&stores, id, WorkerState::Suspended, None, long)
            .await;
    }
    // The dispatcher refreshes its view of the pool every 100 ms.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let client = cluster.client().await;
    let mut written = Vec::new();
    let mut handles = Vec::new();
    for i in 0..24 {
        let path = format!("/e/{i}");
        let data = payload(5000 + i, 64 * KIB);
        if i % 2 == 0 {
            client.write_at_sync(&path, 0, data.clone()).await.unwrap();
        } else {
            handles.push(client.write_at_async(&path, 0, data.clone()).await.unwrap());
        }
        written.push((path, 0, data));
    }
    client.wait_many(&handles).await.unwrap();
    let done = |statuses: &[WorkerStatus], id: WorkerId| {
        statuses
            .iter()
            .find(|w| w.spec.id == id)
            .map(|w| (w.state, w.labels_done))
            .unwrap()
    };
    let statuses = statuses_until(&stores, |s| {
        s.iter().map(|w| w.labels_done).sum::<u64>() >= 24
    })
    .await;
    assert!(done(&statuses, 0).1 >= 24, "{statuses:?}");
    for id in [1, 2] {
        assert_eq!(
            done(&statuses, id),
            (WorkerState::Suspended, 0),
            "the reserve worker {id} got work: {statuses:?}"
        );
    }

    stores
        .tasks
        .push(
            &labios_store::worker_queue(1),
            vec![labios_label::Task::wake_up()],
        )
        .await
        .unwrap();
    cluster
        .wait_worker(&stores, 1, WorkerState::Active, None, long)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 24..48 {
        let path = format!("/e/{i}");
        let data = payload(5000 + i, 64 * KIB);
        client.write_at_sync(&path, 0, data.clone()).await.unwrap();
        written.push((path, 0, data));
    }
    let statuses = statuses_until(&stores, |s| done(s, 1).1 > 0).await;
    assert_eq!(
        done(&statuses, 2),
        (WorkerState::Suspended, 0),
        "{statuses:?}"
    );
    verify(&client, &written).await;
}

/// The published worker statuses once `ready` holds for them (workers
/// publish every 200 ms here); fails after 20 s.
async fn statuses_until(
    stores: &Stores,
    ready: impl Fn(&[WorkerStatus]) -> bool,
) -> Vec<WorkerStatus> {
    let t = Instant::now();
    loop {
        let statuses = Cluster::statuses(stores).await;
        if ready(&statuses) {
            return statuses;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "worker statuses never got there: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Data on a worker the manager declared down cannot be read until the
/// worker is back: the read fails promptly with an error naming the worker,
/// while data on live workers reads as usual, and after the restart the
/// data reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reading_data_of_a_down_worker_names_the_worker() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(&[]);
    let stores = cluster.stores().await;
    cluster.wait_all_active(&stores).await;
    let client = cluster.client().await;
    // Round robin spreads the files over the workers.
    let mut written = Vec::new();
    for i in 0..6 {
        let path = format!("/down/{i}");
        let data = payload(6000 + i, 64 * KIB);
        client.write_at_sync(&path, 0, data.clone()).await.unwrap();
        let id = client.stat(&path).await.unwrap().id;
        let extents = stores
            .inventory
            .extents(id, 0, data.len() as u64)
            .await
            .unwrap();
        let holder = extents[0].worker;
        assert!(extents.iter().all(|e| e.worker == holder), "{extents:?}");
        written.push((path, holder, data));
    }
    let victim = written[0].1;
    assert!(
        written.iter().any(|w| w.1 != victim),
        "all files landed on worker {victim}"
    );
    let before = cluster
        .wait_worker(
            &stores,
            victim,
            WorkerState::Active,
            None,
            Duration::from_secs(5),
        )
        .await;
    kill9(&mut cluster.workers[victim as usize]);
    cluster
        .wait_worker(
            &stores,
            victim,
            WorkerState::Decommissioned,
            None,
            Duration::from_secs(10),
        )
        .await;
    for (path, holder, data) in &written {
        let read = tokio::time::timeout(Duration::from_secs(15), client.read(path))
            .await
            .unwrap_or_else(|_| panic!("reading {path} hung"));
        if *holder == victim {
            let err = read.expect_err("data of a down worker cannot be read");
            assert!(
                err.to_string()
                    .contains(&format!("worker {victim} is down")),
                "{path}: the error must name the down worker: {err}"
            );
        } else {
            assert!(read.unwrap() == *data, "{path} read back differs");
        }
    }
    cluster.start_worker(victim as usize);
    cluster
        .wait_worker(
            &stores,
            victim,
            WorkerState::Active,
            Some(before.heartbeat),
            Duration::from_secs(20),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (path, _, data) = &written[0];
    assert!(client.read(path).await.unwrap() == *data);
}

/// Elasticity across processes: an in-process manager launches the worker
/// processes itself (workers beyond `min_active` suspended), wakes a
/// suspended one with an activation message several times (it re-suspends
/// when idle), records the latencies, and stops every worker when it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manager_launches_wakes_and_stops_worker_processes() {
    let _one = ONE_AT_A_TIME.lock().await;
    use labios_server::{ClusterManager, Launcher, LocalProcessLauncher, ManagerConfig};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let nats = Service::start("nats-server", dir.path().join("nats"));
    let redis = Service::start("redis-server", dir.path().join("redis"));
    let data = dir.path().join("data");
    let file = dir.path().join("labios.toml");
    let mut toml = format!(
        "deployment = \"distributed\"\ndata_dir = \"{}\"\n\
         [nats]\nurl = \"nats://127.0.0.1:{}\"\nack_wait_ms = 1000\n\
         [redis]\nurls = [\"redis://127.0.0.1:{}\"]\n\
         [worker]\nscore_interval_ms = 200\nidle_suspend_ms = 400\n",
        data.display(),
        nats.port,
        redis.port
    );
    for i in 0..WORKERS {
        toml.push_str(&format!(
            "[[workers]]\ntier = \"t{i}\"\nspeed = 3\nenergy = 3\ncapacity = 1073741824\n"
        ));
    }
    std::fs::write(&file, toml).unwrap();
    let config = Config::load(Some(&file)).unwrap();
    let stores = labios_connect::distributed_stores(&config.connection())
        .await
        .unwrap();
    let launcher = Arc::new(LocalProcessLauncher::new(
        BIN.into(),
        vec!["--config".into(), file.clone().into_os_string()],
        Some(dir.path().join("logs")),
    ));
    let manager = ClusterManager::start(
        stores.clone(),
        ManagerConfig {
            allocation: "elastic".into(),
            min_active: 1,
            launch: true,
            dead_after_ms: 1000,
            // No load-driven wake-ups: this test sends them itself.
            wake_threshold: u32::MAX,
            ..ManagerConfig::default()
        },
        WORKERS,
        Some(launcher.clone() as Arc<dyn Launcher>),
    )
    .await
    .unwrap();
    let state_of = |id: WorkerId| {
        let stores = stores.clone();
        async move {
            stores
                .inventory
                .workers()
                .await
                .unwrap()
                .into_iter()
                .find(|w| w.spec.id == id)
                .map(|w| w.state)
        }
    };
    let wait_state = |id: WorkerId, want: WorkerState| {
        let state_of = &state_of;
        async move {
            let t = Instant::now();
            while state_of(id).await != Some(want) {
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "worker {id} not {want:?} within 20 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_state(2, WorkerState::Suspended).await;
    let mut latencies = Vec::new();
    for _ in 0..5 {
        wait_state(2, WorkerState::Suspended).await;
        let latency = manager
            .wake(2)
            .await
            .unwrap()
            .expect("the suspended worker process did not wake");
        latencies.push(latency);
    }
    // The manager also wakes a worker on its own when none is active.
    let recorded = manager.wake_latencies();
    assert!(latencies.iter().all(|l| recorded.contains(l)));
    let ms: Vec<f64> = latencies.iter().map(|l| l.as_secs_f64() * 1e3).collect();
    eprintln!("wake-up latency across processes (push -> Active in the inventory), ms: {ms:.2?}");
    assert!(
        latencies.iter().all(|l| *l < Duration::from_secs(2)),
        "{ms:?}"
    );
    manager.shutdown().await;
    for i in 0..WORKERS {
        let w = labios_server::LaunchedWorker {
            index: i,
            locator: String::new(),
        };
        assert!(
            !launcher.running(&w).await,
            "worker {i} still runs after the manager stopped"
        );
    }
    // Stopped gracefully: each published a final status.
    for i in 0..WORKERS {
        assert_eq!(state_of(i as WorkerId).await, Some(WorkerState::Suspended));
    }
}

// ---------------------------------------------------------------------------
// The model checker across crashes and service restarts
// ---------------------------------------------------------------------------

/// What a Restart step of the model checker does to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    /// `kill -9` of one worker, restarted either at once or once the
    /// manager has declared it down.
    Worker,
    /// `kill -9` of the dispatcher, restarted.
    Dispatcher,
    /// `kill -9` of the manager, restarted.
    Manager,
    /// nats-server stopped and started again on its JetStream directory.
    Nats,
    /// redis-server stopped and started again on its append-only file.
    Redis,
}

const CRASHES: [Crash; 5] = [
    Crash::Worker,
    Crash::Dispatcher,
    Crash::Manager,
    Crash::Nats,
    Crash::Redis,
];

/// The crashes a run rotates through: those `LABIOS_MODEL_CRASHES` names
/// (comma-separated: worker, dispatcher, manager, nats, redis), all by
/// default. One kind alone makes a shrunk case replay with the crash that
/// failed it.
fn chosen_crashes() -> Vec<Crash> {
    let Ok(names) = std::env::var("LABIOS_MODEL_CRASHES") else {
        return CRASHES.to_vec();
    };
    let kinds: Vec<Crash> = CRASHES
        .into_iter()
        .filter(|k| {
            names
                .split(',')
                .any(|n| n.trim().eq_ignore_ascii_case(&format!("{k:?}")))
        })
        .collect();
    assert!(
        !kinds.is_empty(),
        "LABIOS_MODEL_CRASHES={names:?} names none of {CRASHES:?}"
    );
    kinds
}

/// Longest the cluster may take to be usable again after a crash.
const RECOVERY: Duration = Duration::from_secs(60);

/// The cluster as its clients see it, through the client API
/// (`common/model_client.rs`). Each Restart step of the checker crashes
/// one component (rotating through [`chosen_crashes`], from an offset the
/// run's seed picks) and waits until the cluster is usable again.
struct Crashing {
    cluster: tokio::sync::Mutex<Cluster>,
    config: Config,
    apps: [labios_store::AppRecord; 2],
    /// The crashes to rotate through, starting at `kinds[first]`.
    kinds: Vec<Crash>,
    first: usize,
    /// Each crash so far, with how long the cluster took to be usable.
    crashes: std::sync::Mutex<Vec<(Crash, Duration)>>,
    /// The case the checker is running (the last one a path was asked
    /// for), to say where each crash happened.
    case: std::sync::atomic::AtomicU64,
}

impl Crashing {
    async fn new(cluster: Cluster, seed: u64, kinds: Vec<Crash>) -> ClientApi<Crashing> {
        let stores = cluster.stores().await;
        cluster.wait_all_active(&stores).await;
        let admin = Administrator::new(stores.inventory.clone());
        let apps = [
            admin.create_app("model-a").await.unwrap(),
            admin.create_app("model-b").await.unwrap(),
        ];
        ClientApi::new(Crashing {
            config: cluster.config.clone(),
            cluster: tokio::sync::Mutex::new(cluster),
            apps,
            first: (seed % kinds.len() as u64) as usize,
            kinds,
            crashes: std::sync::Mutex::new(Vec::new()),
            case: std::sync::atomic::AtomicU64::new(0),
        })
        .await
    }

    /// Bytes allocated on every worker's device.
    async fn allocated(&self) -> u64 {
        self.cluster.lock().await.allocated()
    }

    /// Waits until `labios NAME` has said `marker` in its log more than
    /// `before` times (a restarted process appends to the same log).
    async fn wait_log(cluster: &Cluster, name: &str, marker: &str, before: usize) {
        let t = Instant::now();
        while cluster.log(name).matches(marker).count() <= before {
            assert!(
                t.elapsed() < RECOVERY,
                "restarted {name} did not say {marker:?} within {RECOVERY:?}:\n{}",
                cluster.log(name)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Crash number `n`: does it, then waits until the cluster is usable
    /// again: every worker Active with a heartbeat published after the
    /// crash (so alive and talking to Redis again), and a fresh client's
    /// synchronous write (through NATS, a dispatcher and a worker) reads
    /// back. Returns what it did.
    async fn crash(&self, n: usize) -> (Crash, String) {
        let kind = self.kinds[(self.first + n) % self.kinds.len()];
        let mut cluster = self.cluster.lock().await;
        let stores = cluster.stores().await;
        let done = match kind {
            Crash::Worker => {
                // Which worker, and how, changes each time workers come round.
                let round = n / self.kinds.len();
                let i = (self.first + round) % WORKERS;
                let id = i as WorkerId;
                kill9(&mut cluster.workers[i]);
                // Every other time, wait until the manager declares it
                // down (it then drains the worker's queue) before the
                // restart; otherwise it comes back at once.
                let declared_down = round % 2 == 1;
                if declared_down {
                    cluster
                        .wait_worker(&stores, id, WorkerState::Decommissioned, None, RECOVERY)
                        .await;
                }
                cluster.start_worker(i);
                if declared_down {
                    format!("kill -9 worker {i}, restarted once declared down")
                } else {
                    format!("kill -9 worker {i}, restarted at once")
                }
            }
            Crash::Dispatcher => {
                let marker = "labios dispatcher: serving";
                let before = cluster.log("dispatcher").matches(marker).count();
                kill9(&mut cluster.dispatcher);
                cluster.dispatcher = Some(cluster.spawn("dispatcher", &["dispatcher"]));
                Self::wait_log(&cluster, "dispatcher", marker, before).await;
                "kill -9 dispatcher, restarted".to_string()
            }
            Crash::Manager => {
                let marker = "labios manager: watching";
                let before = cluster.log("manager").matches(marker).count();
                kill9(&mut cluster.manager);
                cluster.manager = Some(cluster.spawn("manager", &["manager"]));
                Self::wait_log(&cluster, "manager", marker, before).await;
                "kill -9 manager, restarted".to_string()
            }
            Crash::Nats => {
                cluster.nats.restart();
                "nats-server restarted".to_string()
            }
            Crash::Redis => {
                cluster.redis.restart();
                "redis-server restarted".to_string()
            }
        };
        let crashed = Instant::now();
        let after = labios_label::id::now_nanos();
        let stores = cluster.stores().await;
        for i in 0..WORKERS {
            cluster
                .wait_worker(
                    &stores,
                    i as WorkerId,
                    WorkerState::Active,
                    Some(after),
                    RECOVERY,
                )
                .await;
        }
        let fresh = crashed.elapsed();
        // A round trip through every kind of process (a worker's queue
        // included); errors are expected while NATS or Redis come back,
        // not after RECOVERY.
        let path = format!("/probe/{n}");
        let data = payload(90_000 + n, 4 * KIB);
        let t = Instant::now();
        let mut failed_probes: Vec<String> = Vec::new();
        let mut failures = 0;
        loop {
            let attempt = async {
                let client = cluster.client().await;
                client.write_at_sync(&path, 0, data.clone()).await?;
                let back = client.read(&path).await?;
                client.remove(&path).await?;
                Ok::<_, labios_label::Error>(back)
            };
            let last = match tokio::time::timeout(Duration::from_secs(20), attempt).await {
                Ok(Ok(back)) if back == data => break,
                Ok(Ok(back)) => panic!(
                    "after {done}: the probe read back {} bytes differing from the {} written",
                    back.len(),
                    data.len()
                ),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer within 20 s".to_string(),
            };
            assert!(
                t.elapsed() < RECOVERY,
                "after {done}: the cluster is not usable within {RECOVERY:?}: {last}\nmanager log:\n{}",
                cluster.log("manager")
            );
            if !failed_probes.contains(&last) {
                failed_probes.push(last);
            }
            failures += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let done = format!(
            "{done} (workers fresh {:.1} s later, a probe through after {:.1} s more, \
             {failures} probes failed{}{})",
            fresh.as_secs_f64(),
            t.elapsed().as_secs_f64(),
            if failures > 0 { ": " } else { "" },
            failed_probes.join(" | ")
        );
        (kind, done)
    }
}

#[async_trait::async_trait]
impl model_client::Deployment for Crashing {
    fn abilities(&self) -> common::model::Abilities {
        common::model::Abilities::EVERY_OPERATION
    }

    fn path(&self, case: u64, b: bool, file: usize) -> String {
        self.case.store(case, std::sync::atomic::Ordering::Relaxed);
        let app = if b { "b" } else { "a" };
        format!("/model/c{case}/{app}/f{file}")
    }

    /// A new client (retrying while NATS or Redis still refuse a fresh
    /// connection, up to [`RECOVERY`]).
    async fn client(&self, b: bool) -> Client {
        let app = &self.apps[usize::from(b)];
        let t = Instant::now();
        loop {
            match labios_connect::connect_client(
                &self.config.connection(),
                Some(app.key.clone()),
                Some(app.secret.clone()),
            )
            .await
            {
                Ok(client) => return client,
                Err(e) => assert!(
                    t.elapsed() < RECOVERY,
                    "a client of {} cannot connect within {RECOVERY:?}: {e}",
                    app.name
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn restart(&self) {
        // The checker has waited for every client's writes.
        let n = self.crashes.lock().unwrap().len();
        let t = Instant::now();
        let (kind, done) = self.crash(n).await;
        let took = t.elapsed();
        println!(
            "crash {n} (case {}): {done}; usable again after {:.1} s",
            self.case.load(std::sync::atomic::Ordering::Relaxed),
            took.as_secs_f64()
        );
        self.crashes.lock().unwrap().push((kind, took));
    }

    async fn settled(&self) -> Result<(), String> {
        common::model::space_given_back(|| self.allocated()).await
    }
}

/// The model checker (`common/model.rs`) over the cluster of real
/// processes, with Restart steps that crash one component each (issue 11):
/// `kill -9` of a worker, of the dispatcher or of the manager (each then
/// started again), or a restart of nats-server or of redis-server. After
/// each the cluster must be usable again within [`RECOVERY`], and the
/// checker goes on comparing every read, size, attribute list and error
/// with the model: every acknowledged write reads back.
///
/// One step in 6 is a crash, and the run has at least as many cases as
/// its crashes need to come round to every kind once (the rotation starts
/// where the seed says). `LABIOS_MODEL_CASES=N` runs more (never fewer
/// than that), `LABIOS_MODEL_SEED` replays a run (the same crashes in the
/// same places), `LABIOS_MODEL_REPLAY` one shrunk case: its crashes
/// rotate from the start again, and the shrinker's trials each took the
/// next crashes of the rotation, so replay it with the kind that failed
/// it alone (`LABIOS_MODEL_CRASHES=redis`, say; every crash line of the
/// output names its kind and case).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn model_checker_across_crashes_and_service_restarts() {
    use common::model::{check_target, generate_with, Op, Run, Target};
    let _one = ONE_AT_A_TIME.lock().await;
    let mut run = Run::from_env(3);
    run.restart_one_in = 6;
    // A shorter case still takes seconds a crash: a failure is shrunk a
    // little, within minutes, not for an hour.
    run.shrink_attempts = 24;
    let cluster = Cluster::start(&[]);
    let target = Crashing::new(cluster, run.seed, chosen_crashes()).await;
    let restarts = |cases: u64| -> usize {
        (0..cases)
            .map(|case| {
                generate_with(
                    run.seed,
                    case,
                    target.abilities(),
                    run.steps,
                    run.restart_one_in,
                )
                .iter()
                .filter(|s| s.contains(&Op::Restart))
                .count()
            })
            .sum()
    };
    match &run.replay {
        Some(file) => println!(
            "seed {}: replaying {}, crashes from {:?}",
            run.seed,
            file.display(),
            target.deployment.kinds[target.deployment.first]
        ),
        None => {
            while restarts(run.cases) < target.deployment.kinds.len() {
                run.cases += 1;
            }
            println!(
                "seed {}: {} cases, {} crashes, the first {:?}",
                run.seed,
                run.cases,
                restarts(run.cases),
                target.deployment.kinds[target.deployment.first]
            );
        }
    }
    check_target(
        "model_checker_across_crashes_and_service_restarts",
        &target,
        &run,
    )
    .await;
    let crashes = target.deployment.crashes.lock().unwrap().clone();
    let mut summary = String::new();
    for kind in target.deployment.kinds.iter().copied() {
        let took: Vec<Duration> = crashes
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, t)| *t)
            .collect();
        summary.push_str(&format!(
            " {kind:?} x{} (longest recovery {:.1} s);",
            took.len(),
            took.iter().max().unwrap_or(&Duration::ZERO).as_secs_f64()
        ));
        if run.replay.is_none() {
            assert!(
                !took.is_empty(),
                "the run never crashed {kind:?}: {crashes:?}"
            );
        }
    }
    println!("crashes:{summary}");
}
