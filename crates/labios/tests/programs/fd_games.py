"""Descriptor games a program plays (issue 12, item 2): close every
descriptor it does not know, as daemons do, and dup2 onto every number in
use; the file it keeps open still works afterwards.

  fd_games.py PATH
"""
import errno
import os
import sys

path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"before ")
for n in range(3, 4096):
    if n != fd:
        try:
            os.close(n)
        except OSError:
            pass
os.write(fd, b"closed-all ")
os.closerange(fd + 1, 1 << 20)
os.write(fd, b"closerange ")
refused = 0
for n in sorted(int(x) for x in os.listdir("/proc/self/fd")):
    if n > 2 and n != fd:
        try:
            os.close(os.dup2(fd, n))
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            refused += 1
os.write(fd, b"dup2-everywhere")
os.close(fd)
with open(path, "rb") as f:
    print(f.read().decode())
