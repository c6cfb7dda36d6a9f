"""Renaming directories as POSIX says: a directory moves with everything in
it, in one step; it replaces an empty directory, not a non-empty one
(ENOTEMPTY) nor a file (ENOTDIR); a file does not replace a directory
(EISDIR); a directory does not move into itself (EINVAL). Prints each
call's outcome and the tree, for comparison with a plain directory."""
import errno
import os
import sys

root = sys.argv[1]
for d in ["a/b/c", "empty", "full/x", "other"]:
    os.makedirs(f"{root}/{d}")
for f, text in [("a/top", "top\n"), ("a/b/c/deep", "deep\n"), ("file", "file\n"),
                ("full/x/y", "y\n")]:
    with open(f"{root}/{f}", "w") as out:
        out.write(text)
calls = [
    ("a", "moved"),
    ("moved", "empty"),
    ("empty", "full"),
    ("empty", "file"),
    ("file", "other"),
    ("empty", "empty/b/inside"),
    ("empty/b", "other/b2"),
    ("other", "renamed"),
]
for src, dst in calls:
    try:
        os.rename(f"{root}/{src}", f"{root}/{dst}")
        outcome = "ok"
    except OSError as e:
        outcome = errno.errorcode[e.errno]
    print("rename", src, dst, outcome)
for top, dirs, files in sorted(os.walk(root)):
    print(top[len(root):] or "/", sorted(dirs), sorted(files))
    for f in sorted(files):
        with open(os.path.join(top, f)) as inp:
            print(" ", f, inp.read(), end="")
