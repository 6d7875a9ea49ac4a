#!/usr/bin/env bash
# Layout side by side on one binary and one held-out workload: the sample's executable as
# linked (default), coldstart's order relinked with lld (`link`), coldstart's order applied by
# BOLT (`coldstart bolt`), and BOLT's own hfsort and cdsort orders from an instrumented BOLT
# profile (`llvm-bolt -instrument`, one run of workload a). Every variant is profiled on
# workload a only (coldstart profile, or BOLT's instrumentation) and measured on workload b:
# executable code pages b touches (`coldstart analyze --profile`, the model), and cold start-up
# from an emulated device with 128 KiB read-ahead (`coldstart measure --storage`): major
# faults, bytes read, read requests (medians of RUNS). Only the executable differs between
# variants: the libraries, plugin and data are the same files. Model faults are given for both
# read-around shapes (`fwd`: `--read-around forward`, what Linux 6.18 does for code). As root.
#
#   bench/layout-bolt.sh [SIZE] [STORAGE] [RUNS]     (default: medium, nvme, 3)
#
# `coldstart measure` counts read requests on the whole machine (cgroup v1 has no per-cgroup
# count for page-cache reads), so on a shared machine they scatter; the script ends with
# bench/layout-breakdown.sh on the five builds: per file, pages read, faults and requests
# estimated from a tracefs record of one cold start each.
#
# STORAGE nvme does not throttle (faults, bytes and requests do not depend on the throttle;
# only times do) and keeps the 128 KiB read-ahead. Cold runs hold
# /tmp/coldstart-measure-tests.lock, as the test suite's cache tests do.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-medium}; storage=${2:-nvme}; runs=${3:-3}
cargo build --locked --release -q -p coldstart
cs=$PWD/target/release/coldstart
repo=$PWD
. bench/bolt.sh
work=/var/tmp/coldstart-bench/bolt-$size
rm -rf "$work" && mkdir -p "$work" && cd "$work"

"$cs" sample --size "$size" --seed 1 -o default >/dev/null
"$cs" profile --workload a -o a.json -- default/sample --workload a
"$cs" profile --workload b -o b.json -- default/sample --workload b
# coldstart's best order for the executable, trained on a, scored on b by the model.
"$cs" order a.json --binary default/sample --evaluate b.json -o order.txt | tee evaluate.txt

# lld: relink the executable of a copy (its objects have function sections: no recompile).
cp -a default lld && rm lld/sample
"$cs" link --order order.txt --binary lld/sample -- make -s -C lld/src | tee verify-lld.txt
# coldstart bolt: rewrite the default executable in coldstart's order (verify runs after).
cp -a default cbolt
"$cs" bolt default/sample --order order.txt -o cbolt/sample | tee verify-cbolt.txt
# BOLT's own orders from its own profile of workload a.
bolt_orders
for algo in hfsort cdsort; do
  # Not expected to pass: these are not first-touch orders. Kept for the record.
  "$cs" verify "$algo/sample" --profile a.json > "verify-$algo.txt" 2>&1 || true
done

variants="default lld cbolt hfsort cdsort"
for v in $variants; do
  "$cs" analyze "$v/sample" --profile b.json --module sample --json > "analyze-$v.json"
  "$cs" analyze "$v/sample" --profile b.json --module sample --read-around forward --json \
    > "analyze-$v-forward.json"
  flock /tmp/coldstart-measure-tests.lock \
    "$cs" measure --storage "$storage" --cache cold --runs "$runs" \
    --export-json "cold-$v.json" -- "$work/$v/sample" --workload b > "measure-$v.txt"
done

med() { jq -r --arg m "$2" '.commands[0].summaries[] | select(.[0] == $m) | .[1].median' "$1"; }
echo
echo "size $size, storage $storage (128 KiB read-ahead), held-out workload b, medians of $runs cold runs"
printf '%-8s %14s %8s %8s %11s %13s %10s %12s %14s\n' variant "pages touched" faults \
  "fwd" "pages read" "major faults" "KiB read" "read reqs" "cold wall (s)"
for v in $variants; do
  a=analyze-$v.json
  printf '%-8s %14s %8s %8s %11s %13s %10s %12s %14.3f\n' "$v" \
    "$(jq '.utilization.code_pages_touched' "$a")" \
    "$(jq '.utilization.current.faults' "$a")" \
    "$(jq '.utilization.current.faults' "analyze-$v-forward.json")" \
    "$(jq '.utilization.current.pages_read' "$a")" \
    "$(med "cold-$v.json" major_faults)" \
    "$(med "cold-$v.json" read_bytes | awk '{printf "%d", $1/1024}')" \
    "$(med "cold-$v.json" read_requests)" \
    "$(med "cold-$v.json" wall_s)"
done
echo
"$repo/bench/layout-breakdown.sh" "$work/default" "$work/lld" "$work/cbolt" "$work/hfsort" "$work/cdsort"
