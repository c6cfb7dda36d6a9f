//! How a worker manager in its own process commissions and decommissions
//! workers (article 3.3.3b, elasticity across processes). The manager only
//! needs "start worker INDEX" and "stop it": a [`Launcher`] hides whether
//! that means a local child process ([`LocalProcessLauncher`]), an ssh
//! session, a Slurm job step or a Kubernetes pod. A launched worker meets
//! the manager through the stores, like any other worker: it publishes its
//! status and serves its queue.

use async_trait::async_trait;
use labios_label::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long a stopped worker gets to finish the tasks it took before it is
/// killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A worker a [`Launcher`] started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchedWorker {
    /// Index of the worker in the configured pool (its id).
    pub index: usize,
    /// Where it runs, in the launcher's terms (a pid, a job id, a pod name),
    /// for logs and for [`Launcher::stop`].
    pub locator: String,
}

/// Starts and stops worker processes.
#[async_trait]
pub trait Launcher: Send + Sync {
    /// Starts worker `index` of the configured pool; `suspended` asks it to
    /// start suspended (elastic allocation keeps it in reserve).
    async fn launch(&self, index: usize, suspended: bool) -> Result<LaunchedWorker>;
    /// Stops a launched worker: it finishes the tasks it took, then exits.
    async fn stop(&self, worker: &LaunchedWorker) -> Result<()>;
    /// Whether a launched worker's process is still running (false once it
    /// exited or was stopped).
    async fn running(&self, worker: &LaunchedWorker) -> bool;
}

/// Runs `PROGRAM ARGS... worker INDEX [--suspended]` as a child process of
/// the manager, inheriting its environment (so the same `LABIOS_*`
/// configuration). Output goes to `LOG_DIR/worker-INDEX.log` when a log
/// directory is given, else it is inherited.
pub struct LocalProcessLauncher {
    program: PathBuf,
    args: Vec<OsString>,
    log_dir: Option<PathBuf>,
    children: Mutex<HashMap<usize, Child>>,
}

impl LocalProcessLauncher {
    /// `program` is the `labios` binary (usually `std::env::current_exe()`),
    /// `args` go before the subcommand (e.g. `--config FILE`).
    pub fn new(program: PathBuf, args: Vec<OsString>, log_dir: Option<PathBuf>) -> Self {
        LocalProcessLauncher {
            program,
            args,
            log_dir,
            children: Mutex::new(HashMap::new()),
        }
    }

    fn output(&self, index: usize) -> Result<(Stdio, Stdio)> {
        let Some(dir) = &self.log_dir else {
            return Ok((Stdio::inherit(), Stdio::inherit()));
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Storage(format!("creating log dir {}: {e}", dir.display())))?;
        let path = dir.join(format!("worker-{index}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::Storage(format!("opening {}: {e}", path.display())))?;
        let copy = file
            .try_clone()
            .map_err(|e| Error::Storage(format!("opening {}: {e}", path.display())))?;
        Ok((file.into(), copy.into()))
    }
}

#[async_trait]
impl Launcher for LocalProcessLauncher {
    async fn launch(&self, index: usize, suspended: bool) -> Result<LaunchedWorker> {
        let (stdout, stderr) = self.output(index)?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .arg("worker")
            .arg(index.to_string())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true);
        if suspended {
            cmd.arg("--suspended");
        }
        let child = cmd.spawn().map_err(|e| {
            Error::Unavailable(format!(
                "cannot start worker {index} ({}): {e}",
                self.program.display()
            ))
        })?;
        let pid = child.id().unwrap_or_default();
        if let Some(mut old) = self.children.lock().insert(index, child) {
            // A relaunch replaces an exited process; never leave one behind.
            let _ = old.start_kill();
        }
        Ok(LaunchedWorker {
            index,
            locator: format!("pid {pid}"),
        })
    }

    async fn stop(&self, worker: &LaunchedWorker) -> Result<()> {
        let Some(mut child) = self.children.lock().remove(&worker.index) else {
            return Ok(());
        };
        if let Some(pid) = child.id() {
            // SIGTERM: the worker finishes what it took and publishes a
            // final status. SAFETY: kill(2) on our own child's pid has no
            // memory effects.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Error::Unavailable(format!(
                "waiting for worker {}: {e}",
                worker.index
            ))),
            Err(_) => {
                tracing::warn!(
                    worker = worker.index,
                    "worker did not stop within {STOP_GRACE:?}; killing it"
                );
                child.kill().await.map_err(|e| {
                    Error::Unavailable(format!("killing worker {}: {e}", worker.index))
                })
            }
        }
    }

    async fn running(&self, worker: &LaunchedWorker) -> bool {
        self.children
            .lock()
            .get_mut(&worker.index)
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}
