//! `labios run [--async] -- PROGRAM ARGS...`: runs an unmodified program
//! with `liblabios_preload.so`, so that its I/O on paths under the LABIOS
//! prefixes becomes labels (article 3.2.2). In the embedded deployment the
//! runtime is started here if no `labios serve` answers the default
//! endpoint yet (saying so on stderr), and stopped cleanly when the program
//! ends; an endpoint the user named must answer.

use crate::config::{Config, Deployment};
use crate::serve::Served;
use anyhow::Context;
use labios_store::remote::Endpoint;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

pub struct RunOptions {
    pub asynchronous: bool,
    /// Start the program on the host holding most of this file's bytes
    /// (a LABIOS path, or one under a prefix).
    pub near: Option<String>,
    pub prefixes: Vec<String>,
    pub program: Vec<String>,
    pub config_file: Option<PathBuf>,
    pub key: Option<String>,
    pub secret: Option<String>,
}

const LIBRARY: &str = "liblabios_preload.so";

/// The interception library: `LABIOS_PRELOAD_LIB`, or beside the `labios`
/// executable, where cargo puts both.
fn preload_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("LABIOS_PRELOAD_LIB") {
        let p = PathBuf::from(p);
        anyhow::ensure!(
            p.is_file(),
            "LABIOS_PRELOAD_LIB={} is not a file",
            p.display()
        );
        return Ok(p);
    }
    let exe = std::env::current_exe().context("cannot find the labios executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let lib = dir.join(LIBRARY);
    anyhow::ensure!(
        lib.is_file(),
        "{LIBRARY} is not beside {} : build it with `cargo build --release --workspace` (or set LABIOS_PRELOAD_LIB)",
        exe.display()
    );
    Ok(lib)
}

fn check_prefix(p: &str) -> anyhow::Result<()> {
    let ok = p.starts_with('/')
        && p != "/"
        && !p.ends_with('/')
        && !p.contains(':')
        && p.split('/')
            .skip(1)
            .all(|c| !c.is_empty() && c != "." && c != "..");
    anyhow::ensure!(
        ok,
        "invalid prefix {p:?}: a prefix is an absolute path like /labios (not /, no trailing /, no . or .., no :)"
    );
    Ok(())
}

/// The host holding most bytes of `path` (ties: the first by name), if it
/// is not this one, as workers name hosts (`[worker] host`, which names
/// this machine too). In the embedded deployment every worker is here.
async fn near_host(
    config: &Config,
    opts: &RunOptions,
    path: &str,
) -> anyhow::Result<Option<String>> {
    if config.deployment == Deployment::Embedded {
        return Ok(None);
    }
    let path = opts
        .prefixes
        .iter()
        .find_map(|p| path.strip_prefix(p.as_str()).filter(|r| r.starts_with('/')))
        .unwrap_or(path);
    let client =
        labios_connect::connect_client(&config.connection(), opts.key.clone(), opts.secret.clone())
            .await?;
    let located = client
        .locate(path)
        .await
        .with_context(|| format!("labios run --near {path}"))?;
    let mut bytes: std::collections::BTreeMap<&str, u64> = Default::default();
    for l in &located {
        *bytes.entry(l.host.as_str()).or_default() += l.len;
    }
    let most = bytes
        .iter()
        .filter(|(host, _)| !host.is_empty())
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)));
    Ok(match most {
        Some((host, n)) if *host != config.worker.host => {
            let total: u64 = bytes.values().sum();
            eprintln!(
                "labios run: {path} has {n} of its {total} bytes on host {host}; starting there"
            );
            Some(host.to_string())
        }
        _ => None,
    })
}

/// Runs this `labios run`, without `--near`, on `host` through the
/// configured launcher (`[run] launcher`), and waits for it.
async fn launch_on(config: &Config, opts: &RunOptions, host: &str) -> anyhow::Result<ExitStatus> {
    let launcher: Vec<String> = config
        .run
        .launcher
        .iter()
        .map(|a| a.replace("{host}", host))
        .collect();
    let exe = std::env::current_exe().context("cannot find the labios executable")?;
    let mut cmd = tokio::process::Command::new(&launcher[0]);
    cmd.args(&launcher[1..]).arg(exe);
    if let Some(c) = &opts.config_file {
        cmd.arg("--config").arg(std::path::absolute(c)?);
    }
    if let Some(e) = &config.endpoint {
        cmd.arg("--endpoint").arg(e);
    }
    cmd.arg("run");
    if opts.asynchronous {
        cmd.arg("--async");
    }
    for p in &opts.prefixes {
        cmd.arg("--prefix").arg(p);
    }
    if let Some(k) = &opts.key {
        cmd.env("LABIOS_KEY", k);
    }
    if let Some(s) = &opts.secret {
        cmd.env("LABIOS_SECRET", s);
    }
    cmd.arg("--").args(&opts.program);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("labios run --near: cannot run launcher {launcher:?}"))?;
    Ok(child.wait().await?)
}

pub(crate) async fn reachable(endpoint: &Endpoint) -> bool {
    match endpoint {
        Endpoint::Unix(p) => tokio::net::UnixStream::connect(p).await.is_ok(),
        Endpoint::Tcp(a) => tokio::net::TcpStream::connect(a).await.is_ok(),
    }
}

/// In the embedded deployment, the runtime `what` works against: none when
/// a `labios serve` answers the endpoint, else one started here (said on
/// stderr) for `whom`; an endpoint the user named must answer, since data
/// written to a runtime started elsewhere would be lost to them.
pub(crate) async fn runtime_for(
    config: &Config,
    what: &str,
    whom: &str,
) -> anyhow::Result<Option<Served>> {
    if config.deployment != Deployment::Embedded {
        return Ok(None);
    }
    let endpoint = Endpoint::parse(&config.endpoint())?;
    if reachable(&endpoint).await {
        return Ok(None);
    }
    anyhow::ensure!(
        config.endpoint.is_none(),
        "{what}: nothing answers at {} (--endpoint / LABIOS_ENDPOINT): start \
         `labios serve` there, or name no endpoint to run an embedded runtime \
         in the data directory for {whom}",
        config.endpoint()
    );
    eprintln!(
        "{what}: no labios serve at {}; running an embedded runtime on {} for {whom}",
        config.endpoint(),
        config.data_dir.display()
    );
    Ok(Some(Served::start(config.clone()).await?))
}

/// Runs the program and returns its exit status; LABIOS stops cleanly
/// afterwards even if it failed or was interrupted.
pub async fn run(config: Config, opts: RunOptions) -> anyhow::Result<ExitStatus> {
    let Some((program, args)) = opts.program.split_first() else {
        anyhow::bail!(
            "labios run: no program given (usage: labios run [--async] -- PROGRAM ARGS...)"
        );
    };
    if let Some(path) = &opts.near {
        if let Some(host) = near_host(&config, &opts, path).await? {
            return launch_on(&config, &opts, &host).await;
        }
    }
    let mut signals = crate::processes::StopSignal::install()?;
    let lib = preload_library()?;
    for p in &opts.prefixes {
        check_prefix(p)?;
    }
    let served = runtime_for(&config, "labios run", "this program").await?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    if config.deployment == Deployment::Embedded || config.endpoint.is_some() {
        cmd.env("LABIOS_ENDPOINT", config.endpoint());
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(other) if !other.is_empty() => format!("{}:{other}", lib.display()),
        _ => lib.display().to_string(),
    };
    cmd.env("LD_PRELOAD", preload)
        .env("LABIOS_PREFIXES", opts.prefixes.join(":"));
    if let Some(c) = &opts.config_file {
        cmd.env("LABIOS_CONFIG", std::path::absolute(c)?);
    }
    if opts.asynchronous {
        cmd.env("LABIOS_CLIENT__MODE", "async");
    }
    if let Some(k) = &opts.key {
        cmd.env("LABIOS_KEY", k);
    }
    if let Some(s) = &opts.secret {
        cmd.env("LABIOS_SECRET", s);
    }
    let status = async {
        let mut child = cmd
            .spawn()
            .with_context(|| format!("labios run: cannot run {program}"))?;
        tokio::select! {
            status = child.wait() => Ok::<_, anyhow::Error>(status?),
            _ = signals.recv() => {
                // The program got the terminal's signal too; give it a
                // moment, then make sure it ends before LABIOS does.
                match tokio::time::timeout(std::time::Duration::from_secs(5), child.wait()).await {
                    Ok(status) => Ok(status?),
                    Err(_) => {
                        child.kill().await?;
                        Ok(child.wait().await?)
                    }
                }
            }
        }
    }
    .await;
    // The stop runs what the program published and never waited for; a
    // signal (Ctrl-C) ends it at once.
    if let Some(s) = served {
        signals.interruptible("labios run", s.shutdown()).await?;
    }
    status
}
