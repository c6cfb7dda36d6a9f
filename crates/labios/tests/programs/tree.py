"""A randomized tree exerciser: several processes at once make
directories, files, hard and symbolic links, rename, chmod, truncate and
remove in one tree, each in its own part of it (so that the same seed
makes the same tree on any file system), then the whole tree is listed:
kind, mode, link count, size, content digest or link target of every
entry, and every operation's outcome (errors included).

Usage: tree.py SEED PROCESSES OPERATIONS ROOT"""
import errno
import hashlib
import os
import random
import stat
import sys

seed, procs, ops, root = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.makedirs(root, exist_ok=True)


def work(i):
    rng = random.Random(seed * 1000 + i)
    base = f"{root}/p{i}"
    os.mkdir(base)
    log = []

    def entries():
        out = []
        for d, dirs, files in os.walk(base):
            out += [os.path.join(d, x) for x in dirs + files]
        return sorted(out)

    def pick(existing=True):
        names = entries()
        if existing and names and rng.random() < 0.8:
            return rng.choice(names)
        dirs = [base] + [p for p in names if os.path.isdir(p) and not os.path.islink(p)]
        return f"{rng.choice(dirs)}/n{rng.randint(0, 30)}"

    for n in range(ops):
        kind = rng.choice(
            ["mkdir", "create", "create", "write", "link", "symlink", "rename",
             "chmod", "truncate", "unlink", "rmdir"]
        )
        a, b = pick(), pick(existing=rng.random() < 0.3)
        try:
            if kind == "mkdir":
                os.mkdir(b, 0o700 | rng.choice([0, 0o055, 0o070]))
            elif kind == "create":
                with open(b, "xb") as f:
                    f.write(rng.randbytes(rng.randint(0, 5000)))
            elif kind == "write":
                fd = os.open(a, os.O_WRONLY)
                try:
                    os.pwrite(fd, rng.randbytes(rng.randint(1, 3000)), rng.randint(0, 6000))
                finally:
                    os.close(fd)
            elif kind == "link":
                os.link(a, b, follow_symlinks=False)
            elif kind == "symlink":
                os.symlink(os.path.relpath(a, os.path.dirname(b)), b)
            elif kind == "rename":
                os.rename(a, b)
            elif kind == "chmod":
                if not os.path.islink(a):
                    os.chmod(a, rng.choice([0o600, 0o644, 0o755, 0o700, 0o640]))
            elif kind == "truncate":
                os.truncate(a, rng.randint(0, 8000))
            elif kind == "unlink":
                os.unlink(a)
            else:
                os.rmdir(a)
            log.append(f"{n} {kind} ok")
        except OSError as e:
            log.append(f"{n} {kind} {errno.errorcode[e.errno]}")
    with open(f"{root}/p{i}.log", "w") as f:
        f.write("\n".join(log) + "\n")


pids = []
for i in range(procs):
    pid = os.fork()
    if pid == 0:
        try:
            work(i)
        finally:
            os._exit(0)
    pids.append(pid)
print("failed", sum(os.waitpid(p, 0)[1] != 0 for p in pids))
for i in range(procs):
    path = f"{root}/p{i}.log"
    with open(path) as f:
        print(f"process {i}:", hashlib.sha256(f.read().encode()).hexdigest()[:16])
    os.unlink(path)
for d, dirs, files in sorted(os.walk(root)):
    for name in sorted(dirs + files):
        p = os.path.join(d, name)
        st = os.lstat(p)
        rel = os.path.relpath(p, root)
        mode = stat.filemode(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            what = "-> " + os.readlink(p)
        elif stat.S_ISDIR(st.st_mode):
            what = ""
        else:
            with open(p, "rb") as f:
                what = f"{st.st_size} {hashlib.sha256(f.read()).hexdigest()[:12]}"
        print(rel, mode, st.st_nlink, what)
