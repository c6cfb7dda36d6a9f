#!/usr/bin/env bash
# Storage bridging, CM1-style write-then-analyze (IRIS Figure 4): a
# simulation writes checkpoint files with POSIX calls, an analysis reads them
# as objects with boto3.
#
#   labios:   the simulation runs unmodified under `labios run` (files under
#             /labios/cm1/RUN, i.e. bucket cm1, which the application created
#             through the gateway), the analysis lists and GETs them through
#             `labios s3` with the same application's credentials.
#   baseline: the simulation writes the same files to a plain directory,
#             `aws s3 cp --recursive` copies them into a real S3 server
#             (versitygw over the same file system), the analysis lists and
#             GETs them from there.
#   raw:      the simulation alone on the plain directory (the baseline's
#             first phase) and, for reference, the same analysis reading the
#             files straight from the directory (no object store at all).
#
# The simulation: RANKS processes, each writing STEPS checkpoint files of
# MIB MiB with plain 1 MiB write() calls, then close (no fsync: LABIOS's
# synchronous writes complete in the workers' page cache, as a plain write
# does). The analysis: list the run's prefix, GET every object, BLAKE2b of
# its bytes. Every digest is checked, untimed, against the bytes the
# simulation wrote. Flows alternate their order from round to round; all data
# (LABIOS's, versitygw's, the plain directory) lives in one directory under
# /var/tmp. Before each round the script waits until the rest of the machine
# is idle (under 0.3 CPU used by other processes for 2 s).
#
# Prints a table and appends JSON lines to benchmarks/DATE-bridge.jsonl.
#
#   bash scripts/bench-bridge.sh [RANKS] [STEPS] [MIB_PER_FILE] [ROUNDS]
#
# BENCH_LABIOS_BIN=path skips the build and uses that binary, with
# liblabios_preload.so beside it (not LABIOS_*: those variables are
# configuration overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"
RANKS="${1:-4}" STEPS="${2:-8}" MIB="${3:-16}" ROUNDS="${4:-3}"
VENV="${PYTHON_VENV:-/var/tmp/labios-venv}"
COMMAND="bash scripts/bench-bridge.sh${*:+ $*}"

bash scripts/services.sh install >/dev/null
[ -x "$VENV/bin/aws" ] && "$VENV/bin/python" -c 'import boto3' 2>/dev/null \
    || bash scripts/python-tests.sh --collect-only -q >/dev/null
if [ -n "${BENCH_LABIOS_BIN:-}" ]; then
    BIN="$BENCH_LABIOS_BIN"
else
    # `labios run` needs liblabios_preload.so beside the binary.
    cargo build --release -p labios -p labios-preload
    BIN="$CARGO_TARGET_DIR/release/labios"
fi
[ -f "$(dirname "$BIN")/liblabios_preload.so" ] || { echo "no liblabios_preload.so beside $BIN" >&2; exit 1; }

. scripts/bench-site.sh
start_site bench-bridge cm1-bench
# From here on every LABIOS client (labios run's programs, the analysis)
# acts as the bench application, so the files the simulation writes belong
# to the application the S3 client signs as.
export LABIOS_KEY="$KEY" LABIOS_SECRET="$SECRET"

cat >"$WORK/simulate.py" <<'PY'
import hashlib, os, sys
out, ranks, steps, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(out, exist_ok=True)
pids = []
for r in range(ranks):
    pid = os.fork()
    if pid == 0:
        for s in range(steps):
            block = hashlib.shake_256(f"{r}-{s}".encode()).digest(1 << 20)
            with open(f"{out}/step{s:03d}-rank{r:03d}.dat", "wb") as f:
                for _ in range(mib):
                    f.write(block)
        os._exit(0)
    pids.append(pid)
for p in pids:
    _, status = os.waitpid(p, 0)
    assert status == 0, status
PY

cat >"$WORK/bench.py" <<'PY'
import datetime, hashlib, json, os, platform, shutil, statistics, subprocess, sys, time
import boto3, botocore
from botocore.config import Config

binary, work, url, vport, command = sys.argv[1:6]
ranks, steps, mib, rounds = (int(x) for x in sys.argv[6:10])
venv = os.path.dirname(sys.executable)
total = ranks * steps * mib << 20
TICK = os.sysconf("SC_CLK_TCK")

def s3(endpoint, key, secret):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))

labios = s3(url, os.environ["LABIOS_KEY"], os.environ["LABIOS_SECRET"])
versity = s3(f"http://127.0.0.1:{vport}", "benchkey", "benchsecret123")

def expected():
    """Digest of every file the simulation writes, by name."""
    out = {}
    for r in range(ranks):
        for s in range(steps):
            h = hashlib.blake2b()
            block = hashlib.shake_256(f"{r}-{s}".encode()).digest(1 << 20)
            for _ in range(mib):
                h.update(block)
            out[f"step{s:03d}-rank{r:03d}.dat"] = h.hexdigest()
    return out

EXPECTED = expected()

def analyze(client, bucket, prefix):
    """Lists the run's objects and reads every byte (the analysis: a digest)."""
    digests = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            digests[o["Key"][len(prefix):]] = hashlib.blake2b(body).hexdigest()
    return digests

def analyze_files(directory):
    digests = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            digests[name] = hashlib.blake2b(f.read()).hexdigest()
    return digests

def timed(f):
    t = time.perf_counter()
    result = f()
    return time.perf_counter() - t, result

def simulate(out, under_labios):
    cmd = [sys.executable, f"{work}/simulate.py", out, str(ranks), str(steps), str(mib)]
    if under_labios:
        cmd = [binary, "run", "--"] + cmd
    subprocess.run(cmd, check=True)

def machine_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / TICK

def wait_quiet(limit=1200):
    t0 = time.monotonic()
    while True:
        b = machine_busy(); time.sleep(2); busy = (machine_busy() - b) / 2
        if busy < 0.3 or time.monotonic() - t0 > limit:
            return busy
        print(f"  (machine busy: {busy:.2f} CPU used by others; waiting)", flush=True)
        time.sleep(20)

def check(flow, digests):
    assert digests == EXPECTED, f"{flow}: the analysis read other bytes than the simulation wrote " \
        f"({len(digests)} objects, {sum(digests[k] != EXPECTED.get(k) for k in digests)} differ)"

aws_env = dict(os.environ, AWS_ACCESS_KEY_ID="benchkey", AWS_SECRET_ACCESS_KEY="benchsecret123",
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null")
for var in ("LABIOS_KEY", "LABIOS_SECRET"):
    aws_env.pop(var)

def labios_flow(run):
    # Files written through the interception library, read as objects.
    sim, _ = timed(lambda: simulate(f"/labios/cm1/{run}", True))
    ana, digests = timed(lambda: analyze(labios, "cm1", f"{run}/"))
    check("labios", digests)
    return {"flow": "labios", "simulate_s": sim, "copy_s": 0.0, "analyze_s": ana}

def baseline_flow(run):
    # A plain directory, a copy into the object store, then the same reads.
    local = f"{work}/pfs/{run}"
    sim, _ = timed(lambda: simulate(local, False))
    cp, _ = timed(lambda: subprocess.run(
        [f"{venv}/aws", "--endpoint-url", f"http://127.0.0.1:{vport}", "s3", "cp", "--recursive",
         "--only-show-errors", local, f"s3://cm1/{run}/"], check=True, env=aws_env))
    ana, digests = timed(lambda: analyze(versity, "cm1", f"{run}/"))
    check("baseline", digests)
    # Reference, after the flow: the analysis reading the files in place.
    files, digests = timed(lambda: analyze_files(local))
    check("raw", digests)
    shutil.rmtree(local)
    return [{"flow": "baseline", "simulate_s": sim, "copy_s": cp, "analyze_s": ana},
            {"flow": "raw", "simulate_s": sim, "copy_s": 0.0, "analyze_s": files}]

def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "?"

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem_gib = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) / (1 << 20)
dirty = git("status", "--porcelain", "--untracked-files=no", "--", "crates", "Cargo.toml", "Cargo.lock")
meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} x {cpu}, {mem_gib:.0f} GiB, {platform.system()} {platform.release()}",
        "command": command,
        "commit": git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if dirty not in ("", "?") else ""),
        "boto3": boto3.__version__,
        "aws_cli": subprocess.run([f"{venv}/aws", "--version"], capture_output=True, text=True).stdout.strip(),
        "filesystem": subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", work], capture_output=True, text=True).stdout.strip(),
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "ranks": ranks, "steps": steps, "mib_per_file": mib, "bytes": total, "files": ranks * steps}

versity.create_bucket(Bucket="cm1")
# The bucket belongs to the bench application before the simulation writes.
labios.create_bucket(Bucket="cm1")

os.makedirs("benchmarks", exist_ok=True)
out_path = f"benchmarks/{meta['date'][:10]}-bridge.jsonl"
rows = []
with open(out_path, "a") as out:
    for r in range(rounds):
        others = wait_quiet()
        flows = [labios_flow, baseline_flow] if r % 2 == 0 else [baseline_flow, labios_flow]
        for flow in flows:
            os.sync()  # no writeback of an earlier flow in this one
            got = flow(f"run{r}")
            for row in (got if isinstance(got, list) else [got]):
                row.update(round=r, others_before_cpu=others, verified=True,
                           total_s=row["simulate_s"] + row["copy_s"] + row["analyze_s"])
                rows.append(row)
                out.write(json.dumps({**meta, **row}) + "\n")
                print(f"round {r} {row['flow']:9} simulate {row['simulate_s']:6.2f} s  copy {row['copy_s']:6.2f} s  "
                      f"analyze {row['analyze_s']:6.2f} s  total {row['total_s']:6.2f} s", flush=True)
    meds = {}
    for flow in ("labios", "baseline", "raw"):
        rs = [x for x in rows if x["flow"] == flow]
        meds[flow] = {k: statistics.median(x[k] for x in rs) for k in ("simulate_s", "copy_s", "analyze_s", "total_s")}
        out.write(json.dumps({**meta, **meds[flow], "flow": flow, "kind": "median", "rounds": len(rs)}) + "\n")

mibs = total / (1 << 20)
print(f"\n{command}\n{meta['machine']}, {meta['filesystem']}; commit {meta['commit']}")
print(f"{ranks * steps} files of {mib} MiB ({mibs:.0f} MiB), median of {rounds} rounds\n")
print(f"{'flow':10} {'simulate s':>11} {'copy s':>8} {'analyze s':>10} {'total s':>9} {'MiB/s end to end':>17}")
for flow in ("labios", "baseline", "raw"):
    m = meds[flow]
    print(f"{flow:10} {m['simulate_s']:11.2f} {m['copy_s']:8.2f} {m['analyze_s']:10.2f} {m['total_s']:9.2f} {mibs / m['total_s']:17.1f}")
print(f"\nraw output appended to {out_path}")
PY

"$VENV/bin/python" "$WORK/bench.py" "$BIN" "$WORK" "$URL" "$VPORT" "$COMMAND" \
    "$RANKS" "$STEPS" "$MIB" "$ROUNDS"
