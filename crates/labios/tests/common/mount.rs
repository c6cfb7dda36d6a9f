//! A `labios mount` process for a test: mounted when `start` returns,
//! unmounted and exited cleanly when `stop` returns, and never left behind
//! by a test that fails (the drop detaches it and kills the process).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long mounting or unmounting may take on a busy machine.
const DEADLINE: Duration = Duration::from_secs(60);

pub struct Mounted {
    child: Option<Child>,
    pub dir: PathBuf,
    log: PathBuf,
}

/// Whether `dir` is a mount point of this process's namespace.
pub fn is_mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.as_ref()))
}

impl Mounted {
    /// Runs `cmd` (`labios mount ...` with the deployment's environment,
    /// mounting at `dir`) and waits until the mount is there.
    pub fn start(mut cmd: Command, dir: &Path) -> Mounted {
        std::fs::create_dir_all(dir).unwrap();
        let log = dir.with_extension("log");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut m = Mounted {
            child: Some(child),
            dir: dir.to_path_buf(),
            log,
        };
        let deadline = Instant::now() + DEADLINE;
        while !is_mounted(dir) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "labios mount exited ({status}) before mounting:\n{}",
                    m.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "not mounted after {DEADLINE:?}:\n{}",
                m.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// What the mount process printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM: the mount goes away and the process exits with success.
    pub fn stop(self) {
        let id = self.child.as_ref().unwrap().id();
        unsafe { libc::kill(id as i32, libc::SIGTERM) };
        self.ended();
    }

    /// The process exits with success (after SIGTERM, or by itself after
    /// `labios umount`), and the mount is gone.
    pub fn ended(mut self) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "labios mount did not stop:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "labios mount ended with {status}:\n{}",
            self.log()
        );
        assert!(
            !is_mounted(&self.dir),
            "still mounted after labios mount ended"
        );
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(c) = std::ffi::CString::new(self.dir.to_string_lossy().as_bytes()) {
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
