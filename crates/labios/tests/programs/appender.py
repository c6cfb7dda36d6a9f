"""Concurrent O_APPEND writers and their check (issue 12, item 1).

  appender.py write PATH WRITER N   appends N records of 64 bytes, one
                                    write(2) each, to PATH opened O_APPEND
  appender.py check PATH WRITERS N  every record of every writer is in PATH
                                    exactly once and whole, and nothing else
"""
import os
import sys


def record(writer, i):
    text = f"writer {writer:02d} record {i:06d} "
    return (text + "." * (63 - len(text)) + "\n").encode()


def write(path, writer, n):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for i in range(n):
            data = record(writer, i)
            if os.write(fd, data) != len(data):
                sys.exit(f"short write of record {i}")
    finally:
        os.close(fd)


def check(path, writers, n):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % 64:
        sys.exit(f"{len(data)} bytes: not whole records")
    seen = {}
    for at in range(0, len(data), 64):
        rec = data[at : at + 64]
        seen[rec] = seen.get(rec, 0) + 1
    want = {record(w, i) for w in range(1, writers + 1) for i in range(n)}
    missing = len(want - seen.keys())
    stray = sum(c for r, c in seen.items() if r not in want)
    twice = sum(c - 1 for r, c in seen.items() if r in want and c > 1)
    print(f"records {len(data) // 64} missing {missing} stray {stray} twice {twice}")


if __name__ == "__main__":
    op, path, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    write(path, a, b) if op == "write" else check(path, a, b)
