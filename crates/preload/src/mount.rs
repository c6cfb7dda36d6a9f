//! Which paths belong to LABIOS: those under the configured prefixes
//! (`LABIOS_PREFIXES`, colon-separated, default `/labios`). A prefix is a
//! mount point of the LABIOS namespace: `/labios/a/b` is `/a/b` there.
//!
//! A process may `chdir` into a LABIOS directory; the kernel cannot, so the
//! working directory is kept here and relative paths resolve against it.

use crate::fdtable;
use parking_lot::RwLock;
use std::ffi::CString;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static PREFIXES: OnceLock<Vec<String>> = OnceLock::new();
/// The virtual working directory, when it is inside LABIOS.
static CWD: RwLock<Option<String>> = parking_lot::const_rwlock(None);
static CWD_VIRTUAL: AtomicBool = AtomicBool::new(false);
pub const CWD_ENV: &str = "LABIOS_CWD";

pub fn init() {
    let list = std::env::var("LABIOS_PREFIXES").unwrap_or_else(|_| "/labios".into());
    let prefixes: Vec<String> = list
        .split(':')
        .filter_map(|p| normalize(p).filter(|p| p != "/"))
        .collect();
    let _ = PREFIXES.set(prefixes);
    if let Ok(cwd) = std::env::var(CWD_ENV) {
        if let Some(cwd) = normalize(&cwd).filter(|c| split(c).is_some()) {
            set_cwd(Some(cwd));
        }
    }
}

fn prefixes() -> &'static [String] {
    PREFIXES.get().map(Vec::as_slice).unwrap_or(&[])
}

/// A path as LABIOS sees it: the full path the program used and the path
/// in the LABIOS namespace.
#[derive(Debug, Clone)]
pub struct Vpath {
    pub full: String,
    pub ns: String,
}

pub enum Target {
    Labios(Vpath),
    /// Not LABIOS's: call libc, with this absolute path instead of the
    /// caller's when the caller's was relative to a virtual directory.
    Real(Option<CString>),
}

/// Lexically normalized absolute path (`.`, `..` and repeated `/` removed).
pub fn normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// The namespace path of a normalized full path under a prefix.
fn split(full: &str) -> Option<String> {
    prefixes().iter().find_map(|p| {
        let rest = full.strip_prefix(p.as_str())?;
        if rest.is_empty() {
            Some("/".to_string())
        } else if rest.starts_with('/') {
            Some(rest.to_string())
        } else {
            None
        }
    })
}

fn starts_in_prefix(path: &[u8]) -> bool {
    prefixes()
        .iter()
        .any(|p| path.starts_with(p.as_bytes()) && matches!(path.get(p.len()), None | Some(b'/')))
}

/// Cheap test that an absolute path may be under a prefix, without
/// allocating: most calls of a program are for other paths.
fn may_match(path: &[u8]) -> bool {
    starts_in_prefix(path) || path.windows(3).any(|w| w == b"/..")
}

/// A path that was relative to a LABIOS directory, or that left a prefix
/// through `..`, reaches libc in its normalized absolute form.
fn classify(full: String) -> Target {
    let Some(full) = normalize(&full) else {
        return Target::Real(None);
    };
    match split(&full) {
        Some(ns) => Target::Labios(Vpath { full, ns }),
        None => Target::Real(CString::new(full).ok()),
    }
}

fn join(base: &str, rel: &str) -> String {
    format!("{}/{rel}", base.trim_end_matches('/'))
}

/// Where a LABIOS symbolic link at `link` with `target` points: inside
/// LABIOS or out of it (a relative target is relative to the link's
/// directory, as the kernel reads it).
pub fn link_target(link: &Vpath, target: &str) -> Target {
    if target.starts_with('/') {
        return classify(target.to_string());
    }
    let dir = link.full.rsplit_once('/').map_or("/", |(d, _)| d);
    classify(join(if dir.is_empty() { "/" } else { dir }, target))
}

/// `rest` beyond the LABIOS symbolic link at `link` with `target`: where a
/// path that goes through the link as a directory leads.
pub fn through(link: &Vpath, target: &str, rest: &str) -> Target {
    let base = if target.starts_with('/') {
        target.to_string()
    } else {
        let dir = link.full.rsplit_once('/').map_or("/", |(d, _)| d);
        join(if dir.is_empty() { "/" } else { dir }, target)
    };
    classify(join(&base, rest))
}

/// The LABIOS path of the absolute path `full`, if it is one.
pub fn labios(full: &str) -> Option<Vpath> {
    match classify(full.to_string()) {
        Target::Labios(v) => Some(v),
        Target::Real(_) => None,
    }
}

/// Resolves `path` as the `*at` calls do, relative to `dirfd`.
///
/// # Safety
/// `path` is any pointer: one the kernel would refuse is not read.
pub unsafe fn resolve_at(dirfd: c_int, path: *const c_char) -> Target {
    // A bad pointer (or a string past PATH_MAX) goes to libc as it is,
    // whose call answers EFAULT (or ENAMETOOLONG) as the kernel does.
    let Ok(bytes) = crate::guard::c_str(path) else {
        return Target::Real(None);
    };
    if bytes.first() == Some(&b'/') {
        if !may_match(bytes) {
            return Target::Real(None);
        }
        // A real path stays as the program wrote it (`..` may follow a
        // symbolic link); only one that started inside LABIOS is rewritten.
        return match std::str::from_utf8(bytes).map(|s| classify(s.to_string())) {
            Ok(Target::Real(_)) if !starts_in_prefix(bytes) => Target::Real(None),
            Ok(t) => t,
            Err(_) => Target::Real(None),
        };
    }
    let base = if dirfd == libc::AT_FDCWD {
        if !CWD_VIRTUAL.load(Ordering::Acquire) {
            return Target::Real(None);
        }
        match CWD.read().clone() {
            Some(c) => c,
            None => return Target::Real(None),
        }
    } else {
        match fdtable::get(dirfd) {
            Some(f) => f.path.full.clone(),
            None => return through_host_dir(dirfd, bytes),
        }
    };
    match std::str::from_utf8(bytes) {
        Ok("") => classify(base),
        Ok(rel) => classify(join(&base, rel)),
        Err(_) => Target::Real(None),
    }
}

/// A path relative to a host directory may still lead into a prefix:
/// rsync walks to its destination one component at a time from `/`
/// (`openat` of "/", then `fstatat(fd, "labios")`). Only a path naming a
/// prefix's last component costs the look-up of the directory's path.
fn through_host_dir(dirfd: c_int, rel: &[u8]) -> Target {
    let names_prefix = prefixes().iter().any(|p| {
        let last = p.rsplit('/').next().unwrap_or_default().as_bytes();
        rel.split(|&b| b == b'/').any(|c| c == last)
    });
    if !names_prefix {
        return Target::Real(None);
    }
    let (Ok(dir), Ok(rel)) = (
        std::fs::read_link(format!("/proc/self/fd/{dirfd}")),
        std::str::from_utf8(rel),
    ) else {
        return Target::Real(None);
    };
    match dir.to_str().map(|d| classify(join(d, rel))) {
        Some(t @ Target::Labios(_)) => t,
        _ => Target::Real(None),
    }
}

/// # Safety
/// As [`resolve_at`].
pub unsafe fn resolve(path: *const c_char) -> Target {
    resolve_at(libc::AT_FDCWD, path)
}

/// Enters a LABIOS directory (`Some`) or leaves LABIOS (`None`); the
/// environment carries it into programs this one executes.
pub fn set_cwd(cwd: Option<String>) {
    match &cwd {
        Some(c) => std::env::set_var(CWD_ENV, c),
        None => std::env::remove_var(CWD_ENV),
    }
    CWD_VIRTUAL.store(cwd.is_some(), Ordering::Release);
    *CWD.write() = cwd;
}

pub fn cwd() -> Option<String> {
    if !CWD_VIRTUAL.load(Ordering::Acquire) {
        return None;
    }
    CWD.read().clone()
}
