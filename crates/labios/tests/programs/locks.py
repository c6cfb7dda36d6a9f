"""fcntl, OFD and flock locks between processes, as POSIX and Linux define
them: conflicts, shared read locks, F_GETLK, splitting, close releasing a
process's locks, waits granted on release, deadlock detection, and a killed
holder's locks released. Every line printed is the same on a plain
directory; a second process is driven through a pipe, one command a line,
so the order of events is fixed by the script, not by timing.

Usage: locks.py DIR (the parent) or locks.py --child FILE (a helper)."""
import errno
import fcntl
import os
import signal
import struct
import subprocess
import sys

F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
CMDS = {
    "GETLK": fcntl.F_GETLK,
    "SETLK": fcntl.F_SETLK,
    "SETLKW": fcntl.F_SETLKW,
    "OFD_GETLK": F_OFD_GETLK,
    "OFD_SETLK": F_OFD_SETLK,
    "OFD_SETLKW": F_OFD_SETLKW,
}
TYPES = {"R": fcntl.F_RDLCK, "W": fcntl.F_WRLCK, "U": fcntl.F_UNLCK}
NAMES = {v: k for k, v in TYPES.items()}
# struct flock on x86_64 / aarch64: short type, short whence, off_t start,
# off_t len, pid_t pid (and padding).
FLOCK = "hhqqi4x"


def name(e):
    """An errno's name (EDEADLK has the alias EDEADLOCK, which errorcode
    gives)."""
    return "EDEADLK" if e.errno == errno.EDEADLK else errno.errorcode[e.errno]


def lock(fd, cmd, typ, start, length):
    """One fcntl lock call: 'ok', the errno's name, or for GETLK what is
    reported (type, start, len and the reporting pid)."""
    arg = struct.pack(FLOCK, TYPES[typ], os.SEEK_SET, start, length, 0)
    try:
        got = fcntl.fcntl(fd, CMDS[cmd], arg)
    except OSError as e:
        return name(e)
    if not cmd.endswith("GETLK"):
        return "ok"
    t, _, s, n, pid = struct.unpack(FLOCK, got)
    return f"{NAMES[t]} {s} {n} {pid}" if t != fcntl.F_UNLCK else "U"


def flock(fd, op):
    ops = {"SH": fcntl.LOCK_SH, "EX": fcntl.LOCK_EX, "UN": fcntl.LOCK_UN}
    flags = 0
    for word in op.split("|"):
        flags |= fcntl.LOCK_NB if word == "NB" else ops[word]
    try:
        fcntl.flock(fd, flags)
        return "ok"
    except OSError as e:
        return name(e)


def child(path):
    fd = os.open(path, os.O_RDWR)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "fcntl":
            out = lock(fd, words[1], words[2], int(words[3]), int(words[4]))
        elif words[0] == "yielding":
            # A wait that, refused as a deadlock, gives up what it holds so
            # that the other side's wait ends.
            out = lock(fd, words[1], words[2], int(words[3]), int(words[4]))
            if out == "EDEADLK":
                lock(fd, "SETLK", "U", 0, 0)
        elif words[0] == "flock":
            out = flock(fd, words[1])
        elif words[0] == "read":
            out = open(words[1]).read().strip()
        elif words[0] == "say":
            out = " ".join(words[1:])
        elif words[0] == "pid":
            out = str(os.getpid())
        else:
            raise SystemExit(f"unknown command {line!r}")
        print(out, flush=True)


class Helper:
    def __init__(self, path):
        self.p = subprocess.Popen(
            [sys.executable, __file__, "--child", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = int(self.ask("pid"))

    def send(self, command):
        self.p.stdin.write(command + "\n")
        self.p.stdin.flush()

    def answer(self):
        return self.p.stdout.readline().strip()

    def ask(self, command):
        self.send(command)
        return self.answer()

    def done(self):
        self.p.stdin.close()
        return self.p.wait()


def pids(report, *known):
    """A GETLK report with the pid named: 'parent', 'helper' or 'other'."""
    words = report.split()
    if len(words) == 4:
        pid = int(words[3])
        name = {p: n for n, p in known}.get(pid, "other" if pid != -1 else "none")
        words[3] = name
    return " ".join(words)


def main(root):
    os.makedirs(root, exist_ok=True)
    path = f"{root}/locked"
    with open(path, "wb") as f:
        f.write(b"x" * 1000)
    me = os.getpid()
    fd = os.open(path, os.O_RDWR)
    h = Helper(path)
    who = (("parent", me), ("helper", h.pid))

    print("-- fcntl record locks")
    print("parent W 0-99:", lock(fd, "SETLK", "W", 0, 100))
    print("helper W 50-59:", h.ask("fcntl SETLK W 50 10"))
    print("helper W 100-199:", h.ask("fcntl SETLK W 100 100"))
    print("helper GETLK W 0-:", pids(h.ask("fcntl GETLK W 0 0"), *who))
    print("parent GETLK W 0-:", pids(lock(fd, "GETLK", "W", 0, 0), *who))
    print("parent R 0-99 (downgrade):", lock(fd, "SETLK", "R", 0, 100))
    print("helper R 10-19:", h.ask("fcntl SETLK R 10 10"))
    print("helper W 10-19:", h.ask("fcntl SETLK W 10 10"))
    print("parent U 40-59 (split):", lock(fd, "SETLK", "U", 40, 20))
    print("helper W 45-54:", h.ask("fcntl SETLK W 45 10"))
    print("helper GETLK W 60-:", pids(h.ask("fcntl GETLK W 60 0"), *who))
    print("helper U 0-:", h.ask("fcntl SETLK U 0 0"))

    print("-- closing any descriptor releases the process's locks")
    other = os.open(path, os.O_RDONLY)
    os.close(other)
    print("helper W 0-99:", h.ask("fcntl SETLK W 0 100"))
    print("helper U 0-:", h.ask("fcntl SETLK U 0 0"))

    print("-- a wait is granted when the holder releases")
    print("parent W 0-:", lock(fd, "SETLK", "W", 0, 0))
    with open(f"{root}/state", "w") as f:
        f.write("held\n")
    h.send("fcntl SETLKW W 0 10")
    with open(f"{root}/state", "w") as f:
        f.write("released\n")
    print("parent U 0-:", lock(fd, "SETLK", "U", 0, 0))
    print("helper SETLKW W 0-9:", h.answer())
    print("helper sees:", h.ask(f"read {root}/state"))
    print("parent W 0-9 (the helper's):", lock(fd, "SETLK", "W", 0, 10))

    print("-- a wait that closes a cycle is a deadlock")
    # Whichever of the two waits comes second is refused, and its side
    # gives up what it holds, so that the other wait is granted.
    print("parent W 500-509:", lock(fd, "SETLK", "W", 500, 10))
    h.send("yielding SETLKW W 500 10")
    outcomes = [lock(fd, "SETLKW", "W", 0, 10)]
    if outcomes[0] == "EDEADLK":
        lock(fd, "SETLK", "U", 500, 10)
    outcomes.append(h.answer())
    print("outcomes:", sorted(outcomes))
    print("helper U 0-:", h.ask("fcntl SETLK U 0 0"))
    print("parent U 0-:", lock(fd, "SETLK", "U", 0, 0))

    print("-- open file description locks")
    fd2 = os.open(path, os.O_RDWR)
    print("OFD W 0-9 on one:", lock(fd, "OFD_SETLK", "W", 0, 10))
    print("OFD W 0-9 on another:", lock(fd2, "OFD_SETLK", "W", 0, 10))
    print("helper W 5-5:", h.ask("fcntl SETLK W 5 1"))
    os.close(fd2)
    print("after closing the other, OFD W 0-9 on one:", lock(fd, "OFD_SETLK", "W", 0, 10))
    print("OFD U 0-:", lock(fd, "OFD_SETLK", "U", 0, 0))

    print("-- flock")
    print("parent EX:", flock(fd, "EX"))
    print("helper EX|NB:", h.ask("flock EX|NB"))
    print("helper SH|NB:", h.ask("flock SH|NB"))
    print("helper fcntl W 0- (flock apart):", h.ask("fcntl SETLK W 0 0"))
    print("helper fcntl U:", h.ask("fcntl SETLK U 0 0"))
    dup = os.dup(fd)
    os.close(dup)
    print("after closing a duplicate, helper EX|NB:", h.ask("flock EX|NB"))
    print("parent SH (convert):", flock(fd, "SH"))
    print("helper SH|NB:", h.ask("flock SH|NB"))
    print("parent EX|NB:", flock(fd, "EX|NB"))
    print("helper UN:", h.ask("flock UN"))
    print("parent EX|NB:", flock(fd, "EX|NB"))
    print("parent UN:", flock(fd, "UN"))
    print("helper exits:", h.done())

    print("-- a killed holder leaves no lock behind")
    k = Helper(path)
    print("holder W 0-:", k.ask("fcntl SETLK W 0 0"))
    print("holder flock EX:", k.ask("flock EX"))
    print("parent W 0-:", lock(fd, "SETLK", "W", 0, 0))
    print("parent flock EX|NB:", flock(fd, "EX|NB"))
    os.kill(k.pid, signal.SIGKILL)
    print("holder status:", k.p.wait())
    signal.alarm(120)
    print("parent SETLKW W 0-:", lock(fd, "SETLKW", "W", 0, 0))
    print("parent flock EX:", flock(fd, "EX"))
    signal.alarm(0)
    os.close(fd)


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main(sys.argv[1])
