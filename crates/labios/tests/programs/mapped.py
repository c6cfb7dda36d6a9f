"""Memory-mapped files in the directory argv[1] (issue 12: mmap made git,
SQLite's WAL mode and np.load(mmap_mode='r') fail): a shared writable
mapping written back by msync, munmap and close, a private mapping whose
writes stay private, write-back beside an appending descriptor, and numpy's memmap and np.load(mmap_mode='r')."""
import hashlib
import mmap
import os
import sys

import numpy as np

root = sys.argv[1]
os.makedirs(root, exist_ok=True)
path = os.path.join(root, "mapped.bin")
with open(path, "wb") as f:
    f.write(bytes(range(256)) * 1000)

with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[1000:1005] = b"HELLO"
    m.flush()
    m[200_000:200_004] = b"TAIL"
    m.close()
with open(path, "rb") as f:
    data = f.read()
print("shared", data[998:1007], data[199_999:200_005], len(data))

with open(path, "r+b") as f:
    p = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)
    p[0:4] = b"PRIV"
    print("private sees", bytes(p[0:6]))
    p.close()
with open(path, "rb") as f:
    print("file keeps", f.read(6))

# Page write-back while another descriptor appends: the pages keep their
# place, the appended bytes go to the end.
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    appender = os.open(path, os.O_WRONLY | os.O_APPEND)
    m[0:6] = b"SHARED"
    m.flush()
    os.write(appender, b"END")
    os.close(appender)
    m.close()
with open(path, "rb") as f:
    data = f.read()
print("with an appender", data[:7], data[-4:], len(data))

a = np.arange(300_000, dtype="float64")
np.save(os.path.join(root, "a.npy"), a)
b = np.load(os.path.join(root, "a.npy"), mmap_mode="r")
print("np.load mmap", float(b[123_456]), float(b.sum()))
mm = np.memmap(os.path.join(root, "m.dat"), dtype="int32", mode="w+", shape=(1000, 100))
mm[:] = np.arange(100_000, dtype="int32").reshape(1000, 100)
mm.flush()
del mm
back = np.fromfile(os.path.join(root, "m.dat"), dtype="int32")
print("memmap", int(back.sum()), hashlib.sha256(back.tobytes()).hexdigest()[:16])
