//! The model checker (`common/model.rs`) through the ways programs reach
//! LABIOS other than the client API: POSIX calls under `labios run`, and S3
//! calls (boto3) on `labios s3`, both over the LABIOS namespace and over each
//! object bucket mapping of IRIS (objects kept in a file system directory).
//!
//! Each client of the checker is a driver process
//! (`tests/programs/model_driver.py`) that replays operations as a program
//! would, one at a time; the three run at once. A restart here is a crash:
//! `labios serve` and the gateway are killed with SIGKILL and started
//! again, and every acknowledged byte must still be there. A program
//! under `labios run` dies with its connection to `labios serve` and is
//! started again; an S3 program outlives the crash and connects to the
//! new gateway (which saves the seconds of starting three Pythons with
//! boto3 at each of the 1.2 crashes of an average case).
//!
//! Needs what `bash scripts/test.sh` installs: the test virtualenv (boto3).

mod common;

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use common::model::{check_target, Abilities, Run, Target, CLIENTS, OTHER_APP};
use common::serve::{model_settings, Server, BIN};
use labios_label::Error;
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

const DRIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/programs/model_driver.py"
);

fn python() -> String {
    std::env::var("LABIOS_TEST_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/labios-venv/bin/python".to_string())
}

/// One driver process: a request line in, an answer line out.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    answers: BufReader<ChildStdout>,
    /// Where the last call stood when it ended: a call the checker gave up
    /// on (its deadline) is dropped midway, and the driver keeps working.
    step: Step,
}

#[derive(Clone, Copy, PartialEq)]
enum Step {
    Idle,
    /// Writing a request: a dropped call may have left half a line.
    Asking,
    /// The request is out, its answer not read: it comes before the next.
    Waiting,
}

impl Driver {
    fn spawn(mut cmd: Command) -> Driver {
        for k in model_settings() {
            cmd.env_remove(k);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the model driver");
        Driver {
            stdin: child.stdin.take().unwrap(),
            answers: BufReader::new(child.stdout.take().unwrap()),
            child,
            step: Step::Idle,
        }
    }

    /// The driver's answer; its errors as the client API names them.
    async fn call(&mut self, request: Value) -> Result<Value, Error> {
        match self.step {
            Step::Idle => {}
            // The answer of a call given up on is not this call's.
            Step::Waiting => {
                let mut stale = String::new();
                let _ = self.answers.read_line(&mut stale).await;
            }
            Step::Asking => {
                return Err(Error::Protocol(
                    "the driver got half a request from a call given up on".into(),
                ))
            }
        }
        let mut line = request.to_string();
        line.push('\n');
        self.step = Step::Asking;
        let sent = self.stdin.write_all(line.as_bytes()).await;
        self.step = Step::Waiting;
        let mut answer = String::new();
        let read = self.answers.read_line(&mut answer).await;
        self.step = Step::Idle;
        if sent.is_err() || read.is_err() || answer.is_empty() {
            let status = self.child.try_wait();
            return Err(Error::Protocol(format!(
                "the driver died answering {}: {status:?}",
                request["op"]
            )));
        }
        let mut answer: Value = serde_json::from_str(&answer)
            .map_err(|e| Error::Protocol(format!("driver answered {answer:?}: {e}")))?;
        if let Some(code) = answer.get("err").and_then(Value::as_str) {
            let msg = format!("{code}: {}", answer["msg"]);
            return Err(match code {
                "ENOENT" => Error::NotFound(msg),
                "EACCES" | "EPERM" => Error::PermissionDenied(msg),
                _ => Error::Storage(msg),
            });
        }
        Ok(answer["ok"].take())
    }
}

/// How the drivers reach LABIOS.
#[derive(Clone)]
enum Via {
    /// POSIX calls under `labios run`; application A's files under
    /// `/labios/model-a`, B's under `/labios/model-b`.
    Run,
    /// boto3 on the gateway; A's objects in bucket `buckets[0]`, B's in
    /// `buckets[1]`.
    S3 { buckets: [String; 2] },
}

/// Credentials of an application (`labios app create`).
struct App {
    name: &'static str,
    key: String,
    secret: String,
}

/// `labios serve` (and, for S3, `labios s3`) on one data directory, and
/// one driver per client of the checker.
struct Driven {
    dir: tempfile::TempDir,
    via: Via,
    /// The gateway's configuration (object buckets), if any.
    config: String,
    apps: [App; 2],
    running: Mutex<Running>,
    drivers: Vec<Mutex<Option<Driver>>>,
    abilities: Abilities,
}

struct Running {
    server: Option<Server>,
    gateway: Option<(Child, String)>,
}

impl Driven {
    /// Starts the server; `config(dir)` is the gateway's TOML (none: no
    /// gateway, the drivers run under `labios run`).
    async fn start(via: Via, config: impl FnOnce(&Path) -> String) -> Driven {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let server = Server::start(&dir.path().join("data"));
        let app = |name: &'static str| {
            let (key, secret) = server.create_app(name);
            App { name, key, secret }
        };
        let apps = [app("model-a"), app("model-b")];
        let s3 = matches!(via, Via::S3 { .. });
        let driven = Driven {
            abilities: Abilities {
                asynchronous: false,
                // O_APPEND; S3 objects have no append.
                append: !s3,
                truncate: true,
                rename: true,
                // Extended attributes are S3 user metadata; `labios run`
                // has none yet (the hints issue).
                xattrs: s3,
                tenants: true,
                // fallocate and copy_file_range; objects have neither.
                allocate: !s3,
                restart: true,
                faults: false,
            },
            running: Mutex::new(Running {
                server: Some(server),
                gateway: None,
            }),
            drivers: (0..CLIENTS).map(|_| Mutex::new(None)).collect(),
            dir,
            via,
            config,
            apps,
        };
        driven.start_clients().await;
        if let Via::S3 { buckets } = &driven.via {
            for (c, bucket) in [(0, &buckets[0]), (OTHER_APP, &buckets[1])] {
                let made = driven
                    .call(c, json!({"op": "bucket", "path": bucket}))
                    .await;
                made.unwrap_or_else(|e| panic!("creating bucket {bucket}: {e}"));
            }
        }
        driven
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The gateway (if this target has one) and the drivers, on the server
    /// that runs now.
    async fn start_clients(&self) {
        let mut running = self.running.lock().await;
        let endpoint = running.server.as_ref().unwrap().endpoint.clone();
        if matches!(self.via, Via::S3 { .. }) {
            let file = self.dir.path().join("labios.toml");
            std::fs::write(&file, &self.config).unwrap();
            let mut gateway = Command::new(BIN);
            gateway
                .args(["s3", "--listen", "127.0.0.1:0"])
                .env("LABIOS_ENDPOINT", &endpoint)
                .env("LABIOS_DATA_DIR", self.data())
                .env("LABIOS_CONFIG", &file)
                .env_remove("LABIOS_KEY")
                .env_remove("LABIOS_SECRET")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            for k in model_settings() {
                gateway.env_remove(k);
            }
            let mut child = gateway.spawn().unwrap();
            let mut banner = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut banner)
                .await
                .unwrap();
            let url = banner
                .split_whitespace()
                .find(|w| w.starts_with("http://127.0.0.1:"))
                .unwrap_or_else(|| panic!("labios s3 printed {banner:?}"))
                .to_string();
            running.gateway = Some((child, url));
        }
        for (c, slot) in self.drivers.iter().enumerate() {
            let mut slot = slot.lock().await;
            if let (Some(driver), Some((_, url))) = (slot.as_mut(), &running.gateway) {
                let connected = driver.call(json!({"op": "connect", "url": url})).await;
                connected.unwrap_or_else(|e| panic!("driver {c} connecting to {url}: {e}"));
                continue;
            }
            let app = &self.apps[usize::from(c == OTHER_APP)];
            let cmd = match &running.gateway {
                Some((_, url)) => {
                    let mut cmd = Command::new(python());
                    cmd.args([DRIVER, "s3", url, &app.key, &app.secret]);
                    cmd
                }
                None => {
                    let mut cmd = Command::new(BIN);
                    cmd.args(["run", "--"])
                        .arg(python())
                        .args([DRIVER, "posix"])
                        .env("LABIOS_ENDPOINT", &endpoint)
                        .env("LABIOS_KEY", &app.key)
                        .env("LABIOS_SECRET", &app.secret);
                    cmd
                }
            };
            *slot = Some(Driver::spawn(cmd));
        }
    }

    async fn call(&self, client: usize, request: Value) -> Result<Value, Error> {
        let mut driver = self.drivers[client].lock().await;
        driver
            .as_mut()
            .expect("drivers run between restarts")
            .call(request)
            .await
    }

    /// Bytes allocated on the workers' devices.
    fn allocated(&self) -> u64 {
        let workers = self.data().join("workers");
        common::files_under(&workers)
            .iter()
            .filter(|p| p.components().any(|c| c.as_os_str() == "files"))
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.blocks() * 512)
            .sum()
    }
}

fn done(v: Result<Value, Error>) -> Result<(), Error> {
    v.map(|_| ())
}

#[async_trait]
impl Target for Driven {
    fn abilities(&self) -> Abilities {
        self.abilities
    }

    fn path(&self, case: u64, b: bool, file: usize) -> String {
        let app = usize::from(b);
        match &self.via {
            Via::Run => format!("/labios/{}/c{case}/f{file}", self.apps[app].name),
            Via::S3 { buckets } => format!("{}/c{case}/f{file}", buckets[app]),
        }
    }

    async fn write(
        &self,
        client: usize,
        path: &str,
        offset: u64,
        data: Bytes,
        _asynchronous: bool,
    ) -> Result<(), Error> {
        let data = b64(&data);
        let req = json!({"op": "write", "path": path, "offset": offset, "data": data});
        done(self.call(client, req).await)
    }

    async fn append(
        &self,
        client: usize,
        path: &str,
        data: Bytes,
        _asynchronous: bool,
    ) -> Result<(), Error> {
        let req = json!({"op": "append", "path": path, "data": b64(&data)});
        done(self.call(client, req).await)
    }

    async fn wait_all(&self, _client: usize) -> Result<(), Error> {
        Ok(())
    }

    async fn read(&self, client: usize, path: &str, offset: u64, len: u64) -> Result<Bytes, Error> {
        let req = json!({"op": "read", "path": path, "offset": offset, "len": len});
        let got = self.call(client, req).await?;
        unb64(got.as_str().unwrap_or_default())
    }

    async fn stat(&self, client: usize, path: &str) -> Result<u64, Error> {
        let got = self
            .call(client, json!({"op": "stat", "path": path}))
            .await?;
        got.as_u64()
            .ok_or_else(|| Error::Protocol(format!("stat answered {got}")))
    }

    async fn truncate(&self, client: usize, path: &str, size: u64) -> Result<(), Error> {
        let req = json!({"op": "truncate", "path": path, "size": size});
        done(self.call(client, req).await)
    }

    async fn rename(&self, client: usize, from: &str, to: &str) -> Result<(), Error> {
        let req = json!({"op": "rename", "from": from, "to": to});
        done(self.call(client, req).await)
    }

    async fn remove(&self, client: usize, path: &str) -> Result<(), Error> {
        done(
            self.call(client, json!({"op": "remove", "path": path}))
                .await,
        )
    }

    async fn flush(&self, client: usize, path: &str) -> Result<(), Error> {
        done(
            self.call(client, json!({"op": "flush", "path": path}))
                .await,
        )
    }

    async fn set_xattr(
        &self,
        client: usize,
        path: &str,
        name: &str,
        value: Option<Bytes>,
    ) -> Result<(), Error> {
        let value = value.map(|v| b64(&v));
        let req = json!({"op": "set_xattr", "path": path, "name": name, "value": value});
        done(self.call(client, req).await)
    }

    async fn xattrs(&self, client: usize, path: &str) -> Result<Vec<(String, Bytes)>, Error> {
        let got = self
            .call(client, json!({"op": "xattrs", "path": path}))
            .await?;
        let pairs: Vec<(String, String)> = serde_json::from_value(got)
            .map_err(|e| Error::Protocol(format!("xattrs answer: {e}")))?;
        pairs
            .into_iter()
            .map(|(k, v)| Ok((k, unb64(&v)?)))
            .collect()
    }

    async fn allocate(
        &self,
        client: usize,
        path: &str,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Result<(), Error> {
        let req =
            json!({"op": "allocate", "path": path, "mode": mode, "offset": offset, "len": len});
        done(self.call(client, req).await)
    }

    async fn copy(
        &self,
        client: usize,
        (from, at): (&str, u64),
        (to, to_at): (&str, u64),
        len: u64,
    ) -> Result<u64, Error> {
        let req = json!({"op": "copy", "from": from, "from_offset": at, "to": to, "to_offset": to_at, "len": len});
        let got = self.call(client, req).await?;
        got.as_u64()
            .ok_or_else(|| Error::Protocol(format!("copy answered {got}")))
    }

    /// A crash: the gateway and `labios serve` are killed (SIGKILL), then
    /// started again on the same data; so are the drivers under `labios
    /// run` (and one left with half a request), while S3 drivers connect
    /// to the new gateway.
    async fn restart(&self) {
        for d in &self.drivers {
            let mut d = d.lock().await;
            let torn = d.as_ref().is_some_and(|d| d.step == Step::Asking);
            if matches!(self.via, Via::Run) || torn {
                *d = None;
            }
        }
        {
            let mut running = self.running.lock().await;
            if let Some((mut gateway, _)) = running.gateway.take() {
                let _ = gateway.kill().await;
            }
            running.server.take().unwrap().kill();
            running.server = Some(Server::start(&self.data()));
        }
        self.start_clients().await;
    }

    async fn settled(&self) -> Result<(), String> {
        // Object buckets keep their objects outside the workers.
        if let Via::S3 { buckets } = &self.via {
            if buckets[0].starts_with("objects-") {
                return Ok(());
            }
        }
        common::model::space_given_back(|| std::future::ready(self.allocated())).await
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(text: &str) -> Result<Bytes, Error> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(Bytes::from)
        .map_err(|e| Error::Protocol(format!("the driver's bytes {text:?}: {e}")))
}

/// Restarts here are crashes under test: one step in 20, so that about
/// two cases in three crash; a failing case (whose steps take seconds
/// each through S3) is shrunk within minutes.
fn crashing(mut run: Run) -> Run {
    run.restart_one_in = 20;
    run.shrink_attempts = 60;
    run
}

/// Unmodified POSIX calls under `labios run`, `labios serve` killed and
/// restarted between steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn labios_run() {
    let run = crashing(Run::from_env(6));
    let target = Driven::start(Via::Run, |_| String::new()).await;
    check_target("labios_run", &target, &run).await;
}

/// boto3 on `labios s3` over the LABIOS namespace (a bucket is a top-level
/// directory, an object a file).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_namespace() {
    let run = crashing(Run::from_env(4));
    let buckets = ["model-a".to_string(), "model-b".to_string()];
    let target = Driven::start(Via::S3 { buckets }, |_| String::new()).await;
    check_target("s3_namespace", &target, &run).await;
}

/// boto3 on each object bucket mapping (`[s3.buckets.NAME]`: objects in a
/// file system directory, one-to-one, n-to-one, n-to-m, hashed-n-to-m),
/// each mapping a target of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn object_buckets() {
    let run = crashing(Run::from_env(3));
    for (mapping, extra) in [
        ("one-to-one", ""),
        ("n-to-one", ""),
        ("n-to-m", "container_size = 4194304\n"),
        ("hashed-n-to-m", "containers = 4\n"),
    ] {
        let buckets = ["a", "b"].map(|app| format!("objects-{mapping}-{app}"));
        let declared = buckets.clone();
        let target = Driven::start(Via::S3 { buckets }, move |root| {
            let mut toml = String::new();
            for (bucket, owner) in declared.iter().zip(["model-a", "model-b"]) {
                toml.push_str(&format!(
                    "[s3.buckets.{bucket}]\ndir = \"{}\"\nowner = \"{owner}\"\nmapping = \"{mapping}\"\ncompact_every_ms = 0\n{extra}",
                    root.join("pfs").join(bucket).display()
                ));
            }
            toml
        })
        .await;
        check_target(&format!("object_buckets/{mapping}"), &target, &run).await;
    }
}
