"""Modes, owners and times as POSIX gives them: creation modes under the
umask, chmod, chown (which drops set-user-ID), lchown of a link itself,
times given, omitted and set to now, ctime moving with every change, and
a directory's times following its entries. Prints what it sees, for
comparison with a plain directory (run as root)."""
import ctypes
import errno
import os
import stat
import sys
import time

root = sys.argv[1]
os.makedirs(root, exist_ok=True)


def show(label, path, follow=True):
    st = os.stat(path) if follow else os.lstat(path)
    print(label, oct(stat.S_IMODE(st.st_mode)), st.st_uid, st.st_gid)


def outcome(f, *args):
    try:
        f(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]


os.umask(0o022)
fd = os.open(f"{root}/f", os.O_CREAT | os.O_WRONLY, 0o666)
os.write(fd, b"data\n")
show("created 0666 under 022:", f"{root}/f")
os.mkdir(f"{root}/d", 0o777)
show("mkdir 0777 under 022:", f"{root}/d")
os.umask(0o077)
os.close(os.open(f"{root}/private", os.O_CREAT | os.O_WRONLY, 0o666))
show("created 0666 under 077:", f"{root}/private")
os.mkdir(f"{root}/d/inner", 0o750)
show("mkdir 0750 under 077:", f"{root}/d/inner")
os.umask(0o022)

os.chmod(f"{root}/f", 0o640)
show("chmod 0640:", f"{root}/f")
os.chmod(f"{root}/f", 0o4755)
show("chmod 04755:", f"{root}/f")
before = os.stat(f"{root}/f").st_ctime_ns
os.chown(f"{root}/f", 1000, 1001)
after = os.stat(f"{root}/f")
show("chown 1000:1001:", f"{root}/f")
print("chown moved ctime:", after.st_ctime_ns >= before)
os.chown(f"{root}/f", -1, 1002)
show("chgrp 1002:", f"{root}/f")
os.fchmod(fd, 0o600)
os.fchown(fd, 1003, 1004)
show("fchmod 0600, fchown 1003:1004:", f"{root}/f")
os.close(fd)

os.symlink("f", f"{root}/link")
os.chmod(f"{root}/link", 0o604)
show("chmod through a link, the file:", f"{root}/f")
os.lchown(f"{root}/link", 2000, 2001)
show("lchown, the link:", f"{root}/link", follow=False)
show("lchown, the file:", f"{root}/f")
os.chown(f"{root}/link", 3000, 3001)
show("chown through a link, the file:", f"{root}/f")

os.utime(f"{root}/f", ns=(1_000_000_007, 2_000_000_009))
st = os.stat(f"{root}/f")
print("utime ns:", st.st_atime_ns, st.st_mtime_ns)
os.utime(f"{root}/f", (86_400, 172_800))
st = os.stat(f"{root}/f")
print("utime s:", st.st_atime_ns, st.st_mtime_ns)
os.utime(f"{root}/f")
st = os.stat(f"{root}/f")
print("utime now:", abs(st.st_mtime - time.time()) < 30, abs(st.st_atime - time.time()) < 30)


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
AT_FDCWD, AT_SYMLINK_NOFOLLOW = -100, 0x100
libc = ctypes.CDLL(None, use_errno=True)
libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(Timespec), ctypes.c_int]
os.utime(f"{root}/f", ns=(5_000_000_000, 6_000_000_000))
times = (Timespec * 2)(Timespec(7, 0), Timespec(0, UTIME_OMIT))
print("utimensat omit mtime:", libc.utimensat(AT_FDCWD, f"{root}/f".encode(), times, 0))
st = os.stat(f"{root}/f")
print("  times:", st.st_atime_ns, st.st_mtime_ns)
times = (Timespec * 2)(Timespec(0, UTIME_OMIT), Timespec(9, 500))
print("utimensat omit atime:", libc.utimensat(AT_FDCWD, f"{root}/f".encode(), times, 0))
st = os.stat(f"{root}/f")
print("  times:", st.st_atime_ns, st.st_mtime_ns)
times = (Timespec * 2)(Timespec(1, 2_000_000_000), Timespec(0, 0))
r = libc.utimensat(AT_FDCWD, f"{root}/f".encode(), times, 0)
print("utimensat bad nsec:", r, errno.errorcode.get(ctypes.get_errno()))
times = (Timespec * 2)(Timespec(11, 0), Timespec(12, 0))
libc.utimensat(AT_FDCWD, f"{root}/link".encode(), times, AT_SYMLINK_NOFOLLOW)
print("utimensat nofollow, the link:", os.lstat(f"{root}/link").st_mtime_ns)
print("utimensat nofollow, the file:", os.stat(f"{root}/f").st_mtime_ns)

# Writes and truncation move mtime and ctime; a directory's times follow
# what is made, renamed and removed in it.
os.utime(f"{root}/f", (50, 50))
with open(f"{root}/f", "a") as w:
    w.write("more\n")
print("write moved mtime:", os.stat(f"{root}/f").st_mtime > 50)
os.utime(f"{root}/f", (50, 50))
os.truncate(f"{root}/f", 2)
print("truncate moved mtime:", os.stat(f"{root}/f").st_mtime > 50)
for what, act in [
    ("create", lambda: open(f"{root}/d/new", "w").close()),
    ("rename", lambda: os.rename(f"{root}/d/new", f"{root}/d/renamed")),
    ("remove", lambda: os.unlink(f"{root}/d/renamed")),
    ("mkdir", lambda: os.mkdir(f"{root}/d/sub")),
    ("rmdir", lambda: os.rmdir(f"{root}/d/sub")),
]:
    os.utime(f"{root}/d", (50, 50))
    act()
    st = os.stat(f"{root}/d")
    print(f"{what} moved the directory's mtime:", st.st_mtime > 50, st.st_ctime > 50)

print("chmod of a missing entry:", outcome(os.chmod, f"{root}/missing", 0o644))
print("chown of a missing entry:", outcome(os.chown, f"{root}/missing", 1, 1))
print("utime of a missing entry:", outcome(os.utime, f"{root}/missing"))
print("chmod through a file:", outcome(os.chmod, f"{root}/f/x", 0o644))
