"""`labios://` through fsspec: registration, file objects, pandas, pyarrow
and xarray, and fsspec's own abstract filesystem tests, each against both
deployments (conftest.py: `labios serve`, and a cluster of NATS, Redis and
LABIOS processes)."""

import os
import subprocess
import sys
import uuid

import fsspec
import fsspec.tests.abstract as abstract
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
import xarray as xr

from labios.fsspec import LabiosFileSystem


@pytest.fixture
def fs(deployment):
    return fsspec.filesystem("labios", **deployment.options)


def test_registered_through_entry_point(deployment):
    # A fresh interpreter that never imports labios itself; it finds the
    # deployment in the environment (LABIOS_ENDPOINT or LABIOS_CONFIG).
    code = "import fsspec; print(fsspec.url_to_fs('labios:///x')[0].__class__.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "labios.fsspec"


def test_paths():
    strip = LabiosFileSystem._strip_protocol
    assert strip("labios:///a/b/") == "/a/b"
    assert strip("labios://a/b") == "/a/b"
    assert strip("labios://") == "/"
    assert strip("/a") == "/a"


def test_file_objects(fs, root):
    path = f"{root}/blocks.bin"
    data = os.urandom(300_000)
    # Small blocks: every 64 KiB is published asynchronously before close.
    with fs.open(f"labios://{path}", "wb", block_size=64 * 1024) as f:
        for i in range(0, len(data), 10_000):
            f.write(data[i : i + 10_000])
    assert fs.cat_file(path) == data
    assert fs.size(path) == len(data)

    with fs.open(path, "rb", block_size=50_000) as f:
        f.seek(123_456)
        assert f.read(1000) == data[123_456:124_456]
        f.seek(-10, 2)
        assert f.read() == data[-10:]

    assert fs.cat_file(path, start=-5) == data[-5:]
    assert fs.cat_file(path, start=10, end=-10) == data[10:-10]
    assert fs.cat_file(path, start=299_990, end=400_000) == data[299_990:]

    with fs.open(path, "ab") as f:
        f.write(b"tail")
    assert fs.cat_file(path) == data + b"tail"

    with fs.open(path, "wb") as f:  # rewriting truncates
        f.write(b"short")
    assert fs.cat_file(path) == b"short"

    fs.write_text(f"{root}/t.txt", "h\u00e9llo\nworld\n", encoding="utf-8")
    with fs.open(f"{root}/t.txt", "r", encoding="utf-8") as f:
        assert f.readlines() == ["h\u00e9llo\n", "world\n"]


def test_namespace(fs, root):
    fs.makedirs(f"{root}/a/b")
    with pytest.raises(FileExistsError):
        fs.makedirs(f"{root}/a/b")
    fs.makedirs(f"{root}/a/b", exist_ok=True)
    with pytest.raises(FileNotFoundError):
        fs.mkdir(f"{root}/x/y", create_parents=False)
    fs.pipe(f"{root}/a/f", b"123")
    assert fs.ls(f"{root}/a", detail=False) == [f"{root}/a/b", f"{root}/a/f"]
    assert fs.find(root) == [f"{root}/a/f"]
    assert fs.isdir(f"{root}/a") and fs.isfile(f"{root}/a/f")
    assert fs.modified(f"{root}/a/f") >= fs.created(f"{root}/a/f")

    fs.mv(f"{root}/a/f", f"{root}/a/b/")
    assert fs.cat(f"{root}/a/b/f") == b"123"
    assert not fs.exists(f"{root}/a/f")
    with pytest.raises(OSError):
        fs.rmdir(f"{root}/a/b")  # not empty
    fs.rm(root, recursive=True)
    assert not fs.exists(root)

    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/missing", "rb")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{root}/missing")
    with pytest.raises(NotImplementedError, match="transactions"):
        with fs.transaction:
            fs.pipe(f"{root}/t", b"x")


def _frame():
    n = 1000
    return pd.DataFrame(
        {
            "i": np.arange(n, dtype=np.int64),
            "x": np.linspace(0, 1, n),
            "s": [f"row {i}" for i in range(n)],
            "t": pd.date_range("2024-01-01", periods=n, freq="min"),
            "c": pd.Categorical(["a", "b", "c", "d"] * (n // 4)),
        }
    )


def test_pandas_parquet_round_trip(deployment, root):
    # Bare URLs: the filesystem comes from the registry, the deployment from
    # LABIOS_ENDPOINT or LABIOS_CONFIG.
    df = _frame()
    url = f"labios://{root}/df.parquet"
    df.to_parquet(url)
    pd.testing.assert_frame_equal(pd.read_parquet(url), df)


def test_pandas_csv_round_trip(deployment, root):
    df = _frame()[["i", "x", "s"]]
    url = f"labios://{root}/df.csv.gz"
    df.to_csv(url, index=False, storage_options=deployment.options)
    back = pd.read_csv(url, storage_options=deployment.options)
    pd.testing.assert_frame_equal(back, df)


def test_pyarrow_dataset(fs, root):
    table = pa.table(
        {
            "year": np.repeat([2022, 2023, 2024], 400),
            "v": np.arange(1200, dtype=np.float64),
        }
    )
    pads.write_dataset(
        table,
        f"{root}/ds",
        filesystem=fs,
        format="parquet",
        partitioning=["year"],
        partitioning_flavor="hive",
    )
    assert sorted(fs.ls(f"{root}/ds", detail=False)) == [
        f"{root}/ds/year=2022",
        f"{root}/ds/year=2023",
        f"{root}/ds/year=2024",
    ]
    dataset = pads.dataset(f"{root}/ds", filesystem=fs, format="parquet", partitioning="hive")
    back = dataset.to_table().sort_by("v")
    assert back.column("v").equals(table.column("v"))
    assert back.column("year").to_pylist() == table.column("year").to_pylist()
    part = dataset.to_table(filter=pads.field("year") == 2023)
    assert part.num_rows == 400


def test_xarray_zarr_round_trip(deployment, root):
    ds = xr.Dataset(
        {"temperature": (("time", "x"), np.random.default_rng(0).normal(size=(24, 50)))},
        coords={"time": pd.date_range("2024-01-01", periods=24, freq="h"), "x": np.arange(50)},
        attrs={"source": "labios"},
    )
    url = f"labios://{root}/ds.zarr"
    ds.to_zarr(url, mode="w", consolidated=False)
    xr.testing.assert_identical(xr.open_zarr(url, consolidated=False).load(), ds)


# ---- fsspec's abstract filesystem tests ----------------------------------
# On both deployments too: on a 2-core machine the cluster adds about 25 s.


class LabiosFixtures(abstract.AbstractFixtures):
    @pytest.fixture
    def fs(self, deployment):
        return LabiosFileSystem(**deployment.options)

    @pytest.fixture
    def fs_path(self):
        return f"/fsspec/{uuid.uuid4().hex[:12]}"


class TestLabiosCopy(abstract.AbstractCopyTests, LabiosFixtures):
    pass


class TestLabiosGet(abstract.AbstractGetTests, LabiosFixtures):
    pass


class TestLabiosPut(abstract.AbstractPutTests, LabiosFixtures):
    pass


class TestLabiosOpen(abstract.AbstractOpenTests, LabiosFixtures):
    pass


class TestLabiosPipe(abstract.AbstractPipeTests, LabiosFixtures):
    pass


def test_attributes_and_hints_gcsfs_style(fs, root):
    path = f"labios://{root}/hinted.csv"
    fs.touch(path)
    fs.setxattrs(path, **{"user.labios.placement": "scatter:2", "user.owner": "lab"})
    assert fs.getxattr(path, "user.labios.placement") == "scatter:2"
    with pytest.raises(ValueError, match="hint placement"):
        fs.setxattrs(path, **{"user.labios.placement": "everywhere"})
    fs.setxattrs(path, **{"user.owner": None})
    with pytest.raises(OSError):
        fs.getxattr(path, "user.owner")
