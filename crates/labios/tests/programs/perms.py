"""Permissions between users. `perms.py setup ROOT` (as root) makes a
tree; `perms.py try ROOT` (as an unprivileged user) tries what that user
may and may not do to root's entries and its own, printing each outcome;
`perms.py show ROOT` prints the tree with modes and owners. Run on a plain
directory and on LABIOS, the outputs must match."""
import ctypes
import errno
import os
import stat
import sys

mode, root = sys.argv[1], sys.argv[2]


def outcome(label, f, *args):
    try:
        r = f(*args)
        out = "ok" if r is None or isinstance(r, int) else f"ok {r}"
    except OSError as e:
        out = errno.errorcode[e.errno]
    print(label, out)


def write(path, data, how="w"):
    with open(path, how) as f:
        f.write(data)


def read(path):
    with open(path) as f:
        return f.read().strip()


if mode == "setup":
    os.umask(0)
    os.makedirs(root, 0o755)
    os.chmod(root, 0o755)
    for d, m in [
        ("open", 0o777),
        ("sticky", 0o1777),
        ("closed", 0o755),
        ("locked", 0o700),
        ("blind", 0o711),
    ]:
        os.mkdir(f"{root}/{d}", m)
    for f, m in [
        ("closed/f", 0o644),
        ("closed/private", 0o600),
        ("sticky/roots", 0o666),
        ("open/roots", 0o644),
        ("locked/f", 0o644),
        ("blind/f", 0o644),
    ]:
        write(f"{root}/{f}", "root data\n")
        os.chmod(f"{root}/{f}", m)
elif mode == "try":
    os.umask(0o022)
    c = f"{root}/closed"
    outcome("chmod root's file:", os.chmod, f"{c}/f", 0o777)
    outcome("chown root's file:", os.chown, f"{c}/f", os.getuid(), -1)
    outcome("touch root's file (now):", os.utime, f"{c}/f")
    outcome("touch root's file (given):", os.utime, f"{c}/f", (1, 1))
    outcome("open root's file to write:", write, f"{c}/f", "mine\n")
    outcome("append to root's file:", write, f"{c}/f", "mine\n", "a")
    outcome("truncate root's file:", os.truncate, f"{c}/f", 0)
    outcome("unlink in root's directory:", os.unlink, f"{c}/f")
    outcome("rename out of root's directory:", os.rename, f"{c}/f", f"{root}/open/stolen")
    outcome("create in root's directory:", write, f"{c}/new", "x\n")
    outcome("mkdir in root's directory:", os.mkdir, f"{c}/sub")
    outcome("symlink in root's directory:", os.symlink, "f", f"{c}/link")
    outcome("hard link in root's directory:", os.link, f"{root}/open/roots", f"{c}/l")
    outcome("read root's readable file:", read, f"{c}/f")
    outcome("read root's private file:", read, f"{c}/private")
    outcome("stat in a directory I may not search:", os.stat, f"{root}/locked/f")
    outcome("read in a directory I may not search:", read, f"{root}/locked/f")
    outcome("list a directory I may not read:", os.listdir, f"{root}/locked")
    outcome("read in a directory I may search:", read, f"{root}/blind/f")
    outcome("list a directory I may only search:", os.listdir, f"{root}/blind")
    outcome("create in an open directory:", write, f"{root}/open/mine", "mine\n")
    st = os.stat(f"{root}/open/mine")
    print("  owner is me:", st.st_uid == os.getuid(), st.st_gid == os.getgid(), oct(st.st_mode & 0o7777))
    outcome("chmod my file:", os.chmod, f"{root}/open/mine", 0o600)
    outcome("touch my file (given):", os.utime, f"{root}/open/mine", (1, 1))
    outcome("give my file away:", os.chown, f"{root}/open/mine", 0, -1)
    outcome("give my file to root's group:", os.chown, f"{root}/open/mine", -1, 0)
    outcome("unlink root's file in an open directory:", os.unlink, f"{root}/open/roots")
    outcome("unlink root's file in a sticky directory:", os.unlink, f"{root}/sticky/roots")
    outcome("rename root's file in a sticky directory:", os.rename, f"{root}/sticky/roots", f"{root}/sticky/x")
    outcome("write root's 0666 file in a sticky directory:", write, f"{root}/sticky/roots", "shared\n", "a")
    outcome("create in a sticky directory:", write, f"{root}/sticky/mine", "mine\n")
    outcome("unlink mine in a sticky directory:", os.unlink, f"{root}/sticky/mine")
    outcome("mkdir in an open directory:", os.mkdir, f"{root}/open/d", 0o777)
    print("  mkdir mode:", oct(os.stat(f"{root}/open/d").st_mode & 0o7777))
    for what, path in [
        ("root's readable file", f"{c}/f"),
        ("root's private file", f"{c}/private"),
        ("root's open directory", f"{root}/open"),
        ("root's closed directory", c),
        ("a file in a directory I may not search", f"{root}/locked/f"),
        ("my file", f"{root}/open/mine"),
        ("a missing file", f"{c}/missing"),
    ]:
        can = [n for n, m in [("r", os.R_OK), ("w", os.W_OK), ("x", os.X_OK)] if os.access(path, m)]
        exists = os.access(path, os.F_OK)
        print(f"  access to {what}: exists {exists} may {''.join(can) or '-'}")
    libc = ctypes.CDLL(None, use_errno=True)
    bad = libc.access(f"{c}/f".encode(), 0o10)
    print("  access with a bad mode:", bad, errno.errorcode.get(ctypes.get_errno(), "-"))
else:
    for top, dirs, files in sorted(os.walk(root)):
        for name in sorted(dirs + files):
            p = f"{top}/{name}"
            st = os.lstat(p)
            who = "root" if st.st_uid == 0 else "user"
            size = st.st_size if stat.S_ISREG(st.st_mode) else "-"
            print(p[len(root):], oct(stat.S_IMODE(st.st_mode)), who, size)
    print(read(f"{root}/closed/f"))
    print(read(f"{root}/sticky/roots"))
