//! `labios mount MOUNTPOINT` and `labios umount MOUNTPOINT`: LABIOS as a
//! file system through FUSE ([`labios_fuse`]), for every program, the ones
//! `labios run` cannot intercept included. In the embedded deployment the
//! runtime is started here if no `labios serve` answers (as for
//! `labios run`); the mount ends on SIGINT, SIGTERM or `labios umount`, and
//! every write it acknowledged is stored before the command returns.

use crate::config::Config;
use crate::processes::StopSignal;
use anyhow::Context;
use labios_client::IoMode;
use labios_connect::connect_client;
use labios_fuse::{LabiosFs, Settings};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct MountOptions {
    pub mountpoint: PathBuf,
    pub asynchronous: bool,
    pub allow_other: bool,
    pub cache_timeout: Duration,
    pub key: Option<String>,
    pub secret: Option<String>,
}

pub async fn mount(mut config: Config, opts: MountOptions) -> anyhow::Result<()> {
    let mountpoint = std::path::absolute(&opts.mountpoint)?;
    anyhow::ensure!(
        mountpoint.is_dir(),
        "labios mount: {} is not a directory (create it first: mkdir -p {})",
        mountpoint.display(),
        mountpoint.display()
    );
    anyhow::ensure!(
        Path::new("/dev/fuse").exists(),
        "labios mount: /dev/fuse is missing: load the fuse module (modprobe fuse), or in a container pass --device /dev/fuse"
    );
    let mut signals = StopSignal::install()?;
    let served = crate::run::runtime_for(&config, "labios mount", "this mount").await?;
    // A write the kernel acknowledged is a published label, never bytes in
    // a client cache that an unmount or a crash of this process would lose.
    config.client.min_label_size = 0;
    if opts.asynchronous {
        config.client.mode = IoMode::Async;
    }
    let mounted = async {
        let client = connect_client(&config.connection(), opts.key, opts.secret).await?;
        let settings = Settings {
            cache_timeout: opts.cache_timeout,
        };
        let fs = LabiosFs::new(client.clone(), tokio::runtime::Handle::current(), settings);
        let at = mountpoint.clone();
        let allow_other = opts.allow_other;
        let mut session =
            tokio::task::spawn_blocking(move || labios_fuse::session(fs, &at, allow_other))
                .await?
                .with_context(|| format!("labios mount: cannot mount {}", mountpoint.display()))?;
        let mut unmounter = session.unmount_callable();
        let (done, ended) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("labios-fuse".into())
            .spawn(move || {
                let _ = done.send(session.run());
            })?;
        eprintln!(
            "labios mount: LABIOS is mounted at {} (stop with Ctrl-C or `labios umount {}`)",
            mountpoint.display(),
            mountpoint.display()
        );
        let mut ended = std::pin::pin!(ended);
        let ran = tokio::select! {
            ran = &mut ended => ran,
            _ = signals.recv() => {
                eprintln!("labios mount: unmounting {} (programs still using it keep it until they close their files)", mountpoint.display());
                unmounter.unmount().context("labios mount: cannot unmount")?;
                ended.await
            }
        };
        ran.context("labios mount: the FUSE session thread died")?
            .context("labios mount: the FUSE session failed")?;
        client.wait_all().await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if let Some(s) = served {
        signals.interruptible("labios mount", s.shutdown()).await?;
    }
    mounted
}

/// Unmounts a LABIOS mount: the mount system call for root, Debian's
/// `fusermount3 -u` (package fuse3) for the user who mounted it.
pub fn umount(mountpoint: &Path) -> anyhow::Result<()> {
    let path = std::path::absolute(mountpoint)?;
    if unsafe { libc::geteuid() } == 0 {
        let c = CString::new(path.as_os_str().as_bytes())?;
        if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        anyhow::bail!(
            "labios umount {}: {e}{}",
            path.display(),
            if e.raw_os_error() == Some(libc::EBUSY) {
                " (a program still uses it: close it, or `umount -l` to detach now)"
            } else {
                ""
            }
        );
    }
    let out = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(&path)
        .output()
        .context("labios umount: cannot run fusermount3 (install Debian's fuse3 package)")?;
    anyhow::ensure!(
        out.status.success(),
        "labios umount {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
