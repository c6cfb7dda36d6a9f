"""Administration from Python: a running worker's I/O stack changes
(README "Worker I/O stacks"), only as the service, on both deployments."""

import pytest


def _stack_of(labios_cli, worker):
    status = labios_cli("status")
    for line in status.splitlines():
        fields = line.split()
        if fields and fields[0] == str(worker):
            return fields[-1]
    raise AssertionError(f"no worker {worker} in:\n{status}")


def test_set_stack_changes_a_running_workers_stack(deployment, labios_cli, monkeypatch, tmp_path, root):
    if deployment.kind == "embedded":
        # Only the service may: a client whose data directory holds no
        # service secret is refused. (The test cluster's NATS and Redis
        # take no credentials, so there every client is the service.)
        monkeypatch.setenv("LABIOS_DATA_DIR", str(tmp_path))
        with deployment.connect() as c:
            with pytest.raises(PermissionError, match="only the service changes stacks"):
                c.set_stack(1, "checksum,file")
        # Where `labios serve` keeps the service's secret.
        monkeypatch.setenv("LABIOS_DATA_DIR", str(deployment.root / "data"))
    data = bytes(range(256)) * 4096
    with deployment.connect() as c:
        c.write(f"{root}/before", data)
        try:
            c.set_stack(1, "checksum,zstd,file")
            assert _stack_of(labios_cli, 1) == "checksum,zstd,file"
            c.write(f"{root}/after", data)
            assert c.read(f"{root}/before") == data
            assert c.read(f"{root}/after") == data
            with pytest.raises(ValueError, match='unknown layer "snappy"'):
                c.set_stack(1, "snappy,file")
            with pytest.raises(ValueError, match="a running worker changes its layers, not its backend"):
                c.set_stack(1, "kv")
            with pytest.raises(FileNotFoundError, match="no worker 9"):
                c.set_stack(9, "file")
        finally:
            c.set_stack(1, "file")
        assert _stack_of(labios_cli, 1) == "file"
        assert c.read(f"{root}/after") == data

