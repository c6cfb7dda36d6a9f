//! Programs a process executes inherit its LABIOS working directory, even
//! when the caller hands over an environment of its own (shells do): the
//! `LABIOS_CWD` entry of every new environment is set to match.

use crate::mount;
use crate::real::real;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

type Env = *const *const c_char;

/// `envp` with `LABIOS_CWD` set to the working directory (if virtual) or
/// removed; `None` when `envp` needs no change.
unsafe fn fixed_env(envp: Env) -> Option<(Vec<CString>, Vec<*const c_char>)> {
    let cwd = mount::cwd();
    let key = format!("{}=", mount::CWD_ENV);
    let mut entries = Vec::new();
    let mut had = false;
    if !envp.is_null() {
        let mut p = envp;
        while !(*p).is_null() {
            let e = CStr::from_ptr(*p);
            if e.to_bytes().starts_with(key.as_bytes()) {
                had = true;
            } else {
                entries.push(e.to_owned());
            }
            p = p.add(1);
        }
    }
    if cwd.is_none() && !had {
        return None;
    }
    if let Some(c) = cwd {
        entries.push(CString::new(format!("{key}{c}")).ok()?);
    }
    let mut ptrs: Vec<*const c_char> = entries.iter().map(|e| e.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    Some((entries, ptrs))
}

#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Env, envp: Env) -> c_int {
    let fixed = fixed_env(envp);
    let envp = fixed.as_ref().map_or(envp, |(_, p)| p.as_ptr());
    real!(execve: fn(*const c_char, Env, Env) -> c_int)(path, argv, envp)
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Env, envp: Env) -> c_int {
    let fixed = fixed_env(envp);
    let envp = fixed.as_ref().map_or(envp, |(_, p)| p.as_ptr());
    real!(execvpe: fn(*const c_char, Env, Env) -> c_int)(file, argv, envp)
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Env, envp: Env) -> c_int {
    let fixed = fixed_env(envp);
    let envp = fixed.as_ref().map_or(envp, |(_, p)| p.as_ptr());
    real!(fexecve: fn(c_int, Env, Env) -> c_int)(fd, argv, envp)
}

macro_rules! spawn {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: *mut libc::pid_t,
            path: *const c_char,
            actions: *const libc::posix_spawn_file_actions_t,
            attr: *const libc::posix_spawnattr_t,
            argv: Env,
            envp: Env,
        ) -> c_int {
            let fixed = fixed_env(envp);
            let envp = fixed.as_ref().map_or(envp, |(_, p)| p.as_ptr());
            real!($name: fn(
                *mut libc::pid_t,
                *const c_char,
                *const libc::posix_spawn_file_actions_t,
                *const libc::posix_spawnattr_t,
                Env,
                Env
            ) -> c_int)(pid, path, actions, attr, argv, envp)
        }
    };
}

spawn!(posix_spawn);
spawn!(posix_spawnp);
