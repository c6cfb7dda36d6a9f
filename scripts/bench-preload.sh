#!/usr/bin/env bash
# Overhead of liblabios_preload.so on calls that are not LABIOS's (issue 4:
# under 5 % more than native). Runs crates/preload/bench/overhead.c and two
# whole programs natively and with the library in LD_PRELOAD, alternating,
# ROUNDS times each; prints medians and appends JSON lines to
# benchmarks/DATE-preload.jsonl. On a virtual machine whole-program times
# swing by +-10 % between runs, more than the library could cost, so where
# `perf` exists the library's own share of each program's CPU time is also
# measured (sampled profile), which does not depend on that noise.
#
#   bash scripts/bench-preload.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"
ROUNDS="${1:-7}"

cargo build --release -p labios-preload
LIB="$CARGO_TARGET_DIR/release/liblabios_preload.so"
# tmpfs when there is one: disk writeback makes whole-program times vary by
# more than the library could cost.
WORK="$(mktemp -d -p "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )")"
trap 'rm -rf "$WORK"' EXIT
cc -O2 -o "$WORK/overhead" crates/preload/bench/overhead.c
mkdir -p "$WORK/io" benchmarks

exec python3 - "$LIB" "$WORK" "$ROUNDS" <<'PY'
import json, os, platform, statistics, subprocess, sys, time, datetime

lib, work, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
io = os.path.join(work, "io")
# A dead endpoint: a program that touched LABIOS would fail loudly.
base = dict(os.environ, LABIOS_ENDPOINT=os.path.join(work, "none.sock"))
pre = dict(base, LD_PRELOAD=lib)

def micro(env):
    out = subprocess.run([os.path.join(work, "overhead"), io], env=env,
                         check=True, capture_output=True, text=True).stdout
    return {k: float(v) for k, v in (l.split() for l in out.splitlines())}

programs = {
    "tar_c_usr_include": f"tar -cf {io}/inc.tar /usr/include 2>/dev/null; sha256sum {io}/inc.tar > /dev/null",
    "dd_4k_x100k": f"dd if=/dev/zero of={io}/dd bs=4k count=100000 status=none; cat {io}/dd > /dev/null",
}

def whole(env, script):
    t = time.perf_counter()
    subprocess.run(["sh", "-c", script], env=env, check=True)
    return (time.perf_counter() - t) * 1e9

samples = {}
for r in range(rounds):
    for label, env in (("native", base), ("preload", pre)):
        for k, v in micro(env).items():
            samples.setdefault((k, label), []).append(v)
        for k, s in programs.items():
            samples.setdefault((k, label), []).append(whole(env, s))

def profile_share(cmd):
    """Percent of the program's CPU samples spent in liblabios_preload.so."""
    data = os.path.join(work, "perf.data")
    try:
        subprocess.run(["perf", "record", "-q", "-F", "4999", "-o", data, "--"] + cmd,
                       env=pre, check=True, capture_output=True)
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso"],
                             check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in rep.splitlines():
        if "liblabios_preload.so" in line:
            return float(line.split("%")[0])
    return 0.0

shares = {
    "overhead_micro": profile_share([os.path.join(work, "overhead"), io]),
    "tar_c_usr_include": profile_share(["sh", "-c", programs["tar_c_usr_include"]]),
    "dd_4k_x100k": profile_share(["sh", "-c", programs["dd_4k_x100k"]]),
}

date = datetime.date.today().isoformat()
machine = f"{platform.node()} {os.cpu_count()} cores {platform.machine()} {platform.release()}"
names = list(dict.fromkeys(k for k, _ in samples))
print(f"{'call':22} {'native ns':>12} {'preload ns':>12} {'overhead':>9}")
with open(f"benchmarks/{date}-preload.jsonl", "a") as f:
    for n in names:
        nat = statistics.median(samples[(n, "native")])
        pl = statistics.median(samples[(n, "preload")])
        pct = (pl / nat - 1) * 100
        print(f"{n:22} {nat:12.1f} {pl:12.1f} {pct:8.1f}%")
        f.write(json.dumps({"scenario": "preload-overhead", "call": n, "native_ns": nat,
                            "preload_ns": pl, "overhead_pct": round(pct, 2), "rounds": rounds,
                            "command": "bash scripts/bench-preload.sh", "date": date,
                            "machine": machine}) + "\n")
    print(f"{'profile':22} {'library share of CPU samples':>35}")
    for k, v in shares.items():
        print(f"{k:22} {'n/a' if v is None else f'{v:.2f}%':>35}")
        f.write(json.dumps({"scenario": "preload-profile", "program": k, "library_cpu_pct": v,
                            "command": "bash scripts/bench-preload.sh", "date": date,
                            "machine": machine}) + "\n")
PY
