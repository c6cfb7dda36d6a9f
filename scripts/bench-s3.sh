#!/usr/bin/env bash
# The S3 gateway against a real S3 server (issues 6 and 15):
# PutObject and GetObject of 64 KiB and 1 MiB objects, multipart uploads
# of 16 MiB objects (two 8 MiB parts) read back whole, through `labios s3`
# and through versitygw (the S3 server of the tests, a gateway over a local
# directory), side by side in one run, with the same boto3 clients, plus the
# raw baseline of the same run: the same bytes written as files and read
# back by the same Python process, straight to and from the same file
# system (/var/tmp, where both servers keep their data too).
#
# For each object size, 1 and 8 client threads (one boto3 client each,
# path-style addressing, no retries, a connection opened before the clock
# starts; versitygw answers `Connection: close`, so against it boto3
# reconnects for every request): N objects are PUT, then the same N are GET (hot cache:
# just written), then compared with what was PUT (untimed), then deleted
# (untimed). Throughput is N over the wall time of the phase; latencies are
# per request. Targets run in a rotating order, ROUNDS times; medians.
# Before each group the script waits until the rest of the machine is idle
# (other processes' CPU under 0.3 of a core for 2 s); the CPU time each
# process used during each phase is recorded (client, servers, and the rest
# of the machine, including kernel writeback threads).
#
# Durability, so that the baseline matches: a PUT to either server returns
# with the bytes in the page cache (LABIOS: labels complete; versitygw: file
# written and renamed, no fsync), so the baseline `raw` is open/write/close
# without fsync; `raw+fsync` (one fsync per file) is shown for reference.
#
# Listing: N_LIST objects of 1 KiB under one prefix (PUT untimed), then
# ListObjectsV2 of all of them, 1,000 keys a page as boto3's paginator
# asks, three times per round, through boto3 (what a user's program sees,
# with botocore's parsing of each page's XML) and as plain HTTP GETs of
# SigV4-presigned URLs (the server's time: only the continuation token is
# read from each page); the raw baseline lists the same number of files of
# one directory with their sizes (scandir + stat, what `ls -l` does).
#
# Prints a table and appends JSON lines to benchmarks/DATE-s3.jsonl.
#
#   bash scripts/bench-s3.sh [ROUNDS] [N_64KIB] [N_1MIB] [N_16MIB] [N_LIST]
#
# BENCH_QUIET_WAIT=S waits at most S seconds (default 1200) for a quiet
# machine before each group. BENCH_LABIOS_BIN=path skips the build and uses
# that binary (not LABIOS_*: those variables are configuration overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"
ROUNDS="${1:-3}" N_SMALL="${2:-3000}" N_LARGE="${3:-1000}" N_MULTI="${4:-48}" N_LIST="${5:-10000}"
VENV="${PYTHON_VENV:-/var/tmp/labios-venv}"
COMMAND="bash scripts/bench-s3.sh${*:+ $*}"

bash scripts/services.sh install >/dev/null
[ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import boto3' 2>/dev/null \
    || bash scripts/python-tests.sh --collect-only -q >/dev/null
if [ -n "${BENCH_LABIOS_BIN:-}" ]; then
    BIN="$BENCH_LABIOS_BIN"
else
    cargo build --release -p labios
    BIN="$CARGO_TARGET_DIR/release/labios"
fi

. scripts/bench-site.sh
start_site bench-s3 s3-bench

cat >"$WORK/bench.py" <<'PY'
import datetime, json, os, platform, re, shutil, statistics, subprocess, sys, threading, time
import urllib.request
import boto3, botocore
from botocore.config import Config

(work, command, labios_url, key, secret, vport, rounds, n_small, n_large, n_multi, n_list,
 serve_pid, s3_pid, vgw_pid, binary) = sys.argv[1:16]
rounds, n_small, n_large, n_multi, n_list = int(rounds), int(n_small), int(n_large), int(n_multi), int(n_list)
# Objects from MULTIPART up are uploaded in parts of PART bytes.
MULTIPART, PART = 16 << 20, 8 << 20
SIZES = [(64 << 10, n_small), (1 << 20, n_large), (MULTIPART, n_multi)]
LISTINGS = 3
THREADS = [1, 8]
TARGETS = ["labios", "versitygw", "raw", "raw+fsync"]
SERVERS = {"labios": [int(serve_pid), int(s3_pid)], "versitygw": [int(vgw_pid)]}
ENDPOINTS = {"labios": (labios_url, key, secret),
             "versitygw": (f"http://127.0.0.1:{vport}", "benchkey", "benchsecret123")}
BUCKET = "bench"
TICK = os.sysconf("SC_CLK_TCK")

def client(target, signature=None):
    url, k, s = ENDPOINTS[target]
    return boto3.session.Session().client(
        "s3", endpoint_url=url, aws_access_key_id=k, aws_secret_access_key=s,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1},
                      signature_version=signature))

def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

def machine_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / TICK

def cpu_snapshot(target):
    return (time.process_time(), sum(proc_cpu(p) for p in SERVERS.get(target, [])), machine_busy())

def wait_quiet(limit=int(os.environ.get("BENCH_QUIET_WAIT", 1200))):
    """Waits until the rest of the machine uses under 0.3 CPU (we are idle)."""
    t0 = time.monotonic()
    while True:
        b = machine_busy(); time.sleep(2); busy = (machine_busy() - b) / 2
        if busy < 0.3 or time.monotonic() - t0 > limit:
            return busy
        print(f"  (machine busy: {busy:.2f} CPU used by others; waiting)", flush=True)
        time.sleep(20)

def run_phase(target, op, size, threads, keys, bodies, got):
    """Times one phase; returns (wall seconds, latencies, cpu dict)."""
    n = len(keys)
    lat = [0.0] * n
    if target.startswith("raw"):
        sync = target == "raw+fsync"
        def work_on(idx):
            for i in idx:
                t = time.perf_counter()
                if op == "put":
                    with open(keys[i], "wb") as f:
                        f.write(bodies[i])
                        if sync:
                            os.fsync(f.fileno())
                else:
                    with open(keys[i], "rb") as f:
                        got[i] = f.read()
                lat[i] = time.perf_counter() - t
        workers = [None] * threads
    else:
        clients = [client(target) for _ in range(threads)]
        for c in clients:  # open the keep-alive connection before the clock
            c.head_bucket(Bucket=BUCKET)
        def work_on(idx, c):
            for i in idx:
                t = time.perf_counter()
                if op == "put" and size >= MULTIPART:
                    put_multipart(c, keys[i], bodies[i])
                elif op == "put":
                    c.put_object(Bucket=BUCKET, Key=keys[i], Body=bodies[i])
                else:
                    got[i] = c.get_object(Bucket=BUCKET, Key=keys[i])["Body"].read()
                lat[i] = time.perf_counter() - t
        workers = clients
    slices = [range(j, n, threads) for j in range(threads)]
    start = threading.Barrier(threads + 1)
    errors = []
    def body(j):
        start.wait()
        try:
            if workers[j] is None:
                work_on(slices[j])
            else:
                work_on(slices[j], workers[j])
        except Exception as e:  # reported after the phase
            errors.append(e)
    ts = [threading.Thread(target=body, args=(j,)) for j in range(threads)]
    for t in ts:
        t.start()
    c0 = cpu_snapshot(target)
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    c1 = cpu_snapshot(target)
    if errors:
        raise errors[0]
    client_cpu, server_cpu, busy = (b - a for a, b in zip(c0, c1))
    cpu = {"client_cpu_s": client_cpu, "server_cpu_s": server_cpu,
           "other_cpu_s": max(0.0, busy - client_cpu - server_cpu)}
    return wall, lat, cpu

def put_multipart(c, key, body):
    up = c.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    parts = [{"PartNumber": n + 1, "ETag": c.upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=n + 1,
                                                         Body=body[at:at + PART])["ETag"]}
             for n, at in enumerate(range(0, len(body), PART))]
    c.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up, MultipartUpload={"Parts": parts})

def size_name(size):
    return f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"

def list_http(signer, n):
    """Lists the prefix page by page with plain GETs; returns what was listed."""
    seen, token = [], None
    while True:
        params = {"Bucket": BUCKET, "Prefix": "listing/", **({"ContinuationToken": token} if token else {})}
        with urllib.request.urlopen(signer.generate_presigned_url("list_objects_v2", Params=params)) as r:
            page = r.read().decode()
        seen += [(k, int(size)) for k, size in re.findall(r"<Key>([^<]*)</Key>.*?<Size>(\d+)</Size>", page)]
        token = re.search(r"<NextContinuationToken>([^<]*)<", page)
        if not token:
            return seen
        token = token.group(1)

def listing(target, n):
    """Times LISTINGS listings of n entries each way; returns {way: [wall times]}."""
    if target == "raw":
        d = os.path.join(work, "raw", "listing")
        os.makedirs(d)
        for i in range(n):
            with open(os.path.join(d, f"o{i:05d}"), "wb") as f:
                f.write(b"x" * 1024)
    else:
        c = client(target)
        keys = [f"listing/o{i:05d}" for i in range(n)]
        def put(idx):
            cc = client(target)
            for i in idx:
                cc.put_object(Bucket=BUCKET, Key=keys[i], Body=b"x" * 1024)
        ts = [threading.Thread(target=put, args=(range(j, n, 8),)) for j in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        c.head_bucket(Bucket=BUCKET)
    if target == "raw":
        ways = {"list": lambda: [(e.name, e.stat().st_size) for e in os.scandir(d)]}
    else:
        signer = client(target, "s3v4")
        ways = {"list": lambda: [(o["Key"], o["Size"])
                                 for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="listing/")
                                 for o in page.get("Contents", [])],
                "list-http": lambda: list_http(signer, n)}
    walls = {}
    for way, run in ways.items():
        for _ in range(LISTINGS):
            t0 = time.perf_counter()
            seen = run()
            walls.setdefault(way, []).append(time.perf_counter() - t0)
            assert len(seen) == n and all(size == 1024 for _, size in seen), f"{target} {way}: {len(seen)} of {n} listed"
    if target == "raw":
        shutil.rmtree(d)
    else:
        cleanup(target, keys)
    return walls

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]

def cleanup(target, keys):
    if target.startswith("raw"):
        shutil.rmtree(os.path.dirname(keys[0]))
        return
    c = client(target)
    for j in range(0, len(keys), 1000):
        out = c.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[j:j + 1000]], "Quiet": True})
        assert not out.get("Errors"), out["Errors"][:3]

def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "?"

cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem_gib = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) / (1 << 20)
dirty = git("status", "--porcelain", "--untracked-files=no", "--", "crates", "Cargo.toml", "Cargo.lock")
meta = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": f"{os.cpu_count()} x {cpu_model}, {mem_gib:.0f} GiB, {platform.system()} {platform.release()}",
    "command": command,
    "commit": git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if dirty not in ("", "?") else ""),
    "binary": binary,
    "boto3": boto3.__version__, "botocore": botocore.__version__,
    "filesystem": subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", work], capture_output=True, text=True).stdout.strip(),
    "loadavg_start": open("/proc/loadavg").read().split()[:3],
}
for t in ENDPOINTS:
    client(t).create_bucket(Bucket=BUCKET)

os.makedirs("benchmarks", exist_ok=True)
out_path = f"benchmarks/{meta['date'][:10]}-s3.jsonl"
rows = []
with open(out_path, "a") as out:
    for r in range(rounds):
        for size, n in SIZES:
            # The same bytes for every target: distinct per object.
            base = os.urandom(size)
            bodies = [i.to_bytes(8, "little") + base[8:] for i in range(n)]
            for threads in THREADS:
                others = wait_quiet()
                order = TARGETS[r % len(TARGETS):] + TARGETS[:r % len(TARGETS)]
                for target in order:
                    if target.startswith("raw"):
                        d = os.path.join(work, "raw", f"r{r}-{size}-{threads}-{target}")
                        os.makedirs(d)
                        keys = [os.path.join(d, f"o{i:05d}") for i in range(n)]
                    else:
                        keys = [f"r{r}/{size}/{threads}/o{i:05d}" for i in range(n)]
                    for op in ("put", "get"):
                        if op == "get" and target == "raw+fsync":
                            continue  # the same reads as raw
                        os.sync()  # no writeback of an earlier phase in this one
                        got = [None] * n
                        wall, lat, cpu = run_phase(target, op, size, threads, keys, bodies, got)
                        if op == "get":
                            bad = [i for i in range(n) if got[i] != bodies[i]]
                            assert not bad, f"{target}: {len(bad)} objects differ from what was PUT, e.g. {keys[bad[0]]}"
                        del got
                        row = {"round": r, "target": target, "op": op, "size": size, "threads": threads,
                               "objects": n, "wall_s": wall, "objects_per_s": n / wall,
                               "mib_per_s": n * size / (1 << 20) / wall,
                               "p50_ms": pct(lat, 0.50) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
                               "mean_ms": statistics.fmean(lat) * 1e3,
                               **cpu, "others_before_cpu": others, "verified": op == "get"}
                        rows.append(row)
                        out.write(json.dumps({**meta, **row}) + "\n")
                        out.flush()
                        print(f"round {r} {size_name(size):>4} x{threads} {target:10} {op}: "
                              f"{row['objects_per_s']:8.1f} obj/s {row['mib_per_s']:7.1f} MiB/s "
                              f"p50 {row['p50_ms']:7.2f} ms p99 {row['p99_ms']:7.2f} ms "
                              f"cpu client {cpu['client_cpu_s']:.2f} s server {cpu['server_cpu_s']:.2f} s other {cpu['other_cpu_s']:.2f} s",
                              flush=True)
                    cleanup(target, keys)
        others = wait_quiet()
        for target in ("labios", "versitygw", "raw"):
            for way, walls in listing(target, n_list).items():
                for wall in walls:
                    row = {"round": r, "target": target, "op": way, "objects": n_list, "wall_s": wall,
                           "objects_per_s": n_list / wall, "others_before_cpu": others, "verified": True}
                    rows.append(row)
                    out.write(json.dumps({**meta, **row}) + "\n")
                    print(f"round {r} {way} {n_list} x {target:10}: {wall:.3f} s", flush=True)
    meds = {}
    for target in TARGETS:
        for size, n in SIZES:
            for threads in THREADS:
                for op in ("put", "get"):
                    rs = [x for x in rows if (x["target"], x.get("size"), x.get("threads"), x["op"]) == (target, size, threads, op)]
                    if not rs:
                        continue
                    m = {k: statistics.median(x[k] for x in rs)
                         for k in ("objects_per_s", "mib_per_s", "p50_ms", "p99_ms", "mean_ms",
                                   "client_cpu_s", "server_cpu_s", "other_cpu_s")}
                    m.update(target=target, size=size, threads=threads, op=op, objects=n,
                             rounds=len(rs), kind="median")
                    meds[(target, size, threads, op)] = m
                    out.write(json.dumps({**meta, **m}) + "\n")
        for way in ("list", "list-http"):
            rs = [x["wall_s"] for x in rows if (x["target"], x["op"]) == (target, way)]
            if rs:
                meds[(target, way)] = {"target": target, "op": way, "objects": n_list, "kind": "median",
                                       "listings": len(rs), "wall_s": statistics.median(rs)}
                out.write(json.dumps({**meta, **meds[(target, way)]}) + "\n")

print(f"\n{command}\n{meta['machine']}, {meta['filesystem']}; commit {meta['commit']}; boto3 {meta['boto3']}")
print(f"median of {rounds} rounds; objects: {n_small} x 64 KiB, {n_large} x 1 MiB, {n_multi} x 16 MiB "
      f"(multipart, {PART >> 20} MiB parts); raw = open/write/close (no fsync)\n")
head = f"{'size':>6} {'thr':>3} {'op':4} |"
for t in ("labios", "versitygw", "raw", "raw+fsync"):
    head += f" {t + ' obj/s':>16} {'MiB/s':>7} {'p50 ms':>7} {'p99 ms':>7} |"
print(head + " labios/versitygw")
for size, n in SIZES:
    for threads in THREADS:
        for op in ("put", "get"):
            line = f"{size_name(size):>6} {threads:3d} {op:4} |"
            for t in ("labios", "versitygw", "raw", "raw+fsync"):
                m = meds.get((t, size, threads, op))
                line += (f" {m['objects_per_s']:16.1f} {m['mib_per_s']:7.1f} {m['p50_ms']:7.2f} {m['p99_ms']:7.2f} |"
                         if m else f" {'—':>16} {'':7} {'':7} {'':7} |")
            ratio = meds[("labios", size, threads, op)]["objects_per_s"] / meds[("versitygw", size, threads, op)]["objects_per_s"]
            print(line + f" {ratio:.2f}")
print("\nCPU per object (ms; median of rounds): client / server(s) / rest of the machine")
for size, n in SIZES:
    for threads in THREADS:
        for op in ("put", "get"):
            parts = []
            for t in ("labios", "versitygw", "raw"):
                m = meds[(t, size, threads, op)]
                parts.append(f"{t} {m['client_cpu_s'] / n * 1e3:.2f}/{m['server_cpu_s'] / n * 1e3:.2f}/{m['other_cpu_s'] / n * 1e3:.2f}")
            print(f"{size_name(size):>6} x{threads} {op}: " + "   ".join(parts))
print(f"\nListObjectsV2 of {n_list} keys (1,000 a page), median of {rounds * LISTINGS}:")
print("  boto3 paginator: " + "   ".join(f"{t} {meds[(t, 'list')]['wall_s']:.3f} s" for t in ("labios", "versitygw"))
      + f"   (raw scandir+stat {meds[('raw', 'list')]['wall_s']:.3f} s)")
print("  plain HTTP GETs: " + "   ".join(f"{t} {meds[(t, 'list-http')]['wall_s']:.3f} s" for t in ("labios", "versitygw")))
print(f"\nraw output appended to {out_path}")
PY

"$VENV/bin/python" "$WORK/bench.py" "$WORK" "$COMMAND" "$URL" "$KEY" "$SECRET" "$VPORT" \
    "$ROUNDS" "$N_SMALL" "$N_LARGE" "$N_MULTI" "$N_LIST" "$(cat "$WORK/serve.pid")" "$(cat "$WORK/s3.pid")" \
    "$(cat "$WORK/vgw/versitygw.pid")" "$BIN"
