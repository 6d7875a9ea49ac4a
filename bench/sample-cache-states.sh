#!/usr/bin/env bash
# The sample program's start-up in every cache state (cold, selective, warm, hot), as root.
#
#   bench/sample-cache-states.sh [SIZE] [RUNS] [STORAGE]   (default: medium, 10 runs, this disk)
#
# STORAGE is a `--storage` profile (hdd, emmc, sata-ssd, nvme): the program's files are then
# read from an emulated device with that profile's throttle and 128 KiB read-ahead.
#
# Builds the sample program of that size (seed 1) under /var/tmp (not tmpfs: its pages could not
# be evicted), then runs coldstart measure on workload a and prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-medium}; runs=${2:-10}; storage=${3:-}
cargo build --locked --release -q
cs=./target/release/coldstart
dir=/var/tmp/coldstart-bench/sample-$size
"$cs" sample --size "$size" --seed 1 -o "$dir"
"$cs" measure --cache cold,selective,warm,hot --runs "$runs" ${storage:+--storage "$storage"} \
  --export-json "/var/tmp/coldstart-bench/cache-states-$size${storage:+-$storage}.json" -- "$dir/sample" --workload a
