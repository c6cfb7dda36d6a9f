"""copy_file_range(2) as POSIX programs use it: whole files, ranges at
given offsets and at the descriptors' positions, a source with holes, a
copy past the source's end (short count, then 0), copies within one file,
and the errors the kernel gives (overlap, append-only target, flags,
a descriptor opened for the wrong direction). Prints what it sees; the
same on a plain directory."""
import ctypes
import errno
import hashlib
import os
import subprocess
import sys

root = sys.argv[1]
os.makedirs(root, exist_ok=True)


def digest(path):
    with open(path, "rb") as f:
        data = f.read()
    return f"{len(data)} {hashlib.md5(data).hexdigest()[:12]}"


def attempt(what, f):
    try:
        print(what, f())
    except OSError as e:
        print(what, errno.errorcode[e.errno])


src = f"{root}/src"
with open(src, "wb") as f:
    f.write(bytes(range(256)) * 5000)  # 1,280,000 bytes: several labels
    f.seek(3_000_000)
    f.write(b"after a hole")
print("source", digest(src))

# Whole file, looping on short counts as cp does.
fi = os.open(src, os.O_RDONLY)
fo = os.open(f"{root}/whole", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
total = 0
while True:
    n = os.copy_file_range(fi, fo, 1 << 30)
    if n == 0:
        break
    total += n
print("whole copied", total, digest(f"{root}/whole"))
print("positions", os.lseek(fi, 0, os.SEEK_CUR), os.lseek(fo, 0, os.SEEK_CUR))
os.close(fo)

# Ranges at given offsets leave the positions alone.
fo = os.open(f"{root}/ranges", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fo, b"z" * 100)
attempt("at offsets", lambda: os.copy_file_range(fi, fo, 5000, 1_279_000, 50))
attempt("into the hole", lambda: os.copy_file_range(fi, fo, 10_000, 2_000_000, 200_000))
attempt("past the end", lambda: os.copy_file_range(fi, fo, 100, 3_000_005, 300_000))
attempt("at the end", lambda: os.copy_file_range(fi, fo, 100, 3_000_012, 0))
print("positions", os.lseek(fi, 0, os.SEEK_CUR), os.lseek(fo, 0, os.SEEK_CUR))
print("ranges", digest(f"{root}/ranges"))

# Within one file.
attempt("same file apart", lambda: os.copy_file_range(fo, fo, 50, 0, 400_000))
attempt("same file overlapping", lambda: os.copy_file_range(fo, fo, 50, 10, 30))
print("ranges", digest(f"{root}/ranges"))

# Errors.
app = os.open(f"{root}/ranges", os.O_WRONLY | os.O_APPEND)
attempt("append-only target", lambda: os.copy_file_range(fi, app, 10, 0, 0))
libc = ctypes.CDLL(None, use_errno=True)


def with_flags():
    n = libc.copy_file_range(fi, None, fo, None, ctypes.c_size_t(10), ctypes.c_uint(1))
    if n < 0:
        raise OSError(ctypes.get_errno(), "copy_file_range")
    return n


attempt("flags", with_flags)
attempt("from a write-only descriptor", lambda: os.copy_file_range(app, fo, 10, 0, 0))
attempt("to a read-only descriptor", lambda: os.copy_file_range(fo, fi, 10, 0, 0))
for fd in (fi, fo, app):
    os.close(fd)
print("ranges", digest(f"{root}/ranges"))

# cp copies with copy_file_range first.
subprocess.run(["cp", src, f"{root}/by-cp"], check=True)
print("cp", digest(f"{root}/by-cp"))
