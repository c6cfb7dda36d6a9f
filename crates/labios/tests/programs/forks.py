"""Forked children use LABIOS right away, many at once, while the parent's
LABIOS runtime (threads idle since its own first write) is alive."""
import os
import sys

root = sys.argv[1]
children = 16
os.makedirs(root, exist_ok=True)
with open(f"{root}/parent.txt", "w") as f:
    f.write("parent\n")
pids = []
for i in range(children):
    pid = os.fork()
    if pid == 0:
        with open(f"{root}/child{i:02d}.txt", "w") as f:
            f.write(f"child {i}\n")
        os._exit(0)
    pids.append(pid)
print("failed children", sum(os.waitpid(p, 0)[1] != 0 for p in pids))
print(sorted(os.listdir(root)))
print("".join(open(f"{root}/child{i:02d}.txt").read() for i in range(children)), end="")
