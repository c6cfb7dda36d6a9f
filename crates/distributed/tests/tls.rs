//! NATS and Redis over TLS with authentication: a throwaway CA and a server
//! certificate for 127.0.0.1 are made with the `openssl` CLI, `nats-server`
//! runs with `tls {}` and `authorization {}`, `redis-server` with only a TLS
//! port and `requirepass`; the queue, warehouse and inventory conformance
//! suites run over them, and a wrong password or a plain connection is
//! refused with a clear error.
//!
//! Needs `nats-server`, `redis-server` and `openssl`:
//! `bash scripts/services.sh install`.

use labios_distributed::nats_queue::{JetStreamQueue, NatsConfig};
use labios_distributed::redis_store::{RedisConfig, RedisInventory, RedisWarehouse};
use labios_label::{Error, Label};
use labios_store::conformance::{inventory_suite, queue_suite, warehouse_suite};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;

const USER: &str = "labios";
const PASS: &str = "nats-pass-1";
const REDIS_PASS: &str = "redis-pass-1";

fn run(cmd: &mut Command) {
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("{cmd:?}: not installed; run `bash scripts/services.sh install`")
        }
        Err(e) => panic!("{cmd:?}: {e}"),
    };
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ca.pem`, `server.pem` (for IP 127.0.0.1 and localhost) and `server.key`
/// in `dir`.
fn make_certs(dir: &Path) {
    let p = |f: &str| dir.join(f);
    run(Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=labios-test-ca", "-keyout"])
        .arg(p("ca.key"))
        .arg("-out")
        .arg(p("ca.pem")));
    run(Command::new("openssl")
        .args([
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .arg("-keyout")
        .arg(p("server.key"))
        .arg("-out")
        .arg(p("server.csr")));
    std::fs::write(
        p("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "1", "-in"])
        .arg(p("server.csr"))
        .arg("-CA")
        .arg(p("ca.pem"))
        .arg("-CAkey")
        .arg(p("ca.key"))
        .arg("-CAcreateserial")
        .arg("-extfile")
        .arg(p("san.ext"))
        .arg("-out")
        .arg(p("server.pem")));
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the service `command(port)` builds, once it listens itself.
fn spawn(what: &str, log: &Path, command: impl FnMut(u16) -> Command) -> (Proc, u16) {
    let (child, port) =
        labios_ports::start_service(what, log, command).unwrap_or_else(|e| panic!("{e}"));
    (Proc(child), port)
}

struct Rig {
    dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        make_certs(dir.path());
        Rig { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// nats-server with JetStream, TLS only and a user/password.
    fn nats(&self) -> (Proc, u16) {
        let store = self.file("nats");
        std::fs::create_dir_all(&store).unwrap();
        let conf = self.file("nats.conf");
        spawn("nats-server", &self.file("nats.log"), |port| {
            std::fs::write(
                &conf,
                format!(
                    "listen: \"127.0.0.1:{port}\"\n\
                     jetstream {{ store_dir: {store:?} }}\n\
                     tls {{ cert_file: {cert:?}, key_file: {key:?} }}\n\
                     authorization {{ user: \"{USER}\", password: \"{PASS}\" }}\n",
                    cert = self.file("server.pem"),
                    key = self.file("server.key"),
                ),
            )
            .unwrap();
            let mut c = Command::new("nats-server");
            c.arg("-c").arg(&conf);
            c
        })
    }

    /// redis-server listening only on a TLS port, with a password.
    fn redis(&self) -> (Proc, u16) {
        spawn("redis-server", &self.file("redis.log"), |port| {
            let mut c = Command::new("redis-server");
            c.args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(self.dir.path())
                .arg("--tls-cert-file")
                .arg(self.file("server.pem"))
                .arg("--tls-key-file")
                .arg(self.file("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(self.file("ca.pem"))
                .args(["--tls-auth-clients", "no", "--requirepass", REDIS_PASS]);
            c
        })
    }

    fn nats_config(&self, port: u16) -> NatsConfig {
        NatsConfig {
            url: format!("tls://127.0.0.1:{port}"),
            user: Some(USER.into()),
            password: Some(PASS.into()),
            tls_ca: Some(self.file("ca.pem")),
            tls_required: true,
            op_timeout_ms: 3_000,
            ..NatsConfig::default()
        }
    }

    fn redis_config(&self, port: u16) -> RedisConfig {
        RedisConfig {
            urls: vec![format!("redis://127.0.0.1:{port}")],
            tls: true,
            tls_ca: Some(self.file("ca.pem").display().to_string()),
            password: Some(REDIS_PASS.into()),
            op_timeout_ms: 3_000,
            ..RedisConfig::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_queue_over_tls_with_password() {
    let rig = Rig::new();
    let (_nats, port) = rig.nats();
    let q = JetStreamQueue::<Label>::connect(rig.nats_config(port))
        .await
        .unwrap();
    queue_suite(Arc::new(q)).await;

    let wrong = NatsConfig {
        password: Some("wrong".into()),
        ..rig.nats_config(port)
    };
    let e = JetStreamQueue::<Label>::connect(wrong)
        .await
        .err()
        .expect("a wrong password is refused");
    assert!(
        matches!(e, Error::PermissionDenied(_)) || e.to_string().contains("uthorization"),
        "{e}"
    );

    let nobody = NatsConfig {
        user: None,
        password: None,
        ..rig.nats_config(port)
    };
    let e = JetStreamQueue::<Label>::connect(nobody)
        .await
        .err()
        .expect("no credentials are refused");
    assert!(
        matches!(e, Error::PermissionDenied(_)) || e.to_string().contains("uthorization"),
        "{e}"
    );

    // Without the test CA the server's certificate is not trusted.
    let untrusted = NatsConfig {
        tls_ca: None,
        ..rig.nats_config(port)
    };
    let e = JetStreamQueue::<Label>::connect(untrusted)
        .await
        .err()
        .expect("an untrusted certificate is refused");
    eprintln!("untrusted NATS certificate: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stores_over_tls_with_password() {
    let rig = Rig::new();
    let (_redis, port) = rig.redis();
    let w = RedisWarehouse::connect(&rig.redis_config(port))
        .await
        .unwrap();
    warehouse_suite(Arc::new(w)).await;
    let cfg = RedisConfig {
        namespace: "inv".into(),
        ..rig.redis_config(port)
    };
    let i = RedisInventory::connect(&cfg).await.unwrap();
    inventory_suite(Arc::new(i)).await;

    let wrong = RedisConfig {
        password: Some("wrong".into()),
        ..rig.redis_config(port)
    };
    let e = RedisWarehouse::connect(&wrong)
        .await
        .err()
        .expect("a wrong password is refused");
    assert!(matches!(e, Error::PermissionDenied(_)), "{e}");
    assert!(e.to_string().contains("refused access"), "{e}");

    // Plain TCP to a TLS-only port: the handshake never completes.
    let plain = RedisConfig {
        tls: false,
        tls_ca: None,
        ..rig.redis_config(port)
    };
    let e = RedisWarehouse::connect(&plain)
        .await
        .err()
        .expect("a plain connection is refused");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");

    // TLS without the CA: the certificate is not trusted.
    let untrusted = RedisConfig {
        tls_ca: None,
        ..rig.redis_config(port)
    };
    let e = RedisWarehouse::connect(&untrusted)
        .await
        .err()
        .expect("an untrusted certificate is refused");
    assert!(matches!(e, Error::Unavailable(_)), "{e}");

    let missing = RedisConfig {
        tls_ca: Some(rig.file("nope.pem").display().to_string()),
        ..rig.redis_config(port)
    };
    let e = RedisWarehouse::connect(&missing).await.err().unwrap();
    assert!(e.to_string().contains("tls_ca"), "{e}");
}
