#!/usr/bin/env bash
# Set up the machine and run every test: formatting, lints, docs, unit, integration and
# end-to-end tests. Needs root (cgroups, drop_caches, FUSE, ptrace of any program).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps -q
echo "== cargo test"
cargo test --locked --workspace -- --test-threads=2
echo "== fuzz targets, short form (scripts/fuzz.sh; the long form is bench/fuzz.sh)"
if cargo +nightly --version >/dev/null 2>&1; then
  bash scripts/fuzz.sh
elif [ "${COLDSTART_TESTS_NO_SKIP:-}" = 1 ]; then
  echo "test: the fuzz targets need a nightly toolchain: rustup toolchain install nightly" >&2
  exit 3
else
  echo "test: skipping the fuzz targets: no nightly toolchain (rustup toolchain install nightly)"
fi
