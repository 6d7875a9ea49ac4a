#!/bin/sh
# The demo's network grid (the medium sample over 8mbit/50ms and 32mbit/10ms, every strategy,
# cold, RUNS starts per cell) while other processes keep entering mount namespaces of their
# own, as containers, sandboxes and other engineers' tests do on a shared machine: a new
# `unshare --mount sleep 6` every 0.3 s. Each holds a copy of whatever was mounted when it
# started. Prints each run's start-up and unmount (`teardown_s`).
#
#   bench/unmount-namespaces.sh [-r RUNS] [-o DIR]
#
# COLDSTART=path picks the binary (default: release). Needs root (unshare --mount).
set -eu
runs=1
. "$(dirname "$0")/opts.sh"
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
"$cs" sample --size medium --seed 1 -o "$out/sample" >/dev/null
rm -rf "$out/prog" "$out/grid.json"
mkdir -p "$out/prog"
(cd "$out/sample" && tar cf - --exclude=./src .) | tar xf - -C "$out/prog"
( while :; do unshare --mount sleep 6 & sleep 0.3; done ) &
churn=$!
trap 'kill $churn 2>/dev/null; wait 2>/dev/null; true' EXIT INT TERM
"$cs" experiment "$out/prog" -o "$out/grid.json" --link 8mbit/50ms,32mbit/10ms --cache cold \
    --runs "$runs" --profiled "sample --workload a" -- sample --workload b
python3 - "$out/grid.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
slow = 0
for c in e["cells"]:
    for r in c["runs"]:
        t = r.get("teardown_s") or 0.0
        slow += t > 0.5
        print(f'{c["link"]["label"]:<12} {c["strategy"]:<16} start-up {r["wall_s"] - t:7.3f} s   unmount {t:6.3f} s')
print(f"unmounts over 0.5 s: {slow}")
PY
