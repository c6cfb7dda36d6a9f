"""Python file I/O on a directory given as argv[1]; prints what it sees."""
import hashlib
import os
import pathlib
import shutil
import sys

root = pathlib.Path(sys.argv[1])
d = root / "py"
d.mkdir(parents=True, exist_ok=True)
p = d / "text.txt"
with open(p, "w") as f:
    f.write("alpha\nbeta\n")
    f.writelines(["gamma\n", "delta\n"])
with open(p, "a") as f:
    print("epsilon", file=f)
with open(p) as f:
    print("lines", [line.rstrip() for line in f])
with open(p, "r+b") as f:
    f.seek(6)
    f.write(b"BETA")
    f.seek(-8, os.SEEK_END)
    print("tail", f.read(), "tell", f.tell())
data = bytes(range(256)) * 4099
b = d / "blob.bin"
b.write_bytes(data)
print("blob", len(b.read_bytes()), hashlib.sha256(b.read_bytes()).hexdigest())
print("stat", os.stat(b).st_size, os.path.getsize(p), os.path.isdir(d), os.path.isfile(b))
try:
    open(d / "x.txt", "x").close()
    open(d / "x.txt", "x")
except FileExistsError:
    print("exclusive create refused")
try:
    open(d / "missing.txt")
except FileNotFoundError:
    print("missing file not found")
shutil.copyfile(b, d / "copy.bin")
os.rename(d / "copy.bin", d / "moved.bin")
print("moved equal", (d / "moved.bin").read_bytes() == data)
os.remove(d / "x.txt")
(d / "sub").mkdir()
(d / "sub" / "n.txt").write_text("nested")
print("listdir", sorted(os.listdir(d)))
print("walk", sorted((str(pathlib.Path(r).relative_to(root)), sorted(fs)) for r, _, fs in os.walk(d)))
with open(d / "fork.txt", "w") as f:
    f.write("parent-before;")
    f.flush()
    pid = os.fork()
    if pid == 0:
        f.write("child;")
        f.flush()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"the forked child failed: {status}"
    f.write("parent-after")
print("fork", (d / "fork.txt").read_text())
with open(b, "r+b") as f:
    f.truncate(1000)
print("truncated", os.path.getsize(b), (d / "blob.bin").read_bytes() == data[:1000])
os.chdir(d)
print("cwd relative", open("sub/n.txt").read(), os.path.basename(os.getcwd()))
shutil.rmtree(d / "sub")
print("after rmtree", sorted(os.listdir(".")))
