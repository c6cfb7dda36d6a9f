"""A real `labios serve` for the whole test session, on a temporary data
directory, and a fresh LABIOS directory per test.

The server is `labios` in $CARGO_TARGET_DIR/debug, else in the checkout's
target/debug (scripts/python-tests.sh builds it).
"""

import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import labios

REPO = Path(__file__).resolve().parents[3]


def _labios_bin():
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    return target / "debug" / "labios"


@pytest.fixture(scope="session")
def labios_endpoint(tmp_path_factory):
    """Endpoint of a `labios serve` that lives for the test session; it is
    also LABIOS_ENDPOINT meanwhile, so bare `labios://` URLs reach it."""
    binary = _labios_bin()
    if not binary.is_file():
        pytest.fail(f"no labios binary at {binary}: run `cargo build -p labios`")
    data = tmp_path_factory.mktemp("labios")
    log = open(data / "serve.log", "w+")
    server = subprocess.Popen(
        [str(binary), "serve", "--data-dir", str(data / "data")],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith("LABIOS_")},
    )
    try:
        endpoint = _wait_listening(server, log)
        saved = os.environ.get("LABIOS_ENDPOINT")
        os.environ["LABIOS_ENDPOINT"] = endpoint
        yield endpoint
        if saved is None:
            del os.environ["LABIOS_ENDPOINT"]
        else:
            os.environ["LABIOS_ENDPOINT"] = saved
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _wait_listening(server, log, timeout=60.0):
    """The socket path `labios serve` prints once it accepts clients."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log.seek(0)
        found = re.search(r"listening on (\S+)", log.read())
        if found:
            return found.group(1)
        if server.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    pytest.fail(f"labios serve did not start (exit {server.poll()}):\n{log.read()}")


@pytest.fixture
def client(labios_endpoint):
    with labios.connect(labios_endpoint) as c:
        yield c


@pytest.fixture
def root():
    """A LABIOS directory of this test's own (not created yet)."""
    return f"/pytest/{uuid.uuid4().hex[:12]}"
