"""Real LABIOS deployments for the test session, and a fresh LABIOS
directory per test.

Every test that asks for `deployment` (or `client`) runs twice:

- ``embedded``: one `labios serve` on a temporary data directory; clients
  reach it through its socket (``endpoint``, ``LABIOS_ENDPOINT``).
- ``cluster``: the distributed deployment as README "Deploying on a
  cluster" describes it, on free loopback ports: a real ``nats-server -js``
  and a real ``redis-server``, one TOML file with ``deployment =
  "distributed"``, and ``labios dispatcher``, ``labios manager`` and three
  ``labios worker INDEX`` processes reading it. Clients are given the file
  (``config``, ``LABIOS_CONFIG``) and talk to NATS and Redis directly.

pytest keeps one deployment alive at a time (it orders the tests by
deployment and stops the first before starting the second). During a test
that uses it, the process environment names it and holds no other
``LABIOS_*`` variable, so bare ``labios://`` URLs reach it.

The LABIOS processes are `labios` in $CARGO_TARGET_DIR/debug, else in the
checkout's target/debug (scripts/python-tests.sh builds it). nats-server and
redis-server must be on PATH (`bash scripts/services.sh install`): the
cluster tests fail without them, they are never skipped.
"""

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import fsspec
import pytest

import labios

REPO = Path(__file__).resolve().parents[3]

DEPLOYMENTS = ["embedded", "cluster"]

# The cluster's worker pool: one `labios worker INDEX` process each.
WORKERS = [
    {"tier": "ram", "speed": 5, "energy": 2},
    {"tier": "nvme", "speed": 4, "energy": 2},
    {"tier": "ssd", "speed": 3, "energy": 3},
]

# Longest any one process may take to start, or to stop after SIGTERM.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


def _labios_bin():
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    return target / "debug" / "labios"


def _die_with_parent():
    """In the child before exec: SIGKILL it when pytest dies, so that even
    a killed test run leaves no process behind (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def _clean_env(**extra):
    """The environment of a spawned process: no LABIOS_* setting leaks in
    from the caller's shell (LABIOS_LOG excepted), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABIOS_")}
    env["LABIOS_LOG"] = os.environ.get("LABIOS_LOG", "warn")
    env["NO_COLOR"] = "1"  # plain log lines in the failure reports
    env.update(extra)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, lines=20):
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Proc:
    """A process of a deployment, logging stdout and stderr to its own file."""

    def __init__(self, name, argv, log, env):
        self.name = name
        self.log = Path(log)
        self.terminated = False
        with open(self.log, "wb") as out:
            try:
                self.popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    preexec_fn=_die_with_parent,
                )
            except FileNotFoundError:
                pytest.fail(
                    f"{argv[0]} is not installed (not on PATH): "
                    "run `bash scripts/services.sh install`"
                )

    def exited(self):
        return self.popen.poll()

    def terminate(self):
        self.terminated = True
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def output(self):
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, then SIGKILL after `timeout`; the exit status, or None
        when it had to be killed."""
        if self.popen.poll() is None:
            if not self.terminated:
                self.terminate()
            try:
                return self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
                return None
        return self.popen.returncode


class Deployment:
    """One running deployment: how clients reach it and its processes."""

    def __init__(self, kind, root):
        self.kind = kind
        self.root = Path(root)
        # Arguments of labios.connect and storage options of labios:// URLs.
        self.options = {}
        # The LABIOS_* variables that name it to a bare labios.connect().
        self.env = {}
        # LABIOS processes (checked between tests), then services.
        self.procs = []
        self.services = []
        self.lost = False

    def connect(self):
        return labios.connect(**self.options)

    def logs(self):
        return "\n".join(
            f"--- {p.name} ({p.log}), exit {p.exited()}:\n{_tail(p.log)}"
            for p in self.procs + self.services
        )

    def check_running(self):
        """Fails when a process of the deployment has exited."""
        gone = [f"{p.name} (exit {p.exited()})" for p in self.procs + self.services if p.exited() is not None]
        if gone:
            # The logs once; every later test of this deployment fails too.
            logs = "(logs at the first failure)" if self.lost else self.logs()
            self.lost = True
            pytest.fail(f"{self.kind} deployment lost {', '.join(gone)}:\n{logs}")

    def spawn(self, name, argv, env):
        proc = Proc(name, argv, self.root / f"{name}.log", env)
        self.procs.append(proc)
        return proc

    def spawn_service(self, name, argv):
        proc = Proc(name, argv, self.root / f"{name}.log", _clean_env())
        self.services.append(proc)
        return proc

    def stop(self):
        """Stops every process (LABIOS first, then the services); raises
        when a LABIOS process did not exit cleanly on SIGTERM."""
        unclean = []
        try:
            # All at once: each gets its own STOP_TIMEOUT from here on.
            for p in self.procs:
                p.terminate()
            for p in self.procs:
                status = p.stop()
                if status != 0:
                    unclean.append(f"{p.name}: {'killed' if status is None else f'exit {status}'}")
        finally:
            for p in self.services:
                p.stop()
        if unclean:
            raise AssertionError(
                f"{self.kind}: processes did not stop cleanly on SIGTERM: {unclean}\n{self.logs()}"
            )


def _wait(what, ready, procs, deployment, timeout=START_TIMEOUT):
    """Polls `ready()` until it holds; fails when one of `procs` exits or
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = ready()
        if result:
            return result
        gone = [f"{p.name} (exit {p.exited()})" for p in procs if p.exited() is not None]
        if gone:
            pytest.fail(f"{', '.join(gone)} exited while waiting for {what}:\n{deployment.logs()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s:\n{deployment.logs()}")
        time.sleep(0.05)


def _listening(port, redis=False):
    """Whether 127.0.0.1:port accepts connections (Redis: answers PING)."""

    def ready():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if not redis:
                    return True
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    return ready


def _start_embedded(d, binary):
    serve = d.spawn("serve", [str(binary), "serve", "--data-dir", str(d.root / "data")], _clean_env())
    endpoint = _wait(
        "labios serve to listen",
        lambda: (m := re.search(r"listening on (\S+)", serve.output())) and m.group(1),
        [serve],
        d,
    )
    d.options = {"endpoint": endpoint}
    d.env = {"LABIOS_ENDPOINT": endpoint}


def _cluster_toml(data_dir, nats_port, redis_port):
    lines = [
        'deployment = "distributed"',
        f'data_dir = "{data_dir}"',
        "",
        "[nats]",
        f'url = "nats://127.0.0.1:{nats_port}"',
        "",
        "[redis]",
        f'urls = ["redis://127.0.0.1:{redis_port}"]',
        f"max_bytes = {256 << 20}",
        "",
        "[client]",
        "# A label lost in the cluster fails its test within 2 minutes rather",
        "# than the default 10.",
        "wait_timeout_ms = 120000",
    ]
    for w in WORKERS:
        lines += [
            "",
            "[[workers]]",
            f'tier = "{w["tier"]}"',
            f'speed = {w["speed"]}',
            f'energy = {w["energy"]}',
            f"capacity = {64 << 30}",
        ]
    return "\n".join(lines) + "\n"


def _registered_workers(binary, config, env):
    """Worker ids `labios status` lists (it reads the inventory in Redis)."""
    out = subprocess.run(
        [str(binary), "status", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if out.returncode != 0:
        return set()
    return {int(line.split()[0]) for line in out.stdout.splitlines() if re.match(r"\s*\d+\s", line)}


def _start_cluster(d, binary):
    for tool in ("nats-server", "redis-server"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (not on PATH): run `bash scripts/services.sh install`")
    nats_port, redis_port = _free_port(), _free_port()
    (d.root / "nats").mkdir()
    (d.root / "redis").mkdir()
    nats = d.spawn_service(
        "nats-server",
        ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(nats_port), "-sd", str(d.root / "nats")],
    )
    redis = d.spawn_service(
        "redis-server",
        [
            "redis-server",
            "--port", str(redis_port),
            "--bind", "127.0.0.1",
            "--dir", str(d.root / "redis"),
            "--appendonly", "yes",
            "--save", "",
            "--daemonize", "no",
        ],
    )  # fmt: skip
    _wait(f"nats-server on port {nats_port}", _listening(nats_port), [nats], d)
    _wait(f"redis-server on port {redis_port}", _listening(redis_port, redis=True), [redis], d)

    config = d.root / "cluster.toml"
    config.write_text(_cluster_toml(d.root / "data", nats_port, redis_port))
    env = _clean_env()

    def labios_proc(name, *args):
        # Subcommand first: `pgrep -af 'labios (worker|...)'` finds them.
        return d.spawn(name, [str(binary), *args, "--config", str(config)], env)

    # Workers first: a dispatcher loads the pool from Redis when it starts
    # and fails labels with "no workers" while its view is empty.
    workers = [labios_proc(f"worker{i}", "worker", str(i)) for i in range(len(WORKERS))]
    for i, w in enumerate(workers):
        _wait(f"labios worker {i} to start", lambda i=i, w=w: f"labios worker {i}:" in w.output(), d.procs, d)
    want = set(range(len(WORKERS)))
    _wait(
        f"workers {sorted(want)} registered (labios status)",
        lambda: want <= _registered_workers(binary, config, env),
        d.procs,
        d,
    )
    dispatcher = labios_proc("dispatcher", "dispatcher")
    manager = labios_proc("manager", "manager")
    _wait("labios dispatcher to serve", lambda: "labios dispatcher: serving" in dispatcher.output(), d.procs, d)
    _wait("labios manager to watch the workers", lambda: "labios manager: watching" in manager.output(), d.procs, d)

    d.options = {"config": str(config)}
    d.env = {"LABIOS_CONFIG": str(config)}
    # End to end: a first write and read through every component.
    with d.connect() as c:
        c.write("/pytest-ready", b"ready")
        assert c.read("/pytest-ready") == b"ready"
        c.remove("/pytest-ready")


@pytest.fixture(scope="session", params=DEPLOYMENTS)
def labios_deployment(request, tmp_path_factory):
    """The deployment of this parameter, for the rest of the session (or
    until pytest moves on to the other one)."""
    binary = _labios_bin()
    if not binary.is_file():
        pytest.fail(f"no labios binary at {binary}: run `cargo build -p labios`")
    d = Deployment(request.param, tmp_path_factory.mktemp(request.param))
    try:
        if d.kind == "embedded":
            _start_embedded(d, binary)
        else:
            _start_cluster(d, binary)
        yield d
    finally:
        d.stop()


@pytest.fixture
def deployment(labios_deployment, monkeypatch):
    """The session's deployment, checked before and after the test (a
    process that exited fails it, with the logs). Meanwhile the environment
    names this deployment and holds no other LABIOS_* variable, so that a
    bare `labios.connect()` or `labios://` URL reaches it."""
    d = labios_deployment
    d.check_running()
    for k in list(os.environ):
        if k.startswith("LABIOS_"):
            monkeypatch.delenv(k)
    for k, v in d.env.items():
        monkeypatch.setenv(k, v)
    # fsspec caches filesystems by their arguments: one made from the
    # environment of the other deployment must not be reused.
    fsspec.get_filesystem_class("labios").clear_instance_cache()
    yield d
    d.check_running()


@pytest.fixture
def labios_cli(deployment):
    """Runs the `labios` command against the deployment (the environment
    names it); returns its standard output."""

    def run(*args):
        done = subprocess.run(
            [str(_labios_bin()), *args], capture_output=True, text=True, env=dict(os.environ), timeout=60
        )
        assert done.returncode == 0, f"labios {args} failed ({done.returncode}): {done.stderr}"
        return done.stdout

    return run


@pytest.fixture
def client(deployment):
    with deployment.connect() as c:
        yield c


@pytest.fixture
def root():
    """A LABIOS directory of this test's own (not created yet)."""
    return f"/pytest/{uuid.uuid4().hex[:12]}"
