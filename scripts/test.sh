#!/usr/bin/env bash
# Sets up what the test suite needs on a fresh Debian machine and runs all of
# it: formatting, lints, unit and integration tests of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."

# A build cache outside the clone keeps repeated runs fast; override freely.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"
export CARGO_TERM_COLOR=never

if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# Real services the distributed tests start on loopback: nats-server, redis-server.
bash scripts/services.sh install

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
