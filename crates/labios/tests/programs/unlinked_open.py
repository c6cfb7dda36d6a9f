"""A file removed while open lives on, as POSIX says, until its last
descriptor closes: it reads and writes through the descriptor, fstat
shows no link, and its path is free for a new file. Whether this process
removed it, another process did, or a rename replaced it. Prints what it
sees, for comparison with a plain directory."""
import os
import subprocess
import sys
import time

root = sys.argv[1]
os.makedirs(root, exist_ok=True)
# As in open_files.py: the other process may be another client.
OTHER_CMD = os.environ.get("OTHER_CMD", "").split()
OTHER_ROOT = os.environ.get("OTHER_ROOT", root)


def other(code):
    prelude = "import os, sys\nr = sys.argv[1]\n"
    subprocess.run(OTHER_CMD + [sys.executable, "-c", prelude + code, OTHER_ROOT], check=True)


def within_5s(condition):
    """Waits (5 s at most) for `condition`: on a mount, another client's
    change shows once the kernel's cached entry and attributes expire
    (`--cache-timeout`), as on NFS."""
    deadline = time.monotonic() + 5
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


data = bytes(range(256)) * 4096

# Removed by its own process: 1 MiB, read, extended and dup'ed after.
own = f"{root}/own"
fd = os.open(own, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, data)
os.unlink(own)
print("exists after unlink:", os.path.exists(own))
st = os.fstat(fd)
print("fstat after unlink: links", st.st_nlink, "size", st.st_size)
print("reads back:", os.pread(fd, len(data), 0) == data)
os.pwrite(fd, b"tail", len(data))
print("written after unlink:", os.fstat(fd).st_size, os.pread(fd, 4, len(data)))
put(own, b"a new file\n")
print("a new file at the path:", open(own, "rb").read(), "the old one:", os.pread(fd, 4, 0))
fd2 = os.dup(fd)
os.close(fd)
print("through a dup after close:", os.pread(fd2, 4, 256))
os.close(fd2)
os.unlink(own)

# Removed by another process.
theirs = f"{root}/theirs"
put(theirs, b"kept while open\n")
fd = os.open(theirs, os.O_RDWR)
other("os.unlink(f'{r}/theirs')")
within_5s(lambda: not os.path.exists(theirs))
within_5s(lambda: os.fstat(fd).st_nlink == 0)
os.pwrite(fd, b"KEPT", 0)
print("after their unlink: links", os.fstat(fd).st_nlink, os.pread(fd, 100, 0))
os.close(fd)

# Replaced by another process's rename.
a, b = f"{root}/a", f"{root}/b"
put(a, b"old a\n")
put(b, b"new b\n")
fd = os.open(a, os.O_RDONLY)
ino = os.fstat(fd).st_ino
other("os.rename(f'{r}/b', f'{r}/a')")
within_5s(lambda: os.stat(a).st_ino != ino)
within_5s(lambda: os.fstat(fd).st_nlink == 0)
print("after a rename over it: links", os.fstat(fd).st_nlink, os.pread(fd, 100, 0))
print("the path:", open(a, "rb").read())
os.close(fd)
os.unlink(a)
# Inherited by a forked child that reads it after the parent removed the
# file and closed its own descriptor.
shared = f"{root}/shared"
put(shared, b"inherited\n")
fd = os.open(shared, os.O_RDONLY)
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(go_w)
    os.read(go_r, 1)
    print("the child reads:", os.pread(fd, 100, 0), "links", os.fstat(fd).st_nlink, flush=True)
    os._exit(0)
os.close(go_r)
os.unlink(shared)
os.close(fd)
os.write(go_w, b"x")
os.waitpid(pid, 0)
print("left:", sorted(os.listdir(root)))
