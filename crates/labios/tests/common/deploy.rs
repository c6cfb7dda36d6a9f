//! One end-to-end suite, two deployments (ARCHITECTURE.md "Deployments"): every test
//! of `pipeline.rs` starts a [`Deployed`] of a given [`Kind`] and talks to it
//! only through this API, so the same assertions run against
//!
//! - `Kind::Embedded`: `labios::Runtime` in the test process (in-memory
//!   queues and warehouse, redb inventory), and
//! - `Kind::Cluster`: a real `nats-server -js` and a real `redis-server
//!   --appendonly yes` on free loopback ports, `labios dispatcher`
//!   process(es), one `labios worker INDEX` process per configured worker and,
//!   when the binary has it, one `labios manager` process. The test's clients
//!   are in-process clients of the distributed deployment
//!   (`labios_connect::connect_client`), built from the same `Config` the
//!   processes get through `LABIOS_*` environment variables.
//!
//! Test-specific settings are a closure over `Config` (the embedded names:
//! `queue.bound`, `warehouse.max_bytes`, `inventory.reclaim_after_ms`...); the
//! cluster mirrors them onto the NATS and Redis settings that play the same
//! role, then passes every field that differs from the defaults to its
//! processes as `LABIOS_<SECTION>__<FIELD>`.

use labios::config::Deployment;
use labios::{Config, Runtime};
use labios_client::Client;
use labios_store::Stores;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_labios");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Embedded,
    Cluster,
}

/// A running deployment of either kind, with its data directory.
pub struct Deployed {
    /// Holds `data/` and nothing else the deployment writes (the services of
    /// a cluster keep their stores in `Cluster::svc`).
    root: tempfile::TempDir,
    config: Config,
    inner: Inner,
}

enum Inner {
    Embedded(Box<Option<Runtime>>),
    Cluster(Box<Cluster>),
}

/// The settings every test starts from (both kinds).
pub fn base_config(data_dir: &Path) -> Config {
    let mut c = Config {
        data_dir: data_dir.to_path_buf(),
        ..Config::default()
    };
    c.warehouse.max_bytes = 256 << 20;
    c
}

impl Deployed {
    pub async fn start(kind: Kind, tweak: impl FnOnce(&mut Config)) -> Deployed {
        let root = tempfile::tempdir().unwrap();
        let mut config = base_config(&root.path().join("data"));
        tweak(&mut config);
        let inner = match kind {
            Kind::Embedded => Inner::Embedded(Box::new(Some(
                Runtime::start(config.clone())
                    .await
                    .expect("embedded runtime starts"),
            ))),
            Kind::Cluster => {
                let cluster = Cluster::start(&mut config).await;
                Inner::Cluster(Box::new(cluster))
            }
        };
        Deployed {
            root,
            config,
            inner,
        }
    }

    pub fn kind(&self) -> Kind {
        match self.inner {
            Inner::Embedded(_) => Kind::Embedded,
            Inner::Cluster(_) => Kind::Cluster,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A new client of the default application.
    pub async fn client(&self) -> Client {
        match &self.inner {
            Inner::Embedded(rt) => (**rt).as_ref().unwrap().client(0).await.unwrap(),
            Inner::Cluster(_) => {
                labios_connect::connect_client(&self.config.connection(), None, None)
                    .await
                    .expect("client connects to NATS and Redis")
            }
        }
    }

    /// Registers an application.
    pub async fn create_app(&self, name: &str) -> labios_store::AppRecord {
        match &self.inner {
            Inner::Embedded(rt) => (**rt).as_ref().unwrap().admin.create_app(name).await,
            Inner::Cluster(c) => {
                labios_core::administrator::Administrator::new(c.stores.inventory.clone())
                    .create_app(name)
                    .await
            }
        }
        .expect("application registered")
    }

    /// A new client of application `app`.
    pub async fn client_of(&self, app: &labios_store::AppRecord) -> Client {
        match &self.inner {
            Inner::Embedded(rt) => (**rt).as_ref().unwrap().client(app.id).await.unwrap(),
            Inner::Cluster(_) => labios_connect::connect_client(
                &self.config.connection(),
                Some(app.key.clone()),
                Some(app.secret.clone()),
            )
            .await
            .expect("client connects to NATS and Redis"),
        }
    }

    /// Changes worker `worker`'s stack while it runs, as an administrator
    /// would: the worker's handle in the embedded runtime, `labios stack
    /// set`'s call through the inventory in the cluster. Returns once the
    /// worker runs it.
    pub async fn set_stack(&self, worker: u32, stack: &str) {
        let spec =
            labios_stack::Spec::try_from(stack.split(',').map(String::from).collect::<Vec<_>>())
                .unwrap();
        match &self.inner {
            Inner::Embedded(rt) => {
                let rt = (**rt).as_ref().unwrap();
                rt.manager.handle(worker).unwrap().set_stack(spec).await
            }
            Inner::Cluster(_) => {
                labios_connect::set_worker_stack(&self.config.connection(), worker, &spec).await
            }
        }
        .unwrap_or_else(|e| panic!("worker {worker} to {stack}: {e}"));
    }

    /// The deployment's queues, warehouse and inventory as a client sees them.
    pub fn stores(&self) -> Stores {
        match &self.inner {
            Inner::Embedded(rt) => (**rt).as_ref().unwrap().stores.clone(),
            Inner::Cluster(c) => c.stores.clone(),
        }
    }

    /// The test's own directory, holding `data_dir()` and nothing else.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Where the workers (and the embedded inventory) store everything.
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    /// Storage directory of every worker.
    pub fn worker_dirs(&self) -> Vec<PathBuf> {
        (0..self.config.workers.len())
            .map(|i| self.config.worker_dir(i))
            .collect()
    }

    /// Stops every LABIOS component gracefully and starts them again on the
    /// same data (embedded: same data directory; cluster: SIGTERM to every
    /// process, NATS and Redis keep running).
    pub async fn restart(&mut self) {
        match &mut self.inner {
            Inner::Embedded(rt) => {
                rt.take().unwrap().shutdown().await.unwrap();
                **rt = Some(Runtime::start(self.config.clone()).await.unwrap());
            }
            Inner::Cluster(c) => {
                c.stop_processes();
                c.start_processes().await;
            }
        }
    }

    /// Graceful stop; fails the test if a component does not exit cleanly.
    pub async fn shutdown(mut self) {
        match &mut self.inner {
            Inner::Embedded(rt) => rt.take().unwrap().shutdown().await.unwrap(),
            Inner::Cluster(c) => c.stop_processes(),
        }
    }
}

/// Whether this build of `labios` has the `manager` command (checked once).
pub fn has_manager_command() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        let out = Command::new(BIN).arg("--help").output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim_start().starts_with("manager "))
    })
}

/// Spawns a service binary, failing (never skipping) when it is missing.
pub fn spawn_service(cmd: &mut Command, what: &str) -> Child {
    match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("{what} is not installed (not on PATH): run `bash scripts/services.sh install`")
        }
        Err(e) => panic!("cannot start {what}: {e}"),
    }
}

/// Every field of `config` that differs from `Config::default()`, as the
/// `LABIOS_<SECTION>__<FIELD>` variables that set it. `workers` is left out:
/// the cluster starts one process per declared worker, and a pool declared
/// otherwise than the defaults' first workers reaches the processes as a
/// configuration file (`declared_workers`).
pub fn env_of(config: &Config) -> Vec<(String, String)> {
    fn walk(
        path: &str,
        v: &serde_json::Value,
        d: &serde_json::Value,
        out: &mut Vec<(String, String)>,
    ) {
        if v == d {
            return;
        }
        match (v, d) {
            (serde_json::Value::Object(m), d) => {
                let none = serde_json::Map::new();
                let dm = d.as_object().unwrap_or(&none);
                for (k, sub) in m {
                    let name = if path.is_empty() {
                        format!("LABIOS_{}", k.to_uppercase())
                    } else {
                        format!("{path}__{}", k.to_uppercase())
                    };
                    walk(
                        &name,
                        sub,
                        dm.get(k).unwrap_or(&serde_json::Value::Null),
                        out,
                    );
                }
            }
            (serde_json::Value::String(s), _) => out.push((path.into(), s.clone())),
            (serde_json::Value::Null, _) => {}
            // Numbers, booleans and arrays of them or of strings read the same
            // in JSON and in the TOML-like values figment takes from the environment.
            (other, _) => out.push((path.into(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    let mut v = serde_json::to_value(config).unwrap();
    v.as_object_mut().unwrap().remove("workers");
    walk(
        "",
        &v,
        &serde_json::to_value(Config::default()).unwrap(),
        &mut out,
    );
    out
}

/// The pool as a configuration file, when a test declares its workers
/// other than the defaults do (a stack, a directory), and the variable that
/// gives the file to the processes; none when it only truncates the list.
fn declared_workers(config: &Config, dir: &Path) -> Option<(String, String)> {
    let defaults = Config::default().workers;
    if defaults.starts_with(&config.workers) {
        return None;
    }
    let mut toml = String::new();
    for w in &config.workers {
        toml.push_str("[[workers]]\n");
        let serde_json::Value::Object(fields) = serde_json::to_value(w).unwrap() else {
            unreachable!("a worker declaration is a table");
        };
        // Strings, numbers, booleans and arrays of strings are written
        // alike in JSON and TOML.
        for (k, v) in fields.iter().filter(|(_, v)| !v.is_null()) {
            toml.push_str(&format!("{k} = {v}\n"));
        }
    }
    let path = dir.join("workers.toml");
    std::fs::write(&path, toml).unwrap();
    Some(("LABIOS_CONFIG".into(), path.display().to_string()))
}

/// Clusters running at once in one test binary. A cluster is 2 servers and
/// 5-7 processes; with every test of the suite starting one at the same time
/// on a 2-core machine, starved workers miss their heartbeats and the
/// manager rightly declares them dead. Embedded tests are not limited.
static CLUSTER_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// NATS + Redis + LABIOS processes on loopback.
pub struct Cluster {
    /// Stores of the services and the processes' logs.
    svc: tempfile::TempDir,
    nats: Child,
    redis: Child,
    procs: Vec<(String, Child)>,
    /// The configuration every process gets (one dispatcher task each).
    proc_env: Vec<(String, String)>,
    dispatchers: usize,
    workers: usize,
    pub stores: Stores,
    generation: usize,
    /// Released once `Drop` has killed the processes.
    _slot: tokio::sync::SemaphorePermit<'static>,
}

impl Cluster {
    /// Starts the services, points `config` at them and starts the processes.
    async fn start(config: &mut Config) -> Cluster {
        let slot = CLUSTER_SLOTS.acquire().await.unwrap();
        let svc = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(svc.path().join("nats")).unwrap();
        std::fs::create_dir_all(svc.path().join("redis")).unwrap();
        let (nats, nport) =
            labios_ports::start_service("nats-server", &svc.path().join("nats.log"), |port| {
                let mut c = Command::new("nats-server");
                c.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                    .arg(svc.path().join("nats"));
                c
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let (redis, rport) =
            labios_ports::start_service("redis-server", &svc.path().join("redis.log"), |port| {
                let mut c = Command::new("redis-server");
                c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .arg("--dir")
                    .arg(svc.path().join("redis"))
                    .args(["--appendonly", "yes", "--save", "", "--daemonize", "no"]);
                c
            })
            .unwrap_or_else(|e| panic!("{e}"));
        labios_ports::await_redis(rport).unwrap_or_else(|e| panic!("{e}"));

        config.deployment = Deployment::Distributed;
        config.nats.url = format!("nats://127.0.0.1:{nport}");
        config.redis.urls = vec![format!("redis://127.0.0.1:{rport}")];
        // The embedded settings a test tweaks, on the distributed stores
        // that play the same role.
        config.nats.bound = config.queue.bound;
        config.nats.push_timeout_ms = config.queue.push_timeout_ms;
        config.redis.max_bytes = config.warehouse.max_bytes;
        config.redis.put_timeout_ms = config.warehouse.put_timeout_ms;
        config.redis.reclaim_after_ms = config.inventory.reclaim_after_ms;
        // Several dispatchers are several dispatcher processes here.
        let dispatchers = config.dispatchers;
        let mut proc_config = config.clone();
        proc_config.dispatchers = 1;
        let stores = labios_connect::distributed_stores(&config.connection())
            .await
            .expect("test connects to NATS and Redis");
        // The embedded runtime registers the default application when it
        // starts; no distributed process does (yet), so the fixture does it,
        // as an operator would once per deployment.
        labios_core::administrator::Administrator::new(stores.inventory.clone())
            .ensure_default_app()
            .await
            .expect("default application registered in Redis");
        let proc_env = env_of(&proc_config)
            .into_iter()
            .chain(declared_workers(config, svc.path()))
            .collect();
        let mut c = Cluster {
            svc,
            nats,
            redis,
            procs: Vec::new(),
            proc_env,
            dispatchers,
            workers: config.workers.len(),
            stores,
            generation: 0,
            _slot: slot,
        };
        c.start_processes().await;
        c
    }

    fn spawn(&mut self, name: &str, args: &[&str]) {
        let log = self
            .svc
            .path()
            .join(format!("{name}.{}.log", self.generation));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(BIN)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env(
                "LABIOS_LOG",
                std::env::var_os("LABIOS_LOG").unwrap_or("warn".into()),
            )
            .envs(self.proc_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        self.procs.push((name.to_string(), child));
    }

    /// Starts the workers, waits until every one has announced itself in
    /// Redis, then the dispatcher(s) and (if the binary has it) the manager,
    /// and waits until the dispatchers serve.
    async fn start_processes(&mut self) {
        self.generation += 1;
        let started = labios_label::id::now_nanos();
        // Workers first: a dispatcher loads the pool from Redis when it
        // starts and fails labels with "no workers" while its view is empty.
        for i in 0..self.workers {
            self.spawn(&format!("worker{i}"), &["worker", &i.to_string()]);
        }
        let t = Instant::now();
        loop {
            let fresh = self
                .stores
                .inventory
                .workers()
                .await
                .map(|ws| ws.iter().filter(|w| w.heartbeat >= started).count())
                .unwrap_or(0);
            if fresh >= self.workers {
                break;
            }
            let exited: Vec<String> = self
                .procs
                .iter_mut()
                .filter_map(|(name, child)| {
                    let st = child.try_wait().ok()??;
                    Some(format!("{name} ({st})"))
                })
                .collect();
            assert!(
                exited.is_empty(),
                "exited at start-up: {exited:?}\n{}",
                self.logs()
            );
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "workers did not announce themselves within 30 s:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for i in 0..self.dispatchers {
            self.spawn(&format!("dispatcher{i}"), &["dispatcher"]);
        }
        if has_manager_command() {
            self.spawn("manager", &["manager"]);
        }
        // The dispatchers' NATS consumers exist before the first label is
        // published (labels published earlier wait in JetStream anyway),
        // and the manager has its signal handlers: a test that stops the
        // cluster at once must find every process ready to stop cleanly.
        let t = Instant::now();
        while !self.procs.iter().all(|(n, _)| {
            let ready = if n.starts_with("dispatcher") {
                "labios dispatcher: serving"
            } else if n == "manager" {
                "labios manager: watching"
            } else {
                return true;
            };
            std::fs::read_to_string(self.svc.path().join(format!("{n}.{}.log", self.generation)))
                .is_ok_and(|l| l.contains(ready))
        }) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "dispatchers or the manager did not start within 30 s:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM to every LABIOS process; each must exit successfully within 30 s.
    fn stop_processes(&mut self) {
        for (_, child) in &self.procs {
            // SAFETY: plain kill(2) on a child this fixture spawned and has not reaped.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let mut failed = Vec::new();
        for (name, mut child) in std::mem::take(&mut self.procs) {
            let t = Instant::now();
            let status = loop {
                if let Ok(Some(st)) = child.try_wait() {
                    break Some(st);
                }
                if t.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            if !status.is_some_and(|s| s.success()) {
                failed.push(format!("{name}: {status:?}"));
            }
        }
        assert!(
            failed.is_empty(),
            "LABIOS processes did not stop cleanly on SIGTERM: {failed:?}\n{}",
            self.logs()
        );
    }

    /// The last lines of every process log of this cluster.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let mut files: Vec<_> = std::fs::read_dir(self.svc.path())
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        for f in files {
            if f.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&f).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                out.push_str(&format!("--- {}\n{tail}\n", f.display()));
            }
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("cluster logs:\n{}", self.logs());
        }
        for (_, child) in &mut self.procs {
            let _ = child.kill();
            let _ = child.wait();
        }
        for child in [&mut self.nats, &mut self.redis] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
