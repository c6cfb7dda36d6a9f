"""Software-defined storage from Python: pipelines run at the workers."""

import hashlib
import json
import zlib

import numpy as np
import pytest

UPPER = b"""(module
  (memory (export "memory") 1)
  (func (export "labios_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "labios_run") (param $in i32) (param $len i32) (param i32 i32) (result i64)
    (local $i i32) (local $c i32)
    (block $done (loop $each
      (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
      (local.set $c (i32.load8_u (i32.add (local.get $in) (local.get $i))))
      (if (i32.lt_u (i32.sub (local.get $c) (i32.const 97)) (i32.const 26))
        (then (i32.store8 (i32.add (local.get $in) (local.get $i))
                          (i32.sub (local.get $c) (i32.const 32)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $each)))
    (i64.or (i64.shl (i64.extend_i32_u (local.get $in)) (i64.const 32))
            (i64.extend_i32_u (local.get $len)))))"""


def test_in_situ_median_and_stats_of_a_numpy_array(client, root):
    values = np.random.default_rng(7).integers(-10**9, 10**9, size=200_001, dtype=np.int64)
    client.write(f"{root}/v.i64", values)
    assert json.loads(client.query(f"{root}/v.i64", "median:dtype=i64")) == int(np.median(values))
    stats = json.loads(client.query(f"{root}/v.i64", "stats:dtype=i64"))
    assert stats["count"] == values.size
    assert stats["min"] == int(values.min()) and stats["max"] == int(values.max())


def test_write_through_compresses_at_the_worker(client, root):
    data = b"labios " * 50_000
    client.write_through(f"{root}/d.gz", data, "gzip:level=9").wait()
    stored = client.read(f"{root}/d.gz")
    assert len(stored) < len(data) // 20
    assert zlib.decompress(stored, 16 + zlib.MAX_WBITS) == data
    assert client.query(f"{root}/d.gz", "gunzip") == data


def test_user_function_is_private_and_checked(client, root):
    client.register_function("upper", UPPER)
    assert "upper" in client.functions()
    client.write(f"{root}/t.txt", b"hello")
    assert client.query(f"{root}/t.txt", "upper|sha256").decode() == hashlib.sha256(b"HELLO").hexdigest()
    assert client.query(f"{root}/t.txt", "upper") == b"HELLO"
    with pytest.raises(ValueError, match="not valid WebAssembly"):
        client.register_function("broken", b"(module")
    with pytest.raises(ValueError, match="nosuch"):
        client.query(f"{root}/t.txt", "nosuch")
    client.remove_function("upper")
    assert "upper" not in client.functions()
