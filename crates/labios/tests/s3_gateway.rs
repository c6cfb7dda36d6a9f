//! `labios s3`, the S3 face of LABIOS, driven by unmodified S3 clients: boto3
//! (a pytest suite, tests/s3/test_boto3.py), the aws CLI, rclone and s3cmd,
//! and the same data read and written as files by programs under `labios
//! run`. Every test runs against a `labios serve` process and against a
//! cluster (NATS, Redis, dispatcher, manager and worker processes), with two
//! applications of the tenant registry as the S3 users.
//!
//! Needs what `bash scripts/test.sh` installs: the test virtualenv (boto3,
//! the aws CLI, pytest, selenium), rclone, s3cmd, Chromium and chromedriver,
//! nats-server and redis-server.

mod common;

use common::deploy::{env_of, Deployed, Kind};
use common::serve::{Server, BIN};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3");

fn venv() -> String {
    std::env::var("PYTHON_VENV").unwrap_or_else(|_| "/var/tmp/labios-venv".into())
}

/// An application's S3 credentials.
#[derive(Clone)]
struct Creds {
    key: String,
    secret: String,
}

enum Deployment {
    Serve(Server),
    Cluster(Box<Deployed>),
}

/// A deployment, its gateway and two tenants.
struct Site {
    deployment: Deployment,
    /// How every `labios` process of the test reaches the deployment.
    env: Vec<(String, String)>,
    gateway: Gateway,
    alice: Creds,
    bob: Creds,
    tmp: tempfile::TempDir,
}

struct Gateway {
    /// Taken by `stop`.
    child: Option<Child>,
    url: String,
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    child.wait().unwrap()
}

impl Gateway {
    /// SIGTERM: the gateway must stop cleanly.
    fn stop(mut self) {
        let status = terminate(self.child.as_mut().unwrap());
        self.child = None;
        assert!(status.success(), "labios s3 exited with {status}");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            terminate(c);
        }
    }
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    text(&out)
}

/// The command must fail, and its output must name `code`.
fn fails_with(out: Output, code: &str, what: &str) {
    let all = format!("{}{}", text(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        !out.status.success(),
        "{what} should fail; it printed:\n{all}"
    );
    assert!(
        all.contains(code),
        "{what} should fail with {code}; it printed:\n{all}"
    );
}

fn write(path: &Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    ok(out, "sha256sum")
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A tree of files with a large one (multipart for every client) and
/// names that need escaping.
fn tree(root: &Path) {
    write(&root.join("a.txt"), b"alpha\n");
    write(&root.join("sub/b.txt"), b"beta\n");
    write(&root.join("sub/deeper/c d+e.txt"), b"gamma\n");
    write(&root.join("sub/big.bin"), &common::data(7, 21 << 20));
}

/// Whether two directory trees hold the same files with the same bytes.
fn same_tree(a: &Path, b: &Path) {
    let list = |root: &Path| {
        let mut files: Vec<PathBuf> = common::files_under(root)
            .into_iter()
            .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
            .collect();
        files.sort();
        files
    };
    let (la, lb) = (list(a), list(b));
    assert_eq!(la, lb, "trees {} and {} differ", a.display(), b.display());
    for f in la {
        assert!(
            std::fs::read(a.join(&f)).unwrap() == std::fs::read(b.join(&f)).unwrap(),
            "{} differs",
            f.display()
        );
    }
}

/// `labios` reaching a deployment through `env`, without credentials.
fn labios_with(env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.envs(env.iter().cloned())
        .env_remove("LABIOS_KEY")
        .env_remove("LABIOS_SECRET");
    cmd
}

/// `labios app create NAME`: the application's credentials.
fn create_app(mut labios: Command, name: &str) -> Creds {
    let out = ok(
        labios.args(["app", "create", name]).output().unwrap(),
        "app create",
    );
    let field = |f: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(f))
            .unwrap()
            .trim()
            .to_string()
    };
    Creds {
        key: field("key:"),
        secret: field("secret:"),
    }
}

/// `labios s3` on a free port; its banner names the address.
fn start_gateway(mut labios: Command) -> Gateway {
    let mut child = labios
        .args(["s3", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("labios s3 printed {line:?}"))
        .to_string();
    Gateway {
        child: Some(child),
        url,
    }
}

/// The aws CLI of the test virtualenv against the gateway at `url`, as `who`.
fn aws(url: &str, who: &Creds, args: &[&str]) -> Output {
    Command::new(format!("{}/bin/aws", venv()))
        .args(["--endpoint-url", url])
        .args(args)
        .env("AWS_ACCESS_KEY_ID", &who.key)
        .env("AWS_SECRET_ACCESS_KEY", &who.secret)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .unwrap()
}

/// `who`'s access key with a secret that is not its own.
fn wrong_secret(who: &Creds) -> Creds {
    Creds {
        key: who.key.clone(),
        secret: "0".repeat(40),
    }
}

impl Site {
    async fn start(kind: Kind) -> Site {
        Site::start_configured(kind, |_| String::new()).await
    }

    /// A site whose `labios` processes also read the TOML `config` makes
    /// of the test's directory.
    async fn start_configured(kind: Kind, config: impl FnOnce(&Path) -> String) -> Site {
        let tmp = tempfile::tempdir().unwrap();
        let (deployment, mut env) = match kind {
            Kind::Embedded => {
                let data = tmp.path().join("data");
                let server = Server::start(&data);
                let env = vec![
                    (
                        "LABIOS_ENDPOINT".into(),
                        server.endpoint.display().to_string(),
                    ),
                    ("LABIOS_DATA_DIR".into(), data.display().to_string()),
                ];
                (Deployment::Serve(server), env)
            }
            Kind::Cluster => {
                let d = Deployed::start(Kind::Cluster, |_| {}).await;
                let env = env_of(d.config());
                (Deployment::Cluster(Box::new(d)), env)
            }
        };
        let file = tmp.path().join("labios.toml");
        std::fs::write(&file, config(tmp.path())).unwrap();
        env.push(("LABIOS_CONFIG".into(), file.display().to_string()));
        let labios = || labios_with(&env);
        Site {
            deployment,
            alice: create_app(labios(), "alice"),
            bob: create_app(labios(), "bob"),
            gateway: start_gateway(labios()),
            env,
            tmp,
        }
    }

    fn labios(&self) -> Command {
        labios_with(&self.env)
    }

    /// Stops the gateway (cleanly) and starts another.
    fn restart_gateway(&mut self) {
        let stopped = Gateway {
            child: None,
            url: String::new(),
        };
        std::mem::replace(&mut self.gateway, stopped).stop();
        self.gateway = start_gateway(self.labios());
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn aws(&self, who: &Creds, args: &[&str]) -> Output {
        aws(&self.gateway.url, who, args)
    }

    /// rclone with a remote `lab:` on the gateway, as `who`.
    fn rclone(&self, who: &Creds, args: &[&str]) -> Output {
        Command::new("rclone")
            .args(["--config", "/dev/null"])
            .args(args)
            .env("RCLONE_CONFIG_LAB_TYPE", "s3")
            .env("RCLONE_CONFIG_LAB_PROVIDER", "Other")
            .env("RCLONE_CONFIG_LAB_ENDPOINT", &self.gateway.url)
            .env("RCLONE_CONFIG_LAB_REGION", "us-east-1")
            .env("RCLONE_CONFIG_LAB_ACCESS_KEY_ID", &who.key)
            .env("RCLONE_CONFIG_LAB_SECRET_ACCESS_KEY", &who.secret)
            // The aws SDK inside rclone refuses a CA bundle it cannot apply
            // to its transport, even for plain http.
            .env_remove("AWS_CA_BUNDLE")
            .output()
            .unwrap()
    }

    /// s3cmd in path style on the gateway, as `who`.
    fn s3cmd(&self, who: &Creds, args: &[&str]) -> Output {
        let host = self.gateway.url.trim_start_matches("http://");
        Command::new("s3cmd")
            .args(["--config=/dev/null", "--no-ssl", "--region=us-east-1"])
            .arg(format!("--host={host}"))
            .arg(format!("--host-bucket={host}"))
            .arg(format!("--access_key={}", who.key))
            .arg(format!("--secret_key={}", who.secret))
            .args(args)
            .output()
            .unwrap()
    }

    /// `labios run -- sh -c SCRIPT` as `who`.
    fn run(&self, who: &Creds, script: &str) -> String {
        let out = self
            .labios()
            .args(["run", "--", "sh", "-c", script])
            .env("LABIOS_KEY", &who.key)
            .env("LABIOS_SECRET", &who.secret)
            .env("TMP", self.tmp.path())
            .output()
            .unwrap();
        ok(out, script)
    }

    async fn stop(self) {
        self.gateway.stop();
        match self.deployment {
            Deployment::Serve(s) => s.stop(),
            Deployment::Cluster(d) => d.shutdown().await,
        }
    }
}

both!(
    boto3,
    aws_cli,
    aws_cli_tags_cors_attributes_part_copies,
    rclone,
    s3cmd,
    files_and_objects
);

/// The pytest suites of tests/s3/test_boto3.py, every operation and error,
/// and tests/s3/test_browser.py, a real browser's CORS upload.
async fn boto3(kind: Kind) {
    let site = Site::start(kind).await;
    let out = Command::new(format!("{}/bin/python", venv()))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"])
        .arg(format!("{TESTS}/test_boto3.py"))
        .arg(format!("{TESTS}/test_browser.py"))
        .env("LABIOS_S3_URL", &site.gateway.url)
        .env("ALICE_KEY", &site.alice.key)
        .env("ALICE_SECRET", &site.alice.secret)
        .env("BOB_KEY", &site.bob.key)
        .env("BOB_SECRET", &site.bob.secret)
        .output()
        .unwrap();
    let printed = ok(out, "the boto3 suite");
    assert!(printed.contains(" passed"), "{printed}");
    site.stop().await;
}

async fn aws_cli(kind: Kind) {
    let site = Site::start(kind).await;
    let (a, b) = (&site.alice, &site.bob);
    let src = site.path("src");
    tree(&src);
    let src_s = src.display().to_string();
    ok(site.aws(a, &["s3", "mb", "s3://cli"]), "mb");
    ok(
        site.aws(a, &["s3", "sync", &src_s, "s3://cli/tree"]),
        "sync up",
    );
    let listed = ok(site.aws(a, &["s3", "ls", "--recursive", "s3://cli/"]), "ls");
    for (key, size) in [
        ("tree/a.txt", 6),
        ("tree/sub/b.txt", 5),
        ("tree/sub/deeper/c d+e.txt", 6),
        ("tree/sub/big.bin", 21 << 20),
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.ends_with(key) && l.contains(&format!(" {size} "))),
            "{key} ({size} bytes) missing from\n{listed}"
        );
    }
    let top = ok(site.aws(a, &["s3", "ls", "s3://cli/tree/"]), "ls top");
    assert!(top.contains("PRE sub/") && top.contains("a.txt"), "{top}");
    let down = site.path("down");
    ok(
        site.aws(
            a,
            &["s3", "sync", "s3://cli/tree", &down.display().to_string()],
        ),
        "sync down",
    );
    same_tree(&src, &down);
    // The large object went up in parts: its ETag says how many.
    let head = ok(
        site.aws(
            a,
            &[
                "s3api",
                "head-object",
                "--bucket",
                "cli",
                "--key",
                "tree/sub/big.bin",
            ],
        ),
        "head-object",
    );
    assert!(head.contains("-3\\\""), "{head}");
    let range = site.path("range.bin");
    ok(
        site.aws(
            a,
            &[
                "s3api",
                "get-object",
                "--bucket",
                "cli",
                "--key",
                "tree/sub/big.bin",
                "--range",
                "bytes=1000-1999",
                &range.display().to_string(),
            ],
        ),
        "ranged get-object",
    );
    assert_eq!(
        std::fs::read(&range).unwrap(),
        common::data(7, 21 << 20)[1000..2000]
    );
    ok(
        site.aws(
            a,
            &[
                "s3api",
                "put-object",
                "--bucket",
                "cli",
                "--key",
                "meta.json",
                "--body",
                &src.join("a.txt").display().to_string(),
                "--content-type",
                "application/json",
                "--metadata",
                "owner=alice,run=42",
            ],
        ),
        "put-object with metadata",
    );
    let head = ok(
        site.aws(
            a,
            &[
                "s3api",
                "head-object",
                "--bucket",
                "cli",
                "--key",
                "meta.json",
            ],
        ),
        "head-object",
    );
    assert!(
        head.contains("application/json") && head.contains("\"run\": \"42\""),
        "{head}"
    );
    ok(
        site.aws(
            a,
            &[
                "s3api",
                "copy-object",
                "--bucket",
                "cli",
                "--key",
                "copy.json",
                "--copy-source",
                "cli/meta.json",
            ],
        ),
        "copy-object",
    );
    ok(
        site.aws(
            a,
            &["s3", "mv", "s3://cli/copy.json", "s3://cli/moved.json"],
        ),
        "mv",
    );
    let v2 = ok(
        site.aws(
            a,
            &[
                "s3api",
                "list-objects-v2",
                "--bucket",
                "cli",
                "--prefix",
                "tree/sub/",
                "--delimiter",
                "/",
            ],
        ),
        "list-objects-v2",
    );
    assert!(
        v2.contains("\"tree/sub/b.txt\"")
            && v2.contains("\"tree/sub/deeper/\"")
            && !v2.contains("c d+e"),
        "{v2}"
    );
    let cat = site.aws(a, &["s3", "cp", "s3://cli/tree/a.txt", "-"]);
    assert_eq!(ok(cat, "cp to stdout"), "alpha\n");

    // Errors a user meets, each a named S3 error.
    let wrong = wrong_secret(a);
    fails_with(
        site.aws(&wrong, &["s3", "ls", "s3://cli"]),
        "SignatureDoesNotMatch",
        "a wrong secret",
    );
    let unknown = Creds {
        key: "LBKNOBODY00000000000".into(),
        secret: "x".into(),
    };
    fails_with(
        site.aws(&unknown, &["s3", "ls"]),
        "InvalidAccessKeyId",
        "an unknown key",
    );
    fails_with(
        site.aws(a, &["s3", "ls", "s3://nowhere"]),
        "NoSuchBucket",
        "a missing bucket",
    );
    fails_with(
        site.aws(
            a,
            &[
                "s3api",
                "get-object",
                "--bucket",
                "cli",
                "--key",
                "nothing",
                "/dev/null",
            ],
        ),
        "NoSuchKey",
        "a missing key",
    );
    fails_with(
        site.aws(b, &["s3", "ls", "s3://cli"]),
        "AccessDenied",
        "another tenant listing",
    );
    fails_with(
        site.aws(b, &["s3", "cp", "s3://cli/tree/a.txt", "-"]),
        "403",
        "another tenant reading",
    );
    fails_with(
        site.aws(b, &["s3", "rm", "s3://cli/tree/a.txt"]),
        "AccessDenied",
        "another tenant deleting",
    );
    fails_with(
        site.aws(a, &["s3", "rb", "s3://cli"]),
        "BucketNotEmpty",
        "removing a full bucket",
    );
    ok(
        site.aws(a, &["s3", "rm", "--recursive", "s3://cli/"]),
        "rm --recursive",
    );
    ok(site.aws(a, &["s3", "rb", "s3://cli"]), "rb");
    let buckets = ok(site.aws(a, &["s3", "ls"]), "ls buckets");
    assert!(!buckets.contains("cli"), "{buckets}");
    site.stop().await;
}

/// The answer (status line, headers and body) to a browser's CORS
/// preflight of `path` from `origin` for `method`, as raw HTTP.
fn preflight(url: &str, path: &str, origin: &str, method: &str) -> String {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "OPTIONS {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: {origin}\r\n\
         Access-Control-Request-Method: {method}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

/// A field of the aws CLI's JSON output.
fn field(out: &str, path: &[&str]) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    for p in path {
        v = v[p].take();
    }
    v
}

/// Tags, CORS, GetObjectAttributes and UploadPartCopy through the aws CLI,
/// and tags and rules that survive a restart of the gateway.
async fn aws_cli_tags_cors_attributes_part_copies(kind: Kind) {
    let mut site = Site::start(kind).await;
    let a = site.alice.clone();
    let src = site.path("six.bin");
    let body: Vec<u8> = (0..6u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    write(&src, &body);
    let src_s = src.display().to_string();
    let api = |site: &Site, args: &[&str], what: &str| {
        let mut all = vec!["s3api"];
        all.extend_from_slice(args);
        ok(site.aws(&a, &all), what)
    };
    ok(site.aws(&a, &["s3", "mb", "s3://meta"]), "mb");
    api(
        &site,
        &[
            "put-object",
            "--bucket",
            "meta",
            "--key",
            "src",
            "--body",
            &src_s,
            "--tagging",
            "project=climate&run=7",
        ],
        "put-object --tagging",
    );
    let tagged = api(
        &site,
        &["get-object-tagging", "--bucket", "meta", "--key", "src"],
        "get-object-tagging",
    );
    assert!(
        tagged.contains("climate") && tagged.contains("\"run\""),
        "{tagged}"
    );
    api(
        &site,
        &[
            "put-bucket-tagging",
            "--bucket",
            "meta",
            "--tagging",
            "TagSet=[{Key=team,Value=hpc}]",
        ],
        "put-bucket-tagging",
    );
    let cors = r#"{"CORSRules":[{"AllowedOrigins":["https://app.example.org"],"AllowedMethods":["PUT","GET"],"AllowedHeaders":["*"]}]}"#;
    api(
        &site,
        &[
            "put-bucket-cors",
            "--bucket",
            "meta",
            "--cors-configuration",
            cors,
        ],
        "put-bucket-cors",
    );
    let created = api(
        &site,
        &[
            "create-multipart-upload",
            "--bucket",
            "meta",
            "--key",
            "joined",
        ],
        "create-multipart-upload",
    );
    let uid = field(&created, &["UploadId"]).as_str().unwrap().to_string();
    let mut parts = Vec::new();
    for (n, range) in [
        (1, "bytes=0-5242879".to_string()),
        (2, format!("bytes=5242880-{}", body.len() - 1)),
    ] {
        let copied = api(
            &site,
            &[
                "upload-part-copy",
                "--bucket",
                "meta",
                "--key",
                "joined",
                "--upload-id",
                &uid,
                "--part-number",
                &n.to_string(),
                "--copy-source",
                "meta/src",
                "--copy-source-range",
                &range,
            ],
            "upload-part-copy",
        );
        let etag = field(&copied, &["CopyPartResult", "ETag"]);
        parts.push(serde_json::json!({"PartNumber": n, "ETag": etag}));
    }
    let listed = serde_json::json!({ "Parts": parts }).to_string();
    api(
        &site,
        &[
            "complete-multipart-upload",
            "--bucket",
            "meta",
            "--key",
            "joined",
            "--upload-id",
            &uid,
            "--multipart-upload",
            &listed,
        ],
        "complete-multipart-upload",
    );
    let attrs = api(
        &site,
        &[
            "get-object-attributes",
            "--bucket",
            "meta",
            "--key",
            "joined",
            "--object-attributes",
            "ObjectParts",
            "ObjectSize",
        ],
        "get-object-attributes",
    );
    assert_eq!(field(&attrs, &["ObjectSize"]), body.len() as u64, "{attrs}");
    assert_eq!(
        field(&attrs, &["ObjectParts", "TotalPartsCount"]),
        2,
        "{attrs}"
    );
    let down = site.path("joined.bin");
    ok(
        site.aws(
            &a,
            &["s3", "cp", "s3://meta/joined", &down.display().to_string()],
        ),
        "cp down",
    );
    assert!(
        std::fs::read(&down).unwrap() == body,
        "the copied parts make the source"
    );

    site.restart_gateway();
    let tagged = api(
        &site,
        &["get-object-tagging", "--bucket", "meta", "--key", "src"],
        "get-object-tagging after a restart",
    );
    assert!(tagged.contains("climate"), "{tagged}");
    let bucket_tags = api(
        &site,
        &["get-bucket-tagging", "--bucket", "meta"],
        "get-bucket-tagging after a restart",
    );
    assert!(bucket_tags.contains("hpc"), "{bucket_tags}");
    let rules = api(
        &site,
        &["get-bucket-cors", "--bucket", "meta"],
        "get-bucket-cors after a restart",
    );
    assert!(rules.contains("https://app.example.org"), "{rules}");
    let allowed = preflight(
        &site.gateway.url,
        "/meta/upload",
        "https://app.example.org",
        "PUT",
    );
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    assert!(
        allowed
            .to_ascii_lowercase()
            .contains("access-control-allow-origin: https://app.example.org"),
        "{allowed}"
    );
    let refused = preflight(
        &site.gateway.url,
        "/meta/upload",
        "https://elsewhere.example.com",
        "PUT",
    );
    assert!(
        refused.starts_with("HTTP/1.1 403") && refused.contains("AccessForbidden"),
        "{refused}"
    );
    api(
        &site,
        &["delete-bucket-cors", "--bucket", "meta"],
        "delete-bucket-cors",
    );
    let gone = preflight(
        &site.gateway.url,
        "/meta/upload",
        "https://app.example.org",
        "PUT",
    );
    assert!(gone.starts_with("HTTP/1.1 403"), "{gone}");
    fails_with(
        site.aws(&a, &["s3api", "get-bucket-cors", "--bucket", "meta"]),
        "NoSuchCORSConfiguration",
        "rules deleted",
    );
    api(
        &site,
        &["delete-object-tagging", "--bucket", "meta", "--key", "src"],
        "delete-object-tagging",
    );
    let untagged = api(
        &site,
        &["get-object-tagging", "--bucket", "meta", "--key", "src"],
        "get-object-tagging",
    );
    assert_eq!(
        field(&untagged, &["TagSet"]),
        serde_json::json!([]),
        "{untagged}"
    );
    fails_with(
        site.aws(
            &site.bob,
            &["s3api", "get-bucket-tagging", "--bucket", "meta"],
        ),
        "AccessDenied",
        "another tenant's bucket tags",
    );
    site.stop().await;
}

async fn rclone(kind: Kind) {
    let site = Site::start(kind).await;
    let (a, b) = (&site.alice, &site.bob);
    let src = site.path("src");
    tree(&src);
    let src_s = src.display().to_string();
    ok(site.rclone(a, &["mkdir", "lab:rcl"]), "mkdir");
    ok(site.rclone(a, &["copy", &src_s, "lab:rcl/tree"]), "copy up");
    // check compares MD5s: the gateway's ETags are the MD5s rclone computes.
    let check = site.rclone(a, &["check", &src_s, "lab:rcl/tree"]);
    let said = String::from_utf8_lossy(&check.stderr).into_owned();
    assert!(
        check.status.success() && said.contains("0 differences found"),
        "{said}"
    );
    assert!(
        !said.contains("hash"),
        "rclone could not compare hashes: {said}"
    );
    let lsf = ok(site.rclone(a, &["lsf", "-R", "lab:rcl/tree"]), "lsf");
    for f in ["a.txt", "sub/b.txt", "sub/deeper/c d+e.txt", "sub/big.bin"] {
        assert!(lsf.lines().any(|l| l == f), "{f} missing from\n{lsf}");
    }
    assert_eq!(
        ok(site.rclone(a, &["cat", "lab:rcl/tree/sub/b.txt"]), "cat"),
        "beta\n"
    );
    let down = site.path("down");
    ok(
        site.rclone(a, &["copy", "lab:rcl/tree", &down.display().to_string()]),
        "copy down",
    );
    same_tree(&src, &down);
    ok(
        site.rclone(a, &["moveto", "lab:rcl/tree/a.txt", "lab:rcl/moved/a.txt"]),
        "moveto",
    );
    let lsf = ok(site.rclone(a, &["lsf", "-R", "lab:rcl"]), "lsf");
    assert!(
        lsf.contains("moved/a.txt") && !lsf.contains("tree/a.txt"),
        "{lsf}"
    );
    fails_with(
        site.rclone(b, &["lsf", "lab:rcl"]),
        "AccessDenied",
        "another tenant listing",
    );
    let wrong = wrong_secret(a);
    fails_with(
        site.rclone(&wrong, &["lsf", "lab:rcl"]),
        "SignatureDoesNotMatch",
        "a wrong secret",
    );
    fails_with(
        site.rclone(a, &["lsf", "lab:nowhere"]),
        "directory not found",
        "a missing bucket",
    );
    ok(site.rclone(a, &["purge", "lab:rcl"]), "purge");
    let buckets = ok(site.rclone(a, &["lsd", "lab:"]), "lsd");
    assert!(!buckets.contains("rcl"), "{buckets}");
    site.stop().await;
}

async fn s3cmd(kind: Kind) {
    let site = Site::start(kind).await;
    let (a, b) = (&site.alice, &site.bob);
    let src = site.path("src");
    tree(&src);
    let big = src.join("sub/big.bin").display().to_string();
    ok(site.s3cmd(a, &["mb", "s3://cmd"]), "mb");
    ok(
        site.s3cmd(
            a,
            &[
                "put",
                &src.join("a.txt").display().to_string(),
                "s3://cmd/x/a.txt",
            ],
        ),
        "put",
    );
    // s3cmd checks the ETag of every part and of the whole against its MD5s.
    let put = site.s3cmd(
        a,
        &[
            "put",
            "--multipart-chunk-size-mb=5",
            &big,
            "s3://cmd/big.bin",
        ],
    );
    let said = format!("{}{}", text(&put), String::from_utf8_lossy(&put.stderr));
    assert!(put.status.success() && !said.contains("WARNING"), "{said}");
    let ls = ok(site.s3cmd(a, &["ls", "-r", "s3://cmd"]), "ls");
    assert!(
        ls.contains("s3://cmd/big.bin") && ls.contains("s3://cmd/x/a.txt"),
        "{ls}"
    );
    let got = site.path("got.bin");
    let get = site.s3cmd(
        a,
        &[
            "get",
            "--force",
            "s3://cmd/big.bin",
            &got.display().to_string(),
        ],
    );
    let said = format!("{}{}", text(&get), String::from_utf8_lossy(&get.stderr));
    assert!(get.status.success() && !said.contains("WARNING"), "{said}");
    assert_eq!(sha256(&got), sha256(&src.join("sub/big.bin")));
    let info = ok(site.s3cmd(a, &["info", "s3://cmd/x/a.txt"]), "info");
    let md5 = format!("{:x}", md5_of(b"alpha\n"));
    assert!(info.contains(&md5), "{info}");
    ok(
        site.s3cmd(a, &["cp", "s3://cmd/x/a.txt", "s3://cmd/y/a.txt"]),
        "cp",
    );
    ok(
        site.s3cmd(a, &["mv", "s3://cmd/y/a.txt", "s3://cmd/z/a.txt"]),
        "mv",
    );
    ok(site.s3cmd(a, &["del", "s3://cmd/x/a.txt"]), "del");
    let ls = ok(site.s3cmd(a, &["ls", "-r", "s3://cmd"]), "ls");
    assert!(
        ls.contains("s3://cmd/z/a.txt") && !ls.contains("x/a.txt") && !ls.contains("y/a.txt"),
        "{ls}"
    );
    let synced = site.path("synced");
    ok(
        site.s3cmd(
            a,
            &["sync", &format!("{}/", src.display()), "s3://cmd/sync/"],
        ),
        "sync up",
    );
    ok(
        site.s3cmd(
            a,
            &["sync", "s3://cmd/sync/", &format!("{}/", synced.display())],
        ),
        "sync down",
    );
    same_tree(&src, &synced);
    fails_with(
        site.s3cmd(b, &["ls", "s3://cmd"]),
        "AccessDenied",
        "another tenant listing",
    );
    let wrong = wrong_secret(a);
    fails_with(
        site.s3cmd(&wrong, &["ls", "s3://cmd"]),
        "SignatureDoesNotMatch",
        "a wrong secret",
    );
    fails_with(
        site.s3cmd(a, &["ls", "s3://nowhere"]),
        "NoSuchBucket",
        "a missing bucket",
    );
    fails_with(
        site.s3cmd(a, &["rb", "s3://cmd"]),
        "BucketNotEmpty",
        "removing a full bucket",
    );
    ok(
        site.s3cmd(a, &["del", "--recursive", "--force", "s3://cmd"]),
        "del --recursive",
    );
    ok(site.s3cmd(a, &["rb", "s3://cmd"]), "rb");
    site.stop().await;
}

fn md5_of(data: &[u8]) -> u128 {
    let out = Command::new("md5sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .unwrap();
    u128::from_str_radix(text(&out).split_whitespace().next().unwrap(), 16).unwrap()
}

/// One copy of the data, two views: what S3 clients put, programs under
/// `labios run` read as files, and what they write, S3 clients get.
async fn files_and_objects(kind: Kind) {
    let site = Site::start(kind).await;
    let a = &site.alice;
    let input = site.path("input.bin");
    write(&input, &common::data(11, 3 << 20));
    ok(site.aws(a, &["s3", "mb", "s3://lake"]), "mb");
    ok(
        site.aws(
            a,
            &[
                "s3",
                "cp",
                &input.display().to_string(),
                "s3://lake/in/input.bin",
            ],
        ),
        "put",
    );
    let digest = site.run(a, "sha256sum < /labios/lake/in/input.bin");
    assert_eq!(digest.split_whitespace().next().unwrap(), sha256(&input));
    site.run(
        a,
        "mkdir -p /labios/lake/out && cp /labios/lake/in/input.bin /labios/lake/out/copy.bin \
         && printf 'written by a program\\n' > /labios/lake/out/note.txt",
    );
    let listed = ok(
        site.aws(a, &["s3", "ls", "--recursive", "s3://lake/"]),
        "ls",
    );
    for key in ["in/input.bin", "out/copy.bin", "out/note.txt"] {
        assert!(listed.contains(key), "{key} missing from\n{listed}");
    }
    let note = site.aws(a, &["s3", "cp", "s3://lake/out/note.txt", "-"]);
    assert_eq!(ok(note, "get note"), "written by a program\n");
    let copy = site.path("copy.bin");
    ok(
        site.aws(
            a,
            &[
                "s3",
                "cp",
                "s3://lake/out/copy.bin",
                &copy.display().to_string(),
            ],
        ),
        "get copy",
    );
    assert_eq!(sha256(&copy), sha256(&input));
    // A program changes an object in place: S3 clients see the new bytes and
    // an ETag that no longer claims the old MD5.
    let before = ok(
        site.aws(
            a,
            &[
                "s3api",
                "head-object",
                "--bucket",
                "lake",
                "--key",
                "in/input.bin",
            ],
        ),
        "head",
    );
    site.run(
        a,
        "printf 'patched' | dd of=/labios/lake/in/input.bin bs=1 seek=100 conv=notrunc status=none",
    );
    let after = ok(
        site.aws(
            a,
            &[
                "s3api",
                "head-object",
                "--bucket",
                "lake",
                "--key",
                "in/input.bin",
            ],
        ),
        "head",
    );
    let etag = |h: &str| {
        h.lines()
            .find(|l| l.contains("\"ETag\""))
            .unwrap()
            .to_string()
    };
    assert_ne!(etag(&before), etag(&after));
    assert!(etag(&after).contains("-1"), "{after}");
    let range = site.aws(
        a,
        &[
            "s3api",
            "get-object",
            "--bucket",
            "lake",
            "--key",
            "in/input.bin",
            "--range",
            "bytes=100-106",
            &site.path("r").display().to_string(),
        ],
    );
    ok(range, "ranged get");
    assert_eq!(std::fs::read(site.path("r")).unwrap(), b"patched");
    // The LABIOS CLI sees the same namespace.
    let ls = ok(
        site.labios()
            .args(["--key", &a.key, "--secret", &a.secret, "ls", "/lake/out"])
            .output()
            .unwrap(),
        "labios ls",
    );
    assert!(ls.contains("/lake/out/note.txt"), "{ls}");
    site.stop().await;
}

/// `labios s3` with nothing serving the endpoint runs the embedded runtime
/// itself; a service secret that does not match is refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_alone_runs_the_runtime_and_refuses_a_wrong_service_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let env = [
        (
            "LABIOS_ENDPOINT".to_string(),
            data.join("labios.sock").display().to_string(),
        ),
        ("LABIOS_DATA_DIR".to_string(), data.display().to_string()),
    ];
    let labios = || labios_with(&env);
    let gateway = start_gateway(labios());
    let solo = create_app(labios(), "solo");
    ok(
        aws(&gateway.url, &solo, &["s3", "mb", "s3://solo"]),
        "mb against a gateway that runs its own runtime",
    );
    // An application registered right after the gateway read the registry
    // can use it at once.
    let duo = create_app(labios(), "duo");
    ok(
        aws(&gateway.url, &duo, &["s3", "mb", "s3://duo"]),
        "mb by an application newer than the gateway's registry",
    );
    // A second gateway whose service secret is stale.
    std::fs::write(data.join("service.secret"), "stale").unwrap();
    let out = labios()
        .args(["s3", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    fails_with(
        out,
        "refused the service secret",
        "a gateway with a stale service secret",
    );
    gateway.stop();
}

/// The four objects-to-files mappings of IRIS behind `[s3.buckets]`, with
/// boto3 (tests/s3/test_object_buckets.py), their layouts on disk, a
/// restart of the gateway and the lock that keeps a second one out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_buckets_keep_objects_in_a_file_system_by_their_mapping() {
    let buckets = [
        ("objects-one", "one-to-one", ""),
        ("objects-n-to-one", "n-to-one", ""),
        ("objects-n-to-m", "n-to-m", "container_size = 4194304\n"),
        ("objects-hashed", "hashed-n-to-m", "containers = 4\n"),
    ];
    let mut site = Site::start_configured(Kind::Embedded, |root| {
        let mut toml = String::new();
        for (name, mapping, extra) in buckets {
            toml.push_str(&format!(
                "[s3.buckets.{name}]\ndir = \"{}\"\nowner = \"alice\"\nmapping = \"{mapping}\"\nmax_object_size = 16777216\ncompact_every_ms = 0\n{extra}",
                root.join("pfs").join(name).display()
            ));
        }
        toml
    })
    .await;
    let names: Vec<&str> = buckets.iter().map(|b| b.0).collect();
    let out = Command::new(format!("{}/bin/python", venv()))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"])
        .arg(format!("{TESTS}/test_object_buckets.py"))
        .env("LABIOS_S3_URL", &site.gateway.url)
        .env("ALICE_KEY", &site.alice.key)
        .env("ALICE_SECRET", &site.alice.secret)
        .env("BOB_KEY", &site.bob.key)
        .env("BOB_SECRET", &site.bob.secret)
        .env("OBJECT_BUCKETS", names.join(","))
        .output()
        .unwrap();
    let printed = ok(out, "the object bucket suite");
    assert!(printed.contains(" passed"), "{printed}");

    // One-to-one: objects are plain files; the containers: few files
    // (compaction, tested in crates/bridge, is off so that none is busy).
    let pfs = site.path("pfs");
    assert_eq!(
        std::fs::metadata(pfs.join("objects-one/kept/05"))
            .unwrap()
            .len(),
        1005
    );
    let containers = |name: &str| {
        std::fs::read_dir(pfs.join(name).join("containers"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("dat".as_ref()))
            .count()
    };
    assert_eq!(containers("objects-n-to-one"), 1);
    assert!(
        containers("objects-n-to-m") >= 2,
        "n-to-m keeps to 4 MiB containers"
    );
    assert!(containers("objects-hashed") <= 4);
    for (name, _, _) in &buckets[1..] {
        assert!(
            !pfs.join(name).join("kept").exists(),
            "{name} keeps no file per object"
        );
    }

    // Another gateway on the same directories is refused while one runs.
    let second = site
        .labios()
        .args(["s3", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    fails_with(
        second,
        "served by another labios s3 process",
        "a second gateway",
    );

    // Restarted, the gateway finds every object with the same ETag.
    let listing = |site: &Site, bucket: &str| {
        ok(
            site.aws(
                &site.alice,
                &[
                    "s3api",
                    "list-objects-v2",
                    "--bucket",
                    bucket,
                    "--prefix",
                    "kept/",
                ],
            ),
            "list-objects-v2",
        )
        .lines()
        .filter(|l| l.contains("\"Key\"") || l.contains("\"ETag\"") || l.contains("\"Size\""))
        .collect::<Vec<_>>()
        .join("\n")
    };
    let before: Vec<String> = names.iter().map(|b| listing(&site, b)).collect();
    assert!(
        before.iter().all(|l| l.matches("\"Key\"").count() == 20),
        "{before:?}"
    );
    site.restart_gateway();
    for (b, was) in names.iter().zip(&before) {
        assert_eq!(&listing(&site, b), was, "{b} after a restart");
        let kept = |args: &[&str], what: &str| {
            let mut all = vec!["s3api"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--bucket", b]);
            ok(site.aws(&site.alice, &all), what)
        };
        let tags = kept(&["get-object-tagging", "--key", "kept/00"], "object tags");
        assert!(tags.contains("\"object\""), "{b}: {tags}");
        let tags = kept(&["get-bucket-tagging"], "bucket tags");
        assert!(tags.contains("\"bucket\""), "{b}: {tags}");
        let rules = kept(&["get-bucket-cors"], "CORS rules");
        assert!(rules.contains("https://kept.example.org"), "{b}: {rules}");
        let allowed = preflight(
            &site.gateway.url,
            &format!("/{b}/x"),
            "https://kept.example.org",
            "PUT",
        );
        assert!(allowed.starts_with("HTTP/1.1 200"), "{b}: {allowed}");
    }
    let got = site.aws(
        &site.alice,
        &["s3", "cp", "s3://objects-hashed/kept/07", "-"],
    );
    assert!(got.status.success(), "get after restart: {got:?}");
    assert_eq!(got.stdout.len(), 1007);
    site.stop().await;
}
