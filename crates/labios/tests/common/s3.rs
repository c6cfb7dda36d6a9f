//! A real S3 server, versitygw (an S3 gateway over a local directory), on a
//! free loopback port: the external object store of the storage-bridging
//! tests. `bash scripts/services.sh install` builds it.

use labios_bridge::MountConfig;
use std::path::PathBuf;
use std::process::{Child, Command, Output};

pub struct S3Server {
    child: Child,
    pub endpoint: String,
    pub key: String,
    pub secret: String,
    /// Buckets are the folders of this directory.
    pub data: PathBuf,
    _dir: tempfile::TempDir,
}

fn versitygw() -> PathBuf {
    let tools = std::env::var("LABIOS_TOOLS").unwrap_or_else(|_| "/var/tmp/labios-tools".into());
    let bin = PathBuf::from(tools).join("bin/versitygw");
    assert!(
        bin.exists(),
        "{} is missing: run `bash scripts/services.sh install`",
        bin.display()
    );
    bin
}

impl S3Server {
    pub fn start() -> S3Server {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let (key, secret) = ("bridgekey".to_string(), "bridgesecret".to_string());
        let (child, port) =
            labios_ports::start_service("versitygw", &dir.path().join("versitygw.log"), |port| {
                let mut c = Command::new(versitygw());
                c.args(["--access", &key, "--secret", &secret, "--port"])
                    .arg(format!("127.0.0.1:{port}"))
                    .arg("posix")
                    .arg(&data);
                c
            })
            .unwrap_or_else(|e| panic!("{e}"));
        S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            key,
            secret,
            data,
            _dir: dir,
        }
    }

    /// Creates a bucket (a folder of the posix backend).
    pub fn bucket(&self, name: &str) {
        std::fs::create_dir_all(self.data.join(name)).unwrap();
    }

    /// A mount of `s3://bucket[/prefix]` on this server.
    pub fn mount(&self, uri: &str) -> MountConfig {
        MountConfig {
            uri: uri.to_string(),
            endpoint: Some(self.endpoint.clone()),
            region: None,
            access_key: Some(self.key.clone()),
            secret_key: Some(self.secret.clone()),
            ..Default::default()
        }
    }

    /// The aws CLI (from the test virtualenv) against this server.
    pub fn aws(&self, args: &[&str]) -> Output {
        let venv = std::env::var("PYTHON_VENV").unwrap_or_else(|_| "/var/tmp/labios-venv".into());
        Command::new(format!("{venv}/bin/aws"))
            .args(["--endpoint-url", &self.endpoint])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &self.key)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .output()
            .expect("the aws CLI of the test virtualenv (bash scripts/python-tests.sh installs it)")
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
