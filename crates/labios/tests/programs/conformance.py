"""POSIX conformance, call by call: for open, creat, mkdir, rmdir, unlink,
rename (and Linux's renameat2), link, symlink, readlink, chmod, chown, lchown, truncate,
ftruncate, utimensat, mknod, mkfifo, fallocate, flock and fcntl, the
effects of a success (mode, owner, times, link counts, the parent's times)
and the errors the specification lists. `conformance.py ROOT` prints one
line per check; run as root and as an unprivileged user, on a plain
directory and on LABIOS, the outputs must match.

Times are compared, not printed: a time is first set far in the past, and
the check says whether the call moved it (so that a coarse clock cannot
make a moved time look unmoved)."""
import ctypes
import errno
import fcntl
import os
import stat
import sys
import time

root = sys.argv[1]
os.makedirs(root, exist_ok=True)
os.umask(0o022)
ME = os.geteuid()
PAST = 1_000_000_000_000_000_000  # 2001-09-09, in nanoseconds
LONG = "n" * 256
libc = ctypes.CDLL(None, use_errno=True)


def outcome(f, *args, **kw):
    try:
        r = f(*args, **kw)
        return "ok" if r is None or isinstance(r, int) else f"ok {r!r}"
    except OSError as e:
        return errno.errorcode[e.errno]


def check(call, what, result):
    print(f"{call}: {what}: {result}")


def fresh(call):
    """A new directory for one call's checks."""
    d = f"{root}/{call}"
    os.mkdir(d)
    return d


def put(path, data=b"data\n", mode=0o644):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    os.write(fd, data)
    os.close(fd)


AGED = {}


def aged(*paths):
    """Sets the mtime of `paths` (not following links) far in the past and
    notes their ctime (which that sets to now), then lets the clock pass
    the file system's time granularity (ext4's is a jiffy), so that a
    change right after cannot leave a ctime that looks unmoved."""
    for p in paths:
        os.utime(p, ns=(PAST, PAST), follow_symlinks=False)
        AGED[p] = os.stat(p, follow_symlinks=False).st_ctime_ns
    time.sleep(0.02)


def moved(path):
    """Which times of `path` the call since `aged` moved: m(time), c(time)."""
    st = os.stat(path, follow_symlinks=False)
    m = "m" if st.st_mtime_ns != PAST else ""
    c = "c" if st.st_ctime_ns != AGED[path] else ""
    return m + c or "-"


def desc(path, follow=False):
    """Kind, mode, link count, size and whether the owner is this user."""
    st = os.stat(path, follow_symlinks=follow)
    kind = stat.S_IFMT(st.st_mode)
    kinds = {
        stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link",
        stat.S_IFIFO: "fifo", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk",
    }
    size = st.st_size if kind in (stat.S_IFREG, stat.S_IFLNK) else "-"
    mine = "mine" if (st.st_uid, st.st_gid) == (ME, os.getegid()) else f"{st.st_uid}:{st.st_gid}"
    return f"{kinds.get(kind, kind)} {oct(stat.S_IMODE(st.st_mode))} links {st.st_nlink} size {size} {mine}"


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- open, creat ---------------------------------------------------------
d = fresh("open")
aged(d)
check("open", "O_CREAT 0640", outcome(lambda: os.close(os.open(f"{d}/new", os.O_CREAT | os.O_WRONLY, 0o640))))
check("open", "made", desc(f"{d}/new"))
check("open", "parent times", moved(d))
put(f"{d}/f", b"0123456789")
check("open", "O_CREAT|O_EXCL of a file", outcome(os.open, f"{d}/f", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
check("open", "missing", outcome(os.open, f"{d}/missing", os.O_RDONLY))
check("open", "O_CREAT in a missing directory", outcome(os.open, f"{d}/no/f", os.O_CREAT | os.O_WRONLY))
check("open", "through a file", outcome(os.open, f"{d}/f/x", os.O_RDONLY))
check("open", "O_CREAT through a file", outcome(os.open, f"{d}/f/x", os.O_CREAT | os.O_WRONLY))
check("open", "a directory to write", outcome(os.open, d, os.O_WRONLY))
check("open", "O_DIRECTORY of a file", outcome(os.open, f"{d}/f", os.O_RDONLY | os.O_DIRECTORY))
check("open", "a 256-byte name", outcome(os.open, f"{d}/{LONG}", os.O_CREAT | os.O_WRONLY))
check("open", "a path past PATH_MAX", outcome(os.open, f"{d}/" + "a/" * 2100 + "f", os.O_RDONLY))
check("open", "empty path", outcome(os.open, "", os.O_RDONLY))
os.symlink("f", f"{d}/link")
os.symlink("loop1", f"{d}/loop2")
os.symlink("loop2", f"{d}/loop1")
check("open", "O_NOFOLLOW of a link", outcome(os.open, f"{d}/link", os.O_RDONLY | os.O_NOFOLLOW))
check("open", "a loop of links", outcome(os.open, f"{d}/loop1", os.O_RDONLY))
check("open", "O_CREAT|O_EXCL of a dangling link", outcome(os.open, f"{d}/loop1", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
aged(f"{d}/f")
fd = os.open(f"{d}/f", os.O_WRONLY | os.O_TRUNC)
os.close(fd)
check("open", "O_TRUNC", f"{desc(f'{d}/f')} times {moved(f'{d}/f')}")
put(f"{d}/ro", mode=0o444)
check("open", "O_RDONLY of a 0444 file", outcome(lambda: os.close(os.open(f"{d}/ro", os.O_RDONLY))))
check("open", "O_WRONLY of a 0444 file", outcome(os.open, f"{d}/ro", os.O_WRONLY))
put(f"{d}/c", b"old contents")
aged(d)
check("creat", "existing", outcome(lambda: os.close(os.open(f"{d}/c", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600))))
check("creat", "truncated, mode kept", desc(f"{d}/c"))
check("creat", "parent times", moved(d))

# ---- mkdir ---------------------------------------------------------------
d = fresh("mkdir")
aged(d)
check("mkdir", "0750", outcome(os.mkdir, f"{d}/sub", 0o750))
check("mkdir", "made", desc(f"{d}/sub"))
check("mkdir", "parent", f"{desc(d)} times {moved(d)}")
put(f"{d}/f")
os.symlink("nowhere", f"{d}/dangling")
check("mkdir", "existing directory", outcome(os.mkdir, f"{d}/sub"))
check("mkdir", "existing file", outcome(os.mkdir, f"{d}/f"))
check("mkdir", "a dangling link", outcome(os.mkdir, f"{d}/dangling"))
check("mkdir", "missing parent", outcome(os.mkdir, f"{d}/no/sub"))
check("mkdir", "through a file", outcome(os.mkdir, f"{d}/f/sub"))
check("mkdir", "a 256-byte name", outcome(os.mkdir, f"{d}/{LONG}"))
check("mkdir", "a 255-byte name", outcome(os.mkdir, f"{d}/{LONG[:255]}"))

# ---- rmdir ---------------------------------------------------------------
d = fresh("rmdir")
os.mkdir(f"{d}/empty")
os.mkdir(f"{d}/full")
put(f"{d}/full/f")
put(f"{d}/f")
aged(d)
check("rmdir", "empty", outcome(os.rmdir, f"{d}/empty"))
check("rmdir", "parent", f"{desc(d)} times {moved(d)}")
check("rmdir", "not empty", outcome(os.rmdir, f"{d}/full"))
check("rmdir", "a file", outcome(os.rmdir, f"{d}/f"))
check("rmdir", "missing", outcome(os.rmdir, f"{d}/missing"))
check("rmdir", "dir/.", outcome(os.rmdir, f"{d}/full/."))
check("rmdir", "dir/..", outcome(os.rmdir, f"{d}/full/.."))
check("rmdir", "through a file", outcome(os.rmdir, f"{d}/f/x"))
check("rmdir", "still there", sorted(os.listdir(d)))

# ---- unlink --------------------------------------------------------------
d = fresh("unlink")
put(f"{d}/a")
os.link(f"{d}/a", f"{d}/b")
os.symlink("a", f"{d}/s")
os.mkdir(f"{d}/sub")
aged(d, f"{d}/a")
check("unlink", "a name of two", outcome(os.unlink, f"{d}/b"))
check("unlink", "the other name", f"{desc(f'{d}/a')} times {moved(f'{d}/a')}")
check("unlink", "parent times", moved(d))
check("unlink", "a link", outcome(os.unlink, f"{d}/s"))
check("unlink", "its target stays", desc(f"{d}/a"))
check("unlink", "a directory", outcome(os.unlink, f"{d}/sub"))
check("unlink", "missing", outcome(os.unlink, f"{d}/missing"))
check("unlink", "through a file", outcome(os.unlink, f"{d}/a/x"))
check("unlink", "a 256-byte name", outcome(os.unlink, f"{d}/{LONG}"))

# ---- rename --------------------------------------------------------------
d = fresh("rename")
put(f"{d}/a", b"a's bytes")
put(f"{d}/b", b"b's bytes")
os.mkdir(f"{d}/dir")
os.mkdir(f"{d}/empty")
os.mkdir(f"{d}/full")
put(f"{d}/full/f")
os.mkdir(f"{d}/dir/inner")
os.link(f"{d}/a", f"{d}/a2")
aged(d, f"{d}/a")
check("rename", "a file over a file", outcome(os.rename, f"{d}/b", f"{d}/a2"))
check("rename", "the replaced file's other name", f"{desc(f'{d}/a')} {read(f'{d}/a')!r}")
check("rename", "the moved file", read(f"{d}/a2"))
check("rename", "parent times", moved(d))
put(f"{d}/b", b"b again")
os.link(f"{d}/b", f"{d}/b2")
check("rename", "two names of one file", outcome(os.rename, f"{d}/b", f"{d}/b2"))
check("rename", "both stay", f"{desc(f'{d}/b')} {desc(f'{d}/b2')}")
check("rename", "a file onto itself", outcome(os.rename, f"{d}/a", f"{d}/a"))
check("rename", "a file over a directory", outcome(os.rename, f"{d}/a", f"{d}/empty"))
check("rename", "a directory over a file", outcome(os.rename, f"{d}/empty", f"{d}/a"))
check("rename", "a directory over a non-empty one", outcome(os.rename, f"{d}/empty", f"{d}/full"))
check("rename", "a directory into itself", outcome(os.rename, f"{d}/dir", f"{d}/dir/inner/x"))
check("rename", "a directory over its child", outcome(os.rename, f"{d}/dir", f"{d}/dir/inner"))
check("rename", "a missing name", outcome(os.rename, f"{d}/missing", f"{d}/x"))
check("rename", "into a missing directory", outcome(os.rename, f"{d}/a", f"{d}/no/x"))
check("rename", "through a file", outcome(os.rename, f"{d}/a", f"{d}/b/x"))
check("rename", "dir/. away", outcome(os.rename, f"{d}/dir/.", f"{d}/x"))
check("rename", "to a 256-byte name", outcome(os.rename, f"{d}/a", f"{d}/{LONG}"))
aged(f"{d}/dir", f"{d}/empty")
check("rename", "a directory over an empty one", outcome(os.rename, f"{d}/dir", f"{d}/empty"))
check("rename", "the moved directory", f"{desc(f'{d}/empty')} {sorted(os.listdir(f'{d}/empty'))}")
check("rename", "a directory into another", outcome(os.rename, f"{d}/empty/inner", f"{d}/full/inner"))
check("rename", "link counts after", f"{desc(f'{d}/empty')} / {desc(f'{d}/full')}")
check("rename", "left", sorted(os.listdir(d)))

# ---- renameat2: RENAME_NOREPLACE, RENAME_EXCHANGE -------------------------
NOREPLACE, EXCHANGE, AT_FDCWD = 1, 2, -100


def renameat2(a, b, flags):
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


d = fresh("renameat2")
os.mkdir(f"{d}/x")
os.mkdir(f"{d}/y")
put(f"{d}/x/f", b"f's bytes")
put(f"{d}/x/g", b"g's bytes")
os.link(f"{d}/x/f", f"{d}/x/f2")
os.mkdir(f"{d}/y/d")
put(f"{d}/y/d/inner", b"inner")
os.mkdir(f"{d}/y/d/sub")
check("renameat2", "no-replace over a file", outcome(renameat2, f"{d}/x/g", f"{d}/x/f", NOREPLACE))
check("renameat2", "no-replace over another name", outcome(renameat2, f"{d}/x/f", f"{d}/x/f2", NOREPLACE))
check("renameat2", "no-replace over a directory", outcome(renameat2, f"{d}/x/g", f"{d}/y/d", NOREPLACE))
check("renameat2", "no-replace to a new name", outcome(renameat2, f"{d}/x/g", f"{d}/x/h", NOREPLACE))
check("renameat2", "moved", f"{read(f'{d}/x/h')!r} {sorted(os.listdir(f'{d}/x'))}")
check("renameat2", "both flags", outcome(renameat2, f"{d}/x/h", f"{d}/x/f", NOREPLACE | EXCHANGE))
check("renameat2", "exchange with a missing name", outcome(renameat2, f"{d}/x/h", f"{d}/x/none", EXCHANGE))
check("renameat2", "exchange a missing name", outcome(renameat2, f"{d}/x/none", f"{d}/x/h", EXCHANGE))
check("renameat2", "exchange a directory with its child", outcome(renameat2, f"{d}/y", f"{d}/y/d", EXCHANGE))
check("renameat2", "exchange a child with its directory", outcome(renameat2, f"{d}/y/d", f"{d}/y", EXCHANGE))
aged(f"{d}/x", f"{d}/y", f"{d}/x/h", f"{d}/y/d")
check("renameat2", "exchange a file and a directory", outcome(renameat2, f"{d}/x/h", f"{d}/y/d", EXCHANGE))
check("renameat2", "the directory at the file's name", f"{desc(f'{d}/x/h')} {sorted(os.listdir(f'{d}/x/h'))}")
check("renameat2", "its tree with it", read(f"{d}/x/h/inner"))
check("renameat2", "the file at the directory's name", f"{desc(f'{d}/y/d')} {read(f'{d}/y/d')!r}")
check("renameat2", "parents", f"{desc(f'{d}/x')} {moved(f'{d}/x')} / {desc(f'{d}/y')} {moved(f'{d}/y')}")
check("renameat2", "exchanged times", f"{moved(f'{d}/x/h')} {moved(f'{d}/y/d')}")
check("renameat2", "two names of one file", outcome(renameat2, f"{d}/x/f", f"{d}/x/f2", EXCHANGE))
check("renameat2", "both stay", f"{desc(f'{d}/x/f')} {desc(f'{d}/x/f2')}")
check("renameat2", "exchange two files", outcome(renameat2, f"{d}/x/f", f"{d}/y/d", EXCHANGE))
check("renameat2", "swapped", f"{read(f'{d}/x/f')!r} {read(f'{d}/y/d')!r} {desc(f'{d}/x/f2')}")
check("renameat2", "left", f"{sorted(os.listdir(f'{d}/x'))} {sorted(os.listdir(f'{d}/y'))}")

# ---- link ----------------------------------------------------------------
d = fresh("link")
put(f"{d}/f")
os.mkdir(f"{d}/sub")
os.symlink("f", f"{d}/s")
aged(d, f"{d}/f")
check("link", "a file", outcome(os.link, f"{d}/f", f"{d}/g"))
check("link", "the file", f"{desc(f'{d}/g')} times {moved(f'{d}/f')}")
check("link", "parent times", moved(d))
check("link", "onto a taken name", outcome(os.link, f"{d}/f", f"{d}/g"))
check("link", "a directory", outcome(os.link, f"{d}/sub", f"{d}/sub2"))
check("link", "a missing file", outcome(os.link, f"{d}/missing", f"{d}/x"))
check("link", "into a missing directory", outcome(os.link, f"{d}/f", f"{d}/no/x"))
check("link", "through a file", outcome(os.link, f"{d}/f", f"{d}/f/x"))
check("link", "a symbolic link itself", outcome(os.link, f"{d}/s", f"{d}/s2", follow_symlinks=False))
check("link", "the link's name", desc(f"{d}/s2"))
check("link", "to a 256-byte name", outcome(os.link, f"{d}/f", f"{d}/{LONG}"))

# ---- symlink, readlink ---------------------------------------------------
d = fresh("symlink")
put(f"{d}/f")
aged(d)
check("symlink", "made", outcome(os.symlink, "f", f"{d}/s"))
check("symlink", "itself", desc(f"{d}/s"))
check("symlink", "what it leads to", desc(f"{d}/s", follow=True))
check("symlink", "parent times", moved(d))
check("symlink", "onto a taken name", outcome(os.symlink, "x", f"{d}/f"))
check("symlink", "empty target", outcome(os.symlink, "", f"{d}/e"))
check("symlink", "into a missing directory", outcome(os.symlink, "f", f"{d}/no/s"))
check("symlink", "a 256-byte name", outcome(os.symlink, "f", f"{d}/{LONG}"))
check("symlink", "a 4095-byte target", outcome(os.symlink, "t" * 4095, f"{d}/longest"))
check("symlink", "a 4096-byte target", outcome(os.symlink, "t" * 4096, f"{d}/too-long"))
check("readlink", "a link", outcome(os.readlink, f"{d}/s"))
check("readlink", "a 4095-byte target", outcome(lambda: len(os.readlink(f"{d}/longest"))))
check("readlink", "a file", outcome(os.readlink, f"{d}/f"))
check("readlink", "missing", outcome(os.readlink, f"{d}/missing"))
buf = ctypes.create_string_buffer(4)
n = libc.readlink(f"{d}/longest".encode(), buf, 4)
check("readlink", "into 4 bytes", f"{n} {buf.raw!r}")

# ---- chmod, chown, lchown ------------------------------------------------
d = fresh("chmod")
put(f"{d}/f")
os.symlink("f", f"{d}/s")
aged(f"{d}/f")
check("chmod", "0600", outcome(os.chmod, f"{d}/f", 0o600))
check("chmod", "the file", f"{desc(f'{d}/f')} times {moved(f'{d}/f')}")
check("chmod", "through a link", outcome(os.chmod, f"{d}/s", 0o640))
check("chmod", "followed", desc(f"{d}/f"))
check("chmod", "07777", outcome(os.chmod, f"{d}/f", 0o7777))
check("chmod", "kept", desc(f"{d}/f"))
check("chmod", "missing", outcome(os.chmod, f"{d}/missing", 0o600))
check("chmod", "through a file", outcome(os.chmod, f"{d}/f/x", 0o600))
os.mkdir(f"{d}/sub")
check("chmod", "a directory 01777", outcome(os.chmod, f"{d}/sub", 0o1777))
check("chmod", "the directory", desc(f"{d}/sub"))
d = fresh("chown")
put(f"{d}/f")
os.chmod(f"{d}/f", 0o6755)
os.symlink("f", f"{d}/s")
aged(f"{d}/f")
check("chown", "to 1234:5678", outcome(os.chown, f"{d}/f", 1234, 5678))
check("chown", "the file", f"{desc(f'{d}/f')} times {moved(f'{d}/f')}")
put(f"{d}/g")
os.chmod(f"{d}/g", 0o6755)
check("chown", "to myself", outcome(os.chown, f"{d}/g", ME, -1))
check("chown", "set-id bits after", desc(f"{d}/g"))
check("chown", "-1, -1", outcome(os.chown, f"{d}/g", -1, -1))
check("chown", "to my group", outcome(os.chown, f"{d}/g", -1, os.getegid()))
check("chown", "to root's group", outcome(os.chown, f"{d}/g", -1, 0))
check("chown", "missing", outcome(os.chown, f"{d}/missing", ME, -1))
put(f"{d}/t")
os.symlink("t", f"{d}/lt")
check("lchown", "a link to 1234:5678", outcome(os.lchown, f"{d}/lt", 1234, 5678))
check("lchown", "the link", desc(f"{d}/lt"))
check("lchown", "its target", desc(f"{d}/t"))

# ---- truncate, ftruncate -------------------------------------------------
d = fresh("truncate")
put(f"{d}/f", b"0123456789")
aged(f"{d}/f")
check("truncate", "to 4", outcome(os.truncate, f"{d}/f", 4))
check("truncate", "the file", f"{desc(f'{d}/f')} {read(f'{d}/f')!r} times {moved(f'{d}/f')}")
check("truncate", "to 8", outcome(os.truncate, f"{d}/f", 8))
check("truncate", "extended", read(f"{d}/f"))
check("truncate", "negative", outcome(os.truncate, f"{d}/f", -1))
check("truncate", "a directory", outcome(os.truncate, d, 0))
check("truncate", "missing", outcome(os.truncate, f"{d}/missing", 0))
check("truncate", "through a file", outcome(os.truncate, f"{d}/f/x", 0))
put(f"{d}/ro", mode=0o444)
check("truncate", "a 0444 file", outcome(os.truncate, f"{d}/ro", 0))
fd = os.open(f"{d}/f", os.O_RDWR)
check("ftruncate", "to 2", outcome(os.ftruncate, fd, 2))
check("ftruncate", "negative", outcome(os.ftruncate, fd, -1))
os.close(fd)
check("ftruncate", "the file", read(f"{d}/f"))
fd = os.open(f"{d}/f", os.O_RDONLY)
check("ftruncate", "read-only descriptor", outcome(os.ftruncate, fd, 0))
os.close(fd)
fd = os.open(d, os.O_RDONLY)
check("ftruncate", "a directory", outcome(os.ftruncate, fd, 0))
os.close(fd)

# ---- utimensat -----------------------------------------------------------
d = fresh("utimensat")
put(f"{d}/f")
os.symlink("f", f"{d}/s")
check("utimensat", "given", outcome(os.utime, f"{d}/f", ns=(5_000_000_123, 7_000_000_456)))
st = os.stat(f"{d}/f")
check("utimensat", "times", f"{st.st_atime_ns} {st.st_mtime_ns}")


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


UTIME_NOW, UTIME_OMIT, AT_FDCWD = (1 << 30) - 1, (1 << 30) - 2, -100


def utimensat(path, a, m, flags=0):
    times = (Timespec * 2)(a, m)
    if libc.utimensat(AT_FDCWD, path.encode(), times, flags) != 0:
        raise OSError(ctypes.get_errno(), "utimensat")


check("utimensat", "omit atime", outcome(utimensat, f"{d}/f", Timespec(0, UTIME_OMIT), Timespec(9, 0)))
st = os.stat(f"{d}/f")
check("utimensat", "times", f"{st.st_atime_ns} {st.st_mtime_ns}")
before = os.stat(f"{d}/f").st_mtime_ns
check("utimensat", "now", outcome(utimensat, f"{d}/f", Timespec(0, UTIME_NOW), Timespec(0, UTIME_NOW)))
check("utimensat", "moved to now", os.stat(f"{d}/f").st_mtime_ns > before)
check("utimensat", "a link itself", outcome(os.utime, f"{d}/s", ns=(11_000_000_000, 12_000_000_000), follow_symlinks=False))
check("utimensat", "the link", os.lstat(f"{d}/s").st_mtime_ns)
check("utimensat", "its target", os.stat(f"{d}/f").st_mtime_ns != 12_000_000_000)
check("utimensat", "bad nanoseconds", outcome(utimensat, f"{d}/f", Timespec(0, 1_000_000_000), Timespec(0, 0)))
check("utimensat", "missing", outcome(os.utime, f"{d}/missing"))

# ---- mknod, mkfifo -------------------------------------------------------
d = fresh("mknod")
aged(d)
check("mkfifo", "0640", outcome(os.mkfifo, f"{d}/fifo", 0o640))
check("mkfifo", "made", desc(f"{d}/fifo"))
check("mkfifo", "parent times", moved(d))
check("mkfifo", "onto a taken name", outcome(os.mkfifo, f"{d}/fifo"))
check("mkfifo", "in a missing directory", outcome(os.mkfifo, f"{d}/no/fifo"))
check("mkfifo", "a 256-byte name", outcome(os.mkfifo, f"{d}/{LONG}"))
check("mknod", "a regular file", outcome(os.mknod, f"{d}/reg", 0o600 | stat.S_IFREG))
check("mknod", "made", desc(f"{d}/reg"))
check("mknod", "a character device", outcome(os.mknod, f"{d}/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3)))
check("mknod", "a bad kind", outcome(os.mknod, f"{d}/bad", 0o666 | 0o170000))
if os.path.exists(f"{d}/null"):
    st = os.lstat(f"{d}/null")
    check("mknod", "the device", f"{desc(f'{d}/null')} {os.major(st.st_rdev)},{os.minor(st.st_rdev)}")

# ---- fallocate -----------------------------------------------------------
d = fresh("fallocate")
put(f"{d}/f", b"abc")
fd = os.open(f"{d}/f", os.O_RDWR)
check("fallocate", "extend to 100", outcome(os.posix_fallocate, fd, 0, 100))
check("fallocate", "the file", f"{desc(f'{d}/f')} {read(f'{d}/f')[:5]!r}")
check("fallocate", "zero length", outcome(os.posix_fallocate, fd, 0, 0))
check("fallocate", "negative offset", outcome(os.posix_fallocate, fd, -1, 10))
os.close(fd)
fd = os.open(f"{d}/f", os.O_RDONLY)
check("fallocate", "read-only descriptor", outcome(os.posix_fallocate, fd, 0, 200))
os.close(fd)

# ---- flock, fcntl --------------------------------------------------------
d = fresh("locks")
put(f"{d}/f")
a = os.open(f"{d}/f", os.O_RDWR)
b = os.open(f"{d}/f", os.O_RDWR)
check("flock", "exclusive", outcome(fcntl.flock, a, fcntl.LOCK_EX | fcntl.LOCK_NB))
check("flock", "exclusive by another description", outcome(fcntl.flock, b, fcntl.LOCK_EX | fcntl.LOCK_NB))
check("flock", "shared by another description", outcome(fcntl.flock, b, fcntl.LOCK_SH | fcntl.LOCK_NB))
check("flock", "unlocked", outcome(fcntl.flock, a, fcntl.LOCK_UN))
check("flock", "then by the other", outcome(fcntl.flock, b, fcntl.LOCK_EX | fcntl.LOCK_NB))
check("flock", "a bad operation", outcome(fcntl.flock, a, 0))
fcntl.flock(b, fcntl.LOCK_UN)
check("fcntl", "F_SETLK write", outcome(fcntl.lockf, a, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0))
check("fcntl", "F_SETLK again by the same process", outcome(fcntl.lockf, b, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0))
ro = os.open(f"{d}/f", os.O_RDONLY)
check("fcntl", "F_SETLK write on a read-only descriptor", outcome(fcntl.lockf, ro, fcntl.LOCK_EX | fcntl.LOCK_NB))
check("fcntl", "F_SETLK read on a read-only descriptor", outcome(fcntl.lockf, ro, fcntl.LOCK_SH | fcntl.LOCK_NB))
for fd in (a, b, ro):
    os.close(fd)
check("fcntl", "F_GETFL of a closed descriptor", outcome(fcntl.fcntl, a, fcntl.F_GETFL))

# ---- a symbolic link among the directories --------------------------------
d = fresh("through")
os.mkdir(f"{d}/real")
os.symlink("real", f"{d}/ln")
os.symlink(f"{d}/real", f"{d}/abs")
check("through", "create", outcome(put, f"{d}/ln/f"))
check("through", "mkdir", outcome(os.mkdir, f"{d}/ln/sub"))
check("through", "mkdir by an absolute link", outcome(os.mkdir, f"{d}/abs/sub2"))
check("through", "symlink", outcome(os.symlink, "f", f"{d}/ln/s"))
check("through", "link", outcome(os.link, f"{d}/ln/f", f"{d}/abs/h"))
check("through", "rename", outcome(os.rename, f"{d}/abs/h", f"{d}/ln/h2"))
check("through", "mkfifo", outcome(os.mkfifo, f"{d}/ln/p"))
check("through", "unlink", outcome(os.unlink, f"{d}/ln/h2"))
check("through", "rmdir", outcome(os.rmdir, f"{d}/abs/sub2"))
check("through", "chmod", outcome(os.chmod, f"{d}/ln/f", 0o600))
check("through", "the directory holds", sorted(os.listdir(f"{d}/real")))
os.unlink(f"{d}/abs")  # its target's text differs between the two roots
os.symlink("loop", f"{d}/loop")
check("through", "a loop", outcome(os.mkdir, f"{d}/loop/x"))

# ---- what is left --------------------------------------------------------
for top, dirs, files in sorted(os.walk(root)):
    for name in sorted(dirs + files):
        p = f"{top}/{name}"
        print(p[len(root):][:80], desc(p))
