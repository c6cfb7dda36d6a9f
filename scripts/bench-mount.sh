#!/usr/bin/env bash
# `labios mount` (FUSE) against `labios run` (LD_PRELOAD) and a raw
# directory (issue 12). One `labios serve` keeps its data in a directory
# under /var/tmp; the raw baseline is a plain directory beside it, on the
# same file system. Measured, ROUNDS times, the targets alternating (and
# their order rotating) within each round; medians:
#   - fio: sequential 1 MiB write then read of a 1 GiB file; random 4 KiB
#     write then read on a 256 MiB file laid out first (an untimed 1 MiB
#     sequential write), each random job stopped after 8 s (--runtime);
#     engines psync (iodepth 1; raw, run, mount) and io_uring (iodepth 16;
#     raw and mount: io_uring bypasses `labios run`). Buffered I/O; writes
#     end with an fsync (end_fsync=1), so every target has all bytes
#     stored when the job ends. Each read reads the file the writes before
#     it left, with fio's default invalidate=1 (posix_fadvise DONTNEED on
#     the file first) and nothing else dropped.
#   - metadata rates: crates/preload/bench/metadata.c, PROCS processes x
#     FILES files each, create / stat / unlink timed separately, and a
#     second ("cold") stat pass MD_COLD_WAIT seconds after the first, when
#     the 1 s attribute leases (the mount's --cache-timeout) have run out.
#     `labios run` is measured twice: "run" with its default strict stat
#     (every stat asks the inventory), and "run-lease" with the opt-in 1 s
#     attribute lease (LABIOS_CLIENT__ATTR_CACHE_MS=1000).
# Prints the tables and appends JSON lines to benchmarks/DATE-mount.jsonl.
# Every LABIOS process is stopped at exit, and no mount stays behind.
#
#   bash scripts/bench-mount.sh [ROUNDS]     (default 3)
#   env: MD_PROCS (default 2), MD_FILES (default 2000), MD_COLD_WAIT (2)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"
ROUNDS="${1:-3}"
MD_PROCS="${MD_PROCS:-2}"
MD_FILES="${MD_FILES:-2000}"
MD_COLD_WAIT="${MD_COLD_WAIT:-2}"

command -v fio >/dev/null || { echo "bench-mount: fio is missing (bash scripts/services.sh installs it)" >&2; exit 1; }
[ -e /dev/fuse ] || { echo "bench-mount: /dev/fuse is missing" >&2; exit 1; }

cargo build --release -p labios -p labios-preload
BIN="$CARGO_TARGET_DIR/release/labios"

# Not tmpfs: the raw baseline and LABIOS's data share one disk file system.
WORK="$(mktemp -d -p /var/tmp labios-bench-mount.XXXXXX)"
MNT="$WORK/mnt"
mkdir -p "$WORK/data" "$WORK/raw" "$MNT" benchmarks

mounted() { awk -v m="$MNT" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; }

# stop PIDFILE: SIGTERM, then wait up to 30 s for the process to exit.
stop() {
    local pid
    [ -f "$1" ] || return 0
    pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "bench-mount: $1 ($pid) still runs 30 s after SIGTERM: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    rm -f "$1"
}

cleanup() {
    local rc=$? n log
    set +e
    stop "$WORK/mount.pid"
    if mounted; then
        echo "bench-mount: $MNT still mounted after the mount process ended: umount -l" >&2
        umount -l "$MNT"
    fi
    stop "$WORK/serve.pid"
    for log in serve mount; do
        [ -f "$WORK/$log.log" ] || continue
        n=$(grep -c -E 'WARN|ERROR|panick' "$WORK/$log.log")
        [ "$n" = 0 ] && continue
        echo "--- labios $log logged $n warnings or errors; the first 20:" >&2
        grep -E 'WARN|ERROR|panick' "$WORK/$log.log" | head -n 20 >&2
    done
    if [ "$rc" != 0 ]; then
        for log in serve mount; do
            [ -s "$WORK/$log.log" ] && { echo "--- $log.log (last 40 lines)" >&2; tail -n 40 "$WORK/$log.log" >&2; }
        done
    fi
    # Never remove through a mount that could not be detached.
    if mounted; then
        echo "bench-mount: $MNT is still mounted; $WORK left in place" >&2
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O2 -o "$WORK/metadata" crates/preload/bench/metadata.c

export LABIOS_ENDPOINT="$WORK/data/labios.sock"
"$BIN" serve --data-dir "$WORK/data" >"$WORK/serve.log" 2>&1 &
echo $! >"$WORK/serve.pid"
for _ in $(seq 300); do
    [ -S "$LABIOS_ENDPOINT" ] && break
    kill -0 "$(cat "$WORK/serve.pid")" 2>/dev/null || { echo "bench-mount: labios serve exited" >&2; exit 1; }
    sleep 0.1
done
[ -S "$LABIOS_ENDPOINT" ] || { echo "bench-mount: labios serve did not listen within 30 s" >&2; exit 1; }

"$BIN" mount "$MNT" >"$WORK/mount.log" 2>&1 &
echo $! >"$WORK/mount.pid"
for _ in $(seq 300); do
    mounted && break
    kill -0 "$(cat "$WORK/mount.pid")" 2>/dev/null || { echo "bench-mount: labios mount exited" >&2; exit 1; }
    sleep 0.1
done
mounted || { echo "bench-mount: $MNT not mounted within 30 s" >&2; exit 1; }

python3 - "$BIN" "$WORK" "$MNT" "$ROUNDS" "$MD_PROCS" "$MD_FILES" "$MD_COLD_WAIT" <<'PY'
import datetime, json, os, platform, signal, statistics, subprocess, sys

binary, work, mnt = sys.argv[1:4]
rounds, md_procs, md_files = (int(a) for a in sys.argv[4:7])
md_cold_wait = float(sys.argv[7])
MD_FIELDS = ("create_per_s", "stat_per_s") + (("stat_cold_per_s",) if md_cold_wait > 0 else ()) \
    + ("unlink_per_s",)
date = datetime.date.today().isoformat()
machine = f"{platform.node()} {os.cpu_count()} cores {platform.machine()} {platform.release()}"
command = f"bash scripts/bench-mount.sh {rounds}"
fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                        text=True).stdout.strip()
fs_type = subprocess.run(["df", "--output=fstype", work], capture_output=True,
                         text=True).stdout.split()[-1]
TIMEOUT = 600  # seconds: a job that takes longer is reported as a hang

# Where each target's files are, and how a program is run on it.
DIRS = {"raw": os.path.join(work, "raw"), "run": "/labios/bench-run",
        "run-lease": "/labios/bench-lease", "mount": os.path.join(mnt, "bench-mount")}
MD_TARGETS = ["raw", "run", "run-lease", "mount"]
def argv(target, program):
    return [binary, "run", "--"] + program if target.startswith("run") else program

def call(target, program):
    """(stdout, None) or (None, error text); a hang is killed after TIMEOUT."""
    env = dict(os.environ, LABIOS_CLIENT__ATTR_CACHE_MS="1000") if target == "run-lease" else None
    p = subprocess.Popen(argv(target, program), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env=env)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, f"no answer after {TIMEOUT} s (killed); stderr: {err.strip()[-2000:]}"
    except BaseException:  # interrupted: the job must not keep the mount busy
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    if p.returncode != 0:
        return None, f"exit {p.returncode}; stderr: {err.strip()[-2000:]}; stdout: {out.strip()[-1000:]}"
    return out, None

for t in DIRS:
    _, e = call(t, ["mkdir", "-p", DIRS[t]])
    if e:
        sys.exit(f"bench-mount: mkdir {DIRS[t]} ({t}): {e}")

MiB = 1 << 20
# (name, fio rw of the write, of the read, block size, file size, seconds
# a job may take: a cap on the sequential ones, the length of the random
# ones, which do not get through the whole file on LABIOS)
WORKLOADS = [("seq-1m", "write", "read", "1M", 1024 * MiB, 120),
             ("rand-4k", "randwrite", "randread", "4k", 256 * MiB, 8)]
ENGINES = {"psync": (1, ["raw", "run", "mount"]), "io_uring": (16, ["raw", "mount"])}

def fio(target, path, rw, bs, size, engine, depth, seconds):
    """One fio job; returns the numbers or an error."""
    reading = "read" in rw and "write" not in rw
    job = ["fio", "--name=bench", f"--filename={path}", f"--rw={rw}", f"--bs={bs}",
           f"--size={size}", f"--ioengine={engine}", f"--iodepth={depth}", "--invalidate=1",
           f"--runtime={seconds}", "--output-format=json"]
    job += ["--unlink=1"] if reading else ["--end_fsync=1"]
    out, err = call(target, job)
    if err:
        return {"error": err}
    try:
        res = json.loads(out[out.index("{"):])
    except ValueError as e:
        return {"error": f"fio output is not JSON ({e}): {out[:500]}"}
    j = res["jobs"][0]
    if j.get("error"):
        return {"error": f"fio job error {j['error']}"}
    side = j["read" if reading else "write"]
    return {"bw_mib_s": side["bw_bytes"] / MiB, "iops": side["iops"],
            "io_bytes": side["io_bytes"], "seconds": j["job_runtime"] / 1000,
            "capped": side["io_bytes"] < size}

def metadata(target):
    out, err = call(target, [os.path.join(work, "metadata"), os.path.join(DIRS[target], "md"),
                             str(md_procs), str(md_files), str(md_cold_wait)])
    if err:
        return {"error": err}
    return {k: float(v) for k, v in (l.split() for l in out.splitlines() if l.strip())}

samples, errors, capped = {}, {}, set()
def record(key, result, fields):
    if "error" in result:
        errors.setdefault(key, []).append(result["error"])
        print(f"  {key}: ERROR {result['error']}", file=sys.stderr, flush=True)
        return
    if result.get("capped"):
        capped.add(key)
    for f in fields:
        samples.setdefault(key + (f,), []).append(result[f])

rot = lambda l, r: l[r % len(l):] + l[:r % len(l)]
for r in range(rounds):
    print(f"round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    for t in rot(MD_TARGETS, r):
        res = metadata(t)
        record(("metadata", "", "", t), res, MD_FIELDS)
        print(f"  metadata {t}: {res}", file=sys.stderr, flush=True)
    for name, wrw, rrw, bs, size, seconds in WORKLOADS:
        for engine, (depth, targets) in ENGINES.items():
            for t in rot(targets, r):
                path = os.path.join(DIRS[t], f"{name}-{engine}")
                if wrw != "write":  # lay the whole file out first
                    res = fio(t, path, "write", "1M", size, "psync", 1, 120)
                    if "error" in res:
                        record(("fio", f"{name}-layout", engine, t), res, ())
                        continue
                for op, rw in (("write", wrw), ("read", rrw)):
                    res = fio(t, path, rw, bs, size, engine, depth, seconds)
                    record(("fio", f"{name}-{op}", engine, t), res, ("bw_mib_s", "iops", "seconds"))
                    if "error" not in res:
                        print(f"  {name}-{op} {engine} {t}: {res['bw_mib_s']:.1f} MiB/s "
                              f"{res['iops']:.0f} IOPS {res['seconds']:.2f} s"
                              + (" (stopped by --runtime)" if res["capped"] else ""),
                              file=sys.stderr, flush=True)
                    elif op == "write":
                        break  # no file to read

med = lambda key: statistics.median(samples[key]) if key in samples else None
def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"
def cell(key, fmt):
    if key[:4] in errors and key not in samples:
        return "error"
    v = med(key)
    return "-" if v is None else fmt(v)

common = {"rounds": rounds, "command": command, "date": date, "machine": machine,
          "fio": fio_version, "labios": commit, "fs": fs_type}
lines = []
print(f"\nfio, median of {rounds} rounds (MiB/s for 1 MiB blocks, IOPS for 4 KiB)")
print(f"{'workload':16} {'engine':9} {'raw':>10} {'run':>10} {'mount':>10} {'mount/raw':>10} {'run/raw':>8}")
for name, wrw, rrw, bs, size, seconds in WORKLOADS:
    for op in ("write", "read"):
        wl = f"{name}-{op}"
        field = "bw_mib_s" if bs == "1M" else "iops"
        fmt = (lambda v: f"{v:.1f}") if field == "bw_mib_s" else (lambda v: f"{v:.0f}")
        for engine, (depth, targets) in ENGINES.items():
            k = lambda t: ("fio", wl, engine, t, field)
            raw, run, mount = med(k("raw")), med(k("run")), med(k("mount"))
            print(f"{wl:16} {engine:9} {cell(k('raw'), fmt):>10} "
                  f"{cell(k('run'), fmt) if 'run' in targets else 'n/a':>10} "
                  f"{cell(k('mount'), fmt):>10} {ratio(mount, raw):>10} {ratio(run, raw):>8}")
            for t in targets:
                key = ("fio", wl, engine, t)
                line = {"scenario": "mount-fio", "workload": wl, "engine": engine,
                        "iodepth": depth, "bs": bs, "file_bytes": size, "target": t}
                for f in ("bw_mib_s", "iops", "seconds"):
                    if key + (f,) in samples:
                        line[f] = med(key + (f,))
                        line[f + "_samples"] = samples[key + (f,)]
                line["runtime_cap_s"] = seconds
                if key in capped:
                    line["stopped_by_runtime"] = True
                if key in errors:
                    line["errors"] = errors[key]
                lines.append(line)

print(f"\nmetadata, {md_procs} processes x {md_files} files, median of {rounds} rounds (ops/s; "
      f"stat_cold {md_cold_wait:g} s after the first stat pass)")
print(f"{'phase':14} {'raw':>10} {'run':>10} {'run-lease':>10} {'mount':>10} {'mount/raw':>10} "
      f"{'run/raw':>8} {'lease/raw':>10}")
for f in MD_FIELDS:
    k = lambda t: ("metadata", "", "", t, f)
    raw, run, lease, mount = (med(k(t)) for t in MD_TARGETS)
    fmt = lambda v: f"{v:.0f}"
    print(f"{f:14} {cell(k('raw'), fmt):>10} {cell(k('run'), fmt):>10} "
          f"{cell(k('run-lease'), fmt):>10} {cell(k('mount'), fmt):>10} "
          f"{ratio(mount, raw):>10} {ratio(run, raw):>8} {ratio(lease, raw):>10}")
for t in MD_TARGETS:
    key = ("metadata", "", "", t)
    line = {"scenario": "mount-metadata", "target": t, "procs": md_procs, "files_each": md_files,
            "cold_wait_s": md_cold_wait}
    for f in MD_FIELDS:
        if key + (f,) in samples:
            line[f] = med(key + (f,))
            line[f + "_samples"] = samples[key + (f,)]
    if key in errors:
        line["errors"] = errors[key]
    lines.append(line)

stat_run = med(("metadata", "", "", "run", "stat_per_s"))
cold_run = med(("metadata", "", "", "run", "stat_cold_per_s"))
unlink_run = med(("metadata", "", "", "run", "unlink_per_s"))
verdict = lambda v, goal: "no result" if v is None else ("met" if v >= goal else "not met")
print(f"\nissue 12 targets under labios run: stat >= 100000/s {verdict(stat_run, 100000)}"
      + (f" (cold: {verdict(cold_run, 100000)})" if md_cold_wait > 0 else "")
      + f", unlink >= 20000/s {verdict(unlink_run, 20000)}")
lines.append({"scenario": "mount-targets", "stat_per_s_run": stat_run,
              "stat_target": 100000, "stat_met": stat_run is not None and stat_run >= 100000,
              "stat_cold_per_s_run": cold_run,
              "stat_cold_met": cold_run is not None and cold_run >= 100000,
              "unlink_per_s_run": unlink_run, "unlink_target": 20000,
              "unlink_met": unlink_run is not None and unlink_run >= 20000})
seq_capped = [k for k in capped if k[1].startswith("seq")]
if seq_capped:
    print("sequential jobs stopped by --runtime before the end of the file: "
          + ", ".join("/".join(k[1:]) for k in sorted(seq_capped)))
layout = [k for k in errors if k[1].endswith("-layout")]
for k in layout:
    print(f"layout failed: {'/'.join(k[1:])}: {errors[k]}")

with open(f"benchmarks/{date}-mount.jsonl", "a") as out:
    for line in lines:
        out.write(json.dumps({**line, **common}) + "\n")
print(f"\nraw output: benchmarks/{date}-mount.jsonl ({machine}; {fio_version}; labios {commit}; {fs_type})")
sys.exit(1 if errors else 0)
PY
