#!/usr/bin/env bash
# How much valgrind's instruction counts of an unchanged start-up move (docs/gate.md, the noise
# model's `instructions` row; crates/coldstart-gate/src/noise.rs): N counts each of the Node.js
# script and Debian's python3 of bench/gate-programs.sh, quiet, then N of the Node.js script
# under `newcomer.sh --busy 1`. Prints "program machine count" lines, then each group's range.
#
#   bench/gate-counts.sh [N]     (default 15)
#   misses=1 bench/gate-counts.sh [N]   the simulated D1 and last-level misses instead
#                                       (cachegrind --cache-sim=yes), "program machine D1 LL"
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-15}
. bench/gate-programs.sh
dir=$(mktemp -d /var/tmp/gate-counts.XXXXXX)
trap 'rm -rf "$dir"' EXIT
node_script "$dir/node" 0 0
if [ "${misses:-0}" = 1 ]; then
  count() { valgrind --tool=cachegrind --cache-sim=yes --trace-children=yes --cachegrind-out-file=/dev/null "$@" 2>&1 |
    awk '/D1  misses:/ {gsub(",", "", $4); d += $4} /LL misses:/ {gsub(",", "", $4); l += $4} END {print d, l}'; }
else
  count() { valgrind --tool=cachegrind --cache-sim=no --trace-children=yes --cachegrind-out-file=/dev/null "$@" 2>&1 | sed -n 's/.*I *refs: *//p' | tr -d ,; }
fi
export -f count
{
  for _ in $(seq "$n"); do echo "node quiet $(cd "$dir/node" && count /usr/bin/node app.js)"; done
  for _ in $(seq "$n"); do echo "python3 quiet $(count /usr/bin/python3 -c "$python_imports")"; done
  ${newcomer:-/work/shared/newcomer.sh} --busy 1 -- bash -c \
    'for _ in $(seq "$1"); do echo "node busy1 $(cd "$2" && count /usr/bin/node app.js)"; done' _ "$n" "$dir/node"
} | tee "$dir/counts.txt"
if [ "${misses:-0}" = 1 ]; then
  awk '{for (f = 3; f <= 4; f++) {k = $1 " " $2 " " (f == 3 ? "D1" : "LL"); v = $f + 0
         if (!(k in lo) || v < lo[k]) lo[k] = v; if (v > hi[k]) hi[k] = v}}
       END {for (k in lo) printf "%s misses: %d to %d (%.2f%%)\n", k, lo[k], hi[k], (hi[k] - lo[k]) * 100 / lo[k]}' "$dir/counts.txt"
else
  awk '{k = $1 " " $2; v = $3 + 0; if (!(k in lo) || v < lo[k]) lo[k] = v; if (v > hi[k]) hi[k] = v}
       END {for (k in lo) printf "%s: %.1f to %.1f million (%.1f%%)\n", k, lo[k] / 1e6, hi[k] / 1e6, (hi[k] - lo[k]) * 100 / lo[k]}' "$dir/counts.txt"
fi
