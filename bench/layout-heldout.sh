#!/usr/bin/env bash
# The acceptance figures of layout on a workload nobody profiled, in one command, on the
# sample program: profiled on workload a, measured cold on held-out workload b (80% of its
# start-up functions shared with a) at 128 KiB read-ahead. Builds, each relinked from the same
# objects (the executable, its two libraries and its plugin):
#
#   default   as the sample's Makefile links it
#   input     every module in first-touch order of a, untouched functions where lld puts
#             them (`order --unprofiled input`: the placement before the held-out layout defaults)
#   ordered   coldstart's defaults trained on a (`order a.json`, `link`)
#   ideal     coldstart's defaults trained on b itself (`order b.json`): what a perfect
#             profile gives
#   hfsort, cdsort   BOLT's own orders of the executable from its instrumented profile of a
#
# The model's view of each placement comes first (`order --evaluate`, per module); then
# bench/layout-breakdown.sh records one cold start of b per build with tracefs, and the
# program's own binaries' pages read and read requests are compared (its data files are
# read the same in every build); and hot start-up, ordered against default (`measure
# --compare`). As root.
#
#   bench/layout-heldout.sh [SIZE]     (default: bench)
#
# SAMPLE=DIR uses a sample already built with `coldstart sample --size SIZE --seed 1 -o DIR`
# (the bench size takes minutes to compile) instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-bench}
repo=$PWD
cargo build --locked --release -q -p coldstart
cs=$PWD/target/release/coldstart
. bench/bolt.sh
work=/var/tmp/coldstart-bench/heldout-$size
rm -rf "$work" && mkdir -p "$work" && cd "$work"
mods=(sample libcs_a.so libcs_b.so plugin/libcs_plugin.so)

if [ -n "${SAMPLE:-}" ]; then
  cp -a "$SAMPLE" default
else
  "$cs" sample --size "$size" --seed 1 -o default >/dev/null
fi
"$cs" profile --workload a -o a.json -- default/sample --workload a >/dev/null
"$cs" profile --workload b -o b.json -- default/sample --workload b >/dev/null

# The model: every placement scored on held-out b, module by module (forward read-around,
# what this kernel does for code).
for m in "${mods[@]}"; do
  "$cs" order a.json --binary "default/$m" --evaluate b.json --read-around forward \
    -o /dev/null 2>/dev/null > "evaluate-$(basename "$m").txt"
  echo "== $m"; cat "evaluate-$(basename "$m").txt"
done

relink() { # build name, order file
  cp -a default "$1"
  (cd "$1" && rm "${mods[@]}")
  local bins=()
  for m in "${mods[@]}"; do bins+=(--binary "$1/$m"); done
  "$cs" link --order "$2" "${bins[@]}" -- make -s -C "$1/src" > "verify-$1.txt" 2>&1 \
    || { cat "verify-$1.txt"; exit 1; }
}
"$cs" order a.json --unprofiled input -o order-input.txt 2> order-input.log
relink input order-input.txt
"$cs" order a.json -o order-a.txt 2> order-a.log
relink ordered order-a.txt
"$cs" order b.json -o order-b.txt 2> order-b.log
relink ideal order-b.txt

bolt_orders

"$repo/bench/layout-breakdown.sh" "$work/default" "$work/input" "$work/ordered" "$work/ideal" \
  "$work/hfsort" "$work/cdsort" -- sample --workload b | tee breakdown.txt
cp /var/tmp/coldstart-bench/breakdown/summary.json summary.json
# Hot start-up, ordered against default, interleaved.
"$cs" measure --compare --cache hot --runs 20 -- default/sample --workload b ::: \
  ordered/sample --workload b > hot.txt 2>&1 || true
grep -iE "faster|slower|within|p =" hot.txt || tail -5 hot.txt

python3 - summary.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {v: s[v]["binaries"] for v in s}
print(f"\nthe program's own binaries, cold start of held-out b, 128 KiB read-ahead")
print(f"{'build':10} {'pages read':>10} {'requests':>9} {'faults':>7}  vs ideal (pages, requests)")
for v, r in b.items():
    print(f"{v:10} {r['kib'] // 4:10} {r['requests']:9} {r['faults']:7}  "
          f"{r['kib'] / max(b['ideal']['kib'], 1):.2f}x {r['requests'] / max(b['ideal']['requests'], 1):.2f}x")
o = b["ordered"]
for v in ("hfsort", "cdsort"):
    print(f"ordered against {v}: {100 * (o['kib'] / b[v]['kib'] - 1):+.0f}% pages read, "
          f"{100 * (o['requests'] / b[v]['requests'] - 1):+.0f}% requests")
    e, x = s["ordered"]["files"]["sample"], s[v]["files"]["sample"]
    print(f"  the executable alone (what BOLT rewrote): {e['kib'] // 4} against {x['kib'] // 4} "
          f"pages ({100 * (e['kib'] / x['kib'] - 1):+.0f}%), {e['requests']} against "
          f"{x['requests']} requests")
ok = (o["kib"] <= 1.3 * b["ideal"]["kib"] and o["requests"] <= 1.5 * b["ideal"]["requests"]
      and all(o["kib"] <= 0.9 * b[v]["kib"] for v in ("hfsort", "cdsort")))
print("targets (pages within 1.3x and requests within 1.5x of ideal; 10% fewer pages than BOLT):",
      "met" if ok else "NOT met")
PY
