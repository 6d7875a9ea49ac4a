#!/usr/bin/env bash
# Set up the machine, build coldstart and run its main job on the bundled sample program.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
cargo build --locked --release -q
exec ./target/release/coldstart demo "$@"
