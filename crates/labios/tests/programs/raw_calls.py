"""Calls that reach the kernel without passing through the C library's
functions, on a LABIOS descriptor under `labios run` (issue 12, item 3):
each fails with an error, never reading the descriptor's placeholder as if
it were the file; preadv2/pwritev2 are intercepted; mmap fails with ENODEV
and a word on stderr.

  raw_calls.py DIR
"""
import ctypes
import errno
import mmap
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_read, SYS_write, SYS_pread64 = 0, 1, 17


def raw(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *args)
    return errno.errorcode[ctypes.get_errno()] if r < 0 else f"returned {r}"


root = sys.argv[1]
os.makedirs(root, exist_ok=True)
fd = os.open(os.path.join(root, "raw.dat"), os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"labios bytes")
os.lseek(fd, 0, os.SEEK_SET)
buf = ctypes.create_string_buffer(64)
print("raw read", raw(SYS_read, fd, buf, 64))
print("raw pread", raw(SYS_pread64, fd, buf, 64, ctypes.c_long(0)))
print("raw write", raw(SYS_write, fd, b"XX", 2))
print("position", os.lseek(fd, 0, os.SEEK_CUR))

print("pwritev2", os.pwritev(fd, [b"LA", b"B"], 0, os.RWF_DSYNC))
got = bytearray(12)
print("preadv2", os.preadv(fd, [got], 0, os.RWF_HIPRI), bytes(got))
try:
    os.preadv(fd, [got], 0, os.RWF_NOWAIT)
except OSError as e:
    print("nowait", errno.errorcode[e.errno])
os.lseek(fd, 4, os.SEEK_SET)
part = bytearray(3)
print("preadv2 at the position", os.preadv(fd, [part], -1, 0), bytes(part), os.lseek(fd, 0, os.SEEK_CUR))
try:
    mmap.mmap(fd, 0)
except OSError as e:
    print("mmap", errno.errorcode[e.errno])
os.close(fd)
with open(os.path.join(root, "raw.dat"), "rb") as f:
    print("file", f.read())
