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
