#!/bin/bash
# How much one other job slows the gate's calibration loop (one copy, and one copy on each CPU
# at once) and the hot starts of Debian's python3 and the Node.js script of gate-programs.sh:
# what the gate's machine allowance must cover (docs/gate.md, "k_lo and k_hi").
#   bench/gate-calibration.sh [-r RUNS] [-o DIR] [BUSY...]   # BUSY: newcomer.sh --busy N; 0 = as it is
# Prints one line per condition: medians of RUNS (20) hot runs each (wall and CPU, ms) and of
# RUNS calibration loops (one copy; every CPU: wall ms).
set -euo pipefail
runs=20
. "$(dirname "$0")/opts.sh"
shift $((OPTIND - 1))
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gate-programs.sh"
shared=$(cd "$root/../shared" && pwd)
cs=$(realpath "$cs")
[ $# -gt 0 ] || set -- 0 1
mkdir -p "$out/node"
node_script "$out/node" 0 0
# The gate's loop (crates/coldstart-gate/src/linux.rs), COPIES at once, SAMPLES times.
cat >"$out/loop.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
static void *loop(void *unused) {
    volatile uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < 10000000; i++) x = x * 6364136223846793005ull + i;
    return unused;
}
int main(int argc, char **argv) {
    int copies = atoi(argv[1]), samples = atoi(argv[2]);
    for (int k = 0; k < samples; k++) {
        pthread_t t[256];
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < copies; i++) pthread_create(&t[i], 0, loop, 0);
        for (int i = 0; i < copies; i++) pthread_join(t[i], 0);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("%.3f\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
        usleep(20000);
    }
}
C
gcc -O2 -pthread -o "$out/loop" "$out/loop.c"
one_condition() {
  local dir=$1
  "$cs" measure --cache hot --runs "$runs" --export-json "$dir/python3.json" -- \
    /usr/bin/python3 -c "$python_imports" >/dev/null 2>&1
  (cd "$out/node" && "$cs" measure --cache hot --runs "$runs" --export-json "$dir/node.json" -- /usr/bin/node app.js >/dev/null 2>&1)
  "$out/loop" 1 "$runs" >"$dir/loop-1"
  "$out/loop" "$(nproc)" "$runs" >"$dir/loop-all"
}
export -f one_condition
export cs out python_imports runs
for busy in "$@"; do
  dir=$out/busy-$busy-$(date +%s)
  mkdir -p "$dir"
  if [ "$busy" = 0 ]; then one_condition "$dir"; else "$shared/newcomer.sh" --busy "$busy" -- bash -c "one_condition $dir"; fi
  python3 - "$dir" "$busy" <<'PY'
import json, statistics as st, sys
d, busy = sys.argv[1], sys.argv[2]
def hot(name):
    runs = [r["counters"] for r in json.load(open(f"{d}/{name}.json"))["commands"][0]["runs"] if not r.get("excluded")]
    return st.median(r["wall_s"] for r in runs) * 1e3, st.median(r["user_s"] + r["sys_s"] for r in runs) * 1e3
loop = lambda f: st.median(float(x) for x in open(f"{d}/{f}"))
print("busy %s: python3 hot %.1f ms (CPU %.1f), node hot %.1f ms (CPU %.1f), loop one copy %.1f ms, every CPU %.1f ms"
      % ((busy,) + hot("python3") + hot("node") + (loop("loop-1"), loop("loop-all"))))
PY
done
