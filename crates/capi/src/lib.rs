//! The C API of LABIOS (`include/labios.h`): new applications create labels
//! directly (article 3.2.2) from C, C++ or Fortran through `liblabios_c.so`.
//!
//! Every call returns `LABIOS_OK` (0) or a negative `labios_status`; the
//! message of the calling thread's last failure is kept for
//! `labios_last_error`, because a code alone rarely tells a user what to fix.

use bytes::Bytes;
use labios_connect::{ConnectOptions, Session};
use labios_label::Error;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;

pub const LABIOS_OK: c_int = 0;
pub const LABIOS_ENOTFOUND: c_int = -1;
pub const LABIOS_EEXIST: c_int = -2;
pub const LABIOS_EINVAL: c_int = -3;
pub const LABIOS_EPERM: c_int = -4;
pub const LABIOS_EFULL: c_int = -5;
pub const LABIOS_ETIMEDOUT: c_int = -6;
pub const LABIOS_EFAILED: c_int = -7;
pub const LABIOS_EIO: c_int = -8;
pub const LABIOS_EUNAVAILABLE: c_int = -9;
pub const LABIOS_ELOCKED: c_int = -10;

/// `labios_stat_t` of the header.
#[repr(C)]
pub struct LabiosStat {
    pub size: u64,
    pub mode: u32,
    pub is_dir: c_int,
    pub mtime_ns: u64,
    pub id: u64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn code_of(e: &Error) -> c_int {
    match e {
        Error::NotFound(_) => LABIOS_ENOTFOUND,
        Error::AlreadyExists(_) => LABIOS_EEXIST,
        Error::InvalidPath { .. } | Error::InvalidArgument(_) | Error::Malformed(_) => {
            LABIOS_EINVAL
        }
        Error::PermissionDenied(_) => LABIOS_EPERM,
        Error::Full(_) => LABIOS_EFULL,
        Error::Timeout(_) => LABIOS_ETIMEDOUT,
        Error::LabelFailed { .. } => LABIOS_EFAILED,
        Error::Storage(_) | Error::Protocol(_) => LABIOS_EIO,
        Error::Unavailable(_) => LABIOS_EUNAVAILABLE,
        Error::Locked(_) => LABIOS_ELOCKED,
    }
}

fn fail(e: Error) -> c_int {
    let msg = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
    code_of(&e)
}

/// Runs `f`, turning errors and panics into a status code; a panic must not
/// unwind into C.
fn guard(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => LABIOS_OK,
        Ok(Err(e)) => fail(e),
        Err(_) => fail(Error::Storage("internal error (panic) in liblabios".into())),
    }
}

fn arg(what: &str) -> Error {
    Error::InvalidArgument(format!("{what} is NULL"))
}

unsafe fn opt_str(p: *const c_char, what: &str) -> Result<Option<String>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    CStr::from_ptr(p)
        .to_str()
        .map(|s| Some(s.to_owned()))
        .map_err(|_| Error::InvalidArgument(format!("{what} is not valid UTF-8")))
}

unsafe fn req_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(arg(what));
    }
    CStr::from_ptr(p)
        .to_str()
        .map_err(|_| Error::InvalidArgument(format!("{what} is not valid UTF-8")))
}

unsafe fn session<'a>(h: *const Session) -> Result<&'a Session, Error> {
    h.as_ref().ok_or_else(|| arg("the labios handle"))
}

unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(arg("buf"));
    }
    Ok(std::slice::from_raw_parts(buf.cast(), len))
}

unsafe fn open(options: ConnectOptions, out: *mut *mut Session) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(arg("out"));
        }
        let s = Box::into_raw(Box::new(Session::connect(options)?));
        open_at_exit(s);
        *out = s;
        Ok(())
    })
}

/// The handles not yet disconnected, by address, with the process that
/// opened them, which its exit waits for ([`wait_at_exit`]).
static OPEN: std::sync::Mutex<Vec<(u32, usize)>> = std::sync::Mutex::new(Vec::new());

/// Registers `s` for [`wait_at_exit`], and that handler once.
fn open_at_exit(s: *mut Session) {
    static HOOKED: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain `extern "C" fn()` with the C library.
    HOOKED.call_once(|| unsafe {
        libc::atexit(wait_at_exit);
    });
    OPEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((std::process::id(), s as usize));
}

/// At `exit()`, lands what handles the program never disconnected hold
/// (for at most [`labios_connect::session::AT_EXIT`] each, side by side):
/// asynchronous writes (and small writes still cached to be aggregated)
/// were acknowledged to it, as a stdio stream's buffered bytes are, which
/// `exit()` writes too. On threads of their own: the exiting thread's
/// thread-locals, which the session's runtime uses, are gone by now. A
/// forked child skips its parent's handles, whose runtime threads it does
/// not have. A panic stays here: it must not unwind into the C library.
extern "C" fn wait_at_exit() {
    let _ = std::panic::catch_unwind(wait_for_open);
}

fn wait_for_open() {
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    std::thread::scope(|scope| {
        for &(_, h) in open.iter().filter(|(pid, _)| *pid == me) {
            scope.spawn(move || {
                // SAFETY: `h` is registered from `labios_connect*` until
                // `labios_disconnect` takes it out under this lock, which
                // this handler holds.
                unsafe { &*(h as *const Session) }.wait_all_at_exit();
            });
        }
    });
}

/// Connects with `options` completed by the given C strings (NULL: keep).
unsafe fn connect_with(
    mut options: ConnectOptions,
    config: *const c_char,
    endpoint: *const c_char,
    key: *const c_char,
    secret: *const c_char,
    out: *mut *mut Session,
) -> c_int {
    let given = (|| {
        Ok::<_, Error>((
            opt_str(config, "config_path")?,
            opt_str(endpoint, "endpoint")?,
            opt_str(key, "key")?,
            opt_str(secret, "secret")?,
        ))
    })();
    match given {
        Ok((c, e, k, s)) => {
            options.config = c.map(PathBuf::from).or(options.config);
            options.endpoint = e.or(options.endpoint);
            options.key = k.or(options.key);
            options.secret = s.or(options.secret);
            open(options, out)
        }
        Err(e) => fail(e),
    }
}

/// # Safety
/// Strings are NULL or NUL-terminated; `out` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn labios_connect(
    endpoint: *const c_char,
    key: *const c_char,
    secret: *const c_char,
    out: *mut *mut Session,
) -> c_int {
    let none = std::ptr::null();
    connect_with(ConnectOptions::from_env(), none, endpoint, key, secret, out)
}

/// # Safety
/// As [`labios_connect`]; `config_path` is required.
#[no_mangle]
pub unsafe extern "C" fn labios_connect_config(
    config_path: *const c_char,
    key: *const c_char,
    secret: *const c_char,
    out: *mut *mut Session,
) -> c_int {
    if config_path.is_null() {
        return fail(arg("config_path"));
    }
    let none = std::ptr::null();
    connect_with(
        ConnectOptions::from_env(),
        config_path,
        none,
        key,
        secret,
        out,
    )
}

/// Waits for everything in flight, then frees the handle.
///
/// # Safety
/// `h` came from `labios_connect*` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn labios_disconnect(h: *mut Session) -> c_int {
    if h.is_null() {
        return LABIOS_OK;
    }
    OPEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&(_, p)| p != h as usize);
    let s = Box::from_raw(h);
    guard(|| s.wait_all())
}

/// # Safety
/// `buf` holds `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn labios_write(
    h: *mut Session,
    path: *const c_char,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard(|| session(h)?.write(req_str(path, "path")?, offset, bytes(buf, len)?))
}

/// Reads up to `len` bytes; `*nread` is less than `len` only at end of file.
///
/// # Safety
/// `buf` holds `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn labios_read(
    h: *mut Session,
    path: *const c_char,
    offset: u64,
    buf: *mut c_void,
    len: usize,
    nread: *mut usize,
) -> c_int {
    guard(|| {
        let s = session(h)?;
        if len > 0 && buf.is_null() {
            return Err(arg("buf"));
        }
        let data = s.read(req_str(path, "path")?, offset, len as u64)?;
        if !data.is_empty() {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
        }
        if !nread.is_null() {
            *nread = data.len();
        }
        Ok(())
    })
}

/// Creates the write's labels, publishes them and returns at once; the
/// bytes are copied, so `buf` may be reused immediately.
///
/// # Safety
/// `buf` holds `len` readable bytes; `ticket` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn labios_write_async(
    h: *mut Session,
    path: *const c_char,
    offset: u64,
    buf: *const c_void,
    len: usize,
    ticket: *mut u64,
) -> c_int {
    guard(|| {
        if ticket.is_null() {
            return Err(arg("ticket"));
        }
        let s = session(h)?;
        let data = Bytes::copy_from_slice(bytes(buf, len)?);
        *ticket = s.write_async(req_str(path, "path")?, offset, data)?;
        Ok(())
    })
}

/// # Safety
/// `h` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn labios_wait(h: *mut Session, ticket: u64) -> c_int {
    guard(|| session(h)?.wait(&[ticket]))
}

/// Waits for `n` tickets; the first failure among them is returned.
///
/// # Safety
/// `tickets` holds `n` values.
#[no_mangle]
pub unsafe extern "C" fn labios_wait_many(h: *mut Session, tickets: *const u64, n: usize) -> c_int {
    guard(|| {
        let s = session(h)?;
        if n == 0 {
            return Ok(());
        }
        if tickets.is_null() {
            return Err(arg("tickets"));
        }
        s.wait(std::slice::from_raw_parts(tickets, n))
    })
}

/// # Safety
/// `h` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn labios_wait_all(h: *mut Session) -> c_int {
    guard(|| session(h)?.wait_all())
}

/// # Safety
/// `st` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn labios_stat(
    h: *mut Session,
    path: *const c_char,
    st: *mut LabiosStat,
) -> c_int {
    guard(|| {
        if st.is_null() {
            return Err(arg("st"));
        }
        let path = req_str(path, "path")?;
        let m = session(h)?
            .stat(path)?
            .ok_or_else(|| Error::NotFound(path.to_owned()))?;
        *st = LabiosStat {
            size: m.size,
            mode: m.mode,
            is_dir: c_int::from(m.kind == labios_store::FileKind::Dir),
            mtime_ns: m.mtime,
            id: m.id,
        };
        Ok(())
    })
}

/// # Safety
/// `path` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_mkdir(h: *mut Session, path: *const c_char) -> c_int {
    guard(|| session(h)?.mkdir(req_str(path, "path")?).map(|_| ()))
}

/// Removes a file (its data on every worker) or an empty directory.
///
/// # Safety
/// `path` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_remove(h: *mut Session, path: *const c_char) -> c_int {
    guard(|| session(h)?.remove(req_str(path, "path")?))
}

/// # Safety
/// Paths are NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_rename(
    h: *mut Session,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    guard(|| session(h)?.rename(req_str(from, "from")?, req_str(to, "to")?))
}

/// # Safety
/// `path` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_truncate(h: *mut Session, path: *const c_char, size: u64) -> c_int {
    guard(|| session(h)?.truncate(req_str(path, "path")?, size))
}

/// # Safety
/// `path` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_flush(h: *mut Session, path: *const c_char) -> c_int {
    guard(|| session(h)?.flush(req_str(path, "path")?))
}

/// Administration: see [`Session::set_stack`].
///
/// # Safety
/// `spec` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_stack_set(
    h: *mut Session,
    worker: u32,
    spec: *const c_char,
) -> c_int {
    guard(|| session(h)?.set_stack(worker, req_str(spec, "spec")?))
}

/// Calls `cb(ctx, name, is_dir)` for every entry directly inside `dir`;
/// a non-zero return from `cb` stops the listing.
///
/// # Safety
/// `cb` is a valid function pointer.
#[no_mangle]
pub unsafe extern "C" fn labios_list(
    h: *mut Session,
    dir: *const c_char,
    cb: Option<unsafe extern "C" fn(*mut c_void, *const c_char, c_int) -> c_int>,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        let cb = cb.ok_or_else(|| arg("cb"))?;
        for m in session(h)?.read_dir(req_str(dir, "dir")?)? {
            let name = m.path.rsplit('/').next().unwrap_or_default();
            let name = CString::new(name).unwrap_or_default();
            let is_dir = c_int::from(m.kind == labios_store::FileKind::Dir);
            if cb(ctx, name.as_ptr(), is_dir) != 0 {
                break;
            }
        }
        Ok(())
    })
}

/// Computational storage: publishes a write whose bytes the worker passes
/// through `pipeline` (e.g. "sort:dtype=i64|zstd:level=19") before storing
/// them; returns once the data is staged. Wait on the ticket for the write.
///
/// # Safety
/// `buf` holds `len` readable bytes; strings are NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_write_pipeline(
    h: *mut Session,
    path: *const c_char,
    offset: u64,
    buf: *const c_void,
    len: usize,
    pipeline: *const c_char,
    ticket: *mut u64,
) -> c_int {
    guard(|| {
        if ticket.is_null() {
            return Err(arg("ticket"));
        }
        let s = session(h)?;
        let data = Bytes::copy_from_slice(bytes(buf, len)?);
        *ticket = s.write_through(
            req_str(path, "path")?,
            offset,
            data,
            req_str(pipeline, "pipeline")?,
        )?;
        Ok(())
    })
}

/// In-situ analytics: runs `pipeline` over the whole file where it is
/// stored; `*out` receives a malloc'd buffer of `*out_len` bytes with only
/// the result (free it with `labios_free`).
///
/// # Safety
/// Strings are NUL-terminated; `out` and `out_len` point to writable storage.
#[no_mangle]
pub unsafe extern "C" fn labios_query(
    h: *mut Session,
    path: *const c_char,
    pipeline: *const c_char,
    out: *mut *mut c_void,
    out_len: *mut usize,
) -> c_int {
    guard(|| {
        // Before the pipeline runs on the workers, not after.
        writable(out, out_len)?;
        let result = session(h)?.query(req_str(path, "path")?, req_str(pipeline, "pipeline")?)?;
        give(&result, out, out_len, "the query result")
    })
}

/// Refuses NULL result pointers, naming `out`.
fn writable(out: *mut *mut c_void, out_len: *mut usize) -> Result<(), Error> {
    if out.is_null() || out_len.is_null() {
        return Err(arg("out"));
    }
    Ok(())
}

/// A copy of `data` in memory the caller frees with `labios_free`, in
/// `*out` and `*out_len`; either NULL is refused naming `out`.
unsafe fn give(
    data: &[u8],
    out: *mut *mut c_void,
    out_len: *mut usize,
    what: &str,
) -> Result<(), Error> {
    writable(out, out_len)?;
    let p = libc::malloc(data.len().max(1));
    if p.is_null() {
        return Err(Error::Storage(format!("out of memory for {what}")));
    }
    std::ptr::copy_nonoverlapping(data.as_ptr(), p.cast::<u8>(), data.len());
    *out = p;
    *out_len = data.len();
    Ok(())
}

/// The extended attributes of `path` (its `user.` ones; hints are the
/// `user.labios.*` ones, README "Hints").
unsafe fn xattrs_of(
    h: *mut Session,
    path: *const c_char,
) -> Result<Vec<(String, bytes::Bytes)>, Error> {
    let s = session(h)?;
    let path = req_str(path, "path")?;
    s.run(s.client().xattrs(path))
}

/// `path`'s attribute `name`, or NotFound naming both.
unsafe fn xattr_of(
    h: *mut Session,
    path: *const c_char,
    name: *const c_char,
) -> Result<bytes::Bytes, Error> {
    let s = session(h)?;
    let name = req_str(name, "name")?;
    s.run(s.client().xattr(req_str(path, "path")?, name))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "{} has no attribute {name}",
                CStr::from_ptr(path).to_string_lossy()
            ))
        })
}

/// Sets attribute `name` of `path` to the `len` bytes at `value`; a hint
/// LABIOS does not take is refused naming it.
///
/// # Safety
/// `value` holds `len` readable bytes (or is NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn labios_setxattr(
    h: *mut Session,
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        if len > 0 && value.is_null() {
            return Err(arg("value"));
        }
        if len > labios_client::xattr::SIZE_MAX {
            return Err(Error::InvalidArgument(format!(
                "an attribute's value is at most {} bytes, not {len}",
                labios_client::xattr::SIZE_MAX
            )));
        }
        let s = session(h)?;
        let (path, name) = (req_str(path, "path")?, req_str(name, "name")?);
        let value = if len == 0 {
            bytes::Bytes::new()
        } else {
            bytes::Bytes::copy_from_slice(std::slice::from_raw_parts(value.cast::<u8>(), len))
        };
        s.run(s.client().set_xattr(path, name, Some(value)))
    })
}

/// A copy of attribute `name` of `path` in `*out` (free it with
/// `labios_free`), its size in `*out_len`.
///
/// # Safety
/// `out` and `out_len` are writable.
#[no_mangle]
pub unsafe extern "C" fn labios_getxattr(
    h: *mut Session,
    path: *const c_char,
    name: *const c_char,
    out: *mut *mut c_void,
    out_len: *mut usize,
) -> c_int {
    guard(|| give(&xattr_of(h, path, name)?, out, out_len, "the attribute"))
}

/// Removes attribute `name` of `path`.
///
/// # Safety
/// `path` and `name` are NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn labios_removexattr(
    h: *mut Session,
    path: *const c_char,
    name: *const c_char,
) -> c_int {
    guard(|| {
        let s = session(h)?;
        let (path, name) = (req_str(path, "path")?, req_str(name, "name")?);
        s.run(s.client().remove_xattr(path, name))
    })
}

/// Calls `cb(ctx, name)` for every attribute of `path`; a non-zero return
/// from `cb` stops the listing.
///
/// # Safety
/// `cb` is a valid function pointer.
#[no_mangle]
pub unsafe extern "C" fn labios_listxattr(
    h: *mut Session,
    path: *const c_char,
    cb: Option<unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int>,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        let cb = cb.ok_or_else(|| arg("cb"))?;
        for (name, _) in xattrs_of(h, path)? {
            let name = CString::new(name).unwrap_or_default();
            if cb(ctx, name.as_ptr()) != 0 {
                break;
            }
        }
        Ok(())
    })
}

/// Frees a buffer LABIOS returned (`labios_query`, `labios_getxattr`).
///
/// # Safety
/// `p` came from LABIOS, or is NULL.
#[no_mangle]
pub unsafe extern "C" fn labios_free(p: *mut c_void) {
    libc::free(p);
}

/// Registers a WebAssembly module (binary or WAT text) as this
/// application's private function `name`.
///
/// # Safety
/// `module` holds `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn labios_register_function(
    h: *mut Session,
    name: *const c_char,
    module: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        let m = Bytes::copy_from_slice(bytes(module, len)?);
        session(h)?.register_function(req_str(name, "name")?, m)
    })
}

/// A fixed description of a status code.
#[no_mangle]
pub extern "C" fn labios_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        LABIOS_OK => c"success",
        LABIOS_ENOTFOUND => c"not found",
        LABIOS_EEXIST => c"already exists",
        LABIOS_EINVAL => c"invalid argument",
        LABIOS_EPERM => c"permission denied",
        LABIOS_EFULL => c"queue or warehouse full",
        LABIOS_ETIMEDOUT => c"timed out",
        LABIOS_EFAILED => c"label failed",
        LABIOS_EIO => c"storage error",
        LABIOS_EUNAVAILABLE => c"LABIOS unavailable",
        LABIOS_ELOCKED => c"file locked",
        _ => c"unknown status code",
    };
    s.as_ptr()
}

/// The message of this thread's last failed call (empty if none); valid
/// until the thread's next failing call.
#[no_mangle]
pub extern "C" fn labios_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
