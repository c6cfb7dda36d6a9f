//! libaio's `io_submit`, `io_getevents` and `io_destroy` on LABIOS
//! descriptors (fio's `libaio` engine, databases): the kernel's AIO cannot
//! reach a LABIOS file, so a request on one runs here, at submission, and
//! its completion waits in this library until the program reaps it; the
//! requests on other descriptors go to libaio unchanged, in the same call.

use crate::fdtable;
use crate::io;
use crate::posix::{readv_fd, writev_fd};
use crate::real::real;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::os::raw::{c_int, c_long, c_void};

/// libaio's `struct iocb` (the kernel's layout on 64-bit Linux).
#[repr(C)]
pub struct Iocb {
    data: u64,
    key: u32,
    rw_flags: c_int,
    opcode: i16,
    reqprio: i16,
    fildes: c_int,
    /// A buffer, or for the vectored opcodes an array of `iovec`.
    buf: *mut c_void,
    /// Bytes, or for the vectored opcodes the number of `iovec`s.
    nbytes: u64,
    offset: i64,
}

/// libaio's `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const PREAD: i16 = 0;
const PWRITE: i16 = 1;
const FSYNC: i16 = 2;
const FDSYNC: i16 = 3;
const PREADV: i16 = 7;
const PWRITEV: i16 = 8;

/// Completions of LABIOS requests not reaped yet, per AIO context.
static DONE: Mutex<Option<HashMap<usize, VecDeque<IoEvent>>>> = parking_lot::const_mutex(None);

/// Runs one request on a LABIOS descriptor: bytes done, or -errno.
unsafe fn run(cb: &Iocb) -> i64 {
    let one = libc::iovec {
        iov_base: cb.buf,
        iov_len: cb.nbytes as usize,
    };
    let (iov, cnt) = match cb.opcode {
        PREAD | PWRITE => (&one as *const libc::iovec, 1),
        PREADV | PWRITEV => (
            cb.buf as *const libc::iovec,
            c_int::try_from(cb.nbytes).unwrap_or(c_int::MAX),
        ),
        FSYNC | FDSYNC => {
            let Some(f) = fdtable::get(cb.fildes) else {
                return -i64::from(libc::EBADF);
            };
            return match io::fsync(&f) {
                Ok(()) => 0,
                Err(e) => -i64::from(e),
            };
        }
        _ => return -i64::from(libc::EINVAL),
    };
    let done = match cb.opcode {
        PREAD | PREADV => readv_fd(cb.fildes, iov, cnt, Some(cb.offset)),
        _ => writev_fd(cb.fildes, iov, cnt, Some(cb.offset)),
    };
    match done {
        Some(n) if n >= 0 => n as i64,
        Some(_) => -i64::from(fdtable::errno()),
        None => -i64::from(libc::EBADF),
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_submit(ctx: *mut c_void, nr: c_long, iocbs: *mut *mut Iocb) -> c_int {
    let Ok(n) = usize::try_from(nr) else {
        return -libc::EINVAL;
    };
    if n == 0 || iocbs.is_null() {
        return real!(io_submit: fn(*mut c_void, c_long, *mut *mut Iocb) -> c_int)(ctx, nr, iocbs);
    }
    let list = std::slice::from_raw_parts(iocbs, n);
    let labios = |cb: *mut Iocb| !cb.is_null() && fdtable::is_labios((*cb).fildes);
    if !list.iter().any(|&cb| labios(cb)) {
        return real!(io_submit: fn(*mut c_void, c_long, *mut *mut Iocb) -> c_int)(ctx, nr, iocbs);
    }
    // In order: each run of requests on other descriptors goes to libaio
    // in one call; a refusal there ends the submission, as in libaio.
    let mut i = 0;
    while i < n {
        if labios(list[i]) {
            let cb = &*list[i];
            let event = IoEvent {
                data: cb.data,
                obj: list[i] as u64,
                res: run(cb),
                res2: 0,
            };
            DONE.lock()
                .get_or_insert_with(HashMap::new)
                .entry(ctx as usize)
                .or_default()
                .push_back(event);
            i += 1;
            continue;
        }
        let end = (i..n).find(|&j| labios(list[j])).unwrap_or(n);
        let sent = real!(io_submit: fn(*mut c_void, c_long, *mut *mut Iocb) -> c_int)(
            ctx,
            (end - i) as c_long,
            iocbs.add(i),
        );
        if sent < 0 {
            return if i == 0 { sent } else { i as c_int };
        }
        i += sent as usize;
        if i < end {
            return i as c_int;
        }
    }
    n as c_int
}

#[no_mangle]
pub unsafe extern "C" fn io_getevents(
    ctx: *mut c_void,
    min_nr: c_long,
    nr: c_long,
    events: *mut IoEvent,
    timeout: *mut libc::timespec,
) -> c_int {
    let want = usize::try_from(nr).unwrap_or(0);
    let mut got = 0usize;
    if let Some(queue) = DONE
        .lock()
        .as_mut()
        .and_then(|m| m.get_mut(&(ctx as usize)))
    {
        while got < want {
            let Some(e) = queue.pop_front() else { break };
            events.add(got).write(e);
            got += 1;
        }
    }
    if got == 0 {
        return real!(io_getevents: fn(*mut c_void, c_long, c_long, *mut IoEvent, *mut libc::timespec) -> c_int)(
            ctx, min_nr, nr, events, timeout,
        );
    }
    let min_left = min_nr - got as c_long;
    if min_left <= 0 || got == want {
        return got as c_int;
    }
    // The program waits for more than this library had: the rest are the
    // kernel's.
    let more = real!(io_getevents: fn(*mut c_void, c_long, c_long, *mut IoEvent, *mut libc::timespec) -> c_int)(
        ctx,
        min_left,
        nr - got as c_long,
        events.add(got),
        timeout,
    );
    got as c_int + more.max(0)
}

#[no_mangle]
pub unsafe extern "C" fn io_destroy(ctx: *mut c_void) -> c_int {
    if let Some(m) = DONE.lock().as_mut() {
        m.remove(&(ctx as usize));
    }
    real!(io_destroy: fn(*mut c_void) -> c_int)(ctx)
}
