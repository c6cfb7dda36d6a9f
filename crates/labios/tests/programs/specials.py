"""FIFOs, devices, sockets and mknod'ed files are names in the namespace:
made with their type, mode and device number, listed with their type,
renamed and removed like any name, and EEXIST when the name is taken.
Prints what it sees, for comparison with a plain directory (as root)."""
import errno
import os
import stat
import sys

root = sys.argv[1]
os.makedirs(root, exist_ok=True)
os.umask(0o022)
os.mkfifo(f"{root}/fifo", 0o666)
os.mknod(f"{root}/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
os.mknod(f"{root}/loop", 0o660 | stat.S_IFBLK, os.makedev(7, 9))
os.mknod(f"{root}/sock", 0o600 | stat.S_IFSOCK)
os.mknod(f"{root}/plain", 0o640)
for name in sorted(os.listdir(root)):
    st = os.lstat(f"{root}/{name}")
    dev = ""
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        dev = f"{os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
    print(name, stat.filemode(st.st_mode), st.st_nlink, dev or st.st_size)
with os.scandir(root) as it:
    for e in sorted(it, key=lambda e: e.name):
        kind = stat.S_IFMT(e.stat(follow_symlinks=False).st_mode)
        print("entry", e.name, e.is_file(), e.is_dir(), oct(kind))


def outcome(f, *args):
    try:
        f(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]


print("mkfifo over a FIFO:", outcome(os.mkfifo, f"{root}/fifo"))
print("mknod over a file:", outcome(os.mknod, f"{root}/plain", 0o600 | stat.S_IFIFO))
print("mkfifo in a missing directory:", outcome(os.mkfifo, f"{root}/no/fifo"))
print("mkfifo through a FIFO:", outcome(os.mkfifo, f"{root}/fifo/x"))
print("truncate a FIFO:", outcome(os.truncate, f"{root}/fifo", 0))
os.rename(f"{root}/fifo", f"{root}/pipe")
os.chmod(f"{root}/pipe", 0o600)
print("renamed:", stat.filemode(os.lstat(f"{root}/pipe").st_mode))
for name in ["pipe", "null", "loop", "sock", "plain"]:
    os.unlink(f"{root}/{name}")
print("left:", os.listdir(root))
