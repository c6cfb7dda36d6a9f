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

/// The LABIOS path `path` names: one under a prefix (relative paths from
/// the working directory, normalized as the preload does), or a LABIOS
/// path itself.
fn labios_path(path: &str, prefixes: &[String]) -> anyhow::Result<String> {
    let abs = std::path::absolute(path)?;
    let abs = abs
        .to_str()
        .with_context(|| format!("{path} is not UTF-8"))?;
    let abs = labios_label::normalize_path(abs)?;
    for p in prefixes {
        if abs == *p {
            return Ok("/".into());
        }
        if let Some(rest) = abs.strip_prefix(p.as_str()).filter(|r| r.starts_with('/')) {
            return Ok(rest.into());
        }
    }
    Ok(abs)
}

/// The host holding most bytes of `path` (ties: the first by name), if it
/// is not this machine (its hostname, as workers name theirs by default).
/// In the embedded deployment every worker is here.
async fn near_host(
    config: &Config,
    opts: &RunOptions,
    path: &str,
) -> anyhow::Result<Option<String>> {
    if config.deployment == Deployment::Embedded {
        return Ok(None);
    }
    let path = labios_path(path, &opts.prefixes)?;
    let client =
        labios_connect::connect_client(&config.connection(), opts.key.clone(), opts.secret.clone())
            .await?;
    let located = client
        .locate(&path)
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
        Some((host, n)) if *host != labios_server::worker::machine_host() => {
            let total: u64 = bytes.values().sum();
            eprintln!(
                "labios run: {path} has {n} of its {total} bytes on host {host}; starting there"
            );
            Some(host.to_string())
        }
        _ => None,
    })
}

/// `arg` quoted for a POSIX shell.
fn quoted(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// Starts this `labios run`, without `--near`, on `host` through the
/// configured launcher (`[run] launcher`): `{host}` is the host, and
/// `{command}`, if there, the whole command as one shell line run from
/// this working directory (what `ssh` hands the remote shell); without it
/// the command's words follow the launcher's (`ip netns exec {host}`).
/// The key and secret travel as `LABIOS_KEY` and `LABIOS_SECRET` in the
/// environment, never on a command line.
fn launch_on(
    config: &Config,
    opts: &RunOptions,
    host: &str,
) -> anyhow::Result<tokio::process::Child> {
    let exe = std::env::current_exe().context("cannot find the labios executable")?;
    let argv = launch_argv(config, opts, host, &exe.display().to_string())?;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    if let Some(k) = &opts.key {
        cmd.env("LABIOS_KEY", k);
    }
    if let Some(s) = &opts.secret {
        cmd.env("LABIOS_SECRET", s);
    }
    cmd.spawn().with_context(|| {
        format!(
            "labios run --near: cannot run launcher {:?}",
            config.run.launcher
        )
    })
}

/// The launcher's words with `exe run ... -- PROGRAM` placed (see
/// [`launch_on`]).
fn launch_argv(
    config: &Config,
    opts: &RunOptions,
    host: &str,
    exe: &str,
) -> anyhow::Result<Vec<String>> {
    let mut words: Vec<String> = vec![exe.to_string()];
    if let Some(c) = &opts.config_file {
        words.extend([
            "--config".into(),
            std::path::absolute(c)?.display().to_string(),
        ]);
    }
    if let Some(e) = &config.endpoint {
        words.extend(["--endpoint".into(), e.clone()]);
    }
    words.push("run".into());
    if opts.asynchronous {
        words.push("--async".into());
    }
    for p in &opts.prefixes {
        words.extend(["--prefix".into(), p.clone()]);
    }
    words.push("--".into());
    words.extend(opts.program.iter().cloned());
    let line = || -> anyhow::Result<String> {
        let cwd = std::env::current_dir()?;
        let command: Vec<String> = words.iter().map(|w| quoted(w)).collect();
        Ok(format!(
            "cd {} && exec {}",
            quoted(&cwd.display().to_string()),
            command.join(" ")
        ))
    };
    let mut argv = Vec::new();
    let mut placed = false;
    for a in &config.run.launcher {
        let mut a = a.replace("{host}", host);
        if a.contains("{command}") {
            a = a.replace("{command}", &line()?);
            placed = true;
        }
        argv.push(a);
    }
    if !placed {
        argv.extend(words);
    }
    Ok(argv)
}

/// Waits for `child`; on SIGINT or SIGTERM (which the program, or the
/// launcher, got too when it came from the terminal) gives it a moment,
/// then makes sure it ends before LABIOS does.
async fn wait_or_stop(
    mut child: tokio::process::Child,
    signals: &mut crate::processes::StopSignal,
) -> anyhow::Result<ExitStatus> {
    tokio::select! {
        status = child.wait() => Ok(status?),
        _ = signals.recv() => {
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
    for p in &opts.prefixes {
        check_prefix(p)?;
    }
    let mut signals = crate::processes::StopSignal::install()?;
    if let Some(path) = &opts.near {
        if let Some(host) = near_host(&config, &opts, path).await? {
            let child = launch_on(&config, &opts, &host)?;
            return wait_or_stop(child, &mut signals).await;
        }
    }
    let lib = preload_library()?;
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
    let status = match cmd.spawn() {
        Ok(child) => wait_or_stop(child, &mut signals).await,
        Err(e) => Err(anyhow::Error::new(e).context(format!("labios run: cannot run {program}"))),
    };
    // The stop runs what the program published and never waited for; a
    // signal (Ctrl-C) ends it at once.
    if let Some(s) = served {
        signals.interruptible("labios run", s.shutdown()).await?;
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(program: &[&str]) -> RunOptions {
        RunOptions {
            asynchronous: true,
            near: Some("/f".into()),
            prefixes: vec!["/labios".into()],
            program: program.iter().map(|s| s.to_string()).collect(),
            config_file: None,
            key: Some("KEY-7f3a".into()),
            secret: Some("SECRET-9c1e".into()),
        }
    }

    /// A path under a prefix, relative or not, names the LABIOS path
    /// below it; any other is a LABIOS path itself.
    #[test]
    fn near_paths_are_labios_paths() {
        let prefixes = vec!["/labios".to_string()];
        let at = |p: &str| labios_path(p, &prefixes).unwrap();
        assert_eq!(at("/labios/a/../b"), "/b");
        assert_eq!(at("/labios"), "/");
        assert_eq!(at("/labiosx/c"), "/labiosx/c");
        assert_eq!(at("/data/in.h5"), "/data/in.h5");
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(at("rel"), format!("{}/rel", cwd.display()));
    }

    /// A shell launcher gets one line that survives the remote shell
    /// word for word (spaces, quotes, pipes), run from this directory;
    /// another gets the words; no secret is on either.
    #[test]
    fn the_launched_command_keeps_every_word() {
        let program = ["sh", "-c", "echo 'it''s' | tr a-z A-Z; echo \"$0\""];
        let o = opts(&program);
        let config = Config::default();
        let argv = launch_argv(&config, &o, "node7", "/opt/labios").unwrap();
        assert_eq!(argv[..4], ["ssh", "-o", "SendEnv=LABIOS_*", "node7"]);
        assert_eq!(argv.len(), 5, "{argv:?}");
        let secret = |a: &String| a.contains("KEY-7f3a") || a.contains("SECRET-9c1e");
        assert!(!argv.iter().any(secret), "{argv:?}");
        // The line, with `exec` replaced by printing its words.
        let line = argv[4].replace("&& exec ", "&& printf '%s\\n' ");
        let out = std::process::Command::new("sh")
            .args(["-c", &line])
            .output()
            .unwrap();
        let words: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let want: Vec<&str> = ["/opt/labios", "run", "--async", "--prefix", "/labios", "--"]
            .into_iter()
            .chain(program)
            .collect();
        assert_eq!(words, want);
        assert!(argv[4].starts_with(&format!(
            "cd {} &&",
            quoted(&std::env::current_dir().unwrap().display().to_string())
        )));

        let mut netns = Config::default();
        netns.run.launcher = ["ip", "netns", "exec", "{host}"].map(String::from).to_vec();
        let argv = launch_argv(&netns, &o, "ns1", "/opt/labios").unwrap();
        let want: Vec<&str> = [
            "ip",
            "netns",
            "exec",
            "ns1",
            "/opt/labios",
            "run",
            "--async",
        ]
        .into_iter()
        .chain(["--prefix", "/labios", "--"])
        .chain(program)
        .collect();
        assert_eq!(argv, want);
        assert!(!argv.iter().any(secret), "{argv:?}");
    }
}
