#!/usr/bin/env bash
# Builds the `labios` Python package from this checkout into a virtualenv and
# runs its pytest suite (crates/python/tests) against a real `labios serve`.
#
#   bash scripts/python-tests.sh [PYTEST ARGS...]
#
# Environment: CARGO_TARGET_DIR (default /var/tmp/labios-target, as
# scripts/test.sh), PYTHON_VENV (default /var/tmp/labios-venv, reused when
# present), PYTHON (the interpreter the venv is made from, default python3).
# Exits with pytest's status.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"
export CARGO_TERM_COLOR=never
VENV="${PYTHON_VENV:-/var/tmp/labios-venv}"
PYTHON="${PYTHON:-python3}"

if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi

# Debian splits venv support (ensurepip) out of the interpreter.
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y python3 python3-venv
fi
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
fi
# maturin's build backend runs the `maturin` command from PATH.
export PATH="$VENV/bin:$PATH"

cargo build -p labios

pip install --quiet maturin
# pip rebuilds and reinstalls a local directory every time, and brings the
# test extra (pytest, numpy, pandas, pyarrow, xarray, zarr) when missing. The
# dev profile reuses the debug build of the workspace that `cargo build` and
# `cargo test` keep in CARGO_TARGET_DIR; a plain `pip install ./crates/python`
# makes an optimized build.
MATURIN_PEP517_ARGS="--profile dev" \
  pip install --quiet --no-build-isolation "./crates/python[test]"

exec python -m pytest crates/python/tests -p no:cacheprovider "$@"
