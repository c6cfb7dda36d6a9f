//! Reading a caller's C strings and buffers without trusting them. The kernel answers
//! a bad pointer with EFAULT; a library standing in front of it must not
//! crash the program instead. Before a page of a string is read, the
//! kernel is asked whether it is readable (`process_vm_readv` of one byte
//! from this very process, which fails with EFAULT where a read would
//! fault). A system call costs about as much as the call being
//! intercepted, so each thread remembers the last [`REMEMBERED`] pages
//! found readable: a program's paths come from a few pages (its stack,
//! its buffers), and nearly every check is a look-up. The cost of that:
//! a page unmapped after it was remembered is not asked about again, so a
//! dangling pointer into it still faults (README "Interception").

use std::cell::RefCell;
use std::os::raw::{c_char, c_int};

/// Longest path the kernel takes, NUL included (Linux's PATH_MAX).
const PATH_MAX: usize = 4096;
/// The smallest page size Linux runs with: a string is checked a page at
/// a time, so an unmapped page after its NUL is never touched.
const PAGE: usize = 4096;
/// Readable pages each thread remembers.
const REMEMBERED: usize = 16;

thread_local! {
    /// Pages found readable (page numbers, 0 = none), filled in turn.
    static READABLE: RefCell<([usize; REMEMBERED], usize)> =
        const { RefCell::new(([0; REMEMBERED], 0)) };
}

/// Whether page `page` (a page number) may be read: EFAULT if the kernel
/// says not. Where the kernel refuses to say (a sandbox forbidding
/// `process_vm_readv`), the page is taken as readable, as before there
/// was a check.
unsafe fn readable(page: usize) -> Result<(), c_int> {
    let known = READABLE.with(|r| r.borrow().0.contains(&page));
    if known {
        return Ok(());
    }
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: (page * PAGE) as *mut libc::c_void,
        iov_len: 1,
    };
    if libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) < 0
        && *libc::__errno_location() == libc::EFAULT
    {
        return Err(libc::EFAULT);
    }
    READABLE.with(|r| {
        let mut r = r.borrow_mut();
        let next = r.1;
        r.0[next] = page;
        r.1 = (next + 1) % REMEMBERED;
    });
    Ok(())
}

/// The bytes of the NUL-terminated string at `p`, checked readable page
/// by page: EFAULT for a pointer the kernel would refuse (NULL included),
/// ENAMETOOLONG for one without NUL in its first PATH_MAX bytes.
///
/// # Safety
/// The returned slice borrows the caller's memory: it is valid as long as
/// the caller keeps the string, as for every argument of the call.
pub unsafe fn c_str<'a>(p: *const c_char) -> Result<&'a [u8], c_int> {
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    let start = p as usize;
    let mut at = start;
    while at - start < PATH_MAX {
        readable(at / PAGE)?;
        let piece = (PAGE - at % PAGE).min(PATH_MAX - (at - start));
        let bytes = std::slice::from_raw_parts(at as *const u8, piece);
        if let Some(nul) = bytes.iter().position(|&b| b == 0) {
            return Ok(std::slice::from_raw_parts(p.cast(), at - start + nul));
        }
        at += piece;
    }
    Err(libc::ENAMETOOLONG)
}

/// Whether the `len` bytes at `p` are mapped, page by page: EFAULT for a
/// pointer the kernel would refuse (NULL included). For the structures a
/// call reads and writes back (`struct flock`).
///
/// # Safety
/// Asks the kernel only; reading the bytes afterwards is the caller's.
pub unsafe fn mapped(p: *const u8, len: usize) -> Result<(), c_int> {
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    let start = p as usize;
    let last = start.checked_add(len.max(1) - 1).ok_or(libc::EFAULT)?;
    for page in start / PAGE..=last / PAGE {
        readable(page)?;
    }
    Ok(())
}

/// The `len` bytes at `p`, copied by the kernel (`process_vm_readv` from
/// this process): EFAULT where any of them is unmapped, where a plain copy
/// would crash the program. Where the kernel refuses to copy this way (a
/// sandbox), a plain copy.
///
/// # Safety
/// `p` is the caller's pointer of a `write`-like call.
pub unsafe fn copy_in(p: *const u8, len: usize) -> Result<Vec<u8>, c_int> {
    let mut out = vec![0u8; len];
    match vm_copy(out.as_mut_ptr(), p.cast_mut(), len, false) {
        Err(libc::EPERM | libc::ENOSYS) => {
            std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), len);
            Ok(out)
        }
        r => r.map(|()| out),
    }
}

/// Copies `data` to the caller's `p` through the kernel
/// (`process_vm_writev`): EFAULT where any byte is not writable.
///
/// # Safety
/// `p` is the caller's pointer of a `read`-like call.
pub unsafe fn copy_out(p: *mut u8, data: &[u8]) -> Result<(), c_int> {
    match vm_copy(data.as_ptr().cast_mut(), p, data.len(), true) {
        Err(libc::EPERM | libc::ENOSYS) => {
            std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len());
            Ok(())
        }
        r => r,
    }
}

/// `len` bytes between `local` and the caller's `remote`, in this process,
/// by the kernel; a short transfer goes on from where it stopped.
unsafe fn vm_copy(local: *mut u8, remote: *mut u8, len: usize, out: bool) -> Result<(), c_int> {
    if len > 0 && remote.is_null() {
        return Err(libc::EFAULT);
    }
    let mut done = 0;
    while done < len {
        let l = libc::iovec {
            iov_base: local.add(done).cast(),
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: remote.add(done).cast(),
            iov_len: len - done,
        };
        let n = if out {
            libc::process_vm_writev(libc::getpid(), &l, 1, &r, 1, 0)
        } else {
            libc::process_vm_readv(libc::getpid(), &l, 1, &r, 1, 0)
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(libc::EFAULT),
            _ => return Err(*libc::__errno_location()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_is_read_and_a_bad_pointer_is_efault() {
        let s = c"/labios/dir/file";
        assert_eq!(unsafe { c_str(s.as_ptr()) }, Ok(&b"/labios/dir/file"[..]));
        assert_eq!(
            unsafe { c_str(0xDEAD_C0DE as *const c_char) },
            Err(libc::EFAULT)
        );
        assert_eq!(unsafe { c_str(std::ptr::null()) }, Err(libc::EFAULT));
    }

    #[test]
    fn a_string_ending_just_before_an_unmapped_page_is_read() {
        unsafe {
            let len = 2 * PAGE;
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            libc::munmap(map.cast::<u8>().add(PAGE).cast(), PAGE);
            let end = map.cast::<u8>().add(PAGE);
            let s = end.sub(4);
            s.copy_from(c"abc".as_ptr().cast(), 4);
            assert_eq!(c_str(s.cast()), Ok(&b"abc"[..]));
            // No NUL before the hole: the string runs into unmapped memory.
            s.copy_from(b"abcd".as_ptr(), 4);
            assert_eq!(c_str(s.cast()), Err(libc::EFAULT));
            libc::munmap(map, PAGE);
        }
    }

    #[test]
    fn a_structure_is_mapped_and_a_bad_pointer_is_efault() {
        let l: libc::flock = unsafe { std::mem::zeroed() };
        let at = (&l as *const libc::flock).cast::<u8>();
        assert_eq!(unsafe { mapped(at, std::mem::size_of_val(&l)) }, Ok(()));
        assert_eq!(
            unsafe { mapped(0xDEAD_C0DE as *const u8, 32) },
            Err(libc::EFAULT)
        );
        assert_eq!(unsafe { mapped(std::ptr::null(), 32) }, Err(libc::EFAULT));
    }

    #[test]
    fn buffers_are_copied_and_bad_ones_are_efault() {
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        assert_eq!(
            unsafe { copy_in(data.as_ptr(), data.len()) },
            Ok(data.clone())
        );
        let mut out = vec![0u8; data.len()];
        assert_eq!(unsafe { copy_out(out.as_mut_ptr(), &data) }, Ok(()));
        assert_eq!(out, data);
        let bad = 0xDEAD_C0DE as *mut u8;
        assert_eq!(unsafe { copy_in(bad, 10) }, Err(libc::EFAULT));
        assert_eq!(unsafe { copy_out(bad, &data[..10]) }, Err(libc::EFAULT));
        assert_eq!(unsafe { copy_in(std::ptr::null(), 10) }, Err(libc::EFAULT));
        // Read-only memory is not written.
        let ro = c"read-only".as_ptr().cast_mut().cast::<u8>();
        assert_eq!(unsafe { copy_out(ro, b"x") }, Err(libc::EFAULT));
    }

    #[test]
    fn a_string_past_path_max_is_too_long() {
        let long = vec![b'a'; PATH_MAX + 10]
            .into_iter()
            .chain([0])
            .collect::<Vec<u8>>();
        assert_eq!(
            unsafe { c_str(long.as_ptr().cast()) },
            Err(libc::ENAMETOOLONG)
        );
    }
}
