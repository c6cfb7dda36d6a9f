"""Calls given a bad pointer get EFAULT, as the kernel answers, and the
program goes on: the interception library must not crash it (it once did
with SIGSEGV). Paths and a link target are tried (glibc's own fopen crashes on a bad
mode, so that is not), each
inside the tree, and the tree is left as it was. Prints each outcome."""
import ctypes
import errno
import os
import sys

root = sys.argv[1]
os.makedirs(f"{root}/d", exist_ok=True)
libc = ctypes.CDLL(None, use_errno=True)
BAD = ctypes.c_void_p(0xDEADC0DE)
path = f"{root}/d/f".encode()
for name, args in [
    ("rmdir", [BAD]),
    ("unlink", [BAD]),
    ("mkdir", [BAD, ctypes.c_int(0o755)]),
    ("open", [BAD, ctypes.c_int(os.O_RDONLY)]),
    ("chmod", [BAD, ctypes.c_int(0o644)]),
    ("access", [BAD, ctypes.c_int(os.F_OK)]),
    ("rename", [BAD, ctypes.c_char_p(path)]),
    ("symlink", [BAD, ctypes.c_char_p(path)]),
]:
    ctypes.set_errno(0)
    r = getattr(libc, name)(*args)
    print(name, r, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
print(sorted(os.listdir(root)), sorted(os.listdir(f"{root}/d")))

# Data buffers and lock structures of an open file: EFAULT, the file as it
# was, the descriptor still usable.
with open(f"{root}/d/data", "wb") as f:
    f.write(b"0123456789")
fd = os.open(f"{root}/d/data", os.O_RDWR)
n = ctypes.c_size_t(10)
iov = (ctypes.c_void_p * 2)(0xDEADC0DE, 10)
for name, args in [
    ("write", [fd, BAD, n]),
    ("read", [fd, BAD, n]),
    ("pwrite", [fd, BAD, n, ctypes.c_long(0)]),
    ("pread", [fd, BAD, n, ctypes.c_long(0)]),
    ("writev", [fd, ctypes.byref(iov), 1]),
    ("readv", [fd, ctypes.byref(iov), 1]),
    ("writev", [fd, BAD, 1]),
    ("fcntl", [fd, ctypes.c_int(6), BAD]),  # F_SETLK
    ("fcntl", [fd, ctypes.c_int(5), BAD]),  # F_GETLK
]:
    ctypes.set_errno(0)
    r = getattr(libc, name)(*args)
    print(name, r, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
print("position", os.lseek(fd, 0, os.SEEK_CUR), "data", os.pread(fd, 20, 0))
os.close(fd)

# Extended attributes: a bad name, value or list buffer is EFAULT, and
# the attribute is as it was.
data = f"{root}/d/data".encode()
os.setxattr(data, "user.k", b"value")
for name, args in [
    ("getxattr", [data, b"user.k", BAD, n]),
    ("setxattr", [data, BAD, b"v", ctypes.c_size_t(1), 0]),
    ("setxattr", [data, b"user.k", BAD, ctypes.c_size_t(5), 0]),
    ("listxattr", [data, BAD, n]),
    ("removexattr", [data, BAD]),
]:
    ctypes.set_errno(0)
    r = getattr(libc, name)(*args)
    print(name, r, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
print("attribute", os.getxattr(data, "user.k"), sorted(os.listxattr(data)))
