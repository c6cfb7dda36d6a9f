"""An open descriptor keeps naming the file it opened, as POSIX says:
after another process renames that file (or a directory above it), puts a
new file at its path, or removes another of its names, what the descriptor
reads, writes, appends, truncates, changes and reports is the file it
opened, never the new one at its old path. Prints what it sees, for
comparison with a plain directory."""
import os
import subprocess
import sys
import time

root = sys.argv[1]
os.makedirs(root, exist_ok=True)
# The other process may be started through a command (`labios run --`,
# another client of the deployment than the mount this one uses), which
# names the root by another path.
OTHER_CMD = os.environ.get("OTHER_CMD", "").split()
OTHER_ROOT = os.environ.get("OTHER_ROOT", root)


def other(code):
    """Runs `code` in another process (another LABIOS client under
    `labios run`), with `r` the root."""
    prelude = "import os, sys\nr = sys.argv[1]\n"
    subprocess.run(OTHER_CMD + [sys.executable, "-c", prelude + code, OTHER_ROOT], check=True)


def replaced(path, fd):
    """Waits (5 s at most) until `path` names another file than `fd`'s: on
    a mount, another client's change to a name shows once the kernel's
    entry for it expires (`--cache-timeout`), as on NFS."""
    ino = os.fstat(fd).st_ino
    deadline = time.monotonic() + 5
    while os.stat(path).st_ino == ino and time.monotonic() < deadline:
        time.sleep(0.02)


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def show(name):
    path = f"{root}/{name}"
    st = os.stat(path)
    with open(path, "rb") as f:
        print(f"  {name}: {f.read()!r} mode {oct(st.st_mode & 0o777)} links {st.st_nlink}")


# Renamed away, and a new file put at its path.
put(f"{root}/a", b"first file\n")
os.chmod(f"{root}/a", 0o644)
fd = os.open(f"{root}/a", os.O_RDWR)
other("os.rename(f'{r}/a', f'{r}/moved')\nopen(f'{r}/a', 'wb').write(b'second file, longer\\n')")
replaced(f"{root}/a", fd)
print("read after rename:", os.pread(fd, 100, 0))
os.pwrite(fd, b"FIRST", 0)
st = os.fstat(fd)
print("fstat size:", st.st_size, "is the moved file:", st.st_ino == os.stat(f"{root}/moved").st_ino)
print("is not the new file:", st.st_ino != os.stat(f"{root}/a").st_ino)
os.ftruncate(fd, 8)
os.fchmod(fd, 0o600)
os.close(fd)
show("a")
show("moved")

# Appending through a descriptor whose file was renamed.
put(f"{root}/log", b"line 1\n")
fd = os.open(f"{root}/log", os.O_WRONLY | os.O_APPEND)
other("os.rename(f'{r}/log', f'{r}/log.old')\nopen(f'{r}/log', 'wb').write(b'new log\\n')")
replaced(f"{root}/log", fd)
os.write(fd, b"line 2\n")
os.close(fd)
show("log")
show("log.old")

# Another name of the file removed: the descriptor's file lives on.
put(f"{root}/h1", b"linked\n")
os.link(f"{root}/h1", f"{root}/h2")
fd = os.open(f"{root}/h1", os.O_RDWR)
other("os.unlink(f'{r}/h1')\nopen(f'{r}/h1', 'wb').write(b'unrelated\\n')")
replaced(f"{root}/h1", fd)
print("read after unlink of a name:", os.pread(fd, 100, 0), "links:", os.fstat(fd).st_nlink)
os.pwrite(fd, b"L", 0)
os.close(fd)
show("h1")
show("h2")

# The directory above renamed.
os.mkdir(f"{root}/d")
put(f"{root}/d/f", b"in a directory\n")
fd = os.open(f"{root}/d/f", os.O_RDWR)
other("os.rename(f'{r}/d', f'{r}/d2')\nos.mkdir(f'{r}/d')\nopen(f'{r}/d/f', 'wb').write(b'other\\n')")
replaced(f"{root}/d/f", fd)
os.pwrite(fd, b"!", 14)
print("read after the directory moved:", os.pread(fd, 100, 0))
os.close(fd)
show("d/f")
show("d2/f")
