"""The native client against both real deployments (conftest.py: `labios
serve`, and a cluster of NATS, Redis and LABIOS processes): round trips of
every buffer kind, asynchronous publish and wait, the namespace, and errors."""

import errno
import os
import socket
import subprocess
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import labios

# One byte; under the client's 64 KiB small-write cache; one label; several
# 1 MiB labels with a ragged tail.
SIZES = [1, 100, 70 * 1024, 3 * 2**20 + 13]


def _buffers(size):
    raw = os.urandom(size)
    floats = np.frombuffer(raw[: size - size % 8] or bytes(8), dtype=np.float64)
    readonly = np.frombuffer(raw, dtype=np.uint8)
    assert not readonly.flags.writeable
    return {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(bytearray(raw))[1:],
        "numpy-uint8": np.frombuffer(bytearray(raw), dtype=np.uint8),
        "numpy-readonly": readonly,
        "numpy-float64-2d": floats.reshape(-1, 1) if floats.size % 2 else floats.reshape(2, -1),
        # No single run of memory: the client copies it once, in C order.
        "numpy-strided": np.frombuffer(raw, dtype=np.uint8)[::3],
    }


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", list(_buffers(8)))
def test_write_read_round_trip(client, root, size, kind):
    data = _buffers(size)[kind]
    expected = memoryview(np.ascontiguousarray(data)).tobytes()
    path = f"{root}/{kind}.bin"
    assert client.write(path, data) == len(expected)
    assert client.stat(path)["size"] == len(expected)
    assert client.read(path) == expected


@pytest.mark.parametrize("size", SIZES)
def test_write_async_round_trip(client, root, size):
    data = np.frombuffer(os.urandom(size), dtype=np.uint8).copy()
    ticket = client.write_async(f"{root}/a.bin", data)
    assert isinstance(ticket, labios.Ticket)
    ticket.wait()
    assert client.read(f"{root}/a.bin") == data.tobytes()


def test_async_writes_at_offsets_wait_many(client, root):
    """A file assembled from asynchronous writes of numpy rows, published
    out of order and waited on together."""
    rows = np.arange(32 * 50_000, dtype=np.int32).reshape(32, -1)
    path = f"{root}/rows.bin"
    tickets = [
        client.write_async(path, rows[i], offset=i * rows[i].nbytes)
        for i in reversed(range(len(rows)))
    ]
    assert len({t.id for t in tickets}) == len(tickets)
    client.wait(tickets)
    back = np.frombuffer(client.read(path), dtype=np.int32).reshape(rows.shape)
    np.testing.assert_array_equal(back, rows)


def test_wait_all_and_consumed_tickets(client, root):
    tickets = [client.write_async(f"{root}/f{i}", bytes([i]) * 1000) for i in range(10)]
    client.wait_all()
    for i in range(10):
        assert client.read(f"{root}/f{i}") == bytes([i]) * 1000
    with pytest.raises(ValueError, match="already waited on"):
        tickets[0].wait()


def test_close_lands_unwaited_async_writes(deployment, client, root):
    # Small asynchronous writes sit in the client's cache until a wait:
    # close must publish and wait for them.
    other = deployment.connect()
    other.write_async(f"{root}/late", b"x" * 100)
    other.close()
    assert other.closed
    assert client.read(f"{root}/late") == b"x" * 100
    with pytest.raises(ValueError, match="closed"):
        other.read(f"{root}/late")


def test_a_script_ending_without_close_lands_its_async_writes(client, root):
    # A client never closed lands its asynchronous writes (small ones still
    # in its cache) when the script ends: dropped then, or, when a daemon
    # thread still holds it (never dropped: the interpreter stops such
    # threads where they are), by the module's atexit hook. The latter
    # were lost.
    daemon = "threading.Thread(target=hold, args=(c,), daemon=True).start()\n"
    for name, holder in [("dropped", ""), ("held", daemon)]:
        path = f"{root}/{name}"
        script = (
            "import labios, threading, time\n"
            "def hold(c):\n"
            "    time.sleep(3600)\n"
            "c = labios.Client()\n"
            f"c.write_async({path!r}, b'y' * 100)\n"
            f"c.write_async({path!r}, b'z' * 50, offset=100)\n"
            f"{holder}"
            "del c\n"
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        assert client.read(path) == b"y" * 100 + b"z" * 50, name


def test_a_forked_child_exits_without_waiting_for_its_parents_client(client, root):
    # The atexit hook runs in a forked child that exits normally too; the
    # parent's client is not the child's to use or wait for (its runtime
    # has no threads there): a call is refused with a clear error, the
    # child exits at once, and the parent's writes land once, when the
    # parent exits. Such a child once hung at exit, waiting on it.
    path = f"{root}/forked"
    script = (
        "import labios, os, sys\n"
        "c = labios.Client()\n"
        f"c.write_async({path!r}, b'p' * 100)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        c.read('/x')\n"
        "        sys.exit(3)\n"
        "    except ValueError as e:\n"
        "        sys.exit(0 if 'connect a new client' in str(e) else 4)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "assert os.waitstatus_to_exitcode(status) == 0, status\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert b"labios: at exit" not in done.stderr, done.stderr
    assert client.read(path) == b"p" * 100


def test_writes_lend_the_buffer(client, root):
    """Zero copy: writing a numpy array allocates no Python-side copy of it
    (tracemalloc sees every Python and numpy allocation, not the client's
    own). A strided view has to be copied once, which shows the measure
    works."""
    size = 8 * 2**20
    data = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
    strided = data[::2]
    tracemalloc.start()
    try:
        client.write(f"{root}/sync", data)
        client.write_async(f"{root}/async", data).wait()
        _, lent_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        client.write(f"{root}/strided", strided)
        _, copied_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lent_peak < size // 16
    assert copied_peak >= strided.nbytes
    assert client.read(f"{root}/async") == data.tobytes()


def test_partial_reads_readinto_and_holes(client, root):
    path = f"{root}/holes.bin"
    client.write(path, b"abc", offset=10)
    assert client.read(path) == bytes(10) + b"abc"
    assert client.read(path, offset=9, size=3) == b"\0ab"
    assert client.read(path, offset=100) == b""

    out = bytearray(8)
    assert client.readinto(path, out, offset=5) == 8
    assert out == bytes(5) + b"abc"
    arr = np.zeros(4, dtype=np.uint16)
    assert client.readinto(path, arr, offset=9) == 4  # the file ends there
    assert arr.tobytes() == b"\0abc" + bytes(4)
    with pytest.raises(TypeError, match="writable"):
        client.readinto(path, b"immutable")


def test_namespace(client, root):
    client.mkdir(f"{root}/d/e")
    client.create(f"{root}/d/f")
    client.write(f"{root}/d/g", b"12345")
    names = sorted(e["name"] for e in client.listdir(f"{root}/d"))
    assert names == [f"{root}/d/e", f"{root}/d/f", f"{root}/d/g"]
    info = client.stat(f"{root}/d/g")
    assert (info["type"], info["size"]) == ("file", 5)
    assert client.stat(f"{root}/d")["type"] == "directory"

    client.truncate(f"{root}/d/g", 2)
    assert client.read(f"{root}/d/g") == b"12"
    client.rename(f"{root}/d/g", f"{root}/d/h")
    assert not client.exists(f"{root}/d/g")
    assert client.read(f"{root}/d/h") == b"12"
    client.flush(f"{root}/d/h")
    client.remove(f"{root}/d/h")
    assert not client.exists(f"{root}/d/h")


def test_threads_share_a_client(client, root):
    """Calls release the interpreter; one client serves many threads."""
    errors = []

    def work(i):
        try:
            data = os.urandom(200_000)
            client.write(f"{root}/t{i}", data)
            assert client.read(f"{root}/t{i}") == data
        except Exception as e:  # reported below, with the thread's number
            errors.append((i, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_missing_file(client, root):
    with pytest.raises(FileNotFoundError, match=f"not found: {root}/missing") as e:
        client.read(f"{root}/missing")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(FileNotFoundError):
        client.stat(f"{root}/missing")
    with pytest.raises(FileNotFoundError):
        client.remove(f"{root}/missing")
    assert not client.exists(f"{root}/missing")


@pytest.mark.parametrize(
    "path, reason",
    [("/../etc/passwd", "escapes the namespace root"), ("", "empty path"), ("/a\0b", "NUL")],
)
def test_invalid_path(client, path, reason):
    with pytest.raises(ValueError, match=f"invalid path .*{reason}"):
        client.write(path, b"x")
    with pytest.raises(ValueError, match=reason):
        client.read(path)


def test_wrong_kinds(client, root):
    client.write(f"{root}/d/f", b"x")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        client.read(f"{root}/d")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        client.listdir(f"{root}/d/f")
    with pytest.raises(OSError, match="not empty") as e:
        client.remove(f"{root}/d")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(FileExistsError):
        client.mkdir(f"{root}/d/f")
    with pytest.raises(TypeError, match="bytes-like"):
        client.write(f"{root}/s", "text is not bytes")


@pytest.fixture
def no_labios_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("LABIOS_"):
            monkeypatch.delenv(k)


def test_connect_errors(tmp_path, no_labios_env):
    with pytest.raises(ConnectionError, match="labios serve"):
        labios.connect(str(tmp_path / "nobody.sock"))


def test_connect_errors_cluster(tmp_path, no_labios_env):
    """A distributed configuration whose NATS server is not there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "cluster.toml"
    config.write_text(
        'deployment = "distributed"\n'
        f'data_dir = "{tmp_path}"\n'
        f'[nats]\nurl = "nats://127.0.0.1:{port}"\n'
        f'[redis]\nurls = ["redis://127.0.0.1:{port}"]\n'
    )
    with pytest.raises(ConnectionError, match=f"cannot reach NATS at nats://127.0.0.1:{port}"):
        labios.connect(config=config)


def test_extended_attributes_and_hints(client, root):
    """Attributes as `os.*xattr` has them, hints among them: a bad hint is
    ValueError naming it, and a file holding data changes only the hints
    of its copies (issue 16)."""
    path = f"{root}/hinted.bin"
    client.write(path, b"")
    client.setxattr(path, "user.owner", b"lab")
    client.setxattr(path, "user.labios.placement", b"collocate:g1")
    assert client.getxattr(path, "user.owner") == b"lab"
    assert sorted(client.listxattr(path)) == ["user.labios.placement", "user.owner"]
    with pytest.raises(ValueError, match="hint replicas"):
        client.setxattr(path, "user.labios.replicas", b"nine")
    with pytest.raises(ValueError, match="no such hint"):
        client.setxattr(path, "user.labios.colour", b"blue")
    client.write(path, b"data")
    with pytest.raises(ValueError, match="the file holds 4 bytes"):
        client.setxattr(path, "user.labios.placement", b"local")
    client.setxattr(path, "user.labios.replicas", b"2")
    client.removexattr(path, "user.owner")
    with pytest.raises(OSError) as e:
        client.getxattr(path, "user.owner")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        client.removexattr(path, "user.owner")
    assert e.value.errno == errno.ENODATA
    assert sorted(client.listxattr(path)) == ["user.labios.placement", "user.labios.replicas"]
    assert client.getxattr(path, "user.labios.placement") == b"collocate:g1"


def test_location_of_a_file(client, root):
    """`locate` and the attribute user.labios.location name the worker,
    tier and host of each extent; a directory has none, and the attribute
    is neither listed nor set."""
    path = f"{root}/located.bin"
    client.write(path, b"x" * 1000)
    (where,) = client.locate(path)
    assert (where["offset"], where["len"]) == (0, 1000)
    assert where["tier"] in ("ram", "nvme", "ssd", "hdd")
    assert where["host"] == socket.gethostname()
    line = f"0 1000 {where['worker']} {where['tier']} {where['host']}\n"
    assert client.getxattr(path, "user.labios.location") == line.encode()
    assert "user.labios.location" not in client.listxattr(path)
    with pytest.raises(ValueError, match="no such hint"):
        client.setxattr(path, "user.labios.location", b"0 1 2 ram h")
    assert client.locate(root) == []
    with pytest.raises(OSError) as e:
        client.getxattr(root, "user.labios.location")
    assert e.value.errno == errno.ENODATA
