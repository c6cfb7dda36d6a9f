"""A process always sees its own changes, whatever the attribute cache
keeps (run it with LABIOS_CLIENT__ATTR_CACHE_MS long): sizes after writes,
appends, truncates and O_TRUNC, entries after renames, removals, mkdir,
rmdir and symlink, with directory listings (which fill the cache) between.

  own_changes.py DIR
"""
import os
import sys

root = sys.argv[1]
os.makedirs(root, exist_ok=True)
p = os.path.join(root, "f")


def show(what):
    sorted(os.listdir(root))
    print(what, os.stat(p).st_size if os.path.lexists(p) else "absent")


with open(p, "wb") as f:
    f.write(b"abc")
show("create")
with open(p, "ab") as f:
    f.write(b"defg")
show("append")
fd = os.open(p, os.O_WRONLY)
os.pwrite(fd, b"x" * 10, 20)
print("fstat after pwrite", os.fstat(fd).st_size)
os.ftruncate(fd, 12)
print("fstat after ftruncate", os.fstat(fd).st_size)
os.close(fd)
os.truncate(p, 5)
show("truncate")
with open(p, "wb"):
    pass
show("O_TRUNC")
os.rename(p, p + ".2")
show("renamed away")
print("renamed to", os.stat(p + ".2").st_size)
os.rename(p + ".2", p)
show("renamed back")
d = os.path.join(root, "d")
os.mkdir(d)
print("dir", os.path.isdir(d))
os.rmdir(d)
print("dir after rmdir", os.path.exists(d))
os.unlink(p)
show("unlink")
os.symlink("target", p)
print("link", os.readlink(p), os.path.islink(p))
print(sorted(os.listdir(root)))
