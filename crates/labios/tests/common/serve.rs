//! `labios serve` in one process and the CLI in others, as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_labios");

/// Access key and secret a CLI call presents, if any.
pub type Creds<'a> = Option<(&'a str, &'a str)>;

/// The model checker's `LABIOS_MODEL_*` settings, which a `labios`
/// process would read as (unknown) configuration keys.
pub fn model_settings() -> Vec<String> {
    std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("LABIOS_MODEL_"))
        .collect()
}

pub struct Server {
    child: Child,
    pub endpoint: PathBuf,
    /// The configuration file the server and every CLI call read.
    config: Option<PathBuf>,
    /// Configuration variables the server and every CLI call get.
    env: Vec<(String, String)>,
    stopped: bool,
}

impl Server {
    pub fn start(data: &Path) -> Server {
        Server::start_configured(data, None)
    }

    /// A server, and CLI calls, reading the configuration file `config`.
    pub fn start_configured(data: &Path, config: Option<&Path>) -> Server {
        Server::start_with(data, config, Vec::new())
    }

    /// A server, and CLI calls, reading the configuration file `config`
    /// and the configuration variables `env` (a distributed deployment's
    /// make it that deployment's node gateway).
    pub fn start_with(data: &Path, config: Option<&Path>, env: Vec<(String, String)>) -> Server {
        let endpoint = data.join("labios.sock");
        let mut cmd = Command::new(BIN);
        if let Some(config) = config {
            cmd.env("LABIOS_CONFIG", config);
        }
        for k in model_settings() {
            cmd.env_remove(k);
        }
        cmd.envs(env.iter().cloned());
        let mut child = cmd
            .args(["serve", "--data-dir"])
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // Connectable, not merely present: a crashed server leaves its
        // socket file behind for the next one to replace.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&endpoint).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("serve exited ({status}) before it listened: its stderr is above");
            }
            assert!(
                Instant::now() < deadline,
                "serve did not listen on its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child,
            endpoint,
            config: config.map(Path::to_path_buf),
            env,
            stopped: false,
        }
    }

    pub fn run(&self, creds: Creds, args: &[&str]) -> Output {
        self.command(creds, args).output().unwrap()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `labios` command as [`Server::run`] runs it: this server's
    /// endpoint, configuration and settings.
    pub fn command(&self, creds: Creds, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        if let Some((k, s)) = creds {
            cmd.args(["--key", k, "--secret", s]);
        }
        if let Some(config) = &self.config {
            cmd.env("LABIOS_CONFIG", config);
        }
        for k in model_settings() {
            cmd.env_remove(k);
        }
        cmd.envs(self.env.iter().cloned());
        cmd.args(args)
            .env("LABIOS_ENDPOINT", &self.endpoint)
            .env_remove("LABIOS_KEY")
            .env_remove("LABIOS_SECRET");
        cmd
    }

    /// The shared regions of clients (README "Shared memory") the server
    /// maps, each with the bytes of it the server has touched (its
    /// resident set in the mapping).
    pub fn shared_regions(&self) -> Vec<u64> {
        let smaps =
            std::fs::read_to_string(format!("/proc/{}/smaps", self.pid())).unwrap_or_default();
        let mut regions = Vec::new();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some(kb) = line.strip_prefix("Rss:").filter(|_| inside) {
                let kb = kb.trim().trim_end_matches("kB").trim();
                regions.push(kb.parse::<u64>().unwrap() * 1024);
            }
            // A mapping's first line: an address range, then its file.
            if line.contains('-') && line.split_whitespace().count() >= 5 {
                inside = line.contains("memfd:labios-region");
            }
        }
        regions
    }

    pub fn ok(&self, creds: Creds, args: &[&str]) -> String {
        let out = self.run(creds, args);
        assert!(
            out.status.success(),
            "labios {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `labios app create NAME`: the new application's key and secret.
    pub fn create_app(&self, name: &str) -> (String, String) {
        let out = self.ok(None, &["app", "create", name]);
        let field = |f: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(f))
                .unwrap_or_else(|| panic!("app create printed {out}"))
                .trim()
                .to_string()
        };
        (field("key:"), field("secret:"))
    }

    pub fn err(&self, creds: Creds, args: &[&str]) -> String {
        let out = self.run(creds, args);
        assert!(!out.status.success(), "labios {args:?} should fail");
        String::from_utf8(out.stderr).unwrap()
    }

    /// SIGTERM, and the server must exit cleanly.
    pub fn stop(mut self) {
        let status = Command::new("kill")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        self.stopped = true;
        assert!(exit.success(), "serve exited with {exit:?}");
    }
}

impl Server {
    /// SIGKILL: a crash, nothing flushed and nothing said goodbye.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stopped = true;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = Command::new("kill")
                .arg(self.child.id().to_string())
                .status();
            let _ = self.child.wait();
        }
    }
}
