"""Removing or renaming a path whose last component is `.` or `..` must be
refused as the kernel refuses it, and must never act on the directory the
normalized path names (`rmdir("d/e/.")` once removed `d/e`). Prints each
call's outcome and what is left, for comparison with a plain directory."""
import errno
import os
import sys

root = sys.argv[1]
os.makedirs(f"{root}/d/e")
with open(f"{root}/d/e/f", "w") as f:
    f.write("kept\n")
os.makedirs(f"{root}/empty/sub")
calls = [
    ("rmdir", f"{root}/empty/sub/."),
    ("rmdir", f"{root}/empty/sub/./"),
    ("rmdir", f"{root}/empty/sub/.."),
    ("unlink", f"{root}/d/e/."),
    ("unlink", f"{root}/d/e/.."),
    ("rename", f"{root}/empty/sub/.", f"{root}/moved"),
    ("rename", f"{root}/empty/sub", f"{root}/d/.."),
]
for name, *args in calls:
    try:
        getattr(os, name)(*args)
        outcome = "ok"
    except OSError as e:
        outcome = errno.errorcode[e.errno]
    print(name, *(a[len(root):] for a in args), outcome)
for top, dirs, files in sorted(os.walk(root)):
    print(top[len(root):] or "/", sorted(dirs), sorted(files))
with open(f"{root}/d/e/f") as f:
    print(f.read(), end="")
# Errors programs branch on: a path through a file, a name too long.
probes = [
    ("open", f"{root}/d/e/f/x"),
    ("mkdir", f"{root}/d/e/f/x"),
    ("stat", f"{root}/d/e/f/x"),
    ("mkdir", f"{root}/" + "n" * 256),
    ("open", f"{root}/d/" + "n" * 256),
]
for name, path in probes:
    try:
        if name == "open":
            open(path, "w").close()
        else:
            getattr(os, name)(path)
        outcome = "ok"
    except OSError as e:
        outcome = errno.errorcode[e.errno]
    print(name, path[len(root):][:20], outcome)
