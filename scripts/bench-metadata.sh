#!/usr/bin/env bash
# Metadata rates under `labios run` for one or more builds side by side
# (an A/B of a change): each DIR holds a `labios` and its
# `liblabios_preload.so` (copy them out of target/release). Per round and
# build, a fresh `labios serve` on its own data directory under /var/tmp
# and `labios run -- metadata /labios/md PROCS FILES`
# (crates/preload/bench/metadata.c); the builds alternate within a round.
# Prints one line per round and build; take medians.
#
#   ROUNDS=5 PROCS=2 FILES=2000 bash scripts/bench-metadata.sh DIR...
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-5}"
PROCS="${PROCS:-2}"
FILES="${FILES:-2000}"
[ "$#" -ge 1 ] || { echo "usage: bash scripts/bench-metadata.sh DIR..." >&2; exit 2; }
WORK=$(mktemp -d /var/tmp/labios-bench-md.XXXXXX)
PID=
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
cc -O2 -o "$WORK/metadata" crates/preload/bench/metadata.c
for r in $(seq "$ROUNDS"); do
    for d in "$@"; do
        rm -rf "$WORK/data"
        mkdir -p "$WORK/data"
        export LABIOS_ENDPOINT="$WORK/data/labios.sock"
        "$d/labios" serve --data-dir "$WORK/data" >"$WORK/serve.log" 2>&1 &
        PID=$!
        for _ in $(seq 300); do [ -S "$LABIOS_ENDPOINT" ] && break; sleep 0.1; done
        [ -S "$LABIOS_ENDPOINT" ] || { echo "labios serve of $d did not listen" >&2; exit 1; }
        out=$("$d/labios" run -- "$WORK/metadata" /labios/md "$PROCS" "$FILES" | tr '\n' ' ')
        echo "$d round $r: $out"
        kill "$PID"
        wait "$PID" 2>/dev/null || true
        PID=
    done
done
