#!/usr/bin/env bash
# The sample program's start-up in every cache state (cold, selective, warm, hot), as root.
#
#   bench/sample-cache-states.sh [SIZE] [RUNS]        (default: medium, 10 runs)
#
# Builds the sample program of that size (seed 1) under /var/tmp (not tmpfs: its pages could not
# be evicted), then runs coldstart measure on workload a and prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-medium}; runs=${2:-10}
cargo build --locked --release -q
cs=./target/release/coldstart
dir=/var/tmp/coldstart-bench/sample-$size
"$cs" sample --size "$size" --seed 1 -o "$dir"
"$cs" measure --cache cold,selective,warm,hot --runs "$runs" \
  --export-json "/var/tmp/coldstart-bench/cache-states-$size.json" -- "$dir/sample" --workload a
