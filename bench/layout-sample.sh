#!/usr/bin/env bash
# Layout, end to end with coldstart's own tools: profile the sample program on workload a,
# order every module of it (executable, libraries, plugin) in first-touch order, relink a copy
# with lld, and compare default and ordered builds on held-out workload b, cold from an emulated
# device with 128 KiB read-ahead and hot. As root.
#
#   bench/layout-sample.sh [SIZE] [STORAGE] [RUNS]     (default: bench, hdd, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-bench}; storage=${2:-hdd}; runs=${3:-3}
cargo build --locked --release -q
cs=$PWD/target/release/coldstart
work=/var/tmp/coldstart-bench
mkdir -p "$work" && cd "$work"
"$cs" sample --size "$size" --seed 1 -o "sample-$size"
rm -rf "ordered-$size" && cp -a "sample-$size" "ordered-$size"
"$cs" profile --workload a -o "a-$size.json" -- "sample-$size/sample" --workload a
"$cs" order "a-$size.json" --all-modules -o "order-$size.txt"
# Relink (without recompiling) the executable and every library of the copy in that order.
(cd "ordered-$size" && rm sample libcs_a.so libcs_b.so plugin/libcs_plugin.so)
"$cs" link --order "order-$size.txt" --binary "ordered-$size/sample" -- make -s -C "ordered-$size/src"
"$cs" measure --compare --storage "$storage" --cache cold --runs "$runs" \
  --export-json "layout-$size-$storage-cold.json" \
  -- "sample-$size/sample" --workload b ::: "ordered-$size/sample" --workload b
"$cs" measure --compare --cache hot --runs 20 --export-json "layout-$size-hot.json" \
  -- "sample-$size/sample" --workload b ::: "ordered-$size/sample" --workload b
