#!/bin/sh
# The timeline against measure on the sample program, cold, as root: do the named phases cover
# the wall time, and does the time blocked on I/O agree with measure's cold minus hot?
#
#   bench/timeline-sample.sh [-s SIZE] [-n ROUNDS] [-d STORAGE] [-o DIR]
#
# With -d (hdd, emmc, ...) both run on the emulated device (`--storage`, the sample's directory
# copied onto it), whose reads cost the same at every run, instead of this machine's shared disk.
#
# ROUNDS (default 5) alternate `measure --cache cold,hot --runs 4` with two `timeline` runs of
# workload a, so that both see the same moments of a shared machine. Prints the medians (measure
# cold, hot, cold minus hot; timeline wall and I/O wait), the smallest named share, and for each
# timeline its I/O wait against its own wall time minus measure's hot median.
set -eu
size=medium; rounds=5; out=""; storage=""
while getopts s:n:d:o: opt; do
    case $opt in
        s) size=$OPTARG ;; n) rounds=$OPTARG ;; d) storage=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-s SIZE] [-n ROUNDS] [-d STORAGE] [-o DIR]" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=/var/tmp/coldstart-bench/timeline-$size${storage:+-$storage}
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
rm -f "$out"/m-*.json "$out"/t-*.json
"$cs" sample --size "$size" --seed 1 -o "$out/sample" >/dev/null
on=""
[ -z "$storage" ] || on="--storage $storage --app-dir $out/sample"
i=1
while [ "$i" -le "$rounds" ]; do
    # shellcheck disable=SC2086 # $on is several words
    "$cs" measure $on --cache cold,hot --runs 4 --export-json "$out/m-$i.json" -- \
        "$out/sample/sample" --workload a >/dev/null 2>&1
    for k in 1 2; do
        # shellcheck disable=SC2086
        "$cs" timeline $on --no-functions -o "$out/t-$i-$k.json" -- "$out/sample/sample" --workload a \
            >/dev/null 2>&1
    done
    i=$((i + 1))
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, statistics as st, sys
out = sys.argv[1]
runs = {"cold": [], "hot": []}
for f in glob.glob(f"{out}/m-*.json"):
    for c in json.load(open(f))["commands"]:
        runs[c["label"]] += [r["counters"]["wall_s"] for r in c["runs"] if r.get("excluded") is None]
ms = lambda v: f"{v * 1e3:.1f} ms"
cold, hot = st.median(runs["cold"]), st.median(runs["hot"])
t = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/t-*.json"))]
wall = st.median(x["wall_s"] for x in t)
wait = st.median(x["io_wait_wall_s"] for x in t)
named = min(sum(p["end_s"] - p["start_s"] for p in x["phases"]) / x["wall_s"] for x in t)
print(f"measure: cold {ms(cold)} ({len(runs['cold'])} runs), hot {ms(hot)}, cold minus hot {ms(cold - hot)}")
print(f"timeline: wall {ms(wall)}, I/O wait {ms(wait)} ({len(t)} runs); named phases cover at least {named:.1%}")
print(f"I/O wait / (cold - hot), medians: {wait / (cold - hot):.2f}")
for x in t:
    d = x["wall_s"] - hot
    print(f"  run: wall {ms(x['wall_s'])}, I/O wait {ms(x['io_wait_wall_s'])}, wall - hot {ms(d)}, ratio {x['io_wait_wall_s'] / d:.2f}")
PY
