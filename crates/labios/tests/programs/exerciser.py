"""A randomized exerciser of one file: positional writes and reads,
truncates, fallocate (growing, punching holes, zeroing ranges),
copy_file_range within the file, writes through a shared memory map and
stats, each checked against a model of the file's bytes in memory. Sizes
and offsets cluster around the page, the 64 KiB small-write threshold and
the 1 MiB label. A seed replays the same operations.

Usage: exerciser.py SEED COUNT PATH [mmap]

Prints how many operations of each kind ran and the final digest; on the
first disagreement it prints the seed, the operation's number and what
differed, and exits 1."""
import collections
import ctypes
import hashlib
import mmap
import os
import random
import sys

seed, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
use_mmap = sys.argv[4:5] == ["mmap"]
rng = random.Random(seed)
libc = ctypes.CDLL(None, use_errno=True)
PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
ZERO, KEEP = 0x10, 0x01
LIMIT = 3 << 20
model = bytearray()
done = collections.Counter()
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)


def fail(n, what):
    print(f"seed {seed} operation {n}: {what}")
    sys.exit(1)


def length():
    r = rng.random()
    edges = [0, 1, 4095, 4096, 4097, 65535, 65536, 65537, (1 << 20) - 1, 1 << 20, (1 << 20) + 1]
    if r < 0.1:
        return rng.choice(edges)
    if r < 0.8:
        return rng.randint(1, 4096)
    if r < 0.98:
        return rng.randint(1, 65536)
    return rng.randint(1, 1_500_000)


def offset():
    size = len(model)
    r = rng.random()
    if r < 0.1:
        return size
    if r < 0.2:
        return rng.choice([0, 4096, 65536, 1 << 20, (1 << 20) - 1]) + rng.randint(0, 2)
    if r < 0.3:
        return size + rng.randint(1, 100_000)
    return rng.randint(0, max(size, 1))


def first_difference(got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"first difference at byte {i}: got {a} want {b}"
    return f"lengths differ: got {len(got)} want {len(want)}"


def fallocate(mode, off, n):
    if libc.fallocate(fd, mode, ctypes.c_int64(off), ctypes.c_int64(n)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def check_read(n, off, want_len):
    got = os.pread(fd, want_len, off)
    want = bytes(model[off : off + want_len])
    if got != want:
        fail(n, f"pread({want_len}, {off}): {first_difference(got, want)}")


for n in range(count):
    r = rng.random()
    if r < 0.35:
        off, k = offset(), length()
        if off + k > LIMIT:
            continue
        data = rng.randbytes(k)
        if os.pwrite(fd, data, off) != k:
            fail(n, "short write")
        # An empty write changes nothing, wherever it is.
        if k and len(model) < off + k:
            model.extend(bytes(off + k - len(model)))
        model[off : off + k] = data
        done["write"] += 1
    elif r < 0.65:
        check_read(n, offset(), length())
        done["read"] += 1
    elif r < 0.70:
        size = rng.choice([0, rng.randint(0, max(len(model), 1)), len(model) + rng.randint(1, 70_000)])
        if size > LIMIT:
            continue
        os.ftruncate(fd, size)
        model[:] = model[:size] + bytes(max(0, size - len(model)))
        done["truncate"] += 1
    elif r < 0.78:
        off, k = offset(), max(1, length())
        if off + k > LIMIT:
            continue
        how = rng.choice(["extend", "punch", "zero", "zero-keep"])
        size = len(model)
        if how == "extend":
            fallocate(0, off, k)
            model.extend(bytes(max(0, off + k - size)))
        elif how == "punch" or how == "zero-keep":
            fallocate(PUNCH if how == "punch" else ZERO | KEEP, off, k)
            end = min(off + k, size)
            if off < end:
                model[off:end] = bytes(end - off)
        else:
            fallocate(ZERO, off, k)
            model.extend(bytes(max(0, off + k - size)))
            model[off : off + k] = bytes(k)
        done["fallocate " + how] += 1
    elif r < 0.83:
        size = len(model)
        if size == 0:
            continue
        k = rng.randint(1, min(size, 200_000))
        src = rng.randint(0, size - 1)
        dst = rng.randint(0, size + 10_000)
        if src < dst + k and dst < src + k or dst + k > LIMIT:
            continue
        got = os.copy_file_range(fd, fd, k, src, dst)
        want = min(k, size - src)
        if got != want:
            fail(n, f"copy_file_range({k}, {src}, {dst}) copied {got}, expected {want}")
        chunk = bytes(model[src : src + want])
        if want and len(model) < dst + want:
            model.extend(bytes(dst + want - len(model)))
        model[dst : dst + want] = chunk
        done["copy_file_range"] += 1
    elif r < 0.90 and use_mmap:
        size = len(model)
        if size == 0:
            continue
        m = mmap.mmap(fd, size)
        off = rng.randint(0, size - 1)
        k = rng.randint(1, min(size - off, 100_000))
        data = rng.randbytes(k)
        m[off : off + k] = data
        model[off : off + k] = data
        if rng.random() < 0.5:
            m.flush()
        # What the mapping shows is the file's bytes.
        peek = rng.randint(0, size - 1)
        if m[peek : peek + 64] != bytes(model[peek : peek + 64]):
            fail(n, f"the mapping at {peek} differs from the file")
        m.close()
        done["mmap write"] += 1
    else:
        st = os.fstat(fd).st_size
        if st != len(model):
            fail(n, f"fstat size {st}, the model has {len(model)}")
        done["stat"] += 1
    if n % 5000 == 4999:
        check_read(n, 0, len(model) + 10)

os.fsync(fd)
check_read(count, 0, len(model) + 10)
os.close(fd)
with open(path, "rb") as f:
    whole = f.read()
if whole != bytes(model):
    fail(count, f"reopened: {first_difference(whole, bytes(model))}")
for kind in sorted(done):
    print(kind, done[kind])
print("size", len(model), "digest", hashlib.sha256(model).hexdigest()[:16])
