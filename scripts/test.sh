#!/usr/bin/env bash
# Sets up what the test suite needs on a fresh Debian machine and runs all of
# it: formatting, lints, unit and integration tests of every crate, the
# Python package's pytest suite and unmodified programs on LABIOS.
set -euo pipefail
cd "$(dirname "$0")/.."

# A build cache outside the clone keeps repeated runs fast; override freely.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"
export CARGO_TERM_COLOR=never
# A test run builds once: incremental state (tens of GB per clone path over
# a few runs) only fills the disk. Override freely.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# Real services the distributed tests start on loopback: nats-server, redis-server.
bash scripts/services.sh install

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Libraries the tests load from the build tree: liblabios_preload.so (beside
# the labios binary, for `labios run`) and liblabios_c.so.
cargo build --workspace
# The Python package and its pytest suite; the virtualenv it leaves (with
# h5py) is also the Python the real-program tests run.
bash scripts/python-tests.sh -q
cargo test --workspace --no-fail-fast
# Programs of a local client again, with their puts over the socket alone
# (README "Shared memory"), the path of TCP clients and the fallback.
LABIOS_CLIENT__SHARED_MEMORY=false cargo test -p labios --test cli --test bridge --test tenants
LABIOS_CLIENT__SHARED_MEMORY=false cargo test -p labios-capi --test c_example
